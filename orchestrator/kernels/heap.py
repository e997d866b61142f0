"""A binary min-heap over (key, id) pairs stored in two parallel arrays.

Kernels need a priority queue without Python objects; ordering is
lexicographic on (key, id) so ties go to the lower id, as DESIGN.md asks.
Sifts move a hole instead of swapping pairs (about 3x faster here).
Every function is inlined into its caller: a call that passes arrays costs
two atomic reference-count updates per array in Numba, which in ECF's loop
(millions of pushes and pops) was a measurable share of the time.
"""

from numba import njit


@njit(inline="always")
def _less(k1, i1, k2, i2):
    return k1 < k2 or (k1 == k2 and i1 < i2)


@njit(cache=True, inline="always")
def push(keys, ids, size, key, ident):
    """Insert (key, ident); returns the new size. Arrays must have room."""
    i = size
    while i > 0:
        p = (i - 1) >> 1
        if _less(key, ident, keys[p], ids[p]):
            keys[i] = keys[p]
            ids[i] = ids[p]
            i = p
        else:
            break
    keys[i] = key
    ids[i] = ident
    return size + 1


@njit(cache=True, inline="always")
def _sift_down(keys, ids, size, key, ident):
    """Place (key, ident) at the root's hole and sift it down."""
    i = 0
    while True:
        m = 2 * i + 1
        if m >= size:
            break
        km = keys[m]
        im = ids[m]
        r = m + 1
        if r < size and _less(keys[r], ids[r], km, im):
            m = r
            km = keys[r]
            im = ids[r]
        if _less(km, im, key, ident):
            keys[i] = km
            ids[i] = im
            i = m
        else:
            break
    keys[i] = key
    ids[i] = ident


@njit(cache=True, inline="always")
def pop(keys, ids, size):
    """Remove the smallest pair; returns (key, ident, new size)."""
    key = keys[0]
    ident = ids[0]
    size -= 1
    if size > 0:
        _sift_down(keys, ids, size, keys[size], ids[size])
    return key, ident, size


@njit(cache=True, inline="always")
def replace_top(keys, ids, size, key, ident):
    """Pop the smallest pair and push (key, ident) in one sift (size unchanged)."""
    _sift_down(keys, ids, size, key, ident)
