"""``iorch bench schedulers``: the bidding paper's sweeps and kernel timings, side by side.

Everything here is measured in one run and printed as ratios, so the
numbers can be rerun and compared on any machine.
"""

from __future__ import annotations

import csv
import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..cost import CostModel
from ..files import atomic_path
from ..policies import get_policy, policies, schedule
from ..workload import bidding_workload, uniform_workload

__all__ = [
    "Sweep",
    "SweepResult",
    "argsort_line",
    "argsort_seconds",
    "kernel_timings",
    "paper_sweeps",
    "run_sweep",
]

BIDDING = ("ms-ecf", "ms-ml")


@dataclass(frozen=True)
class Sweep:
    """One of the paper's experiments: a parameter varied, the others fixed."""

    name: str
    xlabel: str
    xkey: str
    xs: tuple[float, ...]
    fixed: dict[str, float]

    def workload_args(self, x: float) -> dict[str, Any]:
        """Keyword arguments of :func:`~orchestrator.workload.bidding_workload` at point ``x``.

        Examples
        --------
        >>> paper_sweeps(quick=True)[0].workload_args(8)
        {'busy_ratio': 0.1, 'large_ratio': 0.1, 'n_ionodes': 8}
        """
        args: dict[str, Any] = dict(self.fixed)
        args[self.xkey] = x
        args["n_ionodes"] = int(args["n_ionodes"])
        return args


def paper_sweeps(quick: bool = False) -> list[Sweep]:
    """The three sweeps of the bidding paper's sec. 4 (fewer points with ``quick``).

    Examples
    --------
    >>> [s.name for s in paper_sweeps(quick=True)]
    ['ionodes', 'busy', 'large']
    """
    if quick:
        return [
            Sweep(
                "ionodes",
                "I/O nodes (RB=0.1, RL=0.1)",
                "n_ionodes",
                (8, 32, 128),
                {"busy_ratio": 0.1, "large_ratio": 0.1},
            ),
            Sweep(
                "busy",
                "busy I/O node ratio RB (32 I/O nodes, RL=0.1)",
                "busy_ratio",
                (0.1, 0.3, 0.5),
                {"n_ionodes": 32, "large_ratio": 0.1},
            ),
            Sweep(
                "large",
                "large transfer ratio RL (32 I/O nodes, RB=0.1)",
                "large_ratio",
                (0.1, 0.5, 0.9),
                {"n_ionodes": 32, "busy_ratio": 0.1},
            ),
        ]
    return [
        Sweep(
            "ionodes",
            "I/O nodes (RB=0.1, RL=0.8)",
            "n_ionodes",
            (8, 16, 32, 64, 128),
            {"busy_ratio": 0.1, "large_ratio": 0.8},
        ),
        Sweep(
            "busy",
            "busy I/O node ratio RB (128 I/O nodes, RL=0.1)",
            "busy_ratio",
            (0.1, 0.2, 0.3, 0.4, 0.5),
            {"n_ionodes": 128, "large_ratio": 0.1},
        ),
        Sweep(
            "large",
            "large transfer ratio RL (32 I/O nodes, RB=0.1)",
            "large_ratio",
            (0.1, 0.3, 0.5, 0.7, 0.9),
            {"n_ionodes": 32, "busy_ratio": 0.1},
        ),
    ]


@dataclass
class SweepResult:
    """Per (x, policy): mean throughput (bytes/s), makespan / lower bound, scheduling share."""

    sweep: Sweep
    policies: tuple[str, ...]
    throughput: dict[tuple[float, str], float] = field(default_factory=dict)
    ratio: dict[tuple[float, str], float] = field(default_factory=dict)
    sched_share: dict[tuple[float, str], float] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def relative(self, x: float, a: str, b: str | Sequence[str]) -> float:
        """Throughput of ``a`` over ``b`` (or over the best of several) at ``x``.

        Examples
        --------
        >>> from orchestrator.cost import get_cost_model
        >>> sw = Sweep("t", "I/O nodes", "n_ionodes", (4,), {"busy_ratio": 0.0, "large_ratio": 0.0})
        >>> r = run_sweep(sw, ["ecf", "fcfs"], [0], get_cost_model())
        >>> r.relative(4, "ecf", ["ecf", "fcfs"]) <= 1.0 == r.relative(4, "ecf", "ecf")
        True
        """
        bs = [b] if isinstance(b, str) else list(b)
        return self.throughput[(x, a)] / max(self.throughput[(x, p)] for p in bs)


