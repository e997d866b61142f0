"""Workload generators: the bidding paper's sweeps and plain random sets."""

from __future__ import annotations

import numpy as np

from .checks import is_int
from .errors import InputError
from .limits import check_memory
from .transfers import TransferSet

__all__ = ["bidding_workload", "uniform_workload"]

KiB = 1024
MiB = 1024 * KiB


def bidding_workload(
    n_ionodes: int = 32,
    busy_ratio: float = 0.1,
    large_ratio: float = 0.1,
    n_clients: int = 256,
    seed: int = 0,
    normal_requests: float = 10.0,
    busy_factor: tuple[float, float] = (40.0, 50.0),
    large_bytes: int = 32 * MiB,
    small_bytes: int = 128 * KiB,
    spread: float = 0.05,
) -> TransferSet:
    """The workload of the bidding paper's experiments (Wu, Lin & Liu, sec. 4).

    ``round(busy_ratio * n_ionodes)`` I/O nodes, chosen at random, are busy.
    A normal I/O node receives Poisson(``normal_requests``) requests (at least
    one); a busy one ``uniform(*busy_factor)`` times ``normal_requests``. Each
    request comes from a uniformly random client and is large with
    probability ``large_ratio``: sizes are uniform within ``±spread`` of
    ``large_bytes`` (32 MiB) or ``small_bytes`` (128 KiB). Transfers are in
    random order. Seeded and reproducible.

    Examples
    --------
    >>> from orchestrator.workload import bidding_workload
    >>> ts = bidding_workload(n_ionodes=8, busy_ratio=0.25, large_ratio=0.5, seed=1)
    >>> ts.n_clients, ts.n_ionodes
    (256, 8)
    >>> bool(len(ts) > 400)  # two busy nodes with 400-500 requests each
    True
    """
    for name, v in (("n_ionodes", n_ionodes), ("n_clients", n_clients)):
        if not is_int(v, 1, 2**31 - 1):
            raise InputError(f"{name} must be an integer in [1, 2**31), got {v!r}")
    if not is_int(seed, 0, 2**64):
        raise InputError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    for name, r in (("busy_ratio", busy_ratio), ("large_ratio", large_ratio)):
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= r <= 1.0:
            raise InputError(f"{name} must be within [0, 1], got {r!r}")
    # up to busy_factor x normal_requests transfers per I/O node, 3 int64 columns and copies
    expect = n_ionodes * max(busy_factor[1], 1.0) * (normal_requests + 1) * 64
    check_memory(expect, f"n_ionodes={n_ionodes}: the transfers of a bidding workload")
    rng = np.random.default_rng(seed)
    n_busy = round(busy_ratio * n_ionodes)
    busy = np.zeros(n_ionodes, dtype=bool)
    busy[rng.choice(n_ionodes, size=n_busy, replace=False)] = True
    counts = np.maximum(rng.poisson(normal_requests, size=n_ionodes), 1)
    factor = rng.uniform(busy_factor[0], busy_factor[1], size=n_ionodes)
    counts = np.where(busy, np.rint(factor * normal_requests).astype(np.int64), counts)
    ionode = np.repeat(np.arange(n_ionodes), counts)
    n = ionode.size
    client = rng.integers(0, n_clients, size=n)
    large = rng.random(n) < large_ratio
    base = np.where(large, large_bytes, small_bytes)
    nbytes = np.rint(base * rng.uniform(1 - spread, 1 + spread, size=n)).astype(np.int64)
    perm = rng.permutation(n)
    return TransferSet(client[perm], ionode[perm], nbytes[perm], n_clients, n_ionodes)


def uniform_workload(
    n_transfers: int,
    n_clients: int,
    n_ionodes: int,
    min_bytes: int = 64 * KiB,
    max_bytes: int = 32 * MiB,
    seed: int = 0,
) -> TransferSet:
    """Transfers with uniformly random endpoints and sizes in ``[min_bytes, max_bytes]``.

    Examples
    --------
    >>> from orchestrator.workload import uniform_workload
    >>> uniform_workload(1000, 16, 4, seed=0).n_ionodes
    4
    """
    rng = np.random.default_rng(seed)
    return TransferSet(
        rng.integers(0, n_clients, n_transfers),
        rng.integers(0, n_ionodes, n_transfers),
        rng.integers(min_bytes, max_bytes + 1, n_transfers),
        n_clients,
        n_ionodes,
    )
