"""Concurrent collective reads: the I/O nodes' service orders (NIO, SIO, HIO) and the
simulator that serves them (semantics: docs/semantics.rst, "Concurrent collective
reads"; oracles: orchestrator.testing.oracles.reads)."""

import numpy as np
from numba import njit

NIO, SIO, HIO = 0, 1, 2


@njit(cache=True)
def acceptable_delay(agg_app, shuffle):
    """AD of each aggregator: its application's largest shuffle minus its own (eq. 3)."""
    n_app = 0
    for a in agg_app:
        n_app = max(n_app, a + 1)
    worst = np.full(n_app, -np.inf)
    for g in range(agg_app.size):
        worst[agg_app[g]] = max(worst[agg_app[g]], shuffle[g])
    ad = np.empty(agg_app.size)
    for g in range(agg_app.size):
        ad[g] = worst[agg_app[g]] - shuffle[g]
    return ad


@njit(cache=True)
def relative_delay(agg_app, ad):
    """RAD of each aggregator: the rank of its AD, ascending, among its own application's
    aggregators (ties: the lower aggregator id first) — 0 is the application's slowest.
    ADs of different applications are not compared (the paper, sec. 4.4)."""
    idx = np.argsort(ad, kind="mergesort")
    idx = idx[np.argsort(agg_app[idx], kind="mergesort")]  # by application, then AD, id
    rad = np.empty(agg_app.size, dtype=np.int64)
    for i in range(idx.size):
        g = idx[i]
        rad[g] = 0 if i == 0 or agg_app[idx[i - 1]] != agg_app[g] else rad[idx[i - 1]] + 1
    return rad


@njit(cache=True)
def _stable_by(keys, idx):
    """``idx`` reordered by ``keys[idx]``, equal keys keeping their order."""
    return idx[np.argsort(keys[idx], kind="mergesort")]


@njit(cache=True)
def service_orders(
    node,
    agg,
    read,
    arrival,
    agg_app,
    access,
    shuffle,
    n_nodes,
    policy,
    width,
    threshold,
    strict,
    interleave,
):
    """Every node's service order: request ids grouped by node (``seq``), node k's
    between ``bounds[k]`` and ``bounds[k + 1]``."""
    n = node.size
    ids = np.arange(n)
    ids = _stable_by(arrival, ids)
    ids = _stable_by(node, ids)  # by node, then arrival, then id
    bounds = np.zeros(n_nodes + 1, dtype=np.int64)
    for r in range(n):
        bounds[node[r] + 1] += 1
    for k in range(n_nodes):
        bounds[k + 1] += bounds[k]
    if policy == NIO:
        return ids, bounds
    app = np.empty(n, dtype=np.int64)
    acc = np.empty(n, dtype=np.int64)
    for r in range(n):
        app[r] = agg_app[agg[r]]
        acc[r] = access[agg[r]]
    ad_agg = acceptable_delay(agg_app, shuffle)
    rad_agg = relative_delay(agg_app, ad_agg)
    n_app = 0
    for a in agg_app:
        n_app = max(n_app, a + 1)
    stamp = np.full(n_app, -1, dtype=np.int64)  # the window an application was last seen in
    stamp_acc = np.zeros(n_app, dtype=np.int64)  # and the access it was seen with
    seq = ids.copy()
    win = 0
    for k in range(n_nodes):
        s = bounds[k]
        while s < bounds[k + 1]:
            win += 1  # a new window: cut at the width or where an application repeats
            e = s
            while e < bounds[k + 1] and e - s < width:
                a = app[ids[e]]
                if stamp[a] == win and (strict or stamp_acc[a] != acc[ids[e]]):
                    break
                stamp[a] = win
                stamp_acc[a] = acc[ids[e]]
                e += 1
            w = ids[s:e].copy()
            if policy == SIO:
                w = _stable_by(app, w)
            else:
                sh = 0.0
                rd = 0.0
                for r in w:
                    sh += shuffle[agg[r]]
                    rd += read[r]
                w = _stable_by(app, w)
                if (rd > 0.0 and sh / rd > threshold) or (rd == 0.0 and sh > 0.0):
                    rad_req = np.empty(n, dtype=np.int64)  # only w's entries are read
                    for r in w:
                        rad_req[r] = rad_agg[agg[r]]
                    w = _stable_by(rad_req, w)  # by RAD, then application
                    if not interleave:
                        w = _stable_by(app, w)  # by application, then RAD: the hierarchy
                ad = np.empty(w.size)
                for j in range(w.size):
                    ad[j] = ad_agg[agg[w[j]]]
                for j in range(w.size - 1):  # tuning: one pass, a request bubbling back
                    nxt = w[j + 1]
                    if ad[j] > read[nxt]:
                        moved = w[j]
                        a0 = ad[j]
                        ad[j] = ad[j + 1] + read[moved]
                        ad[j + 1] = a0 - read[nxt]
                        w[j] = nxt
                        w[j + 1] = moved
            seq[s:e] = w
            s = e
    return seq, bounds


@njit(cache=True)
def serve(seq, bounds, read, agg, agg_app, shuffle):
    """Serve each node's order back to back from 0: each request's end, each
    aggregator's finish (its last read + its shuffle), each application's time."""
    n = read.size
    end = np.zeros(n)
    for k in range(bounds.size - 1):
        t = 0.0
        for i in range(bounds[k], bounds[k + 1]):
            r = seq[i]
            t += read[r]
            end[r] = t
    read_end = np.zeros(agg_app.size)
    for r in range(n):
        read_end[agg[r]] = max(read_end[agg[r]], end[r])
    finish = read_end + shuffle
    n_app = 0
    for a in agg_app:
        n_app = max(n_app, a + 1)
    time = np.zeros(n_app)
    for g in range(agg_app.size):
        time[agg_app[g]] = max(time[agg_app[g]], finish[g])
    return end, finish, time