def run_sweep(
    sweep: Sweep,
    names: Sequence[str],
    seeds: Sequence[int],
    cost: CostModel,
    advance: Callable[[], None] = lambda: None,
) -> SweepResult:
    """Simulate every policy on every point of ``sweep``, averaged over ``seeds``.

    Each seed draws one workload; every policy runs on that same workload.

    Examples
    --------
    >>> from orchestrator.cost import get_cost_model
    >>> sw = Sweep("t", "I/O nodes", "n_ionodes", (4,), {"busy_ratio": 0.0, "large_ratio": 0.0})
    >>> r = run_sweep(sw, ["ecf", "fcfs"], [0], get_cost_model())
    >>> r.ratio[(4, "ecf")] <= r.ratio[(4, "fcfs")]
    True
    """
    res = SweepResult(sweep, tuple(names))
    for x in sweep.xs:
        acc: dict[str, list[tuple[float, float, float]]] = {p: [] for p in names}
        for seed in seeds:
            ts = bidding_workload(seed=seed, **sweep.workload_args(x))
            for p in names:
                plan = schedule(ts, p, cost=cost, seed=seed)
                acc[p].append(
                    (plan.throughput, plan.ratio, plan.scheduling_seconds / plan.total_seconds)
                )
                res.rows.append(
                    {
                        "sweep": sweep.name,
                        "x": x,
                        "seed": seed,
                        "policy": p,
                        "transfers": len(ts),
                        "units": plan.n_units,
                        "makespan": plan.makespan,
                        "lower_bound": plan.lower_bound,
                        "scheduling_seconds": plan.scheduling_seconds,
                        "rounds": plan.rounds,
                        "messages": plan.messages,
                        "throughput": plan.throughput,
                    }
                )
                del plan
                advance()
        for p in names:
            arr = np.array(acc[p])
            res.throughput[(x, p)] = float(arr[:, 0].mean())
            res.ratio[(x, p)] = float(arr[:, 1].mean())
            res.sched_share[(x, p)] = float(arr[:, 2].mean())
    return res


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    """All raw measurements as CSV (one row per dict, header from the first).

    Examples
    --------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "rows.csv"
    >>> write_rows([{"policy": "ecf", "makespan": 1.5}], p)
    >>> p.read_text().splitlines()
    ['policy,makespan', 'ecf,1.5']
    """
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:  # never via a planted link
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


# ------------------------------------------------------------- kernel timings
_ORACLE_CALL: dict[str, Callable[[Any, list[int], list[int], list[float], int, int], Any]] = {
    "ecf": lambda o, c, s, d, ns, seed: o.ecf(c, s, d),
    "fcfs": lambda o, c, s, d, ns, seed: o.fcfs(c, s, d),
    "ms-ml": lambda o, c, s, d, ns, seed: o.ms_ml(c, s, d),
    "ms-ecf": lambda o, c, s, d, ns, seed: o.ms_ecf(c, s, d),
    "rand": lambda o, c, s, d, ns, seed: o.rand(c, s, d, seed),
    "uar": lambda o, c, s, d, ns, seed: o.rand(c, s, d, seed),
    "hdf": lambda o, c, s, d, ns, seed: o.hdf(c, s, d, seed),
    "first-ios": lambda o, c, s, d, ns, seed: o.first_ios(c, s, d),
    "random-ios": lambda o, c, s, d, ns, seed: o.random_ios(c, s, d, seed),
    "hash-ios": lambda o, c, s, d, ns, seed: o.hash_ios(c, s, d, ns),
}


def _oracle_child(policy: str, workload: dict[str, Any], cost: str, q: Any) -> None:
    # The child rebuilds the units itself: pickling millions of pieces to it
    # would take longer than many of the oracles.
    plan = schedule(bidding_workload(**workload), policy, cost=CostModel.from_json(cost))
    c, s, d = plan.client.tolist(), plan.ionode.tolist(), plan.durations.tolist()
    # the oracles (test code) load in this child only, not with the CLI
    from ..testing import oracles

    q.put("ready")
    t0 = time.perf_counter()
    _ORACLE_CALL[policy](oracles, c, s, d, plan.transfers.n_ionodes, 0)
    q.put(time.perf_counter() - t0)


