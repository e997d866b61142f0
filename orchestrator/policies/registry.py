"""The policy registry: what a policy is, and how one joins (:func:`register_policy`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..cost import CostModel
from ..errors import PolicyError
from ..plan import Units
from ..transfers import TransferSet

__all__ = [
    "KINDS",
    "Built",
    "Policy",
    "get_policy",
    "policies",
    "register_policy",
    "unregister_policy",
]

Result = tuple[npt.NDArray[np.int64], int, int]
#: how a policy schedules: one process with the whole picture, bidding rounds, or none at all
KINDS = ("centralized", "bidding", "decentralized")


@dataclass(frozen=True)
class Built:
    """What a policy with its own units (``Policy.build``) returns to :func:`schedule`."""

    units: Units
    order: npt.NDArray[np.int64]
    rounds: int = 0
    messages: int = 0
    #: seconds of scheduling spent outside the measured call (e.g. a start plan's bidding)
    extra_seconds: float = 0.0
    #: ``"options"`` (recorded in :attr:`Plan.options`) and the policy's own results
    #: (:attr:`Plan.extras`)
    fields: dict[str, Any] = dataclass_field(default_factory=dict)


Builder = Callable[[TransferSet, CostModel, int, dict[str, Any]], Built]
Runner = Callable[
    [npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64], int, int, int], Result
]


@dataclass(frozen=True)
class Policy:
    """A scheduling policy: what :func:`policies` reports and :func:`schedule` runs.

    Most policies order precomputed units with ``run(client, ionode,
    durations, n_clients, n_ionodes, seed) -> (order, rounds, messages)``.
    Policies that cut transfers themselves, or need the TransferSet and cost
    model, set ``build(transfers, cost, seed, options) -> Built`` instead.

    Capabilities are declared, not inferred from names: ``randomised`` (the
    seed matters), ``default_block_size`` (the policy works on fixed-size
    blocks, option ``block_size``), ``candidates`` (a meta-policy: the
    policies it may run, warmed up with it), ``warm`` (False where
    start-up is part of what the policy costs, e.g. a solver, so no untimed
    run precedes it) and ``deterministic`` (False where the same seed may
    give another plan, e.g. a solver stopped by a wall-clock limit).

    Examples
    --------
    >>> p = Policy(name="toy", summary="Transfers in index order.", origin="a test",
    ...            kind="centralized", run=lambda c, s, d, nc, ns, seed: (np.arange(c.size), 0, 0))
    >>> p.kind, p.randomised
    ('centralized', False)
    """

    name: str
    summary: str
    origin: str
    kind: str  # one of KINDS
    randomised: bool = False
    #: option name -> one line of help (its meaning, unit and default)
    parameters: dict[str, str] = dataclass_field(default_factory=dict)
    default_block_size: int | None = None
    run: Runner | None = None
    build: Builder | None = None
    candidates: tuple[str, ...] = ()
    warm: bool = True
    deterministic: bool = True


_REGISTRY: dict[str, Policy] = {}


def register_policy(policy: Policy, replace: bool = False) -> Policy:
    """Add ``policy`` to the registry (``replace``: over one of the same name).

    The policy is checked here, so a mistake shows at registration, not in
    the middle of a stage.

    Examples
    --------
    >>> toy = Policy(name="toy-in-order", summary="Index order.", origin="docs",
    ...              kind="centralized",
    ...              run=lambda c, s, d, nc, ns, seed: (np.arange(c.size), 0, 0))
    >>> register_policy(toy).name
    'toy-in-order'
    >>> import orchestrator as orc
    >>> ts = orc.TransferSet(client=[0, 1], ionode=[0, 0], nbytes=[1, 1])
    >>> orc.schedule(ts, "toy-in-order", cost=orc.CostModel(1.0, 1.0)).order.tolist()
    [0, 1]
    >>> unregister_policy("toy-in-order")
    """
    if not isinstance(policy, Policy):
        raise PolicyError(f"policy must be a Policy, got {type(policy).__name__}")
    if not isinstance(policy.name, str) or not policy.name:
        raise PolicyError(f"a policy's name must be a non-empty string, got {policy.name!r}")
    if policy.kind not in KINDS:
        raise PolicyError(
            f"policy {policy.name!r}: kind must be one of {KINDS}, got {policy.kind!r}"
        )
    if (policy.run is None) == (policy.build is None):
        raise PolicyError(f"policy {policy.name!r}: give exactly one of run and build")
    if policy.default_block_size is not None and (
        policy.run is None or policy.default_block_size <= 0
    ):
        raise PolicyError(f"policy {policy.name!r}: a block size needs run and must be > 0")
    unknown = [c for c in policy.candidates if c not in _REGISTRY]
    if unknown:
        raise PolicyError(f"policy {policy.name!r}: unknown candidates {unknown}")
    if policy.name in _REGISTRY and not replace:
        raise PolicyError(f"a policy named {policy.name!r} is registered already")
    _REGISTRY[policy.name] = policy
    return policy


def unregister_policy(name: str) -> None:
    """Forget policy ``name`` (for tests, and plugins that replace one).

    Examples
    --------
    >>> unregister_policy("no-such-policy")
    """
    _REGISTRY.pop(name, None)


def policies() -> dict[str, Policy]:
    """All registered policies by name.

    Each :class:`Policy` carries a one-line ``summary``, its ``origin`` (paper
    and section), its ``kind`` (centralized, bidding, decentralized), whether
    it is ``randomised`` (then ``seed`` matters) and its ``parameters``.

    Examples
    --------
    >>> from orchestrator import policies
    >>> {"ecf", "mwm", "ms-ecf", "split-opt"} <= set(policies())
    True
    >>> policies()["hdf"].parameters["block_size"]
    'block_size (bytes, default 32768): transfers are cut into pieces of this size'
    """
    return dict(_REGISTRY)


def get_policy(name: str) -> Policy:
    """The registered policy called ``name``; an error lists the known ones.

    Examples
    --------
    >>> get_policy("ms-ecf").kind
    'bidding'
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise PolicyError(f"unknown policy {name!r}; choose one of {sorted(_REGISTRY)}") from None
