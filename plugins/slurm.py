"""Slurm: the orchestrator's Dask cluster inside an allocation, batch scripts, ready configs.

The only module that knows Slurm. Inside a batch job (``SLURM_JOB_ID`` set),
:func:`allocation_cluster` starts one Dask scheduler in the calling process
(the batch step, on the allocation's first node) and the workers with
``srun``: I/O workers (``io-K``, resources ``io=1, io-K=1``, one thread) on
the nodes chosen as I/O nodes, compute workers on the others. Every worker
is a normal ``dask worker`` process started by this module's ``worker``
entry point, which names it from ``SLURM_LOCALID``.

Why ``srun`` and not dask-jobqueue's ``SLURMRunner``: the runner makes
every task of *one* ``srun`` a worker with the *same* arguments, so it
cannot give I/O workers their own node list and ``io-K`` resource; one
``srun`` per node can, and needs nothing beyond Slurm itself.

For sites where workers should be separate jobs (no allocation to run
inside), :func:`jobqueue_cluster` builds the same cluster from
dask-jobqueue's ``SLURMJob``, and :func:`parsl_config` gives Parsl a
``SlurmProvider`` whose apps write through the orchestrator's I/O workers.
:func:`batch_script` writes the script that ``iorch slurm script`` prints.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from orchestrator.cluster import LOOPBACK, ClusterError, IOCluster, _discover
from orchestrator.errors import SlurmError, SlurmUnreachable

__all__ = [
    "Allocation",
    "Roles",
    "SlurmError",
    "SlurmUnreachable",
    "allocation_cluster",
    "batch_script",
    "check_partition",
    "choose_roles",
    "expand_hostlist",
    "job_status",
    "jobqueue_cluster",
    "parsl_config",
    "submit",
]

log = logging.getLogger("orchestrator.slurm")


# ---------------------------------------------------------------- host lists

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_HOSTCHARS = re.compile(r"[A-Za-z0-9._-]*")


def expand_hostlist(spec: str) -> list[str]:
    """Expand a Slurm host list (``node[01-03,7],login1``) into host names.

    The same expansion as ``scontrol show hostnames`` (checked against it in
    the tests): items separated by commas or white space, each with any
    number of bracketed range lists (``rack[1-2]-n[1-3]`` is their product,
    last bracket fastest) and no text after the last one; a range keeps the
    zero padding of its lower bound. Host names may hold ASCII letters,
    digits, ``.``, ``_`` and ``-`` only — nothing else can reach a batch
    script through a node list.

    Raises
    ------
    SlurmError
        Unbalanced brackets, an empty item, a bad range, text after a
        bracket or another character; the message names the host list and
        the part.

    Examples
    --------
    >>> expand_hostlist("node[01-03,7],login1")
    ['node01', 'node02', 'node03', 'node7', 'login1']
    >>> expand_hostlist("r[1-2]-n[1-2]")
    ['r1-n1', 'r1-n2', 'r2-n1', 'r2-n2']
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SlurmError(f"node list {spec!r}: empty")
    items, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise SlurmError(f"node list {spec!r}: nested '[' at position {i}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"node list {spec!r}: ']' without '[' at position {i}")
        elif ch in ", \t" and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    if depth:
        raise SlurmError(f"node list {spec!r}: '[' is never closed")
    items.append(spec[start:])
    hosts: list[str] = []
    for item in items:
        if not item:
            continue  # Slurm skips empty items (",," and runs of white space)
        parts = re.split(r"\[([^\]]*)\]", item)  # text, ranges, text, ranges, ..., text
        if len(parts) > 1 and parts[-1]:
            raise SlurmError(f"node list {spec!r}: text {parts[-1]!r} after ']' in {item!r}")
        choices: list[list[str]] = []
        for j, part in enumerate(parts):
            if j % 2 == 0 and not _HOSTCHARS.fullmatch(part):
                raise SlurmError(
                    f"node list {spec!r}: {part!r} holds a character other than letters, "
                    "digits, '.', '_' and '-'"
                )
            choices.append(_ranges(spec, part) if j % 2 else [part])
        hosts.extend("".join(p) for p in product(*choices))
    if not hosts:
        raise SlurmError(f"node list {spec!r}: empty")
    return hosts


def _ranges(spec: str, body: str) -> list[str]:
    out: list[str] = []
    for r in body.split(","):
        m = _RANGE.fullmatch(r)
        if m is None:
            raise SlurmError(f"node list {spec!r}: bad range {r!r} in [{body}]")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise SlurmError(f"node list {spec!r}: range {r!r} runs backwards")
        if int(hi) - int(lo) > 1_000_000:
            raise SlurmError(f"node list {spec!r}: range {r!r} has over a million hosts")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def _cpus_per_node(spec: str, n: int) -> list[int]:
    """``SLURM_JOB_CPUS_PER_NODE`` (``"36(x2),12"``) as one count per node."""
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m is None:
            raise SlurmError(f"SLURM_JOB_CPUS_PER_NODE={spec!r}: cannot parse {part!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(out) != n:
        raise SlurmError(f"SLURM_JOB_CPUS_PER_NODE={spec!r} gives {len(out)} counts for {n} nodes")
    return out


# ------------------------------------------------------------ the allocation


@dataclass(frozen=True)
class Allocation:
    """The Slurm job this process runs in: its id, nodes and CPUs per node.

    Examples
    --------
    >>> env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-2]",
    ...        "SLURM_JOB_CPUS_PER_NODE": "8(x2)"}
    >>> Allocation.from_env(env)
    Allocation(job_id='42', nodes=('n1', 'n2'), cpus=(8, 8), mem_per_node_mb=None)
    >>> Allocation.from_env({}) is None
    True
    """

    job_id: str
    nodes: tuple[str, ...]
    cpus: tuple[int, ...]
    mem_per_node_mb: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Allocation | None:
        """The allocation described by ``env`` (default ``os.environ``), or ``None`` outside one."""
        env = os.environ if env is None else env
        job = env.get("SLURM_JOB_ID")
        if not job:
            return None
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodelist:
            raise SlurmError(f"SLURM_JOB_ID={job} but SLURM_JOB_NODELIST is not set")
        nodes = tuple(expand_hostlist(nodelist))
        cpus_spec = env.get("SLURM_JOB_CPUS_PER_NODE")
        if cpus_spec:
            cpus = tuple(_cpus_per_node(cpus_spec, len(nodes)))
        else:
            cpus = (os.cpu_count() or 1,) * len(nodes)
        mem = env.get("SLURM_MEM_PER_NODE")
        per_cpu = env.get("SLURM_MEM_PER_CPU")  # jobs submitted with --mem-per-cpu
        if mem and mem.isdigit():
            mem_mb: int | None = int(mem)
        elif per_cpu and per_cpu.isdigit():
            mem_mb = int(per_cpu) * min(cpus)  # the smallest node's share bounds every node
        else:
            mem_mb = None
        return cls(job, nodes, cpus, mem_mb)

    @property
    def single_host(self) -> bool:
        """All nodes are this one machine (then everything binds to 127.0.0.1)."""
        return len(set(self.nodes)) == 1


@dataclass(frozen=True)
class Roles:
    """Which nodes carry I/O workers (and how many each), and which compute workers.

    Examples
    --------
    >>> r = choose_roles(["n1", "n2", "n3", "n4"], io_nodes=1, n_ionodes=4)
    >>> r.io_hosts, r.io_workers, r.compute_hosts
    (('n4',), (4,), ('n1', 'n2', 'n3'))
    """

    io_hosts: tuple[str, ...]
    io_workers: tuple[int, ...]
    compute_hosts: tuple[str, ...]

    @property
    def n_ionodes(self) -> int:
        """I/O workers in all (the plan's I/O nodes)."""
        return sum(self.io_workers)


def choose_roles(
    nodes: Sequence[str],
    io_nodes: int | str = 1,
    n_ionodes: int | None = None,
    shared_nodes: bool | None = None,
) -> Roles:
    """Split an allocation's ``nodes`` into I/O nodes and compute nodes.

    Parameters
    ----------
    nodes : sequence of str
        The allocation's nodes, in Slurm's order.
    io_nodes : int or str
        How many nodes carry I/O workers (the *last* ones, so the batch step
        on the first node computes), or a host list naming them.
    n_ionodes : int, optional
        I/O workers in all, spread evenly over the I/O nodes (default: one
        per I/O node).
    shared_nodes : bool, optional
        Also run compute workers on the I/O nodes. ``None`` (default): only
        in a one-node job, where there is no other choice; ``False`` makes a
        one-node job an error.

    Raises
    ------
    SlurmError
        No node left for compute workers, a named I/O node outside the
        allocation, fewer I/O workers than I/O nodes.

    Examples
    --------
    >>> choose_roles(["a", "b"], io_nodes="b").compute_hosts
    ('a',)
    >>> choose_roles(["a"], io_nodes=1, n_ionodes=2).io_workers  # one node: shared
    (2,)
    """
    nodes = list(nodes)
    if not nodes:
        raise SlurmError("the allocation has no nodes")
    if isinstance(io_nodes, str) and io_nodes.strip().isdigit():
        io_nodes = int(io_nodes)
    if isinstance(io_nodes, str):
        io = expand_hostlist(io_nodes)
        missing = [h for h in io if h not in nodes]
        if missing:
            raise SlurmError(
                f"--io-nodes {io_nodes!r}: {missing} not in the allocation's nodes {nodes}"
            )
        if len(set(io)) != len(io):
            raise SlurmError(f"--io-nodes {io_nodes!r} names a node twice")
    else:
        if isinstance(io_nodes, bool) or not 1 <= io_nodes <= len(nodes):
            raise SlurmError(f"--io-nodes must be 1..{len(nodes)} (the job's nodes): {io_nodes}")
        io = nodes[len(nodes) - io_nodes :]
    compute = [h for h in nodes if h not in io]
    if shared_nodes is None:
        shared_nodes = len(set(nodes)) == 1
    if shared_nodes:
        compute = nodes
    elif not compute:
        raise SlurmError(
            f"no node left for compute workers: all {len(nodes)} node(s) are I/O nodes "
            f"(--io-nodes {io_nodes}); ask for more nodes, fewer I/O nodes, or --shared-nodes "
            "to run compute workers on the I/O nodes too"
        )
    n = len(io) if n_ionodes is None else n_ionodes
    if isinstance(n, bool) or n < len(io):
        raise SlurmError(
            f"--ionodes {n}: need at least one I/O worker per I/O node ({len(io)} I/O nodes)"
        )
    per = tuple(n // len(io) + (i < n % len(io)) for i in range(len(io)))
    return Roles(tuple(io), per, tuple(compute))


# ------------------------------------------------- the cluster in the allocation


class _SrunWorkers:
    """The scheduler (in this process) and the ``srun`` steps of the workers."""

    def __init__(self, cluster: Any, steps: list[subprocess.Popen[bytes]]) -> None:
        self.cluster = cluster
        self.steps = steps

    def close(self) -> None:
        # close the nannies (each stops its worker cleanly), then the scheduler, so
        # the srun steps end by themselves; SIGTERM (srun then kills the tasks) only
        # for what hangs. Closing the scheduler first makes every worker log that
        # its nanny "died unexpectedly".
        if any(p.poll() is None for p in self.steps):
            try:
                self.cluster.sync(_terminate_nannies, self.cluster.scheduler_address)
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


async def _terminate_nannies(address: str) -> None:
    import asyncio

    from distributed.core import rpc

    async with rpc(address) as sched:
        info = await sched.identity(n_workers=-1)
    nannies = [w["nanny"] for w in info.get("workers", {}).values() if w.get("nanny")]

    async def one(addr: str) -> None:
        async with rpc(addr) as nanny:
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
    sched = {"cls": Scheduler, "options": {"host": host, "dashboard": False,
                                           "dashboard_address": f"{host}:0"}}  # fmt: skip
    cluster = SpecCluster(workers={}, scheduler=sched, silence_logs=logging.WARNING)
    steps: list[subprocess.Popen[bytes]] = []
    owned = _SrunWorkers(cluster, steps)
    try:
        address = cluster.scheduler_address
        cpus = dict(zip(alloc.nodes, alloc.cpus, strict=True))
        base = 0
        for h, w in zip(roles.io_hosts, roles.io_workers, strict=True):
            share = w + (compute_per_node if h in roles.compute_hosts else 0)
            steps.append(_srun(h, w, "io", base, address, 1, alloc, share, local_directory))
            base += w
        base = 0
        for h in roles.compute_hosts:
            io_here = dict(zip(roles.io_hosts, roles.io_workers, strict=True)).get(h, 0)
            threads = max(1, (cpus[h] - io_here) // compute_per_node)
            share = compute_per_node + io_here
            steps.append(_srun(h, compute_per_node, "compute", base, address, threads, alloc,
                               share, local_directory))  # fmt: skip
            base += compute_per_node
        client = None
        client = Client(address, timeout=timeout)
        want = roles.n_ionodes + len(roles.compute_hosts) * compute_per_node
        _wait_for(client, want, steps, timeout)
        found = _discover(client)
    except BaseException:
        if client is not None:
            client.close()
        owned.close()
        raise
    log.info("Slurm job %s: scheduler %s, %d I/O workers on %s, %d compute workers on %s",
             alloc.job_id, address, roles.n_ionodes, ",".join(roles.io_hosts),
             len(found[1]), ",".join(roles.compute_hosts))  # fmt: skip
    return IOCluster(client, found[0], found[1], _owned=owned)


def _srun(
    host: str, ntasks: int, role: str, base: int, address: str, threads: int,
    alloc: Allocation, share: int, local_directory: str | None,
) -> subprocess.Popen[bytes]:  # fmt: skip
    mem = alloc.mem_per_node_mb * 2**20 if alloc.mem_per_node_mb else None
    node_cpus = dict(zip(alloc.nodes, alloc.cpus, strict=True))[host]
    # each task gets its threads' CPUs where they fit (sites that bind tasks to
    # cores would otherwise squeeze a compute worker onto one); more tasks than
    # CPUs (I/O workers mostly wait on the disk) share them, overcommitted
    cpus = [f"--cpus-per-task={threads}"] if ntasks * threads <= node_cpus else ["--overcommit"]
    argv = [
        "srun", "--overlap", *cpus, "--kill-on-bad-exit=0", f"--job-name=iorch-{role}",
        "--nodes=1", f"--ntasks={ntasks}", f"--ntasks-per-node={ntasks}", f"--nodelist={host}",
        sys.executable, "-m", "orchestrator.plugins.slurm", "worker", address,
        f"--role={role}", f"--first={base}", f"--threads={threads}", f"--share={share}",
    ]  # fmt: skip
    if mem:
        argv.append(f"--node-memory={mem}")
    if alloc.single_host:
        argv.append(f"--host={LOOPBACK}")
    if local_directory:
        argv.append(f"--local-directory={local_directory}")
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
    a = ap.parse_args(argv)
    k = a.first + int(os.environ.get("SLURM_LOCALID", "0"))
    name = f"{a.role}-{k}"
    node_mem = a.node_memory or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cmd = [
        sys.executable, "-m", "distributed.cli.dask_worker", a.scheduler, "--name", name,
        "--nthreads", str(a.threads), "--memory-limit", str(int(0.9 * node_mem / a.share)),
        "--no-dashboard", "--death-timeout", "60",
    ]  # fmt: skip
    host = a.host or socket.gethostname()
    # the HTTP server (health, metrics) runs even without a dashboard: bind it too
    cmd += ["--host", host, "--dashboard-address", f"{host}:0"]
    if a.role == "io":
        cmd += ["--resources", f"io=1 io-{k}=1"]
    if a.local_directory:
        cmd += ["--local-directory", os.path.expandvars(a.local_directory)]
    # the workers' INFO lines would drown the job's report in its output file
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    os.execv(sys.executable, cmd)


# ------------------------------------------------------------ batch scripts

_TIME = re.compile(r"([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}")
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


def batch_script(
    command: Sequence[str],
    nodes: int = 1,
    time_limit: str = "00:30:00",
    partition: str | None = None,
    account: str | None = None,
    job_name: str = "iorch",
    output: str | None = None,
    exclusive: bool = True,
    workdir: str | os.PathLike[str] | None = None,
    python_bin: str | os.PathLike[str] | None = None,
    extra_sbatch: Sequence[str] = (),
    origin: str = "",
    notes: Sequence[str] = (),
) -> str:
    """A complete, commented ``sbatch`` script that runs ``command`` (an ``iorch run …``).

    Parameters
    ----------
    command : sequence of str
        The command line the job runs (as argv; quoted into the script).
    nodes : int
        ``#SBATCH --nodes``.
    time_limit, partition, account, job_name
        ``--time``, ``--partition``, ``--account``, ``--job-name``.
    output : str, optional
        ``--output`` (default ``<job_name>-%j.out`` in the submit folder).
    exclusive : bool
        Whole nodes (``--exclusive``): the workers share them with no one.
    workdir : path, optional
        The folder the job runs in (default: the current one).
    python_bin : path, optional
        The ``bin`` folder of the environment with io-orchestrator (default:
        this interpreter's).
    extra_sbatch : sequence of str
        More ``#SBATCH`` options, verbatim (e.g. ``--constraint=nvme``).
    origin : str
        The command that generated the script, recorded in its header.
    notes : sequence of str
        Comment lines for the header (what runs where).

    Examples
    --------
    >>> s = batch_script(["iorch", "run", "bips3d"], nodes=4, partition="debug",
    ...                  workdir="/scratch/me", python_bin="/opt/venv/bin")
    >>> print(s.splitlines()[0]); "#SBATCH --nodes=4" in s
    #!/bin/bash
    True
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise SlurmError(f"--nodes must be a positive integer, got {nodes!r}")
    if not isinstance(time_limit, str) or not _TIME.fullmatch(time_limit):
        raise SlurmError(
            f"--time {time_limit!r}: use minutes, MM:SS, HH:MM:SS or D-HH:MM:SS (Slurm's forms)"
        )
    for name, val in (("--partition", partition), ("--account", account), ("--job-name", job_name)):
        if val is not None and not _NAME.fullmatch(val):
            raise SlurmError(f"{name} {val!r}: letters, digits and . _ + - only")
    # one #SBATCH line each: white space or a line break would end the option
    # or start a command of its own
    for name, val in (("--output", output), *(("--sbatch", x) for x in extra_sbatch)):
        if val is not None and (not val or re.search(r"[\x00-\x20\x7f]", val)):
            raise SlurmError(f"{name} {val!r}: must be one word without spaces or line breaks")
    workdir = Path(workdir or Path.cwd()).resolve()
    bin_dir = Path(python_bin or Path(sys.executable).parent)
    out = output or f"{job_name}-%j.out"
    q = shlex.quote
    origin = _one_line(origin)
    lines = [
        "#!/bin/bash",
        f"# Written by io-orchestrator{': ' + origin if origin else ''}",
        "# Submit with `sbatch <this file>` (or `iorch slurm submit`); check with `iorch slurm status`.",  # noqa: E501
        *(f"# {_one_line(n)}" for n in notes),
        "#",
        "# (sbatch reads #SBATCH lines only before the first command)",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nodes}",
        "# one task per node: the batch step; the workers are srun steps that overlap it",
        "#SBATCH --ntasks-per-node=1",
    ]
    if exclusive:
        lines.append("#SBATCH --exclusive")
    lines.append(f"#SBATCH --time={time_limit}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if account:
        lines.append(f"#SBATCH --account={account}")
    lines.append(f"#SBATCH --output={out}")
    lines += [f"#SBATCH {opt}" for opt in extra_sbatch]
    lines += [
        "",
        "# stop at the first failing command, on unset variables and inside pipes",
        "set -euo pipefail",
        "",
        "# the Python environment io-orchestrator is installed in (workers start from it too)",
        f"export PATH={q(str(bin_dir))}:$PATH",
        "# relative paths (the outputs) are taken from here: a folder every node sees",
        f"cd {q(str(workdir))}",
        "",
        ': "${SLURM_JOB_ID:?this is a batch script: submit it with sbatch}"',
        'echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST ($SLURM_JOB_NUM_NODES nodes)"',
        "# `--cluster slurm`: the Dask scheduler runs in this batch step; iorch starts the",
        "# I/O and compute workers with srun on the allocation's nodes and stops them at the",
        "# end. exec: scancel's SIGTERM reaches iorch, which removes unfinished outputs.",
        "exec " + " ".join(_quote_keep_vars(a) for a in command),
        "",
    ]
    return "\n".join(lines)


def _quote_keep_vars(arg: str) -> str:
    """Shell-quote ``arg``, letting only ``$SLURM_JOB_ID`` in it expand.

    Examples
    --------
    >>> print(_quote_keep_vars("out/run-$SLURM_JOB_ID"), _quote_keep_vars("a b$HOME"))
    out/run-"${SLURM_JOB_ID}" 'a b$HOME'
    """
    parts = arg.split("$SLURM_JOB_ID")
    return '"${SLURM_JOB_ID}"'.join(shlex.quote(p) if p else "" for p in parts)


def _one_line(text: str) -> str:
    """``text`` safe inside a ``#`` comment line: line breaks shown, not obeyed."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _slurm_cmd(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise SlurmUnreachable(f"{argv[0]} is not installed here: cannot {what}")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{shlex.join(argv)} did not answer within 60 s") from None


def check_partition(partition: str) -> None:
    """Raise :class:`SlurmError` unless the cluster has ``partition`` (asks ``scontrol``).

    Examples
    --------
    >>> check_partition("no-such-partition")  # doctest: +SKIP
    Traceback (most recent call last):
    SlurmError: partition 'no-such-partition' does not exist; this cluster has ['debug']
    """
    r = _slurm_cmd(["scontrol", "show", "partition", partition], "check the partition")
    if r.returncode == 0 and f"PartitionName={partition}" in r.stdout:
        return
    names = _slurm_cmd(["sinfo", "-h", "-o", "%R"], "list partitions")
    if names.returncode != 0:
        last = ((r.stderr or names.stderr).strip().splitlines() or ["no answer"])[-1]
        raise SlurmUnreachable(f"cannot reach Slurm to check partition {partition!r}: {last}")
    raise SlurmError(
        f"partition {partition!r} does not exist; this cluster has "
        f"{sorted(set(names.stdout.split()))}"
    )


def submit(script: str, cwd: str | os.PathLike[str] | None = None) -> str:
    """Submit ``script`` (its text) with ``sbatch`` and return the job id.

    Examples
    --------
    >>> submit(batch_script(["iorch", "run", "bips3d"]))  # doctest: +SKIP
    '17'
    """
    if shutil.which("sbatch") is None:
        raise SlurmError("sbatch is not installed here: cannot submit")
    try:
        r = subprocess.run(["sbatch", "--parsable"], input=script, capture_output=True,
                           text=True, cwd=cwd, timeout=60)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SlurmUnreachable("sbatch did not answer within 60 s") from None
    if r.returncode != 0:
        raise SlurmError(f"sbatch refused the job: {r.stderr.strip()}")
    return r.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class JobStatus:
    """What Slurm says about one job (from ``scontrol show job``)."""

    job_id: str
    state: str
    reason: str
    nodes: str
    elapsed: str
    exit_code: str
    stdout: str | None

    @property
    def done(self) -> bool:
        """The job has ended (in any way)."""
        return self.state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                  "SUSPENDED", "REQUEUED", "RESIZING")  # fmt: skip


def job_status(job_id: str) -> JobStatus:
    """State, reason, nodes, run time, exit code and output file of job ``job_id``.

    Examples
    --------
    >>> job_status("17").state  # doctest: +SKIP
    'COMPLETED'
    """
    if not re.fullmatch(r"\d+(_\d+)?", str(job_id)):
        raise SlurmError(f"job id {job_id!r} is not a Slurm job id (digits)")
    r = _slurm_cmd(["scontrol", "show", "job", "--oneliner", str(job_id)], "ask for the job")
    if r.returncode != 0:
        # the controller forgets ended jobs after MinJobAge; accounting remembers (where kept)
        acct = _accounting(str(job_id))
        if acct is not None:
            return acct
        last = (r.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SlurmError(f"Slurm does not know job {job_id}: {last}")
    fields = dict(
        kv.split("=", 1) for kv in r.stdout.split() if "=" in kv and not kv.startswith("=")
    )
    return JobStatus(
        job_id=str(job_id),
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", ""),
        nodes=fields.get("NodeList", ""),
        elapsed=fields.get("RunTime", ""),
        exit_code=fields.get("ExitCode", ""),
        stdout=fields.get("StdOut"),
    )


def _accounting(job_id: str) -> JobStatus | None:
    """The job as ``sacct`` remembers it, or ``None`` (no sacct, no accounting, unknown)."""
    if shutil.which("sacct") is None:
        return None
    try:
        r = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o",
                            "JobID,State,NodeList,Elapsed,ExitCode"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    rows = [x.split("|") for x in r.stdout.splitlines() if x.count("|") == 4]
    if r.returncode != 0 or not rows:
        return None
    _, state, nodes, elapsed, code = rows[0]
    return JobStatus(job_id, state.split()[0], "", nodes, elapsed, code, None)


# ------------------------------------------- workers as jobs: dask-jobqueue, Parsl


def jobqueue_cluster(
    n_ionodes: int,
    n_compute: int,
    cores: int = 1,
    memory: str = "2GB",
    walltime: str = "00:30:00",
    queue: str | None = None,
    account: str | None = None,
    interface: str | None = "lo",
    scheduler_host: str | None = None,
    job_script_prologue: Sequence[str] = (),
    timeout: float = 120.0,
    **job_kwargs: Any,
) -> IOCluster:
    """I/O and compute workers as separate Slurm jobs, with dask-jobqueue's ``SLURMJob``.

    Each I/O worker is one job whose worker gets the resources ``io=1,
    io-K=1`` (through ``worker_extra_args``) and the name ``io-K``; each
    compute worker is a job named ``compute-J``. All join one scheduler in
    this process. (Two ``SLURMCluster`` objects would start two schedulers,
    so the pair is one ``SpecCluster`` with two kinds of ``SLURMJob``.)

    Parameters
    ----------
    n_ionodes, n_compute : int
        I/O worker jobs and compute worker jobs.
    cores, memory, walltime, queue, account
        Per job, as in ``SLURMCluster`` (``queue`` is the partition).
    interface : str, optional
        Network interface the workers listen on (``"lo"`` for one machine;
        ``"ib0"`` or ``None`` on a real cluster).
    scheduler_host : str, optional
        Address the scheduler binds to: the worker jobs must reach it.
        Default 127.0.0.1 with ``interface="lo"`` (one machine), else this
        machine's host name.
    job_script_prologue : sequence of str
        Shell lines before the worker starts; this interpreter's ``bin`` is
        put on ``PATH`` first.
    timeout : float
        Seconds to wait for every worker job to start and join.
    **job_kwargs
        Anything else ``SLURMJob`` takes (``job_extra_directives``, ``local_directory``, ...).

    Examples
    --------
    >>> with jobqueue_cluster(n_ionodes=2, n_compute=1, queue="debug") as io:  # doctest: +SKIP
    ...     io.n_ionodes
    2
    """
    from dask_jobqueue.slurm import SLURMJob
    from distributed import Client, Scheduler, SpecCluster

    if n_ionodes < 1 or n_compute < 0:
        raise SlurmError(f"need n_ionodes >= 1 and n_compute >= 0, got {n_ionodes}, {n_compute}")
    if queue is not None:
        check_partition(queue)
    if scheduler_host is None:
        scheduler_host = LOOPBACK if interface == "lo" else socket.gethostname()
    prologue = [f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH",
                *job_script_prologue]  # fmt: skip
    common = {"cores": cores, "memory": memory, "walltime": walltime, "queue": queue,
              "account": account, "interface": interface, "python": sys.executable,
              "job_script_prologue": prologue, "processes": 1, **job_kwargs}  # fmt: skip
    workers: dict[str, dict[str, Any]] = {}
    for k in range(n_ionodes):
        # comma, not space: dask-jobqueue pastes the arguments into the job script unquoted
        opts = dict(common, cores=1, worker_extra_args=["--resources", f"io=1,io-{k}=1"])
        workers[f"io-{k}"] = {"cls": SLURMJob, "options": opts}
    for j in range(n_compute):
        workers[f"compute-{j}"] = {"cls": SLURMJob, "options": dict(common)}
    sched = {"cls": Scheduler, "options": {"host": scheduler_host, "dashboard": False,
                                           "dashboard_address": f"{scheduler_host}:0"}}  # fmt: skip
    cluster = SpecCluster(workers=workers, scheduler=sched, silence_logs=logging.WARNING)
    client = None
    try:
        client = Client(cluster)
        client.wait_for_workers(n_ionodes + n_compute, timeout=timeout)
        found = _discover(client)
    except BaseException:
        if client is not None:
            client.close()
        cluster.close()
        raise
    return IOCluster(client, found[0], found[1], _owned=cluster)


def parsl_config(
    scheduler: str,
    partition: str | None = None,
    nodes_per_block: int = 1,
    max_blocks: int = 1,
    walltime: str = "00:30:00",
    account: str | None = None,
    exclusive: bool = False,
    max_workers_per_node: int | None = None,
    address: str | None = LOOPBACK,
    run_dir: str = "runinfo",
    worker_init: str = "",
) -> Any:
    """A Parsl ``Config``: HighThroughputExecutor on ``SlurmProvider`` + ``SrunLauncher``.

    Its workers write through the orchestrator's I/O workers: ``worker_init``
    puts this interpreter's ``bin`` on ``PATH`` (Parsl's workers need it)
    and sets ``$IORCH_SCHEDULER`` to ``scheduler``, the address of the Dask
    scheduler that :func:`orchestrator.plugins.parsl.output_app` contributes
    through.

    Parameters
    ----------
    scheduler : str
        The orchestrator's Dask scheduler (``IOCluster.address``).
    partition, account, walltime, nodes_per_block, max_blocks, exclusive
        As in Parsl's ``SlurmProvider`` (``exclusive=False`` to share a node).
    max_workers_per_node : int, optional
        Parsl worker slots per node.
    address : str, optional
        Address the interchange is reached at (``127.0.0.1`` on one machine;
        ``None`` lets Parsl pick on a real cluster).
    run_dir : str
        Parsl's run folder.
    worker_init : str
        More shell lines before the workers start.

    Examples
    --------
    >>> cfg = parsl_config("tcp://127.0.0.1:8786", partition="debug")
    >>> cfg.executors[0].provider.launcher.__class__.__name__
    'SrunLauncher'
    """
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.launchers import SrunLauncher
    from parsl.providers import SlurmProvider

    from orchestrator.intercept import SCHEDULER_ENV

    for name, val in (("partition", partition), ("account", account)):
        if val is not None and not _NAME.fullmatch(val):
            raise SlurmError(f"{name} {val!r}: letters, digits and . _ + - only")
    init = (f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH; "
            f"export {SCHEDULER_ENV}={shlex.quote(scheduler)}; {worker_init}")  # fmt: skip
    provider = SlurmProvider(
        partition=partition, account=account, nodes_per_block=nodes_per_block, init_blocks=1,
        min_blocks=0, max_blocks=max_blocks, walltime=walltime, exclusive=exclusive,
        launcher=SrunLauncher(), worker_init=init,
    )  # fmt: skip
    htex_kw: dict[str, Any] = {"label": "iorch_slurm", "provider": provider}
    if address is not None:
        htex_kw["address"] = address
    if max_workers_per_node is not None:
        htex_kw["max_workers_per_node"] = max_workers_per_node
    return Config(executors=[HighThroughputExecutor(**htex_kw)], run_dir=run_dir)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m orchestrator.plugins.slurm worker …`` (run by ``srun``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "worker":
        raise SystemExit("usage: python -m orchestrator.plugins.slurm worker SCHEDULER --role …")
    _worker_main(args[1:])


if __name__ == "__main__":
    main()
