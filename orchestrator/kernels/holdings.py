"""Who holds each row: a counting sort of the contributed rows, one pass each way."""

import numpy as np
from numba import njit


@njit(cache=True)
def holders_of(rows, starts, clients, n_rows):
    """CSR of the holders of each row: ``(ptr, holders, bad)``, holders ascending per row.

    ``rows[starts[k]:starts[k + 1]]`` are the rows of client ``clients[k]``,
    ascending, each once; ``clients`` ascending; every row in ``[0, n_rows)``.
    ``holders[ptr[r]:ptr[r + 1]]`` are the clients holding row ``r``. Linear in
    the rows: a lexsort of ``(row, client)`` (the oracle) costs a sort.
    ``bad`` is the index of the first row out of range or not above the one
    before it in its client's run, -1 if none; then ``ptr`` and ``holders``
    are empty (a row out of range would index outside them).
    """
    for k in range(clients.size):
        for i in range(starts[k], starts[k + 1]):
            r = rows[i]
            if r < 0 or r >= n_rows or (i > starts[k] and r <= rows[i - 1]):
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), i
    ptr = np.zeros(n_rows + 1, dtype=np.int64)
    for i in range(rows.size):
        ptr[rows[i] + 1] += 1
    for r in range(n_rows):
        ptr[r + 1] += ptr[r]
    free = ptr[:-1].copy()
    holders = np.empty(rows.size, dtype=np.int64)
    for k in range(clients.size):
        c = clients[k]
        for i in range(starts[k], starts[k + 1]):
            r = rows[i]
            holders[free[r]] = c
            free[r] += 1
    return ptr, holders, -1


@njit(cache=True)
def first_holders(ptr, holders):
    """The first (lowest) holder of each row of the CSR ``(ptr, holders)``; -1 for none.

    One pass and one array: the boolean masks and fancy indexing it replaces
    touched four row-sized temporaries, and fresh memory is slow on a
    virtual machine that hands freed pages back to its host.
    """
    n = ptr.size - 1
    out = np.empty(n, dtype=np.int64)
    for r in range(n):
        out[r] = holders[ptr[r]] if ptr[r + 1] > ptr[r] else -1
    return out
