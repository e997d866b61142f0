"""Centralized policies: ecf, fcfs, and a checker for mwm steps."""

import itertools
import math

from .common import n_of, normalise


def ecf(client, ionode, d) -> tuple[list[int], int, int]:
    """Earliest Completion First, the naive way: scan every pending unit each step.

    Take the pending unit minimising ``(max(client_free, ionode_free) + d, u)``.
    """
    client, ionode, d = normalise(client, ionode, d)
    client_free = [0.0] * n_of(client)
    ionode_free = [0.0] * n_of(ionode)
    pending = list(range(len(d)))  # increasing index
    order: list[int] = []
    while pending:
        best = None
        best_key = None
        for u in pending:
            completion = max(client_free[client[u]], ionode_free[ionode[u]]) + d[u]
            key = (completion, u)
            if best_key is None or key < best_key:
                best_key = key
                best = u
        assert best is not None and best_key is not None
        order.append(best)
        pending.remove(best)
        client_free[client[best]] = best_key[0]
        ionode_free[ionode[best]] = best_key[0]
    return order, 0, 0


def fcfs(client, ionode, d) -> tuple[list[int], int, int]:
    """First-Come First-Served in literal phases.

    Each phase scans the pending units in increasing index and takes a unit if
    neither its client nor its I/O node was taken earlier in the same phase.
    """
    client, ionode, d = normalise(client, ionode, d)
    pending = list(range(len(d)))
    order: list[int] = []
    phases = 0
    while pending:
        phases += 1
        clients_taken: set[int] = set()
        ionodes_taken: set[int] = set()
        taken: list[int] = []
        rest: list[int] = []
        for u in pending:
            if client[u] not in clients_taken and ionode[u] not in ionodes_taken:
                taken.append(u)
                clients_taken.add(client[u])
                ionodes_taken.add(ionode[u])
            else:
                rest.append(u)
        order.extend(taken)  # already in increasing index
        pending = rest
    return order, phases, 0


# ---------------------------------------------------------------------------
# mwm checker
# ---------------------------------------------------------------------------


def pair_weights(pending, client, ionode, d) -> dict[tuple[int, int], tuple[float, int]]:
    """For the pending units, map each pair ``(c, s)`` to ``(weight, representative)``.

    Weight = largest ``d`` of the pair's pending units; representative = lowest
    index among the pair's pending units with that ``d``.
    """
    pairs: dict[tuple[int, int], tuple[float, int]] = {}
    for u in sorted(pending):
        key = (client[u], ionode[u])
        if key not in pairs or d[u] > pairs[key][0]:
            pairs[key] = (d[u], u)
        # equal d: keep the earlier (lower) index already stored
    return pairs


def _brute_force_matching_weight(edges: dict[tuple[int, int], float]) -> float:
    """Maximum matching weight by trying every subset of edges (tiny graphs only)."""
    items = list(edges.items())
    best = 0.0
    for r in range(1, len(items) + 1):
        for subset in itertools.combinations(items, r):
            cs = [c for (c, _), _ in subset]
            ss = [s for (_, s), _ in subset]
            if len(set(cs)) == r and len(set(ss)) == r:
                best = max(best, sum(w for _, w in subset))
    return best


def _networkx_matching_weight(edges: dict[tuple[int, int], float]) -> float:
    import networkx as nx

    graph = nx.Graph()
    for (c, s), w in edges.items():
        graph.add_edge(("client", c), ("ionode", s), weight=w)
    matching = nx.max_weight_matching(graph, maxcardinality=False, weight="weight")
    return sum(graph[a][b]["weight"] for a, b in matching)


BRUTE_FORCE_MAX_EDGES = 10


def max_matching_weight(edges: dict[tuple[int, int], float], method: str = "auto") -> float:
    """Maximum total weight of a matching in the bipartite pair graph.

    ``edges`` maps ``(client, ionode)`` to a weight. ``method`` is ``"brute"``,
    ``"networkx"`` or ``"auto"`` (brute force up to ``BRUTE_FORCE_MAX_EDGES`` edges).
    """
    if not edges:
        return 0.0
    if method == "brute" or (method == "auto" and len(edges) <= BRUTE_FORCE_MAX_EDGES):
        return _brute_force_matching_weight(edges)
    if method in ("networkx", "auto"):
        return _networkx_matching_weight(edges)
    raise ValueError(f"unknown method {method!r}")


def mwm_check(client, ionode, d, steps, rel_tol: float = 1e-9) -> None:
    """Check the steps of a repeated maximum-weight matching run.

    Raises AssertionError with a message if:
      * the steps do not partition all units (missing, repeated, unknown ids,
        empty step);
      * a step is not in increasing unit index;
      * a step uses a client or an I/O node twice;
      * a unit is not its pair's representative among the units pending at
        that step (largest d of the pair, lowest index among equals);
      * the step's total weight differs from the maximum matching weight of
        the pending pair graph (relative tolerance ``rel_tol``).
    """
    client, ionode, d = normalise(client, ionode, d)
    n = len(d)
    steps = [[int(u) for u in step] for step in steps]

    seen: dict[int, int] = {}
    for k, step in enumerate(steps):
        for u in step:
            if not 0 <= u < n:
                raise AssertionError(f"step {k}: unit {u} is not a unit id (n = {n})")
            if u in seen:
                raise AssertionError(f"unit {u} appears in step {seen[u]} and again in step {k}")
            seen[u] = k
    missing = sorted(set(range(n)) - set(seen))
    if missing:
        raise AssertionError(f"units never scheduled by any step: {missing}")

    pending = set(range(n))
    for k, step in enumerate(steps):
        if not step:
            raise AssertionError(f"step {k} is empty while units {sorted(pending)} are pending")
        if step != sorted(step):
            raise AssertionError(f"step {k} is not in increasing unit index: {step}")
        used_clients = [client[u] for u in step]
        used_ionodes = [ionode[u] for u in step]
        if len(set(used_clients)) != len(step):
            raise AssertionError(f"step {k} uses a client twice: units {step}, {used_clients}")
        if len(set(used_ionodes)) != len(step):
            raise AssertionError(f"step {k} uses an I/O node twice: units {step}, {used_ionodes}")

        pairs = pair_weights(pending, client, ionode, d)
        for u in step:
            weight, rep = pairs[(client[u], ionode[u])]
            if rep != u:
                raise AssertionError(
                    f"step {k}: unit {u} (d={d[u]!r}) is not the representative of pair "
                    f"(client {client[u]}, ionode {ionode[u]}); expected unit {rep} "
                    f"(d={weight!r})"
                )

        step_weight = sum(d[u] for u in step)
        best = max_matching_weight({key: w for key, (w, _) in pairs.items()})
        if not math.isclose(step_weight, best, rel_tol=rel_tol, abs_tol=0.0):
            raise AssertionError(
                f"step {k}: matched weight {step_weight!r} (units {step}) differs from the "
                f"maximum matching weight {best!r} of the {len(pairs)} pending pairs"
            )
        pending -= set(step)
