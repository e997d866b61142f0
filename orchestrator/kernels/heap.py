"""A binary min-heap over (key, id) pairs stored in two parallel arrays.

Kernels need a priority queue without Python objects; ordering is
lexicographic on (key, id) so ties go to the lower id, as DESIGN.md asks.
"""

from numba import njit


@njit(cache=True)
def _less(keys, ids, a, b):
    return keys[a] < keys[b] or (keys[a] == keys[b] and ids[a] < ids[b])


@njit(cache=True)
def push(keys, ids, size, key, ident):
    """Insert (key, ident); returns the new size. Arrays must have room."""
    i = size
    keys[i] = key
    ids[i] = ident
    while i > 0:
        p = (i - 1) >> 1
        if _less(keys, ids, i, p):
            keys[i], keys[p] = keys[p], keys[i]
            ids[i], ids[p] = ids[p], ids[i]
            i = p
        else:
            break
    return size + 1


@njit(cache=True)
def pop(keys, ids, size):
    """Remove the smallest pair; returns (key, ident, new size)."""
    key = keys[0]
    ident = ids[0]
    size -= 1
    keys[0] = keys[size]
    ids[0] = ids[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        m = left
        right = left + 1
        if right < size and _less(keys, ids, right, left):
            m = right
        if _less(keys, ids, m, i):
            keys[i], keys[m] = keys[m], keys[i]
            ids[i], ids[m] = ids[m], ids[i]
            i = m
        else:
            break
    return key, ident, size
