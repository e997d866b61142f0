"""List scheduling of an order and the open-shop lower bound."""

import numpy as np
from numba import njit


@njit(cache=True)
def list_schedule(order, client, ionode, d, n_clients, n_ionodes):
    """As-soon-as-possible start/end of every unit, indexed by unit id."""
    cfree = np.zeros(n_clients, dtype=np.float64)
    sfree = np.zeros(n_ionodes, dtype=np.float64)
    start = np.empty(d.size, dtype=np.float64)
    end = np.empty(d.size, dtype=np.float64)
    for k in range(order.size):
        u = order[k]
        c = client[u]
        s = ionode[u]
        t = cfree[c] if cfree[c] > sfree[s] else sfree[s]
        start[u] = t
        end[u] = t + d[u]
        cfree[c] = t + d[u]
        sfree[s] = t + d[u]
    return start, end


@njit(cache=True)
def loads(client, ionode, d, n_clients, n_ionodes):
    """Summed durations per client and per I/O node."""
    cl = np.zeros(n_clients, dtype=np.float64)
    sl = np.zeros(n_ionodes, dtype=np.float64)
    for u in range(d.size):
        cl[client[u]] += d[u]
        sl[ionode[u]] += d[u]
    return cl, sl
