"""``iorch bench testbed``: the papers' experiments rerun for real on an emulated cluster.

For every point of the bidding paper's three sweeps (I/O nodes, busy ratio,
large ratio; scaled to what 2 cores host), the workload is written for real
through the engine on a testbed (:mod:`orchestrator.testbed`) with each
policy, and beside each realized makespan stands the simulator's prediction
for the same TransferSet under the cost model calibrated on that testbed, and
their ratio. *Unordered dispatch* is the baseline the papers start from and
users write today: every client sends its transfers itself, one at a time, in
its own order, as soon as it can, each send waiting until the I/O node has
written it; an I/O node writes what arrives first-come first-served.

The BIPS3D dump (METIS, random, first, IDG assignments) runs on the same
testbed at 8 and 64 partitions, where each piece pays a real round trip.

Examples
--------
>>> [s.name for s in paper_sweeps(quick=True)]
['ionodes', 'busy', 'large']
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import is_int
from ..engine.cluster import IOCluster
from ..errors import InputError
from ..files import remove_path
from ..transfers import TransferSet
from ..workload import bidding_workload
from .calibration import Calibration, calibrate, run_point
from .push import unordered_plan, unordered_seconds
from .transferstage import TransferStage, place, transfer_stage

__all__ = ["ORDERED", "TestbedSweep", "paper_sweeps", "run_point", "unordered_seconds"]

#: the ordered policies every point runs (the engine dispatches each plan for real)
ORDERED = ("ecf", "ecf-ls", "auto", "ms-ecf", "ms-ml", "mwm", "rand")
#: the workload's sizes, scaled: the paper's 32 MiB : 128 KiB large-to-small ratio of 256
LARGE, SMALL, ROW = 256 << 10, 1 << 10, 1 << 10
STRIPE = 64 << 10
#: the Clusterfile benchmark's schedule blocks: a quarter stripe up to a client's whole
#: share of an I/O node (2 MiB per client over 8 nodes)
CLUSTERFILE_BLOCKS = (16 << 10, 64 << 10, 256 << 10)


@dataclass(frozen=True)
class TestbedSweep:
    """One sweep: the varied parameter's points and the fixed ones."""

    __test__ = False  # not a pytest class, whatever its name

    name: str
    xlabel: str
    xkey: str
    xs: tuple[float, ...]
    fixed: dict[str, float]
    #: clients writing (the first compute hosts); ``None``: every compute host
    n_clients: int | None = None
    #: workload seeds: every point runs once per seed
    seeds: tuple[int, ...] = (0,)

    def transfers(self, x: float, n_clients: int, seed: int = 0) -> TransferSet:
        """The bidding workload at point ``x`` for ``n_clients`` clients, sizes scaled.

        Examples
        --------
        >>> paper_sweeps(quick=True)[1].transfers(0.25, 8).n_ionodes
        4
        """
        args: dict[str, Any] = dict(self.fixed)
        args[self.xkey] = x
        return bidding_workload(
            n_ionodes=int(args["n_ionodes"]),
            busy_ratio=float(args["busy_ratio"]),
            large_ratio=float(args["large_ratio"]),
            n_clients=n_clients,
            seed=seed,
            normal_requests=float(args.get("normal_requests", 4.0)),
            large_bytes=LARGE,
            small_bytes=SMALL,
        )

    def n_ionodes(self, x: float) -> int:
        """I/O nodes at point ``x``."""
        return int(x if self.xkey == "n_ionodes" else self.fixed["n_ionodes"])


