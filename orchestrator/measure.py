"""Measurements the main job and the benchmarks share: sizes, the raw write, a cost model.

``iorch run bips3d`` plans with a cost model measured on the cluster it runs
on, and reports the disk's raw rate beside its own; the benchmarks
(:mod:`orchestrator.writebench`, :mod:`orchestrator.stagebench`) measure the
same way. They live here so that the main job never imports a benchmark.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np

from .cluster import IOCluster
from .contributions import Contribution, DatasetSpec
from .cost import CostModel
from .errors import InputError
from .files import remove_path
from .stage import write_stage

__all__ = ["calibrated_cost", "contribution", "parse_size", "raw_write_bandwidth"]

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
        raise InputError(f"size {text!r} is not a number with a unit such as MiB or GiB")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value < 1:
        raise InputError(f"size {text!r} must be at least one byte")
    return int(value)


def contribution(client: int, rows: np.ndarray, width: int) -> Contribution:
    """The synthetic contribution of ``client``: every element of row ``r`` is ``r``.

    Examples
    --------
    >>> contribution(2, np.array([5, 7]), 3).values.tolist()
    [[5.0, 5.0, 5.0], [7.0, 7.0, 7.0]]
    """
    return Contribution(client, rows, np.repeat(rows.astype(np.float64)[:, None], width, axis=1))


def raw_write_bandwidth(
    directory: Path,
    nbytes: int,
    block: int = 8 << 20,
    data: np.ndarray | None = None,
    direct: bool = False,
) -> float:
    """Bytes/s of one process writing ``nbytes`` sequentially in ``block``-byte writes + fsync.

    With ``direct``, whole pages go to the device with ``O_DIRECT``
    (:class:`~orchestrator.directio.PositionedFile`, as the engine writes).

    ``data`` (bytes to write, cycled) defaults to the synthetic stage's kind
    of values: what is written matters where storage compresses or
    deduplicates below the file system (virtual disks often do), so the raw
    write is measured with the same kind of bytes as the stage.

    Examples
    --------
    >>> import tempfile
    >>> raw_write_bandwidth(Path(tempfile.mkdtemp()), 1 << 20) > 0
    True
    """
    path = directory / f".raw-bandwidth-{os.getpid()}.bin"
    if data is None:
        width = 128
        rows = np.arange(max(1, min(block, nbytes) // (8 * width)), dtype=np.float64)
        data = np.repeat(rows[:, None], width, axis=1)
    buf = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8).data)
    if direct:
        return _direct_write_bandwidth(path, nbytes, block, buf)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        done = 0
        while done < nbytes:
            at = done % len(buf)
            done += os.write(fd, buf[at : at + min(block, nbytes - done)])
        os.fsync(fd)
    finally:
        os.close(fd)
        seconds = time.perf_counter() - t0
        path.unlink(missing_ok=True)
    return nbytes / seconds


def _direct_write_bandwidth(path: Path, nbytes: int, block: int, buf: memoryview) -> float:
    from .directio import PositionedFile

    t0 = time.perf_counter()
    path.write_bytes(b"")
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
        seconds = time.perf_counter() - t0
        path.unlink(missing_ok=True)
    return nbytes / seconds


def calibrated_cost(
    cluster: IOCluster,
    raw_bandwidth: float,
    nbytes: int = 256 << 20,
    directory: Path | None = None,
    fmt: str = "hdf5",
) -> CostModel:
    """A planning model of this machine, measured: what one I/O node moves and writes per second
    while all of them work at once.

    With ``directory``, a calibration stage of ``nbytes`` (equal loads, one
    contiguous piece per client and I/O node, so its plan is trivially at
    its lower bound) is written there twice through the engine, in format
    ``fmt``; the second
    run's bytes per I/O node ÷ its realized makespan is the rate. That rate
    includes everything a byte costs on its way (cut, worker-to-worker copy,
    write, checksum, writeback), which on a small machine share the same
    CPUs — the rates of the parts alone would overstate it. Without
    ``directory``, the concurrent worker-to-worker copy rate
    (:meth:`~orchestrator.cluster.IOCluster.ingest_bandwidth`) and the raw
    disk bandwidth are shared equally by the I/O nodes.

    Examples
    --------
    >>> calibrated_cost(cluster, 400e6, directory=Path("out")).name  # doctest: +SKIP
    'calibrated'
    """
    n = cluster.n_ionodes
    if directory is None:
        return CostModel(network_bandwidth=cluster.ingest_bandwidth(nbytes) / n,
                         disk_bandwidth=raw_bandwidth / n,
                         network_latency=50e-6, disk_latency=50e-6, name="calibrated")  # fmt: skip
    width = 128
    n_rows = max(n * 2, nbytes // (width * 8))
    spec = DatasetSpec("calibration", (n_rows, width), "float64")
    clients = 2 * n
    bounds = np.linspace(0, n_rows, clients + 1).astype(np.int64)
    parts = [cluster.client.submit(contribution, c, np.arange(bounds[c], bounds[c + 1]), width,
                                   pure=False, workers=[cluster.compute_worker(c)])
             for c in range(clients)]  # fmt: skip
    stripe = max(spec.row_bytes, -(-spec.nbytes // clients))  # one stripe per client
    target = directory / f".calibration-{os.getpid()}.{'h5' if fmt == 'hdf5' else 'd'}"
    rate = float("inf")
    try:
        for _ in range(2):  # the first run also warms the workers up
            # the way a stage of this size runs (direct writes by size, as write_stage
            # decides), except Zarr: each client holds whole shards here, which would all be
            # stored by the workers holding them; a stage of interleaved rows sends them
            res = write_stage(target, {spec.name: (spec, parts)}, policy="ecf",
                              cluster=cluster, stripe_bytes=stripe, overwrite=True,
                              cost="modern", format=fmt,
                              direct=False if fmt == "zarr" else None)  # fmt: skip
            remove_path(target)
            os.sync()
            rate = spec.nbytes / n / max(res.trace.makespan, 1e-6)
    finally:
        remove_path(target)
        for p in parts:
            p.release()
    return CostModel(network_bandwidth=rate, disk_bandwidth=max(raw_bandwidth / n, rate),
                     network_latency=50e-6, disk_latency=50e-6, name="calibrated")  # fmt: skip
