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
    "held",
    "inject",
    "open_gate",
    "queued",
    "recheck",
    "release",
    "served",
    "served_when_done",
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


@dataclass
class _Request:
    task: AggregatorTask
    arrival: int
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    bufs: dict[str, tuple[np.ndarray, bool]] | None = None
    flags: np.ndarray | None = None
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
        bufs: dict[str, tuple[np.ndarray, bool]] | None = None,
        flags: np.ndarray | None = None,
    ) -> _Request:
        with self.cond:
            req = _Request(task, next(self.arrivals), bufs=bufs, flags=flags)
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
                req.result = _read(req.task, req.bufs, req.flags, _FAULTS.get("rate"))
            except BaseException as err:  # handed to the aggregator, raised there
                req.error = err
                if req.flags is not None:  # what was not checked will not be
                    req.flags[req.flags == PENDING] = NOT_READ
            req.bufs = req.flags = None
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

    def will_need(self, name: str, runs: list[tuple[int, int]]) -> None:
        """Ask the kernel to start reading these (offset, length) runs of a dataset now,
        all at once, where it is one extent of one file: a cold request then reads in
        large requests while its first stripes are being checked."""
        base = self.base.get(name)
        if self.fd is None or base is None or not hasattr(os, "posix_fadvise"):
            return
        try:
            for off, n in runs:
                os.posix_fadvise(self.fd, base + off, n, os.POSIX_FADV_WILLNEED)
        except OSError:  # a hint: the reads that follow say what is wrong, if anything
            pass

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
    for gone in [tuple(app), *stale]:
        _forget_reader(gone)  # type: ignore[arg-type]
    return len(held)


def held() -> int:
    """How many applications' buffers this worker keeps for tasks to copy.

    Examples
    --------
    >>> held() >= 0
    True
    """
    with _LOCK:
        return len(_HELD)


#: a pipelined request's flag per stripe: not checked yet, checked, damaged, never read
PENDING, CHECKED, DAMAGED, NOT_READ = 0, 1, 2, 3


def _prepare(task: AggregatorTask) -> dict[str, tuple[np.ndarray, bool]]:
    """Where each dataset's stripes will be: the dataset in place (the checkpoint mapped,
    indexed by offset in the dataset: no copy, but a byte changed in the file after its
    check would reach the tasks — :func:`recheck` checks these stripes again once the
    tasks have copied), or a buffer (stripe ``i`` of the ascending list at
    ``i * stripe_bytes``)."""
    reader = _reader(task)
    out = {}
    for name, stripes in task.stripes.items():
        _, _, sb, total, _ = task.datasets[name]
        whole = reader.dataset(name, total)
        if whole is not None:
            out[name] = (whole, True)
            with _LOCK:
                _RECHECK.setdefault(tuple(task.app), []).append((task, name, whole))  # type: ignore[arg-type]
        else:
            out[name] = (np.empty(len(stripes) * sb, dtype=np.uint8), False)
    return out


#: per application, the stripes tasks copied straight out of the checkpoint's mapping
_RECHECK: dict[tuple[int, str], list[tuple[AggregatorTask, str, np.ndarray]]] = {}


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
    for task, name, whole in todo:
        _, _, sb, total, sums = task.datasets[name]
        for s in np.asarray(task.stripes[name]).tolist():
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
    bufs: dict[str, tuple[np.ndarray, bool]] | None = None,
    flags: np.ndarray | None = None,
    rate: float | None = None,
) -> dict[str, tuple[np.ndarray, bool]]:
    """Every stripe of the aggregator, checked, into ``bufs`` (made here if not given,
    see :func:`_prepare`); each stripe's flag set as it is checked. ``rate``: an
    emulated disk's bytes/s — no stripe is let out before the disk would have read it."""
    reader = _reader(task)
    out: dict[str, tuple[np.ndarray, bool]] = {}
    at = 0
    began, done = time.time(), 0
    try:
        if bufs is None:
            bufs = _prepare(task)
        for name, stripes in task.stripes.items():
            _, _, sb, total, sums = task.datasets[name]
            buf, in_place = bufs[name]
            whole = buf if in_place else None
            ids = np.asarray(stripes).tolist()
            reader.will_need(name, _runs(ids, sb, total))
            for i, s in enumerate(ids):
                off = s * sb
                n = min(sb, total - off)
                view = memoryview(buf)[off : off + n] if whole is not None else None  # type: ignore[arg-type]
                try:
                    if view is None:
                        view = memoryview(buf)[i * sb : i * sb + n]  # type: ignore[arg-type]
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
                    if flags is not None:
                        flags[at + i] = DAMAGED
                    raise CheckpointError(
                        f"{task.path}: {name}: stripe at byte {off} (I/O node {task.node}) "
                        f"does not match the manifest: checksum {got}, manifest says {want}"
                    )
                done += n
                if rate:
                    time.sleep(max(0.0, began + done / rate - time.time()))
                if flags is not None:
                    flags[at + i] = CHECKED
            at += len(stripes)
            out[name] = (buf, whole is not None)
    except BaseException:
        _forget_reader(task.app)  # the file may be what is wrong: open it anew next time
        raise
    return out


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