def paper_sweeps(quick: bool = False) -> list[TestbedSweep]:
    """The bidding paper's sweeps at testbed scale (its sec. 4: 256 clients, up to 128
    I/O nodes; here 16 clients, 2-8 I/O nodes; fewer points with ``quick``).

    Examples
    --------
    >>> paper_sweeps()[0].xs
    (2, 4, 8)
    >>> paper_sweeps()[3].n_clients
    8
    """
    if quick:
        return [
            TestbedSweep(
                "ionodes",
                "I/O nodes",
                "n_ionodes",
                (2,),
                {"busy_ratio": 0.5, "large_ratio": 0.5, "normal_requests": 1.0},
            ),
            TestbedSweep(
                "busy",
                "busy I/O node ratio RB",
                "busy_ratio",
                (0.25,),
                {"n_ionodes": 4, "large_ratio": 0.5, "normal_requests": 1.0},
            ),
            TestbedSweep(
                "large",
                "large transfer ratio RL",
                "large_ratio",
                (0.5,),
                {"n_ionodes": 4, "busy_ratio": 0.25, "normal_requests": 1.0},
            ),
        ]
    return [
        TestbedSweep(
            "ionodes",
            "I/O nodes (RB=0.25, RL=0.8)",
            "n_ionodes",
            (2, 4, 8),
            {"busy_ratio": 0.25, "large_ratio": 0.8},
        ),
        TestbedSweep(
            "busy",
            "busy I/O node ratio RB (8 I/O nodes, RL=0.1)",
            "busy_ratio",
            (0.125, 0.25, 0.375, 0.5),
            {"n_ionodes": 8, "large_ratio": 0.1},
        ),
        TestbedSweep(
            "large",
            "large transfer ratio RL (8 I/O nodes, RB=0.125)",
            "large_ratio",
            (0.1, 0.5, 0.9),
            {"n_ionodes": 8, "busy_ratio": 0.125},
        ),
        # The one-port regime: as many clients as I/O nodes. With 16 clients over 8 I/O
        # nodes a client's requests to one node are one transfer (the list strategy's unit)
        # and every busy node always has someone queued, so unordered dispatch sits at the
        # lower bound; with one client per node, a client queued at one busy node leaves
        # another idle, which is what ordering repairs (the simulator predicts 1.2-1.35x
        # on average here, under 1.1x with 16 clients). Three seeds: the gap varies by draw.
        TestbedSweep(
            "busy-1:1",
            "busy ratio RB, 8 clients : 8 I/O nodes (RL=0.1)",
            "busy_ratio",
            (0.25, 0.5, 0.75, 1.0),
            {"n_ionodes": 8, "large_ratio": 0.1, "normal_requests": 1.0},
            n_clients=8,
            seeds=(0, 1, 2),
        ),
    ]


def build(sweep: TestbedSweep, x: float, n_clients: int, seed: int = 0) -> TransferStage:
    """The stage of one sweep point."""
    return transfer_stage(sweep.transfers(x, n_clients, seed), row_bytes=ROW, stripe_bytes=STRIPE)


def sweep_rows(
    cluster: IOCluster,
    sweep: TestbedSweep,
    xs: Sequence[float],
    policies: Sequence[str],
    calibration: Calibration,
    directory: Path,
    repeat: int = 3,
    seeds: Sequence[int] | None = None,
    advance: Any = lambda msg: None,
) -> list[dict[str, Any]]:
    """Rows of one sweep's points on one testbed, for each seed (default: the sweep's):
    each policy (median of ``repeat``), unordered dispatch with FCFS I/O nodes
    (``unordered``, with the simulator's prediction for it) and with clients sharing the
    I/O nodes' links (``unordered-shared``), all with the same contributions, after an
    untimed warm-up of each.

    Examples
    --------
    >>> sw = paper_sweeps(quick=True)[1]
    >>> rows = sweep_rows(cluster, sw, sw.xs, ["ecf"], calibration, tmp)  # doctest: +SKIP
    >>> sorted({r["policy"] for r in rows})  # doctest: +SKIP
    ['ecf', 'unordered', 'unordered-shared']
    """
    n_clients = sweep.n_clients or len(cluster.compute)
    if n_clients > len(cluster.compute):
        raise InputError(
            f"sweep {sweep.name!r} needs n_clients={n_clients} compute hosts, "
            f"the testbed has {len(cluster.compute)}"
        )
    out = []
    for x in xs:
        for seed in sweep.seeds if seeds is None else seeds:
            out += _point_rows(
                cluster, sweep, build(sweep, x, n_clients, seed), x, seed,
                policies, calibration, directory, repeat,
            )  # fmt: skip
            advance(f"{sweep.name} = {x}")
    return out


