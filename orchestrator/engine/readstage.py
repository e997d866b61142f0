"""Restart reads on the cluster: :func:`read_stage` reads rows of a committed checkpoint
into tasks by a two-phase collective read — aggregators on the I/O workers read the
stripes their node holds, in the read policy's order, check them against the
manifest, and Dask moves each task's rows to the worker that runs it.

No task opens the file. Several restarts may run at once on one cluster (start them
with ``wait=False``); every I/O node orders all the requests it holds by the policy
(:mod:`orchestrator.engine.readserver`; the policies: :doc:`/reads/index`).
"""

from __future__ import annotations

import itertools
import os
import reprlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, ClusterError, InputError
from .backends import checkpoint_path, format_of, read_checked_manifest
from .cluster import IOCluster
from .readplan import ReadPlan, copied_whole, plan_reads
from .readserver import AggregatorTask, aggregate, finish, offer_here, offered_runs

__all__ = ["Links", "ReadResult", "cma_works", "measure_links", "read_stage"]

_APPS = itertools.count()
#: the read policies a node knows (orchestrator.reads.READ_POLICIES, not imported here:
#: it would load Numba into every driver that only writes)
POLICIES = ("nio", "sio", "hio")


@dataclass(frozen=True)
class Links:
    """The cluster's shuffle costs (the HIO paper's eq. 1-2): bytes/s between two workers
    of one host and of two hosts, and the latency of one message."""

    b_intra: float
    b_inter: float
    gamma: float

    def seconds(self, nbytes: int, same_host: bool) -> float:
        """One message's time."""
        return nbytes / (self.b_intra if same_host else self.b_inter) + self.gamma


_LINKS: dict[str, Links] = {}
_LINKS_LOCK = threading.Lock()


def _host(address: str) -> str:
    from distributed.comm import get_address_host

    return str(get_address_host(address))


def _move_seconds(client: Any, src: str, dst: str, nbytes: int) -> float:
    blob = client.submit(np.ones, nbytes, np.uint8, workers=[src], pure=False)
    blob.result()
    t0 = time.perf_counter()
    size = client.submit(len, blob, workers=[dst], pure=False)
    size.result()
    seconds = time.perf_counter() - t0
    size.release()
    blob.release()
    return seconds


def measure_links(cluster: IOCluster, nbytes: int = 16 << 20, refresh: bool = False) -> Links:
    """Measure (once per cluster, then cached) what a shuffle message costs: messages
    from an I/O worker to another worker (a compute one where there is one) — a 1-byte
    one for the latency, ``nbytes`` for the bandwidth — within one host and between
    hosts where the cluster has two.

    Examples
    --------
    >>> links = measure_links(cl)  # doctest: +SKIP
    >>> links.b_intra > 1e8  # doctest: +SKIP
    True
    """
    key = cluster.address
    with _LINKS_LOCK:
        if key in _LINKS and not refresh:
            return _LINKS[key]
    workers = list(dict.fromkeys(cluster.ionodes + cluster.compute))
    if len(workers) < 2:  # one worker: every message stays in its process
        links = Links(float("inf"), float("inf"), 0.0)
    else:
        # the shuffle's direction: from an I/O worker to a task's worker (a testbed caps
        # an I/O host's ingress at its disk rate; what leaves it is the link's)
        sources = cluster.ionodes or workers
        sinks = list(dict.fromkeys(cluster.compute + cluster.ionodes))

        def pick(same_host: bool) -> tuple[str, str] | None:
            for src in sources:
                for dst in sinks:
                    if dst != src and (_host(dst) == _host(src)) == same_host:
                        return src, dst
            return None

        pair_intra, pair_inter = pick(True), pick(False)
        client = cluster.client

        def rate(pair: tuple[str, str]) -> tuple[float, float]:
            gamma = min(_move_seconds(client, *pair, 1) for _ in range(3))
            big = min(_move_seconds(client, *pair, nbytes) for _ in range(2))
            return nbytes / max(big - gamma, 1e-9), gamma

        intra = rate(pair_intra) if pair_intra else None
        inter = rate(pair_inter) if pair_inter else None
        first = intra or inter
        assert first is not None
        links = Links(
            (intra or first)[0], (inter or first)[0], min(x[1] for x in (intra, inter) if x)
        )
    with _LINKS_LOCK:
        _LINKS[key] = links
    return links


