"""Dask clusters with I/O workers: the embedded local default, or an existing scheduler.

I/O worker ``k`` is named ``io-k`` and carries the resources ``io=1`` and
``io-k=1``; compute workers are named ``compute-j``. Everything started here
binds to 127.0.0.1 and, unless asked otherwise, speaks TLS with a certificate
made for this cluster alone (:mod:`~orchestrator.engine.security`).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import dask

from .. import defaults
from ..errors import ClusterError
from ..files import check_input_file, signals_deferred
from .security import load_credentials, new_security, publish_credentials, withdraw_credentials

__all__ = [
    "ClusterError",
    "IOCluster",
    "connect",
    "discover_workers",
    "ionode_name",
    "ionode_number",
    "ionode_resources",
    "ionode_rule",
    "local_cluster",
    "scheduler_address",
]

log = logging.getLogger("orchestrator.engine.cluster")

LOOPBACK = "127.0.0.1"
#: the embedded cluster's housekeeping, slowed down. Each of its servers checks its event
#: loop every 20 ms, samples the machine every 0.5 s and its memory every 0.1 s; with the
#: scheduler and six Nannies in one process and six workers beside it, that kept 0.29 of a
#: core busy while nothing ran (measured here, 10 s idle; 0.07 with these values), CPU a
#: stage on a small machine needs. The memory limit is still checked twice a second
_QUIET = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "500ms",
}


def ionode_name(k: int) -> str:
    """The name of I/O worker ``k`` (also its own Dask resource).

    Examples
    --------
    >>> ionode_name(3)
    'io-3'
    """
    return f"io-{k}"


def ionode_resources(k: int) -> dict[str, int]:
    """The Dask resources of I/O worker ``k``: ``io`` (any I/O node) and ``io-K`` (this one).

    Examples
    --------
    >>> ionode_resources(0)
    {'io': 1, 'io-0': 1}
    """
    return {"io": 1, ionode_name(k): 1}


def ionode_number(name: str) -> int | None:
    """``K`` of a worker name or resource ``io-K``; None for anything else.

    Examples
    --------
    >>> ionode_number("io-12"), ionode_number("io"), ionode_number("compute-1")
    (12, None, None)
    """
    head, _, k = name.partition("-")
    return int(k) if head == "io" and k.isdigit() else None


@dataclass
class IOCluster:
    """A Dask client plus the addresses of the I/O workers (by I/O node) and compute workers.

    Use as a context manager; a cluster this object started is stopped on
    exit, one it merely connected to is left running.
    """

    client: Any
    ionodes: list[str]
    compute: list[str]
    _owned: Any = field(default=None, repr=False)
    #: the ``distributed.Security`` its connections use (None: plain TCP)
    security: Any = field(default=None, repr=False)
    _published: str | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """The scheduler's address (for Parsl apps and other processes to contribute through).

        Examples
        --------
        >>> local_cluster(1, 1).address  # doctest: +SKIP
        'tcp://127.0.0.1:40123'
        """
        return str(self.client.scheduler.address)

    @property
    def n_ionodes(self) -> int:
        """Number of I/O workers."""
        return len(self.ionodes)

    def compute_worker(self, client: int) -> str:
        """The compute worker that holds client ``client``'s contribution (round robin)."""
        pool = self.compute or self.ionodes
        return pool[client % len(pool)]

    def check_open(self) -> None:
        """Raise :class:`~orchestrator.errors.ClusterError` if this cluster's client is closed
        (the cluster's ``with`` block has ended): nothing can run on it.

        Examples
        --------
        >>> with local_cluster(1, 1) as cl:  # doctest: +SKIP
        ...     pass
        >>> cl.check_open()  # doctest: +SKIP
        Traceback (most recent call last):
        orchestrator.errors.ClusterError: this cluster's client is closed: ...
        """
        status = getattr(self.client, "status", "running")
        if status not in ("running", "connecting", "newly-created"):
            raise ClusterError(
                f"this cluster's client is {status}: nothing can run on it (was its "
                "`with` block left, or close() called?)"
            )

    def refresh(self, timeout: float = 60.0) -> None:
        """Re-discover the workers, waiting until as many I/O workers as before are back.

        A Nanny restarts a worker that died (with a new address), so a
        long-lived cluster object re-reads the addresses before each stage.
        """
        self.check_open()
        want = len(self.ionodes)
        deadline = time.monotonic() + timeout
        while True:
            try:  # the I/O workers come back as they were: none is chosen anew
                ionodes, compute = discover_workers(self.client, choose=False)
            except ClusterError:
                ionodes, compute = [], []
            if len(ionodes) >= want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if len(ionodes) < want:
            raise ClusterError(
                f"only {len(ionodes)} of {want} I/O workers are back after {timeout} s"
            )
        self.ionodes, self.compute = ionodes, compute

    def network_bandwidth(self, nbytes: int = 32 << 20, repeats: int = 3) -> float:
        """Bytes/s of moving one array from a compute worker to an I/O worker (best of ``repeats``).

        What a piece costs on its way to its I/O node here — loopback TCP on
        the embedded cluster, the interconnect under Slurm — measured, so a
        cost model and the mesh dump's ``auto`` rule need not assume it.
        Includes one task's scheduling overhead, negligible at 32 MiB.

        Examples
        --------
        >>> with local_cluster(1, 1) as cl:  # doctest: +SKIP
        ...     cl.network_bandwidth() > 1e8
        True
        """
        import numpy as np

        src, dst = self.compute_worker(0), self.ionodes[-1]
        best = float("inf")
        for _ in range(repeats):
            blob = self.client.submit(np.ones, nbytes, np.uint8, workers=[src], pure=False)
            blob.result()
            t0 = time.perf_counter()
            size = self.client.submit(len, blob, workers=[dst], pure=False)
            size.result()
            best = min(best, time.perf_counter() - t0)
            # release, not cancel: cancelling a key together with its dependent
            # trips an assertion in the scheduler (stimulus_cancel, ts.who_wants)
            self.release([size, blob])
        return nbytes / best

    def release(self, futures: list[Any], timeout: float = 10.0) -> None:
        """Release futures and wait until this client has dropped them (release is async).

        Prefer this to ``Client.cancel`` for futures that depend on each other:
        cancelling a key together with its dependent trips an assertion in the
        scheduler (``stimulus_cancel``: ``assert ts.who_wants``).

        Examples
        --------
        >>> cl.release([blob, size])  # doctest: +SKIP
        """
        keys = {f.key for f in futures}
        for f in futures:
            f.release()
        deadline = time.monotonic() + timeout
        while keys & set(self.client.futures) and time.monotonic() < deadline:
            time.sleep(0.005)

    def ingest_bandwidth(self, nbytes: int = 256 << 20, pieces: int = 4, repeats: int = 2) -> float:
        """Bytes/s of moving ``nbytes`` from the compute workers into all I/O workers at once.

        Every I/O worker pulls its share (``pieces`` arrays, from the compute
        workers in turn) concurrently, with no write: the worker-to-worker
        copy rate of this cluster under load, which bounds any dispatch that
        moves a stage's bytes between processes (on one machine, the CPU
        time of the copies; across machines, the network). Best of
        ``repeats``: the first copy into a fresh worker also pays for faulting
        in its memory.

        Examples
        --------
        >>> with local_cluster(2, 1) as cl:  # doctest: +SKIP
        ...     cl.ingest_bandwidth(64 << 20) > 1e7
        True
        """
        return max(self._ingest_once(nbytes, pieces) for _ in range(max(1, repeats)))

    def _ingest_once(self, nbytes: int, pieces: int) -> float:
        import numpy as np
        from distributed import wait

        n_io = self.n_ionodes
        size = max(1, nbytes // (n_io * pieces))
        blobs = [
            [
                self.client.submit(
                    np.ones,
                    size,
                    np.uint8,
                    pure=False,
                    workers=[self.compute_worker(s * pieces + j)],
                )
                for j in range(pieces)
            ]
            for s in range(n_io)
        ]
        wait([b for bs in blobs for b in bs])
        t0 = time.perf_counter()
        sinks = [
            self.client.submit(_total_nbytes, *bs, workers=[self.ionodes[s]], pure=False)
            for s, bs in enumerate(blobs)
        ]
        moved = sum(self.client.gather(sinks))
        seconds = time.perf_counter() - t0
        self.release([*sinks, *(b for bs in blobs for b in bs)])
        return moved / seconds

    def worker_pids(self) -> dict[str, int]:
        """PID of every worker process, by address (to stop one for real in tests)."""
        return dict(self.client.run(os.getpid))

    def close(self, drain: float = 5.0) -> None:
        """Close the client, and the cluster if this object started it.

        A cluster this object started is closed once no task runs on it (at
        most ``drain`` seconds): after an interrupted stage its writer loops are
        stopping, and a worker closed under a running task logs Dask's
        "ended with CancelledError" tracebacks for a task that was ending anyway.
        """
        if self._owned is not None:
            deadline = time.monotonic() + drain
            try:
                while any(self.client.processing().values()) and time.monotonic() < deadline:
                    time.sleep(0.1)
                # a worker whose heartbeat is in flight while the scheduler closes logs
                # "Failed to communicate with scheduler during heartbeat" with a
                # traceback (seen twice at the end of write-bench runs, not reproduced
                # on demand): stop the heartbeats first, waiting at most 2 s on workers
                # too busy to answer
                pool = ThreadPoolExecutor(1, thread_name_prefix="iorch-close")
                try:
                    pool.submit(self.client.run, _stop_heartbeat).result(timeout=2.0)
                finally:
                    pool.shutdown(wait=False)
            except Exception:  # a scheduler already gone: nothing to wait for
                pass
        try:
            self.client.close()
            if self._owned is not None:
                self._owned.close()
                self._owned = None
        finally:  # the files go even if closing failed: they open nothing any more
            if self._published is not None:
                withdraw_credentials(self._published, self.security)
                self._published = None

    def __enter__(self) -> IOCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop_heartbeat(dask_worker: Any) -> None:
    """On a worker of a cluster about to close: send no more heartbeats to the scheduler."""
    pc = dask_worker.periodic_callbacks.get("heartbeat")
    if pc is not None:
        pc.stop()


def _total_nbytes(*arrays: Any) -> int:
    return sum(int(a.nbytes) for a in arrays)


def _signals_held() -> Any:
    """Hold SIGINT and SIGTERM for the block; deliver them when it ends.

    Interrupted halfway, SpecCluster leaves nannies starting; its exit hook
    then fails on them and prints Dask's tracebacks instead of the user's
    Ctrl-C. Held, the signal waits until the cluster is up and can be closed
    in order (a few seconds). A second one is not held: a user who insists
    gets the interrupt at once.
    """
    return signals_deferred(insist=True)


def _drop_cancelled_at_close(record: logging.LogRecord) -> bool:
    """False for Dask's "Async instruction ... ended with CancelledError" warning."""
    return "ended with CancelledError" not in record.getMessage()


def quiet_cancellations() -> Any:
    """A worker plugin for the embedded cluster that drops one harmless warning of Dask's.

    When the cluster closes under an interrupted stage, each worker cancels
    the tasks still executing and logs "Async instruction ... ended with
    CancelledError" with a traceback. Harmless here: the stage that ran those
    tasks has already failed and removed its temporary output, and the user
    has been told (``iorch: interrupted ...``). Every other warning stays.

    Examples
    --------
    >>> cl.client.register_plugin(quiet_cancellations())  # doctest: +SKIP
    """
    from distributed import WorkerPlugin

    class QuietCancellations(WorkerPlugin):
        name = "iorch-quiet-cancellations"

        def setup(self, worker: Any) -> None:
            logger = logging.getLogger("distributed.worker.state_machine")
            logger.addFilter(_drop_cancelled_at_close)

    return QuietCancellations()


def _embedded_cluster_class() -> type:
    """SpecCluster whose nannies are never closed because their worker died.

    SpecCluster closes a worker's nanny if, ``lost-worker-timeout`` (15 s)
    after the worker left, no worker of that name is registered. Our nannies
    restart a killed worker at once; but when the same worker dies twice
    within the timeout, the first death's timer may fire while the second
    restart is on its way, and the nanny is closed for good (seen in the kill
    suite: the cluster kept 3 of its 4 workers). Here only the cluster's own
    scaling or closing stops a nanny.
    """
    from distributed import SpecCluster

    class EmbeddedCluster(SpecCluster):
        def _update_worker_status(self, op: str, msg: Any) -> None:
            if op == "remove":  # Cluster's bookkeeping, without SpecCluster's timer
                # A worker killed right after it registered can be removed before its
                # "add" reached us (seen in CI: Cluster's own ``del`` raised KeyError,
                # which killed the status watcher and then the cluster's close)
                self.scheduler_info["workers"].pop(msg, None)
                return
            super()._update_worker_status(op, msg)

    return EmbeddedCluster


#: memory a worker process and its Nanny take for themselves, counted low (110-150 MB of
#: RSS measured, part of it shared): only what cannot start at all is refused
WORKER_OVERHEAD = 64 << 20


def _check_local_options(
    n_ionodes: Any,
    n_compute: Any,
    threads: Any,
    memory_limit: Any,
    compute_memory: Any,
    io_env: Any,
    security: Any,
) -> None:
    """Refuse what would start no cluster, or more worker processes than memory holds."""
    from ..checks import is_int
    from ..limits import check_memory

    if not is_int(n_ionodes, 1, 1 << 16) or not is_int(n_compute, 0, 1 << 16):
        raise ClusterError(
            f"need n_ionodes >= 1 and n_compute >= 0 (whole numbers), got {n_ionodes!r}, "
            f"{n_compute!r}"
        )
    if not is_int(threads, 1, 1 << 12):
        raise ClusterError(f"threads_per_compute must be a whole number >= 1, got {threads!r}")
    # a million I/O nodes grew to 1.5 GB before a single worker started (probe)
    check_memory(
        (n_ionodes + n_compute) * WORKER_OVERHEAD,
        f"{n_ionodes} I/O and {n_compute} compute worker processes",
        ClusterError,
    )
    from dask.utils import parse_bytes

    for name, value in (("memory_limit", memory_limit), ("compute_memory", compute_memory)):
        # as Dask reads it: "auto", bytes, a size ("2GiB"), or a float in (0, 1] (a share)
        if value is None or value == "auto" or is_int(value, 0):
            continue
        try:
            if isinstance(value, float):
                ok = 0 < value <= 1 or (value > 1 and value == int(value))
            else:
                ok = isinstance(value, str) and parse_bytes(value) >= 0
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise ClusterError(
                f"{name} must be 'auto', bytes, a size or a share in (0, 1], got {value!r}"
            )
    # values as the Nanny passes them, through str()
    if io_env is not None and (
        not isinstance(io_env, dict)
        or not all(isinstance(k, str) and k and "\0" not in k and "=" not in k for k in io_env)
        or not all(isinstance(v, str | int | float) and "\0" not in str(v) for v in io_env.values())
    ):
        raise ClusterError(f"io_env must map variable names to values, got {io_env!r}")
    if not (
        isinstance(security, bool)
        or security is None
        or hasattr(security, "get_tls_config_for_role")
    ):
        raise ClusterError(
            f"security must be True, False, None or a distributed.Security, got {security!r}"
        )


def local_cluster(
    n_ionodes: int = defaults.N_IONODES,
    n_compute: int = defaults.N_COMPUTE,
    memory_limit: str = "2GiB",
    threads_per_compute: int = 1,
    compute_memory: str | int | None = None,
    io_env: dict[str, str] | None = None,
    security: bool | Any = True,
) -> IOCluster:
    """Start the embedded cluster: ``n_ionodes`` I/O workers and ``n_compute`` compute workers.

    Workers are separate processes (``Nanny``), one thread per I/O worker,
    all listening on 127.0.0.1 with random ports; no dashboard.
    ``compute_memory`` overrides ``memory_limit`` for the compute workers,
    which hold the contributions (``"auto"``: Dask's share of the machine).

    ``security=True`` (the default) makes a certificate for this cluster
    alone: every connection must present it and is encrypted (TLS), so
    other users of the machine cannot reach the scheduler or run code in
    the workers; this user's other processes find it by the address
    (:mod:`~orchestrator.engine.security`). A ``distributed.Security`` is
    used as given; ``False`` is plain TCP, open to every local user (the
    copies between workers cost less CPU).

    Examples
    --------
    >>> from orchestrator.engine.cluster import local_cluster
    >>> with local_cluster(n_ionodes=2, n_compute=1) as cl:  # doctest: +SKIP
    ...     cl.ionodes
    ['tcp://127.0.0.1:...', 'tcp://127.0.0.1:...']
    """
    from distributed import Client, Nanny, Scheduler

    _check_local_options(
        n_ionodes, n_compute, threads_per_compute, memory_limit, compute_memory, io_env, security
    )
    sec = new_security() if security is True else (security or None)
    common: dict[str, Any] = {
        "host": LOOPBACK,
        "memory_limit": memory_limit,
        "silence_logs": logging.WARNING,
        # Dask's statistical profiler samples every thread's stack every 10 ms in every
        # worker, for a dashboard the embedded cluster does not serve: measured on a 1 GiB
        # stage, 0.25 of the 1.1 CPU-seconds the four idle-waiting I/O workers spent, on a
        # machine with 2 cores for 7 processes. A dotted key: the Nanny merges this over
        # the parent's configuration one level deep, and the worker sets it key by key
        "config": {"distributed.worker.profile.enabled": False, **_QUIET},
    }
    if sec is not None:
        common["security"] = sec
    workers: dict[str, dict[str, Any]] = {}
    for k in range(n_ionodes):
        workers[ionode_name(k)] = {
            "cls": Nanny,
            "options": {
                **common,
                "name": ionode_name(k),
                "nthreads": 1,
                "resources": ionode_resources(k),
                **({"env": io_env} if io_env else {}),
            },
        }
    for j in range(n_compute):
        workers[f"compute-{j}"] = {
            "cls": Nanny,
            "options": {
                **common,
                **({"env": io_env} if io_env else {}),
                "name": f"compute-{j}",
                "nthreads": threads_per_compute,
                "memory_limit": compute_memory if compute_memory is not None else memory_limit,
            },
        }
    scheduler = {
        "cls": Scheduler,
        "options": {
            "host": LOOPBACK,
            "dashboard": False,
            "dashboard_address": f"{LOOPBACK}:0",
            **({"security": sec} if sec is not None else {}),
        },
    }
    published = None
    # the scheduler, the Nannies and the client live in this process and read these when made
    with _signals_held() as held, dask.config.set(_QUIET):
        cluster = _embedded_cluster_class()(
            workers=workers, scheduler=scheduler, silence_logs=logging.WARNING, security=sec
        )
        try:
            if sec is not None:
                try:
                    publish_credentials(cluster.scheduler_address, sec)
                    published = cluster.scheduler_address
                except ClusterError as err:
                    # this process holds the certificate and needs no file; only other
                    # processes of the user (a Parsl worker, connect()) cannot join
                    log.warning("%s; only this process can use the cluster", err)
            client = Client(cluster, security=sec)
            client.register_plugin(quiet_cancellations())
            client.wait_for_workers(n_ionodes + n_compute, timeout=120)
            found = discover_workers(client)
        except Exception:
            try:
                cluster.close()
            finally:
                if published is not None:
                    withdraw_credentials(published, sec)
            raise
        if held:  # Ctrl-C or SIGTERM while starting: stop what was started, in order
            try:
                client.close()
                cluster.close()
            finally:
                if published is not None:
                    withdraw_credentials(published, sec)
    # a held signal is delivered here, once the cluster is closed (or up, if none came)
    log.info(
        "embedded cluster at %s: %d I/O, %d compute workers",
        cluster.scheduler_address,
        n_ionodes,
        n_compute,
    )
    return IOCluster(client, found[0], found[1], _owned=cluster, security=sec, _published=published)


def _check_address(address: Any) -> None:
    """A Dask address ``[scheme://]host:port``, or a ClusterError naming it."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    try:
        if not isinstance(address, str) or not address.strip():
            raise ValueError
        scheme, loc = parse_address(address)
        if scheme in ("tcp", "tls"):
            _, port = parse_host_port(loc)
            if not 0 < int(port) < 65536:
                raise ValueError
    except (ValueError, TypeError, AssertionError):  # Dask's errors for a malformed address
        raise ClusterError(
            f"scheduler address {address!r} is not [tcp:// or tls://]host:port"
        ) from None


def scheduler_address(scheduler_file: str, timeout: float = 60.0) -> str:
    """The address a Dask scheduler file names (waiting up to ``timeout`` s for the file).

    A scheduler started by the same batch script may not have written it yet,
    so a missing file is waited for, as ``distributed.Client`` does.

    Examples
    --------
    >>> scheduler_address("scheduler.json")  # doctest: +SKIP
    'tls://10.0.0.5:8786'
    """
    import json

    deadline = time.monotonic() + timeout
    while not os.path.exists(scheduler_file) and time.monotonic() < deadline:
        time.sleep(0.2)
    # a FIFO blocked for ever, /dev/zero read until memory ran out (probe)
    check_input_file(scheduler_file, "scheduler file", ClusterError, per_byte=4)
    try:
        with open(scheduler_file) as f:
            address = json.load(f)["address"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ClusterError(f"scheduler file {scheduler_file!r} is unusable: {err}") from None
    if not isinstance(address, str):
        raise ClusterError(f"scheduler file {scheduler_file!r}: address {address!r} is no string")
    return address


def connect(
    address: str | None = None, scheduler_file: str | None = None, security: Any = None
) -> IOCluster:
    """Join an existing Dask cluster and find its I/O workers by name (``io-K``) or resource.

    ``security`` is a ``distributed.Security`` for a ``tls://`` scheduler;
    by default the credentials a cluster of this user published for that
    address (:func:`~orchestrator.engine.security.load_credentials`), else
    Dask's configuration (``distributed.comm.tls.*``).

    Examples
    --------
    >>> from orchestrator.engine.cluster import connect
    >>> cl = connect(scheduler_file="scheduler.json")  # doctest: +SKIP
    """
    from distributed import Client

    if (address is None) == (scheduler_file is None):
        raise ClusterError("give exactly one of address and scheduler_file")
    if security is not None and not hasattr(security, "get_tls_config_for_role"):
        raise ClusterError(f"security must be a distributed.Security or None, got {security!r}")
    where = address if address is not None else scheduler_address(str(scheduler_file))
    _check_address(where)
    if security is None:
        security = load_credentials(where)
    if security is None and str(where).startswith("tls://"):
        import dask

        if not dask.config.get("distributed.comm.tls.client.cert", None):
            # Dask's own error here is a TypeError about an ssl_context
            raise ClusterError(
                f"scheduler {where} speaks TLS and this user has no credentials for it (none "
                "published for that address, none in Dask's configuration); pass "
                "security=distributed.Security(...) with the cluster's certificate"
            )
    try:
        client = Client(where, timeout=60, security=security)
    except OSError as err:  # refused, timed out, a TLS handshake that failed
        raise ClusterError(f"cannot connect to the scheduler at {where}: {err}") from None
    try:
        ionodes, compute = discover_workers(client)
    except Exception:
        client.close()
        raise
    return IOCluster(client, ionodes, compute, security=security)


#: a resource of the I/O workers chosen by :func:`discover_workers` on a cluster that
#: declared none (what chose them is in :func:`ionode_rule`)
AUTO_RESOURCE = "io-auto"
#: how the I/O workers of a scheduler (by its id) were chosen, when we chose them
_RULES: dict[str, str] = {}
#: schedulers whose workers declared I/O nodes themselves (by id)
_DECLARED: set[str] = set()


def ionode_rule(client: Any) -> str:
    """How the I/O workers of ``client``'s cluster were found: ``"declared"`` (named or
    given resource ``io-K``), or the rule that chose them (see :func:`discover_workers`).

    Examples
    --------
    >>> ionode_rule(cluster.client)  # doctest: +SKIP
    'declared'
    """
    return _RULES.get(_scheduler_id(client), "declared")


def _scheduler_id(client: Any, identity: dict[str, Any] | None = None) -> str:
    """The scheduler's own id: a new cluster on the same port is another one."""
    identity = identity or client.sync(client.scheduler.identity)
    return str(identity.get("id") or client.scheduler.address)


