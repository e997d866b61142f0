"""Decentralized policies (Clusterfile paper sec. 6): first-IOS, random-IOS, hash-IOS.

Each client issues its pieces one at a time in a client-local order and each
I/O node serves arrivals first-come first-served. Because a client's next
arrival is the completion of its previous piece, processing arrivals in
global (time, client) order from a heap of clients is the exact event-driven
simulation, and that pop order list-schedules to the same times.
"""

import numpy as np
from numba import njit

from .groups import group_by
from .heap import pop, push, replace_top
from .rng import below


@njit(cache=True)
def _by_client_node(client, ionode, n_clients, n_ionodes):
    """Units grouped by (client, I/O node), increasing id inside a group."""
    return group_by(client * n_ionodes + ionode, n_clients * n_ionodes)


@njit(cache=True)
def first_ios_sequences(client, n_clients):
    """Each client's units in increasing id (transfers in order, pieces by offset)."""
    return group_by(client, n_clients)


@njit(cache=True)
def random_ios_sequences(client, ionode, n_clients, n_ionodes, state):
    """Each client picks a uniformly random I/O node that still has its pieces, piece by piece."""
    units, gptr = _by_client_node(client, ionode, n_clients, n_ionodes)
    ptr = group_by(client, n_clients)[1]
    seq = np.empty(client.size, dtype=np.int64)
    nodes = np.empty(n_ionodes, dtype=np.int64)
    head = gptr[:-1].copy()
    k = 0
    for c in range(n_clients):
        nn = 0
        for s in range(n_ionodes):
            if gptr[c * n_ionodes + s + 1] > gptr[c * n_ionodes + s]:
                nodes[nn] = s
                nn += 1
        while nn > 0:
            p = below(state, nn)
            g = c * n_ionodes + nodes[p]
            seq[k] = units[head[g]]
            k += 1
            head[g] += 1
            if head[g] == gptr[g + 1]:
                nodes[p] = nodes[nn - 1]
                nn -= 1
    return seq, ptr


@njit(cache=True)
def hash_ios_sequences(client, ionode, n_clients, n_ionodes):
    """Client ``c`` cycles over I/O nodes from ``c mod n_ionodes``, skipping exhausted ones."""
    units, gptr = _by_client_node(client, ionode, n_clients, n_ionodes)
    ptr = group_by(client, n_clients)[1]
    seq = np.empty(client.size, dtype=np.int64)
    head = gptr[:-1].copy()
    nodes = np.empty(n_ionodes, dtype=np.int64)
    k = 0
    for c in range(n_clients):
        nn = 0  # the client's non-exhausted I/O nodes, increasing id
        for s in range(n_ionodes):
            if gptr[c * n_ionodes + s + 1] > gptr[c * n_ionodes + s]:
                nodes[nn] = s
                nn += 1
        if nn == 0:
            continue
        want = c % n_ionodes
        i = 0
        while i < nn and nodes[i] < want:
            i += 1
        while nn > 0:
            if i >= nn:
                i = 0
            s = nodes[i]
            g = c * n_ionodes + s
            seq[k] = units[head[g]]
            k += 1
            head[g] += 1
            if head[g] == gptr[g + 1]:
                for j in range(i, nn - 1):  # keep increasing order; i now names the next node
                    nodes[j] = nodes[j + 1]
                nn -= 1
            else:
                i += 1
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