_CMA: dict[str, bool] = {}
_KEEP: list[Any] = []  # the probe's bytes, in the worker that offers them


def _offer() -> tuple[tuple[int, int], int]:
    from .cma import identity

    blob = np.arange(64, dtype=np.uint8)
    _KEEP.append(blob)
    return identity(), blob.ctypes.data


def _take(offer: tuple[tuple[int, int], int]) -> bool:
    from .cma import read

    out = np.zeros(64, dtype=np.uint8)
    try:
        read(offer[0], out, np.array([0]), np.array([offer[1]]), np.array([64]))
    except OSError:
        return False
    return bool((out == np.arange(64, dtype=np.uint8)).all())


def _forget() -> None:
    _KEEP.clear()


def cma_works(cluster: IOCluster) -> bool:
    """Whether a worker may copy bytes out of an I/O worker of its host here (same user,
    no ptrace restriction): tried once per cluster between real workers, then cached.

    Examples
    --------
    >>> cma_works(cl)  # doctest: +SKIP
    True
    """
    key = cluster.address
    if key not in _CMA:
        io = cluster.ionodes[0]
        other = next((w for w in cluster.compute if _host(w) == _host(io)), None)
        if other is None:
            _CMA[key] = False  # no task would use it
        else:
            client = cluster.client
            offer = client.submit(_offer, workers=[io], pure=False).result()
            _CMA[key] = client.submit(_take, offer, workers=[other], pure=False).result()
            client.run(_forget, workers=[io])
    return _CMA[key]


