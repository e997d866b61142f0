"""Repeated maximum-weight matching (MWM, bidding paper sec. 3.1.1).

Each step matches (client, I/O node) pairs of maximum total weight, where a
pair weighs as much as its longest pending unit. The assignment itself is
scipy's ``linear_sum_assignment`` (a well-kept Jonker-Volgenant solver); the
Numba part keeps each pair's units sorted so a step costs only the solver
plus O(matched) bookkeeping.
"""

import numpy as np
from numba import njit
from scipy.optimize import linear_sum_assignment


@njit(cache=True)
def _pairs_by_weight(client, ionode, d, n_ionodes):
    """Units sorted by (pair, -d, id), group bounds, and the pair id of each group."""
    n = d.size
    by_d = np.argsort(-d, kind="mergesort")  # stable: equal d keep id order
    pair = np.empty(n, dtype=np.int64)
    for k in range(n):
        u = by_d[k]
        pair[k] = client[u] * n_ionodes + ionode[u]
    by_pair = np.argsort(pair, kind="mergesort")
    srt = by_d[by_pair]
    starts = [0]
    for k in range(1, n):
        if pair[by_pair[k]] != pair[by_pair[k - 1]]:
            starts.append(k)
    starts.append(n)
    bounds = np.array(starts, dtype=np.int64)
    gpair = np.empty(bounds.size - 1, dtype=np.int64)
    for g in range(bounds.size - 1):
        gpair[g] = pair[by_pair[bounds[g]]]
    return srt, bounds, gpair


def mwm(client, ionode, d, n_clients, n_ionodes):
    """Repeated maximum-weight matching; returns (order, steps, step_sizes)."""
    srt, bounds, gpair = _pairs_by_weight(client, ionode, d, n_ionodes)
    head = bounds[:-1].copy()  # next pending position in each pair group
    end = bounds[1:]
    gc = gpair // n_ionodes
    gs = gpair % n_ionodes
    weight = np.zeros((n_clients, n_ionodes), dtype=np.float64)
    group = np.full((n_clients, n_ionodes), -1, dtype=np.int64)
    weight[gc, gs] = d[srt[head]]
    group[gc, gs] = np.arange(gpair.size)
    # pairs with pending units per row / column, so finding the active
    # sub-matrix costs O(C + S) per step instead of a scan of the matrix
    row_pairs = np.bincount(gc, minlength=n_clients)
    col_pairs = np.bincount(gs, minlength=n_ionodes)
    order = np.empty(d.size, dtype=np.int64)
    sizes = []
    m = 0
    while m < d.size:
        rows = np.flatnonzero(row_pairs)
        cols = np.flatnonzero(col_pairs)
        sub = weight[np.ix_(rows, cols)]
        r, k = linear_sum_assignment(sub, maximize=True)
        keep = sub[r, k] > 0.0
        rc, kc = rows[r[keep]], cols[k[keep]]
        g = group[rc, kc]
        units = np.sort(srt[head[g]])
        order[m : m + units.size] = units
        m += units.size
        sizes.append(units.size)
        head[g] += 1
        more = head[g] < end[g]
        weight[rc, kc] = 0.0
        weight[rc[more], kc[more]] = d[srt[head[g[more]]]]
        np.subtract.at(row_pairs, rc[~more], 1)
        np.subtract.at(col_pairs, kc[~more], 1)
    return order, len(sizes), np.array(sizes, dtype=np.int64)
