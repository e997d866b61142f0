"""Birkhoff–von Neumann decomposition of a client × I/O-node load matrix (``split-opt``).

The preemptive open shop reaches the lower bound ``L = max(line sums)``: pad
the load matrix to a *regular* one (every row and column sums to ``L``),
then repeatedly take a perfect matching on the support and run it for the
smallest remaining entry on it. Every phase zeroes at least one entry, so
there are at most ``E + 2n`` phases.

Why a Numba kernel and not scipy's ``maximum_bipartite_matching``: scipy
solves each matching from scratch (Hopcroft–Karp, ``O(E sqrt(n))``), so the
decomposition would cost ``O((E + n) E sqrt(n))`` and, worse, unrelated
matchings in consecutive phases cut every transfer at every phase. Here the
matching is *kept* from phase to phase: only the rows whose edge ran out are
re-matched, each by one augmenting-path search over the remaining support.
A pair that stays matched across phases is one piece, so pieces stay few,
and a phase costs ``O(n)`` plus the (usually short) path searches.

All quantities are int64 (bytes, or byte-equivalents), so the decomposition
is exact: no float drift in the phase lengths.
"""

import numpy as np
from numba import njit

from .groups import group_by


@njit(cache=True)
def regularize(row, col, w, n):
    """Pad the square ``n × n`` matrix given by edges to a regular one.

    Returns ``(row, col, w, L)``: the input edges first, then at most
    ``2n - 1`` dummy edges (north-west corner over the row and column
    deficits), possibly parallel to real ones.
    """
    rs = np.zeros(n, dtype=np.int64)
    cs = np.zeros(n, dtype=np.int64)
    for e in range(w.size):
        rs[row[e]] += w[e]
        cs[col[e]] += w[e]
    lim = max(rs.max(), cs.max())
    dr = lim - rs
    dc = lim - cs
    extra_r = np.empty(2 * n, dtype=np.int64)
    extra_c = np.empty(2 * n, dtype=np.int64)
    extra_w = np.empty(2 * n, dtype=np.int64)
    k = 0
    i = 0
    j = 0
    while True:
        while i < n and dr[i] == 0:
            i += 1
        while j < n and dc[j] == 0:
            j += 1
        if i == n or j == n:
            break
        x = min(dr[i], dc[j])
        extra_r[k] = i
        extra_c[k] = j
        extra_w[k] = x
        dr[i] -= x
        dc[j] -= x
        k += 1
    m = w.size
    out_r = np.empty(m + k, dtype=np.int64)
    out_c = np.empty(m + k, dtype=np.int64)
    out_w = np.empty(m + k, dtype=np.int64)
    out_r[:m] = row
    out_c[:m] = col
    out_w[:m] = w
    out_r[m:] = extra_r[:k]
    out_c[m:] = extra_c[:k]
    out_w[m:] = extra_w[:k]
    return out_r, out_c, out_w, lim


@njit(cache=True)
def _augment(
    r0, row, col, rem, ptr, adj, mate_r, mate_c, start, t, n_real, stamp, seen, dist, par, dq, out
):
    """Match free row ``r0`` along the alternating path that cuts the fewest pieces.

    A 0-1 breadth-first search over rows: passing through column ``y``
    moves its matched edge to another row, which cuts that edge's running
    piece (cost 1) unless the edge is a dummy or has not run yet (cost 0).
    Edges that leave the matching emit their pieces.
    """
    size = dq.size
    head = 0
    tail = 1
    dq[0] = r0
    seen[r0] = stamp
    dist[r0] = 0
    best = -1
    best_cost = 1 << 62
    while head != tail:
        x = dq[head]
        head = (head + 1) % size
        dx = dist[x]
        if dx >= best_cost:
            continue
        for k in range(ptr[x], ptr[x + 1]):
            e = adj[k]
            if rem[e] == 0 or e == mate_r[x]:
                continue
            y = col[e]
            m = mate_c[y]
            if m < 0:
                if dx < best_cost:
                    best_cost = dx
                    best = y
                    par[y] = e
                continue
            cost = 1 if (m < n_real and start[m] < t) else 0
            x2 = row[m]
            if seen[x2] == stamp and dist[x2] <= dx + cost:
                continue
            seen[x2] = stamp
            dist[x2] = dx + cost
            par[y] = e
            if cost == 0:
                head = (head - 1) % size
                dq[head] = x2
            else:
                dq[tail] = x2
                tail = (tail + 1) % size
    if best < 0:
        return False
    y = best
    while True:
        e = par[y]
        x = row[e]
        old = mate_r[x]
        mate_r[x] = e
        mate_c[y] = e
        start[e] = t
        if old < 0:
            break
        _emit(old, start, t, out)
        y = col[old]
    return True


