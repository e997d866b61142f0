"""The ECF kernel as it was before the array-slot rewrite (commit 931dab9), kept
as the reference the new kernel must equal permutation for permutation.

Doubly linked node lists, a heap that grows; same semantics as
:func:`orchestrator.kernels.greedy.ecf`, about twice as slow at 1M units.
Not cached: it calls the heap in orchestrator/kernels, and only that
folder's cache is dropped when a kernel source changes
(``orchestrator.kernels.refresh_cache``).
"""

import numpy as np
from numba import njit

from orchestrator.kernels.heap import pop, push


@njit
def _node_lists(client, ionode, d, n_clients, n_ionodes):
    """Each node's units sorted by (d, id) as doubly linked lists over 2n slots.

    Node ``x`` is a client for ``x < n_clients`` and I/O node
    ``x - n_clients`` otherwise; its slots are contiguous. Each slot stores
    its unit, the unit's duration, the other endpoint and the unit's slot in
    the other endpoint's list, so the hot loop reads node-local memory
    instead of chasing unit ids through the input columns.
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
    nxt = np.empty(2 * n, dtype=np.int64)
    prv = np.empty(2 * n, dtype=np.int64)
    run_end = np.empty(2 * n, dtype=np.int64)
    head = np.full(nn, -1, dtype=np.int64)
    for x in range(nn):
        lo, hi = cnt[x], cnt[x + 1]
        if hi > lo:
            head[x] = lo
        for p in range(lo, hi):
            nxt[p] = p + 1 if p + 1 < hi else -1
            prv[p] = p - 1 if p > lo else -1
        end = -1
        for p in range(hi - 1, lo - 1, -1):
            if p + 1 < hi and slot_d[p + 1] != slot_d[p]:
                end = p + 1
            run_end[p] = end
    return slot_unit, slot_d, slot_other, slot_twin, nxt, prv, head, run_end


@njit
def _unlink(x, p, nxt, prv, head):
    if prv[p] != -1:
        nxt[prv[p]] = nxt[p]
    else:
        head[x] = nxt[p]
    if nxt[p] != -1:
        prv[nxt[p]] = prv[p]


@njit
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


@njit
def _offer(
    x, cursor, slot_unit, slot_d, slot_other, nxt, run_end, alive, free, n_clients, side_min
):
    """Slot of x's smallest (completion, id) unit among those it owns, or -1.

    x owns a unit when the other endpoint is free no later than x, so
    ``free[x] + d`` is the unit's true completion. The cursor skips units
    that stopped qualifying; within one value of ``free[x]`` they never
    qualify again (free times only grow). ``side_min[k]`` is the earliest
    free time among nodes of side k (0 clients, 1 I/O nodes) that still have
    units: a node earlier than all of the other side owns nothing.

    The cursor unit has the smallest d, but ``free[x] + d`` rounds, so units
    with a slightly larger d may complete at the same float time; those are
    scanned and the lowest id kept, exactly as comparing completions would.
    Units of the cursor's own d are skipped in one jump (``run_end``): they
    come later in (d, id) order, so their ids are larger. Without the jump,
    equal sizes made every offer scan its node's whole list.
    """
    fx = free[x]
    if fx < side_min[1 if x < n_clients else 0]:
        return -1
    p = cursor[x]
    while p != -1:
        if free[slot_other[p]] <= fx:
            break
        p = nxt[p]
    cursor[x] = p
    if p == -1:
        return -1
    best = p
    key = fx + slot_d[p]
    # units of p's duration after it have larger ids (lists are in (d, id) order):
    # jump past them, through slots already taken, which keep pointing forward
    q = run_end[p]
    while q != -1 and not alive[q]:
        q = nxt[q]
    while q != -1 and fx + slot_d[q] == key:
        if slot_unit[q] < slot_unit[best] and free[slot_other[q]] <= fx:
            best = q
        q = nxt[q]
    return best


@njit
def ecf(client, ionode, d, n_clients, n_ionodes):
    """Earliest Completion First; returns the order.

    A unit's completion is ``free[later endpoint] + d``. Each node offers
    the smallest (completion, id) unit it owns (see ``_offer``); every
    pending unit is owned by its later endpoint, so the smallest offer is
    the global minimum. Offers sit in a lazy heap keyed (completion, unit id,
    node): free times only grow, so a stale offer is a lower bound and is
    refreshed when popped. Exact; O(E log E) plus the cursor scans.
    """
    n = d.size
    nn = n_clients + n_ionodes
    slot_unit, slot_d, slot_other, slot_twin, nxt, prv, head, run_end = _node_lists(
        client, ionode, d, n_clients, n_ionodes
    )
    alive = np.ones(2 * n, dtype=np.bool_)
    # heap ids pack (unit, node): ties order by unit id, the node rides along
    shift = 1
    while (1 << shift) < nn:
        shift += 1
    mask = (1 << shift) - 1
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
        p = _offer(
            x, cursor, slot_unit, slot_d, slot_other, nxt, run_end, alive, free, n_clients, side_min
        )
        if p != -1:
            eid = (slot_unit[p] << shift) | x
            size = push(keys, ids, size, free[x] + slot_d[p], eid)
            last[x] = eid
    order = np.empty(n, dtype=np.int64)
    m = 0
    while size > 0:
        key, eid, size = pop(keys, ids, size)
        x = eid & mask
        if last[x] != eid:
            continue  # superseded by a newer offer of x
        p = _offer(
            x, cursor, slot_unit, slot_d, slot_other, nxt, run_end, alive, free, n_clients, side_min
        )
        if p == -1:
            last[x] = -1
            continue
        if slot_unit[p] != eid >> shift or free[x] + slot_d[p] != key:
            eid = (slot_unit[p] << shift) | x
            size = push(keys, ids, size, free[x] + slot_d[p], eid)
            last[x] = eid
            continue
        order[m] = slot_unit[p]
        m += 1
        y = slot_other[p]
        _unlink(x, p, nxt, prv, head)
        _unlink(y, slot_twin[p], nxt, prv, head)
        alive[p] = False
        alive[slot_twin[p]] = False
        free[x] = key
        free[y] = key
        a, b = (x, y) if x < n_clients else (y, x)
        _tree_set(ctree, leaf0, a, key if head[a] != -1 else np.inf)
        _tree_set(stree, leaf0, b - n_clients, key if head[b] != -1 else np.inf)
        side_min[0] = ctree[1]
        side_min[1] = stree[1]
        for z in (x, y):
            cursor[z] = head[z]
            q = _offer(
                z,
                cursor,
                slot_unit,
                slot_d,
                slot_other,
                nxt,
                run_end,
                alive,
                free,
                n_clients,
                side_min,
            )
            if q == -1:
                last[z] = -1
            else:
                eid = (slot_unit[q] << shift) | z
                if size == keys.size:
                    keys = np.concatenate((keys, np.empty(keys.size, dtype=np.float64)))
                    ids = np.concatenate((ids, np.empty(ids.size, dtype=np.int64)))
                size = push(keys, ids, size, free[z] + slot_d[q], eid)
                last[z] = eid
    return order
