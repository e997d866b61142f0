"""The I/O node's side of a restart read: one server thread per I/O node in the worker
process serves the aggregators' requests one at a time, in the read policy's order
over every request it holds — from every application restarting at that moment.

An aggregator task (:func:`aggregate`) queues its request here, leaves Dask's thread
pool while it waits (``secede``: the worker's one thread runs the next aggregator,
so the node sees every pending request), gets its stripes back, checked against
the manifest's checksums, and cuts them into the pieces its tasks need. A
pipelined request — every task on this host — is queued by a direct call instead
(:func:`offer_here`) and answers at once with where its stripes will be; its tasks
copy each stripe as the node's flag lets them, and check the stripes they copy
whole themselves (:doc:`/semantics`). :func:`finish` ends a restart here.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, InputError
from .checksums import stripe_checksum

__all__ = [
    "AggregatorTask",
    "aggregate",
    "finish",
    "held",
    "inject",
    "locate",
    "offer_here",
    "offered_runs",
    "open_gate",
    "policies_loaded",
    "queued",
    "recheck",
    "release",
    "served",
]


@dataclass
class AggregatorTask:
    """What one aggregator needs: the checkpoint, its stripes and pieces, and what its
    node orders it by (its application, collective access, estimated read and shuffle,
    its application's largest shuffle)."""

    path: str
    fmt: str
    node: int
    domain: int
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
    #: tasks on this worker's host: they copy their rows out of this process's memory
    #: (:mod:`orchestrator.engine.cma`) instead of receiving them through Dask
    local: frozenset[int] = frozenset()
    #: every task is local: answer at once with where the stripes will be, and let the
    #: tasks copy each stripe as soon as it is checked (flags in this process's memory)
    pipelined: bool = False
    #: pipelined: per dataset, per stripe, whether every task copying it copies it whole
    #: (they check it themselves; :func:`~orchestrator.engine.readplan.copied_whole`)
    whole: dict[str, np.ndarray] | None = None


@dataclass
class _Request:
    task: AggregatorTask
    arrival: int
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    places: dict[str, _Place] | None = None
    flags: np.ndarray | None = None
    cut: float = 0.0
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

    def submit(
        self,
        task: AggregatorTask,
        places: dict[str, _Place] | None = None,
        flags: np.ndarray | None = None,
    ) -> _Request:
        with self.cond:
            req = _Request(task, next(self.arrivals), places=places, flags=flags)
            self.pending.append(req)
            self.cond.notify_all()
        return req

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
            while True:  # a test's busy disk: requests pile up meanwhile
                gate = _FAULTS.get("hold")
                if gate is None or gate.is_set():
                    break
                gate.wait(0.5)  # a gate closed anew while waiting is waited for too
            time.sleep(_FAULTS.get("delay", 0.0))
            with self.cond:
                try:
                    req = self._next()
                except Exception:  # never lose the node: serve in arrival order instead
                    req = min(self.pending, key=lambda r: r.arrival)
                self.pending.remove(req)
            req.start = time.time()
            try:
                req.result = _read(req.task, req.places, req.flags, _FAULTS.get("rate"))
            except BaseException as err:  # handed to the aggregator, raised there
                req.error = err  # before any flag says so: finish() reports it at once
                if req.flags is not None:  # what was not checked will not be
                    bad = getattr(err, "flag", None)
                    if bad is not None:
                        req.flags[bad] = DAMAGED
                    req.flags[req.flags == PENDING] = NOT_READ
                _forget_reader(req.task.app)  # the file may be what is wrong: open it anew
            if _ended(req.task.app):  # what serving it opened goes with it
                _forget_reader(req.task.app)
            req.places = req.flags = None
            req.end = time.time()
            with self.cond:
                req.position = self.served
                self.served += 1
                self.log.append((req.task.app, req.task.access, req.start, req.end))
            req.done.set()
            del req  # nor its stripes: the aggregator holds them now, or nobody

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


def inject(
    hold: threading.Event | bool | None = None,
    delay: float = 0.0,
    rate: float = 0.0,
    jitter: float = 0.0,
    seed: int | None = None,
) -> None:
    """Fault and emulation hooks, for tests and the testbed's benchmark.

    ``hold``: while this event is not set, no node of this process starts serving (a
    disk busy with something else); ``True`` closes a gate of this process's own,
    which :func:`open_gate` opens (settable from another process through
    ``Client.run``). ``delay``: seconds before each request (a slow disk). ``rate``:
    bytes per second of an emulated disk: a request lasts at least its bytes ÷ rate,
    and no stripe is handed out before the disk would have read it. ``jitter``: each
    aggregator waits a random time in ``[0, jitter)`` seconds before queueing, so
    requests reach each node in an independent order (the HIO paper's assumption; a
    request answered at once, all its tasks on this host, is not delayed); with
    ``seed``, each request's wait is fixed by the seed, its application's name, its
    node and its domain, so every policy run with one seed sees the same arrivals.
    No arguments remove every hook and open any gate, so
    nothing waits on a gate nobody can open.

    Examples
    --------
    >>> gate = threading.Event()
    >>> inject(hold=gate)
    >>> inject(rate=100e6, jitter=0.01)
    >>> inject()
    """
    for key, value in (("delay", delay), ("rate", rate), ("jitter", jitter)):
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not 0 <= value < float("inf")
        ):
            raise InputError(f"{key} must be a number >= 0, got {value!r}")
    if not (hold is None or isinstance(hold, (bool, threading.Event))):
        raise InputError(f"hold must be True, False or a threading.Event, got {hold!r}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise InputError(f"seed must be a whole number >= 0, got {seed!r}")
    old = _FAULTS.get("hold")
    _FAULTS.clear()
    if hold is True:
        hold = threading.Event()
    if isinstance(hold, threading.Event):
        _FAULTS["hold"] = hold
    for key, value in (("delay", delay), ("rate", rate), ("jitter", jitter)):
        if value:
            _FAULTS[key] = float(value)
    if seed is not None:
        _FAULTS["seed"] = seed
    if old is not None and old is not hold:
        old.set()  # after the new gate is in place: nothing slips through between


def open_gate() -> float:
    """Open the gate :func:`inject` closed (every node of this process starts serving)
    and return when, by this host's clock.

    Examples
    --------
    >>> inject(hold=True)
    >>> open_gate() > 0
    True
    >>> inject()
    """
    gate = _FAULTS.get("hold")
    now = time.time()
    if gate is not None:
        gate.set()
    return now


_LOCK = threading.Lock()


def _server(node: int) -> _NodeServer:
    with _LOCK:
        if node not in _SERVERS:
            _SERVERS[node] = _NodeServer(node)
            if len(_SERVERS) == 1:  # this worker's first node: its policies, loaded aside
                threading.Thread(
                    target=_load_policies, name="load-read-policies", daemon=True
                ).start()
        return _SERVERS[node]


#: the thread that loads the read policies' kernels in a worker's first node server
LOADER = "load-read-policies"


def policies_loaded(timeout: float = 300.0) -> bool:
    """Wait (up to ``timeout`` s) until this worker has loaded its read policies' kernels
    (:data:`LOADER`); True once none is loading. Benchmarks call it (``Client.run`` on
    the I/O workers) so that the load is not timed as a contender's.

    Examples
    --------
    >>> policies_loaded()
    True
    """
    for t in threading.enumerate():
        if t.name == LOADER:
            t.join(timeout)
            return not t.is_alive()
    return True


def _load_policies() -> None:
    """Load the read policies' Numba kernels while the first requests are served: a
    node orders its queue with them only once two requests wait, and loading them
    then (a second here, the first time in a process) stalled every request queued."""
    try:
        from ..reads import ReadSet, order_reads

        rs = ReadSet(node=[0, 0], agg=[0, 1], read=[1.0, 1.0], agg_app=[0, 1], shuffle=[0.0, 0.5])
        for policy in ("sio", "hio"):
            order_reads(rs, policy)
    except Exception:  # only a head start: the first ordering loads them otherwise
        pass


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


def queued() -> int:
    """How many requests this process's nodes hold and have not started serving (the
    testbed's benchmark opens the gate once every request has arrived).

    Examples
    --------
    >>> queued() >= 0
    True
    """
    with _LOCK:
        servers = list(_SERVERS.values())
    total = 0
    for s in servers:
        with s.cond:
            total += len(s.pending)
    return total


#: where each dataset of a checkpoint lies in its file, by the file's identity: a file
#: is opened with h5py once, not once per restart and node
_EXTENTS: dict[tuple[Any, ...], dict[str, int | None]] = {}
_EXTENTS_LOCK = threading.Lock()  # its own: files are opened under _LOCK


def _extents(path: Path, fd: int) -> dict[str, int | None]:
    """Per dataset of an HDF5 file open as ``fd``: its offset in the file where it is one
    contiguous extent, else None."""
    st = os.fstat(fd)
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _EXTENTS_LOCK:
        known = _EXTENTS.get(key)
    if known is not None:
        return dict(known)
    import h5py

    out: dict[str, int | None] = {}
    with h5py.File(path, "r") as f:
        for name in f:
            ds = f[name]
            if isinstance(ds, h5py.Dataset):
                off = ds.id.get_offset() if ds.chunks is None else None
                out[name] = None if off is None else int(off)
    now = os.stat(path)
    if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != key[1:5]:
        raise CheckpointError(f"{path} changed while it was being opened")
    with _EXTENTS_LOCK:
        if len(_EXTENTS) >= 64:  # a long-lived worker reading many checkpoints
            _EXTENTS.pop(next(iter(_EXTENTS)))
        _EXTENTS[key] = out
    return dict(out)


class _Stripes:
    """Reads stripes of one checkpoint: ``pread`` where the dataset is one contiguous
    extent of one HDF5 file, the format's own reader otherwise."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = Path(path), fmt
        self.base: dict[str, int | None] = {}
        self.fd: int | None = None
        self.map: Any = None
        if fmt == "hdf5":
            self.fd = os.open(self.path, os.O_RDONLY)
            try:
                self.base = _extents(self.path, self.fd)
            except BaseException:
                os.close(self.fd)
                raise

    def dataset(self, name: str, nbytes: int) -> np.ndarray | None:
        """The dataset's bytes in place (the file mapped read-only: no copy), where it is
        one extent of one file; None otherwise."""
        base = self.base.get(name)
        if self.fd is None or base is None:
            return None
        with _LOCK:
            if self.map is None:
                import mmap

                size = os.fstat(self.fd).st_size
                self.map = mmap.mmap(self.fd, size, prot=mmap.PROT_READ)
        if base + nbytes > len(self.map):
            raise CheckpointError(f"{self.path}: {name} is truncated")
        return np.frombuffer(self.map, dtype=np.uint8, count=nbytes, offset=base)

    def file(self, name: str) -> tuple[int, tuple[int, int], int] | None:
        """This process's descriptor of the file, its (device, inode) and the dataset's
        offset in it, where the dataset is one extent of one file; None otherwise."""
        base = self.base.get(name)
        if self.fd is None or base is None:
            return None
        st = os.fstat(self.fd)
        return self.fd, (st.st_dev, st.st_ino), base

    def will_need(self, name: str, runs: list[tuple[int, int]]) -> bool:
        """Ask the kernel to start reading these (offset, length) runs of a dataset now,
        all at once, where it is one extent of one file: a cold request then reads in
        large requests while its first stripes are being checked. True if every byte
        of them is in memory already (known only where the kernel can say)."""
        from .pagecache import cached

        base = self.base.get(name)
        if self.fd is None or base is None or not hasattr(os, "posix_fadvise"):
            return False
        warm = True
        try:
            for off, n in runs:
                if not cached(self.fd, base + off, n):  # cheaper to ask than to advise
                    warm = False
                    os.posix_fadvise(self.fd, base + off, n, os.POSIX_FADV_WILLNEED)
        except OSError:  # a hint: the reads that follow say what is wrong, if anything
            return False
        return warm

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
        self.map = None  # the mapping goes with the last view handed out
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


#: what tasks on this host still copy from, per application (until :func:`release`)
_HELD: dict[tuple[int, str], tuple[float, list[Any]]] = {}
#: an application's bytes are let go this long after its read even without release
HOLD_SECONDS = 3600.0


def _hold(app: tuple[int, str], obj: Any) -> None:
    with _LOCK:
        _HELD.setdefault(tuple(app), (time.time(), []))[1].append(obj)  # type: ignore[arg-type]


def release(app: tuple[int, str]) -> int:
    """Let go of what this worker kept for an application's tasks to copy (they all have
    their rows); return how many buffers. Also lets go of what was kept longer than
    :data:`HOLD_SECONDS` (a driver that never came back).

    Examples
    --------
    >>> release((0, "nothing"))
    0
    """
    now = time.time()
    with _LOCK:
        _, held = _HELD.pop(tuple(app), (0.0, []))  # type: ignore[arg-type]
        _RECHECK.pop(tuple(app), None)  # type: ignore[arg-type]
        stale = [k for k, (t, _) in _HELD.items() if now - t > HOLD_SECONDS]
        for key in stale:
            del _HELD[key]
        for key in [k for k in _REQUESTS if k[0][0] / 1e9 < now - HOLD_SECONDS]:
            del _REQUESTS[key]  # its driver never finished it
        for key in [k for k, t in _ENDED.items() if now - t > HOLD_SECONDS]:
            del _ENDED[key]
        _FLAGS_KEPT[:] = [(t, f) for t, f in _FLAGS_KEPT if now - t < FLAGS_SECONDS]
    for gone in [tuple(app), *stale]:
        _forget_reader(gone)  # type: ignore[arg-type]
    return len(held)


def held() -> int:
    """How many applications this worker keeps anything for: buffers for tasks to copy,
    requests, stripes to check again, open checkpoints.

    Examples
    --------
    >>> held() >= 0
    True
    """
    with _LOCK:
        apps = set(_HELD) | set(_RECHECK) | {k[0] for k in _REQUESTS}
        for _, users in _READERS.values():
            apps |= users
        return len(apps)


#: a pipelined request's flag per stripe: not read yet, read and checked here, damaged,
#: never read, read and left to the tasks to check on their copies
PENDING, CHECKED, DAMAGED, NOT_READ, READ = 0, 1, 2, 3, 4


@dataclass
class _Place:
    """Where one dataset's stripes of a request are: in the mapped checkpoint
    (``mapped``, at their own offsets: no copy) or in this process's buffer ``own``
    (the ``i``-th stripe at ``i * stripe_bytes``), never both.

    A mapped stripe is checked here in place — and, as a byte changed in the file
    after its check would reach the tasks, checked again once they have copied it
    (:func:`recheck`) — unless ``tasks_check`` says its tasks check it themselves on
    their own copies (every one of them copies it whole)."""

    mapped: np.ndarray | None
    own: np.ndarray | None
    #: per stripe of the request: checked by the tasks (None: all checked here)
    tasks_check: np.ndarray | None = None
    #: where the tasks may read the mapped stripes themselves: this process's descriptor
    #: of the checkpoint, its (device, inode) and the dataset's offset in it
    file: tuple[int, tuple[int, int], int] | None = None

    def offsets(self, offsets: np.ndarray, stripe_bytes: int, stripes: np.ndarray) -> np.ndarray:
        """Where bytes at ``offsets`` of the dataset are in :attr:`buffer`."""
        if self.mapped is not None:
            return offsets
        stripe = offsets // stripe_bytes
        slot = np.searchsorted(stripes, stripe)
        return slot * stripe_bytes + offsets - stripe * stripe_bytes

    def addresses(self, offsets: np.ndarray, stripe_bytes: int, stripes: np.ndarray) -> np.ndarray:
        """This process's addresses of bytes at ``offsets`` of the dataset."""
        return self.buffer.ctypes.data + self.offsets(offsets, stripe_bytes, stripes)

    @property
    def buffer(self) -> np.ndarray:
        """The mapped dataset, or the buffer holding the request's stripes."""
        out = self.mapped if self.mapped is not None else self.own
        assert out is not None
        return out