@njit(cache=True)
def _emit(e, start, t, out):
    """Close the running piece of edge ``e`` at time ``t`` (append to ``out``)."""
    if start[e] >= 0 and t > start[e]:
        k = out[0][0]
        if k + 1 >= out[1].size:
            grow = max(16, 2 * out[1].size)
            for a in range(1, 4):
                new = np.empty(grow, dtype=np.int64)
                new[:k] = out[a][:k]
                out[a] = new
        out[1][k] = e
        out[2][k] = start[e]
        out[3][k] = t
        out[0][0] = k + 1
    start[e] = -1


@njit(cache=True)
def bvn(row, col, w, n, lim, n_real):
    """Peel perfect matchings off the regular matrix of edges ``(row, col, w)``.

    Returns ``(edge, t0, t1, phases)``: every maximal run of an edge in the
    matching as one piece ``[t0, t1)`` of the time line ``0 .. lim`` (the
    edge's share is consumed at rate 1 while it is matched), and the number
    of phases. Edges ``>= n_real`` are padding: cutting their runs is free,
    so re-matching prefers to move them. Raises ``ValueError`` if the
    matrix is not regular.
    """
    m = w.size
    adj, ptr = group_by(row, n)  # each row's edges: adj[ptr[r]:ptr[r + 1]]
    rem = w.copy()
    mate_r = np.full(n, -1, dtype=np.int64)
    mate_c = np.full(n, -1, dtype=np.int64)
    start = np.full(m, -1, dtype=np.int64)
    seen = np.full(n, -1, dtype=np.int64)
    dist = np.zeros(n, dtype=np.int64)
    par = np.empty(n, dtype=np.int64)
    dq = np.empty(m + n + 2, dtype=np.int64)
    cap = m + 4 * n + 16
    out = [np.zeros(1, dtype=np.int64)] + [np.empty(cap, dtype=np.int64) for _ in range(3)]
    stamp = 0
    t = 0
    phases = 0
    if lim == 0:
        return out[1][:0], out[2][:0], out[3][:0], 0
    for r in range(n):
        if not _augment(
            r,
            row,
            col,
            rem,
            ptr,
            adj,
            mate_r,
            mate_c,
            start,
            t,
            n_real,
            stamp,
            seen,
            dist,
            par,
            dq,
            out,
        ):
            raise ValueError("load matrix is not regular: no perfect matching")
        stamp += 1
    while t < lim:
        step = lim - t
        for r in range(n):
            if rem[mate_r[r]] < step:
                step = rem[mate_r[r]]
        t += step
        phases += 1
        for r in range(n):
            e = mate_r[r]
            rem[e] -= step
            if rem[e] == 0:
                _emit(e, start, t, out)
                mate_r[r] = -1
                mate_c[col[e]] = -1
        if t == lim:
            break
        for r in range(n):
            if mate_r[r] < 0:
                ok = _augment(
                    r,
                    row,
                    col,
                    rem,
                    ptr,
                    adj,
                    mate_r,
                    mate_c,
                    start,
                    t,
                    n_real,
                    stamp,
                    seen,
                    dist,
                    par,
                    dq,
                    out,
                )
                stamp += 1
                if not ok:
                    raise ValueError("load matrix is not regular: no perfect matching")
    k = out[0][0]
    return out[1][:k], out[2][:k], out[3][:k], phases


