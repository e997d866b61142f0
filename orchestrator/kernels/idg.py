"""Replica sets and writer assignment for partitioned meshes (IDG paper, Fig. 4)."""

import numpy as np
from numba import njit

from .rng import below


@njit(cache=True)
def _sort_small(a, n):
    """Insertion sort of ``a[:n]`` in place: replica lists are a handful of ids."""
    for i in range(1, n):
        x = a[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True)
def _push(out, m, own, others, no):
    """Append one row's set (own partition, then the sorted others), growing ``out`` by doubling."""
    if m + 1 + no > out.size:
        bigger = np.empty(2 * out.size + 1 + no, dtype=np.int64)
        bigger[:m] = out[:m]
        out = bigger
    out[m] = own
    _sort_small(others, no)
    for i in range(no):
        out[m + 1 + i] = others[i]
    return out, m + 1 + no


@njit(cache=True)
def replica_sets(xadj, adjncy, part, n_parts, halo):
    """Partitions holding a copy of each node: own first, then the others ascending.

    A node is replicated on every partition owning a node within ``halo``
    graph hops. Returns CSR ``(ptr, members)``. One pass over the adjacency
    for ``halo == 1``; a bounded breadth-first search per node otherwise.
    """
    n = part.size
    mark = np.full(n_parts, -1, dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    out = np.empty(n + n // 4 + 16, dtype=np.int64)
    others = np.empty(n_parts, dtype=np.int64)
    m = 0
    if halo == 1:
        for v in range(n):
            own = part[v]
            mark[own] = v
            no = 0
            for k in range(xadj[v], xadj[v + 1]):
                p = part[adjncy[k]]
                if mark[p] != v:
                    mark[p] = v
                    others[no] = p
                    no += 1
            out, m = _push(out, m, own, others, no)
            ptr[v + 1] = m
        return ptr, out[:m].copy()
    seen = np.full(n, -1, dtype=np.int64)
    frontier = np.empty(n, dtype=np.int64)
    nxt = np.empty(n, dtype=np.int64)
    for v in range(n):
        own = part[v]
        mark[own] = v
        seen[v] = v
        frontier[0] = v
        nf = 1
        no = 0
        for _ in range(halo):
            nn = 0
            for i in range(nf):
                u = frontier[i]
                for k in range(xadj[u], xadj[u + 1]):
                    w = adjncy[k]
                    if seen[w] != v:
                        seen[w] = v
                        nxt[nn] = w
                        nn += 1
                        p = part[w]
                        if mark[p] != v:
                            mark[p] = v
                            others[no] = p
                            no += 1
            frontier[:nn] = nxt[:nn]
            nf = nn
        out, m = _push(out, m, own, others, no)
        ptr[v + 1] = m
    return ptr, out[:m].copy()


@njit(cache=True)
def _holds(ptr, members, v, p):
    for k in range(ptr[v], ptr[v + 1]):
        if members[k] == p:
            return True
    return False


@njit(cache=True)
def idg(ptr, members):
    """Interval Data Grouping: a shared node takes the previous node's assigned writer if it
    holds a copy, else the next node's partition if it holds one, else its own partition."""
    n = ptr.size - 1
    writer = np.empty(n, dtype=np.int64)
    for v in range(n):
        own = members[ptr[v]]
        writer[v] = own
        if ptr[v + 1] - ptr[v] == 1:
            continue
        if v > 0 and _holds(ptr, members, v, writer[v - 1]):
            writer[v] = writer[v - 1]
        elif v + 1 < n and _holds(ptr, members, v, members[ptr[v + 1]]):
            writer[v] = members[ptr[v + 1]]
    return writer


@njit(cache=True)
def first(ptr, members):
    """The smallest partition id holding each node."""
    n = ptr.size - 1
    writer = np.empty(n, dtype=np.int64)
    for v in range(n):
        best = members[ptr[v]]
        for k in range(ptr[v] + 1, ptr[v + 1]):
            if members[k] < best:
                best = members[k]
        writer[v] = best
    return writer


@njit(cache=True)
def uniform(ptr, members, state):
    """A uniformly random holder of each node (splitmix64 stream, node order)."""
    n = ptr.size - 1
    writer = np.empty(n, dtype=np.int64)
    for v in range(n):
        k = ptr[v + 1] - ptr[v]
        pick = np.int64(below(state, k)) if k > 1 else np.int64(0)
        writer[v] = members[ptr[v] + pick]
    return writer


@njit(cache=True)
def intervals(writer, n_parts):
    """Maximal runs of equal writer, counted per writer."""
    runs = np.zeros(n_parts, dtype=np.int64)
    for v in range(writer.size):
        if v == 0 or writer[v] != writer[v - 1]:
            runs[writer[v]] += 1
    return runs
