"""io-orchestrator: schedule and execute the output stages of scientific workflows.

The scheduling core: describe a stage's data movement as a
:class:`TransferSet`, pick a :class:`CostModel`, and :func:`schedule` it with a
policy into a :class:`Plan`; :func:`simulate` evaluates a policy.

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
from .simulate import Simulation, simulate
from .transfers import TransferSet, TransferSetError

logging.getLogger("orchestrator").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "CostModel",
    "CostModelError",
    "Plan",
    "PlanError",
    "Policy",
    "PolicyError",
    "Simulation",
    "TransferSet",
    "TransferSetError",
    "Units",
    "__version__",
    "get_cost_model",
    "lower_bound",
    "policies",
    "schedule",
    "simulate",
]