def _prepare(
    task: AggregatorTask, copied_whole: dict[str, np.ndarray] | None = None
) -> dict[str, _Place]:
    """Where each dataset's stripes will be (:class:`_Place`): in place where the dataset
    is one extent of one HDF5 file, else in a buffer of this process. With
    ``copied_whole`` (per dataset, per stripe: every task copies it whole), the tasks
    check those stripes; the others — cut between tasks — are checked here."""
    reader = _reader(task)
    out = {}
    for name, stripes in task.stripes.items():
        _, _, sb, total, _ = task.datasets[name]
        mapped = reader.dataset(name, total)
        if mapped is None:
            out[name] = _Place(None, np.empty(len(stripes) * sb, dtype=np.uint8))
            continue
        mine = None if copied_whole is None else np.asarray(copied_whole[name], dtype=bool)
        again = np.asarray(stripes) if mine is None else np.asarray(stripes)[~mine]
        if again.size:
            with _LOCK:
                _RECHECK.setdefault(tuple(task.app), []).append((task, name, mapped, again))  # type: ignore[arg-type]
        out[name] = _Place(mapped, None, mine, file=reader.file(name))
    return out


#: per application, the mapped stripes checked here that its tasks copied (or were cut
#: from) afterwards: checked again once they have
_RECHECK: dict[tuple[int, str], list[tuple[AggregatorTask, str, np.ndarray, np.ndarray]]] = {}


