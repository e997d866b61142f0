"""``iorch bench …``: benchmarks printing ratios measured in one run (``write-bench`` is in
:mod:`.writebench`)."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import defaults
from ..bench import schedulers as bench
from ..bench.schedulers import BIDDING, SweepResult, Timing
from ..engine.cluster import local_cluster
from ..errors import InputError
from ..files import atomic_path
from ..limits import check_disk, check_memory
from ..plots import close, sweep_plot
from ..policies import PolicyError, policies
from ._common import (
    console,
    cost_model,
    err,
    progress,
)


def _fmt_ratio(x: float) -> str:
    return f"{x:.3f}"


def bench_schedulers(
    quick: Annotated[
        bool, typer.Option(help="Fewer sweep points, one seed, smaller sets.")
    ] = False,
    seeds: Annotated[
        int | None, typer.Option(min=1, help="Seeds per point (default 3; 1 if quick).")
    ] = None,
    cost: Annotated[str | None, typer.Option(help="Cost preset or .json.")] = None,
    out: Annotated[Path, typer.Option(help="Folder for CSV and PNG output.")] = Path("out/bench"),
    sweeps: Annotated[bool, typer.Option(help="Run the paper's three sweeps.")] = True,
    timings: Annotated[bool, typer.Option(help="Time kernels against the oracles.")] = True,
    oracle_budget: Annotated[
        float | None,
        typer.Option(min=0.1, help="Seconds each oracle may run (default 120; 2 if quick)."),
    ] = None,
    large: Annotated[
        int | None,
        typer.Option(min=1, help="Transfers in the large timing set (default 1e6; 1e5 quick)."),
    ] = None,
) -> None:
    """Rerun the bidding paper's sweeps for every policy and time every kernel.

    Example: ``iorch bench schedulers --quick --out out/demo``
    """
    cm = cost_model(cost)
    n_seeds = seeds if seeds is not None else (1 if quick else 3)
    out.mkdir(parents=True, exist_ok=True)
    names = bench.default_names()
    sweep_list = bench.paper_sweeps(quick)
    console.print(
        f"[bold]bench schedulers[/]: cost model {cm.name}, {n_seeds} seed(s) per point, "
        f"{len(names)} policies; throughput = bytes / (scheduling + makespan), in MB/s"
    )
    rows = []
    with progress() as prog:
        for sw in sweep_list if sweeps else []:
            task = prog.add_task(f"sweep {sw.name}", total=len(sw.xs) * n_seeds * len(names))
            res = bench.run_sweep(sw, names, range(n_seeds), cm, partial(prog.advance, task))
            rows.extend(res.rows)
            _print_sweep(res)
            fig = sweep_plot(
                sw.xs,
                {p: [res.throughput[(x, p)] / 1e6 for x in sw.xs] for p in names},
                sw.xlabel,
                "throughput (MB/s)",
                f"bidding-paper sweep '{sw.name}' ({cm.name} cost model, {n_seeds} seed(s))",
                path=out / f"sweep_{sw.name}.png",
            )
            close(fig)
    if rows:
        bench.write_rows(rows, out / "sweeps.csv")
        console.print(f"raw rows in {out / 'sweeps.csv'}, plots in {out}/sweep_*.png")
    if timings:
        budget = oracle_budget if oracle_budget is not None else (2.0 if quick else 120.0)
        n_large = large if large is not None else (100_000 if quick else 1_000_000)
        # a transfer costs about 200 bytes over the set, the plans and the oracles' copies
        check_memory(200 * n_large, f"--large {n_large}: the large timing set and its plans")
        with progress() as prog:
            task = prog.add_task("kernel timings", total=len(names))
            tm, sizes = bench.kernel_timings(
                names, cm, n_large, budget, advance=partial(prog.advance, task)
            )
        _print_timings(tm, sizes, budget)
        console.print(bench.argsort_line(tm, sizes))


def bench_optimal(
    quick: Annotated[bool, typer.Option(help="Fewer and smaller sets (a test runs this).")] = False,
    seeds: Annotated[int, typer.Option(min=1, help="Instances per family point.")] = 1,
    cost: Annotated[str | None, typer.Option(help="Cost preset or .json.")] = None,
    exact_limit: Annotated[
        float | None,
        typer.Option(min=0.1, help="Seconds CP-SAT may spend per set (default 10; 2 if quick)."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for optimal.csv and optimal.json.")] = Path(
        "out/bench-optimal"
    ),
) -> None:
    """Every policy against the lower bound and the CP-SAT optimum on the benchmark families.

    Example: ``iorch bench optimal --quick --out out/opt``
    """
    from ..bench import optimal as optbench  # loaded when the command runs, not at iorch --help

    cm = cost_model(cost)
    limit = exact_limit if exact_limit is not None else (2.0 if quick else 10.0)
    fams = optbench.families(quick, seeds)
    console.print(
        f"[bold]bench optimal[/]: cost model {cm.name}, {len(fams)} families, "
        f"CP-SAT limit {limit:g} s; ratios are makespan ÷ lower bound (mean / worst)"
    )
    results = []
    with progress() as prog:
        for fam in fams:
            total = len(fam.makers) * len(optbench.POLICIES)
            task = prog.add_task(f"family {fam.name}", total=total)
            results.append(optbench.run_family(fam, cm, limit, advance=partial(prog.advance, task)))
    summary = optbench.summarize(results)
    t = Table(title=f"bench optimal ({cm.name} cost model)", title_justify="left")
    for col in (
        "family",
        "policy",
        "sets",
        "÷ LB mean",
        "÷ LB worst",
        "÷ exact",
        "pieces",
        "messages",
        "sched s",
    ):
        t.add_column(col, justify="left" if col in ("family", "policy") else "right")
    last = None
    for r in summary:
        if last is not None and r["family"] != last:
            t.add_section()
        last = r["family"]
        ex = r["ratio_exact_mean"]
        t.add_row(
            r["family"],
            r["policy"],
            str(r["instances"]),
            f"{r['ratio_mean']:.4f}",
            f"{r['ratio_max']:.4f}",
            "-" if ex is None else f"{ex:.4f}",
            f"{r['pieces']:.0f}",
            f"{r['messages']:.0f}",
            f"{r['scheduling_seconds']:.4f}",
        )
    console.print(t)
    tg = optbench.targets(results)
    tt = Table(title="targets", title_justify="left")
    for col in ("target", "holds", "worst", "where"):
        tt.add_column(col)
    for name, v in tg.items():
        tt.add_row(name, "yes" if v["ok"] else "NO", f"{v['worst']:.4f}", v["family"])
    console.print(tt)
    meta = {"cost": cm.to_dict(), "quick": quick, "seeds": seeds, "exact_limit": limit}
    optbench.write_outputs(results, out, meta)
    console.print(f"rows in {out / 'optimal.csv'}, summary and targets in {out / 'optimal.json'}")


def _print_sweep(res: SweepResult) -> None:
    sw = res.sweep
    t = Table(
        title=f"sweep '{sw.name}': throughput MB/s (makespan ÷ lower bound) — {sw.xlabel}",
        title_justify="left",
    )
    t.add_column("policy")
    for x in sw.xs:
        t.add_column(f"{sw.xkey}={x:g}", justify="right")
    for p in res.policies:
        t.add_row(
            p, *[f"{res.throughput[(x, p)] / 1e6:.2f} ({res.ratio[(x, p)]:.3f})" for x in sw.xs]
        )
    have = set(res.policies)
    bids = [p for p in BIDDING if p in have]
    ratios = [
        ("MS/ECF ÷ ECF", "ms-ecf", ["ecf"]),
        ("MS/ML ÷ MWM", "ms-ml", ["mwm"]),
    ]
    ratios = [r for r in ratios if r[1] in have and set(r[2]) <= have]
    t.add_section()
    for label, a, b in ratios:
        t.add_row(label, *[f"{res.relative(x, a, b):.3f}" for x in sw.xs], style="bold")
    if bids and "hdf" in have:
        t.add_row(
            "best bidding ÷ HDF",
            *[f"{max(res.relative(x, p, 'hdf') for p in bids):.2f}" for x in sw.xs],
            style="bold",
        )
    console.print(t)


def _print_timings(tm: list[Timing], sizes: dict[str, int], budget: float) -> None:
    t = Table(
        title=f"kernel wall time, one core: medium = bidding workload RB=0.5, 128 I/O nodes "
        f"({sizes['medium']:,} transfers); large = {sizes['large']:,} uniform transfers "
        "(block policies cut into 4 MiB pieces there)",
        title_justify="left",
    )
    for col in (
        "policy",
        "medium units",
        "kernel s",
        "oracle s",
        "oracle÷kernel",
        "large units",
        "kernel s",
    ):
        t.add_column(col, justify="right")
    for r in tm:
        if r.oracle_medium is None:
            o, sp = "n/a", "-"  # a policy without an oracle
        elif math.isinf(r.oracle_medium):
            o, sp = f">{budget:g}", f">{budget / r.kernel_medium:,.0f}"
        else:
            o, sp = f"{r.oracle_medium:.3f}", f"{r.oracle_medium / r.kernel_medium:,.0f}"
        t.add_row(
            r.policy,
            f"{r.units_medium:,}",
            f"{r.kernel_medium:.4f}",
            o,
            sp,
            f"{r.units_large:,}",
            f"{r.kernel_large:.3f}",
        )
    console.print(t)
    console.print(
        f"'>{budget:g}': the oracle did not finish within --oracle-budget {budget:g} s and was "
        "stopped, so the ratio is a lower bound. mwm has no order oracle: the tests check "
        "each of its steps against networkx's maximum-weight matching instead."
    )


def bench_idg(
    mesh: Annotated[
        Path | None,
        typer.Option(help="The real mesh's METIS graph (default: the shared BIPS3D data)."),
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="Generated meshes 1-2 only, 8 and 64 parts; 1M-node kernel.")
    ] = False,
    kernel_nodes: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Nodes of the kernel-timing mesh (0: skip; default 10^7, 10^6 with --quick).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of generated meshes and METIS.")] = 0,
    out: Annotated[Path, typer.Option(help="Folder for table4.json.")] = Path("out/bench-idg"),
) -> None:
    """Reproduce the IDG paper's Table 4 and time classification + IDG on a 10^7-node mesh.

    Example: ``iorch bench idg --quick``
    """
    # the workflows load when the command runs, not at iorch --help
    from ..workflows.bips3d import default_mesh
    from ..workflows.idgbench import kernel_timing, table4  # likewise

    real = mesh if mesh is not None else default_mesh()
    gen, parts = ((1, 2), (8, 64)) if quick else ((1, 2, 3, 4), (8, 16, 32, 64))
    if kernel_nodes is None:
        kernel_nodes = 1_000_000 if quick else 10_000_000
    with progress() as prog:
        n_real = 3 if real is not None else 0
        task = prog.add_task("Table 4", total=n_real + len(gen) * len(parts))
        step = partial(prog.update, task, advance=1)
        rows = table4(
            real, generated=gen, parts=parts, seed=seed, advance=lambda m: step(description=m)
        )
        timing = None
        if kernel_nodes:
            prog.update(task, description=f"kernel timing on {kernel_nodes:,} nodes")
            timing = kernel_timing(kernel_nodes, seed=seed)
    if real is None:
        err.print("the real BIPS3D mesh is not on this machine: generated meshes only")
    t = Table(
        title="IDG paper, Table 4: intervals per partition / average interval length (nodes); "
        "ours beside the paper's",
        title_justify="left",
    )
    for col in (
        "mesh",
        "nodes",
        "K",
        "shared h1 / h2",
        "METIS",
        "paper METIS",
        "IDG halo 1",
        "IDG halo 2",
        "paper IDG",
    ):
        t.add_column(col, justify="right")

    def pair(x: tuple[float, ...] | None, i: int = 0) -> str:
        return "-" if x is None else f"{x[i]:,.1f} / {x[i + 1]:,.1f}"

    for r in rows:
        t.add_row(
            r.mesh,
            f"{r.nodes:,}",
            str(r.parts),
            " / ".join(f"{100 * r.shared[h]:.1f} %" for h in sorted(r.shared)),
            pair(r.metis),
            pair(r.paper),
            pair(r.idg.get(1)),
            pair(r.idg.get(2)),
            pair(r.paper, 2),
        )
    console.print(t)
    console.print(
        "Generated meshes have the paper's sizes but our own geometry, numbering (Z-order) "
        "and METIS partitions, so only the real mesh is comparable number for number."
    )
    if timing is not None:
        console.print(
            f"classification + IDG on {timing.nodes:,} nodes / {timing.edges:,} edges, "
            f"{timing.parts} parts, halo {timing.halo} ({100 * timing.shared:.1f} % shared), one "
            f"core, best of 3: classify {timing.classify_seconds:.3f} s + IDG "
            f"{timing.idg_seconds:.3f} s = [bold]{timing.total_seconds:.3f} s[/] "
            f"({1e9 * timing.total_seconds / timing.nodes:.0f} ns/node); mesh generation "
            f"{timing.generate_seconds:.1f} s, METIS {timing.metis_seconds:.1f} s (not timed "
            "by the target)"
        )
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "table4.json") as tmp:
        tmp.write_text(
            json.dumps(
                {
                    "rows": [
                        {
                            **r.__dict__,
                            "idg": {str(h): v for h, v in r.idg.items()},
                            "shared": {str(h): v for h, v in r.shared.items()},
                        }
                        for r in rows
                    ],
                    "kernel": None
                    if timing is None
                    else {**timing.__dict__, "total_seconds": timing.total_seconds},
                },
                indent=2,
            )
        )


def _count(text: str, what: str, low: int, high: int) -> int:
    """A whole number within ``low..high`` from an item of a comma list; ``what`` names it."""
    try:
        n = int(text.strip())
    except ValueError:
        raise InputError(f"{what}: {text.strip()!r} is not a whole number") from None
    if not low <= n <= high:
        raise InputError(f"{what}: {n} is not within {low}..{high}")
    return n


def bench_stage(
    sizes: Annotated[
        str, typer.Option(help="Comma list of checkpoint sizes.")
    ] = "256MiB,1GiB,2GiB",
    tasks: Annotated[str, typer.Option(help="Comma list of task counts.")] = "16,64",
    formats: Annotated[str, typer.Option(help="Comma list: hdf5, zarr.")] = "hdf5,zarr",
    quick: Annotated[bool, typer.Option(help="256 MiB, 16 tasks, both formats.")] = False,
    policy: Annotated[str, typer.Option(help="Policy of the orchestrated stage.")] = "ecf",
    ionodes: Annotated[int, typer.Option(min=1, help="I/O workers.")] = defaults.N_IONODES,
    repeat: Annotated[int, typer.Option(min=1, help="Runs of each way; medians shown.")] = 3,
    out: Annotated[Path, typer.Option(help="Directory on the disk to measure.")] = Path(
        "out/bench-stage"
    ),
) -> None:
    """A checkpoint written by plain h5py/zarr tasks under a lock vs. through the decorator.

    Example: ``iorch bench stage --quick``
    """
    # engine.measure loads distributed: when the command runs, not at iorch --help
    from ..engine.measure import parse_size

    if quick:
        sizes, tasks = "256MiB", "16"
    size_list = [parse_size(x, "--sizes") for x in sizes.split(",")]
    task_list = [_count(x, "--tasks", 1, 4096) for x in tasks.split(",")]
    fmt_list = [x.strip() for x in formats.split(",")]
    for f in fmt_list:
        if f not in ("hdf5", "zarr"):
            raise InputError(f"--formats: {f!r} is not hdf5 or zarr")
    if policy not in policies():
        raise PolicyError(f"--policy: unknown policy {policy!r}; see `iorch policies`")
    # each size is written twice (baseline, orchestrated) and held by the compute workers
    out.mkdir(parents=True, exist_ok=True)
    for text, n in zip(sizes.split(","), size_list, strict=True):
        check_disk(out, 2 * n, f"--sizes {text.strip()}: the two checkpoints", InputError)
        check_memory(2 * n, f"--sizes {text.strip()}: the tasks' blocks and their copies")
    # bench.stage loads distributed: when the command runs, not at iorch --help
    from ..bench.stage import run as run_bench

    total = len(size_list) * len(task_list) * len(fmt_list)
    with (
        local_cluster(n_ionodes=ionodes, n_compute=2, memory_limit="6GiB") as cl,
        progress() as prog,
    ):
        task = prog.add_task("bench stage", total=total)
        step = partial(prog.update, task, advance=1)
        rows = run_bench(
            cl,
            out,
            size_list,
            task_list,
            fmt_list,
            policy=policy,
            advance=lambda m: step(description=m),
            repeat=repeat,
        )
    console.print(
        f"bench stage: {ionodes} I/O workers, 2 compute workers, policy {policy}; baseline = "
        "each task writes its block into the shared target under a lock (h5py / zarr)",
        soft_wrap=True,
    )
    t = Table()
    for col in (
        "format",
        "size",
        "tasks",
        "baseline s",
        "+ fsync s",
        "orchestrated s",
        "orchestrated MB/s",
        "baseline ÷ orch.",
        "baseline+fsync ÷ orch.",
    ):
        t.add_column(col, justify="right")
    for r in rows:
        mbs = r.nbytes / r.orchestrated_seconds / 1e6
        t.add_row(
            r.format,
            f"{r.nbytes / 2**20:,.0f} MiB",
            str(r.tasks),
            f"{r.baseline_seconds:.2f}",
            f"{r.baseline_fsync_seconds:.2f}",
            f"{r.orchestrated_seconds:.2f}",
            f"{mbs:,.0f}",
            f"{r.speedup:.2f}",
            f"{r.durable_speedup:.2f}",
        )
    console.print(t)
    console.print(
        f"median of {repeat} runs each, after an untimed full-size warm-up; times from "
        "submitting the tasks to the last result (orchestrated: committed, with checksums "
        "computed while writing); both outputs spot-checked"
    )


def bench_testbed(
    profile: Annotated[str, typer.Option(help="cluster2004, clusterfile2006 or modern.")] = (
        "cluster2004"
    ),
    quick: Annotated[
        bool, typer.Option(help="One point per sweep, three policies, one repeat, 8 partitions.")
    ] = False,
    compute: Annotated[int, typer.Option(min=2, help="Compute hosts (clients).")] = 16,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per policy and point (median).")] = 3,
    out: Annotated[Path, typer.Option(help="Folder for results.json and plots.")] = Path(
        "out/bench-testbed"
    ),
) -> None:
    """The papers' experiments on an emulated cluster (needs root): the bidding paper's sweeps,
    every policy dispatched for real, beside the simulator's prediction under the model
    calibrated on the testbed; unordered dispatch; the BIPS3D dump by assignment.

    Example: ``iorch bench testbed --quick``
    """
    from ..bench import testbed as tbench  # the testbed loads when the command runs
    from ..testbed import get_profile

    get_profile(profile)  # an unknown name is refused before anything is built
    need = max((s.n_clients or 0) for s in tbench.paper_sweeps(quick))
    if compute < need:
        raise InputError(
            f"--compute must be >= {need} (the busy-1:1 sweep's clients), got {compute}"
        )
    policies = ("ecf", "ms-ecf", "rand") if quick else tbench.ORDERED
    sweeps = tbench.paper_sweeps(quick)
    blocks = (tbench.STRIPE,) if quick else tbench.CLUSTERFILE_BLOCKS
    n_points = sum(len(s.xs) * len(s.seeds) for s in sweeps) + 3 * len(blocks)
    with progress() as prog:
        task = prog.add_task("testbed", total=n_points + 1)
        res = tbench.run(
            profile,
            out,
            quick=quick,
            policies=policies,
            n_compute=compute,
            repeat=1 if quick else repeat,
            bips3d_parts=(8,) if quick else (8, 64),
            clusterfile_blocks=blocks,
            advance=lambda m: prog.update(task, advance=1, description=m),
        )
    for sw in sweeps:
        t = Table(title=f"{sw.name}: realized seconds (realized ÷ simulated)")
        t.add_column(sw.xlabel)
        names = ["unordered", "unordered-shared", *policies]
        for p in names:
            t.add_column(p)
        t.add_column("unordered ÷ best")
        for x in sw.xs:
            for seed in sw.seeds:
                at = {
                    r["policy"]: r
                    for r in res["sweeps"]
                    if r["sweep"] == sw.name and r["x"] == x and r["seed"] == seed
                }
                cells = []
                for p in names:
                    r = at[p]
                    ratio = r.get("realized_over_simulated")
                    cells.append(f"{r['realized']:.2f}" + (f" ({ratio:.2f})" if ratio else ""))
                best = min(at[p]["realized"] for p in policies)
                label = f"{x:g}" + (f" (seed {seed})" if len(sw.seeds) > 1 else "")
                t.add_row(label, *cells, f"{at['unordered']['realized'] / best:.2f}")
        console.print(t)
    if res["bips3d"]:
        t = Table(title="BIPS3D dump on the testbed (ecf): realized seconds by assignment")
        for col in ("parts", "method", "pieces", "realized s", "simulated s", "÷ IDG"):
            t.add_column(col)
        idg = {r["parts"]: r["realized"] for r in res["bips3d"] if r["method"] == "idg"}
        for r in res["bips3d"]:
            t.add_row(
                str(r["parts"]),
                r["method"],
                str(r["pieces"]),
                f"{r['realized']:.2f}",
                f"{r['simulated']:.2f}",
                f"{r['realized'] / idg[r['parts']]:.2f}",
            )
        console.print(t)
    if res["clusterfile"]:
        first = res["clusterfile"][0]
        t = Table(
            title=f"Clusterfile heuristics ({first['n_clients']} clients : "
            f"{first['n_ionodes']} I/O nodes): realized seconds (realized ÷ simulated)"
        )
        t.add_column("block")
        names = list(dict.fromkeys(r["heuristic"] for r in res["clusterfile"] if r["block"]))
        for h in names:
            t.add_column(f"{h}-IOS")
        t.add_column("first ÷ hash")
        eng = next(r for r in res["clusterfile"] if not r["block"])
        for b in dict.fromkeys(r["block"] for r in res["clusterfile"] if r["block"]):
            at = {r["heuristic"]: r for r in res["clusterfile"] if r["block"] == b}
            cells = [
                f"{at[h]['realized']:.2f} ({at[h]['realized_over_simulated']:.2f})" for h in names
            ]
            ratio = at["first"]["realized"] / at["hash"]["realized"]
            t.add_row(f"{b >> 10} KiB", *cells, f"{ratio:.2f}")
        t.add_row(eng["heuristic"], f"{eng['realized']:.2f}", *[""] * len(names))
        console.print(t)
    cal = res["calibrations"]
    err.print(
        "calibrated per I/O node: "
        + "; ".join(
            f"{n} nodes {c['rate'] / 1e6:.2f} MB/s, {c['per_unit'] * 1e3:.1f} ms/unit, "
            f"{c['overhead'] * 1e3:.0f} ms/stage"
            for n, c in cal.items()
        )
        + f" (profile disk {get_profile(profile).disk / 1e6:.2f} MB/s); testbeds up in "
        + ", ".join(f"{s:.1f}" for s in res["testbed_up_seconds"])
        + f" s; results and plots in {out}/"
    )


def bench_walk(
    entries: Annotated[
        int, typer.Option(min=1000, help="Entries of the balanced and skewed trees.")
    ] = 1_000_000,
    walkers: Annotated[int, typer.Option(min=1, help="Walkers for the speed part.")] = 2,
    mwalkers: Annotated[
        int, typer.Option(min=2, max=64, help="Walkers for messages and balance (2 per host).")
    ] = 4,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per contender (median).")] = 3,
    cp_max: Annotated[
        int, typer.Option(min=0, help="Run CP for real up to this many entries; count beyond.")
    ] = 200_000,
    checkpoints: Annotated[
        int, typer.Option(min=10, help="Checkpoints in the verify tree.")
    ] = 1000,
    trees: Annotated[
        Path | None, typer.Option(help="Where the generated trees are kept (default OUT/trees).")
    ] = None,
    testbed: Annotated[
        str | None,
        typer.Option(help="Also run part 2 on this testbed profile (root): one walker per host."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for results.json and plots.")] = Path(
        "out/bench-walk"
    ),
) -> None:
    """The distributed walk beside GNU find, fd and one Python process; every algorithm's
    messages, bytes and balance; walk --op verify beside verify one by one.

    Example: ``iorch bench walk --entries 100000 --repeat 1``
    """
    from ..bench import walk as wbench

    out.mkdir(parents=True, exist_ok=True)
    # the trees' inodes and folders (~1 KiB per entry, small-files' data) and the index
    check_disk(out, 3 * entries * 1024, "the generated trees", InputError)
    with progress() as prog:
        task = prog.add_task("walk", total=None)
        res = wbench.run(
            out,
            entries=entries,
            walkers=walkers,
            mwalkers=mwalkers,
            repeat=repeat,
            cp_max=cp_max,
            checkpoints=checkpoints,
            trees=trees,
            testbed=testbed,
            note=lambda m: prog.update(task, description=m),
        )
    sp = res["speed"]
    t = Table(title=f"listing {sp['entries']:,} entries (warm, no stat), {walkers} walkers")
    for c in ("contender", "entries/s", "÷ find"):
        t.add_column(c, justify="right")
    for name, rate in sorted(sp["rate"].items(), key=lambda kv: -kv[1]):
        t.add_row(name, f"{rate:,.0f}", f"{sp['over_find'][name]:.2f}")
    console.print(t)
    _traffic_table(res["traffic"], f"{mwalkers} walkers on this machine")
    if "traffic_testbed" in res:
        _traffic_table(res["traffic_testbed"], f"{mwalkers} walkers, one per host of {testbed}")
    v = res["verify"]
    console.print(
        f"verify: {v['checkpoints']} checkpoints, {v['damaged']} damaged; one by one found "
        f"{v['single_found']} in {v['single_seconds']:.1f} s, the walk ({v['walkers']} walkers) "
        f"{v['walk_found']} in {v['walk_seconds']:.1f} s; the same set: {v['same']}"
    )
    console.print(f"results and plots in {out}")


def _traffic_table(rows: list[dict], where: str) -> None:
    t = Table(title=f"messages, bytes and balance ({where}; h-drqs: 2 threads each)")
    for c in (
        "tree",
        "algorithm",
        "entries",
        "seconds",
        "messages",
        "bytes",
        "CP ÷ this (msgs)",
        "CP ÷ this (bytes)",
        "work ±",
    ):
        t.add_column(c, justify="right")
    cp = {r["tree"]: r for r in rows if r["algorithm"] == "cp"}
    for r in rows:
        base = cp.get(r["tree"])
        t.add_row(
            r["tree"],
            r["algorithm"] + (" (counted)" if r["counted"] else ""),
            f"{r['entries']:,}",
            "-" if r["seconds"] is None else f"{r['seconds']:.2f}",
            f"{r['messages']:,}",
            f"{r['bytes']:,}",
            "-"
            if base is None or not r["messages"]
            else f"{base['messages'] / r['messages']:,.1f}",
            "-" if base is None or not r["bytes"] else f"{base['bytes'] / r['bytes']:,.1f}",
            "-" if r["imbalance"] is None else f"{100 * r['imbalance']:.0f} %",
        )
    console.print(t)


def bench_hio(
    seeds: Annotated[int, typer.Option(min=1, help="Random arrival orders per point.")] = 5,
    testbed: Annotated[
        bool,
        typer.Option(
            "--testbed",
            help="The concurrent-applications sweep for real on an emulated cluster "
            "(needs root), beside the simulator's prediction.",
        ),
    ] = False,
    apps: Annotated[
        str | None,
        typer.Option(help="With --testbed: concurrent applications, a comma list [2,4,6,8]."),
    ] = None,
    compute_link: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            help="With --testbed: the compute hosts' links in MB/s (slower than the "
            "profile's: shuffles weigh, HIO's case).",
        ),
    ] = None,
    aggregators: Annotated[
        int | None,
        typer.Option(min=1, max=64, help="With --testbed: file domains per application [2]."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for results.json and plots.")] = Path(
        "out/bench-hio"
    ),
) -> None:
    """Concurrent restarts in the simulator: NIO, SIO and HIO on the HIO paper's four
    sweeps (applications, request size, storage nodes, aggregators), beside its numbers;
    with ``--testbed``, restarts for real on an emulated cluster.

    Example: ``iorch bench hio --seeds 2``, ``iorch bench hio --testbed --seeds 3``,
    ``iorch bench hio --testbed --compute-link 4 --aggregators 3``
    """
    testbed_only = {"--apps": apps, "--compute-link": compute_link, "--aggregators": aggregators}
    for name, given in testbed_only.items():
        if given is not None and not testbed:
            raise InputError(f"{name} sets the testbed's sweep: give --testbed too")
    out.mkdir(parents=True, exist_ok=True)
    if testbed:
        text = "2,4,6,8" if apps is None else apps
        _bench_hio_testbed(
            [_count(x, "--apps", 1, 64) for x in text.split(",")],
            seeds,
            out,
            compute_link=None if compute_link is None else compute_link * 1e6,
            aggregators=2 if aggregators is None else aggregators,
        )
        return
    from ..bench import hio  # matplotlib loads when the command runs

    with progress() as prog:
        task = prog.add_task("hio", total=None)
        rows = hio.run(seeds=seeds, note=lambda m: prog.update(task, description=m))
    t = Table(title=f"average execution time of concurrent restarts ({seeds} arrivals each)")
    for c in (
        "sweep",
        "x",
        "HIO vs NIO",
        "HIO vs SIO",
        "SIO vs NIO",
        "hio-mix vs SIO",
        "shuffle share",
        "HIO ≤ SIO ≤ NIO",
    ):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(
            r["sweep"],
            f"{r['x']:,}",
            f"{100 * r['hio_vs_nio']:+.1f} %",
            f"{100 * r['hio_vs_sio']:+.1f} %",
            f"{100 * r['sio_vs_nio']:+.1f} %",
            f"{100 * r['mix_vs_sio']:+.1f} %",
            f"{100 * r['shuffle_share']:.1f} %",
            "yes" if r["ordered"] else "NO",
        )
    console.print(t)
    best = min(rows, key=lambda r: r["hio_vs_nio"])
    console.print(
        f"best HIO vs NIO: {100 * best['hio_vs_nio']:+.1f} % ({best['sweep']} = {best['x']:,}); "
        "the paper measured -34.1 % (48 applications)"
    )
    for name, said in hio.PAPER.items():
        console.print(f"  the paper, {name}: {said}")
    with atomic_path(out / "results.json") as tmp:
        tmp.write_text(json.dumps(rows, indent=1))
    plot = hio.plot(rows, out)
    pic = hio.service_picture(hio.example(), out)
    console.print(f"results in {out / 'results.json'}; plots {plot.name}, {pic.name}")


def _bench_hio_testbed(
    apps: list[int], seeds: int, out: Path, compute_link: float | None, aggregators: int
) -> None:
    from ..bench import hio_testbed  # the testbed loads when the command runs

    with progress() as prog:
        task = prog.add_task("hio on the testbed", total=None)
        res = hio_testbed.run(
            apps=apps,
            seeds=seeds,
            out=out,
            compute_link=compute_link,
            aggregators=aggregators,
            note=lambda m: prog.update(task, description=m),
        )
    cal = res["calibration"]
    console.print(
        f"calibrated ({res['profile']}, one application alone): disk {cal['disk'] / 1e6:.2f} MB/s, "
        f"{1e3 * cal['per_request']:.1f} ms per request, tail {1e3 * cal['tail']:.0f} ms, "
        f"links {cal['b_inter'] / 1e6:.0f} MB/s, latency {1e3 * cal['gamma']:.1f} ms"
    )
    t = Table(
        title=f"concurrent restarts on the testbed: average execution time ({seeds} arrivals)"
    )
    for c in (
        "apps",
        "NIO",
        "SIO",
        "HIO",
        "realized ÷ simulated",
        "HIO vs NIO",
        "HIO vs SIO (sim.)",
        "HIO ≤ SIO ≤ NIO",
    ):
        t.add_column(c, justify="right")
    for r in res["summary"]:
        t.add_row(
            str(r["apps"]),
            *(
                f"{r[p + '_realized_mean']:.2f} s ({r[p + '_simulated_mean']:.2f})"
                for p in ("nio", "sio", "hio")
            ),
            ", ".join(f"{r[p + '_ratio']:.2f}" for p in ("nio", "sio", "hio")),
            f"{100 * r['hio_vs_nio']:+.1f} %",
            f"{100 * r['hio_vs_sio']:+.1f} % ({100 * r['hio_vs_sio_simulated']:+.1f} %)",
            ("yes (HIO = SIO)" if r["hio_is_sio"] else "yes") if r["ordered"] else "NO",
        )
    console.print(t)
    if any(r["hio_is_sio"] for r in res["summary"]):
        console.print(
            "HIO = SIO: the shuffles are under HIO's threshold and too small for its tuning "
            "to move a request, so it served in SIO's order (the simulator's times are equal)"
        )
    ratios = [row["ratio"] for row in res["rows"]]
    console.print(
        f"realized ÷ simulated over {len(ratios)} runs: {min(ratios):.2f} .. {max(ratios):.2f} "
        "(medians per point in the table; simulated in brackets)"
    )
    with atomic_path(out / "results-testbed.json") as tmp:
        tmp.write_text(json.dumps(res, indent=1))
    from ..bench import hio_testbed as ht

    pic = ht.plot(res, out)
    console.print(f"results in {out / 'results-testbed.json'}; plot {pic.name}")


def bench_restart(
    gib: Annotated[float, typer.Option(min=0.01, help="Checkpoint size (GiB).")] = 1.0,
    tasks: Annotated[int, typer.Option(min=1, help="Tasks restarting.")] = 16,
    halo: Annotated[int, typer.Option(min=0, help="Halo rows on each side of a task.")] = 2000,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per contender (median).")] = 3,
    cold: Annotated[
        bool, typer.Option(help="Drop the page cache before every run (root).")
    ] = False,
    out: Annotated[Path, typer.Option(help="Folder for the checkpoint and results.json.")] = Path(
        "out/bench-restart"
    ),
    layout: Annotated[
        str,
        typer.Option(
            help="blocks: each task a block of rows plus its halo; mesh: each task a METIS "
            "part of a device mesh (one node per row) and its neighbours (scattered rows)."
        ),
    ] = "blocks",
    testbed: Annotated[
        str | None,
        typer.Option(
            help="Run on an emulated cluster of this profile (4 I/O hosts, 4 compute): "
            "remote I/O nodes, h5py reading through a network file system they serve."
        ),
    ] = None,
) -> None:
    """A checkpoint read back into tasks through the I/O workers, beside every task
    opening it with h5py, in one run.

    Example: ``iorch bench restart --gib 0.25 --repeat 2 --layout mesh``
    """
    from ..bench import restart as rbench

    out.mkdir(parents=True, exist_ok=True)
    check_disk(out, int(gib * (1 << 30)) + (64 << 20), "the checkpoint", InputError)
    check_memory(int(3 * gib * (1 << 30)), "the checkpoint read into tasks", InputError)
    with progress() as prog:
        task = prog.add_task("restart", total=None)
        res = rbench.run(
            out,
            gib=gib,
            tasks=tasks,
            halo=halo,
            repeat=repeat,
            cold=cold,
            note=lambda m: prog.update(task, description=m),
            layout=layout,
            testbed=testbed,
        )
    shape = "METIS parts of a mesh" if layout == "mesh" else "blocks"
    where = (
        f"testbed {testbed}: remote I/O hosts, h5py through a network file system; "
        if testbed
        else ""
    )
    t = Table(
        title=f"{res['bytes'] / 2**30:.2f} GiB into {tasks} tasks as {shape} ({where}"
        f"{res['ionodes']} I/O workers, {res['compute']} compute; "
        f"{'cold' if cold else 'warm'} page cache)"
    )
    for c in ("contender", "runs (s)", "median (s)", "GB/s", "h5py ÷ this", "checked bound ÷ this"):
        t.add_column(c, justify="right")
    for name, runs in res["seconds"].items():
        med = res["median"][name]
        t.add_row(
            name,
            " ".join(f"{x:.2f}" for x in runs),
            f"{med:.2f}",
            f"{res['bytes'] / med / 1e9:.2f}",
            f"{res['ratio'][name]:.2f}",
            f"{res['of_checked_bound'][name]:.2f}",
        )
    console.print(t)
    console.print(
        f"checked bound: {rbench.CHECKED!r}, h5py's read plus one CRC-32 pass over every "
        "byte it delivers, the least any read that checks what it delivers costs; "
        "read_stage checks every stripe against the checkpoint's manifest as it is read"
    )
    u = Table(title=f"CPU seconds per run (median; 10 ms ticks), {res['cores']} cores")
    heads = {
        "compute": "compute",
        "io": "I/O",
        "driver": "driver",
        "scheduler": "scheduler",
        "file system": "file system",
    }
    kinds = [r for r in heads if r in next(iter(res["cpu"].values()))]
    for col in ("contender", *(heads[r] for r in kinds), "total", "total ÷ cores (s)"):
        u.add_column(col, justify="right")
    for name, roles in res["cpu"].items():
        total = sum(roles.values())
        u.add_row(
            name,
            *(f"{roles[r]:.3f}" for r in kinds),
            f"{total:.3f}",
            f"{total / res['cores']:.3f}",
        )
    console.print(u)
    console.print(
        f"one memory copy in one process: {res['copy_rate'] / 1e9:.1f} GB/s (the bound of a "
        "read from the page cache)"
    )
    with atomic_path(out / "results.json") as tmp:
        tmp.write_text(json.dumps(res, indent=1))
    console.print(f"results in {out / 'results.json'}")
