"""Greedy centralized policies: Earliest Completion First and FCFS (first fit)."""

import numpy as np
from numba import njit

from .heap import pop, push


@njit(cache=True)
def _sort_by_pair(client, ionode, key, n_ionodes):
    """Unit ids sorted by (pair, key, id); ``grp_end[k]`` ends the pair group of position k."""
    n = client.size
    by_key = np.argsort(key, kind="mergesort")  # stable: equal keys keep id order
    pair = np.empty(n, dtype=np.int64)
    for k in range(n):
        u = by_key[k]
        pair[k] = client[u] * n_ionodes + ionode[u]
    by_pair = np.argsort(pair, kind="mergesort")
    srt = by_key[by_pair]
    grp_end = np.empty(n, dtype=np.int64)
    end = n
    for k in range(n - 1, -1, -1):
        if k < n - 1:
            u, v = srt[k], srt[k + 1]
            if client[u] != client[v] or ionode[u] != ionode[v]:
                end = k + 1
        grp_end[k] = end
    return srt, grp_end


@njit(cache=True)
def _node_lists(client, ionode, d, n_clients, n_ionodes):
    """Each node's units sorted by (d, id) as doubly linked lists over 2n slots.

    Slots ``0..n-1`` hold the client lists, ``n..2n-1`` the I/O-node lists;
    node ``x`` is a client for ``x < n_clients`` and I/O node
    ``x - n_clients`` otherwise.
    """
    n = d.size
    nn = n_clients + n_ionodes
    by_d = np.argsort(d, kind="mergesort")
    cnt = np.zeros(nn + 1, dtype=np.int64)
    for u in range(n):
        cnt[client[u] + 1] += 1
        cnt[n_clients + ionode[u] + 1] += 1
    for x in range(nn):
        cnt[x + 1] += cnt[x]
    fill = cnt[:-1].copy()
    slot_unit = np.empty(2 * n, dtype=np.int64)
    slot_c = np.empty(n, dtype=np.int64)
    slot_s = np.empty(n, dtype=np.int64)
    for k in range(n):
        u = by_d[k]
        a = client[u]
        b = n_clients + ionode[u]
        slot_unit[fill[a]] = u
        slot_c[u] = fill[a]
        fill[a] += 1
        slot_unit[fill[b]] = u
        slot_s[u] = fill[b]
        fill[b] += 1
    # the other endpoint of each slot's unit, stored inline so list scans
    # stream through contiguous memory instead of chasing unit ids
    slot_other = np.empty(2 * n, dtype=np.int32)
    for u in range(n):
        slot_other[slot_c[u]] = n_clients + ionode[u]
        slot_other[slot_s[u]] = client[u]
    nxt = np.empty(2 * n, dtype=np.int64)
    prv = np.empty(2 * n, dtype=np.int64)
    head = np.full(nn, -1, dtype=np.int64)
    for x in range(nn):
        lo, hi = cnt[x], cnt[x + 1]
        if hi > lo:
            head[x] = lo
        for p in range(lo, hi):
            nxt[p] = p + 1 if p + 1 < hi else -1
            prv[p] = p - 1 if p > lo else -1
    return slot_unit, slot_other, slot_c, slot_s, nxt, prv, head


@njit(cache=True)
def _unlink(x, p, nxt, prv, head):
    if prv[p] != -1:
        nxt[prv[p]] = nxt[p]
    else:
        head[x] = nxt[p]
    if nxt[p] != -1:
        prv[nxt[p]] = prv[p]


@njit(cache=True)
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
def _candidate(x, cursor, slot_unit, slot_other, nxt, free, n_clients, side_min):
    """First unit from ``cursor[x]`` on whose other endpoint is free no later than x.

    ``side_min[k]`` is the earliest free time among busy-with-work nodes of
    side k (0 clients, 1 I/O nodes): a node earlier than every node of the
    other side has no qualifying unit, whatever its list holds.
    """
    if free[x] < side_min[1 if x < n_clients else 0]:
        return -1
    p = cursor[x]
    fx = free[x]
    while p != -1:
        if free[slot_other[p]] <= fx:
            break
        p = nxt[p]
    cursor[x] = p
    return -1 if p == -1 else slot_unit[p]


