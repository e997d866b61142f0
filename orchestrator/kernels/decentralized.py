"""Decentralized policies (Clusterfile paper sec. 6): first-IOS, random-IOS, hash-IOS.

Each client issues its pieces one at a time in a client-local order and each
I/O node serves arrivals first-come first-served. Because a client's next
arrival is the completion of its previous piece, processing arrivals in
global (time, client) order from a heap of clients is the exact event-driven
simulation, and that pop order list-schedules to the same times.
"""

import numpy as np
from numba import njit

from .groups import group_by, group_sorted, widest
from .heap import pop, push, replace_top
from .rng import below


@njit(cache=True)
def _client_runs(client, ionode, n_clients, n_ionodes):
    """Units by client, then I/O node, then id: (members, client bounds).

    Each client's segment is sorted stably by I/O node, so it is a run of
    queues, one per I/O node the client talks to. Memory O(units), not
    O(clients x I/O nodes).
    """
    n = client.size
    if n_clients * n_ionodes <= 4 * n + (1 << 20):
        # dense enough: one counting sort on the (client, I/O node) pair is fastest
        members = group_by(client * n_ionodes + ionode, n_clients * n_ionodes)[0]
        return members, group_by(client, n_clients)[1]
    return group_sorted(client, n_clients, ionode)


@njit(cache=True)
def _queues(members, lo, hi, ionode, node, head, end):
    """Split ``members[lo:hi]`` into per-I/O-node queues; returns how many."""
    nq = 0
    for k in range(lo, hi):
        if k == lo or ionode[members[k]] != ionode[members[k - 1]]:
            node[nq] = ionode[members[k]]
            head[nq] = k
            nq += 1
        end[nq - 1] = k + 1
    return nq


@njit(cache=True)
def first_ios_sequences(client, n_clients):
    """Each client's units in increasing id (transfers in order, pieces by offset)."""
    return group_by(client, n_clients)


@njit(cache=True)
def random_ios_sequences(client, ionode, n_clients, n_ionodes, state):
    """Each client picks a uniformly random I/O node that still has its pieces, piece by piece."""
    members, ptr = _client_runs(client, ionode, n_clients, n_ionodes)
    width = widest(ptr)
    node = np.empty(width, dtype=np.int64)
    head = np.empty(width, dtype=np.int64)
    end = np.empty(width, dtype=np.int64)
    live = np.empty(width, dtype=np.int64)  # swap-remove list of non-empty queues
    seq = np.empty(client.size, dtype=np.int64)
    k = 0
    for c in range(n_clients):
        nn = _queues(members, ptr[c], ptr[c + 1], ionode, node, head, end)
        for q in range(nn):
            live[q] = q
        while nn > 0:
            p = below(state, nn)
            q = live[p]
            seq[k] = members[head[q]]
            k += 1
            head[q] += 1
            if head[q] == end[q]:
                live[p] = live[nn - 1]
                nn -= 1
    return seq, ptr


@njit(cache=True)
def hash_ios_sequences(client, ionode, n_clients, n_ionodes):
    """Client ``c`` cycles over I/O nodes from ``c mod n_ionodes``, skipping exhausted ones."""
    members, ptr = _client_runs(client, ionode, n_clients, n_ionodes)
    width = widest(ptr)
    node = np.empty(width, dtype=np.int64)
    head = np.empty(width, dtype=np.int64)
    end = np.empty(width, dtype=np.int64)
    nxt = np.empty(width, dtype=np.int64)  # circular list of non-empty queues, by node id
    prv = np.empty(width, dtype=np.int64)
    seq = np.empty(client.size, dtype=np.int64)
    k = 0
    for c in range(n_clients):
        nn = _queues(members, ptr[c], ptr[c + 1], ionode, node, head, end)
        if nn == 0:
            continue
        for q in range(nn):
            nxt[q] = (q + 1) % nn
            prv[q] = (q - 1) % nn
        want = c % n_ionodes
        q = 0
        while q < nn and node[q] < want:
            q += 1
        if q == nn:
            q = 0
        while nn > 0:
            seq[k] = members[head[q]]
            k += 1
            head[q] += 1
            after = nxt[q]
            if head[q] == end[q]:
                nxt[prv[q]] = nxt[q]
                prv[nxt[q]] = prv[q]
                nn -= 1
            q = after
    return seq, ptr


@njit(cache=True)
def serve_fifo(seq, ptr, ionode, d, n_clients, n_ionodes):
    """Event-driven run of per-client sequences against FIFO I/O nodes; returns the order."""
    n = d.size
    keys = np.empty(n_clients, dtype=np.float64)
    ids = np.empty(n_clients, dtype=np.int64)
    size = 0
    cursor = ptr[:-1].copy()
    for c in range(n_clients):
        if ptr[c + 1] > ptr[c]:
            size = push(keys, ids, size, 0.0, c)
    sfree = np.zeros(n_ionodes, dtype=np.float64)
    order = np.empty(n, dtype=np.int64)
    m = 0
    while size > 0:
        arrival = keys[0]
        c = ids[0]
        u = seq[cursor[c]]
        cursor[c] += 1
        s = ionode[u]
        t = arrival if arrival > sfree[s] else sfree[s]
        sfree[s] = t + d[u]
        order[m] = u
        m += 1
        if cursor[c] < ptr[c + 1]:
            replace_top(keys, ids, size, t + d[u], c)  # the client's next arrival
        else:
            _, _, size = pop(keys, ids, size)
    return order