_REQUESTS: dict[tuple[Any, ...], _Request] = {}


def _key(task: AggregatorTask) -> tuple[Any, ...]:
    return (tuple(task.app), task.access, task.domain, task.node)


def _offer(task: AggregatorTask) -> dict[str, Any]:
    """A pipelined request: queue it and answer at once with, per task, where its runs
    will be and which flag says each is checked."""
    from .cma import identity

    bufs = _prepare(task)
    flags = np.zeros(sum(len(st) for st in task.stripes.values()), dtype=np.uint8)
    _hold(task.app, (bufs, flags))
    first, at = {}, 0
    for name, stripes in task.stripes.items():
        first[name] = at
        at += len(stripes)
    me = identity()
    pieces: dict[int, dict[str, Any]] = {}
    for t, per in task.pieces.items():
        piece = {}
        for name, runs in per.items():
            runs = np.asarray(runs, dtype=np.int64)
            buf, whole = bufs[name]
            sb = task.datasets[name][2]
            stripe = runs[:, 1] // sb
            slot = np.searchsorted(np.asarray(task.stripes[name]), stripe)
            src = runs[:, 1] if whole else slot * sb + runs[:, 1] - stripe * sb
            where = (me, buf.ctypes.data + src, flags.ctypes.data, flags.size, first[name] + slot)
            piece[name] = (runs[:, 0], runs[:, 2], where, runs[:, 1] - runs[:, 1] % sb)
        pieces[t] = piece
    server = _server(task.node)  # takes _LOCK itself
    req = server.submit(task, bufs, flags)
    with _LOCK:
        _REQUESTS[_key(task)] = req
    return {"pieces": pieces, "pipelined": _key(task)}


def served_when_done(key: tuple[Any, ...]) -> dict[str, Any]:
    """What a pipelined request's node served, once it has; raises its error (a damaged
    stripe, named).

    Examples
    --------
    >>> served_when_done(out["pipelined"])  # doctest: +SKIP
    {'node': 0, ...}
    """
    with _LOCK:
        req = _REQUESTS.pop(tuple(key))
    try:
        from distributed import secede

        secede()
    except (ImportError, ValueError):
        pass
    req.done.wait()
    req.result = None
    if req.error is not None:
        raise req.error
    return _info(req, 0.0)


def _info(req: _Request, cut: float) -> dict[str, Any]:
    task = req.task
    return {
        "node": task.node,
        "domain": task.domain,
        "app": task.app,
        "position": req.position,
        "arrival": req.arrival,
        "start": req.start,
        "end": req.end,
        "cut_seconds": cut,
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
    req = _server(task.node).submit(task)
    req.done.wait()
    if req.error is not None:
        raise req.error
    from ..kernels.runs import gather_runs  # Numba: only in the workers that read
    from .cma import identity

    bufs, req.result = req.result, None
    cut = time.time()
    me = identity()
    pieces: dict[int, dict[str, tuple[np.ndarray, np.ndarray, Any]]] = {}
    kept = set()
    for t, per in task.pieces.items():
        piece = {}
        for name, runs in per.items():
            runs = np.asarray(runs, dtype=np.int64)
            buf, whole = bufs[name]
            if whole:  # the dataset in place: its offsets are ours
                src = runs[:, 1]
            else:
                sb = task.datasets[name][2]
                stripe = runs[:, 1] // sb
                slot = np.searchsorted(np.asarray(task.stripes[name]), stripe)
                src = slot * sb + runs[:, 1] - stripe * sb
            if t in task.local:  # the task copies its runs out of this process itself
                piece[name] = (runs[:, 0], runs[:, 2], (me, buf.ctypes.data + src))
                if name not in kept:
                    _hold(task.app, buf)
                    kept.add(name)
            else:
                piece[name] = (runs[:, 0], runs[:, 2], gather_runs(buf, src, runs[:, 2]))
        pieces[t] = piece
    return {"pieces": pieces, "served": _info(req, time.time() - cut)}
