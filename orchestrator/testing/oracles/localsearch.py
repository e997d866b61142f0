"""Local-optimum check of the ecf-ls moves, written from the description in the kernel's docs."""

from .common import list_schedule, normalise


def _score(order, client, ionode, d) -> tuple[float, float]:
    _, end = list_schedule(order, client, ionode, d)
    return max(end), sum(end[u] for u in order)


def critical_path(order, client, ionode, d) -> list[int]:
    """Units of a critical path, last first: each starts when its predecessor ends."""
    client, ionode, d = normalise(client, ionode, d)
    _start, end = list_schedule(order, client, ionode, d)
    last_c: dict[int, int] = {}
    last_s: dict[int, int] = {}
    pred = {}
    for u in order:
        pc, ps = last_c.get(client[u], -1), last_s.get(ionode[u], -1)
        fc = end[pc] if pc >= 0 else 0.0
        fs = end[ps] if ps >= 0 else 0.0
        pred[u] = pc if fc >= fs else ps
        last_c[client[u]] = u
        last_s[ionode[u]] = u
    u = max(order, key=lambda v: (end[v], -order.index(v)))
    path = []
    while u >= 0:
        path.append(u)
        u = pred[u]
    return path


def improving_moves(order, client, ionode, d, window: int) -> list[list[int]]:
    """Every order in the ecf-ls neighbourhood of ``order`` that is lexicographically better."""
    order = [int(u) for u in order]
    client, ionode, d = normalise(client, ionode, d)
    best = _score(order, client, ionode, d)
    path = critical_path(order, client, ionode, d)
    better = []
    for j, u in enumerate(path):
        b = order.index(u)
        near = [
            k
            for k in range(b - 1, -1, -1)
            if client[order[k]] == client[u] or ionode[order[k]] == ionode[u]
        ]
        near = near[: window + 1]
        for i, k in enumerate(near):
            v = order[k]
            cands = [[*order[:k], u, *order[k:b], *order[b + 1 :]]]
            if i == 0 and j + 1 < len(path) and path[j + 1] == v:
                cands.append(order[:k] + order[k + 1 : b + 1] + [v] + order[b + 1 :])
            for cand in cands:
                mk, tot = _score(cand, client, ionode, d)
                if mk < best[0] * (1 - 1e-12) or (mk <= best[0] and tot < best[1] * (1 - 1e-12)):
                    better.append(cand)
    return better
