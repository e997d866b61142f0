"""Greedy centralized policies: Earliest Completion First and FCFS (first fit)."""

import numpy as np
from numba import njit

from .heap import pop, push, replace_top


@njit(cache=True)
def _argsort_d(d):
    """Unit ids in (d, id) order: ``np.argsort(d, kind="mergesort")``, by LSD radix.

    Each duration becomes a 64-bit key that orders as the float does
    (``-0.0`` counted as ``0.0``); 11-bit digits, skipping digits every key
    shares. Stable, so equal durations keep increasing ids. With a NaN it
    falls back to the merge sort, whose order it then is by definition.
    """
    n = d.size
    for i in range(n):
        if d[i] != d[i]:
            return np.argsort(d, kind="mergesort")
    keys = np.empty(n, dtype=np.uint64)
    sign = np.uint64(1) << np.uint64(63)
    cell = np.empty(1, dtype=np.float64)
    bits = cell.view(np.uint64)
    for i in range(n):
        v = d[i]
        cell[0] = v if v != 0.0 else 0.0
        b = bits[0]
        keys[i] = ~b if b & sign else b | sign
    width = 11
    nb = 1 << width
    npass = (64 + width - 1) // width
    digit = np.uint64(nb - 1)
    hist = np.zeros((npass, nb), dtype=np.int64)
    for i in range(n):
        k = keys[i]
        for j in range(npass):
            hist[j, (k >> np.uint64(j * width)) & digit] += 1
    idx = np.arange(n)
    keys2 = np.empty(n, dtype=np.uint64)
    idx2 = np.empty(n, dtype=np.int64)
    pos = np.empty(nb, dtype=np.int64)
    for j in range(npass):
        h = hist[j]
        if h.max() == n:  # every key has the same digit here
            continue
        acc = 0
        for b in range(nb):
            pos[b] = acc
            acc += h[b]
        shift = np.uint64(j * width)
        for i in range(n):
            k = keys[i]
            b = (k >> shift) & digit
            q = pos[b]
            pos[b] = q + 1
            keys2[q] = k
            idx2[q] = idx[i]
        keys, keys2 = keys2, keys
        idx, idx2 = idx2, idx
    return idx


@njit(cache=True)
def _node_slots(client, ionode, d, n_clients, n_ionodes):
    """Each node's units sorted by (d, id) in contiguous slots ``lo[x]:lo[x + 1]``.

    Node ``x`` is a client for ``x < n_clients`` and I/O node
    ``x - n_clients`` otherwise. Each slot stores its unit, the unit's
    duration, the other endpoint and the unit's slot in the other endpoint's
    list, so the hot loop reads node-local memory instead of chasing unit ids
    through the input columns. ``run_end[p]`` is the first slot after ``p``
    of a larger duration (``lo[x + 1]`` if none).
    """
    n = d.size
    nn = n_clients + n_ionodes
    by_d = _argsort_d(d)
    lo = np.zeros(nn + 1, dtype=np.int64)
    for u in range(n):
        lo[client[u] + 1] += 1
        lo[n_clients + ionode[u] + 1] += 1
    for x in range(nn):
        lo[x + 1] += lo[x]
    fill = lo[:-1].copy()
    slot_unit = np.empty(2 * n, dtype=np.int64)
    slot_d = np.empty(2 * n, dtype=np.float64)
    slot_other = np.empty(2 * n, dtype=np.int64)
    slot_twin = np.empty(2 * n, dtype=np.int64)
    for k in range(n):
        u = by_d[k]
        a = client[u]
        b = n_clients + ionode[u]
        pa = fill[a]
        pb = fill[b]
        fill[a] += 1
        fill[b] += 1
        slot_unit[pa] = u
        slot_unit[pb] = u
        slot_d[pa] = d[u]
        slot_d[pb] = d[u]
        slot_other[pa] = b
        slot_other[pb] = a
        slot_twin[pa] = pb
        slot_twin[pb] = pa
    run_end = np.empty(2 * n, dtype=np.int64)
    for x in range(nn):
        end = lo[x + 1]
        for p in range(lo[x + 1] - 1, lo[x] - 1, -1):
            if p + 1 < lo[x + 1] and slot_d[p + 1] != slot_d[p]:
                end = p + 1
            run_end[p] = end
    return lo, slot_unit, slot_d, slot_other, slot_twin, run_end


