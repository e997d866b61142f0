"""``iorch write-bench``: every policy dispatched for real, beside the raw disk bandwidth.

Synthetic contributions (rows scattered over clients in random-length runs,
with replicated halo rows) are written through the embedded cluster with
each policy; in the same run one process writes the same number of bytes
sequentially in large blocks to the same directory, which is the bandwidth
the stage is compared with.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .cluster import IOCluster
from .contributions import Contribution, DatasetSpec
from .cost import CostModel
from .files import remove_path
from .stage import write_stage

__all__ = [
    "BenchRow",
    "calibrated_cost",
    "parse_size",
    "raw_write_bandwidth",
    "run",
    "synthetic_stage",
]

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30}  # fmt: skip


def parse_size(text: str) -> int:
    """Bytes in a size such as ``"2GiB"``, ``"512MiB"``, ``"1e6"``.

    Examples
    --------
    >>> parse_size("2GiB"), parse_size("64 KiB"), parse_size("1000")
    (2147483648, 65536, 1000)
    """
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"size {text!r} is not a number with a unit such as MiB or GiB")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value < 1:
        raise ValueError(f"size {text!r} must be at least one byte")
    return int(value)


def synthetic_stage(
    nbytes: int,
    n_clients: int,
    row_bytes: int = 1024,
    halo: float = 0.01,
    seed: int = 0,
    materialize: bool = True,
) -> tuple[DatasetSpec, list[Any]]:
    """A dataset of ``nbytes`` whose rows are scattered over clients, some replicated.

    Rows go to clients in runs of random length (up to 512 rows, shorter for
    small datasets so every client gets runs); each client
    also holds a copy of ``halo`` of the rows after each of its runs.
    Values are cheap to make and to check (row id in every element). With
    ``materialize=False`` the list holds ``(client, rows)`` pairs, for
    building the values where they will live (see :func:`contribution`).

    Examples
    --------
    >>> spec, parts = synthetic_stage(1 << 20, 4)
    >>> spec.n_rows, len(parts)
    (1024, 4)
    """
    rng = np.random.default_rng(seed)
    width = max(1, row_bytes // 8)
    n_rows = max(1, nbytes // (width * 8))
    spec = DatasetSpec("field", (n_rows, width), "float64")
    owner = np.empty(n_rows, dtype=np.int64)
    longest = max(1, min(512, n_rows // (2 * n_clients)))
    r, k, cycle = 0, 0, rng.permutation(n_clients)
    while r < n_rows:  # every client gets runs: clients in a fresh random order each cycle
        run = int(rng.integers(max(1, longest // 8), longest + 1))
        owner[r : r + run] = cycle[k]
        r += run
        k += 1
        if k == n_clients:
            k, cycle = 0, rng.permutation(n_clients)
    extra = max(1, int(halo * 512))
    held = []
    for c in range(n_clients):
        rows = np.flatnonzero(owner == c)
        if rows.size == 0:
            continue
        ends = rows[np.flatnonzero(np.diff(rows) != 1)] if rows.size > 1 else rows
        halo_rows = (ends[:, None] + np.arange(1, extra + 1)).ravel()
        held.append((c, np.unique(np.concatenate([rows, halo_rows[halo_rows < n_rows]]))))
    return spec, [contribution(c, rows, width) for c, rows in held] if materialize else held


def contribution(client: int, rows: np.ndarray, width: int) -> Contribution:
    """The synthetic contribution of ``client``: every element of row ``r`` is ``r``.

    Examples
    --------
    >>> contribution(2, np.array([5, 7]), 3).values.tolist()
    [[5.0, 5.0, 5.0], [7.0, 7.0, 7.0]]
    """
    return Contribution(client, rows, np.repeat(rows.astype(np.float64)[:, None], width, axis=1))


def raw_write_bandwidth(directory: Path, nbytes: int, block: int = 8 << 20) -> float:
    """Bytes/s of one process writing ``nbytes`` sequentially in ``block``-byte writes + fsync.

    Examples
    --------
    >>> import tempfile
    >>> raw_write_bandwidth(Path(tempfile.mkdtemp()), 1 << 20) > 0
    True
    """
    path = directory / f".raw-bandwidth-{os.getpid()}.bin"
    buf = memoryview(os.urandom(min(block, nbytes)))
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        done = 0
        while done < nbytes:
            done += os.write(fd, buf[: min(len(buf), nbytes - done)])
        os.fsync(fd)
    finally:
        os.close(fd)
        seconds = time.perf_counter() - t0
        path.unlink(missing_ok=True)
    return nbytes / seconds


def calibrated_cost(cluster: IOCluster, raw_bandwidth: float) -> CostModel:
    """A planning model of this machine: measured worker-to-worker network, and the raw disk
    bandwidth shared equally by the I/O workers (so planned and realized times compare).

    Examples
    --------
    >>> calibrated_cost(cluster, 400e6).name  # doctest: +SKIP
    'calibrated'
    """
    return CostModel(network_bandwidth=cluster.network_bandwidth(),
                     disk_bandwidth=raw_bandwidth / cluster.n_ionodes,
                     network_latency=50e-6, disk_latency=50e-6, name="calibrated")  # fmt: skip


@dataclass(frozen=True)
class BenchRow:
    """One policy's measured write."""

    policy: str
    seconds: float
    throughput: float
    planned_makespan: float
    realized_makespan: float
    units: int


