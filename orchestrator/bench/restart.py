"""``iorch bench restart``: a checkpoint read back into tasks through the I/O workers
(:func:`~orchestrator.engine.readstage.read_stage`) against every task opening the file
with h5py and reading its rows, in the same run on the same cluster.

The checkpoint (``gib`` GiB of 128-byte rows, written once by a stage and kept in
``out``) is read by ``tasks`` tasks. How their rows lie (``layout``):

- ``blocks``: each task a block of rows plus ``halo`` rows of its neighbours on both
  sides (replicas) — a few long runs, the pattern kindest to h5py;
- ``mesh``: one row per node of a device mesh generated as the BIPS3D case's (the
  real mesh's 32,888 nodes would make a 4 MB checkpoint of 128-byte rows), cut into
  ``tasks`` METIS parts; each task its part's nodes and one layer of their
  neighbours — thousands of scattered runs of a few dozen rows, replicated where
  parts meet: the restart of an unstructured-mesh code, and what collective reads
  are for. h5py's tasks read them with one fancy index each (ascending), faster
  here than a slice per run (about 3×) and, unlike a block covering the part (79-95 %
  of the file for each task), within memory.

Contenders, interleaved, ``repeat`` times:

- ``h5py``: one Dask task per task on the compute workers, ``h5py.File`` opened by
  the task, its rows read with a slice or one fancy index (what a user writes today);
- ``h5py + CRC-32 of its rows``: the same, each task then computing one CRC-32 of
  the rows it read. Not a real check (there is no checksum of a task's rows to
  compare with), but what checking every byte delivered costs at least: the bound
  of any verified read on this machine, which read_stage is (its stripes are
  checked against the manifest as they are read);
- ``read_stage``: the aggregators on the I/O workers read and check every stripe,
  the rows reach the tasks through shared memory on this host;
- ``read_stage (dask)``: the same, the rows sent through Dask as to another host.

Each contender ends when every task holds its rows on its worker. ``cold`` drops the
page cache before every run (root): then both read the disk.

With ``testbed`` (a profile's name) the run happens on an emulated cluster: the I/O
workers on I/O hosts of their own, every row crossing shaped links, and h5py's tasks
opening the checkpoint through a network file system the I/O hosts serve
(:mod:`orchestrator.testbed.netfs`) — what a user's tasks do on a cluster whose
storage is remote. ``read_stage (dask)`` is left out there: every row goes through
Dask anyway. The CPU of the testbed's scheduler and file system counts as ``other``.

Beside its time, each run's CPU time is taken per role — the compute workers, the I/O
workers, this process (the driver, and the scheduler where it runs here) — from
``/proc/<pid>/stat`` (clock ticks: 10 ms a process, so read medians over several
runs): on a machine whose cores the I/O workers share with the tasks, a contender's
total CPU over the cores bounds its time from below, and says what the verified read
costs beyond h5py's.

Examples
--------
>>> rows = run("out/bench-restart", gib=0.25, repeat=1)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..contributions import Contribution, DatasetSpec
from ..engine.cluster import IOCluster, local_cluster
from ..engine.readserver import policies_loaded
from ..engine.readstage import read_stage
from ..engine.stage import write_stage
from ..errors import InputError

__all__ = ["checkpoint", "mesh_rows", "run"]

ROW = 16  # float64 per row: 128-byte rows
#: the contender that bounds a checked read: h5py's, plus one CRC-32 pass over its rows
CHECKED = "h5py + CRC-32 of its rows"
#: how the tasks' rows lie in the checkpoint (:func:`run`)
LAYOUTS = ("blocks", "mesh")


def checkpoint(cluster: IOCluster, path: Path, gib: float, rows: int | None = None) -> int:
    """Write (once) a checkpoint of ``gib`` GiB (or of ``rows`` rows) through a stage;
    return its rows.

    Examples
    --------
    >>> checkpoint(cl, Path("out/ck.h5"), 0.1)  # doctest: +SKIP
    838860
    """
    n = int(gib * (1 << 30)) // (ROW * 8) if rows is None else rows
    if path.exists():
        return n
    rng = np.random.default_rng(0)
    parts = []
    writers = 8
    for c in range(writers):
        ids = np.arange(c * n // writers, (c + 1) * n // writers)
        values = rng.random((ids.size, ROW))
        parts.append(
            cluster.client.scatter(
                Contribution(c, ids, values), workers=[cluster.compute_worker(c)]
            )
        )
    write_stage(path, {"u": (DatasetSpec("u", (n, ROW), "float64"), parts)}, cluster=cluster)
    cluster.release(parts)
    return n


def mesh_rows(tasks: int, nodes: int, seed: int = 0) -> list[np.ndarray]:
    """Each task's rows when a device mesh of ``nodes`` nodes, generated as the BIPS3D
    case does (:func:`~orchestrator.workflows.bips3d.load_case`), is cut into ``tasks`` METIS parts:
    its part's nodes and one layer of its neighbours' (halo replicas), ascending —
    thousands of scattered runs of a few dozen rows, the decomposition an
    unstructured-mesh code restarts into.

    Examples
    --------
    >>> [r.size for r in mesh_rows(2, 2000)]  # doctest: +SKIP
    [1146, 1182]
    """
    from ..workflows.bips3d import load_case

    reps = load_case(nodes=nodes, parts=tasks, seed=seed).replicas
    node = np.repeat(np.arange(reps.indptr.size - 1), np.diff(reps.indptr))
    return [node[reps.clients == t] for t in range(tasks)]


def _h5py_task(path: str, want: tuple[int, int] | np.ndarray) -> np.ndarray:
    """A task's rows as a user reads them with h5py: a block as a slice, scattered rows
    (ascending, as h5py requires) with one fancy index."""
    import h5py

    with h5py.File(path, "r") as f:
        if isinstance(want, tuple):
            return np.asarray(f["u"][want[0] : want[1]])
        return np.asarray(f["u"][want])


def _h5py_checked_task(path: str, want: tuple[int, int] | np.ndarray) -> np.ndarray:
    """h5py's read, then one CRC-32 pass over the rows read (the checksum of
    :mod:`~orchestrator.engine.checksums`, as read_stage's checks use): what any read
    that checks every byte it delivers costs at least, checked by the task itself."""
    from ..engine.checksums import crc32

    rows = _h5py_task(path, want)
    crc32(np.ascontiguousarray(rows).data.cast("B"))
    return rows


def _trim() -> None:
    """Collect the garbage and give freed heap pages back (glibc), in this process."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _touch(nbytes: int) -> None:
    """Fault in ``nbytes`` of fresh memory in this process, then free it."""
    np.ones(nbytes, dtype=np.uint8)