def recheck(app: tuple[int, str]) -> list[str]:
    """Check again the stripes an application's tasks copied out of the mapped checkpoint
    (after they all have): a mismatch means the file changed under the restart, and the
    rows may be wrong. Returns the mismatches.

    Examples
    --------
    >>> recheck((0, "nothing"))
    []
    """
    with _LOCK:
        todo = _RECHECK.pop(tuple(app), [])  # type: ignore[arg-type]
    bad = []
    for task, name, whole, stripes in todo:
        _, _, sb, total, sums = task.datasets[name]
        for s in stripes.tolist():
            off = s * sb
            got = stripe_checksum(memoryview(whole)[off : off + min(sb, total - off)])  # type: ignore[arg-type]
            if got != sums.get(str(off)):
                bad.append(
                    f"{task.path}: {name}: stripe at byte {off} (I/O node {task.node}) changed "
                    f"while the restart read it: checksum {got}, manifest says {sums.get(str(off))}"
                )
    return bad


def _read(
    task: AggregatorTask,
    places: dict[str, _Place] | None = None,
    flags: np.ndarray | None = None,
    rate: float | None = None,
) -> dict[str, _Place]:
    """Every stripe of the aggregator, read into its place (made here if not given, see
    :func:`_prepare`) and checked — or, where its tasks check it, brought into memory —
    each stripe's flag set as it is done. ``rate``: an emulated disk's bytes/s — no
    stripe is let out before the disk would have read it."""
    from .pagecache import bring_in

    reader = _reader(task)
    at = 0
    began, done = time.time(), 0
    if places is None:
        places = _prepare(task)
    for name, stripes in task.stripes.items():
        _, _, sb, total, sums = task.datasets[name]
        place = places[name]
        ids = np.asarray(stripes).tolist()
        todo: Any = range(len(ids))
        warm = reader.will_need(name, _runs(ids, sb, total))
        if warm and place.mapped is not None and place.tasks_check is not None and not rate:
            # all in memory already: the stripes the tasks check are theirs at once (a
            # stripe at a time costs this process more than the tasks' copies wait)
            left = np.asarray(place.tasks_check, dtype=bool)
            if flags is not None:
                flags[at + np.flatnonzero(left)] = READ
            todo = np.flatnonzero(~left).tolist()
        for i in todo:
            s = ids[i]
            off = s * sb
            n = min(sb, total - off)
            theirs = place.tasks_check is not None and bool(place.tasks_check[i])
            try:
                if place.mapped is not None:
                    view = place.mapped[off : off + n]
                    # from the disk, in this node's order (and a short file fails
                    # here, not as SIGBUS in the check below)
                    fd, _, base = place.file or (None, None, 0)
                    if theirs and fd is not None:  # read, not mapped: no page tables
                        _read_through(fd, base + off, n)
                    else:
                        bring_in(view, fd, base + off)
                else:
                    assert place.own is not None
                    view = place.own[i * sb : i * sb + n]
                    reader.read_into(name, off, memoryview(view))  # type: ignore[arg-type]
            except CheckpointError:
                raise
            except Exception as err:  # h5py / zarr raise their own; EFAULT: truncated
                raise CheckpointError(
                    f"{task.path}: {name}: stripe at byte {off} (I/O node {task.node}) "
                    f"cannot be read: {type(err).__name__}: {err}"
                ) from err
            state = READ
            if not theirs:
                want = sums.get(str(off))
                got = stripe_checksum(memoryview(view))  # type: ignore[arg-type]
                if want != got:
                    damaged = CheckpointError(
                        f"{task.path}: {name}: stripe at byte {off} (I/O node {task.node}) "
                        f"does not match the manifest: checksum {got}, manifest says {want}"
                    )
                    damaged.flag = at + i  # type: ignore[attr-defined]  # the node flags it
                    raise damaged
                state = CHECKED
            done += n
            if rate:
                time.sleep(max(0.0, began + done / rate - time.time()))
            if flags is not None:
                flags[at + i] = state
        at += len(stripes)
    return places


