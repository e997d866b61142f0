"""The policy registry and :func:`schedule`, the entry point from TransferSet to Plan."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np
import numpy.typing as npt

from .cost import CostModel, get_cost_model
from .errors import PolicyError
from .kernels import bidding, decentralized, greedy, matching
from .kernels.rng import make_state
from .kernels.timing import list_schedule
from .plan import Plan, Units
from .transfers import TransferSet

__all__ = ["Built", "Policy", "PolicyError", "policies", "schedule"]

log = logging.getLogger("orchestrator.policies")

Arrays = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]
Result = tuple[npt.NDArray[np.int64], int, int]


@dataclass(frozen=True)
class Built:
    """What a policy with its own units (``Policy.build``) returns to :func:`schedule`."""

    units: Units
    order: npt.NDArray[np.int64]
    rounds: int = 0
    messages: int = 0
    #: seconds of scheduling spent outside the measured call (e.g. a start plan's bidding)
    extra_seconds: float = 0.0
    fields: dict[str, Any] = dataclass_field(default_factory=dict)


Builder = Callable[[TransferSet, CostModel, int, dict[str, Any]], Built]


@dataclass(frozen=True)
class Policy:
    """What :func:`policies` reports about one policy.

    Most policies order precomputed units with ``run``. Policies that cut
    transfers themselves, or need the TransferSet and cost model (``split-opt``,
    ``exact``, ``ecf-ls``, ``auto``), set ``build`` instead: it gets the
    TransferSet, the cost model, the seed and the checked options.
    """

    name: str
    summary: str
    origin: str
    kind: str  # "centralized", "bidding" or "decentralized"
    randomised: bool
    parameters: dict[str, str]
    default_block_size: int | None
    run: (
        Callable[
            [npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64], int, int, int],
            Result,
        ]
        | None
    )
    build: Builder | None = None


KiB = 1024
#: Most units (transfers or pieces) one plan may hold: ~60 bytes each in memory.
MAX_UNITS = 500_000_000
_BLOCK = "block_size (bytes, default {0}): transfers are cut into pieces of this size"


def _ecf(c, s, d, nc, ns, seed):
    return greedy.ecf(c, s, d, nc, ns), 0, 0


def _fcfs(c, s, d, nc, ns, seed):
    order, phases = greedy.fcfs(c, s, nc, ns)
    return order, int(phases), 0


def _mwm(c, s, d, nc, ns, seed):
    order, steps, _ = matching.mwm(c, s, d, nc, ns)
    return order, int(steps), 0


def _ms_ml(c, s, d, nc, ns, seed):
    o, r, m = bidding.ms_ml(c, s, d, nc, ns)
    return o, int(r), int(m)


def _ms_ecf(c, s, d, nc, ns, seed):
    o, r, m = bidding.ms_ecf(c, s, d, nc, ns)
    return o, int(r), int(m)


def _rand(c, s, d, nc, ns, seed):
    o, r, m = bidding.rand(c, s, nc, ns, make_state(seed))
    return o, int(r), int(m)


def _hdf(c, s, d, nc, ns, seed):
    o, r, m = bidding.hdf(c, s, nc, ns, make_state(seed))
    return o, int(r), int(m)


def _first_ios(c, s, d, nc, ns, seed):
    seq, ptr = decentralized.first_ios_sequences(c, nc)
    return decentralized.serve_fifo(seq, ptr, s, d, nc, ns), 0, 0


def _random_ios(c, s, d, nc, ns, seed):
    seq, ptr = decentralized.random_ios_sequences(c, s, nc, ns, make_state(seed))
    return decentralized.serve_fifo(seq, ptr, s, d, nc, ns), 0, 0


def _hash_ios(c, s, d, nc, ns, seed):
    seq, ptr = decentralized.hash_ios_sequences(c, s, nc, ns)
    return decentralized.serve_fifo(seq, ptr, s, d, nc, ns), 0, 0


# ------------------------------------------------------ policies with their own units
def _int_opt(options: dict[str, Any], name: str, default: int, low: int = 1) -> int:
    v = options.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or not low <= v < 2**62:
        raise PolicyError(f"{name} must be an integer >= {low}, got {v!r}")
    return int(v)


def _float_opt(options: dict[str, Any], name: str, default: float) -> float:
    v = options.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise PolicyError(f"{name} must be a number > 0, got {v!r}")
    if not (np.isfinite(v) and v > 0):
        raise PolicyError(f"{name} must be a number > 0, got {v!r}")
    return float(v)


def _bool_opt(options: dict[str, Any], name: str, default: bool) -> bool:
    v = options.get(name, default)
    if not isinstance(v, bool | np.bool_):
        raise PolicyError(f"{name} must be True or False, got {v!r}")
    return bool(v)


def _start_opt(options: dict[str, Any], default: str, own: str) -> str:
    v = options.get("start", default)
    p = _REGISTRY.get(v) if isinstance(v, str) else None
    if p is None or p.default_block_size is not None or p.build is not None:
        ok = sorted(q.name for q in _REGISTRY.values() if q.run and q.default_block_size is None)
        raise PolicyError(f"start must be a policy on whole transfers {ok}, got {v!r} ({own})")
    return v


def _split_opt(ts: TransferSet, cm: CostModel, seed: int, options: dict[str, Any]) -> Built:
    from .splitopt import split_opt_units

    min_piece = _int_opt(options, "min_piece", 4 * KiB)
    align = _int_opt(options, "align", 1)
    units, order, stats = split_opt_units(ts, cm, min_piece=min_piece, align=align)
    whole = schedule(ts, "ecf", cost=cm)
    _, end = list_schedule(order, units.client, units.ionode, units.durations,
                           ts.n_clients, ts.n_ionodes)  # fmt: skip
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
    from .kernels import localsearch

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
    start = _start_opt(options, "ecf", "ecf-ls")
    moves = _int_opt(options, "moves", 5000)
    window = _int_opt(options, "window", 64)
    limit = _float_opt(options, "time_limit", 1.0)
    first = schedule(ts, start, cost=cm, seed=seed)
    order, done = _local_search(first, moves, window, limit)
    return Built(
        first.units,
        order,
        extra_seconds=first.scheduling_seconds if first.kind == "bidding" else 0.0,
        fields={"options": {"evaluated_moves": done, "start": start}},
    )


def _exact(ts: TransferSet, cm: CostModel, seed: int, options: dict[str, Any]) -> Built:
    from .exact import ExactUnavailable, exact_order, require_ortools

    limit = _float_opt(options, "time_limit", 10.0)
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
            u.client, u.ionode, u.durations, ts.n_clients, ts.n_ionodes, hint.order, limit,
            seed=seed, lower=hint.lower_bound,
        )  # fmt: skip
        _, end = list_schedule(order, u.client, u.ionode, u.durations, ts.n_clients, ts.n_ionodes)
        if float(end.max()) > hint.makespan:  # rounding to ticks may cost a hair
            order = hint.order
        elif float(end.max()) <= hint.lower_bound * (1 + 1e-12):  # at the bound: optimal
            gap, proven = 0.0, True
    return Built(u, order, fields={"optimality_gap": gap, "proven_optimal": proven})


def _auto(ts: TransferSet, cm: CostModel, seed: int, options: dict[str, Any]) -> Built:
    split = _bool_opt(options, "split", True)
    limit = _float_opt(options, "time_limit", 1.0)
    sp_opts: dict[str, Any] = {k: options[k] for k in ("min_piece", "align") if k in options}
    if split:  # checked even when split-opt ends up not running
        _int_opt(sp_opts, "min_piece", 1)
        _int_opt(sp_opts, "align", 1)
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
    wanted = [(second, 1.0 if equal else 5.0), ("ecf-ls", 2.0)]
    wanted += [("split-opt", 50.0)] if split else []
    for name, factor in wanted:
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
                    start, order=order, policy="ecf-ls", kind="centralized",
                    kernel_seconds=start.scheduling_seconds + time.perf_counter() - t0,
                    options={"start": start.policy, "evaluated_moves": done},
                )
            )  # fmt: skip
        else:
            plans.append(schedule(ts, name, cost=cm, **(sp_opts if name == "split-opt" else {})))
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


_WU = "Wu, Lin & Liu, Efficient Distributed Algorithms for Parallel I/O Scheduling"
_ISAILA = "Isaila et al., decentralized parallel I/O scheduling in Clusterfile"

_REGISTRY: dict[str, Policy] = {
    p.name: p
    for p in [
        Policy(
            "ecf",
            "Earliest Completion First: always run next the transfer that can finish first.",
            f"{_WU}, sec. 3.1.2",
            "centralized",
            False,
            {},
            None,
            _ecf,
        ),
        Policy(
            "mwm",
            "Repeated maximum-weight matching of (client, I/O node) pairs, heaviest first.",
            f"{_WU}, sec. 3.1.1",
            "centralized",
            False,
            {},
            None,
            _mwm,
        ),
        Policy(
            "fcfs",
            "First-come first-served phases: greedy matchings in arrival (index) order.",
            f"Jain et al. 1997, as summarised in {_ISAILA}, sec. 3",
            "centralized",
            False,
            {},
            None,
            _fcfs,
        ),
        Policy(
            "ms-ml",
            "Bidding: clients offer their largest transfer; I/O nodes take the most loaded client.",
            f"{_WU}, sec. 3.2.1",
            "bidding",
            False,
            {},
            None,
            _ms_ml,
        ),
        Policy(
            "ms-ecf",
            "Bidding: clients offer their smallest transfer; I/O nodes take the earliest finish.",
            f"{_WU}, sec. 3.2.2",
            "bidding",
            False,
            {},
            None,
            _ms_ecf,
        ),
        Policy(
            "rand",
            "Bidding at random on whole transfers.",
            f"{_WU}, sec. 1 (RAND, Fig. 1)",
            "bidding",
            True,
            {},
            None,
            _rand,
        ),
        Policy(
            "uar",
            "Bidding uniformly at random on fixed-size blocks.",
            f"Durand et al. 2003; {_WU}, sec. 1 (UAR); {_ISAILA}, sec. 3",
            "bidding",
            True,
            {"block_size": _BLOCK.format(32 * KiB)},
            32 * KiB,
            _rand,
        ),
        Policy(
            "hdf",
            "Bidding on fixed-size blocks; I/O nodes grant the client of highest degree.",
            f"Durand et al. 2003; {_WU}, sec. 4",
            "bidding",
            True,
            {"block_size": _BLOCK.format(32 * KiB)},
            32 * KiB,
            _hdf,
        ),
        Policy(
            "first-ios",
            "Decentralized: clients send blocks in file-offset order; I/O nodes serve FIFO.",
            f"{_ISAILA}, sec. 6",
            "decentralized",
            False,
            {"block_size": _BLOCK.format(64 * KiB)},
            64 * KiB,
            _first_ios,
        ),
        Policy(
            "random-ios",
            "Decentralized: each client sends each block to a random I/O node it still owes.",
            f"{_ISAILA}, sec. 6",
            "decentralized",
            True,
            {"block_size": _BLOCK.format(64 * KiB)},
            64 * KiB,
            _random_ios,
        ),
        Policy(
            "hash-ios",
            "Decentralized: client i cycles over I/O nodes from i mod n, skipping exhausted ones.",
            f"{_ISAILA}, sec. 6",
            "decentralized",
            False,
            {"block_size": _BLOCK.format(64 * KiB)},
            64 * KiB,
            _hash_ios,
        ),
        Policy(
            "split-opt",
            "Cut transfers so every client and I/O node is busy until the lower bound "
            "(Birkhoff–von Neumann phases).",
            "Gonzalez & Sahni 1976 (preemptive open shop); Birkhoff–von Neumann decomposition",
            "centralized",
            False,
            {
                "min_piece": "min_piece (bytes, default 4096, a page): no piece of a cut transfer "
                "but its last is smaller (slots too short for it stay empty)",
                "align": "align (bytes, default 1): cut offsets are multiples of this, from the "
                "transfer's start (e.g. a stripe size)",
            },
            None,
            None,
            _split_opt,
        ),
        Policy(
            "ecf-ls",
            "Local search from ECF (or another start): swap/reinsert transfers on the "
            "critical path while the makespan drops.",
            "this project; moves after the open-shop local search literature",
            "centralized",
            False,
            {
                "start": "start (policy name, default 'ecf'): the plan to improve",
                "moves": "moves (default 5000): most candidate moves evaluated",
                "window": "window (default 64): a critical transfer may move before this many "
                "of the transfers preceding it on its client or I/O node",
                "time_limit": "time_limit (seconds, default 1.0): wall-time budget",
            },
            None,
            None,
            _ecf_ls,
        ),
        Policy(
            "exact",
            "Non-preemptive optimum with OR-Tools CP-SAT (small sets); records the proven gap.",
            "CP-SAT interval model (one interval per transfer, NoOverlap per endpoint)",
            "centralized",
            False,
            {"time_limit": "time_limit (seconds, default 10): solver budget"},
            None,
            None,
            _exact,
        ),
        Policy(
            "auto",
            "Run the fast candidates (ecf, mwm, ecf-ls, split-opt) and keep the best "
            "scheduling time + makespan.",
            "this project",
            "centralized",
            False,
            {
                "split": "split (default True): may cut transfers (split-opt is a candidate)",
                "time_limit": "time_limit (seconds, default 1.0): budget of the ecf-ls candidate "
                "(never more than 1% of the best makespan found before it)",
                "min_piece": "min_piece: passed to split-opt",
                "align": "align: passed to split-opt",
            },
            None,
            None,
            _auto,
        ),
    ]
}


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


_warm: set[str] = set()


def _warm_up(p: Policy) -> None:
    """Run a policy once on a tiny set so compile/cache-load time is not timed."""
    if p.name not in _warm:
        c = np.array([0, 1], dtype=np.int64)
        if p.run is not None:
            p.run(c, c[::-1].copy(), np.array([1.0, 2.0]), 2, 2, 0)
        elif p.name == "auto":  # its candidates, each on a set where it runs
            for name in ("ecf", "mwm", "ecf-ls", "split-opt"):
                _warm_up(_REGISTRY[name])
        elif p.name != "exact":  # the solver's start-up is part of its cost
            ts = TransferSet([0, 0, 1, 1], [0, 1, 0, 1], [3, 1, 2, 2])
            p.build(ts, CostModel(1.0, 1.0), 0, {})  # type: ignore[misc]
        _warm.add(p.name)


def schedule(
    transfers: TransferSet,
    policy: str = "ms-ecf",
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
        A name from :func:`policies` (default ``"ms-ecf"``).
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
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**64:
        raise PolicyError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    unknown = sorted(set(options) - set(p.parameters))
    if unknown:
        raise PolicyError(
            f"policy {p.name!r} has no option(s) {unknown}; "
            f"its options are {sorted(p.parameters) or 'none'}"
        )
    block_size = None
    if p.default_block_size is not None:
        block_size = options.get("block_size", p.default_block_size)
        if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer):
            raise PolicyError(f"block_size must be a positive integer, got {block_size!r}")
        if not 0 < block_size < 2**62:
            raise PolicyError(f"block_size must be a positive integer, got {block_size!r}")
        block_size = int(block_size)
        pieces = int(((transfers.nbytes - 1) // block_size + 1).sum())
        if pieces > MAX_UNITS:
            raise PolicyError(
                f"block_size={block_size} cuts these {len(transfers)} transfers into {pieces:,} "
                f"pieces, more than the {MAX_UNITS:,} a plan may hold; use a larger block_size"
            )
    seed = int(seed)
    _warm_up(p)
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
            **fields,
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
