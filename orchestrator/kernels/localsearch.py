"""Local search on the critical path of a list-scheduled order (``ecf-ls``).

The critical path of a plan's list schedule is the chain of units, each
starting when its predecessor on the same client or I/O node ends, that
ends at the makespan. Only reordering such a chain can shorten the plan.
For each unit ``u`` on it, from the end backwards, moves of the global
order are tried: *reinsert* ``u`` just before one of the units preceding
it on its client or I/O node (the nearest ``window`` of them; the nearest
one is a swap in that sequence), and reinsert its critical predecessor
just after ``u``. The first move that lowers ``(makespan, sum of end
times)`` lexicographically is kept, so the search never cycles and is
never worse than its start.
"""

import numpy as np
from numba import njit


@njit(cache=True)
def _evaluate(order, client, ionode, d, cfree, sfree):
    """Makespan and summed end times of ``order`` (scratch arrays reset here)."""
    cfree[:] = 0.0
    sfree[:] = 0.0
    mk = 0.0
    tot = 0.0
    for k in range(order.size):
        u = order[k]
        c = client[u]
        s = ionode[u]
        t = cfree[c] if cfree[c] > sfree[s] else sfree[s]
        e = t + d[u]
        cfree[c] = e
        sfree[s] = e
        tot += e
        if e > mk:
            mk = e
    return mk, tot


@njit(cache=True)
def _better(mk, tot, best_mk, best_tot):
    """A shorter makespan, or the same one with a smaller sum of end times (past rounding)."""
    return mk < best_mk * (1.0 - 1e-12) or (mk <= best_mk and tot < best_tot * (1.0 - 1e-12))


@njit(cache=True)
def _critical_path(order, client, ionode, d, n_clients, n_ionodes):
    """Units of a critical path, last first."""
    n = order.size
    cfree = np.zeros(n_clients, dtype=np.float64)
    sfree = np.zeros(n_ionodes, dtype=np.float64)
    clast = np.full(n_clients, -1, dtype=np.int64)
    slast = np.full(n_ionodes, -1, dtype=np.int64)
    pred = np.full(d.size, -1, dtype=np.int64)
    end = np.zeros(d.size, dtype=np.float64)
    last = order[0]
    for k in range(n):
        u = order[k]
        c = client[u]
        s = ionode[u]
        if cfree[c] >= sfree[s]:
            t = cfree[c]
            pred[u] = clast[c]
        else:
            t = sfree[s]
            pred[u] = slast[s]
        end[u] = t + d[u]
        cfree[c] = end[u]
        sfree[s] = end[u]
        clast[c] = u
        slast[s] = u
        if end[u] > end[last]:
            last = u
    path = np.empty(n, dtype=np.int64)
    m = 0
    u = last
    while u >= 0:
        path[m] = u
        m += 1
        u = pred[u]
    return path[:m]


@njit(cache=True)
def _try(cur, cand, a, b, unit, before, client, ionode, d, cfree, sfree):
    """Candidate order: ``unit`` (at position ``b``) moved to position ``a``.

    ``before=True``: ``a < b`` and ``unit`` goes just before ``cur[a]``;
    else ``a < b`` and ``cur[a]`` goes just after ``cur[b]``.
    """
    cand[:a] = cur[:a]
    cand[b + 1 :] = cur[b + 1 :]
    if before:
        cand[a] = unit
        cand[a + 1 : b + 1] = cur[a:b]
    else:
        cand[a:b] = cur[a + 1 : b + 1]
        cand[b] = unit
    return _evaluate(cand, client, ionode, d, cfree, sfree)


@njit(cache=True)
def improve(order, client, ionode, d, n_clients, n_ionodes, max_evals, window=64):
    """Improve ``order`` by critical-path moves; returns ``(order, evaluations, accepted)``.

    Moves, for each unit ``u`` on the critical path (last first) and its
    critical predecessor ``p``: reinsert ``u`` just before one of the
    ``window`` units that precede it on its client or I/O node, or ``p``
    just after ``u``. The first move that lowers ``(makespan, sum of end
    times)`` is kept. Stops at a local optimum or after ``max_evals``
    evaluated moves.
    """
    n = order.size
    cur = order.copy()
    cand = np.empty(n, dtype=np.int64)
    pos = np.empty(d.size, dtype=np.int64)
    cfree = np.zeros(n_clients, dtype=np.float64)
    sfree = np.zeros(n_ionodes, dtype=np.float64)
    best_mk, best_tot = _evaluate(cur, client, ionode, d, cfree, sfree)
    evals = 0
    accepted = 0
    while evals < max_evals:
        for k in range(n):
            pos[cur[k]] = k
        path = _critical_path(cur, client, ionode, d, n_clients, n_ionodes)
        found = False
        for j in range(path.size):
            u = path[j]
            b = pos[u]
            tried = 0
            k = b - 1
            while k >= 0 and tried <= window and not found and evals < max_evals:
                v = cur[k]
                if client[v] == client[u] or ionode[v] == ionode[u]:
                    tried += 1
                    if tried == 1 and j + 1 < path.size and path[j + 1] == v:
                        # the critical predecessor: also try moving it after u
                        evals += 1
                        mk, tot = _try(cur, cand, k, b, v, False, client, ionode, d, cfree, sfree)
                        if _better(mk, tot, best_mk, best_tot):
                            found = True
                            break
                        if evals >= max_evals:
                            break
                    evals += 1
                    mk, tot = _try(cur, cand, k, b, u, True, client, ionode, d, cfree, sfree)
                    if _better(mk, tot, best_mk, best_tot):
                        found = True
                        break
                k -= 1
            if found or evals >= max_evals:
                break
        if not found:
            break
        cur[:] = cand
        best_mk = mk
        best_tot = tot
        accepted += 1
    return cur, evals, accepted
