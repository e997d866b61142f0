"""The orchestrator's Dask cluster inside an allocation: a scheduler here, workers by ``srun``."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from orchestrator import defaults
from orchestrator.engine.cluster import (
    LOOPBACK,
    ClusterError,
    IOCluster,
    discover_workers,
    ionode_name,
    ionode_resources,
    local_cluster,
)
from orchestrator.engine.security import (
    new_security,
    publish_credentials,
    withdraw_credentials,
)
from orchestrator.errors import InputError, SlurmError

from .allocation import Allocation, choose_roles

log = logging.getLogger("orchestrator.slurm")


class _SrunWorkers:
    """The scheduler (in this process) and the ``srun`` steps of the workers."""

    def __init__(
        self, cluster: Any, steps: list[subprocess.Popen[bytes]], security: Any = None
    ) -> None:
        self.cluster = cluster
        self.steps = steps
        self.security = security

    def close(self) -> None:
        # close the nannies (each stops its worker cleanly), then the scheduler, so
        # the srun steps end by themselves; SIGTERM (srun then kills the tasks) only
        # for what hangs. Closing the scheduler first makes every worker log that
        # its nanny "died unexpectedly".
        if any(p.poll() is None for p in self.steps):
            try:
                args = self.security.get_connection_args("client") if self.security else {}
                self.cluster.sync(_terminate_nannies, self.cluster.scheduler_address, args)
            except Exception as e:  # the scheduler may be gone already
                log.debug("closing the nannies failed: %s", e)
        try:
            self.cluster.close()
        except Exception as e:
            log.debug("closing the scheduler failed: %s", e)
        # one deadline for all steps, then SIGTERM to every step still there, then SIGKILL
        for sig, grace in ((None, 15.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            alive = [p for p in self.steps if p.poll() is None]
            if not alive:
                break
            for p in alive:
                if sig is not None:
                    p.send_signal(sig)
            deadline = time.monotonic() + grace
            for p in alive:
                try:
                    p.wait(max(deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    pass


async def _terminate_nannies(address: str, connection_args: dict[str, Any]) -> None:
    import asyncio

    from distributed.core import rpc

    async with rpc(address, connection_args=connection_args) as sched:
        info = await sched.identity(n_workers=-1)
    nannies = [w["nanny"] for w in info.get("workers", {}).values() if w.get("nanny")]

    async def one(addr: str) -> None:
        async with rpc(addr, connection_args=connection_args) as nanny:
            await nanny.terminate()

    await asyncio.gather(*(one(a) for a in nannies), return_exceptions=True)


def allocation_cluster(
    io_nodes: int | str = 1,
    n_ionodes: int | None = None,
    shared_nodes: bool | None = None,
    compute_per_node: int = 1,
    local_directory: str | None = None,
    allocation: Allocation | None = None,
    timeout: float = 120.0,
    security: bool | Any = True,
) -> IOCluster:
    """Start the orchestrator's Dask cluster across the Slurm allocation this process runs in.

    The scheduler runs in this process; ``srun`` starts, per I/O node, its
    share of the ``n_ionodes`` I/O workers (one thread each, resources
    ``io=1, io-K=1``) and, per compute node, ``compute_per_node`` compute
    workers sharing the node's CPUs. A one-host allocation binds everything
    to 127.0.0.1; otherwise each worker listens on its node's host name.

    Parameters
    ----------
    io_nodes, n_ionodes, shared_nodes
        As in :func:`choose_roles`.
    compute_per_node : int
        Compute worker processes per compute node.
    local_directory : str, optional
        Worker scratch (spill) folder, e.g. node-local NVMe; ``$TMPDIR`` style
        variables are expanded on each node.
    allocation : Allocation, optional
        Default: read from the environment.
    timeout : float
        Seconds to wait for every worker to join.
    security : bool or distributed.Security
        ``True`` (default): TLS with a certificate made for this cluster,
        handed to the workers as files only this user can read
        (:mod:`~orchestrator.engine.security`); a ``Security`` is used as
        given (its certificate and key must be PEM text); ``False``: plain TCP.

    Returns
    -------
    IOCluster
        Closing it stops the workers (by their ``srun`` PIDs) and the scheduler.

    Examples
    --------
    >>> with allocation_cluster(io_nodes=1, n_ionodes=2) as io:  # doctest: +SKIP
    ...     io.n_ionodes
    2
    """
    from distributed import Client, Scheduler, SpecCluster

    alloc = allocation or Allocation.from_env()
    if alloc is None:
        raise SlurmError("not inside a Slurm allocation (SLURM_JOB_ID is not set)")
    roles = choose_roles(alloc.nodes, io_nodes, n_ionodes, shared_nodes)
    if compute_per_node < 1:
        raise SlurmError(f"--compute-per-node must be >= 1, got {compute_per_node}")
    if shutil.which("srun") is None:
        raise SlurmError("srun is not on PATH inside the allocation")
    host = LOOPBACK if alloc.single_host else socket.gethostname()
    sec = new_security() if security is True else (security or None)
    sched = {
        "cls": Scheduler,
        "options": {
            "host": host,
            "dashboard": False,
            "dashboard_address": f"{host}:0",
            **({"security": sec} if sec is not None else {}),
        },
    }
    cluster = SpecCluster(workers={}, scheduler=sched, silence_logs=logging.WARNING, security=sec)
    steps: list[subprocess.Popen[bytes]] = []
    owned = _SrunWorkers(cluster, steps, sec)
    published = None
    client = None
    try:
        address = cluster.scheduler_address
        tls: tuple[Any, ...] = ()
        if sec is not None:
            published = address
            tls = publish_credentials(address, sec)
        cpus = dict(zip(alloc.nodes, alloc.cpus, strict=True))
        base = 0
        for h, w in zip(roles.io_hosts, roles.io_workers, strict=True):
            share = w + (compute_per_node if h in roles.compute_hosts else 0)
            steps.append(_srun(h, w, "io", base, address, 1, alloc, share, local_directory, tls))
            base += w
        base = 0
        for h in roles.compute_hosts:
            io_here = dict(zip(roles.io_hosts, roles.io_workers, strict=True)).get(h, 0)
            threads = max(1, (cpus[h] - io_here) // compute_per_node)
            share = compute_per_node + io_here
            steps.append(
                _srun(
                    h,
                    compute_per_node,
                    "compute",
                    base,
                    address,
                    threads,
                    alloc,
                    share,
                    local_directory,
                    tls,
                )
            )
            base += compute_per_node
        client = Client(address, timeout=timeout, security=sec)
        want = roles.n_ionodes + len(roles.compute_hosts) * compute_per_node
        _wait_for(client, want, steps, timeout)
        found = discover_workers(client)
    except BaseException:
        try:
            if client is not None:
                client.close()
            owned.close()
        finally:
            if published is not None:
                withdraw_credentials(published, sec)
        raise
    log.info(
        "Slurm job %s: scheduler %s, %d I/O workers on %s, %d compute workers on %s",
        alloc.job_id,
        address,
        roles.n_ionodes,
        ",".join(roles.io_hosts),
        len(found[1]),
        ",".join(roles.compute_hosts),
    )
    return IOCluster(client, found[0], found[1], _owned=owned, security=sec, _published=published)


def _srun(
    host: str,
    ntasks: int,
    role: str,
    base: int,
    address: str,
    threads: int,
    alloc: Allocation,
    share: int,
    local_directory: str | None,
    tls: Sequence[Any] = (),
) -> subprocess.Popen[bytes]:
    mem = alloc.mem_per_node_mb * 2**20 if alloc.mem_per_node_mb else None
    node_cpus = dict(zip(alloc.nodes, alloc.cpus, strict=True))[host]
    # each task gets its threads' CPUs where they fit (sites that bind tasks to
    # cores would otherwise squeeze a compute worker onto one); more tasks than
    # CPUs (I/O workers mostly wait on the disk) share them, overcommitted
    cpus = [f"--cpus-per-task={threads}"] if ntasks * threads <= node_cpus else ["--overcommit"]
    argv = [
        "srun",
        "--overlap",
        *cpus,
        "--kill-on-bad-exit=0",
        f"--job-name=iorch-{role}",
        "--nodes=1",
        f"--ntasks={ntasks}",
        f"--ntasks-per-node={ntasks}",
        f"--nodelist={host}",
        sys.executable,
        "-m",
        "orchestrator.plugins.slurm",
        "worker",
        address,
        f"--role={role}",
        f"--first={base}",
        f"--threads={threads}",
        f"--share={share}",
    ]
    if mem:
        argv.append(f"--node-memory={mem}")
    if alloc.single_host:
        argv.append(f"--host={LOOPBACK}")
    if local_directory:
        argv.append(f"--local-directory={local_directory}")
    if tls:  # file paths only: the key itself never appears on a command line
        argv += [f"--tls-cert={tls[0]}", f"--tls-key={tls[1]}"]
    log.debug("starting %s", shlex.join(argv))
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def _wait_for(client: Any, want: int, steps: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        n = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        if n >= want:
            return
        dead = [p for p in steps if p.poll() is not None]
        if dead:
            argv = dead[0].args if isinstance(dead[0].args, list) else [str(dead[0].args)]
            raise ClusterError(
                f"a worker step exited ({dead[0].returncode}) before joining: {shlex.join(argv)}"
            )
        if time.monotonic() > deadline:
            raise ClusterError(f"only {n} of {want} workers joined within {timeout} s")
        time.sleep(0.2)


def _worker_main(argv: Sequence[str]) -> None:
    """One task of a worker ``srun`` step: become a ``dask worker`` named from SLURM_LOCALID."""
    ap = argparse.ArgumentParser(prog="python -m orchestrator.plugins.slurm worker")
    ap.add_argument("scheduler")
    ap.add_argument("--role", choices=("io", "compute"), required=True)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--share", type=int, default=1, help="worker processes on this node")
    ap.add_argument("--node-memory", type=int, default=None)
    ap.add_argument("--host", default=None)
    ap.add_argument("--local-directory", default=None)
    ap.add_argument("--tls-cert", default=None, help="the cluster's certificate (also its CA)")
    ap.add_argument("--tls-key", default=None)
    a = ap.parse_args(argv)
    k = a.first + int(os.environ.get("SLURM_LOCALID", "0"))
    name = ionode_name(k) if a.role == "io" else f"{a.role}-{k}"
    node_mem = a.node_memory or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cmd = [
        sys.executable,
        "-m",
        "distributed.cli.dask_worker",
        a.scheduler,
        "--name",
        name,
        "--nthreads",
        str(a.threads),
        "--memory-limit",
        str(int(0.9 * node_mem / a.share)),
        "--no-dashboard",
        "--death-timeout",
        "60",
    ]
    host = a.host or socket.gethostname()
    # the HTTP server (health, metrics) runs even without a dashboard: bind it too
    cmd += ["--host", host, "--dashboard-address", f"{host}:0"]
    if a.role == "io":
        cmd += ["--resources", " ".join(f"{r}={n}" for r, n in ionode_resources(k).items())]
    if a.local_directory:
        cmd += ["--local-directory", os.path.expandvars(a.local_directory)]
    if a.tls_cert:
        cmd += ["--tls-ca-file", a.tls_cert, "--tls-cert", a.tls_cert, "--tls-key", a.tls_key]
    # the workers' INFO lines would drown the job's report in its output file
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    os.execv(sys.executable, cmd)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m orchestrator.plugins.slurm worker …`` (run by ``srun``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "worker":
        raise SystemExit("usage: python -m orchestrator.plugins.slurm worker SCHEDULER --role …")
    _worker_main(args[1:])


#: where ``iorch run`` may run a workflow
CLUSTERS = ("auto", "local", "slurm")


def workflow_cluster(
    cluster: str,
    ionodes: int | None,
    io_nodes: str = "1",
    shared_nodes: bool | None = None,
    compute_per_node: int = 1,
    local_directory: str | None = None,
    announce: Callable[[str], None] = log.info,
) -> AbstractContextManager[IOCluster]:
    """The cluster a workflow runs on: embedded on 127.0.0.1, or across the Slurm allocation.

    ``cluster="auto"`` takes the Slurm allocation when ``SLURM_JOB_ID`` is
    set, the embedded cluster otherwise. ``announce`` hears which nodes a
    Slurm cluster starts on (the CLI prints it).

    Examples
    --------
    >>> with workflow_cluster("local", ionodes=2) as io:  # doctest: +SKIP
    ...     io.n_ionodes
    2
    """
    if cluster not in CLUSTERS:
        raise InputError(f"--cluster {cluster!r}: choose one of {list(CLUSTERS)}")
    alloc = Allocation.from_env() if cluster != "local" else None
    if cluster == "slurm" and alloc is None:
        raise SlurmError("--cluster slurm: not inside a Slurm job (SLURM_JOB_ID is not set)")
    if alloc is None:
        return local_cluster(n_ionodes=ionodes or defaults.N_IONODES, n_compute=defaults.N_COMPUTE)
    announce(f"Slurm job {alloc.job_id}: starting Dask workers on {', '.join(alloc.nodes)}")
    cl = allocation_cluster(
        io_nodes, ionodes, shared_nodes, compute_per_node, local_directory, allocation=alloc
    )
    # where each worker runs, by address: what a user checks first when I/O is slow
    announce(
        f"Slurm job {alloc.job_id}: I/O workers "
        + ", ".join(f"io-{k} at {a}" for k, a in enumerate(cl.ionodes))
        + "; compute workers at "
        + ", ".join(cl.compute)
    )
    return cl