def run(
    cluster: IOCluster,
    directory: Path,
    nbytes: int,
    n_clients: int,
    fmt: str,
    policies: Sequence[str],
    stripe_bytes: int,
    strategy: str,
    advance: Callable[[], None] = lambda: None,
    gantt_dir: Path | None = None,
) -> tuple[float, list[BenchRow]]:
    """Measure the raw disk, then write the synthetic stage with every policy.

    The cost model used for planning is calibrated from the raw bandwidth
    (each I/O node gets an equal share of the disk) and the measured
    worker-to-worker bandwidth, so planned and realized makespans are
    comparable. Each output is verified by the commit
    protocol, then deleted.

    Examples
    --------
    >>> from orchestrator.cluster import local_cluster
    >>> with local_cluster(2, 1) as cl:  # doctest: +SKIP
    ...     raw, rows = run(cl, Path("out"), 1 << 24, 4, "hdf5", ["ecf"], 1 << 20, "contiguous")
    """
    spec, held = synthetic_stage(nbytes, n_clients, materialize=False)
    width = spec.shape[1]
    # build each contribution on a compute worker, as a workflow's tasks would:
    # the values never pass through this process
    parts = [cluster.client.submit(contribution, c, rows, width, pure=False,
                                   workers=[cluster.compute_worker(c)])
             for c, rows in held]  # fmt: skip
    raw = raw_write_bandwidth(directory, spec.nbytes)
    cost = calibrated_cost(cluster, raw)
    rows = []
    for p in policies:
        target = directory / f"write-bench-{p}.{'h5' if fmt == 'hdf5' else 'zarr'}"
        res = write_stage(target, {spec.name: (spec, parts)}, format=fmt, policy=p,
                          cluster=cluster, stripe_bytes=stripe_bytes, strategy=strategy,
                          overwrite=True, cost=cost)  # fmt: skip
        rows.append(BenchRow(p, res.seconds, res.throughput, res.plan.makespan,
                             res.trace.makespan, res.plan.n_units))  # fmt: skip
        if gantt_dir is not None:
            from .plots import close, realized_gantt

            tr = res.trace
            close(realized_gantt(res.plan, tr.unit, tr.ionode, tr.start, tr.end,
                                 path=gantt_dir / f"gantt-{p}.png"))  # fmt: skip
        remove_path(target)
        advance()
    return raw, rows
