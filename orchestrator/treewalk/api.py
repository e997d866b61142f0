"""``orchestrator.walk``: walk a tree with walkers on a Dask cluster, index it, act on it.

Examples
--------
>>> import orchestrator as orc
>>> with orc.local_cluster(n_ionodes=2, n_compute=0) as cl:  # doctest: +SKIP
...     result = orc.walk("runs/", cluster=cl, algorithm="h-drqs")
>>> result.entries, result.index  # doctest: +SKIP
(1000001, '/tmp/iorch-walk-.../')
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks import is_int
from ..errors import ClusterError, InputError, WalkError
from .operations import Callback, Operation
from .runtime import WalkerSpec, abort, close_mailbox, open_mailbox, progress, run_walker

__all__ = ["ALGORITHMS", "WalkResult", "walk"]

#: algorithm -> (queue split, victim choice, threads per walker; None: the caller's)
ALGORITHMS: dict[str, tuple[str, str, int | None]] = {
    "drqs": ("random", "random", 1),
    "deqs": ("equal", "random", 1),
    "pa-drqs": ("random", "proximity", 1),
    "h-drqs": ("random", "random", None),
    "cp": ("", "", 1),
    "cp-dirs": ("", "", 1),
}
#: H-DRQS's threads per walker when not given (the paper runs one process per node)
H_THREADS = 4
#: resident memory of one walker's worker process (Dask, pyarrow, its batch of rows):
#: 165 MiB measured per process with 8 and 32 walkers (a hostile probe's peak RSS)
WALKER_MEMORY = 170 << 20


def check_walkers(n: int) -> None:
    """Refuse an embedded cluster of ``n`` walkers that memory cannot hold.

    Examples
    --------
    >>> check_walkers(2)
    >>> check_walkers(10**6)
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: walkers=1000000 (walker processes of about 170 MiB each) ...
    """
    from ..limits import check_memory

    check_memory(n * WALKER_MEMORY, f"walkers={n} (walker processes of about 170 MiB each)")


@dataclass
class WalkResult:
    """What a walk did: entries indexed, messages and bytes between walkers, balance.

    ``walkers`` holds each walker's own account (rank, address, host, items
    processed, rows written, the :class:`~orchestrator.treewalk.lister.Tally`,
    messages and bytes it sent to each rank, seconds busy).
    """

    root: str
    algorithm: str
    index: str
    seconds: float
    walkers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def entries(self) -> int:
        """Rows in the index: every entry of the tree once (unreadable ones included)."""
        return sum(w["rows"] for w in self.walkers)

    @property
    def entries_per_second(self) -> float:
        """Entries indexed per second of the whole walk (start of the tasks to the end)."""
        return self.entries / self.seconds if self.seconds > 0 else float("inf")

    def total(self, key: str) -> int:
        """A tally summed over the walkers (``links``, ``unreadable``, ``vanished`` ...)."""
        return sum(int(w["tally"][key]) for w in self.walkers)

    @property
    def messages(self) -> list[list[int]]:
        """Messages sent from rank i (row) to rank j (column)."""
        return [list(w["messages"]) for w in self.walkers]

    @property
    def nbytes(self) -> list[list[int]]:
        """Bytes sent from rank i (row) to rank j (column), msgpack-encoded."""
        return [list(w["bytes"]) for w in self.walkers]

    @property
    def total_messages(self) -> int:
        """All messages exchanged between walkers."""
        return sum(map(sum, self.messages))

    @property
    def total_bytes(self) -> int:
        """All bytes exchanged between walkers."""
        return sum(map(sum, self.nbytes))

    def work(self) -> list[int]:
        """Entries each walker listed: its share of the work."""
        return [int(w["tally"]["entries"]) for w in self.walkers]

    def imbalance(self) -> float:
        """The largest deviation of a working walker's share from the mean, as a fraction
        of the mean (0.25: every walker within ±25 %). CP's master lists nothing and is
        left out."""
        work = self.work()[1:] if self.algorithm.startswith("cp") else self.work()
        mean = sum(work) / len(work) if work else 0.0
        return max(abs(w - mean) for w in work) / mean if mean else 0.0


def _check(
    path: Any, algorithm: Any, threads: Any, walkers: Any, seed: Any, hosts: Any
) -> tuple[str, int | None]:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise InputError(f"path must name a folder, got {path!r}")
    given = os.fspath(path)
    try:
        mode = os.lstat(given).st_mode  # the kernel's reading: "a/link/.." is link's parent
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or err
        raise InputError(f"path {given!r} cannot be walked: {why}") from None
    if stat.S_ISLNK(mode):
        raise InputError(
            f"path {given!r} is a symbolic link; give the folder it names (links are never "
            "followed)"
        )
    if not stat.S_ISDIR(mode):
        raise InputError(f"path {given!r} is not a folder")
    p = os.path.realpath(given)  # as the kernel resolves it, not as text
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise InputError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if threads is not None and (not is_int(threads, 1, 257)):
        raise InputError(f"threads must be a whole number in [1, 256], got {threads!r}")
    fixed = ALGORITHMS[algorithm][2]
    if threads is not None and fixed is not None and threads != fixed:
        raise InputError(
            f"threads={threads!r} is for h-drqs; {algorithm} runs one thread per walker"
        )
    if walkers is not None and not is_int(walkers, 1, 1 << 16):
        raise InputError(f"walkers must be a whole number in [1, 65535], got {walkers!r}")
    if algorithm.startswith("cp") and walkers is not None and walkers < 2:
        raise InputError(f"walkers must be >= 2 for cp (a master and a slave), got {walkers!r}")
    if not is_int(seed, 0, 2**63):
        raise InputError(f"seed must be a whole number in [0, 2**63), got {seed!r}")
    if hosts is not None and (
        not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) and h for h in hosts)
    ):
        raise InputError(f"hosts must be a sequence of host names, one per walker, got {hosts!r}")
    if fixed is None:
        return p, H_THREADS if threads is None else threads
    return p, fixed


def _check_places(root: str, op: Operation, index: Any) -> None:
    """An operation bound to a tree walks that tree; the index is kept out of the tree
    (and out of a copy's DEST): a walk would list its own parts, a copy would hold them."""
    bound = getattr(op, "root", None)
    if bound is not None and os.path.realpath(bound) != root:
        raise InputError(f"op is for the tree {bound!r}, not {root!r}")
    if index is None:
        return
    where = os.path.realpath(os.fspath(index))
    for name, top in (("the tree", root), ("DEST", getattr(op, "dest", None))):
        if top is not None and (where == top or where.startswith(top.rstrip("/") + "/")):
            raise InputError(f"index {os.fspath(index)!r} is inside {name} ({top})")
    if os.path.lexists(where) and not os.path.isdir(where):
        raise InputError(f"index {os.fspath(index)!r} exists and is not a folder")


def walk(
    path: str | os.PathLike[str],
    callback: Callable[[str, str], Any] | None = None,
    *,
    op: Operation | None = None,
    algorithm: str = "h-drqs",
    cluster: Any = None,
    walkers: int | None = None,
    threads: int | None = None,
    index: str | os.PathLike[str] | None = None,
    stat: bool = False,
    seed: int = 0,
    hosts: Sequence[str] | None = None,
    on_progress: Callable[[int, float], Any] | None = None,
) -> WalkResult:
    """Walk the tree under ``path`` with walkers on Dask workers, indexing every entry.

    Each walker streams its rows to its own Parquet file under ``index``
    (:func:`~orchestrator.treewalk.index.read_index` reads them as one table).
    Links are listed, never followed; unreadable folders and entries that
    vanish during the walk are rows with an ``error``, not failures.

    Parameters
    ----------
    path : str or path-like
        The folder to walk (not a link).
    callback : callable, optional
        ``callback(path, kind)`` on every entry, on the walker that lists it; a
        value it returns (not None) is the entry's ``result``. It must pickle.
    op : Operation, optional
        An operation instead of a callback (:mod:`~orchestrator.treewalk.ops`).
    algorithm : {"h-drqs", "drqs", "deqs", "pa-drqs", "cp", "cp-dirs"}
        How walkers share work (see :doc:`/walk`); ``cp`` is the centralized
        baseline (rank 0 is a master that walks nothing; every entry goes through
        it), ``cp-dirs`` a kinder one (only folders go through the master).
    cluster : IOCluster, optional
        Where the walkers run: one per I/O worker. Default: an embedded
        cluster of ``walkers`` (2) processes, closed afterwards.
    walkers : int, optional
        How many walkers (the first I/O workers, then compute workers).
    threads : int, optional
        H-DRQS's threads per walker (4).
    index : path-like, optional
        The index folder (created; default a new temporary folder). It must be
        reachable at the same path by every walker.
    stat : bool
        Whether rows carry size, mtime, mode and nlink (one ``lstat`` each).
    seed : int
        Seeds the walkers' random choices.
    hosts : sequence of str, optional
        Each walker's host for PA-DRQS (default: from the workers' addresses).
    on_progress : callable, optional
        Called about once a second during the walk with the entries listed so
        far and the seconds since the start, and once at its end.

    Returns
    -------
    WalkResult

    Examples
    --------
    >>> import tempfile, orchestrator as orc
    >>> top = tempfile.mkdtemp()
    >>> r = orc.walk(top, algorithm="drqs", walkers=2)  # doctest: +SKIP
    >>> r.entries  # doctest: +SKIP
    1
    """
    root, nthreads = _check(path, algorithm, threads, walkers, seed, hosts)
    if not isinstance(stat, bool):
        raise InputError(f"stat must be True or False, got {stat!r}")
    if index is not None and (not isinstance(index, (str, os.PathLike)) or not os.fspath(index)):
        raise InputError(f"index must name a folder, got {index!r}")
    if cluster is not None and not hasattr(cluster, "client"):
        raise InputError(f"cluster must be an IOCluster (local_cluster, connect), got {cluster!r}")
    if callback is not None and op is not None:
        raise InputError("give either callback or op, not both")
    if callback is not None and not callable(callback):
        raise InputError(f"callback must be callable, got {callback!r}")
    if op is not None and not isinstance(op, Operation):
        raise InputError(f"op must be an Operation, got {op!r}")
    if on_progress is not None and not callable(on_progress):
        raise InputError(f"on_progress must be callable, got {on_progress!r}")
    operation = Callback(callback, stat=stat) if callback is not None else op or Operation(stat)
    _check_places(root, operation, index)
    if cluster is None:
        from ..engine.cluster import local_cluster

        check_walkers(walkers or 2)
        with local_cluster(n_ionodes=walkers or 2, n_compute=0) as cl:
            return _walk(
                cl, root, operation, algorithm, walkers, nthreads, index, seed, hosts, on_progress
            )
    return _walk(
        cluster, root, operation, algorithm, walkers, nthreads, index, seed, hosts, on_progress
    )


def _walk(
    cluster: Any,
    root: str,
    op: Operation,
    algorithm: str,
    walkers: int | None,
    threads: int | None,
    index: Any,
    seed: int,
    hosts: Sequence[str] | None,
    on_progress: Callable[[int, float], Any] | None,
) -> WalkResult:
    import cloudpickle
    from distributed.comm import get_address_host

    cluster.refresh()
    pool = list(cluster.ionodes) + list(cluster.compute)
    n = walkers or len(cluster.ionodes)
    if n > len(pool):
        raise InputError(f"walkers={n} but the cluster has {len(pool)} workers")
    if algorithm.startswith("cp") and op.hooked:
        raise InputError(f"{algorithm} is the benchmarks' baseline: it only indexes (list, stat)")
    if algorithm.startswith("cp") and n < 2:
        raise InputError(f"cp needs 2 walkers (a master and a slave); the cluster gives {n}")
    addresses = tuple(pool[:n])
    if hosts is not None and len(hosts) != n:
        raise InputError(f"hosts must name one host per walker ({n}), got {len(hosts)}")
    where = tuple(hosts) if hosts is not None else tuple(get_address_host(a) for a in addresses)
    made = index is None
    folder = (
        os.path.abspath(os.fspath(index))
        if index is not None
        else tempfile.mkdtemp(prefix="iorch-walk-")
    )
    if made:  # walking /tmp, or a tree that holds $TMPDIR: the parts would be walked too
        try:
            _check_places(root, op, folder)
        except InputError:
            _discard(folder, made)
            raise InputError(
                f"the default index folder ({folder}) is inside the tree or DEST; give index "
                "(--index) a folder outside them"
            ) from None
    os.makedirs(folder, exist_ok=True)
    if any(f.startswith("part-") for f in os.listdir(folder)):
        raise InputError(f"index {folder!r} already holds a walk's parts; give an empty folder")
    split, victims, _ = ALGORITHMS[algorithm]
    walk_id = uuid.uuid4().hex
    client = cluster.client
    st = os.lstat(root)
    specs = [
        WalkerSpec(
            walk_id,
            r,
            addresses,
            where,
            root,
            st.st_ino,
            st.st_dev,
            algorithm,
            split or "random",
            victims or "random",
            threads or 1,
            seed,
            folder,
            op,
        )
        for r in range(n)
    ]
    try:
        cloudpickle.dumps(op)  # what Dask sends it with
    except Exception as err:  # a lambda in a closure, a lock: the walkers could not get it
        _discard(folder, made)
        raise InputError(
            f"the callback (or op) must pickle to reach the walkers: {type(err).__name__}: {err}"
        ) from None
    client.run(open_mailbox, walk_id, workers=list(addresses))
    start = time.time()  # the walkers stamp their ends with the same (machine's) clock
    futures: list[Any] = []
    try:
        for s in specs:
            futures.append(
                client.submit(
                    run_walker,
                    s,
                    workers=[s.addresses[s.rank]],
                    allow_other_workers=False,
                    pure=False,
                    key=f"iorch-walk-{walk_id}-{s.rank}",
                )
            )
        checked = time.monotonic()
        while True:
            states = [f.status for f in futures]
            failed = [
                f for f, st in zip(futures, states, strict=True) if st in ("error", "cancelled")
            ]
            if failed:
                raise WalkError(_why(failed[0], addresses, futures))
            if all(st == "finished" for st in states):
                break
            time.sleep(0.01)
            if time.monotonic() - checked > 1.0:  # a walker whose worker died never ends
                checked = time.monotonic()
                live = set(client.scheduler_info(n_workers=-1)["workers"])
                gone = [a for a in addresses if a not in live]
                if gone:
                    raise WalkError(
                        f"the worker of walker {addresses.index(gone[0])} ({gone[0]}) is gone"
                    )
                if on_progress is not None:
                    counts = client.run(progress, walk_id, workers=list(addresses))
                    on_progress(sum(counts.values()), time.time() - start)
        results = client.gather(futures)
        if any(w.get("stopped") for w in results):  # another walk's driver cannot stop ours
            raise WalkError("the walk was stopped before it ended")
    except BaseException:
        _stop(client, walk_id, futures, addresses)
        _discard(folder, made)
        raise
    finally:
        try:
            client.run(close_mailbox, walk_id, workers=_live(client, addresses), on_error="ignore")
        except (OSError, ClusterError):
            pass
    seconds = max(w["end"] for w in results) - start
    if on_progress is not None:  # the last word, however short the walk
        on_progress(sum(w["rows"] for w in results), seconds)
    op.finish([w["op"] for w in results])
    return WalkResult(root, algorithm, folder, seconds, sorted(results, key=lambda w: w["rank"]))


def _why(future: Any, addresses: Sequence[str], futures: list[Any]) -> str:
    rank = futures.index(future)
    try:
        err = future.exception(timeout=5)
    except Exception as e:  # cancelled: its worker died
        return f"walker {rank} ({addresses[rank]}) was lost ({type(e).__name__})"
    if isinstance(err, WalkError):
        return str(err)
    return f"walker {rank} ({addresses[rank]}) failed: {type(err).__name__}: {err}"


def _live(client: Any, addresses: Sequence[str]) -> list[str]:
    """The walkers' workers still in the cluster (``Client.run`` on a dead one waits out a
    30 s connect timeout)."""
    try:
        live = set(client.scheduler_info(n_workers=-1)["workers"])
    except Exception:  # the scheduler is going: nobody to reach
        return []
    return [a for a in addresses if a in live]


def _discard(folder: str, made: bool) -> None:
    """A failed walk leaves no index folder it made itself."""
    if made:
        shutil.rmtree(folder, ignore_errors=True)


def _stop(client: Any, walk_id: str, futures: list[Any], addresses: Sequence[str]) -> None:
    """Tell every live walker to stop and wait for their tasks to end (a walker never
    outlives the call that started it)."""
    from distributed import wait

    try:
        live = _live(client, addresses)
        client.run(abort, walk_id, workers=live, on_error="ignore")
        # a walker whose worker died never ends: wait only for the others
        wait([f for f, a in zip(futures, addresses, strict=False) if a in live], timeout=5)
        client.cancel(futures)
    except Exception:  # the cluster itself is going: nothing left to stop
        pass
