"""Measurements the main job and the benchmarks share: sizes, the raw write, a cost model.

``iorch run bips3d`` plans with a cost model measured on the cluster it runs
on, and reports the disk's raw rate beside its own; the benchmarks
(:mod:`orchestrator.bench.write`, :mod:`orchestrator.bench.stage`) measure the
same way. They live here so that the main job never imports a benchmark.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import defaults
from ..contributions import DatasetSpec
from ..cost import CostModel
from ..errors import InputError
from ..files import private_path, remove_path
from .cluster import IOCluster
from .directio import PositionedFile
from .probes import contribution, write_pieces
from .stage import write_stage

__all__ = [
    "calibrated_cost",
    "contribution",
    "parse_size",
    "pieces_write_seconds",
    "raw_write_bandwidth",
]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 10**6,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 10**9,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 10**12,
    "tib": 1 << 40,
    "p": 1 << 50,
    "pb": 10**15,
    "pib": 1 << 50,
    "e": 1 << 60,  # only to say it is too large ("1EiB" read as "not a number")
    "eb": 10**18,
    "eib": 1 << 60,
}


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in a size such as ``"2GiB"``, ``"512MiB"``, ``"1e6"``; ``what`` names it in errors.

    Examples
    --------
    >>> parse_size("2GiB"), parse_size("64 KiB"), parse_size("1000")
    (2147483648, 65536, 1000)
    >>> parse_size("1.2.3", "--stripe")
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: --stripe '1.2.3' is not a number with a unit such as MiB or GiB
    """
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    try:
        number = float(m.group(1)) if m else float("nan")
    except ValueError:
        number = float("nan")
    if not m or m.group(2).lower() not in _UNITS or number != number:
        raise InputError(f"{what} {text!r} is not a number with a unit such as MiB or GiB")
    value = number * _UNITS[m.group(2).lower()]
    if value < 1:
        raise InputError(f"{what} {text!r} must be at least one byte")
    if value >= 2**63:
        raise InputError(f"{what} {text!r} is beyond any disk (2**63 bytes or more)")
    if value != int(value) and m.group(2).lower() in ("", "b"):  # "1.5" was taken as 1 byte
        raise InputError(f"{what} {text!r} is not a whole number of bytes")
    return int(value)


def raw_write_bandwidth(
    directory: Path,
    nbytes: int,
    block: int = 8 << 20,
    data: np.ndarray | None = None,
    direct: bool = False,
    repeat: int = 1,
) -> float:
    """Bytes/s of one process writing ``nbytes`` sequentially in ``block``-byte writes + fsync.

    With ``direct``, whole pages go to the device with ``O_DIRECT``
    (:class:`~orchestrator.engine.directio.PositionedFile`, as the engine writes).
    With ``repeat`` above 1: one untimed write first, then the median of
    ``repeat`` timed ones. A single write is a poor measure of the disk: on
    the development machine the first write of a process ran at 350–500 MB/s
    and the next ones at 1.6–2.0 GB/s (fresh memory faulted in), which made
    ``make demo``'s "÷ raw disk" read 0.97 for a stage writing at a quarter of
    the disk's speed.

    ``data`` (bytes to write, cycled) defaults to the synthetic stage's kind
    of values: what is written matters where storage compresses or
    deduplicates below the file system (virtual disks often do), so the raw
    write is measured with the same kind of bytes as the stage.

    Examples
    --------
    >>> import tempfile
    >>> raw_write_bandwidth(Path(tempfile.mkdtemp()), 1 << 20) > 0
    True
    >>> raw_write_bandwidth(Path(tempfile.mkdtemp()), 1 << 20, repeat=3) > 0
    True
    """
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise InputError(f"repeat must be an int >= 1, got {repeat!r}")
    if repeat > 1:
        raw_write_bandwidth(directory, nbytes, block, data, direct)  # untimed
        rates = [raw_write_bandwidth(directory, nbytes, block, data, direct) for _ in range(repeat)]
        return float(np.median(rates))
    if data is None:
        width = 128
        rows = np.arange(max(1, min(block, nbytes) // (8 * width)), dtype=np.float64)
        data = np.repeat(rows[:, None], width, axis=1)
    buf = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8).data)
    # never a planted symlink, and gone when the block ends, even by Ctrl-C
    with private_path(directory, ".raw-bandwidth-", ".bin") as path:
        if direct:
            return _direct_write_bandwidth(path, nbytes, block, buf)
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        try:
            done = 0
            while done < nbytes:
                at = done % len(buf)
                done += os.write(fd, buf[at : at + min(block, nbytes - done)])
            os.fsync(fd)
        finally:
            os.close(fd)
        return nbytes / (time.perf_counter() - t0)