_SCRATCH = threading.local()


def _read_through(fd: int, offset: int, length: int) -> None:
    """Bring bytes of the file into memory by reading them into a scratch buffer of this
    thread (unless they are there already): the disk read in this node's order, without
    mapping them; a file shorter than that fails as EFAULT would."""
    from .pagecache import cached

    if cached(fd, offset, length):
        return
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None:
        buf = _SCRATCH.buf = np.empty(8 << 20, dtype=np.uint8)
    view = memoryview(buf)  # type: ignore[arg-type]
    while length > 0:
        got = os.preadv(fd, [view[: min(length, len(view))]], offset)
        if got <= 0:
            raise OSError(14, "Bad address: the file ends before the stripe does")
        offset += got
        length -= got


def _runs(stripes: list[int], sb: int, total: int) -> list[tuple[int, int]]:
    """Ascending stripe ids as (offset, length) byte runs, neighbours merged."""
    out: list[tuple[int, int]] = []
    for s in stripes:
        off, n = s * sb, min(sb, total - s * sb)
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((off, n))
    return out


#: open checkpoints (by path, inode, change time) and the applications reading them:
#: a restart's many requests open and map the file once
_READERS: dict[tuple[str, int, int], tuple[_Stripes, set[tuple[int, str]]]] = {}


