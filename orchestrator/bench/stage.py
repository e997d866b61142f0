"""``iorch bench stage``: a checkpoint written the way users write it today, beside the decorator.

(a) *baseline*: every Dask task computes its block and writes it into the one
shared HDF5 file / Zarr array itself, one task at a time under a distributed
lock (h5py and zarr-python cannot take concurrent writers to one file / one
shard) — what a straightforward script does;
(b) *orchestrated*: the same tasks decorated with
:func:`~orchestrator.output_stage`; their blocks go from the compute workers
to the I/O workers in the planned order and are committed atomically.

Both run in one session on the same embedded cluster, after an untimed
full-size warm-up of each (the first checkpoint of a workflow pays for
faulting in memory and loading compiled kernels; the next ones do not),
``repeat`` times alternating which goes first (medians are reported),
each run after an untimed write of its size (as in write-bench); both
outputs are checked, and the ratio is baseline time ÷ orchestrated time.
The orchestrated time includes what a commit costs (fsync, checksums,
rename); the baseline is given without and with a final fsync of its output.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.measure import raw_write_bandwidth
from ..files import fsync_path, fsync_tree, remove_path
from ..frontends.intercept import output_stage

__all__ = ["StageBenchRow", "block", "run"]

WIDTH = 1024  # float64 values per row: 8 KiB rows


def block(rank: int, tasks: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Task ``rank``'s rows and values (every value is its row id, so outputs are checkable).

    Examples
    --------
    >>> rows, values = block(1, 4, 10)
    >>> rows.tolist(), values.shape
    ([2, 3, 4], (3, 1024))
    """
    lo, hi = rank * n_rows // tasks, (rank + 1) * n_rows // tasks
    rows = np.arange(lo, hi, dtype=np.int64)
    return rows, np.repeat(rows.astype(np.float64)[:, None], WIDTH, axis=1)


def _baseline_task(path: str, fmt: str, rank: int, tasks: int, n_rows: int) -> int:
    """What users write: compute, then lock, open the shared target, write the block, close."""
    from distributed import Lock

    rows, values = block(rank, tasks, n_rows)
    with Lock(f"bench-stage:{path}"):
        if fmt == "zarr":
            import zarr

            zarr.open_array(path, mode="r+")[rows[0] : rows[-1] + 1] = values
        else:
            import h5py

            with h5py.File(path, "r+") as f:
                f["u"][rows[0] : rows[-1] + 1] = values
    return int(rows.size)


def _stage_task(step: int, rank: int, tasks: int, n_rows: int) -> Any:
    rows, values = block(rank, tasks, n_rows)
    return {"u": (rows, values)}


@dataclass(frozen=True)
class StageBenchRow:
    """One configuration: both ways' seconds."""

    tasks: int
    nbytes: int
    format: str
    baseline_seconds: float
    baseline_fsync_seconds: float
    orchestrated_seconds: float

    @property
    def speedup(self) -> float:
        """Baseline time ÷ orchestrated time (> 1: the orchestrator is faster)."""
        return self.baseline_seconds / self.orchestrated_seconds

    @property
    def durable_speedup(self) -> float:
        """The same with the baseline's file synced to disk, as a commit is."""
        return self.baseline_fsync_seconds / self.orchestrated_seconds


def _create_baseline(path: Path, fmt: str, n_rows: int) -> None:
    if fmt == "zarr":
        import zarr

        # the chunking a user would pick: ~8 MiB chunks
        zarr.create_array(path, shape=(n_rows, WIDTH), dtype="f8", chunks=(1024, WIDTH))
    else:
        import h5py

        with h5py.File(path, "w") as f:
            f.create_dataset("u", shape=(n_rows, WIDTH), dtype="f8")


def _check(path: Path, fmt: str, n_rows: int) -> None:
    """Spot-check rows of an output (every value equals its row id)."""
    probe = np.unique(np.linspace(0, n_rows - 1, 64).astype(np.int64))
    if fmt == "zarr" and path.suffix == ".zarr" and not (path / "master.h5").exists():
        import zarr

        node: Any = zarr.open(path, mode="r")
        arr: Any = node["u"] if hasattr(node, "arrays") else node
        got = np.stack([np.asarray(arr[int(r)]) for r in probe])
    else:
        import h5py

        with h5py.File(path, "r") as f:
            got = f["u"][probe.tolist()]
    if not np.array_equal(got, np.repeat(probe.astype(float)[:, None], WIDTH, axis=1)):
        raise RuntimeError(f"{path}: wrong values in the benchmark output")


