"""Workers as Slurm jobs of their own: dask-jobqueue's ``SLURMJob``, Parsl's ``SlurmProvider``."""

from __future__ import annotations

import logging
import shlex
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.engine.cluster import (
    LOOPBACK,
    IOCluster,
    discover_workers,
    ionode_name,
    ionode_resources,
)
from orchestrator.errors import SlurmError
from orchestrator.frontends.intercept import SCHEDULER_ENV

from .batch import SLURM_NAME, check_partition


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
    prologue = [
        f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH",
        *job_script_prologue,
    ]
    common = {
        "cores": cores,
        "memory": memory,
        "walltime": walltime,
        "queue": queue,
        "account": account,
        "interface": interface,
        "python": sys.executable,
        "job_script_prologue": prologue,
        "processes": 1,
        **job_kwargs,
    }
    workers: dict[str, dict[str, Any]] = {}
    for k in range(n_ionodes):
        # comma, not space: dask-jobqueue pastes the arguments into the job script unquoted
        res = ",".join(f"{r}={n}" for r, n in ionode_resources(k).items())
        opts = dict(common, cores=1, worker_extra_args=["--resources", res])
        workers[ionode_name(k)] = {"cls": SLURMJob, "options": opts}
    for j in range(n_compute):
        workers[f"compute-{j}"] = {"cls": SLURMJob, "options": dict(common)}
    sched = {
        "cls": Scheduler,
        "options": {
            "host": scheduler_host,
            "dashboard": False,
            "dashboard_address": f"{scheduler_host}:0",
        },
    }
    cluster = SpecCluster(workers=workers, scheduler=sched, silence_logs=logging.WARNING)
    client = None
    try:
        client = Client(cluster)
        client.wait_for_workers(n_ionodes + n_compute, timeout=timeout)
        found = discover_workers(client)
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

    for name, val in (("partition", partition), ("account", account)):
        if val is not None and not SLURM_NAME.fullmatch(val):
            raise SlurmError(f"{name} {val!r}: letters, digits and . _ + - only")
    init = (
        f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH; "
        f"export {SCHEDULER_ENV}={shlex.quote(scheduler)}; {worker_init}"
    )
    provider = SlurmProvider(
        partition=partition,
        account=account,
        nodes_per_block=nodes_per_block,
        init_blocks=1,
        min_blocks=0,
        max_blocks=max_blocks,
        walltime=walltime,
        exclusive=exclusive,
        launcher=SrunLauncher(),
        worker_init=init,
    )
    htex_kw: dict[str, Any] = {"label": "iorch_slurm", "provider": provider}
    if address is not None:
        htex_kw["address"] = address
    if max_workers_per_node is not None:
        htex_kw["max_workers_per_node"] = max_workers_per_node
    return Config(executors=[HighThroughputExecutor(**htex_kw)], run_dir=run_dir)
