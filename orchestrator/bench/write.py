"""``iorch write-bench``: every policy dispatched for real, beside the raw disk bandwidth.

Synthetic contributions (rows scattered over clients in random-length runs,
with replicated halo rows) are written through the embedded cluster with
each policy; in the same run one process writes the same number of bytes
sequentially in large blocks to the same directory, which is the bandwidth
the stage is compared with.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..contributions import DatasetSpec
from ..engine.backends import get_backend
from ..engine.cluster import IOCluster
from ..engine.dispatch import DEFAULT_WINDOW
from ..engine.measure import (
    calibrated_cost,
    contribution,
    parse_size,
    pieces_write_seconds,
    raw_write_bandwidth,
)
from ..engine.probes import block, peak_rss
from ..engine.stage import write_stage
from ..files import fsync_path, fsync_tree, remove_path
from ..plots import close, realized_gantt

__all__ = [
    "BenchRow",
    "adios2_seconds",
    "calibrated_cost",
    "cpu_seconds",
    "h5py_gathered_seconds",
    "h5py_seconds",
    "ionode_peak_rss",
    "parse_size",
    "raw_write_bandwidth",
    "run",
    "stage_pieces",
    "synthetic_stage",
    "to_zarr_seconds",
]


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
    width = max(1, row_bytes // 8)
    n_rows = max(1, nbytes // (width * 8))
    spec = DatasetSpec("field", (n_rows, width), "float64")
    owner = _owners(n_rows, n_clients, seed)
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


def _owners(n_rows: int, n_clients: int, seed: int) -> npt.NDArray[np.int64]:
    """The client that owns each row of :func:`synthetic_stage` (runs of random length)."""
    rng = np.random.default_rng(seed)
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
    return owner


def stage_pieces(
    nbytes: int, n_clients: int, stripe_bytes: int, row_bytes: int = 1024, seed: int = 0
) -> npt.NDArray[np.int64]:
    """Bytes of each piece of :func:`synthetic_stage`: its owners' runs, cut at stripe ends.

    Examples
    --------
    >>> sizes = stage_pieces(1 << 20, 4, 1 << 18)
    >>> int(sizes.sum()), bool((sizes <= 1 << 18).all())
    (1048576, True)
    """
    spec, _ = synthetic_stage(nbytes, n_clients, row_bytes, seed=seed, materialize=False)
    owner = _owners(spec.n_rows, n_clients, seed)
    rows = np.arange(spec.n_rows)
    stripe = rows * spec.row_bytes // stripe_bytes
    starts = np.flatnonzero(np.r_[True, (owner[1:] != owner[:-1]) | (stripe[1:] != stripe[:-1])])
    return np.diff(np.r_[starts, spec.n_rows]).astype(np.int64) * spec.row_bytes


@dataclass(frozen=True)
class BenchRow:
    """One row of write-bench: a policy of ours, or an anchor measured in the same run.

    ``seconds`` holds every repetition; the reported time is their median.
    Anchors have no plan (``planned``/``realized`` are NaN).
    """

    name: str
    kind: str  # "anchor", "bound" or "policy"
    seconds: tuple[float, ...]
    nbytes: int
    planned: float = float("nan")
    realized: tuple[float, ...] = ()
    units: int = 0
    note: str = ""
    #: policies: the most bytes any I/O worker held at once (bounded by the window)
    peak_held: int = 0
    #: median CPU seconds of each kind of process over the repetitions: ``"stage"`` (this
    #: process: the stage, the client, the embedded scheduler), ``"io"`` (the I/O
    #: workers), ``"compute"`` (the workers holding the contributions)
    cpu: dict[str, float] = field(default_factory=dict)
    #: median over the repetitions of all those CPU seconds ÷ (cores × the row's wall time,
    #: its untimed steps included): near 1, the row is bound by the machine's CPUs
    cpu_busy: float = float("nan")

    @property
    def median(self) -> float:
        """Median seconds over the repetitions."""
        return float(np.median(self.seconds))

    @property
    def best(self) -> float:
        """Fastest repetition: interference on a shared machine only ever slows a row down."""
        return float(np.min(self.seconds))

    @property
    def throughput(self) -> float:
        """Bytes per second of the median repetition."""
        return self.nbytes / self.median

    @property
    def realized_makespan(self) -> float:
        """Median realized makespan (policies)."""
        return float(np.median(self.realized)) if self.realized else float("nan")

    def as_dict(self, raw: BenchRow, h5: BenchRow | None) -> dict[str, Any]:
        """A flat record for results.json / CSV, with ratios to the raw write and to h5py
        (of the medians, and of the best repetitions)."""
        nan = float("nan")
        return {
            "name": self.name,
            "kind": self.kind,
            "nbytes": self.nbytes,
            "seconds": self.median,
            "best_seconds": self.best,
            "all_seconds": list(self.seconds),
            "mb_per_s": self.throughput / 1e6,
            "ratio_raw": raw.median / self.median,
            "ratio_h5py": h5.median / self.median if h5 else nan,
            "best_ratio_raw": raw.best / self.best,
            "best_ratio_h5py": h5.best / self.best if h5 else nan,
            "planned_makespan": self.planned,
            "realized_makespan": self.realized_makespan,
            "realized_over_planned": self.realized_makespan / self.planned
            if self.planned == self.planned and self.planned > 0
            else float("nan"),
            "units": self.units,
            "note": self.note,
            "cpu_seconds": dict(self.cpu),
            "cpu_busy": self.cpu_busy,
            "peak_held": self.peak_held,
        }


def _values(spec: DatasetSpec) -> np.ndarray:
    """The whole synthetic dataset in this process (every element of row r is r)."""
    rows = np.arange(spec.shape[0], dtype=np.float64)
    return np.repeat(rows[:, None], spec.shape[1], axis=1)


def h5py_seconds(path: Path, values: np.ndarray) -> float:
    """One process writes ``values`` with h5py (contiguous dataset), closes and fsyncs.

    Examples
    --------
    >>> import tempfile
    >>> h5py_seconds(Path(tempfile.mkdtemp()) / "a.h5", np.ones((4, 4))) > 0
    True
    """
    import h5py

    t0 = time.perf_counter()
    with h5py.File(path, "w") as f:
        f.create_dataset("field", data=values)
    fsync_path(path)
    return time.perf_counter() - t0


def h5py_gathered_seconds(
    cluster: IOCluster, path: Path, parts: Sequence[Any], spec: DatasetSpec
) -> float:
    """What a Dask user's own h5py code does with contributions held by the workers:
    gather them here, put each client's rows in place (a replicated row twice, the
    same values), write the dataset with h5py from this one process, close, fsync.

    Examples
    --------
    >>> h5py_gathered_seconds(cl, Path("out/g.h5"), parts, spec)  # doctest: +SKIP
    0.061
    """
    import h5py

    t0 = time.perf_counter()
    whole = np.empty(spec.shape, dtype=spec.dtype)
    for c in cluster.client.gather(list(parts)):
        whole[c.rows] = c.values
    with h5py.File(path, "w") as f:
        f.create_dataset("field", data=whole)
    fsync_path(path)
    return time.perf_counter() - t0


def adios2_seconds(path: Path, values: np.ndarray) -> float:
    """One process writes ``values`` as ADIOS2 BP5 (serial), closes and fsyncs the directory.

    Examples
    --------
    >>> import tempfile
    >>> adios2_seconds(Path(tempfile.mkdtemp()) / "a.bp", np.ones((4, 4))) > 0  # doctest: +SKIP
    True
    """
    import adios2

    t0 = time.perf_counter()
    with adios2.Stream(str(path), "w") as s:
        s.write("field", values, list(values.shape), [0, 0], list(values.shape))
    fsync_tree(path)
    return time.perf_counter() - t0


def to_zarr_seconds(cluster: IOCluster, path: Path, spec: DatasetSpec, chunk_rows: int) -> float:
    """``dask.array.to_zarr`` on the cluster's workers, from blocks already in their memory.

    The blocks are computed and persisted on the compute workers first (as
    a workflow's results would be); the time is the write plus an fsync of
    the store.

    Examples
    --------
    >>> to_zarr_seconds(cl, Path("a.zarr"), spec, 1024)  # doctest: +SKIP
    1.7
    """
    import dask.array as da
    from dask import delayed

    n_rows, width = spec.shape
    n_blocks = -(-n_rows // chunk_rows)
    blocks = [
        da.from_delayed(
            delayed(block, pure=True)(i, chunk_rows, n_rows, width),
            shape=(min(chunk_rows, n_rows - i * chunk_rows), width),
            dtype=np.float64,
        )
        for i in range(n_blocks)
    ]
    x = da.concatenate(blocks, axis=0)
    with cluster.client.as_current():
        x = x.persist(workers=cluster.compute or None)
        from distributed import wait

        wait(x)
        t0 = time.perf_counter()
        da.to_zarr(x, str(path), overwrite=True)
        fsync_tree(path)
        seconds = time.perf_counter() - t0
    del x
    return seconds


def run(
    cluster: IOCluster,
    directory: Path,
    nbytes: int,
    n_clients: int,
    fmt: str,
    policies: Sequence[str],
    stripe_bytes: int,
    strategy: str,
    advance: Callable[[str], None] = lambda msg: None,
    gantt_dir: Path | None = None,
    repeat: int = 3,
    anchors: bool = True,
    window: int | None = None,
) -> list[BenchRow]:
    """Every policy dispatched for real, beside the anchors, ``repeat`` rounds in one run.

    Each round measures, in turn: the raw sequential write, h5py from one
    process, ``dask.array.to_zarr`` on the cluster's workers, ADIOS2 BP5
    (when ``adios2`` is importable), the cluster's worker-to-worker copy of
    the same bytes with no write (the bound of any dispatch that moves data
    between processes), then every policy. With ``anchors=False`` only the
    raw write and the policies run (for stages too large to hold in this
    process, and to read the I/O workers' peak memory of the stage alone).
    All are fsync'd; the rows run in a new order each round (seeded), so
    none always comes first or after the same row. Before every row an
    untimed write of the stage's size puts the machine in the same state (a
    virtual machine hands freed memory back to its host, and the first
    writer after a while pays for faulting it in). Outputs are verified
    (policies: by the commit protocol) and deleted.

    Examples
    --------
    >>> from orchestrator.engine.cluster import local_cluster
    >>> with local_cluster(2, 1) as cl:  # doctest: +SKIP
    ...     rows = run(cl, Path("out"), 1 << 24, 4, "hdf5", ["ecf"], 1 << 20, "contiguous")
    """
    spec, held = synthetic_stage(nbytes, n_clients, materialize=False)
    width = spec.shape[1]
    # build each contribution on a compute worker, as a workflow's tasks would:
    # the values never pass through this process
    parts = [
        cluster.client.submit(
            contribution, c, rows, width, pure=False, workers=[cluster.compute_worker(c)]
        )
        for c, rows in held
    ]
    values = _values(spec) if anchors else None
    raw_write_bandwidth(directory, spec.nbytes, data=values)  # warm-up
    os.sync()
    raw0 = raw_write_bandwidth(directory, spec.nbytes, data=values)
    cost = calibrated_cost(
        cluster,
        raw0,
        min(spec.nbytes, 256 << 20),
        directory=directory,
        fmt=fmt,
        stripe_bytes=stripe_bytes,
    )
    try:
        import adios2  # noqa: F401

        has_adios = True
    except ImportError:
        has_adios = False
    ext = "h5" if fmt == "hdf5" else "zarr"
    chunk_rows = max(1, stripe_bytes // spec.row_bytes)
    jobs: list[tuple[str, str, Callable[[], tuple[float, Any]]]] = []

    def raw_job() -> tuple[float, Any]:
        return spec.nbytes / raw_write_bandwidth(directory, spec.nbytes, data=values), None

    jobs.append(("raw sequential write", "anchor", raw_job))
    jobs.append(
        (
            "raw sequential write, O_DIRECT",
            "anchor",
            lambda: (
                spec.nbytes / raw_write_bandwidth(directory, spec.nbytes, data=values, direct=True),
                None,
            ),
        )
    )
    if values is not None:
        jobs.append(
            (
                "h5py, one process",
                "anchor",
                lambda: (h5py_seconds(directory / "anchor.h5", values), None),
            )
        )
        jobs.append(
            (
                "h5py, after gathering from the workers",
                "anchor",
                lambda: (
                    h5py_gathered_seconds(cluster, directory / "gathered.h5", parts, spec),
                    None,
                ),
            )
        )
        jobs.append(
            (
                "dask.array.to_zarr",
                "anchor",
                lambda: (
                    to_zarr_seconds(cluster, directory / "anchor.zarr", spec, chunk_rows),
                    None,
                ),
            )
        )
        if has_adios:
            bp = directory / "anchor.bp"
            jobs.append(
                ("ADIOS2 BP5, one process", "anchor", lambda: (adios2_seconds(bp, values), None))
            )
        # capped at 1 GiB: the bound is a rate, and the probe's arrays land on the I/O workers
        probe = min(spec.nbytes, 1 << 30)
        jobs.append(
            (
                "worker-to-worker copy, no write",
                "bound",
                lambda: (spec.nbytes / cluster.ingest_bandwidth(probe, repeats=1), None),
            )
        )
    if fmt == "hdf5":
        # what the device does with pieces of this stage's sizes, written by the compute
        # workers themselves (as direct writes are) with no plan: the bound of any policy
        sizes = stage_pieces(nbytes, n_clients, stripe_bytes)
        jobs.append(
            (
                "the stage's pieces, written by the workers, no plan",
                "bound",
                lambda: (pieces_write_seconds(cluster, directory, sizes), None),
            )
        )

    def policy_job(p: str, direct: bool = True) -> Callable[[], tuple[float, Any]]:
        def go() -> tuple[float, Any]:
            target = directory / f"write-bench-{p}.{ext}"
            res = write_stage(
                target,
                {spec.name: (spec, parts)},
                format=fmt,
                policy=p,
                cluster=cluster,
                stripe_bytes=stripe_bytes,
                strategy=strategy,
                overwrite=True,
                cost=cost,
                window=window or DEFAULT_WINDOW,
                direct=direct,
            )
            if gantt_dir is not None:
                tr = res.trace
                name = f"gantt-{p}.png" if direct else f"gantt-{p}-sent.png"
                assert res.plan is not None  # a benchmark stage has rows
                unit, ionode, start, end = tr.writes()
                close(
                    realized_gantt(
                        res.plan,
                        unit,
                        ionode,
                        start,
                        end,
                        path=gantt_dir / name,
                        began=tr.began,
                        flush_start=tr.flush_start,
                        flush_end=tr.flush_end,
                    )
                )
            remove_path(target)
            return res.seconds, res

        return go

    for p in policies:
        jobs.append((p, "policy", policy_job(p)))
    if policies and get_backend(fmt).direct_writes({}):
        # the same plan with every byte sent to the I/O workers, as between machines
        jobs.append(
            (
                f"{policies[0]}, bytes sent to the I/O workers",
                "policy",
                policy_job(policies[0], direct=False),
            )
        )
    pids = cluster.worker_pids()
    kinds = {
        "stage": [os.getpid()],
        "io": [pids[a] for a in cluster.ionodes if a in pids],
        "compute": [pids[a] for a in cluster.compute if a in pids],
    }
    cpu: dict[str, dict[str, list[float]]] = {name: {k: [] for k in kinds} for name, _, _ in jobs}
    busy: dict[str, list[float]] = {name: [] for name, _, _ in jobs}
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in jobs}
    realized: dict[str, list[float]] = {name: [] for name, _, _ in jobs}
    plans: dict[str, Any] = {}
    last: dict[str, Any] = {}
    # a fresh order every round, the same in every run: rotating the list changed who went
    # first but not who followed whom (ecf always came right after the bound row, and its
    # sources then spent twice the CPU they spend alone)
    shuffle = np.random.default_rng(0)
    for _ in range(repeat):
        for i in shuffle.permutation(len(jobs)).tolist():
            name, _, job = jobs[i]
            # untimed, before every row alike: write and delete the stage's size. On a
            # virtual machine, memory freed a while ago (the last row's page cache) is
            # handed back to the host and slow to touch again; whichever row came first
            # would pay for it (measured: 1.5-1.9 s instead of 0.6 s for 1 GiB)
            raw_write_bandwidth(directory, spec.nbytes, data=values)
            os.sync()
            before, t0 = cpu_seconds(kinds), time.perf_counter()
            sec, res = job()
            after, t1 = cpu_seconds(kinds), time.perf_counter()
            for who in kinds:
                cpu[name][who].append(after[who] - before[who])
            busy[name].append(
                sum(after[w] - before[w] for w in kinds) / ((os.cpu_count() or 1) * (t1 - t0))
            )
            seconds[name].append(sec)
            if res is not None:
                realized[name].append(res.trace.makespan)
                plans[name] = res.plan
                last[name] = res
            for leftover in ("anchor.h5", "gathered.h5", "anchor.zarr", "anchor.bp"):
                remove_path(directory / leftover)
            # untimed: the deletions' discards and writeback settle here, not inside the
            # next row (on a disk mounted with `discard` they otherwise stall its writes)
            os.sync()
            advance(name)
    rows = []
    peaks = {name: int(res.trace.peak_held.max()) for name, res in last.items()}
    for name, kind, _ in jobs:
        plan = plans.get(name)
        rows.append(
            BenchRow(
                name,
                kind,
                tuple(seconds[name]),
                spec.nbytes,
                planned=plan.makespan if plan is not None else float("nan"),
                realized=tuple(realized[name]),
                units=plan.n_units if plan is not None else 0,
                peak_held=peaks.get(name, 0),
                cpu={k: float(np.median(v)) for k, v in cpu[name].items() if v},
                cpu_busy=float(np.median(busy[name])) if busy[name] else float("nan"),
            )
        )
    return rows


def cpu_seconds(kinds: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds (user + system) each kind of process has used so far, summed over its PIDs.

    A process that is gone (a worker restarted) counts for nothing.

    Examples
    --------
    >>> cpu_seconds({"stage": [os.getpid()]})["stage"] > 0
    True
    """
    import psutil  # a dependency of distributed

    out = {}
    for kind, pids in kinds.items():
        total = 0.0
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        out[kind] = total
    return out


def ionode_peak_rss(cluster: IOCluster) -> list[int]:
    """Peak resident memory (bytes) of every I/O worker process since it started.

    Examples
    --------
    >>> ionode_peak_rss(cl)  # doctest: +SKIP
    [187654144, 190238720]
    """
    got = cluster.client.run(peak_rss, workers=list(cluster.ionodes))
    return [int(got[a]) for a in cluster.ionodes]