@dataclass
class ReadResult:
    """A restart read: per task a Dask future of its rows ``{dataset: array}`` (on the
    worker that will run the task), what each I/O node served, and the sizes.

    ``data`` holds the rows themselves when :func:`read_stage` gathered them (no
    cluster given: the embedded one is gone after the call)."""

    futures: list[Any]
    plan: ReadPlan
    application: tuple[int, str]
    policy: str
    started: float
    data: list[dict[str, np.ndarray]] | None = None
    seconds: float | None = None
    served: list[dict[str, Any]] = field(default_factory=list)
    #: per task, the worker its rows went to
    workers: list[str] = field(default_factory=list)
    _client: Any = field(default=None, repr=False)
    _io: list[str] = field(default_factory=list, repr=False)
    _report: dict[str, list[Any]] | None = field(default=None, repr=False)

    @property
    def bytes_read(self) -> int:
        """Bytes the aggregators read (whole stripes)."""
        return sum(a.read_bytes(self.plan.meta) for a in self.plan.aggregators)

    @property
    def bytes_shuffled(self) -> int:
        """Bytes sent from the aggregators to the tasks (replicas counted each time)."""
        return sum(sum(a.sends(self.plan.meta).values()) for a in self.plan.aggregators)

    def wait(self) -> ReadResult:
        """Wait until every task's rows are on its worker; raise the first failure
        (a damaged stripe: :class:`~orchestrator.errors.CheckpointError`).

        Examples
        --------
        >>> res = read_stage("ck.h5", reqs, cluster=cl, wait=False).wait()  # doctest: +SKIP
        """
        from concurrent.futures import CancelledError  # distributed's FuturesCancelledError

        from distributed import wait

        report: dict[str, list[Any]] = {}
        ok = False
        try:
            while True:
                try:
                    wait(self.futures, timeout=2.0)
                    break
                except CancelledError:
                    raise self._released() from None
                except TimeoutError as slow:
                    # Dask's sync keeps the error in a closure of its frame: the traceback
                    # would hold every caller's frame (their futures, their rows' pieces)
                    # until the cyclic collector runs
                    slow.__traceback__ = None
                    self._check_workers()  # pinned tasks wait for ever for a lost worker
            ok = all(f.status == "finished" for f in self.futures)
            if not ok:  # a lost worker is the reason, not what its tasks saw of it
                self._check_workers()
        finally:
            if not ok and self._client is not None:  # a loss, an interrupt: stop the rest
                running = [f for f in self.futures if not f.done()]
                if running:
                    self._client.cancel(running)
            report = self._finish(ok)
        if ok and report.get("incomplete"):  # its second check may not have run
            raise ClusterError(
                f"restart {self.application[1]!r} could not be ended on I/O worker "
                f"{report['incomplete'][0]}: its rows cannot be vouched for"
            )
        for err in report["errors"]:  # an I/O node's reason comes before its tasks' words
            raise err
        for f in self.futures:
            if f.status == "error":
                f.result()  # raises the task's error, as it was raised
        if report["changed"]:
            found = report["changed"]
            raise CheckpointError(f"{len(found)} stripe(s) changed during the restart: {found[0]}")
        if self.seconds is None:
            self.seconds = time.perf_counter() - self.started
            self.served = sorted(report["served"], key=lambda s: (s["node"], s["position"]))
        return self

    def _finish(self, ok: bool) -> dict[str, list[Any]]:
        """End the restart on its I/O workers (:func:`~.readserver.finish`): what they
        served, their requests' errors, stripes that changed under the restart; they
        let go of what the tasks copied from. Once: later calls report nothing."""
        if self._report is not None:
            return self._report
        out: dict[str, list[Any]] = {"served": [], "errors": [], "changed": [], "incomplete": []}
        if self._client is None or not self._io:
            return out
        client, self._client = self._client, None
        self._report = out
        try:  # only live workers: one that died would cost a 30 s connect timeout
            live = set(client.sync(client.scheduler.identity, n_workers=-1).get("workers", {}))
            io = [w for w in self._io if w in live]
            got = client.run(finish, self.application, ok, workers=io, on_error="return")
        except Exception:  # a worker gone: its segments go with the next sweep
            out["incomplete"] = list(self._io)
            return out
        for w in self._io:
            part = got.get(w)
            if not isinstance(part, dict):  # gone, or its finish failed
                out["incomplete"].append(w)
                continue
            for k in ("served", "errors", "changed"):
                out[k].extend(part[k])
        return out

    def _check_workers(self) -> None:
        client = self._client
        if client is None:
            return
        live = set(client.sync(client.scheduler.identity, n_workers=-1).get("workers", {}))
        for kind, addresses in (("I/O", self._io), ("compute", self.workers)):
            lost = sorted(set(addresses) - live)
            if lost:
                raise ClusterError(
                    f"the {kind} worker {lost[0]} was lost during restart "
                    f"{self.application[1]!r}; its rows were not delivered"
                )

    def gather(self) -> list[dict[str, np.ndarray]]:
        """Every task's rows, here (for small restarts and tests).

        Examples
        --------
        >>> rows = read_stage("ck.h5", reqs, cluster=cl).gather()  # doctest: +SKIP
        """
        from concurrent.futures import CancelledError

        if self.data is not None:
            return self.data
        self.wait()
        try:
            return [f.result() for f in self.futures]
        except CancelledError:
            raise self._released() from None

    def _released(self) -> CheckpointError:
        return CheckpointError(
            f"restart {self.application[1]!r}: its rows were released or cancelled before "
            "they were delivered (wait for them, or gather them, before releasing them)"
        )


def _piece(out: dict[str, Any], task: int) -> dict[str, Any]:
    return out["pieces"].get(task, {})


