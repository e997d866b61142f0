"""Bidding policies (rounds): ms_ml, ms_ecf, rand (also uar on pieces), hdf.

Every round each client with pending units sends one proposal to the I/O node
of the proposed unit; every I/O node with proposals accepts one. Accepted units
are appended in increasing I/O node id within a round. messages = 2 * proposals.
"""

from .common import n_of, normalise
from .rng import SplitMix64


def _group_by_ionode(proposals: dict[int, int], ionode: list[int]) -> dict[int, list[int]]:
    """Map I/O node -> proposing clients in increasing client id."""
    by_node: dict[int, list[int]] = {}
    for c in sorted(proposals):
        by_node.setdefault(ionode[proposals[c]], []).append(c)
    return by_node


def ms_ml(client, ionode, d) -> tuple[list[int], int, int]:
    """Maximum-Size / Maximum-Load.

    A client proposes its pending unit with the largest d (lowest index among
    equals). An I/O node accepts the proposal whose client has the largest
    load (ties: lowest unit index). ``load[c]`` starts as the sum of the
    client's d (accumulated in increasing unit index) and drops by d on each
    acceptance.
    """
    client, ionode, d = normalise(client, ionode, d)
    n_clients = n_of(client)
    pending: list[list[int]] = [[] for _ in range(n_clients)]
    load = [0.0] * n_clients
    for u in range(len(d)):
        pending[client[u]].append(u)
        load[client[u]] += d[u]

    order: list[int] = []
    rounds = 0
    proposals_sent = 0
    while any(pending):
        rounds += 1
        # proposals: client -> unit
        proposals: dict[int, int] = {}
        for c in range(n_clients):
            if pending[c]:
                best = pending[c][0]
                for u in pending[c]:
                    if d[u] > d[best] or (d[u] == d[best] and u < best):
                        best = u
                proposals[c] = best
        proposals_sent += len(proposals)

        accepted: list[int] = []
        for _s, clients in sorted(_group_by_ionode(proposals, ionode).items()):
            winner = clients[0]
            for c in clients[1:]:
                u, w = proposals[c], proposals[winner]
                if load[c] > load[winner] or (load[c] == load[winner] and u < w):
                    winner = c
            accepted.append(proposals[winner])

        # loads were read above with their values at the start of the round
        for u in accepted:
            pending[client[u]].remove(u)
            load[client[u]] -= d[u]
        order.extend(accepted)  # I/O nodes were visited in increasing id
    return order, rounds, 2 * proposals_sent


def ms_ecf(client, ionode, d) -> tuple[list[int], int, int]:
    """Minimum-Size / Earliest-Completion-First.

    A client proposes its pending unit with the smallest ``(d, u)``. An I/O
    node accepts the proposal minimising ``(max(client_free, ionode_free) + d, u)``;
    both free times become that completion.
    """
    client, ionode, d = normalise(client, ionode, d)
    n_clients = n_of(client)
    pending: list[list[int]] = [[] for _ in range(n_clients)]
    for u in range(len(d)):
        pending[client[u]].append(u)
    client_free = [0.0] * n_clients
    ionode_free = [0.0] * n_of(ionode)

    order: list[int] = []
    rounds = 0
    proposals_sent = 0
    while any(pending):
        rounds += 1
        proposals: dict[int, int] = {}
        for c in range(n_clients):
            if pending[c]:
                proposals[c] = min(pending[c], key=lambda u: (d[u], u))
        proposals_sent += len(proposals)

        accepted: list[tuple[int, float]] = []  # (unit, completion)
        for s, clients in sorted(_group_by_ionode(proposals, ionode).items()):
            best_key = None
            for c in clients:
                u = proposals[c]
                key = (max(client_free[c], ionode_free[s]) + d[u], u)
                if best_key is None or key < best_key:
                    best_key = key
            assert best_key is not None
            accepted.append((best_key[1], best_key[0]))

        # each accepted unit has its own client and its own I/O node, so
        # updating after the whole round equals updating as we go
        for u, completion in accepted:
            client_free[client[u]] = completion
            ionode_free[ionode[u]] = completion
            pending[client[u]].remove(u)
        order.extend(u for u, _ in accepted)  # in increasing I/O node id
    return order, rounds, 2 * proposals_sent


def _random_proposals(client, ionode, d, seed, ionode_rule: str) -> tuple[list[int], int, int]:
    """Shared body of rand (ionode_rule='random') and hdf (ionode_rule='degree')."""
    client, ionode, d = normalise(client, ionode, d)
    n_clients = n_of(client)
    rng = SplitMix64(seed)
    # swap-remove pending lists, initially in increasing index
    lists: list[list[int]] = [[] for _ in range(n_clients)]
    for u in range(len(d)):
        lists[client[u]].append(u)

    order: list[int] = []
    rounds = 0
    proposals_sent = 0
    while any(lists):
        rounds += 1
        # 1. clients in increasing id draw their proposal position
        position: dict[int, int] = {}  # client -> position p in its list
        degree: dict[int, int] = {}  # client -> len(list) when proposing
        for c in range(n_clients):
            if lists[c]:
                degree[c] = len(lists[c])
                position[c] = rng.below(len(lists[c]))
        proposals = {c: lists[c][p] for c, p in position.items()}
        proposals_sent += len(proposals)

        # 2. I/O nodes in increasing id pick one proposal
        winners: list[int] = []  # clients whose proposal was accepted
        for _s, clients in sorted(_group_by_ionode(proposals, ionode).items()):
            if ionode_rule == "random":
                # clients are ordered by id; draw even when there is one proposal
                winners.append(clients[rng.below(len(clients))])
            elif ionode_rule == "degree":
                winner = clients[0]
                for c in clients[1:]:
                    if degree[c] > degree[winner]:  # ties keep the lower client id
                        winner = c
                winners.append(winner)
            else:
                raise ValueError(ionode_rule)

        # 3. append accepted units in increasing I/O node id, then swap-remove
        #    them from their clients' lists (clients in increasing id)
        order.extend(lists[c][position[c]] for c in winners)
        for c in sorted(winners):
            lst = lists[c]
            lst[position[c]] = lst[-1]
            lst.pop()
    return order, rounds, 2 * proposals_sent


def rand(client, ionode, d, seed) -> tuple[list[int], int, int]:
    """Random bidding (bidding paper, Fig. 1); ``uar`` is this on pieces."""
    return _random_proposals(client, ionode, d, seed, "random")


def uar(client, ionode, d, seed) -> tuple[list[int], int, int]:
    """Alias of :func:`rand`, to be called on pieces."""
    return rand(client, ionode, d, seed)


def hdf(client, ionode, d, seed) -> tuple[list[int], int, int]:
    """Highest Degree First: random client proposals, I/O node takes the highest degree."""
    return _random_proposals(client, ionode, d, seed, "degree")