def _reader(task: AggregatorTask) -> _Stripes:
    if _ended(task.app):  # a request left over from a failed restart: nothing to open
        raise CheckpointError(f"restart {task.app[1]!r} has ended; its request was not served")
    try:
        st = os.stat(task.path)
        key = (task.path, st.st_ino, st.st_ctime_ns)
        with _LOCK:
            if key not in _READERS:
                _READERS[key] = (_Stripes(task.path, task.fmt), set())
            reader, apps = _READERS[key]
            apps.add(tuple(task.app))  # type: ignore[arg-type]
            return reader
    except OSError as err:  # gone or unreadable since the restart was planned
        raise CheckpointError(
            f"{task.path} cannot be opened on I/O node {task.node}: {err.strerror or err}"
        ) from err
    except (KeyError, RuntimeError, ValueError, TypeError) as err:
        if isinstance(err, CheckpointError):
            raise
        # h5py's own for damaged metadata: an object header (KeyError), a link table
        # (RuntimeError), found where the node looks for its datasets' extents
        raise CheckpointError(
            f"{task.path} cannot be opened on I/O node {task.node}: its HDF5 metadata is "
            f"damaged ({type(err).__name__}: {err})"
        ) from err


def _forget_reader(app: tuple[int, str]) -> None:
    """Close the checkpoints no application reads any more (their mappings go with the
    last stripes handed out)."""
    with _LOCK:
        for key in list(_READERS):
            reader, apps = _READERS[key]
            apps.discard(tuple(app))
            if not apps:
                del _READERS[key]
                reader.close()


