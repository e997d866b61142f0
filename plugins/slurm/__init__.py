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

Modules: :mod:`.hostlist` (Slurm's host lists), :mod:`.allocation` (the
batch job's nodes and their roles), :mod:`.srun` (the cluster inside the
allocation and the worker entry point), :mod:`.batch` (batch scripts,
sbatch/squeue), :mod:`.jobqueue` (workers as jobs: dask-jobqueue, Parsl).
"""

from orchestrator.errors import SlurmError, SlurmUnreachable

from .allocation import Allocation, Roles, choose_roles
from .batch import JobStatus, batch_script, check_partition, job_status, submit
from .hostlist import expand_hostlist
from .jobqueue import jobqueue_cluster, parsl_config
from .srun import CLUSTERS, allocation_cluster, main, workflow_cluster

__all__ = [
    "CLUSTERS",
    "Allocation",
    "JobStatus",
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
    "main",
    "parsl_config",
    "submit",
    "workflow_cluster",
]
