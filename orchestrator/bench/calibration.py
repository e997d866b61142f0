"""What a stage costs on a testbed, measured, and one stage written per policy against it.

:func:`calibrate` measures a :class:`Calibration` with stages of equal loads;
:func:`run_point` writes a stage through the engine with each policy and sets
the realized time beside the simulated one.

Examples
--------
>>> Calibration(0.1, 2e6, 0.01, {}).model.network_bandwidth
2000000.0
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..cost import CostModel
from ..engine.cluster import IOCluster
from ..engine.stage import write_stage
from ..files import remove_path
from ..transfers import TransferSet
from .push import push_overhead
from .transferstage import TransferStage, place, transfer_stage

__all__ = ["Calibration", "calibrate", "run_point"]


@dataclass(frozen=True)
class Calibration:
    """What a stage costs on this testbed, measured: ``overhead`` seconds per stage (handing
    the programs to the I/O workers, the final flush), then per I/O node ``rate`` bytes/s and
    ``per_unit`` seconds per transfer. ``model`` is the cost model that plans with it.
    ``push_unit``: what a piece a client pushes itself costs beyond its bytes (its own
    round trips through Dask, one piece at a time: :func:`~.push.push_overhead`)."""

    overhead: float
    rate: float
    per_unit: float
    samples: dict[str, float]
    push_unit: float | None = None

    def pushes(self) -> Calibration:
        """The calibration of clients' own pushes: ``per_unit`` is ``push_unit`` (if measured).

        Examples
        --------
        >>> Calibration(0.1, 2e6, 0.01, {}, push_unit=0.03).pushes().per_unit
        0.03
        """
        if self.push_unit is None:
            return self
        return dataclasses.replace(self, per_unit=self.push_unit)

    @property
    def model(self) -> CostModel:
        """The calibrated cost model (the stage overhead is not a transfer's: see
        :meth:`predict`).

        Examples
        --------
        >>> Calibration(0.1, 2e6, 0.01, {}).model.network_latency
        0.01
        """
        return CostModel(
            network_bandwidth=self.rate,
            disk_bandwidth=self.rate,
            network_latency=self.per_unit,
            disk_latency=0.0,
            name="testbed-calibrated",
        )

    def predict(self, plan: Any) -> float:
        """The simulated realized time of ``plan``: the stage overhead plus its makespan
        under :attr:`model`.

        Examples
        --------
        >>> from orchestrator import TransferSet, schedule
        >>> cal = Calibration(0.5, 1.0, 0.0, {})
        >>> cal.predict(schedule(TransferSet([0], [0], [2]), "ecf"))
        2.5
        """
        return self.overhead + float(plan.under(self.model).makespan)


def _equal_stage(n_io: int, n_clients: int, per_node: int, senders: int) -> TransferStage:
    """Every I/O node receives ``per_node`` bytes from ``senders`` distinct clients."""
    c, s, b = [], [], []
    for node in range(n_io):
        for k in range(senders):
            c.append((node * senders + k) % n_clients)
            s.append(node)
            b.append(per_node // senders)
    ts = TransferSet(c, s, b, n_clients=n_clients, n_ionodes=n_io)
    return transfer_stage(ts, row_bytes=1 << 10, stripe_bytes=64 << 10)  # the sweeps' rows


def calibrate(
    cluster: IOCluster, directory: Path, per_node: int = 1 << 20, repeats: int = 3
) -> Calibration:
    """Measure :class:`Calibration` with three stages of equal loads per I/O node: ``B``
    from one client each, ``2B`` from one client, ``B`` from every client; medians of
    ``repeats`` after a warm-up. The differences give the rate (``B`` more bytes) and
    the cost of a unit (more transfers, same bytes); the rest is the stage's overhead."""
    n_io, n_c = cluster.n_ionodes, max(1, len(cluster.compute))
    many = max(2, min(n_c, 16))
    cases = {"B": (per_node, 1), "2B": (2 * per_node, 1), "B/many": (per_node, many)}
    seconds: dict[str, float] = {}
    for name, (nb, senders) in cases.items():
        st = _equal_stage(n_io, n_c, nb, senders)
        parts = place(cluster, st)
        try:
            got = [
                run_point(cluster, st, parts, ["ecf"], None, directory)[0]["realized"]
                for _ in range(repeats + 1)
            ]
        finally:
            for p in parts:
                p.release()
        seconds[name] = float(np.median(got[1:]))
    rate = per_node / max(seconds["2B"] - seconds["B"], 1e-6)
    per_unit = max(0.0, (seconds["B/many"] - seconds["B"]) / (many - 1))
    overhead = max(0.0, seconds["B"] - per_node / rate - per_unit)
    push_unit = push_overhead(cluster, directory, repeats=repeats)
    return Calibration(overhead, rate, per_unit, seconds, push_unit)


def run_point(
    cluster: IOCluster,
    st: TransferStage,
    parts: list[Any],
    policies: Sequence[str],
    calibration: Calibration | None,
    directory: Path,
) -> list[dict[str, Any]]:
    """Write ``st`` once per policy through the engine; realized against simulated.

    Each row: policy, realized seconds (the stage's dispatch: from handing
    the plan to the I/O workers to every byte durable — the engine sends the
    first batches ahead, so the trace's first write is not the start), stage
    seconds (planning included), planning seconds, the simulated time of the
    same plan under ``calibration`` (:meth:`Calibration.predict`) and the
    lower bound under its model.
    """
    rows = []
    for p in policies:
        target = directory / f"tb-{p}.h5"
        t0 = time.perf_counter()
        res = write_stage(
            target,
            {st.spec.name: (st.spec, parts)},
            cluster=cluster,
            policy=p,
            strategy="list",
            stripe_bytes=st.stripe_bytes,
            allow_missing=True,
            overwrite=True,
            cost=calibration.model if calibration else "cluster2004",
        )
        wall = time.perf_counter() - t0
        assert res.plan is not None  # the stage has rows
        realized = res.timings["dispatch"]
        row = {
            "policy": p,
            "realized": realized,
            "stage_seconds": wall,
            "plan_seconds": res.timings.get("plan", float("nan")),
        }
        if calibration is not None:
            sim = calibration.predict(res.plan)
            plan = res.plan.under(calibration.model)
            row["simulated"] = sim
            row["lower_bound"] = calibration.overhead + plan.lower_bound
            row["realized_over_simulated"] = realized / sim
        rows.append(row)
        remove_path(target)
    return rows
