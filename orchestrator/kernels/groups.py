"""Grouping units by an integer key with a stable counting sort."""

import numpy as np
from numba import njit


@njit(cache=True)
def group_by(key, n_groups):
    """Unit ids grouped by ``key`` (ids stay increasing inside a group): (members, bounds).

    Group ``g`` is ``members[bounds[g]:bounds[g + 1]]``. O(n + n_groups).
    """
    n = key.size
    bounds = np.zeros(n_groups + 1, dtype=np.int64)
    for u in range(n):
        bounds[key[u] + 1] += 1
    for g in range(n_groups):
        bounds[g + 1] += bounds[g]
    fill = bounds[:-1].copy()
    members = np.empty(n, dtype=np.int64)
    for u in range(n):
        members[fill[key[u]]] = u
        fill[key[u]] += 1
    return members, bounds


@njit(cache=True)
def group_sorted(group, n_groups, key):
    """Like :func:`group_by`, each group then sorted stably by ``key`` (ties keep id order).

    A counting sort plus one short sort per group: cheaper than a global sort.
    """
    members, bounds = group_by(group, n_groups)
    for g in range(n_groups):
        lo, hi = bounds[g], bounds[g + 1]
        if hi - lo > 1:
            seg = members[lo:hi].copy()
            members[lo:hi] = seg[np.argsort(key[seg], kind="mergesort")]
    return members, bounds


@njit(cache=True)
def widest(bounds):
    """Size of the largest group (at least 1)."""
    w = 1
    for g in range(bounds.size - 1):
        w = max(w, bounds[g + 1] - bounds[g])
    return w
