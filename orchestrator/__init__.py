"""io-orchestrator: schedule and execute the output stages of scientific workflows.

The scheduling core: describe a stage's data movement as a
:class:`TransferSet`, pick a :class:`CostModel`, and :func:`schedule` it with a
policy into a :class:`Plan`; :func:`simulate` evaluates a policy. For
partitioned meshes, :func:`replica_sets` and :func:`assign` choose one writer
per replicated row (Interval Data Grouping), :func:`interval_stats` measures
the result. Workflows meet the framework through :func:`output_stage` (a
decorator for plain functions, Dask tasks and Parsl apps), :func:`capture`
(h5py/zarr-style writes recorded) and :func:`open_checkpoint` /
:func:`latest_checkpoint` (restart).

Examples
--------
>>> import orchestrator as orc
>>> ts = orc.TransferSet(client=[0, 0, 1, 1], ionode=[0, 1, 1, 2], nbytes=[30, 10, 10, 20])
>>> orc.schedule(ts, "ecf", cost=orc.CostModel(1.0, 1.0)).makespan
40.0
"""

import logging

from .capturing import CaptureError, capture
from .checkpoint import Checkpoint, CheckpointError, latest_checkpoint, open_checkpoint
from .cost import PRESETS, CostModel, CostModelError, get_cost_model
from .intercept import OutputStage, output_stage
from .plan import Plan, PlanError, Units, lower_bound
from .policies import Policy, PolicyError, policies, schedule
from .replicas import IntervalStats, ReplicaError, ReplicaSets, assign, interval_stats, replica_sets
from .simulate import Simulation, simulate
from .transfers import TransferSet, TransferSetError

logging.getLogger("orchestrator").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "CaptureError",
    "Checkpoint",
    "CheckpointError",
    "CostModel",
    "CostModelError",
    "IntervalStats",
    "OutputStage",
    "Plan",
    "PlanError",
    "Policy",
    "PolicyError",
    "ReplicaError",
    "ReplicaSets",
    "Simulation",
    "TransferSet",
    "TransferSetError",
    "Units",
    "__version__",
    "assign",
    "capture",
    "get_cost_model",
    "interval_stats",
    "latest_checkpoint",
    "lower_bound",
    "open_checkpoint",
    "output_stage",
    "policies",
    "replica_sets",
    "schedule",
    "simulate",
]
