"""Shared helpers: input normalisation, pieces, list scheduling, lower bound."""


def as_ints(xs) -> list[int]:
    return [int(x) for x in xs]


def as_floats(xs) -> list[float]:
    return [float(x) for x in xs]


def normalise(client, ionode, d) -> tuple[list[int], list[int], list[float]]:
    """Return plain lists and check that the three columns agree."""
    client = as_ints(client)
    ionode = as_ints(ionode)
    d = as_floats(d)
    if not (len(client) == len(ionode) == len(d)):
        raise ValueError("client, ionode and d must have the same length")
    for u in range(len(d)):
        if client[u] < 0 or ionode[u] < 0:
            raise ValueError(f"unit {u}: negative id")
        if not d[u] > 0:
            raise ValueError(f"unit {u}: duration must be > 0, got {d[u]!r}")
    return client, ionode, d


def n_of(ids: list[int]) -> int:
    """Number of entities inferred as ``max(id) + 1`` (0 when there are no units)."""
    return max(ids) + 1 if ids else 0


def split_pieces(nbytes, block_size: int) -> tuple[list[int], list[int], list[int]]:
    """Cut every transfer into pieces of ``block_size`` bytes.

    Returns ``(parent, offset, piece_bytes)``, pieces in (transfer, j) order.
    Transfer ``i`` of ``n`` bytes gives ``ceil(n / block_size)`` pieces; piece
    ``j`` covers ``[j*block_size, min((j+1)*block_size, n))``.
    """
    block_size = int(block_size)
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    parent: list[int] = []
    offset: list[int] = []
    piece_bytes: list[int] = []
    for i, n in enumerate(as_ints(nbytes)):
        if n < 0:
            raise ValueError(f"transfer {i}: negative size")
        k = (n + block_size - 1) // block_size  # ceil(n / block_size), exact on ints
        for j in range(k):
            lo = j * block_size
            hi = min((j + 1) * block_size, n)
            parent.append(i)
            offset.append(lo)
            piece_bytes.append(hi - lo)
    return parent, offset, piece_bytes


def check_permutation(order, n: int) -> list[int]:
    order = as_ints(order)
    if sorted(order) != list(range(n)):
        raise AssertionError(f"order is not a permutation of 0..{n - 1}: {order}")
    return order


def list_schedule(order, client, ionode, d) -> tuple[list[float], list[float]]:
    """List-schedule ``order``; returns ``(start, end)`` indexed by unit id."""
    client, ionode, d = normalise(client, ionode, d)
    order = check_permutation(order, len(d))
    client_free = [0.0] * n_of(client)
    ionode_free = [0.0] * n_of(ionode)
    start = [0.0] * len(d)
    end = [0.0] * len(d)
    for u in order:
        c = client[u]
        s = ionode[u]
        t = max(client_free[c], ionode_free[s])
        start[u] = t
        end[u] = t + d[u]
        client_free[c] = end[u]
        ionode_free[s] = end[u]
    return start, end


def makespan(order, client, ionode, d) -> float:
    _, end = list_schedule(order, client, ionode, d)
    return max(end) if end else 0.0


def lower_bound(client, ionode, d) -> float:
    """``max(max per-client sum of d, max per-I/O-node sum of d)``.

    Sums are accumulated in increasing unit index.
    """
    client, ionode, d = normalise(client, ionode, d)
    client_load = [0.0] * n_of(client)
    ionode_load = [0.0] * n_of(ionode)
    for u in range(len(d)):
        client_load[client[u]] += d[u]
        ionode_load[ionode[u]] += d[u]
    return max([0.0, *client_load, *ionode_load])