@njit(cache=True, inline="always")
def _tree_set(tree, leaf0, i, value):
    """Set leaf ``i`` of a min segment tree and fix its ancestors."""
    j = leaf0 + i
    tree[j] = value
    j >>= 1
    while j >= 1:
        a = tree[2 * j]
        b = tree[2 * j + 1]
        tree[j] = a if a < b else b
        j >>= 1


@njit(cache=True)
def ecf(client, ionode, d, n_clients, n_ionodes):
    """Earliest Completion First; returns the order.

    A unit's completion is ``free[later endpoint] + d``. Each node offers
    the smallest (completion, id) unit it owns; every pending unit is owned
    by its later endpoint, so the smallest offer is the global minimum.
    Offers sit in a lazy heap keyed (completion, unit id, node): free times
    only grow, so a stale offer is a lower bound and is refreshed in place
    when it reaches the top. Exact; O(E log E) plus the cursor scans.

    An offer: x owns a unit when the other endpoint is free no later than x,
    so ``free[x] + d`` is its true completion. Each node's units are one
    array of slots in (d, id) order; a taken slot stays where it is and its
    other endpoint becomes the extra node ``nn``, whose free time is NaN, so
    it never qualifies and a scan is a plain forward walk. The cursor skips
    slots that stopped qualifying; within one value of ``free[x]`` they never
    qualify again (free times only grow). ``side_min[k]`` is the earliest
    free time among nodes of side k (0 clients, 1 I/O nodes) that still have
    units: a node earlier than all of the other side owns nothing. The
    cursor unit has the smallest d, but ``free[x] + d`` rounds, so units with
    a slightly larger d may complete at the same float time; those are
    scanned and the lowest id kept, exactly as comparing completions would.
    Units of the cursor's own d are skipped in one jump (``run_end``): they
    come later in (d, id) order, so their ids are larger. Without the jump,
    equal sizes made every offer scan its node's whole list.

    Speed (1M units): the offer is written once, inline, and no array in the
    loop is re-bound or passed to a function that is not inlined, which
    keeps Numba's atomic reference counting out of the loop (it took a
    third of the time); the heap holds at most one entry per node plus one
    per taken unit (a refresh replaces the top), so it never grows.
    """
    n = d.size
    nn = n_clients + n_ionodes
    lo, slot_unit, slot_d, slot_other, slot_twin, run_end = _node_slots(
        client, ionode, d, n_clients, n_ionodes
    )
    hi = lo[1:].copy()
    head = lo[:-1].copy()  # first slot not taken
    left = hi - head  # units not taken
    # heap ids pack (unit, node): ties order by unit id, the node rides along
    shift = 1
    while (1 << shift) < nn:
        shift += 1
    mask = (1 << shift) - 1
    free = np.zeros(nn + 1, dtype=np.float64)
    free[nn] = np.nan  # the other endpoint of taken slots: never free
    cursor = head.copy()
    last = np.full(nn, -1, dtype=np.int64)  # id of each node's live heap entry
    # min segment trees over the free times of nodes that still have units
    leaf0 = 1
    while leaf0 < max(n_clients, n_ionodes):
        leaf0 *= 2
    ctree = np.full(2 * leaf0, np.inf)
    stree = np.full(2 * leaf0, np.inf)
    for x in range(nn):
        if left[x] > 0:
            if x < n_clients:
                _tree_set(ctree, leaf0, x, 0.0)
            else:
                _tree_set(stree, leaf0, x - n_clients, 0.0)
    side_min = np.array([ctree[1], stree[1]])
    keys = np.empty(nn + n, dtype=np.float64)
    ids = np.empty(nn + n, dtype=np.int64)
    size = 0
    order = np.empty(n, dtype=np.int64)
    m = 0
    # what the one offer below is for: first every node's initial offer (PUSH),
    # then the top of the heap (TOP) and, after x takes a unit, x's next offer
    # in place of the top (AGAIN) and y's (PUSH)
    PUSH, TOP, AGAIN = 0, 1, 2
    init = 0
    x = -1
    y = -1
    mode = PUSH
    while True:
        if init < nn:
            z = init
            init += 1
            mode = PUSH
        elif mode == AGAIN:
            z = x
        elif mode == TOP and y != -1:
            z = y
            y = -1
            mode = PUSH
        else:
            if size == 0:
                break
            x = ids[0] & mask
            if last[x] != ids[0]:
                size = pop(keys, ids, size)[2]  # superseded by a newer offer of x
                continue
            z = x
            mode = TOP
        # z's offer (see above): the first slot it owns, then equal completions
        fz = free[z]
        q = -1
        if fz >= side_min[1 if z < n_clients else 0]:
            p = cursor[z]
            end = hi[z]
            while p < end and not free[slot_other[p]] <= fz:
                p += 1
            cursor[z] = p
            if p < end:
                q = p
                key = fz + slot_d[p]
                r = p + 1
                if r < end and slot_d[r] == slot_d[p]:
                    r = run_end[p]
                while r < end and fz + slot_d[r] == key:
                    if slot_unit[r] < slot_unit[q] and free[slot_other[r]] <= fz:
                        q = r
                    r += 1
        if q == -1:
            last[z] = -1
            if mode != PUSH:
                size = pop(keys, ids, size)[2]
            if mode == AGAIN:
                mode = TOP
            continue
        eid = (slot_unit[q] << shift) | z
        key = fz + slot_d[q]
        if mode == PUSH:
            size = push(keys, ids, size, key, eid)
            last[z] = eid
            continue
        if mode == AGAIN or eid != ids[0] or key != keys[0]:
            replace_top(keys, ids, size, key, eid)
            last[z] = eid
            if mode == AGAIN:
                mode = TOP
            continue
        # the top is z's true offer, the smallest of all: z takes unit q
        x = z
        order[m] = slot_unit[q]
        m += 1
        y = slot_other[q]
        slot_other[q] = nn
        slot_other[slot_twin[q]] = nn
        left[x] -= 1
        left[y] -= 1
        free[x] = key
        free[y] = key
        a, b = (x, y) if x < n_clients else (y, x)
        _tree_set(ctree, leaf0, a, key if left[a] > 0 else np.inf)
        _tree_set(stree, leaf0, b - n_clients, key if left[b] > 0 else np.inf)
        side_min[0] = ctree[1]
        side_min[1] = stree[1]
        for z in (x, y):
            h = head[z]
            while h < hi[z] and slot_other[h] == nn:
                h += 1
            head[z] = h
            cursor[z] = h
        mode = AGAIN
    return order