@njit(cache=True)
def pair_pieces_to_units(p_edge, p_t0, p_t1, tr_ptr, tr_id, eff):
    """Cut each pair's pieces (sorted by edge, then ``t0``) at its transfers' boundaries.

    A pair's transfers ``tr_id[tr_ptr[e]:tr_ptr[e+1]]`` (in index order) form
    one stream of effective sizes ``eff``; its pieces consume that stream in
    time order. Returns ``(parent, lo, hi, key)``: the transfer, the effective
    range ``[lo, hi)`` within it, and the ideal start time of the unit.
    """
    cap = p_edge.size + tr_id.size
    parent = np.empty(cap, dtype=np.int64)
    lo = np.empty(cap, dtype=np.int64)
    hi = np.empty(cap, dtype=np.int64)
    key = np.empty(cap, dtype=np.int64)
    k = 0
    cur_edge = -1
    j = 0  # index into the pair's transfers
    used = 0  # effective bytes of transfer j already consumed
    for p in range(p_edge.size):
        e = p_edge[p]
        if e != cur_edge:
            cur_edge = e
            j = tr_ptr[e]
            used = 0
        t = p_t0[p]
        left = p_t1[p] - p_t0[p]
        while left > 0:
            i = tr_id[j]
            take = min(left, eff[i] - used)
            parent[k] = i
            lo[k] = used
            hi[k] = used + take
            key[k] = t
            k += 1
            used += take
            t += take
            left -= take
            if used == eff[i]:
                j += 1
                used = 0
    return parent[:k], lo[:k], hi[:k], key[:k]


@njit(cache=True)
def merge_pieces(parent, rank, client, ionode, n_clients, n_ionodes):
    """Which pieces to merge into the piece of the same transfer before them.

    Pieces come sorted by (transfer, offset); ``rank`` is each piece's
    position in the plan order. A piece merges into the one before it when
    nothing of the same client or I/O node runs between them, so merging
    changes no start time and saves one piece's latency and overhead.
    Returns ``keep`` (bool per piece).
    """
    n = parent.size
    by_rank = np.empty(n, dtype=np.int64)
    for u in range(n):
        by_rank[rank[u]] = u
    cnext = np.full(n, -1, dtype=np.int64)
    snext = np.full(n, -1, dtype=np.int64)
    clast = np.full(n_clients, -1, dtype=np.int64)
    slast = np.full(n_ionodes, -1, dtype=np.int64)
    for k in range(n):
        u = by_rank[k]
        if clast[client[u]] >= 0:
            cnext[clast[client[u]]] = u
        if slast[ionode[u]] >= 0:
            snext[slast[ionode[u]]] = u
        clast[client[u]] = u
        slast[ionode[u]] = u
    keep = np.ones(n, dtype=np.bool_)
    for u in range(1, n):
        if parent[u] == parent[u - 1] and cnext[u - 1] == u and snext[u - 1] == u:
            keep[u] = False
    return keep


@njit(cache=True)
def fill_slots(parent, w, nbytes, lat_eq, cut_eq, min_piece, align):
    """Put each transfer's bytes into its time slots so that no piece outlasts its slot.

    Slots come sorted by (transfer, start); ``w`` is their length in
    byte-equivalents. A transfer that fits one slot whole (``w - lat_eq >=
    nbytes``) takes the first such slot, uncut. Otherwise its bytes fill
    the slots in order, each holding at most ``w - cut_eq`` bytes (a cut
    piece pays latency and piece overhead), rounded down to a multiple of
    ``align``; slots that would hold less than ``min_piece`` stay empty
    (only a transfer's last piece may be smaller: it is what is left).
    Returns ``(bytes per slot, shortfall per transfer)``: a transfer whose
    slots cannot hold it puts the rest into its last used slot, which then
    runs over, and reports by how much.
    """
    n = parent.size
    out = np.zeros(n, dtype=np.int64)
    short = np.zeros(nbytes.size, dtype=np.int64)
    a = 0
    while a < n:
        i = parent[a]
        b = a
        while b < n and parent[b] == i:
            b += 1
        whole = -1
        for j in range(a, b):
            if w[j] - lat_eq >= nbytes[i]:
                whole = j
                break
        if whole >= 0:
            out[whole] = nbytes[i]
        else:
            left = nbytes[i]
            last = -1
            for j in range(a, b):
                if left == 0:
                    break
                cap = w[j] - cut_eq
                if left <= cap:
                    take = left
                else:
                    take = (cap // align) * align
                if take < min_piece and take < left:  # only a last piece may be smaller
                    continue
                out[j] = take
                left -= take
                last = j
            if left > 0:
                short[i] = left
                if last < 0:  # no usable slot: the longest one takes the transfer whole
                    last = a
                    for j in range(a, b):
                        if w[j] > w[last]:
                            last = j
                out[last] += left
        a = b
    return out, short