def _stripe_bytes(task: AggregatorTask) -> int:
    total = 0
    for name, stripes in task.stripes.items():
        sb, size = task.datasets[name][2], task.datasets[name][3]
        total += int(np.minimum(sb, size - np.asarray(stripes, dtype=np.int64) * sb).sum())
    return total


#: every request queued here, until its application's restart is finished (:func:`finish`)
_REQUESTS: dict[tuple[Any, ...], _Request] = {}


def _key(task: AggregatorTask) -> tuple[Any, ...]:
    return (tuple(task.app), task.access, task.domain, task.node)


def _submit(
    task: AggregatorTask,
    places: dict[str, _Place] | None = None,
    flags: np.ndarray | None = None,
) -> _Request:
    if _ended(task.app):  # an aggregator late for a restart that has ended
        raise CheckpointError(f"restart {task.app[1]!r} has ended; its request was not queued")
    req = _server(task.node).submit(task, places, flags)  # takes _LOCK itself
    with _LOCK:
        _REQUESTS[_key(task)] = req
    return req


def _offer(task: AggregatorTask) -> dict[str, Any]:
    """A pipelined request: queue it and answer at once with where its stripes will be
    (:func:`offered_runs` turns that into each task's runs) and its flags."""
    from .cma import identity

    whole = task.whole
    if whole is None:
        raise InputError("a pipelined request needs its whole-stripe masks")
    places = _prepare(task, whole)
    flags = np.zeros(sum(len(st) for st in task.stripes.values()), dtype=np.uint8)
    _hold(task.app, (places, flags))
    _submit(task, places, flags)
    return {
        "pipelined": _key(task),
        "who": identity(),
        "flags": (flags.ctypes.data, flags.size),
        "places": {
            name: (
                None if p.mapped is None else p.mapped.ctypes.data,
                None if p.own is None else p.own.ctypes.data,
                p.file,
            )
            for name, p in places.items()
        },
    }