def _point_rows(
    cluster: IOCluster,
    sweep: TestbedSweep,
    st: TransferStage,
    x: float,
    seed: int,
    policies: Sequence[str],
    calibration: Calibration,
    directory: Path,
    repeat: int,
) -> list[dict[str, Any]]:
    """The rows of one sweep point and seed (see :func:`sweep_rows`)."""
    parts = place(cluster, st)
    try:
        for fcfs in (True, False):  # warm-up: imports, first connections
            unordered_seconds(cluster, st, parts, directory, fcfs=fcfs)
        run_point(cluster, st, parts, policies[:1], None, directory)
        runs: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
        unordered: dict[str, list[float]] = {"unordered": [], "unordered-shared": []}
        for _ in range(repeat):
            for name, fcfs in (("unordered", True), ("unordered-shared", False)):
                unordered[name].append(unordered_seconds(cluster, st, parts, directory, fcfs=fcfs))
            for row in run_point(cluster, st, parts, policies, calibration, directory):
                runs[row["policy"]].append(row)
    finally:
        for p in parts:
            p.release()
    loads = np.bincount(st.transfers.ionode, weights=st.transfers.nbytes)
    base = {
        "sweep": sweep.name,
        "x": x,
        "seed": seed,
        "n_ionodes": st.transfers.n_ionodes,
        "n_clients": st.transfers.n_clients,
        "transfers": len(st.transfers),
        "nbytes": st.nbytes,
        "max_ionode_bytes": int(loads.max()),
    }
    rows = []
    # the same statistic for every row: the middle run (the lower one of two)
    mid = {k: sorted(v)[(len(v) - 1) // 2] for k, v in unordered.items()}
    pushes = calibration.pushes()
    sim = pushes.predict(unordered_plan(st, pushes.model))
    for name, v in unordered.items():
        row = {**base, "policy": name, "realized": mid[name], "all_realized": v}
        if name == "unordered":  # the simulator's one-port FIFO I/O nodes are this one's
            row |= {"simulated": sim, "realized_over_simulated": mid[name] / sim}
        rows.append(row)
    for rs in runs.values():
        med = sorted(rs, key=lambda r: r["realized"])[(len(rs) - 1) // 2]
        rows.append(
            {
                **base,
                **med,
                "all_realized": [r["realized"] for r in rs],
                "unordered_over_realized": mid["unordered"] / med["realized"],
                # the engine's whole stage (planning, programs, commit) against the baseline
                "unordered_over_stage": mid["unordered"] / med["stage_seconds"],
            }
        )
    return rows


def bips3d_rows(
    cluster: IOCluster,
    directory: Path,
    parts: Sequence[int] = (8, 64),
    load: int = 25,
    repeat: int = 2,
    stripe_bytes: int = 256 << 10,
    calibration: Calibration | None = None,
) -> list[dict[str, Any]]:
    """The BIPS3D dump on the testbed with every assignment, at each partition count: the
    real mesh where this machine has it, else a generated one of the same size."""
    from ..workflows import bips3d

    mesh = bips3d.default_mesh()
    rows = []
    for k in parts:
        case = bips3d.load_case(mesh, None if mesh else 32_888, parts=k, halo=2 if mesh else 1)
        results = bips3d.run_methods(
            case,
            cluster,
            directory,
            ["metis", "random", "first", "idg"],
            load=load,
            repeat=repeat,
            stripe_bytes=stripe_bytes,
            cost=calibration.model if calibration else "cluster2004",
            policy="ecf",
        )
        for r in results:
            realized = float(r.result.timings["dispatch"])
            rows.append(
                {
                    "mesh": case.name,
                    "parts": k,
                    "method": r.method,
                    "pieces": r.pieces,
                    "intervals": int(r.stats.total_intervals),
                    "nbytes": r.nbytes,
                    "realized": realized,
                    "stage_seconds": r.stage_seconds,
                    "simulated": calibration.predict(r.result.plan)
                    if calibration
                    else float("nan"),
                }
            )
            remove_path(r.path)
    return rows


def plot_sweeps(rows: Sequence[dict[str, Any]], sweeps: Sequence[TestbedSweep], path: Path) -> None:
    """Realized seconds per policy along each sweep (unordered dashed), and realized ÷
    simulated, one column per sweep, like the bidding paper's figures; a point run with
    several seeds shows their mean."""
    from ..plots import _finish, _pyplot, close

    plt = _pyplot()
    fig, axes = plt.subplots(2, len(sweeps), figsize=(5 * len(sweeps), 7), squeeze=False)
    for j, sw in enumerate(sweeps):
        mine = [r for r in rows if r["sweep"] == sw.name]
        for i, p in enumerate(dict.fromkeys(r["policy"] for r in mine)):
            xs = sorted({r["x"] for r in mine if r["policy"] == p})

            def mean(key: str, x: float, p: str = p, mine: list[dict[str, Any]] = mine) -> float:
                v = [r.get(key, np.nan) for r in mine if r["policy"] == p and r["x"] == x]
                return float(np.mean(v))

            style = "--" if p.startswith("unordered") else "-"
            color = f"C{i % 10}"  # one colour per policy in both rows
            realized = [mean("realized", x) for x in xs]
            axes[0][j].plot(xs, realized, style, marker="o", label=p, color=color)
            if p != "unordered-shared":
                ratio = [mean("realized_over_simulated", x) for x in xs]
                axes[1][j].plot(xs, ratio, style, marker="o", label=p, color=color)
        seeds = f", mean of {len(sw.seeds)} seeds" if len(sw.seeds) > 1 else ""
        axes[0][j].set_title(sw.name + seeds)
        axes[0][j].set_ylabel("realized seconds")
        axes[1][j].axhspan(0.8, 1.25, color="0.9")
        axes[1][j].set_ylabel("realized ÷ simulated")
        axes[1][j].set_xlabel(sw.xlabel)
    axes[0][0].legend(fontsize=7)
    close(_finish(fig, path))


def plot_clusterfile(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Realized (solid) and simulated (dotted) seconds of each Clusterfile heuristic by
    schedule block, the engine's ECF plan of the same stage as a line: the paper's Fig. 2
    as time rather than throughput.

    Examples
    --------
    >>> plot_clusterfile(results["clusterfile"], out / "testbed-clusterfile.png")  # doctest: +SKIP
    """
    from ..plots import _finish, _pyplot, close

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, h in enumerate(r["heuristic"] for r in rows if r["block"] == rows[0]["block"]):
        pts = sorted((r["block"] >> 10, r) for r in rows if r["heuristic"] == h)
        xs = [x for x, _ in pts]
        ax.plot(xs, [r["realized"] for _, r in pts], "-o", color=f"C{i}", label=f"{h}-IOS")
        ax.plot(xs, [r["simulated"] for _, r in pts], ":", color=f"C{i}")
    for r in rows:
        if r["block"] == 0:
            ax.axhline(r["realized"], color="k", lw=1, label=r["heuristic"])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("schedule block (KiB)")
    ax.set_ylabel("seconds (dotted: simulated)")
    n_c, n_io = rows[0]["n_clients"], rows[0]["n_ionodes"]
    ax.set_title(f"Clusterfile heuristics, {n_c} clients : {n_io} I/O nodes")
    ax.legend(fontsize=7)
    close(_finish(fig, path))


def run(
    profile: str,
    out: Path,
    quick: bool = False,
    policies: Sequence[str] = ORDERED,
    n_compute: int = 16,
    repeat: int = 2,
    bips3d_parts: Sequence[int] = (8, 64),
    clusterfile_blocks: Sequence[int] = CLUSTERFILE_BLOCKS,
    advance: Any = lambda msg: None,
) -> dict[str, Any]:
    """Every sweep on its own testbed (one per distinct I/O node count), calibrated first;
    then the BIPS3D dump, and the Clusterfile heuristics on the largest testbed. Writes
    ``results.json``, ``testbed-sweeps.png`` and ``testbed-clusterfile.png`` in ``out``."""
    import json

    from .. import testbed
    from .clusterfile import clusterfile_rows

    need = max((sw.n_clients or 0) for sw in paper_sweeps(quick))
    if not is_int(n_compute, max(2, need), 251):
        raise InputError(
            f"n_compute must be a whole number >= {max(2, need)} (the busy-1:1 sweep's "
            f"clients), got {n_compute!r}"
        )
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    sweeps = paper_sweeps(quick)
    plan: dict[int, list[tuple[TestbedSweep, list[float]]]] = {}
    for sw in sweeps:
        for x in sw.xs:
            n = sw.n_ionodes(x)
            group = plan.setdefault(n, [])
            if group and group[-1][0] is sw:
                group[-1][1].append(x)
            else:
                group.append((sw, [x]))
    # the dump on the testbed of 4 I/O nodes (make demo's), or the nearest below
    mesh_io = max([n for n in plan if n <= 4] or [min(plan)])
    rows: list[dict[str, Any]] = []
    calibrations: dict[str, Any] = {}
    mesh_rows: list[dict[str, Any]] = []
    cf_rows: list[dict[str, Any]] = []
    t_up: list[float] = []
    for n_io, todo in sorted(plan.items()):
        t0 = time.perf_counter()
        with testbed.up(profile, n_io, n_compute) as tb:
            t_up.append(time.perf_counter() - t0)
            with tb.connect() as cl:
                advance(f"calibrating {n_io} I/O nodes")
                cal = calibrate(cl, work)
                calibrations[str(n_io)] = dataclasses.asdict(cal)
                for sw, xs in todo:
                    rows += sweep_rows(cl, sw, xs, policies, cal, work, repeat, advance=advance)
                if bips3d_parts and n_io == mesh_io:
                    advance("BIPS3D dump")
                    mesh_rows = bips3d_rows(cl, work, bips3d_parts, repeat=repeat, calibration=cal)
                if clusterfile_blocks and n_io == max(plan):
                    cf_rows = clusterfile_rows(
                        cl,
                        work,
                        cal,
                        blocks=clusterfile_blocks,
                        n_clients=min(n_io, n_compute),
                        repeat=repeat,
                        advance=advance,
                    )
    results = {
        "profile": profile,
        "preset": dataclasses.asdict(testbed.get_profile(profile).cost_model()),
        "n_compute": n_compute,
        "latency_emulated": testbed.can_delay(),
        "testbed_up_seconds": t_up,
        "calibrations": calibrations,
        "sweeps": rows,
        "bips3d": mesh_rows,
        "clusterfile": cf_rows,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    plot_sweeps(rows, sweeps, out / "testbed-sweeps.png")
    if cf_rows:
        plot_clusterfile(cf_rows, out / "testbed-clusterfile.png")
    remove_path(work)
    return results
