"""The simulator: evaluate a policy on a TransferSet under a cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import defaults
from .cost import CostModel
from .policies import schedule
from .transfers import TransferSet

__all__ = ["Simulation", "simulate"]


@dataclass(frozen=True)
class Simulation:
    """Headline numbers of one simulated run (see :func:`simulate`)."""

    policy: str
    makespan: float
    scheduling_seconds: float
    total_bytes: int
    lower_bound: float
    rounds: int
    messages: int
    units: int
    idle_fraction: npt.NDArray[np.float64]

    @property
    def total_seconds(self) -> float:
        """``scheduling_seconds + makespan``."""
        return self.scheduling_seconds + self.makespan

    @property
    def throughput(self) -> float:
        """Bytes per second over scheduling and transfer: ``bytes / (scheduling + makespan)``."""
        return self.total_bytes / self.total_seconds

    @property
    def ratio(self) -> float:
        """``makespan / lower_bound``."""
        return self.makespan / self.lower_bound


def simulate(
    transfers: TransferSet,
    policy: str = defaults.POLICY,
    cost: CostModel | str | None = None,
    seed: int = 0,
    **options: Any,
) -> Simulation:
    """Schedule ``transfers`` with ``policy`` and evaluate the plan under ``cost``.

    Decentralized policies are evaluated event-driven (clients issue blocks
    one at a time, I/O nodes serve arrivals first-come first-served); the
    others by list scheduling their order. Bidding policies are charged
    ``rounds * round_cost + messages * message_cost`` of scheduling time,
    centralized ones their measured kernel time.

    Examples
    --------
    >>> import orchestrator as orc
    >>> ts = orc.TransferSet([0, 0, 1, 1], [0, 1, 1, 2], [30, 10, 10, 20])
    >>> sim = orc.simulate(ts, "ms-ml", cost=orc.CostModel(1.0, 1.0, round_cost=1.0))
    >>> sim.makespan, sim.rounds, sim.scheduling_seconds, round(sim.throughput, 4)
    (50.0, 3, 3.0, 1.3208)
    """
    plan = schedule(transfers, policy, cost=cost, seed=seed, **options)
    return Simulation(
        policy=plan.policy,
        makespan=plan.makespan,
        scheduling_seconds=plan.scheduling_seconds,
        total_bytes=transfers.total_bytes,
        lower_bound=plan.lower_bound,
        rounds=plan.rounds,
        messages=plan.messages,
        units=plan.n_units,
        idle_fraction=plan.idle_fraction(),
    )