def time_oracle(
    policy: str, workload: dict[str, Any], cost: CostModel, budget: float
) -> float | None:
    """Seconds the oracle takes on the policy's units of ``workload``; ``None`` if over budget.

    Runs in a child process so an oracle that would take hours is stopped
    (by PID) at the budget instead of stalling the benchmark.

    Examples
    --------
    >>> from orchestrator.cost import get_cost_model
    >>> args = {"n_ionodes": 8, "busy_ratio": 0.0, "large_ratio": 0.1, "seed": 0}
    >>> time_oracle("ms-ecf", args, get_cost_model(), 5.0)  # doctest: +SKIP
    0.0021
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    args = (policy, workload, cost.to_json(), q)
    proc = ctx.Process(target=_oracle_child, args=args, daemon=True)
    proc.start()
    try:
        q.get(timeout=120.0)  # start-up and unit building are not timed
        return float(q.get(timeout=budget + 1.0))
    except queue.Empty:
        return None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()


@dataclass
class Timing:
    policy: str
    units_medium: int
    kernel_medium: float
    oracle_medium: float | None  # None: not run; inf: over budget
    units_large: int
    kernel_large: float
    block_size_large: int | None
    #: wall seconds of the whole ``schedule()`` call on the large set (units, checks, plan)
    plan_large: float = float("nan")
    #: wall seconds of ``np.argsort`` of as many random floats, measured just before it
    argsort_large: float = float("nan")

    @property
    def argsort_ratio(self) -> float:
        """Planning time on the large set in units of ``np.argsort`` of as many floats."""
        return self.plan_large / self.argsort_large


def argsort_seconds(n: int, repeat: int = 3) -> float:
    """Best of ``repeat`` wall times of ``np.argsort`` of ``n`` random floats.

    A yardstick measured in the same run as what it is compared with, so the
    ratio carries over between machines (and a busy machine slows both).

    Examples
    --------
    >>> argsort_seconds(1000) > 0
    True
    """
    x = np.random.default_rng(0).random(n)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.argsort(x)
        best = min(best, time.perf_counter() - t0)
    return best


def argsort_line(tm: Sequence[Timing], sizes: dict[str, int]) -> str:
    """One line: each policy's planning time on the large set ÷ ``np.argsort`` of as many floats.

    Examples
    --------
    >>> t = Timing("ecf", 1, 0.1, None, 10, 0.5, None, plan_large=0.6, argsort_large=0.1)
    >>> argsort_line([t], {"large": 10}).split(": ")[-1]
    'ecf 6.0x'
    """
    n = sizes["large"]
    ratios = ", ".join(f"{r.policy} {r.argsort_ratio:.1f}x" for r in tm)
    return (
        f"planning time of {n:,} transfers (whole schedule() call) ÷ np.argsort of {n:,} "
        f"floats, same run: {ratios}"
    )


def kernel_timings(
    names: Sequence[str],
    cost: CostModel,
    large_transfers: int,
    oracle_budget: float,
    oracles: bool = True,
    large_block_size: int = 4 * 1024 * 1024,
    advance: Callable[[], None] = lambda: None,
) -> tuple[list[Timing], dict[str, int]]:
    """Time each kernel on the RB=0.5, 128-I/O-node workload and on a large uniform set.

    Oracles run on the medium workload only, each in a child process with a
    wall-time budget. Block-splitting policies use ``large_block_size`` on
    the large set (at their default block size it would be ~10^9 pieces).

    Examples
    --------
    >>> from orchestrator.cost import get_cost_model
    >>> rows, sizes = kernel_timings(["ecf"], get_cost_model(), 10_000, 1.0, oracles=False)
    >>> rows[0].policy, rows[0].units_large, rows[0].oracle_medium is None
    ('ecf', 10000, True)
    """
    medium_args: dict[str, Any] = {
        "n_ionodes": 128,
        "busy_ratio": 0.5,
        "large_ratio": 0.1,
        "seed": 0,
    }
    medium = bidding_workload(**medium_args)
    large = uniform_workload(large_transfers, n_clients=1024, n_ionodes=256, seed=0)
    sizes = {"medium": len(medium), "large": len(large)}
    out = []
    for p in names:
        pm = schedule(medium, p, cost=cost)
        oracle: float | None = None
        if oracles and p in _ORACLE_CALL:
            t = time_oracle(p, medium_args, cost, oracle_budget)
            oracle = float("inf") if t is None or t > oracle_budget else t
        opts = {"block_size": large_block_size} if get_policy(p).default_block_size else {}
        yardstick = argsort_seconds(len(large))
        t0 = time.perf_counter()
        pl = schedule(large, p, cost=cost, **opts)
        planned = time.perf_counter() - t0
        out.append(
            Timing(
                p,
                pm.n_units,
                pm.kernel_seconds,
                oracle,
                pl.n_units,
                pl.kernel_seconds,
                opts.get("block_size"),
                planned,
                yardstick,
            )
        )
        del pm, pl
        advance()
    return out, sizes


def default_names() -> list[str]:
    """Policies in the order the tables show them.

    Examples
    --------
    >>> default_names()[:4]
    ['ecf', 'mwm', 'ms-ecf', 'ms-ml']
    """
    order = [
        "ecf",
        "mwm",
        "ms-ecf",
        "ms-ml",
        "fcfs",
        "rand",
        "uar",
        "hdf",
        "first-ios",
        "random-ios",
        "hash-ios",
    ]
    return [p for p in order if p in policies()]