@njit(cache=True)
def _offer(x, cursor, slot_unit, slot_other, nxt, d, free, n_clients, side_min):
    """x's smallest (completion, id) among its qualifying units.

    The cursor unit has the smallest d, but ``free[x] + d`` rounds, so units
    just after it with a larger d may complete at the same float time; scan
    those and keep the lowest id, exactly as comparing completions would.
    """
    v = _candidate(x, cursor, slot_unit, slot_other, nxt, free, n_clients, side_min)
    if v == -1:
        return -1
    key = free[x] + d[v]
    p = nxt[cursor[x]]
    while p != -1:
        w = slot_unit[p]
        if free[x] + d[w] != key:
            break
        if w < v and free[slot_other[p]] <= free[x]:
            v = w
        p = nxt[p]
    return v


@njit(cache=True)
def ecf(client, ionode, d, n_clients, n_ionodes):
    """Earliest Completion First; returns the order.

    A unit's completion is ``free[later endpoint] + d``. Each node ``x``
    offers the smallest-(d, id) unit whose other endpoint is free no later
    than ``x`` (so ``free[x] + d`` is that unit's true completion); every
    pending unit is offered by its later endpoint, so the smallest offer is
    the global minimum. Offers sit in a lazy heap keyed (completion, id):
    free times only grow, so a stale offer is a lower bound and is refreshed
    when popped. Within one value of ``free[x]`` a unit that stops
    qualifying never qualifies again, so the cursor only moves forward; it
    returns to the head when ``x`` is scheduled. Exact, O(E log E) in
    practice.
    """
    n = d.size
    nn = n_clients + n_ionodes
    slot_unit, slot_other, slot_c, slot_s, nxt, prv, head = _node_lists(
        client, ionode, d, n_clients, n_ionodes
    )
    free = np.zeros(nn, dtype=np.float64)
    cursor = head.copy()
    last = np.full(nn, -1, dtype=np.int64)  # id of each node's live heap entry
    # min segment trees over the free times of nodes that still have units
    leaf0 = 1
    while leaf0 < max(n_clients, n_ionodes):
        leaf0 *= 2
    ctree = np.full(2 * leaf0, np.inf)
    stree = np.full(2 * leaf0, np.inf)
    for x in range(nn):
        if head[x] != -1:
            if x < n_clients:
                _tree_set(ctree, leaf0, x, 0.0)
            else:
                _tree_set(stree, leaf0, x - n_clients, 0.0)
    side_min = np.array([ctree[1], stree[1]])
    keys = np.empty(nn + 2 * n, dtype=np.float64)
    ids = np.empty(nn + 2 * n, dtype=np.int64)
    size = 0
    for x in range(nn):
        u = _offer(x, cursor, slot_unit, slot_other, nxt, d, free, n_clients, side_min)
        if u != -1:
            eid = 2 * u + (0 if x < n_clients else 1)
            size = push(keys, ids, size, free[x] + d[u], eid)
            last[x] = eid
    order = np.empty(n, dtype=np.int64)
    m = 0
    while size > 0:
        key, eid, size = pop(keys, ids, size)
        u = eid >> 1
        x = client[u] if (eid & 1) == 0 else n_clients + ionode[u]
        if last[x] != eid:
            continue  # superseded by a newer offer of x
        v = _offer(x, cursor, slot_unit, slot_other, nxt, d, free, n_clients, side_min)
        if v == -1:
            last[x] = -1
            continue
        if v != u or free[x] + d[v] != key:
            eid = 2 * v + (eid & 1)
            size = push(keys, ids, size, free[x] + d[v], eid)
            last[x] = eid
            continue
        order[m] = u
        m += 1
        a = client[u]
        b = n_clients + ionode[u]
        _unlink(a, slot_c[u], nxt, prv, head)
        _unlink(b, slot_s[u], nxt, prv, head)
        free[a] = key
        free[b] = key
        _tree_set(ctree, leaf0, a, key if head[a] != -1 else np.inf)
        _tree_set(stree, leaf0, b - n_clients, key if head[b] != -1 else np.inf)
        side_min[0] = ctree[1]
        side_min[1] = stree[1]
        for y in (a, b):
            cursor[y] = head[y]
            w = _offer(y, cursor, slot_unit, slot_other, nxt, d, free, n_clients, side_min)
            if w == -1:
                last[y] = -1
            else:
                eid = 2 * w + (0 if y < n_clients else 1)
                if size == keys.size:
                    keys = np.concatenate((keys, np.empty(keys.size, dtype=np.float64)))
                    ids = np.concatenate((ids, np.empty(ids.size, dtype=np.int64)))
                size = push(keys, ids, size, free[y] + d[w], eid)
                last[y] = eid
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