def offer_here(
    by_worker: dict[str, list[AggregatorTask]], dask_worker: Any = None
) -> list[dict[str, Any]]:
    """Queue this worker's pipelined requests (``by_worker[its address]``, through
    ``Client.run``) and return their answers (:func:`_offer`), in order.

    Examples
    --------
    >>> client.run(offer_here, {io0: [task]}, workers=[io0])  # doctest: +SKIP
    """
    return [_offer(task) for task in by_worker.get(dask_worker.address, [])]


def offered_runs(task: AggregatorTask, name: str, runs: np.ndarray, first: int) -> dict[str, Any]:
    """What one task needs to copy its runs ``[position, offset, length]`` of one dataset
    from a pipelined request, made where the restart is planned; :func:`locate` adds
    where the request's node put them (its :func:`_offer`). Per run: its flag (``first``:
    the dataset's first one), and the checksum the task checks its stripe against where
    every task copying the stripe copies it whole (-1: the node checks it).

    Examples
    --------
    >>> spec = offered_runs(task, "u", runs, 0)  # doctest: +SKIP
    """
    runs = np.asarray(runs, dtype=np.int64)
    stripes = np.asarray(task.stripes[name])
    sb, sums = task.datasets[name][2], task.datasets[name][4]
    index = np.searchsorted(stripes, runs[:, 1] // sb)
    at_byte = runs[:, 1] - runs[:, 1] % sb
    check = np.full(index.size, -1, dtype=np.int64)
    if task.whole:
        mine = np.asarray(task.whole[name], dtype=bool)[index]
        if mine.any():
            check[mine] = [int(sums.get(str(b), "-1"), 16) for b in at_byte[mine].tolist()]
    return {
        "name": name,
        "runs": runs,
        "slot": index,
        "flag": first + index,
        "check": check,
        "at": at_byte,
        "label": f"{task.path}: {name}",
        "node": task.node,
        "stripe_bytes": sb,
    }


def locate(
    spec: dict[str, Any], offer: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, tuple[Any, ...], np.ndarray]:
    """A task's runs of a dataset (:func:`offered_runs`) where its request's node put them
    (:func:`_offer`'s answer): in the node's mapping of the checkpoint — and through its
    descriptor — or in its buffer; the node's flags.

    Examples
    --------
    >>> dst, length, where, at = locate(spec, offer)  # doctest: +SKIP
    """
    runs, slot, at = spec["runs"], spec["slot"], spec["at"]
    mapped, own, file = offer["places"][spec["name"]]
    through = None
    if mapped is not None:
        remote = mapped + runs[:, 1]
        if file is not None:
            fd, ident, base = file
            through = (fd, ident, base + runs[:, 1])
    else:  # in the node's buffer: it checked them there (the tasks need not)
        remote = own + slot * spec["stripe_bytes"] + runs[:, 1] - at
    check = spec["check"] if mapped is not None else np.full(runs.shape[0], -1, np.int64)
    flags_at, n_flags = offer["flags"]
    where = (
        offer["who"],
        remote,
        flags_at,
        n_flags,
        spec["flag"],
        check,
        spec["label"],
        spec["node"],
        through,
    )
    return runs[:, 0], runs[:, 2], where, at


#: applications whose restart has ended here (finish), by when: a request of theirs
#: still queued is not served, and nothing of theirs is kept again
_ENDED: dict[tuple[int, str], float] = {}
#: a failed restart's flags, kept a while: its tasks on other workers may still read them
_FLAGS_KEPT: list[tuple[float, np.ndarray]] = []
FLAGS_SECONDS = 300.0


def _ended(app: tuple[int, str]) -> bool:
    with _LOCK:
        return tuple(app) in _ENDED


def _cancel_queued(app: tuple[int, str]) -> None:
    """Take an ended application's requests out of every node's queue, failed."""
    with _LOCK:
        servers = list(_SERVERS.values())
    for server in servers:
        with server.cond:
            gone = [r for r in server.pending if tuple(r.task.app) == tuple(app)]
            for r in gone:
                server.pending.remove(r)
        for r in gone:
            r.error = CheckpointError(f"restart {app[1]!r} ended before this request was served")
            r.error.cancelled = True  # type: ignore[attr-defined]  # not the restart's reason
            if r.flags is not None:
                r.flags[r.flags == PENDING] = NOT_READ
            r.places = r.flags = None
            r.done.set()


def finish(app: tuple[int, str], served: bool = True, timeout: float = 10.0) -> dict[str, Any]:
    """An application's restart is over here (every task has its rows, or it failed):
    what each of its requests on this worker's nodes served (``served``: waiting up to
    ``timeout`` s for a request to end; a failed restart passes False), the errors its
    requests met, the stripes that changed under it (:func:`recheck`); then its bytes
    are let go (:func:`release`).

    Examples
    --------
    >>> finish((0, "nothing"))
    {'served': [], 'errors': [], 'changed': []}
    """
    app = tuple(app)  # type: ignore[assignment]
    with _LOCK:
        _ENDED[app] = time.time()
        mine = [k for k in _REQUESTS if k[0] == app]
        reqs = [_REQUESTS.pop(k) for k in mine]
        kept = _HELD.get(app, (0.0, []))[1]
        if not served:  # tasks elsewhere may still poll: they must see "not read"
            for obj in kept:
                if isinstance(obj, tuple):
                    flags = obj[1]
                    flags[flags == PENDING] = NOT_READ
                    _FLAGS_KEPT.append((time.time(), flags))
    _cancel_queued(app)
    out: dict[str, Any] = {"served": [], "errors": [], "changed": []}
    try:
        deadline = time.monotonic() + (timeout if served else 0.0)
        for req in reqs:
            if getattr(req.error, "cancelled", False):
                continue
            if req.error is not None:  # set before its flags say so: no need to wait
                out["errors"].append(req.error)
            elif served and req.done.wait(max(0.0, deadline - time.monotonic())):
                out["served"].append(_info(req))
        if served and not out["errors"]:
            out["changed"] = recheck(app)
    finally:
        release(app)
    return out


def _info(req: _Request) -> dict[str, Any]:
    task = req.task
    return {
        "node": task.node,
        "domain": task.domain,
        "app": task.app,
        "position": req.position,
        "arrival": req.arrival,
        "start": req.start,
        "end": req.end,
        "cut_seconds": req.cut,
        "bytes": _stripe_bytes(task),
    }


def secede_if_in_worker() -> bool:
    """Leave the Dask worker's thread pool while this task waits (True), or do nothing
    outside a worker's task (False: tests call the functions directly).

    Examples
    --------
    >>> secede_if_in_worker()
    False
    """
    try:
        from distributed import secede

        secede()
    except (ImportError, ValueError):
        return False
    return True


def aggregate(task: AggregatorTask) -> dict[str, Any]:
    """Queue the request on this I/O node, wait for it to be served, and cut the rows
    into each task's piece ``{dataset: (positions, rows)}``; also what was served.
    A pipelined request answers at once (:func:`_offer`).

    Examples
    --------
    >>> out = client.submit(aggregate, task, workers=[io0]).result()  # doctest: +SKIP
    """
    if task.pipelined:
        return _offer(task)
    secede_if_in_worker()  # the worker's thread runs the next aggregator meanwhile
    jitter = _FAULTS.get("jitter")
    if jitter:  # the testbed's independent arrivals (seceded: the others go on)
        seed = _FAULTS.get("seed")
        key = (
            None
            if seed is None
            else [seed, zlib.crc32(task.app[1].encode()), task.node, task.domain]
        )
        time.sleep(float(np.random.default_rng(key).uniform(0.0, jitter)))
    req = _submit(task)
    req.done.wait()
    if req.error is not None:
        raise req.error
    from .cma import identity
    from .copies import gather

    places, req.result = req.result, None
    cut = time.time()
    me = identity()
    pieces: dict[int, dict[str, tuple[np.ndarray, np.ndarray, Any]]] = {}
    kept = set()
    for t, per in task.pieces.items():
        piece: dict[str, tuple[np.ndarray, np.ndarray, Any]] = {}
        for name, runs in per.items():
            runs = np.asarray(runs, dtype=np.int64)
            place, stripes = places[name], np.asarray(task.stripes[name])
            sb = task.datasets[name][2]
            if t in task.local:  # the task copies its runs out of this process itself
                at = place.addresses(runs[:, 1], sb, stripes)
                piece[name] = (runs[:, 0], runs[:, 2], (me, at))
                if name not in kept:
                    _hold(task.app, place)
                    kept.add(name)
            else:
                src = place.offsets(runs[:, 1], sb, stripes)
                piece[name] = (runs[:, 0], runs[:, 2], gather(place.buffer, src, runs[:, 2]))
        pieces[t] = piece
    req.cut = time.time() - cut
    return {"pieces": pieces}