@njit(cache=True)
def _hash_slot(key, mask):
    h = (np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(20)
    return np.int64(h & np.uint64(mask))


@njit(cache=True)
def _used(table, key, mask):
    i = _hash_slot(key, mask)
    while table[i] != -1:
        if table[i] == key:
            return True
        i = (i + 1) & mask
    return False


@njit(cache=True)
def _mark(table, key, mask):
    i = _hash_slot(key, mask)
    while table[i] != -1:
        i = (i + 1) & mask
    table[i] = key


@njit(cache=True)
def fcfs(client, ionode, n_clients, n_ionodes):
    """Jain's FCFS phases as first-fit colouring in index order; returns (order, phases).

    Unit ``u`` joins the lowest phase in which neither its client nor its I/O
    node was taken by a lower-index unit, which is what scanning the pending
    units phase after phase produces. Used (node, phase) pairs sit in an
    open-addressing hash set, so memory stays O(units) whatever the degrees.
    """
    n = client.size
    cap = 1
    while cap < 4 * n:
        cap *= 2
    mask = cap - 1
    table = np.full(cap, -1, dtype=np.int64)
    stride = n + 1  # phases are < n, so (node, phase) -> node*stride + phase is unique
    low = np.zeros(n_clients + n_ionodes, dtype=np.int64)
    phase = np.empty(n, dtype=np.int64)
    nphases = 0
    for u in range(n):
        a = client[u]
        b = n_clients + ionode[u]
        p = low[a] if low[a] > low[b] else low[b]
        while _used(table, a * stride + p, mask) or _used(table, b * stride + p, mask):
            p += 1
        phase[u] = p
        _mark(table, a * stride + p, mask)
        _mark(table, b * stride + p, mask)
        for x in (a, b):
            while _used(table, x * stride + low[x], mask):
                low[x] += 1
        if p + 1 > nphases:
            nphases = p + 1
    order = np.argsort(phase, kind="mergesort")
    return order, nphases
