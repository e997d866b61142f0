"""Scheduling policies: the registry, the papers' policies, and :func:`schedule`.

- :mod:`.registry` — :class:`Policy`, :class:`PolicyOption` (the typed options a policy
  declares, checked the same way by :func:`schedule`, a stage's write options and
  ``iorch --option``), :func:`register_policy`, :func:`policies`;
- :mod:`.classic` — the papers' policies, adapters over the Numba kernels;
- :mod:`.meta` — split-opt, ecf-ls, exact and auto, which build their own units
  (with :mod:`.splitopt` and :mod:`.exact`);
- :mod:`.options` — the checks behind each kind of option;
- :mod:`.scheduling` — :func:`schedule`, TransferSet to Plan.

A new policy is one module that calls :func:`register_policy`, and one test
class that subclasses :class:`orchestrator.testing.PolicyTests`.
"""

from ..errors import PolicyError
from . import classic, meta  # noqa: F401 - registers the built-in policies
from .registry import (
    KINDS,
    Built,
    Policy,
    PolicyOption,
    get_policy,
    policies,
    register_policy,
    unregister_policy,
)
from .scheduling import MAX_UNITS, schedule, warm_up

__all__ = [
    "KINDS",
    "MAX_UNITS",
    "Built",
    "Policy",
    "PolicyError",
    "PolicyOption",
    "get_policy",
    "policies",
    "register_policy",
    "schedule",
    "unregister_policy",
    "warm_up",
]
