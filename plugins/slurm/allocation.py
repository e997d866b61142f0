"""The allocation a batch job runs in, and which of its nodes serve as I/O nodes."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.errors import SlurmError

from .hostlist import cpus_per_node, expand_hostlist


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
            cpus = tuple(cpus_per_node(cpus_spec, len(nodes)))
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