def _direct_write_bandwidth(path: Path, nbytes: int, block: int, buf: memoryview) -> float:
    t0 = time.perf_counter()
    f = PositionedFile(path)
    try:
        done = 0
        while done < nbytes:
            at = done % len(buf)
            piece = buf[at : at + min(block, nbytes - done, len(buf) - at)]
            f.write(done, piece)
            done += len(piece)
        f.fsync()
    finally:
        f.close()
    return nbytes / (time.perf_counter() - t0)


def pieces_write_seconds(
    cluster: IOCluster, directory: Path, sizes: npt.ArrayLike, seed: int = 0
) -> float:
    """Seconds for the compute workers to write pieces of these sizes into one file themselves.

    The pieces tile a new file; each compute worker writes an equal share of
    them, in random order, side by side with the others, as the engine's
    direct writes do (:class:`~orchestrator.engine.directio.PositionedFile`, whole
    pages with ``O_DIRECT``), then fsyncs — with no plan, no batches and no
    coordination. What a device does with pieces of a stage's sizes bounds
    any schedule of them on this machine: small writes are slower per byte
    than the large ones of :func:`raw_write_bandwidth`.

    Examples
    --------
    >>> pieces_write_seconds(cluster, Path("out"), [300_000] * 100)  # doctest: +SKIP
    0.041
    """
    from distributed import wait

    size = np.asarray(sizes, dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    workers = cluster.compute or cluster.ionodes
    order = np.random.default_rng(seed).permutation(size.size)
    # a name no one can plant a link at, made here and gone at the end (as the raw probe's)
    with private_path(directory, ".pieces-", ".bin") as path:
        os.truncate(path, int(size.sum()))
        t0 = time.perf_counter()
        futs = [
            cluster.client.submit(
                write_pieces,
                str(path),
                pos[order[k :: len(workers)]],
                size[order[k :: len(workers)]],
                workers=[w],
                pure=False,
            )
            for k, w in enumerate(workers)
        ]
        wait(futs)
        for f in futs:
            f.result()
        return time.perf_counter() - t0


def calibrated_cost(
    cluster: IOCluster,
    raw_bandwidth: float,
    nbytes: int = 256 << 20,
    directory: Path | None = None,
    fmt: str = defaults.FORMAT,
    stripe_bytes: int = defaults.STRIPE_BYTES,
) -> CostModel:
    """A planning model of this machine, measured: what one I/O node moves and writes per second,
    and what each unit costs beyond its bytes, while all of them work at once.

    With ``directory``, two calibration stages of ``nbytes`` with equal
    loads per I/O node are written there through the engine, in format
    ``fmt`` in stripes of ``stripe_bytes`` (each :data:`CALIBRATION_RUNS`
    times after one that warms up; the median counts): one in a single
    contiguous piece per client, one in pieces of about 250 kB, each about
    one unit. The
    two realized makespans give, per I/O node, the seconds per unit (their
    difference ÷ the difference in units; the model's ``network_latency``)
    and the rate of the bytes. Both include everything on a byte's way (cut,
    worker-to-worker copy, write, checksum, writeback), which on a small
    machine share the same CPUs — the rates of the parts alone would
    overstate it; and a device writes small pieces slower than large ones
    (measured here with ``O_DIRECT``: 0.6 GB/s in 64 KiB writes, 1.6 GB/s in
    4 MiB ones), which a model of bytes alone does not see. Without
    ``directory``, the concurrent worker-to-worker copy rate
    (:meth:`~orchestrator.engine.cluster.IOCluster.ingest_bandwidth`) and the raw
    disk bandwidth are shared equally by the I/O nodes.

    Examples
    --------
    >>> calibrated_cost(cluster, 400e6, directory=Path("out")).name  # doctest: +SKIP
    'calibrated'
    """
    n = cluster.n_ionodes
    if directory is None:
        return CostModel(
            network_bandwidth=cluster.ingest_bandwidth(nbytes) / n,
            disk_bandwidth=raw_bandwidth / n,
            network_latency=50e-6,
            disk_latency=50e-6,
            name="calibrated",
        )
    width = 128
    n_rows = max(n * 2, nbytes // (width * 8))
    spec = DatasetSpec("calibration", (n_rows, width), "float64")
    stripe = max(
        spec.row_bytes, min(stripe_bytes, spec.nbytes // n) // spec.row_bytes * spec.row_bytes
    )
    # the same bytes twice: in one contiguous piece per client, then in pieces of about
    # 250 kB (not a whole number of pages, as rows of a mesh are not) dealt round-robin to
    # as many clients as a stripe holds pieces, so each unit is about one piece. The
    # difference of the two makespans is what a unit costs beyond its bytes
    timed = []
    for clients, rows in (
        (2 * n, -(-n_rows // (2 * n))),
        (max(2 * n, stripe // CALIBRATION_PIECE), max(1, CALIBRATION_PIECE // spec.row_bytes)),
    ):
        owner = (np.arange(n_rows) // rows) % clients
        parts = [
            cluster.client.submit(
                contribution,
                c,
                np.flatnonzero(owner == c),
                width,
                pure=False,
                workers=[cluster.compute_worker(c)],
            )
            for c in range(clients)
        ]
        try:
            # the units counted are the plan's: runs cut at stripe ends, neighbours on
            # one I/O node merged (derive_transfers), not (client, stripe) pairs
            timed.append(_calibration_makespan(cluster, directory, spec, parts, stripe, fmt))
        finally:
            for p in parts:
                p.release()
    (t_big, u_big), (t_small, u_small) = timed
    per_unit = max(0.0, (t_small - t_big) / (u_small - u_big) * n) if u_small > u_big else 0.0
    bytes_time = t_big - u_big / n * per_unit
    if u_small < 2 * u_big or bytes_time < 0.5 * t_big:
        # the two stages differ too little in units (small stripes) for the difference of
        # their makespans to stand out of the noise: bytes only
        per_unit, bytes_time = 0.0, t_big
    rate = spec.nbytes / n / max(bytes_time, 1e-6)
    return CostModel(
        network_bandwidth=rate,
        disk_bandwidth=max(raw_bandwidth / n, rate),
        network_latency=per_unit,
        disk_latency=0.0,
        name="calibrated",
    )


#: bytes per piece of the calibration stage that measures what a unit costs
CALIBRATION_PIECE = 250_000
#: timed runs of each calibration stage (after one that warms up); their median counts
CALIBRATION_RUNS = 3


def _calibration_makespan(
    cluster: IOCluster, directory: Path, spec: DatasetSpec, parts: list[Any], stripe: int, fmt: str
) -> tuple[float, int]:
    """Realized makespan and units of a calibration stage: the median of
    :data:`CALIBRATION_RUNS`, after one that warms up.

    One sample was too few on a noisy machine: on make demo's dumps the same calibration
    gave 168 MB/s in one run and 578 in the next, and the realized ÷ planned makespans
    of the dumps after it swung between 0.8 and 2.4."""
    target = directory / f".calibration-{os.getpid()}.{'h5' if fmt == 'hdf5' else 'd'}"
    makespans, units = [], 0
    try:
        for i in range(1 + CALIBRATION_RUNS):
            # the way a stage of this size runs (direct writes by size, as write_stage
            # decides): in Zarr the stage in large pieces has each shard stored by the one
            # worker holding it, the one in small pieces has rows handed between workers,
            # which the difference then counts per unit, as a stage of interleaved rows pays
            res = write_stage(
                target,
                {spec.name: (spec, parts)},
                policy="ecf",
                cluster=cluster,
                stripe_bytes=stripe,
                overwrite=True,
                cost="modern",
                format=fmt,
            )
            remove_path(target)
            os.sync()
            if i:
                makespans.append(res.trace.makespan)
            assert res.plan is not None  # a calibration stage has rows
            units = res.plan.n_units
    finally:
        remove_path(target)
    return float(np.median(makespans)), units