def _settle(cluster: IOCluster, nbytes: int) -> None:
    """Every process of the run frees what the last contender left (its rows, released,
    may wait in a heap or a reference cycle), then each compute worker faults in and
    frees its share of the rows to come. A virtual machine hands freed memory back to
    its host after a while, and the next process to touch that much pays for getting it
    back: measured, h5py's runs took 0.15 s or 0.4-0.7 s after the Dask path's had
    freed 3 GiB. So no contender pays for another's."""
    cluster.client.run(_trim)
    _trim()
    share = nbytes // max(1, len(cluster.compute))
    cluster.client.run(_touch, share + share // 2, workers=cluster.compute)


def _drop_caches() -> None:
    import os

    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("1\n")


def run(
    out: str | Path,
    gib: float = 1.0,
    tasks: int = 16,
    halo: int = 2000,
    repeat: int = 3,
    cold: bool = False,
    cluster: IOCluster | None = None,
    note: Callable[[str], None] = lambda m: None,
    layout: str = "blocks",
    testbed: str | None = None,
) -> dict[str, Any]:
    """Every contender ``repeat`` times, interleaved; seconds per run, medians and the
    ratio of h5py's median to each contender's (above 1: faster than h5py).

    ``layout``: ``"blocks"`` — each task a block of rows plus ``halo`` rows of its
    neighbours on each side (contiguous: the pattern kindest to h5py); ``"mesh"`` —
    a device mesh of one node per row cut into ``tasks`` METIS parts, each task its
    part's nodes and their neighbours (:func:`mesh_rows`; ``halo`` is unused).

    Examples
    --------
    >>> res = run("out/bench-restart", gib=0.1, repeat=1)  # doctest: +SKIP
    >>> res["ratio"]["read_stage"] > 0  # doctest: +SKIP
    True
    """
    if not gib > 0 or not isinstance(tasks, int) or tasks < 1 or repeat < 1:
        raise InputError(f"gib > 0, tasks >= 1, repeat >= 1, got {gib!r}, {tasks!r}, {repeat!r}")
    if layout not in LAYOUTS:
        raise InputError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    nodes = int(gib * (1 << 30)) // (ROW * 8)
    if layout == "mesh" and nodes < 64 * tasks:
        raise InputError(
            f"gib={gib!r} makes a mesh of {nodes} nodes, too few for {tasks} parts of 64 or more"
        )
    if testbed is not None:
        if cluster is not None:
            raise InputError("a testbed run makes its own cluster: pass cluster or testbed")
        return _on_testbed(out, gib, tasks, halo, repeat, cold, note, layout, testbed)
    if cluster is None:
        with local_cluster(n_ionodes=4, n_compute=4) as own:
            return run(out, gib, tasks, halo, repeat, cold, own, note, layout)
    return _run(out, gib, tasks, halo, repeat, cold, cluster, note, layout)


def _on_testbed(
    out: str | Path,
    gib: float,
    tasks: int,
    halo: int,
    repeat: int,
    cold: bool,
    note: Callable[[str], None],
    layout: str,
    profile: str,
) -> dict[str, Any]:
    """:func:`run` on a testbed of ``profile``, h5py reading through its network file
    system (each compute worker its own mount of one I/O host's export)."""
    from .. import testbed as tbmod
    from ..errors import TestbedUnavailable
    from ..testbed import netfs

    folder = Path(out).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    why = tbmod.available() or netfs.available()
    if why:  # before minutes of building and writing
        raise TestbedUnavailable(why)
    netfs.check_exportable(folder)
    # an I/O worker holds its stripes (mapped: its RSS) and the pieces cut from them
    # until their tasks fetch them; a compute worker its tasks' rows. Dask spills to disk
    # from 60 % of the limit (measured at 1 GiB with 1 GiB each: the I/O workers spent
    # 7.9 CPU-s a restart, against 0.7 at 0.25 GiB), so the limit leaves that room
    limit = max(1 << 30, int(2.5 * gib * (1 << 30)))
    note(f"starting a {profile} testbed")
    with (
        tbmod.up(profile, n_io=4, n_compute=4, memory_limit=limit) as tb,
        tb.connect() as cl,
    ):
        # the checkpoint first: the stage writes it through the testbed's own links
        made = _checkpoint_for(cl, folder, gib, tasks, halo, layout, note)
        with netfs.exported(tb, cl, folder) as where:

            def others() -> dict[str, list[int]]:
                """The testbed's other processes: its scheduler, its file system's."""
                mine = set(cl.client.run(os.getpid).values())
                spaces = [h.ns for h in tb.hosts]
                rest = [p for ns in spaces for p in tbmod.netns.ns_pids(ns) if p not in mine]
                fs = [p for p in rest if _comm(p) in ("socat", "sftp-server", "sshfs")]
                return {"file system": fs, "scheduler": [p for p in rest if p not in fs]}

            res = _run(out, gib, tasks, halo, repeat, cold, cl, note, layout, where, others, made)
        res["testbed"] = {
            "id": tb.tid,
            "profile": profile,
            "link_bytes_per_s": tb.profile.io.rate,
            "network_fs": "sshfs (SFTP, no cipher), one mount per compute worker",
        }
        return res


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _file_system(path: str) -> str:
    """The type of the file system holding ``path`` as this process sees it (its mount
    table's longest matching mount point)."""
    from ..testbed.netfs import mounts

    best, kind = "", "?"
    for point, fs in mounts(os.getpid()):
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fs
    return kind


def _checkpoint_for(
    cluster: IOCluster,
    folder: Path,
    gib: float,
    tasks: int,
    halo: int,
    layout: str,
    note: Callable[[str], None],
) -> tuple[Path, list[tuple[int, int] | np.ndarray], list[dict[str, Any]]]:
    """The checkpoint (written once) and each task's rows: as wanted and as requested."""
    wants: list[tuple[int, int] | np.ndarray]
    if layout == "mesh":
        n = int(gib * (1 << 30)) // (ROW * 8)
        note(f"cutting a mesh of about {n} nodes into {tasks} parts")
        parts = mesh_rows(tasks, n)
        n = max(int(w.max()) for w in parts) + 1  # the generator's count is close
        path = folder / f"restart-mesh-{n}.h5"
        note("writing the checkpoint")
        checkpoint(cluster, path, gib, rows=n)
        return path, list(parts), [{"u": w} for w in parts]
    path = folder / f"restart-{gib:g}gib.h5"
    note("writing the checkpoint")
    n = checkpoint(cluster, path, gib)
    bounds = np.linspace(0, n, tasks + 1).astype(np.int64)
    wants = [
        (max(0, int(lo) - halo), min(n, int(hi) + halo)) for lo, hi in itertools.pairwise(bounds)
    ]
    return path, wants, [{"u": range(*w)} for w in wants if isinstance(w, tuple)]


def _run(
    out: str | Path,
    gib: float,
    tasks: int,
    halo: int,
    repeat: int,
    cold: bool,
    cluster: IOCluster,
    note: Callable[[str], None],
    layout: str,
    mounts: dict[str, Path] | None = None,
    others: Callable[[], dict[str, list[int]]] | None = None,
    made: tuple[Path, list[tuple[int, int] | np.ndarray], list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """:func:`run` on ``cluster``; ``mounts``: where each compute worker sees ``out``
    (h5py's tasks open the checkpoint there), else where it is; ``others``: more roles
    whose CPU counts (a testbed's scheduler and file system); ``made``: the checkpoint
    and the tasks' rows, if made already."""
    from distributed import wait

    folder = Path(out).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    if made is None:
        made = _checkpoint_for(cluster, folder, gib, tasks, halo, layout, note)
    path, wants, requests = made
    delivered = sum(_count(w) for w in wants) * ROW * 8
    where = [cluster.compute_worker(t) for t in range(tasks)]
    from ..engine.checksums import crc32

    note("reading every task's rows here, to check each contender's against")
    truth = [crc32(_h5py_task(str(path), w).data.cast("B")) for w in wants]
    # where each worker opens the file itself: here, or through its network mount
    seen_at = {w: str(path if mounts is None else mounts[w] / path.name) for w in where}
    # what the h5py tasks' file lies on, as their workers see it
    seen_on = sorted(
        {
            kind
            for w in set(where)
            for kind in cluster.client.run(_file_system, seen_at[w], workers=[w]).values()
        }
    )
    client = cluster.client
    read_stage(path, [{"u": range(10)}], cluster=cluster)  # kernels compiled, links measured
    cluster.client.run(policies_loaded, workers=cluster.ionodes)

    pids = _roles(cluster)
    if others is not None:
        pids.update(others())
    Run = tuple[float, dict[str, float]]

    def each_task(fn: Callable[[str, Any], np.ndarray]) -> Callable[[], Run]:
        """Every task opening the file itself, its rows read by ``fn``."""

        def go() -> Run:
            c0 = _cpu_seconds(pids)
            t0 = time.perf_counter()
            futs = [
                client.submit(fn, seen_at[w], want, workers=[w], pure=False)
                for want, w in zip(wants, where, strict=True)
            ]
            wait(futs)
            seconds = time.perf_counter() - t0
            c1 = _cpu_seconds(pids)
            _check(client, futs, wants, truth)
            cluster.release(futs)
            return seconds, {k: c1[k] - c0[k] for k in c1}

        return go

    def ours(shuffle: str) -> Callable[[], Run]:
        def go() -> Run:
            c0 = _cpu_seconds(pids)
            t0 = time.perf_counter()
            res = read_stage(path, requests, cluster=cluster, workers=where, shuffle=shuffle)
            seconds = time.perf_counter() - t0
            c1 = _cpu_seconds(pids)
            _check(client, res.futures, wants, truth, "u")
            cluster.release(res.futures)
            return seconds, {k: c1[k] - c0[k] for k in c1}

        return go

    contenders = {
        "h5py": each_task(_h5py_task),
        CHECKED: each_task(_h5py_checked_task),
        "read_stage": ours("auto"),
        "read_stage (dask)": ours("dask"),
    }
    if mounts is not None:  # every host its own: read_stage goes through Dask anyway
        del contenders["read_stage (dask)"]
    times: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, list[dict[str, float]]] = {k: [] for k in contenders}
    rng = np.random.default_rng(0)
    for r in range(repeat):
        # a new order each round (seeded), as write-bench has: in a fixed one, h5py always
        # followed the Dask path and ran at 0.17 s or at 0.5-0.7 s in turn
        for name in rng.permutation(list(contenders)).tolist():
            go = contenders[name]
            note(f"{name}, run {r + 1} of {repeat}")
            _settle(cluster, delivered)
            if cold:
                _drop_caches()
            seconds, used = go()
            times[name].append(seconds)
            cpu[name].append(used)
    median = {k: statistics.median(v) for k, v in times.items()}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "gib": gib,
        "tasks": tasks,
        "halo": halo if layout == "blocks" else None,
        "layout": layout,
        "cold": cold,
        "bytes": delivered,
        "seconds": times,
        "median": median,
        "ratio": {k: median["h5py"] / v for k, v in median.items()},
        # how close read_stage comes to the bound of a read checking every byte
        "of_checked_bound": {k: median[CHECKED] / v for k, v in median.items()},
        "copy_rate": _copy_rate(),
        "ionodes": cluster.n_ionodes,
        "compute": len(cluster.compute),
        "cores": cores,
        "h5py_file_system": seen_on,
        # per contender and role, the median CPU seconds of a run
        "cpu": {
            k: {role: statistics.median(run[role] for run in v) for role in v[0]}
            for k, v in cpu.items()
        },
    }


def _roles(cluster: IOCluster) -> dict[str, list[int]]:
    """The processes of each role: compute workers, I/O workers, this one."""
    got = cluster.client.run(os.getpid)
    io = set(cluster.ionodes)
    return {
        "compute": [p for w, p in got.items() if w not in io],
        "io": [p for w, p in got.items() if w in io],
        "driver": [os.getpid()],
    }


def _cpu_seconds(roles: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds each role's processes have run so far, threads that have ended
    included (a task that waits on a disk leaves Dask's pool, which starts a thread
    and ends one later): ``/proc/<pid>/stat``'s user and system time, in clock ticks."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for role, pids in roles.items():
        ticks = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:  # gone: a lost worker's time is not ours to count
                continue
            # the command may hold spaces and parentheses: the fields follow the last ")"
            fields = stat[stat.rindex(b")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        out[role] = ticks / tick
    return out


def _count(want: tuple[int, int] | np.ndarray) -> int:
    return want[1] - want[0] if isinstance(want, tuple) else int(want.size)


def _rows_summary(rows: Any, name: str | None) -> tuple[tuple[int, ...], int]:
    """A task's rows' shape and CRC-32, where they are (nothing moves but two numbers)."""
    from ..engine.checksums import crc32

    a = np.ascontiguousarray(rows if name is None else rows[name])
    return a.shape, crc32(a.data.cast("B"))


def _check(
    client: Any,
    futs: list[Any],
    wants: list[tuple[int, int] | np.ndarray],
    truth: list[int],
    name: str | None = None,
) -> None:
    """Every task's rows, against h5py's read of them here (a wrong row is no result)."""
    got = client.gather([client.submit(_rows_summary, f, name, pure=False) for f in futs])
    for t, ((shape, crc), want) in enumerate(zip(got, wants, strict=True)):
        if tuple(shape) != (_count(want), ROW):
            raise AssertionError(f"task {t} got {shape}, not {_count(want)} rows")
        if crc != truth[t]:
            raise AssertionError(f"task {t}'s rows differ from h5py's")


def _copy_rate(nbytes: int = 256 << 20) -> float:
    """Bytes/s of one memory copy in this process (the bound of any read from cache)."""
    a = np.ones(nbytes, dtype=np.uint8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return nbytes / best