def _assemble(
    lengths: dict[str, int], kinds: dict[str, tuple[Any, tuple[int, ...]]], pieces: list[Any]
) -> dict[str, np.ndarray]:
    """One task's rows, in the order it asked for them, from its pieces' byte runs: sent
    through Dask, or copied straight out of the aggregator's memory on this host."""
    from .cma import read
    from .copies import scatter
    from .readserver import locate

    # a pipelined request's piece comes as (its runs, where its node put them)
    located: list[dict[str, Any]] = [
        {spec["name"]: locate(spec, p[1]) for spec in p[0]} if isinstance(p, tuple) else p
        for p in pieces
    ]
    out = {}
    for name, n in lengths.items():
        dtype, row_shape = np.dtype(kinds[name][0]), kinds[name][1]
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
        buf = np.empty(n * row_bytes, dtype=np.uint8)
        for piece in located:
            if name not in piece:
                continue
            if len(piece[name]) == 4:  # pipelined: copy each run once its stripe is checked
                _copy_when_checked(name, buf, *piece[name])
                continue
            dst, length, data = piece[name]
            if isinstance(data, tuple):  # (aggregator process, addresses) on this host
                try:
                    read(data[0], buf, dst, data[1], length)
                except OSError as err:
                    raise CheckpointError(
                        f"{name}: the rows of an I/O worker on this host could not be copied: {err}"
                    ) from err
            else:
                scatter(buf, dst, length, data)
        out[name] = buf.view(dtype).reshape((n, *row_shape))
    return out


#: bytes a task copies before checking them, so that they are checked while in cache
_CHECK_BATCH = 8 << 20