async def _claim_ionode(k: int, dask_worker: Any) -> None:
    await dask_worker.set_resources(**ionode_resources(k), **{AUTO_RESOURCE: 1})


def _choose_ionodes(client: Any, info: dict[str, Any]) -> bool:
    """Give I/O node resources to workers of a cluster that declared none (a plain
    ``LocalCluster``, ``SLURMCluster``, a scheduler file): the workers with resource
    ``io``, else the first worker of each host, else the first half by address."""
    from distributed.comm import get_address_host

    workers = sorted(info)
    if not workers:
        return False
    marked = [a for a in workers if "io" in info[a].get("resources", {})]
    firsts: dict[str, str] = {}
    for a in workers:
        firsts.setdefault(get_address_host(a), a)
    if marked:
        chosen, rule = marked, "the workers with resource io"
    elif len(firsts) > 1:
        chosen, rule = list(firsts.values()), "the first worker of each host"
    else:
        n = max(1, len(workers) // 2)
        chosen, rule = workers[:n], f"the first {n} of {len(workers)} workers by address"
    for k, addr in enumerate(chosen):
        client.run(_claim_ionode, k, workers=[addr])
    _RULES[_scheduler_id(client)] = rule
    log.warning(
        "no worker declares an I/O node (io-K): I/O nodes 0..%d are %s (%s)",
        len(chosen) - 1,
        rule,
        ", ".join(chosen),
    )
    return True


def discover_workers(client: Any, choose: bool = True) -> tuple[list[str], list[str]]:
    """I/O workers ordered by their ``io-K`` resource (or name), and the other workers.

    On a cluster where no worker declares an I/O node, ``choose`` picks them:
    the workers with resource ``io``; else, on several hosts, the first worker
    of each host; else the first half of the workers by address. They get the
    resources ``io-K`` (and ``io-auto``), and a warning says which.

    Examples
    --------
    >>> ionodes, compute = discover_workers(client)  # doctest: +SKIP
    """
    # a fresh query: Client.scheduler_info() may return a cache without workers
    identity = client.sync(client.scheduler.identity, n_workers=-1)
    info = identity.get("workers", {})
    where = _scheduler_id(client, identity)
    if any(_declares_ionode(w) for w in info.values()):
        _DECLARED.add(where)
    # never on a cluster seen with declared I/O workers: they may all be restarting
    elif choose and where not in _DECLARED and _choose_ionodes(client, info):
        return discover_workers(client, choose=False)
    io: dict[int, str] = {}
    compute = []
    for addr, w in info.items():
        k = None
        for res in w.get("resources", {}):
            k = ionode_number(res) if k is None else k
        if k is None:
            k = ionode_number(str(w.get("name", "")))
        if k is None:
            compute.append(addr)
        elif k in io:
            raise ClusterError(f"two workers claim I/O node {k}: {io[k]} and {addr}")
        else:
            io[k] = addr
    if not io:
        raise ClusterError("no I/O workers (named io-K or with resource io-K) in the cluster")
    if sorted(io) != list(range(len(io))):
        raise ClusterError(f"I/O nodes must be numbered 0..n-1, found {sorted(io)}")
    return [io[k] for k in range(len(io))], sorted(compute)


def _declares_ionode(w: dict[str, Any]) -> bool:
    names = [*w.get("resources", {}), str(w.get("name", ""))]
    return any(ionode_number(n) is not None for n in names)
