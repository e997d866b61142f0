"""Decentralized policies (first_ios, random_ios, hash_ios) as a discrete-event simulation.

Each client issues its units one at a time in its own sequence; its first unit
arrives at time 0 and each later one arrives at the instant the previous one
completes. Each I/O node has an explicit FIFO queue and serves one unit at a
time. Time advances from event instant to event instant. At an instant ``t``:

1. every service ending at ``t`` completes, its I/O node becomes idle and its
   client issues its next unit, which arrives at ``t``;
2. every arrival at ``t`` joins the tail of its I/O node's queue, arrivals in
   increasing client id;
3. every idle I/O node with a non-empty queue starts serving its queue head at ``t``.

This is written independently of the heap shortcut in docs/semantics.rst (the
tests cross-check the two).
"""

from collections import deque
from typing import Any

from .common import n_of, normalise
from .rng import SplitMix64


def simulate(client, ionode, d, sequences, order_by: str = "arrival"):
    """Run the event simulation for given per-client sequences.

    ``sequences[c]`` lists client ``c``'s units in issue order. Returns
    ``(order, start, end, arrival)``; ``start``/``end``/``arrival`` are indexed
    by unit id. ``order`` sorts the units by ``(arrival, client)`` (the spec's
    heap pop order; ``order_by="arrival"``) or by ``(start, client)``
    (``order_by="start"``).
    """
    client, ionode, d = normalise(client, ionode, d)
    n = len(d)
    n_clients = n_of(client)
    n_ionodes = n_of(ionode)
    issued = sorted(u for seq in sequences for u in seq)
    if issued != list(range(n)):
        raise AssertionError("client sequences must together issue every unit exactly once")
    for c, seq in enumerate(sequences):
        for u in seq:
            if client[u] != c:
                raise AssertionError(
                    f"unit {u} is in client {c}'s sequence but has client {client[u]}"
                )

    next_in_seq = [0] * len(sequences)
    queue: list[deque[int]] = [deque() for _ in range(n_ionodes)]
    serving: list[int | None] = [None] * n_ionodes  # unit in service, or None if idle
    arrival: list[Any] = [None] * n  # filled as units arrive
    start: list[Any] = [None] * n
    end: list[Any] = [None] * n

    # pending events: arrivals as (time, client), completions as (time, ionode)
    arrival_events: list[tuple[float, int]] = []
    completion_events: list[tuple[float, int]] = []
    for c in range(n_clients):
        if c < len(sequences) and sequences[c]:
            arrival_events.append((0.0, c))

    while arrival_events or completion_events:
        now = min(t for t, _ in arrival_events + completion_events)

        # 1. completions at `now`
        done_here = [e for e in completion_events if e[0] == now]
        completion_events = [e for e in completion_events if e[0] != now]
        for _, s in done_here:
            u = serving[s]
            assert u is not None and end[u] == now
            serving[s] = None
            c = client[u]
            if next_in_seq[c] < len(sequences[c]):
                arrival_events.append((now, c))

        # 2. arrivals at `now`, increasing client id
        arriving = sorted(c for t, c in arrival_events if t == now)
        arrival_events = [e for e in arrival_events if e[0] != now]
        for c in arriving:
            u = sequences[c][next_in_seq[c]]
            next_in_seq[c] += 1
            arrival[u] = now
            queue[ionode[u]].append(u)

        # 3. idle I/O nodes start their queue head
        for s in range(n_ionodes):
            if serving[s] is None and queue[s]:
                u = queue[s].popleft()
                serving[s] = u
                start[u] = now
                end[u] = now + d[u]
                completion_events.append((end[u], s))

    assert all(x is not None for x in start), "simulation left units unserved"
    if order_by == "arrival":
        order = sorted(range(n), key=lambda u: (arrival[u], client[u]))
    elif order_by == "start":
        order = sorted(range(n), key=lambda u: (start[u], client[u]))
    else:
        raise ValueError(f"order_by must be 'arrival' or 'start', not {order_by!r}")
    return order, start, end, arrival


def _per_client_node_queues(client, ionode, n_clients):
    """queues[c][s] = client c's units for I/O node s, increasing unit id."""
    queues: list[dict[int, deque[int]]] = [{} for _ in range(n_clients)]
    for u in range(len(client)):
        queues[client[u]].setdefault(ionode[u], deque()).append(u)
    return queues


def first_ios_sequences(client, ionode, d) -> list[list[int]]:
    """Each client issues its units in increasing unit id (= transfers in index
    order, each transfer's pieces in offset order)."""
    client, ionode, d = normalise(client, ionode, d)
    sequences: list[list[int]] = [[] for _ in range(n_of(client))]
    for u in range(len(d)):
        sequences[client[u]].append(u)
    return sequences


def random_ios_sequences(client, ionode, d, seed) -> list[list[int]]:
    """Per client, repeatedly draw a position in its swap-remove list of I/O
    nodes with remaining units and take that node's next unit. Clients in
    increasing id share one generator."""
    client, ionode, d = normalise(client, ionode, d)
    n_clients = n_of(client)
    rng = SplitMix64(seed)
    queues = _per_client_node_queues(client, ionode, n_clients)
    sequences: list[list[int]] = []
    for c in range(n_clients):
        nodes = sorted(queues[c])  # I/O nodes with a non-empty queue, increasing id
        seq: list[int] = []
        while nodes:
            p = rng.below(len(nodes))
            s = nodes[p]
            seq.append(queues[c][s].popleft())
            if not queues[c][s]:
                nodes[p] = nodes[-1]
                nodes.pop()
        sequences.append(seq)
    return sequences


def hash_ios_sequences(client, ionode, d, n_ionodes) -> list[list[int]]:
    """Client c starts its pointer at ``c mod n_ionodes``; for each unit it moves
    the pointer cyclically to the first node (itself included) where it still
    has a unit, takes that node's next unit, and steps the pointer by one."""
    client, ionode, d = normalise(client, ionode, d)
    n_ionodes = int(n_ionodes)
    if ionode and max(ionode) >= n_ionodes:
        raise ValueError(f"n_ionodes={n_ionodes} but an ionode id is {max(ionode)}")
    n_clients = n_of(client)
    queues = _per_client_node_queues(client, ionode, n_clients)
    sequences: list[list[int]] = []
    for c in range(n_clients):
        remaining = sum(len(q) for q in queues[c].values())
        p = c % n_ionodes
        seq: list[int] = []
        while remaining > 0:
            while not queues[c].get(p):
                p = (p + 1) % n_ionodes
            seq.append(queues[c][p].popleft())
            remaining -= 1
            p = (p + 1) % n_ionodes
        sequences.append(seq)
    return sequences


def first_ios(client, ionode, d, order_by: str = "arrival"):
    """Returns ``(order, start, end)``."""
    order, start, end, _ = simulate(
        client, ionode, d, first_ios_sequences(client, ionode, d), order_by
    )
    return order, start, end


def random_ios(client, ionode, d, seed, order_by: str = "arrival"):
    """Returns ``(order, start, end)``."""
    order, start, end, _ = simulate(
        client, ionode, d, random_ios_sequences(client, ionode, d, seed), order_by
    )
    return order, start, end


def hash_ios(client, ionode, d, n_ionodes, order_by: str = "arrival"):
    """Returns ``(order, start, end)``."""
    order, start, end, _ = simulate(
        client, ionode, d, hash_ios_sequences(client, ionode, d, n_ionodes), order_by
    )
    return order, start, end
