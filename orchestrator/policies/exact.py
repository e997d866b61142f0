"""``exact``: the non-preemptive optimum of small TransferSets with OR-Tools CP-SAT.

One interval per transfer, ``NoOverlap`` per client and per I/O node,
minimise the makespan. CP-SAT needs integer durations: durations are
measured in ticks of ``1 / scale`` seconds with ``scale = 2e6 / min(duration)``,
so rounding moves any duration by less than ``0.25e-6`` of itself (halved
only if the horizon would exceed 2**52 ticks). The plan's order is the
solver's start order; its makespan is then recomputed with the exact float
durations by list scheduling, which never starts a transfer later than the
solver did.

OR-Tools is an optional dependency: ``pip install 'io-orchestrator[exact]'``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ExactUnavailable
from ..kernels.timing import list_schedule

__all__ = ["ExactUnavailable", "exact_order", "require_ortools"]

HORIZON_TICKS = 2**52


def require_ortools() -> Any:
    """The ``cp_model`` module of OR-Tools, or :class:`ExactUnavailable` naming the extra.

    Examples
    --------
    >>> require_ortools().__name__
    'ortools.sat.python.cp_model'
    """
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise ExactUnavailable(
            "policy 'exact' needs OR-Tools: install the optional extra with "
            "pip install 'io-orchestrator[exact]'"
        ) from None
    return cp_model


def exact_order(
    client: npt.NDArray[np.int64],
    ionode: npt.NDArray[np.int64],
    d: npt.NDArray[np.float64],
    n_clients: int,
    n_ionodes: int,
    hint: npt.NDArray[np.int64],
    time_limit: float,
    seed: int = 0,
    lower: float = 0.0,
) -> tuple[npt.NDArray[np.int64], float, bool]:
    """Best order CP-SAT finds within ``time_limit`` seconds, its relative gap, and optimality.

    ``hint`` is a starting order (its list schedule is given to the solver as
    a hint, so the result is never worse than the hint); ``lower`` a known
    lower bound in seconds.

    Examples
    --------
    >>> import numpy as np
    >>> c, s = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    >>> d = np.array([3.0, 1.0, 1.0, 3.0])
    >>> order, gap, proven = exact_order(c, s, d, 2, 2, np.arange(4), 5.0)
    >>> order.tolist(), gap, proven
    ([0, 3, 1, 2], 0.0, True)
    """
    cp_model = require_ortools()
    _, he = list_schedule(hint, client, ionode, d, n_clients, n_ionodes)
    scale = 2e6 / float(d.min())
    if float(he.max()) * scale > HORIZON_TICKS:
        scale = HORIZON_TICKS / float(he.max())
    dur = np.maximum(np.rint(d * scale), 1).astype(np.int64)
    hs_t, he_t = list_schedule(hint, client, ionode, dur.astype(np.float64), n_clients, n_ionodes)
    horizon = int(he_t.max())
    model = cp_model.CpModel()
    starts, ends, per_c, per_s = [], [], {}, {}  # type: ignore[var-annotated]
    for u in range(d.size):
        st = model.NewIntVar(0, horizon - int(dur[u]), f"s{u}")
        en = model.NewIntVar(int(dur[u]), horizon, f"e{u}")
        iv = model.NewIntervalVar(st, int(dur[u]), en, f"i{u}")
        starts.append(st)
        ends.append(en)
        per_c.setdefault(int(client[u]), []).append(iv)
        per_s.setdefault(int(ionode[u]), []).append(iv)
        model.AddHint(st, int(hs_t[u]))
    for ivs in (*per_c.values(), *per_s.values()):
        if len(ivs) > 1:
            model.AddNoOverlap(ivs)
    mk = model.NewIntVar(min(int(np.floor(lower * scale)), horizon), horizon, "makespan")
    model.AddMaxEquality(mk, ends)
    model.Minimize(mk)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = 2
    solver.parameters.random_seed = int(seed) % (2**31)
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # nothing found: keep the hint
        return hint.copy(), 1.0 - lower / float(he.max()), False
    s = np.array([solver.Value(x) for x in starts], dtype=np.int64)
    order = np.lexsort((np.arange(d.size), s)).astype(np.int64)
    obj = float(solver.ObjectiveValue())
    bound = max(float(solver.BestObjectiveBound()), lower * scale)
    proven = status == cp_model.OPTIMAL or bound >= obj
    gap = 0.0 if proven else max(0.0, (obj - bound) / obj)
    return order, gap, bool(proven)
