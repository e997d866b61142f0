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
from .options import bool_option, float_option, int_option

__all__ = [
    "KINDS",
    "OPTION_KINDS",
    "Built",
    "Policy",
    "PolicyOption",
    "get_policy",
    "policies",
    "register_policy",
    "start_option",
    "unregister_policy",
]

Result = tuple[npt.NDArray[np.int64], int, int]
#: how a policy schedules: one process with the whole picture, bidding rounds, or none at all
KINDS = ("centralized", "bidding", "decentralized")


#: what an option holds: a whole number, a number > 0, True/False, or a policy's name
OPTION_KINDS = ("int", "float", "bool", "policy")


@dataclass(frozen=True)
class PolicyOption:
    """One option of a policy: its name, kind, default and meaning.

    ``low`` is the smallest value of an ``int`` option. ``default`` is what
    the policy uses when the option is not given (None: it is derived, e.g.
    from the stage's stripes).

    Examples
    --------
    >>> opt = PolicyOption("moves", "int", 5000, "most candidate moves evaluated")
    >>> opt.check(10), opt.parse("20")
    (10, 20)
    >>> opt.parse("ten")
    Traceback (most recent call last):
    ...
    orchestrator.errors.PolicyError: moves must be an integer >= 1, got 'ten'
    >>> opt.describe()
    'moves (int, default 5000): most candidate moves evaluated'
    """

    name: str
    kind: str
    default: Any
    help: str
    low: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise PolicyError(f"an option's name must be an identifier, got {self.name!r}")
        if self.kind not in OPTION_KINDS:
            raise PolicyError(
                f"option {self.name!r}: kind must be one of {OPTION_KINDS}, got {self.kind!r}"
            )

    def check(self, value: Any, policy: str = "") -> Any:
        """``value`` as this option's kind, or a :class:`PolicyError` naming it."""
        box = {self.name: value}
        if self.kind == "int":
            return int_option(box, self.name, 0, self.low)
        if self.kind == "float":
            return float_option(box, self.name, 0.0)
        if self.kind == "bool":
            return bool_option(box, self.name, False)
        return start_option(box | {"start": value}, "", policy or self.name)

    def parse(self, text: str, policy: str = "") -> Any:
        """A command line's ``text`` as this option's kind (then :meth:`check`)."""
        value: Any = text
        t = text.strip()
        if self.kind == "int" and t.isascii() and t.lstrip("-").isdigit():
            value = int(t)
        elif self.kind == "float" and t.isascii():
            for number in (int, float):  # "-1" stays -1 in a message about it
                try:
                    value = number(t)
                    break
                except ValueError:
                    pass
        elif self.kind == "bool" and t.lower() in ("true", "false"):
            value = t.lower() == "true"
        return self.check(value, policy)

    def describe(self) -> str:
        """One line: name, kind, default and meaning."""
        default = "derived" if self.default is None else repr(self.default)
        return f"{self.name} ({self.kind}, default {default}): {self.help}"


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
    #: the options it takes: kind, default and meaning of each
    options: tuple[PolicyOption, ...] = ()
    default_block_size: int | None = None
    run: Runner | None = None
    build: Builder | None = None
    candidates: tuple[str, ...] = ()
    warm: bool = True
    deterministic: bool = True

    @property
    def parameters(self) -> dict[str, str]:
        """Option name -> one line saying its kind, default and meaning."""
        return {o.name: o.describe() for o in self.options}

    def option(self, name: str) -> PolicyOption:
        """The declared option ``name``, or a :class:`PolicyError` listing the options."""
        for o in self.options:
            if o.name == name:
                return o
        raise PolicyError(
            f"policy {self.name!r} has no option {name!r}; "
            f"its options are {sorted(self.parameters) or 'none'}"
        )

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` checked against the declarations: each value of its kind.

        Examples
        --------
        >>> get_policy("ecf-ls").check_options({"moves": 10})
        {'moves': 10}
        >>> get_policy("ecf").check_options({"moves": 10})
        Traceback (most recent call last):
        ...
        orchestrator.errors.PolicyError: policy 'ecf' has no option 'moves'; its options are none
        """
        return {k: self.option(k).check(v, self.name) for k, v in options.items()}


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
    if not isinstance(policy.options, tuple) or not all(
        isinstance(o, PolicyOption) for o in policy.options
    ):
        raise PolicyError(f"policy {policy.name!r}: options must be a tuple of PolicyOption")
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
    'block_size (int, default 32768): bytes; transfers are cut into pieces of this size'
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


def start_option(options: dict[str, Any], default: str, own: str) -> str:
    """``options["start"]`` (or ``default``): a policy on whole transfers to start from.

    Examples
    --------
    >>> start_option({"start": "mwm"}, "ecf", "ecf-ls")
    'mwm'
    """
    v = options.get("start", default)
    known = policies()
    p = known.get(v) if isinstance(v, str) else None
    if p is None or p.default_block_size is not None or p.build is not None:
        ok = sorted(q.name for q in known.values() if q.run and q.default_block_size is None)
        raise PolicyError(f"start must be a policy on whole transfers {ok}, got {v!r} ({own})")
    return v