def _copy_when_checked(
    name: str, buf: np.ndarray, dst: Any, length: Any, where: Any, stripe_at: Any
) -> None:
    """Copy runs out of an I/O worker on this host as their stripes are read there (its
    flags, read the same way). A stripe this task copies whole it checks on its copy,
    right after copying; the others the node has checked. A damaged stripe fails the
    task, named."""
    from .cma import borrow, read, through_descriptor
    from .readserver import CHECKED, DAMAGED, PENDING, READ, secede_if_in_worker

    who, remote, flags_at, n_flags, flag, check, label, node, file = where
    # stripe by stripe, each stripe's runs in file order: the order its checksum folds
    order = np.lexsort((remote, flag))
    dst, length, remote, flag = dst[order], length[order], remote[order], flag[order]
    check, stripe_at = check[order], stripe_at[order]
    fd = None
    # a mapped dataset read in long runs: through the node's descriptor; short ones out
    # of its mapping, 1,024 a system call (cma.PREAD_RUN)
    if file is not None and length.size and through_descriptor(float(length.mean())):
        try:
            fd = borrow(who, file[0], file[1])
            at_file = file[2][order]
        except OSError:  # no pidfd_getfd here: copy them out of the node's mapping instead
            fd = None
    flags = np.empty(n_flags, dtype=np.uint8)
    todo = np.ones(length.size, dtype=bool)
    pause = 0.0005
    seceded = False
    try:
        while todo.any():
            read(who, flags, np.array([0]), np.array([flags_at]), np.array([n_flags]))
            state = flags[flag]
            failed = todo & (state != PENDING) & (state != CHECKED) & (state != READ)
            if failed.any():
                bad = int(np.flatnonzero(failed)[0])
                why = "does not match the manifest" if state[bad] == DAMAGED else "was not read"
                raise CheckpointError(
                    f"{name}: the stripe at byte {int(stripe_at[bad])} {why} (its I/O node "
                    "failed the request; the restart fails with its reason)"
                )
            ready = np.flatnonzero(todo & ((state == CHECKED) | (state == READ)))
            if ready.size:
                if ((state[ready] == READ) & (check[ready] < 0)).any():
                    raise CheckpointError(f"{label}: a stripe was left unchecked")  # a bug
                # batches of whole stripes (a stripe's runs share its flag, all ready),
                # each cut at the first stripe start past another _CHECK_BATCH bytes
                cum = np.cumsum(length[ready])
                starts = np.flatnonzero(flag[ready][1:] != flag[ready][:-1]) + 1
                cut = starts[np.diff(np.concatenate(([0], cum[starts - 1] // _CHECK_BATCH))) > 0]
                for batch in np.split(ready, cut):
                    if fd is None:
                        read(who, buf, dst[batch], remote[batch], length[batch])
                    else:
                        _pread_runs(label, fd, buf, batch, dst, length, at_file)
                    _check_copies(label, node, buf, batch, dst, length, flag, check, stripe_at)
                todo[ready] = False
                pause = 0.0005
            else:
                if not seceded:  # waiting on a disk: the worker's thread runs other tasks
                    seceded = secede_if_in_worker()
                time.sleep(pause)
                pause = min(0.02, pause * 2)
    except OSError as err:
        raise CheckpointError(
            f"{name}: the rows of an I/O worker on this host could not be copied: {err}"
        ) from err
    finally:
        if fd is not None:
            os.close(fd)
        if seceded:
            from distributed import rejoin

            rejoin()


def _pread_runs(
    label: str, fd: int, buf: np.ndarray, runs: np.ndarray, dst: Any, length: Any, at: Any
) -> None:
    """Read runs of the file into ``buf``, neighbours (in the file and in ``buf``) as one."""
    if not runs.size:
        return
    d, n, a = dst[runs], length[runs], at[runs]
    joined = (d[1:] == d[:-1] + n[:-1]) & (a[1:] == a[:-1] + n[:-1])
    starts = np.flatnonzero(np.concatenate(([True], ~joined)))
    view = memoryview(buf)  # type: ignore[arg-type]
    # one NumPy call for every run's size: per run, it cost as much as its read (a mesh
    # part is thousands of short runs)
    totals = np.add.reduceat(n, starts).tolist()
    for first, total, at in zip(d[starts].tolist(), totals, a[starts].tolist(), strict=True):
        got = os.preadv(fd, [view[first : first + total]], at)
        if got != total:
            raise CheckpointError(f"{label}: {total - got} bytes past the file's end")


def _check_copies(
    label: str,
    node: int,
    buf: np.ndarray,
    batch: np.ndarray,
    dst: Any,
    length: Any,
    flag: Any,
    check: Any,
    stripe_at: Any,
) -> None:
    """Check the stripes of ``batch`` (run indices, stripe by stripe, in file order) that
    this task copied whole and checks itself: their CRC-32 folded over its copies."""
    from .checksums import crc32

    mine = batch[check[batch] >= 0]
    if not mine.size:
        return
    view = memoryview(buf)  # type: ignore[arg-type]
    value, last = 0, len(mine) - 1
    for j, i in enumerate(mine.tolist()):
        value = crc32(view[dst[i] : dst[i] + length[i]], value)
        if j == last or flag[mine[j + 1]] != flag[i]:  # the stripe's last run
            if value & 0xFFFFFFFF != check[i]:
                raise CheckpointError(
                    f"{label}: stripe at byte {int(stripe_at[i])} (I/O node {node}) does not "
                    f"match the manifest as copied: checksum {value & 0xFFFFFFFF:08x}, "
                    f"manifest says {int(check[i]):08x}"
                )
            value = 0


#: checked manifests (and formats) of committed checkpoint files, by the file's identity:
#: a restart reads its checkpoint's manifest once, not three times per call
_MANIFESTS: dict[tuple[Any, ...], tuple[dict[str, Any], str]] = {}


def _manifest(path: Path) -> tuple[dict[str, Any], str]:
    """The checkpoint's checked manifest and its format; a file's kept while its device,
    inode, size and times stay the same (a stage commits a new file, never in place)."""
    import stat

    try:
        st = path.stat()
    except OSError:
        st = None
    key = None
    if st is not None and stat.S_ISREG(st.st_mode):
        key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = _MANIFESTS.get(key)
        if hit is not None:
            return hit
    got = read_checked_manifest(path), format_of(path)
    if key is not None:
        if len(_MANIFESTS) >= 64:
            _MANIFESTS.clear()
        _MANIFESTS[key] = got
    return got


def read_stage(
    checkpoint: str | os.PathLike[str],
    requests: Sequence[Mapping[str, Any]],
    *,
    policy: str = "hio",
    cluster: IOCluster | None = None,
    workers: Sequence[str] | None = None,
    application: str | None = None,
    access: int = 0,
    window: int = 10,
    threshold: float = 0.2,
    shuffle: str = "auto",
    aggregators: int | None = None,
    cost: Any = "modern",
    wait: bool = True,
) -> ReadResult:
    """Read rows of a committed checkpoint into tasks through the I/O workers.

    Parameters
    ----------
    checkpoint : path
        An HDF5 file or Zarr directory a stage committed.
    requests : sequence of mappings
        Per task, ``{dataset: rows}``: row numbers in the order the task wants them
        (the same row may go to several tasks: halo replicas), a ``range`` or a
        ``slice``. The checkpoint's decomposition does not matter.
    policy : {"hio", "sio", "nio"}
        How each I/O node orders the requests of concurrent restarts.
    cluster : IOCluster, optional
        Where to read; default: an embedded cluster started for this call, the rows
        gathered here before it stops (``result.data``).
    workers : sequence of str, optional
        Per task, the worker its rows go to (default: the compute workers in turn).
    application, access : optional
        The restart's name and collective access (several reads of one application are
        served in access order on every node). Applications are ordered by start time.
    window, threshold : optional
        The read policy's window width and HIO's shuffle ÷ read threshold.
    shuffle : {"auto", "dask"}
        How rows reach a task on the aggregator's own host: ``"auto"``: the task
        copies them straight out of the aggregator's memory (one copy, no socket;
        :mod:`~orchestrator.engine.cma`) where the cluster allows it; ``"dask"``:
        through Dask, like rows for other hosts.
    aggregators : int, optional
        The restart's file domains (the HIO paper's aggregators): each is read by one
        request on every I/O node holding part of it; a task's rows come from the
        domains holding them, so the first tasks start while the last domains are
        read (default 1: one request per I/O node; measured on 2 cores, 16 domains
        for 16 tasks took 3× longer: each request is a Dask task).
    cost : CostModel or str, optional
        Whose disk rate HIO's read estimates use (a preset name or a
        :class:`~orchestrator.cost.CostModel`; default ``"modern"``). The shuffle side
        is measured (:func:`measure_links`); a testbed passes its profile's model.
    wait : bool
        Return when every task has its rows (default) or at once (``result.wait()``).

    Returns
    -------
    ReadResult

    Raises
    ------
    CheckpointError
        Not a committed checkpoint, or a stripe that does not match its manifest (named).
    InputError
        A bad request, named by task and dataset.

    Examples
    --------
    >>> res = read_stage("ck.h5", [{"u": slice(0, 50)}, {"u": range(40, 100)}],
    ...                  cluster=cl)  # doctest: +SKIP
    >>> res.gather()[1]["u"].shape  # doctest: +SKIP
    (60,)
    """
    # a NumPy array compared with `in` raises ValueError: a name first
    if not isinstance(policy, str) or policy not in POLICIES:
        raise InputError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if isinstance(access, np.integer):
        access = int(access)
    if isinstance(window, np.integer):
        window = int(window)
    if not isinstance(wait, bool):
        raise InputError(f"wait must be True or False, got {wait!r}")
    if not isinstance(access, int) or isinstance(access, bool) or not 0 <= access < 2**31:
        raise InputError(f"access must be a whole number in 0..2**31-1, got {access!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise InputError(f"window must be a whole number >= 1, got {window!r}")
    try:  # an int too large for a float (10**400) is no threshold either
        as_float = float(threshold) if not isinstance(threshold, bool) else float("nan")
    except (TypeError, ValueError, OverflowError):
        as_float = float("nan")
    if (
        not isinstance(threshold, (int, float, np.floating, np.integer))
        or not as_float >= 0
        or as_float == float("inf")
    ):
        raise InputError(f"threshold must be a number >= 0, got {reprlib.repr(threshold)}")
    if not isinstance(shuffle, str) or shuffle not in ("auto", "dask"):
        raise InputError(f"shuffle must be 'auto' or 'dask', got {shuffle!r}")
    if application is not None and not isinstance(application, str):
        raise InputError(f"application must be a name, got {application!r}")
    disk = _disk_rate(cost)
    path = checkpoint_path(checkpoint).absolute()  # the workers do not share our folder
    if not path.exists():
        raise CheckpointError(f"{path} does not exist")
    manifest, fmt = _manifest(path)
    if cluster is None:
        from .cluster import local_cluster

        with local_cluster() as own:
            res = read_stage(
                path,
                requests,
                policy=policy,
                cluster=own,
                workers=workers,
                application=application,
                access=access,
                window=window,
                threshold=threshold,
                shuffle=shuffle,
                aggregators=aggregators,
                cost=cost,
            )
            res.data = res.gather()
            res.futures = []
            return res
    if not isinstance(cluster, IOCluster):
        raise InputError(f"cluster must be an IOCluster, got {type(cluster).__name__}")
    cluster.check_open()
    plan = plan_reads(manifest["datasets"], requests, cluster.n_ionodes, aggregators)
    n_tasks = plan.n_tasks
    if workers is None:
        targets = [cluster.compute_worker(t) for t in range(n_tasks)]
    else:
        if isinstance(workers, str) or not isinstance(workers, Sequence):
            raise InputError(f"workers must be a list of worker addresses, got {workers!r}")
        if len(workers) != n_tasks:
            raise InputError(f"workers must name one worker per task ({n_tasks}), got {workers!r}")
        targets = [str(w) for w in workers]
        client = cluster.client  # a fresh query: scheduler_info() may be a stale cache
        known = set(client.sync(client.scheduler.identity, n_workers=-1).get("workers", {}))
        unknown = [w for w in targets if w not in known]
        if unknown:
            raise InputError(f"workers: {unknown[0]!r} is not a worker of this cluster")
    links = measure_links(cluster) if policy == "hio" else Links(1.0, 1.0, 0.0)
    started = time.perf_counter()
    app = (time.time_ns(), application or f"restart-{os.getpid()}-{next(_APPS)}")
    kinds = {name: (m.dtype, tuple(m.shape[1:])) for name, m in plan.meta.items() if m.shape}
    hosts = {w: _host(w) for w in set(targets) | set(cluster.ionodes)}
    live = [a for a in plan.aggregators if a.stripes]
    shuffles = []
    for a in live:
        io = cluster.ionodes[a.node]
        sends = a.sends(plan.meta)
        shuffles.append(
            max(
                (
                    links.seconds(b, hosts[targets[t]] == hosts[io])
                    for t, b in sends.items()
                    if targets[t] != io  # a task on the aggregator's worker: nothing moves
                ),
                default=0.0,
            )
            if policy == "hio"
            else 0.0
        )
    app_shuffle = max(shuffles, default=0.0)
    cma = shuffle == "auto" and cma_works(cluster)
    client = cluster.client
    futures: list[Any] = [None] * n_tasks
    outs: dict[int, Any] = {}
    tasks: dict[int, AggregatorTask] = {}
    by_worker: dict[str, list[int]] = {}
    try:
        for i, (a, sh) in enumerate(zip(live, shuffles, strict=True)):
            io = cluster.ionodes[a.node]
            task = AggregatorTask(
                path=str(path),
                fmt=fmt,
                node=a.node,
                domain=a.domain,
                app=app,
                access=access,
                policy=policy,
                window=window,
                threshold=as_float,
                read_seconds=a.read_bytes(plan.meta) / disk,
                shuffle_seconds=sh,
                app_shuffle=app_shuffle,
                datasets={
                    name: (
                        m.dtype.str,
                        tuple(m.shape[1:]),
                        m.stripe_bytes,
                        m.nbytes,
                        m.checksums,
                    )
                    for name, m in plan.meta.items()
                    if name in a.stripes
                },
                stripes=a.stripes,
                pieces=a.pieces,
                local=frozenset(t for t in a.pieces if cma and hosts[targets[t]] == hosts[io]),
            )
            if cma and all(hosts[targets[t]] == hosts[io] for t in a.pieces):
                task.pipelined = True
                task.whole = {
                    name: copied_whole(
                        stripes,
                        [per[name] for per in a.pieces.values() if name in per],
                        plan.meta[name].stripe_bytes,
                        plan.meta[name].nbytes,
                    )
                    for name, stripes in a.stripes.items()
                }
                task.pieces = {}  # the node needs none: the tasks' runs are made here
                task.local = frozenset()
            tasks[i] = task
            if task.pipelined:  # queued below, all at once
                by_worker.setdefault(io, []).append(i)
            else:
                outs[i] = client.submit(aggregate, task, workers=[io], pure=False)
        if by_worker:
            # a pipelined request answers at once with a few addresses: queue them with one
            # direct call per I/O worker, not a task each — the restart's tasks then go
            # with their runs and those addresses, and no task waits for another's result
            got = client.run(
                offer_here,
                {w: [tasks[i] for i in idx] for w, idx in by_worker.items()},
                workers=list(by_worker),
            )
            for w, idx in by_worker.items():
                outs.update(zip(idx, got[w], strict=True))
        firsts = {i: _first_flags(tasks[i]) for i in outs if tasks[i].pipelined}
        calls = []
        for t in range(n_tasks):
            # a pipelined request's piece: the task's runs, made here, and the addresses
            pieces = [
                (
                    [
                        offered_runs(tasks[i], name, runs, firsts[i][name])
                        for name, runs in a.pieces[t].items()
                    ],
                    outs[i],
                )
                if tasks[i].pipelined
                else client.submit(
                    _piece, outs[i], t, workers=[cluster.ionodes[a.node]], pure=False
                )
                for i, a in enumerate(live)
                if t in a.pieces
            ]
            calls.append((plan.lengths[t], {name: kinds[name] for name in plan.lengths[t]}, pieces))
        # one message per worker, not per task: each is a round trip of the driver's loop
        for w in dict.fromkeys(targets):
            mine = [t for t in range(n_tasks) if targets[t] == w]
            got = client.map(
                _assemble, *zip(*(calls[t] for t in mine), strict=True), workers=[w], pure=False
            )
            for t, f in zip(mine, got, strict=True):
                futures[t] = f
        # the aggregators' rows stay on their workers while the tasks that take them
        # need them, not while something here happens to hold their futures
        from distributed import Future

        for f in [*outs.values(), *(p for call in calls for p in call[2])]:
            if isinstance(f, Future):
                f.release()
    except BaseException:  # nothing of this restart may stay queued, held or running
        from distributed import Future

        started_here = [f for f in [*outs.values(), *futures] if isinstance(f, Future)]
        if started_here:
            client.cancel(started_here)
        nodes = sorted({cluster.ionodes[a.node] for a in live})
        client.run(finish, app, False, workers=nodes, on_error="return")
        raise
    res = ReadResult(
        futures,
        plan,
        app,
        policy,
        started,
        workers=targets,
        _client=client,
        _io=sorted({cluster.ionodes[a.node] for a in live}),
    )
    return res.wait() if wait else res


def _first_flags(task: AggregatorTask) -> dict[str, int]:
    """Each dataset's first flag in a pipelined request (the datasets' stripes in turn)."""
    first, at = {}, 0
    for name, stripes in task.stripes.items():
        first[name] = at
        at += len(stripes)
    return first


def _disk_rate(cost: Any) -> float:
    """The read rate HIO's estimates use: the cost model's disk (the shuffle is measured;
    reads are estimated, the threshold compares the two)."""
    from ..cost import get_cost_model

    if cost is None:  # get_cost_model's default is the 2004 cluster: say it instead
        raise InputError("cost must be a CostModel or a preset name, got None")
    return float(get_cost_model(cost).disk_bandwidth)  # CostModelError: an InputError
