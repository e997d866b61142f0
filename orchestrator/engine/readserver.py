"""The I/O node's side of a restart read: one server thread per I/O node in the worker
process serves the aggregators' requests one at a time, in the read policy's order
over every request it holds — from every application restarting at that moment.

An aggregator task (:func:`aggregate`) queues its request here, leaves Dask's thread
pool while it waits (``secede``: the worker's one thread runs the next aggregator,
so the node sees every pending request), gets its stripes back, checked against
the manifest's checksums, and cuts them into the pieces its tasks need.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError
from .checksums import stripe_checksum

__all__ = [
    "AggregatorTask",
    "Segment",
    "aggregate",
    "copy_from_segment",
    "release",
    "served",
    "sweep",
]


@dataclass
class AggregatorTask:
    """What one aggregator needs: the checkpoint, its stripes and pieces, and what its
    node orders it by (its application, collective access, estimated read and shuffle,
    its application's largest shuffle)."""

    path: str
    fmt: str
    node: int
    app: tuple[int, str]
    access: int
    policy: str
    window: int
    threshold: float
    read_seconds: float
    shuffle_seconds: float
    app_shuffle: float
    #: per dataset: (dtype str, row shape, stripe bytes, total bytes, checksums)
    datasets: dict[str, tuple[str, tuple[int, ...], int, int, dict[str, str]]]
    stripes: dict[str, Any]
    pieces: dict[int, dict[str, Any]]
    #: tasks on this worker's host: their rows are left in shared memory for them to
    #: map or copy, in one segment per dataset (named here) that every aggregator of the
    #: application on this host writes its stripes into, at their place in the dataset
    local: frozenset[int] = frozenset()
    segments: dict[str, str] = field(default_factory=dict)


@dataclass
class _Request:
    task: AggregatorTask
    arrival: int
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    start: float = 0.0
    end: float = 0.0
    position: int = 0


class _NodeServer:
    """One I/O node's queue and the thread that serves it."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.cond = threading.Condition()
        self.pending: list[_Request] = []
        self.arrivals = itertools.count()
        self.served = 0
        #: (application, access, start, end) of every request served, in order
        self.log: list[tuple[tuple[int, str], int, float, float]] = []
        self.thread = threading.Thread(target=self._loop, name=f"iorch-read-io-{node}", daemon=True)
        self.thread.start()

    def submit(self, task: AggregatorTask) -> _Request:
        with self.cond:
            req = _Request(task, next(self.arrivals))
            self.pending.append(req)
            self.cond.notify_all()
        return req

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
            gate = _FAULTS.get("hold")
            if gate is not None:  # a test's busy disk: requests pile up meanwhile
                gate.wait()
            with self.cond:
                req = self._next()
                self.pending.remove(req)
            req.start = time.time()
            try:
                req.result = _read(req.task)
            except BaseException as err:  # handed to the aggregator, raised there
                req.error = err
            req.end = time.time()
            with self.cond:
                req.position = self.served
                self.served += 1
                self.log.append((req.task.app, req.task.access, req.start, req.end))
            req.done.set()

    def _next(self) -> _Request:
        """The head of the policy's order over what is pending."""
        if len(self.pending) == 1:
            return self.pending[0]
        policies = {r.task.policy for r in self.pending}
        policy = policies.pop() if len(policies) == 1 else "nio"  # disagreeing: arrival
        if policy == "nio":
            return min(self.pending, key=lambda r: r.arrival)
        from ..reads import ReadSet, order_reads  # Numba: loaded when ordering is needed

        apps = sorted({r.task.app for r in self.pending})
        rank = {a: i for i, a in enumerate(apps)}
        n = len(self.pending)
        # one phantom aggregator per application carries its largest shuffle, so that
        # acceptable delays are those of the whole application, not of what is here
        agg_app = [rank[r.task.app] for r in self.pending] + list(range(len(apps)))
        worst = {a: 0.0 for a in apps}
        for r in self.pending:
            worst[r.task.app] = max(worst[r.task.app], r.task.app_shuffle)
        shuffle = [r.task.shuffle_seconds for r in self.pending] + [worst[a] for a in apps]
        access = [r.task.access for r in self.pending] + [0] * len(apps)
        rs = ReadSet(
            node=[0] * n,
            agg=list(range(n)),
            read=[r.task.read_seconds for r in self.pending],
            agg_app=agg_app,
            shuffle=shuffle,
            arrival=[r.arrival for r in self.pending],
            access=access,
            n_nodes=1,
        )
        head = order_reads(rs, policy, self.pending[0].task.window, self.pending[0].task.threshold)
        return self.pending[int(head[0][0])]


_SERVERS: dict[int, _NodeServer] = {}
_FAULTS: dict[str, Any] = {}


def inject(hold: threading.Event | None = None) -> None:
    """Fault hook for tests: while ``hold`` is not set, no node of this process starts
    serving (a disk busy with something else); ``None`` removes the hook.

    Examples
    --------
    >>> gate = threading.Event()
    >>> inject(hold=gate)
    >>> inject()
    """
    if hold is None:
        _FAULTS.pop("hold", None)
    else:
        _FAULTS["hold"] = hold


_LOCK = threading.Lock()


def _server(node: int) -> _NodeServer:
    with _LOCK:
        if node not in _SERVERS:
            if not _SERVERS:
                sweep()  # what workers that died before us left in shared memory
            _SERVERS[node] = _NodeServer(node)
        return _SERVERS[node]


def served(node: int) -> list[tuple[tuple[int, str], int, float, float]]:
    """What this process's server of ``node`` served, in order: (application, access,
    start, end) — for tests and the benchmark's pictures.

    Examples
    --------
    >>> served(99)
    []
    """
    with _LOCK:
        s = _SERVERS.get(node)
    if s is None:
        return []
    with s.cond:
        return list(s.log)


class _Stripes:
    """Reads stripes of one checkpoint: ``pread`` where the dataset is one contiguous
    extent of one HDF5 file, the format's own reader otherwise."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = Path(path), fmt
        self.base: dict[str, int | None] = {}
        self.fd: int | None = None
        self.map: Any = None
        if fmt == "hdf5":
            import h5py

            with h5py.File(self.path, "r") as f:
                for name in f:
                    ds = f[name]
                    if isinstance(ds, h5py.Dataset):
                        off = ds.id.get_offset() if ds.chunks is None else None
                        self.base[name] = None if off is None else int(off)
            self.fd = os.open(self.path, os.O_RDONLY)

    def view(self, name: str, offset: int, nbytes: int) -> memoryview | None:
        """The bytes in place (the file mapped read-only: no copy), where the dataset is
        one extent of one file; None otherwise."""
        base = self.base.get(name)
        if self.fd is None or base is None:
            return None
        if self.map is None:
            import mmap

            size = os.fstat(self.fd).st_size
            self.map = mmap.mmap(self.fd, size, prot=mmap.PROT_READ)
        if base + offset + nbytes > len(self.map):
            raise CheckpointError(f"{self.path}: {name}: stripe at byte {offset} is truncated")
        return memoryview(self.map)[base + offset : base + offset + nbytes]

    def read_into(self, name: str, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the dataset's bytes from ``offset`` (no copy where ``pread``
        can read straight into it)."""
        base = self.base.get(name)
        if self.fd is not None and base is not None:
            got = os.preadv(self.fd, [out], base + offset)
            if got != len(out):
                raise CheckpointError(f"{self.path}: {name}: stripe at byte {offset} is truncated")
            return
        from .backends import get_backend

        data = get_backend(self.fmt).read_bytes(self.path, name, offset, len(out))
        if len(data) != len(out):
            raise CheckpointError(f"{self.path}: {name}: stripe at byte {offset} is truncated")
        out[:] = data

    def close(self) -> None:
        # the mapping goes with its last view (a buffer handed out may still use it)
        self.map = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


SHM = Path("/dev/shm")
_PREFIX = "iorch-read-"
_SEGMENTS: dict[tuple[int, str], list[Segment]] = {}  # per application, to release


class Segment:
    """One dataset of one restart in shared memory on this host: a file in ``/dev/shm``
    holding the dataset's bytes at their offsets (sparse: only the stripes written take
    memory). Every aggregator of the restart on this host writes into it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = SHM / name
        self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        st = os.fstat(self.fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:  # someone else's file, by name
            os.close(self.fd)
            self.fd = None
            raise CheckpointError(f"{self.path} exists and is not this restart's: refused")

    def write(self, data: memoryview, offset: int) -> None:
        """Put ``data`` at ``offset``."""
        assert self.fd is not None
        if os.pwrite(self.fd, data, offset) != len(data):
            raise OSError(f"short write to {self.path}")

    def release(self) -> None:
        """Remove the segment; tasks that mapped it keep their rows."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def segment_name(app: tuple[int, str], token: str, dataset: int) -> str:
    """The name of a restart's segment: this host, the driver's PID (for :func:`sweep`),
    a token unique to the restart, the dataset's number.

    Examples
    --------
    >>> segment_name((1, "a"), "12-3", 0).startswith("iorch-read-")
    True
    """
    return f"{_PREFIX}{_hostname()}-{token}-{dataset}"


def _hostname() -> str:
    import socket

    return socket.gethostname().replace("-", "_")


def release(app: tuple[int, str]) -> int:
    """Remove the shared-memory segments this worker made for an application's restart
    (its tasks have their rows); return how many.

    Examples
    --------
    >>> release((0, "nothing"))
    0
    """
    with _LOCK:
        segs = _SEGMENTS.pop(tuple(app), [])  # type: ignore[arg-type]
    for seg in segs:
        seg.release()
    return len(segs)


def sweep() -> int:
    """Remove the segments of workers that are gone (a restart whose driver or worker
    died); return how many.

    Examples
    --------
    >>> sweep() >= 0
    True
    """
    gone = 0
    try:
        names = os.listdir(SHM)
    except OSError:
        return 0
    here = _hostname()
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        host, _, rest = name[len(_PREFIX) :].partition("-")
        pid = rest.split("-", 1)[0]
        try:
            old = time.time() - os.stat(SHM / name).st_mtime > 86400
        except OSError:
            continue
        # the driver of this host is gone; or a day old, whoever made it
        if (host == here and pid.isdigit() and not Path(f"/proc/{pid}").exists()) or old:
            try:
                (SHM / name).unlink()
                gone += 1
            except OSError:
                pass
    return gone


def map_segment(name: str, offset: int, nbytes: int) -> np.ndarray:
    """``nbytes`` of a segment from ``offset``, mapped copy-on-write: no copy is made
    until the task writes to its rows.

    Examples
    --------
    >>> rows = map_segment(name, 4096, 1 << 20)  # doctest: +SKIP
    """
    import mmap

    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    fd = os.open(SHM / name, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        m = mmap.mmap(
            fd,
            offset + nbytes - start,
            flags=mmap.MAP_PRIVATE,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
            offset=start,
        )
    finally:
        os.close(fd)
    return np.frombuffer(m, dtype=np.uint8)[offset - start :]


def copy_from_segment(
    name: str, out: np.ndarray, dst: np.ndarray, src: np.ndarray, length: np.ndarray
) -> None:
    """Copy runs out of another process's segment on this host into ``out``: one
    ``pread`` per run (the kernel copies; nothing is mapped), or for many small runs
    (scattered rows) a read-only mapping and a kernel."""
    fd = os.open(SHM / name, os.O_RDONLY)
    try:
        if length.size <= 256:
            view = memoryview(out)  # type: ignore[arg-type]
            for d, s, n in zip(dst.tolist(), src.tolist(), length.tolist(), strict=True):
                if os.preadv(fd, [view[d : d + n]], s) != n:
                    raise OSError(f"short read from {SHM / name}")
            return
        import mmap

        from ..kernels.runs import copy_runs

        # not closed here: the kernel's view may outlive the call; the mapping goes with
        # its last reference
        m = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
        copy_runs(out, dst, np.frombuffer(m, dtype=np.uint8), src, length)
    finally:
        os.close(fd)


def _read(task: AggregatorTask) -> dict[str, Any]:
    """Every stripe of the aggregator, checked: per dataset one byte buffer, stripe ``i``
    of its (ascending) stripes at ``i * stripe_bytes``."""
    reader = _Stripes(task.path, task.fmt)
    out: dict[str, np.ndarray] = {}
    segments: dict[str, Segment] = {}
    try:
        for name, stripes in task.stripes.items():
            _, _, sb, total, sums = task.datasets[name]
            seg = None
            if task.local:  # some tasks take their rows straight out of shared memory
                seg = Segment(task.segments[name])
                with _LOCK:
                    _SEGMENTS.setdefault(task.app, []).append(seg)
                segments[name] = seg
            if set(task.pieces) - task.local:  # and some get their rows through Dask
                buf = np.empty(len(stripes) * sb, dtype=np.uint8)
                scratch = None
            else:
                buf = np.empty(0, dtype=np.uint8)
                scratch = np.empty(sb, dtype=np.uint8)  # one stripe at a time, kept warm
            for i, s in enumerate(np.asarray(stripes).tolist()):
                off = s * sb
                n = min(sb, total - off)
                try:
                    view = reader.view(name, off, n)
                    if view is not None:  # in place: checked there, copied once
                        if scratch is None:
                            buf[i * sb : i * sb + n] = view
                    else:
                        view = memoryview(buf if scratch is None else scratch)  # type: ignore[arg-type]
                        view = view[i * sb : i * sb + n] if scratch is None else view[:n]
                        reader.read_into(name, off, view)
                except CheckpointError:
                    raise
                except Exception as err:  # h5py / zarr raise their own
                    raise CheckpointError(
                        f"{task.path}: {name}: stripe at byte {off} (I/O node {task.node}) "
                        f"cannot be read: {type(err).__name__}: {err}"
                    ) from err
                want = sums.get(str(off))
                got = stripe_checksum(view)
                if want != got:
                    raise CheckpointError(
                        f"{task.path}: {name}: stripe at byte {off} (I/O node {task.node}) "
                        f"does not match the manifest: checksum {got}, manifest says {want}"
                    )
                if seg is not None:
                    seg.write(view, off)
            out[name] = buf
    finally:
        reader.close()
    return {"buffers": out, "segments": {k: v.name for k, v in segments.items()}}


def aggregate(task: AggregatorTask) -> dict[str, Any]:
    """Queue the request on this I/O node, wait for it to be served, and cut the rows
    into each task's piece ``{dataset: (positions, rows)}``; also what was served.

    Examples
    --------
    >>> out = client.submit(aggregate, task, workers=[io0]).result()  # doctest: +SKIP
    """
    req = _server(task.node).submit(task)
    try:
        from distributed import secede

        secede()  # the worker's thread runs the next aggregator meanwhile
    except (ImportError, ValueError):  # not in a worker (tests call it directly)
        pass
    req.done.wait()
    if req.error is not None:
        raise req.error
    from ..kernels.runs import gather_runs  # Numba: only in the workers that read

    bufs = req.result["buffers"]
    names = req.result["segments"]
    cut = time.time()
    pieces: dict[int, dict[str, tuple[np.ndarray, np.ndarray, Any]]] = {}
    for t, per in task.pieces.items():
        piece = {}
        for name, runs in per.items():
            runs = np.asarray(runs, dtype=np.int64)
            sb = task.datasets[name][2]
            stripe = runs[:, 1] // sb
            slot = np.searchsorted(np.asarray(task.stripes[name]), stripe)
            src = slot * sb + runs[:, 1] - stripe * sb
            if t in task.local:  # the task takes its runs out of shared memory itself
                piece[name] = (runs[:, 0], runs[:, 2], (names[name], runs[:, 1]))
                continue
            if (src[1:] == src[:-1] + runs[:-1, 2]).all():  # one range of the buffer: a view
                data = bufs[name][src[0] : src[-1] + runs[-1, 2]]
            else:
                data = gather_runs(bufs[name], src, runs[:, 2])
            piece[name] = (runs[:, 0], runs[:, 2], data)
        pieces[t] = piece
    return {
        "pieces": pieces,
        "served": {
            "node": task.node,
            "app": task.app,
            "position": req.position,
            "arrival": req.arrival,
            "start": req.start,
            "end": req.end,
            "cut_seconds": time.time() - cut,
            "bytes": sum(a.nbytes for a in bufs.values()),
        },
    }
