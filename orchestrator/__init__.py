"""io-orchestrator: schedule and execute the output stages of scientific workflows.

The scheduling core: describe a stage's data movement as a
:class:`TransferSet`, pick a :class:`CostModel`, and :func:`schedule` it with a
policy into a :class:`Plan`; :func:`simulate` evaluates a policy. For
partitioned meshes, :func:`replica_sets` and :func:`assign` choose one writer
per replicated row (Interval Data Grouping), :func:`interval_stats` measures
the result.

Examples
--------
>>> import orchestrator as orc
>>> ts = orc.TransferSet(client=[0, 0, 1, 1], ionode=[0, 1, 1, 2], nbytes=[30, 10, 10, 20])
>>> orc.schedule(ts, "ecf", cost=orc.CostModel(1.0, 1.0)).makespan
40.0
"""

import logging

from .cost import PRESETS, CostModel, CostModelError, get_cost_model
from .plan import Plan, PlanError, Units, lower_bound
from .policies import Policy, PolicyError, policies, schedule
from .replicas import IntervalStats, ReplicaError, ReplicaSets, assign, interval_stats, replica_sets
from .simulate import Simulation, simulate
from .transfers import TransferSet, TransferSetError

logging.getLogger("orchestrator").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "CostModel",
    "CostModelError",
    "IntervalStats",
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
    "get_cost_model",
    "interval_stats",
    "lower_bound",
    "policies",
    "replica_sets",
    "schedule",
    "simulate",
]
