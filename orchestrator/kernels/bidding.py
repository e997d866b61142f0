"""Bidding policies (rounds of proposals and answers): MS/ML, MS/ECF, RAND/UAR, HDF.

Clients hold their pending units in arrays; each round every client with
work proposes one unit and every I/O node answers. Rounds cost O(active
clients + I/O nodes), so a run costs O(rounds * (C + S) + E log E).
"""

import numpy as np
from numba import njit

from .groups import group_by, group_sorted
from .rng import below


@njit(cache=True)
def _client_lists(client, key, n_clients, ordered=True):
    """Units grouped by client, each group sorted by (key, id): (units, start offsets).

    With ``ordered=False`` groups stay in increasing id and ``key`` is ignored.

    A counting sort groups by client (ids stay increasing), then each short
    group is sorted stably on its own: cheaper than one global sort.
    """
    if ordered:
        return group_sorted(client, n_clients, key)
    return group_by(client, n_clients)


@njit(cache=True)
def _sorted_bidding(client, ionode, d, n_clients, n_ionodes, greedy_ecf):
    """MS/ML (``greedy_ecf=False``) or MS/ECF (``True``): (order, rounds, messages).

    Both propose the head of a per-client sorted list (largest d for MS/ML,
    smallest for MS/ECF) and only accepted proposals advance, so the lists
    are fixed up front.
    """
    n = d.size
    key = d if greedy_ecf else -d
    units, ptr = _client_lists(client, key, n_clients, True)
    head = ptr[:-1].copy()
    load = np.zeros(n_clients, dtype=np.float64)
    for u in range(n):
        load[client[u]] += d[u]
    cfree = np.zeros(n_clients, dtype=np.float64)
    sfree = np.zeros(n_ionodes, dtype=np.float64)
    best = np.full(n_ionodes, -1, dtype=np.int64)
    bestkey = np.zeros(n_ionodes, dtype=np.float64)
    active = np.empty(n_clients, dtype=np.int64)
    na = 0
    for c in range(n_clients):
        if ptr[c + 1] > ptr[c]:
            active[na] = c
            na += 1
    accepted = np.empty(min(n_clients, n_ionodes), dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    m = 0
    rounds = 0
    messages = 0
    while na > 0:
        rounds += 1
        messages += 2 * na
        for i in range(na):
            c = active[i]
            u = units[head[c]]
            s = ionode[u]
            if greedy_ecf:
                t = cfree[c] if cfree[c] > sfree[s] else sfree[s]
                k = t + d[u]
                better = best[s] == -1 or k < bestkey[s] or (k == bestkey[s] and u < best[s])
            else:
                k = load[c]
                better = best[s] == -1 or k > bestkey[s] or (k == bestkey[s] and u < best[s])
            if better:
                best[s] = u
                bestkey[s] = k
        nt = 0
        for s in range(n_ionodes):  # answer in increasing I/O node id
            u = best[s]
            if u == -1:
                continue
            accepted[nt] = u
            nt += 1
            best[s] = -1
            c = client[u]
            head[c] += 1
            if greedy_ecf:
                cfree[c] = bestkey[s]
                sfree[s] = bestkey[s]
            else:
                load[c] -= d[u]
        order[m : m + nt] = accepted[:nt]
        m += nt
        j = 0
        for i in range(na):
            c = active[i]
            if head[c] < ptr[c + 1]:
                active[j] = c
                j += 1
        na = j
    return order, rounds, messages


@njit(cache=True)
def ms_ml(client, ionode, d, n_clients, n_ionodes):
    """Maximum-Size / Maximum-Load bidding: (order, rounds, messages)."""
    return _sorted_bidding(client, ionode, d, n_clients, n_ionodes, False)


@njit(cache=True)
def ms_ecf(client, ionode, d, n_clients, n_ionodes):
    """Minimum-Size / Earliest-Completion-First bidding: (order, rounds, messages)."""
    return _sorted_bidding(client, ionode, d, n_clients, n_ionodes, True)


@njit(cache=True)
def _random_bidding(client, ionode, n_clients, n_ionodes, state, highest_degree):
    """RAND/UAR (``highest_degree=False``) or HDF (``True``): (order, rounds, messages).

    Clients draw a uniform pending unit from a swap-remove list. RAND/UAR
    I/O nodes draw one proposal uniformly (proposals ordered by client id);
    HDF I/O nodes take the client with the most pending units, ties to the
    lowest client id.
    """
    n = client.size
    units, ptr = _client_lists(client, np.zeros(0, dtype=np.float64), n_clients, False)
    # pending entries pack (unit, I/O node) so a draw costs one memory access
    shift = 1
    while (1 << shift) < n_ionodes:
        shift += 1
    mask = (1 << shift) - 1
    for k in range(n):
        units[k] = (units[k] << shift) | ionode[units[k]]
    length = ptr[1:] - ptr[:-1]
    active = np.empty(n_clients, dtype=np.int64)
    na = 0
    for c in range(n_clients):
        if length[c] > 0:
            active[na] = c
            na += 1
    prop = np.empty(n_clients, dtype=np.int64)
    prop_pos = np.empty(n_clients, dtype=np.int64)
    cnt = np.zeros(n_ionodes + 1, dtype=np.int64)
    fill = np.empty(n_ionodes, dtype=np.int64)
    grouped = np.empty(n_clients, dtype=np.int64)
    winners = np.empty(min(n_clients, n_ionodes), dtype=np.int64)
    accepted = np.empty(min(n_clients, n_ionodes), dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    m = 0
    rounds = 0
    messages = 0
    while na > 0:
        rounds += 1
        messages += 2 * na
        cnt[:] = 0
        for i in range(na):
            c = active[i]
            p = below(state, length[c])
            prop_pos[c] = p
            prop[c] = units[ptr[c] + p]
            cnt[(prop[c] & mask) + 1] += 1
        for s in range(n_ionodes):
            cnt[s + 1] += cnt[s]
        fill[:] = cnt[:-1]
        for i in range(na):  # stable: clients stay in increasing id within an I/O node
            c = active[i]
            s = prop[c] & mask
            grouped[fill[s]] = c
            fill[s] += 1
        nacc = 0
        for s in range(n_ionodes):
            k = cnt[s + 1] - cnt[s]
            if k == 0:
                continue
            if highest_degree:
                win = grouped[cnt[s]]
                for j in range(cnt[s] + 1, cnt[s + 1]):
                    c = grouped[j]
                    if length[c] > length[win]:
                        win = c
            else:
                win = grouped[cnt[s] + below(state, k)]
            winners[nacc] = win
            accepted[nacc] = prop[win] >> shift
            nacc += 1
        for i in range(nacc):
            c = winners[i]
            last = ptr[c] + length[c] - 1
            units[ptr[c] + prop_pos[c]] = units[last]
            length[c] -= 1
        order[m : m + nacc] = accepted[:nacc]
        m += nacc
        j = 0
        for i in range(na):
            c = active[i]
            if length[c] > 0:
                active[j] = c
                j += 1
        na = j
    return order, rounds, messages


@njit(cache=True)
def rand(client, ionode, n_clients, n_ionodes, state):
    """Random bidding (RAND on transfers, UAR on pieces): (order, rounds, messages)."""
    return _random_bidding(client, ionode, n_clients, n_ionodes, state, False)


@njit(cache=True)
def hdf(client, ionode, n_clients, n_ionodes, state):
    """Highest-Degree-First bidding on pieces: (order, rounds, messages)."""
    return _random_bidding(client, ionode, n_clients, n_ionodes, state, True)
