""":func:`schedule`: from a TransferSet to a :class:`~orchestrator.plan.Plan`, with any policy."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from .. import defaults
from ..checks import is_int
from ..cost import CostModel, get_cost_model
from ..errors import PolicyError
from ..limits import check_memory
from ..plan import Plan, Units
from ..transfers import TransferSet
from .registry import Policy, get_policy

__all__ = ["MAX_UNITS", "schedule", "warm_up"]

log = logging.getLogger("orchestrator.policies")

#: Most units (transfers or pieces) one plan may hold: ~60 bytes each in memory.
MAX_UNITS = 500_000_000
#: memory a plan keeps per unit (its transfer, bytes, place in the order, start and end,
#: and the kernels' working arrays)
BYTES_PER_UNIT = 128

_warm: set[str] = set()


def warm_up(p: Policy) -> None:
    """Run a policy once on a tiny set so compile/cache-load time is not timed.

    What runs is declared by the policy: its candidates (a meta-policy), or
    nothing when ``warm`` is False (its start-up is part of its cost).

    Examples
    --------
    >>> from orchestrator.policies import get_policy
    >>> warm_up(get_policy("ecf"))
    """
    if p.name in _warm or not p.warm:
        return
    c = np.array([0, 1], dtype=np.int64)
    for name in p.candidates:
        warm_up(get_policy(name))
    if p.candidates:
        pass  # a meta-policy costs what its candidates cost
    elif p.run is not None:
        p.run(c, c[::-1].copy(), np.array([1.0, 2.0]), 2, 2, 0)
    elif p.build is not None:
        ts = TransferSet([0, 0, 1, 1], [0, 1, 0, 1], [3, 1, 2, 2])
        p.build(ts, CostModel(1.0, 1.0), 0, {})
    _warm.add(p.name)


def schedule(
    transfers: TransferSet,
    policy: str = defaults.POLICY,
    cost: CostModel | str | None = None,
    seed: int = 0,
    **options: Any,
) -> Plan:
    """Order the transfers of a stage with ``policy`` and return the :class:`Plan`.

    Parameters
    ----------
    transfers : TransferSet
        What moves where.
    policy : str
        A name from :func:`policies` (default ``"ecf"``).
    cost : CostModel or str, optional
        A cost model or preset name; ``None`` means ``"cluster2004"``.
    seed : int
        Seed of randomised policies (``>= 0``); the same seed gives the same plan.
    **options
        Policy parameters, e.g. ``block_size`` for block-splitting policies.

    Returns
    -------
    Plan

    Raises
    ------
    PolicyError
        Unknown policy or option, or a bad option value.

    Examples
    --------
    >>> import orchestrator as orc
    >>> ts = orc.TransferSet(client=[0, 0, 1, 1], ionode=[0, 1, 1, 2], nbytes=[30, 10, 10, 20])
    >>> plan = orc.schedule(ts, "ms-ecf", cost=orc.CostModel(1.0, 1.0))
    >>> plan.makespan, plan.rounds, plan.messages
    (40.0, 3, 10)
    """
    if not isinstance(transfers, TransferSet):
        raise PolicyError(f"transfers must be a TransferSet, got {type(transfers).__name__}")
    p = get_policy(policy)
    cm = get_cost_model(cost)
    if not is_int(seed, 0, 2**64):
        raise PolicyError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    unknown = sorted(set(options) - set(p.parameters))
    if unknown:
        raise PolicyError(
            f"policy {p.name!r} has no option(s) {unknown}; "
            f"its options are {sorted(p.parameters) or 'none'}"
        )
    # each value of its declared kind, whichever front end gave it
    options = {
        k: v if k == "block_size" else p.option(k).check(v, p.name) for k, v in options.items()
    }
    block_size = None
    if p.default_block_size is not None:
        block_size = options.get("block_size", p.default_block_size)
        if not is_int(block_size, 1, 2**62):
            raise PolicyError(f"block_size must be a positive integer, got {block_size!r}")
        block_size = int(block_size)
        pieces = int(((transfers.nbytes - 1) // block_size + 1).sum())
        if pieces > MAX_UNITS:
            raise PolicyError(
                f"block_size={block_size} cuts these {len(transfers)} transfers into {pieces:,} "
                f"pieces, more than the {MAX_UNITS:,} a plan may hold; use a larger block_size"
            )
        check_memory(
            pieces * BYTES_PER_UNIT,
            f"block_size={block_size}: the {pieces:,} pieces of these transfers",
            PolicyError,
        )
    seed = int(seed)
    warm_up(p)
    if p.build is not None:
        t0 = time.perf_counter()
        built = p.build(transfers, cm, seed, dict(options))
        elapsed = time.perf_counter() - t0
        fields = dict(built.fields)
        opts = dict(options) | fields.pop("options", {})
        return Plan(
            transfers=transfers,
            units=built.units,
            order=built.order,
            cost=cm,
            policy=p.name,
            kind=p.kind,
            seed=seed,
            rounds=built.rounds,
            messages=built.messages,
            kernel_seconds=elapsed + built.extra_seconds,
            options=opts,
            extras=fields,
        )
    units = Units.of(transfers, cm, block_size)
    assert p.run is not None
    t0 = time.perf_counter()
    order, rounds, messages = p.run(
        units.client, units.ionode, units.durations, transfers.n_clients, transfers.n_ionodes, seed
    )
    elapsed = time.perf_counter() - t0
    log.debug("%s scheduled %d units in %.4f s", p.name, order.size, elapsed)
    return Plan(
        transfers=transfers,
        units=units,
        order=order,
        cost=cm,
        policy=p.name,
        kind=p.kind,
        seed=int(seed),
        rounds=rounds,
        messages=messages,
        kernel_seconds=elapsed,
        options=dict(options),
    )
