"""Mesh graph kernels: the Kuhn lattice's nodal graph, and sorting CSR rows.

Splitting every hexahedron of a structured grid into the six tetrahedra
around its main diagonal joins node ``(i, j, k)`` to the nodes
``(i, j, k) ± e`` for the seven nonzero 0/1 vectors ``e``: a 14-neighbour
stencil, built here without materializing the cells (at 10 million nodes the
cells alone would take 2 GB).
"""

import numpy as np
from numba import njit


@njit(cache=True)
def kuhn_graph(nx, ny, nz):
    """CSR ``(indptr, indices)`` of the Kuhn lattice; node id ``i + nx*(j + ny*k)``, rows sorted."""
    off = np.empty((14, 3), dtype=np.int64)
    m = 0
    for dz in range(2):
        for dy in range(2):
            for dx in range(2):
                if dx + dy + dz > 0:
                    off[m, 0], off[m, 1], off[m, 2] = dx, dy, dz
                    off[m + 7, 0], off[m + 7, 1], off[m + 7, 2] = -dx, -dy, -dz
                    m += 1
    delta = off[:, 0] + nx * (off[:, 1] + ny * off[:, 2])
    order = np.argsort(delta)  # neighbours come out ascending
    off = off[order]
    n = nx * ny * nz
    indptr = np.zeros(n + 1, dtype=np.int64)
    for pass_ in range(2):
        if pass_ == 1:
            for v in range(n):
                indptr[v + 1] += indptr[v]
            indices = np.empty(indptr[n], dtype=np.int64)
        else:
            indices = np.empty(0, dtype=np.int64)
        v = 0
        for k in range(nz):
            for j in range(ny):
                for i in range(nx):
                    pos = indptr[v]
                    cnt = 0
                    for t in range(14):
                        a, b, c = i + off[t, 0], j + off[t, 1], k + off[t, 2]
                        if 0 <= a < nx and 0 <= b < ny and 0 <= c < nz:
                            if pass_ == 1:
                                indices[pos + cnt] = a + nx * (b + ny * c)
                            cnt += 1
                    if pass_ == 0:
                        indptr[v + 1] = cnt
                    v += 1
    return indptr, indices


@njit(cache=True)
def sort_rows(indptr, indices):
    """Sort every row of a CSR graph in place (insertion sort: mesh rows hold ~15 entries)."""
    for v in range(indptr.size - 1):
        for i in range(indptr[v] + 1, indptr[v + 1]):
            x = indices[i]
            j = i - 1
            while j >= indptr[v] and indices[j] > x:
                indices[j + 1] = indices[j]
                j -= 1
            indices[j + 1] = x
