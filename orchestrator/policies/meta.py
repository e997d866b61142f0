"""Policies that build their own units or combine others: split-opt, ecf-ls, exact, auto.

Each gets the TransferSet, the cost model, the seed and its options, and
returns a :class:`~orchestrator.policies.registry.Built`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from ..cost import CostModel
from ..errors import PolicyError
from ..kernels import localsearch
from ..kernels.timing import list_schedule
from ..plan import Plan
from ..transfers import TransferSet
from .options import bool_option, float_option, int_option
from .registry import Built, Policy, PolicyOption, register_policy, start_option
from .scheduling import schedule
from .splitopt import split_opt_units

__all__: list[str] = []

KiB = 1024


def _split_opt(ts: TransferSet, cm: CostModel, seed: int, options: dict[str, Any]) -> Built:
    min_piece = int_option(options, "min_piece", 4 * KiB)
    align = int_option(options, "align", 1)
    units, order, stats = split_opt_units(ts, cm, min_piece=min_piece, align=align)
    whole = schedule(ts, "ecf", cost=cm)
    _, end = list_schedule(
        order, units.client, units.ionode, units.durations, ts.n_clients, ts.n_ionodes
    )
    info = {"phases": stats["phases"], "decompositions": stats["rounds"]}
    if whole.makespan < float(end.max()):  # cuts cost more than they save here
        return Built(whole.units, whole.order, fields={"options": info | {"fallback": "ecf"}})
    return Built(units, order, rounds=stats["phases"], fields={"options": info})


def _local_search(
    first: Plan, moves: int, window: int, limit: float
) -> tuple[npt.NDArray[np.int64], int]:
    """Improve ``first``'s order with :func:`kernels.localsearch.improve` within the budgets.

    The time limit is checked between chunks of moves; a chunk is sized so
    it takes about a tenth of the limit (an evaluation costs ~5 ns a unit).
    """
    ts, u = first.transfers, first.units
    chunk = int(min(256, max(1, 0.1 * limit / (5e-9 * max(first.n_units, 1)))))
    t0 = time.perf_counter()
    order, done = first.order, 0
    while done < moves and time.perf_counter() - t0 < limit:
        step = min(chunk, moves - done)
        order, evals, _ = localsearch.improve(
            order, u.client, u.ionode, u.durations, ts.n_clients, ts.n_ionodes, step, window
        )
        done += int(evals)
        if evals < step:  # local optimum
            break
    return order, done


def _ecf_ls(ts: TransferSet, cm: CostModel, seed: int, options: dict[str, Any]) -> Built:
    start = start_option(options, "ecf", "ecf-ls")
    moves = int_option(options, "moves", 5000)
    window = int_option(options, "window", 64)
    limit = float_option(options, "time_limit", 1.0)
    first = schedule(ts, start, cost=cm, seed=seed)
    order, done = _local_search(first, moves, window, limit)
    return Built(
        first.units,
        order,
        extra_seconds=first.scheduling_seconds if first.kind == "bidding" else 0.0,
        fields={"options": {"evaluated_moves": done, "start": start}},
    )


def _exact(ts: TransferSet, cm: CostModel, seed: int, options: dict[str, Any]) -> Built:
    # OR-Tools is an optional extra: imported only when the exact policy runs
    from .exact import ExactUnavailable, exact_order, require_ortools

    limit = float_option(options, "time_limit", 10.0)
    try:
        require_ortools()
    except ExactUnavailable as err:
        raise PolicyError(str(err)) from None
    hint = schedule(ts, "ecf", cost=cm)
    u = hint.units
    if hint.makespan <= hint.lower_bound:  # ECF already meets the bound
        order, gap, proven = hint.order, 0.0, True
    else:
        order, gap, proven = exact_order(
            u.client,
            u.ionode,
            u.durations,
            ts.n_clients,
            ts.n_ionodes,
            hint.order,
            limit,
            seed=seed,
            lower=hint.lower_bound,
        )
        _, end = list_schedule(order, u.client, u.ionode, u.durations, ts.n_clients, ts.n_ionodes)
        if float(end.max()) > hint.makespan:  # rounding to ticks may cost a hair
            order = hint.order
        elif float(end.max()) <= hint.lower_bound * (1 + 1e-12):  # at the bound: optimal
            gap, proven = 0.0, True
    return Built(u, order, fields={"optimality_gap": gap, "proven_optimal": proven})


def _auto(ts: TransferSet, cm: CostModel, seed: int, options: dict[str, Any]) -> Built:
    split = bool_option(options, "split", True)
    limit = float_option(options, "time_limit", 1.0)
    sp_opts: dict[str, Any] = {k: options[k] for k in ("min_piece", "align") if k in options}
    if split:  # checked even when split-opt ends up not running
        int_option(sp_opts, "min_piece", 1)
        int_option(sp_opts, "align", 1)
    # equal sizes (a cheap feature): matchings are as good as ECF there and
    # several times faster on large sets, so MWM goes first and ECF only runs
    # if MWM misses the bound
    equal = len(ts) > 0 and int(ts.nbytes.min()) == int(ts.nbytes.max())
    first, second = ("mwm", "ecf") if equal else ("ecf", "mwm")
    plans = [schedule(ts, first, cost=cm)]
    unit = max(plans[0].scheduling_seconds, 1e-6)
    skipped: dict[str, str] = {}
    # (candidate, its cost in runs of the first one, a rough guess): a candidate
    # runs only while the best plan's distance to the lower bound could pay for it
    wanted: list[tuple[str, float, dict[str, Any]]] = [
        (second, 1.0 if equal else 5.0, {}),
        ("ecf-ls", 2.0, {}),
    ]
    wanted += [("split-opt", 50.0, sp_opts)] if split else []
    for name, factor, opts in wanted:
        best = min(plans, key=lambda p: p.total_seconds)
        gain = best.makespan - best.lower_bound
        if gain <= 1e-9 * best.lower_bound:
            skipped[name] = "a plan meets the lower bound"
        elif gain < factor * unit:
            skipped[name] = f"cannot gain more than it costs ({gain:.3g} s)"
        elif name == "ecf-ls":  # improve the shortest plan so far, no second run of it
            start = min(plans, key=lambda p: p.makespan)
            # at most 1% of the makespan it tries to shorten, and half of what it could gain
            budget = min(limit, 0.01 * start.makespan, 0.5 * gain)
            t0 = time.perf_counter()
            order, done = _local_search(start, 5000, 64, budget)
            plans.append(
                dataclasses.replace(
                    start,
                    order=order,
                    policy="ecf-ls",
                    kind="centralized",
                    kernel_seconds=start.scheduling_seconds + time.perf_counter() - t0,
                    options={"start": start.policy, "evaluated_moves": done},
                )
            )
        else:
            plans.append(schedule(ts, name, cost=cm, **opts))
    best = min(plans, key=lambda p: p.total_seconds)
    return Built(
        best.units,
        best.order,
        best.rounds,
        best.messages,
        fields={
            "chosen_policy": best.policy,
            "options": {
                "candidates": {
                    p.policy: {"makespan": p.makespan, "scheduling_seconds": p.scheduling_seconds}
                    for p in plans
                },
                "skipped": skipped,
            },
        },
    )


_MIN_PIECE = PolicyOption(
    "min_piece",
    "int",
    4 * KiB,
    "bytes (a page); no piece of a cut transfer but its last is smaller (slots too "
    "short for it stay empty)",
)
_ALIGN = PolicyOption(
    "align",
    "int",
    1,
    "bytes; cut offsets are multiples of this, from the transfer's start (e.g. a stripe size)",
)

register_policy(
    Policy(
        name="split-opt",
        summary="Cut transfers so every client and I/O node is busy until the lower bound "
        "(Birkhoff–von Neumann phases).",
        origin="Gonzalez & Sahni 1976 (preemptive open shop); Birkhoff–von Neumann decomposition",
        kind="centralized",
        options=(_MIN_PIECE, _ALIGN),
        build=_split_opt,
    )
)

register_policy(
    Policy(
        name="ecf-ls",
        summary="Local search from ECF (or another start): swap/reinsert transfers on the "
        "critical path while the makespan drops.",
        origin="this project; moves after the open-shop local search literature",
        kind="centralized",
        options=(
            PolicyOption("start", "policy", "ecf", "the plan to improve"),
            PolicyOption("moves", "int", 5000, "most candidate moves evaluated"),
            PolicyOption(
                "window",
                "int",
                64,
                "a critical transfer may move before this many of the transfers preceding "
                "it on its client or I/O node",
            ),
            PolicyOption("time_limit", "float", 1.0, "seconds of wall time it may take"),
        ),
        build=_ecf_ls,
    )
)

register_policy(
    Policy(
        name="exact",
        summary="Non-preemptive optimum with OR-Tools CP-SAT (small sets); records the proven gap.",
        origin="CP-SAT interval model (one interval per transfer, NoOverlap per endpoint)",
        kind="centralized",
        options=(PolicyOption("time_limit", "float", 10.0, "seconds the solver may take"),),
        build=_exact,
        warm=False,  # the solver's start-up is part of its cost
        # two CP-SAT workers stopped by a wall-clock limit: the same seed may end elsewhere
        deterministic=False,
    )
)

register_policy(
    Policy(
        name="auto",
        summary="Run the fast candidates (ecf, mwm, ecf-ls, split-opt) and keep the best "
        "scheduling time + makespan.",
        origin="this project",
        kind="centralized",
        options=(
            PolicyOption("split", "bool", True, "may cut transfers (split-opt is a candidate)"),
            PolicyOption(
                "time_limit",
                "float",
                1.0,
                "seconds of the ecf-ls candidate (never more than 1% of the best makespan "
                "found before it)",
            ),
            _MIN_PIECE,
            _ALIGN,
        ),
        build=_auto,
        candidates=("ecf", "mwm", "ecf-ls", "split-opt"),
    )
)