def run(
    cluster: Any,
    directory: Path,
    sizes: Sequence[int],
    task_counts: Sequence[int],
    formats: Sequence[str],
    policy: str = "ecf",
    stripe_bytes: int = 8 << 20,
    advance: Callable[[str], None] = lambda msg: None,
    repeat: int = 3,
) -> list[StageBenchRow]:
    """Time both ways for every (size, tasks, format); outputs are checked, then deleted.

    Examples
    --------
    >>> from orchestrator.engine.cluster import local_cluster
    >>> with local_cluster(4, 2) as cl:  # doctest: +SKIP
    ...     rows = run(cl, Path("out"), [256 << 20], [16], ["hdf5"])
    """
    directory.mkdir(parents=True, exist_ok=True)
    compute = cluster.compute or cluster.ionodes
    rows = []

    def settle(nbytes: int) -> None:
        # untimed, before every run alike: on a virtual machine memory freed a while
        # ago goes back to the host and is slow to touch again (see write-bench)
        raw_write_bandwidth(directory, nbytes)
        os.sync()

    def baseline(fmt: str, ext: str, n_rows: int, tasks: int) -> tuple[float, float]:
        base = directory / f"baseline.{ext}"
        remove_path(base)
        settle(n_rows * WIDTH * 8)
        _create_baseline(base, fmt, n_rows)
        t0 = time.perf_counter()
        futures = [
            cluster.client.submit(
                _baseline_task,
                str(base),
                fmt,
                r,
                tasks,
                n_rows,
                workers=[compute[r % len(compute)]],
                pure=False,
            )
            for r in range(tasks)
        ]
        assert sum(cluster.client.gather(futures)) == n_rows
        t_base = time.perf_counter() - t0
        fsync_tree(base) if base.is_dir() else fsync_path(base)  # durable, like a commit
        t_sync = time.perf_counter() - t0
        _check(base, fmt, n_rows)
        remove_path(base)
        os.sync()  # the deletion settles here, untimed
        return t_base, t_sync

    def orchestrated(fmt: str, ext: str, n_rows: int, tasks: int, on: int = 0) -> float:
        orch = directory / f"orchestrated.{ext}"
        remove_path(orch)
        settle(n_rows * WIDTH * 8)
        stage = output_stage(
            _stage_task,
            target=str(orch),
            clients=tasks,
            format=fmt,
            policy=policy,
            stripe_bytes=stripe_bytes,
        )
        t0 = time.perf_counter()
        futures = [
            cluster.client.submit(
                stage, 0, r, tasks, n_rows, pure=False, workers=[compute[(r + on) % len(compute)]]
            )
            for r in range(tasks)
        ]
        cluster.client.gather(futures)
        t_orch = time.perf_counter() - t0
        _check(orch, fmt, n_rows)
        remove_path(orch)
        os.sync()
        return t_orch

    for fmt in formats:
        ext = "zarr" if fmt == "zarr" else "h5"
        # warm-up of both ways (imports, compiled kernels, worker clients), untimed
        baseline(fmt, ext, 4096, 4)
        orchestrated(fmt, ext, 4096, 4)
        # the last task to arrive leads the stage (plans it): any worker may, and each
        # loads the compiled kernels once, so each leads one small stage here
        for w in range(len(compute)):
            orchestrated(fmt, ext, 4096, 1, on=w)
        for nbytes in sizes:
            n_rows = max(1, nbytes // (WIDTH * 8))
            for tasks in task_counts:
                bases, syncs, orchs = [], [], []
                # untimed, at full size: a workflow checkpoints every few steps, so the
                # first checkpoint's costs (faulting in memory, loading compiled kernels
                # on the worker that leads) are not what each checkpoint costs
                baseline(fmt, ext, n_rows, tasks)
                orchestrated(fmt, ext, n_rows, tasks)
                for r in range(repeat):  # alternating which way goes first
                    if r % 2:
                        orchs.append(orchestrated(fmt, ext, n_rows, tasks))
                    b, sy = baseline(fmt, ext, n_rows, tasks)
                    bases.append(b)
                    syncs.append(sy)
                    if not r % 2:
                        orchs.append(orchestrated(fmt, ext, n_rows, tasks))
                rows.append(
                    StageBenchRow(
                        tasks,
                        n_rows * WIDTH * 8,
                        fmt,
                        float(np.median(bases)),
                        float(np.median(syncs)),
                        float(np.median(orchs)),
                    )
                )
                advance(f"{fmt}, {nbytes >> 20} MiB, {tasks} tasks")
    return rows
