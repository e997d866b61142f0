"""The ``iorch`` command line."""

from __future__ import annotations

import json
import math
import signal
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..bench.schedulers import BIDDING, SweepResult, Timing
from ..cost import CostModel, get_cost_model
from ..errors import InputError
from ..files import atomic_path
from ..policies import PolicyError, policies, schedule
from ..storage import backend_names
from ..transfers import TransferSet
from ._common import USER_ERRORS, console, err, fail
from .slurm import (
    ClusterOpt,
    ComputePerNodeOpt,
    IOHostsOpt,
    IONodesOpt,
    LocalDirOpt,
    SharedOpt,
    slurm_app,
    workflow_cluster,
)

#: the --format help: every registered format, entry points of installed packages included
_FORMATS = f"One of: {', '.join(backend_names())}."

app = typer.Typer(
    help="io-orchestrator: schedule and run the output stages of Dask and Parsl workflows.",
    no_args_is_help=True,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks that print ratios measured side by side in one run.")
app.add_typer(bench_app, name="bench")
workload_app = typer.Typer(help="Generate TransferSets to try the schedulers on.")
app.add_typer(workload_app, name="workload")
run_app = typer.Typer(help="Run a ready workflow (embedded cluster, or across a Slurm job).")
app.add_typer(run_app, name="run")
app.add_typer(slurm_app, name="slurm")


def _cost(spec: str | None) -> CostModel:
    """A preset name, or a path to a JSON file written by ``CostModel.to_json``."""
    if spec is not None and spec.endswith(".json"):
        return CostModel.from_json(Path(spec).read_text())
    return get_cost_model(spec)


def _load(path: Path) -> TransferSet:
    if path.suffix == ".npz":
        return TransferSet.load_npz(path)
    return TransferSet.from_csv(path)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )


def _options(items: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings as policy options: ints, floats, true/false, else text."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise PolicyError(f"--option must look like KEY=VALUE, got {item!r}")
        value: object = text
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    pass
        out[key.strip()] = value
    return out


@app.command("policies")
def policies_cmd() -> None:
    """List the scheduling policies with their origin and options.

    Example: ``iorch policies``
    """
    t = Table(title="policies")
    for col in ("name", "kind", "what it does", "origin", "options"):
        t.add_column(col, overflow="fold")
    for p in policies().values():
        t.add_row(p.name, p.kind, p.summary, p.origin, "; ".join(p.parameters.values()) or "-")
    console.print(t)


@app.command("schedule")
def schedule_cmd(
    transfers: Annotated[Path, typer.Option(help="CSV (client,ionode,nbytes) or .npz file.")],
    policy: Annotated[str, typer.Option(help="Policy name (see `iorch policies`).")] = "ms-ecf",
    cost: Annotated[
        str | None, typer.Option(help="Cost preset (cluster2004, modern, ...) or a .json file.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of randomised policies.")] = 0,
    block_size: Annotated[
        int | None, typer.Option(help="Piece size in bytes for block-splitting policies.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the plan as CSV here.")] = None,
    gantt: Annotated[Path | None, typer.Option(help="Draw a Gantt chart PNG here.")] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(help="Policy option KEY=VALUE, repeatable (e.g. min_piece=1048576)."),
    ] = None,
) -> None:
    """Schedule a TransferSet with one policy; print makespan, lower bound and ratio.

    Example: ``iorch schedule --transfers t.csv --policy split-opt --option min_piece=1048576``
    """
    try:
        ts = _load(transfers)
        opts: dict[str, object] = {} if block_size is None else {"block_size": block_size}
        opts |= _options(option or [])
        plan = schedule(ts, policy, cost=_cost(cost), seed=seed, **opts)
        plan.validate()
        # both outputs or neither: each is written aside and renamed at the end
        with ExitStack() as outputs:
            if out is not None:
                plan.to_csv(outputs.enter_context(atomic_path(out)))
            if gantt is not None:
                from ..plots import close
                from ..plots import gantt as draw

                close(draw(plan, path=outputs.enter_context(atomic_path(gantt))))
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    t = Table(title=f"{plan.policy} on {transfers.name} ({plan.cost.name} cost model)")
    t.add_column("metric")
    t.add_column("value", justify="right")
    s = plan.summary()
    for key in ("transfers", "units", "makespan", "lower_bound", "ratio", "rounds", "messages",
                "scheduling_seconds", "throughput"):  # fmt: skip
        v = s[key]
        t.add_row(key, f"{v:.6g}" if isinstance(v, float) else str(v))
    console.print(t)
    if out is not None:
        console.print(f"plan written to {out}")
    if gantt is not None:
        console.print(f"Gantt chart written to {gantt}")


@workload_app.command("bidding")
def workload_bidding(
    out: Annotated[Path, typer.Option(help="Output .csv or .npz.")],
    ionodes: Annotated[int, typer.Option(help="Number of I/O nodes.")] = 32,
    busy: Annotated[float, typer.Option(help="Ratio of busy I/O nodes (RB).")] = 0.1,
    large: Annotated[float, typer.Option(help="Ratio of large transfers (RL).")] = 0.1,
    clients: Annotated[int, typer.Option(help="Number of clients.")] = 256,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """The bidding paper's workload (busy I/O nodes, 32 MiB / 128 KiB transfers).

    Example: ``iorch workload bidding --out t.csv --ionodes 32 --busy 0.3 --large 0.1``
    """
    from ..workload import bidding_workload

    try:
        ts = bidding_workload(ionodes, busy, large, n_clients=clients, seed=seed)
        ts.save_npz(out) if out.suffix == ".npz" else ts.to_csv(out)
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    console.print(f"{ts!r} written to {out}")


def _fmt_ratio(x: float) -> str:
    return f"{x:.3f}"


@bench_app.command("schedulers")
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
    from ..bench import schedulers as bench
    from ..plots import close, sweep_plot

    try:
        cm = _cost(cost)
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    n_seeds = seeds if seeds is not None else (1 if quick else 3)
    out.mkdir(parents=True, exist_ok=True)
    names = bench.default_names()
    sweep_list = bench.paper_sweeps(quick)
    console.print(
        f"[bold]bench schedulers[/]: cost model {cm.name}, {n_seeds} seed(s) per point, "
        f"{len(names)} policies; throughput = bytes / (scheduling + makespan), in MB/s"
    )
    rows = []
    with _progress() as prog:
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
        with _progress() as prog:
            task = prog.add_task("kernel timings", total=len(names))
            tm, sizes = bench.kernel_timings(
                names, cm, n_large, budget, advance=partial(prog.advance, task)
            )
        _print_timings(tm, sizes, budget)


@bench_app.command("optimal")
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
    from ..bench import optimal as optbench

    try:
        cm = _cost(cost)
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    limit = exact_limit if exact_limit is not None else (2.0 if quick else 10.0)
    fams = optbench.families(quick, seeds)
    console.print(
        f"[bold]bench optimal[/]: cost model {cm.name}, {len(fams)} families, "
        f"CP-SAT limit {limit:g} s; ratios are makespan ÷ lower bound (mean / worst)"
    )
    results = []
    with _progress() as prog:
        for fam in fams:
            total = len(fam.makers) * len(optbench.POLICIES)
            task = prog.add_task(f"family {fam.name}", total=total)
            results.append(optbench.run_family(fam, cm, limit, advance=partial(prog.advance, task)))
    summary = optbench.summarize(results)
    t = Table(title=f"bench optimal ({cm.name} cost model)", title_justify="left")
    for col in ("family", "policy", "sets", "÷ LB mean", "÷ LB worst", "÷ exact", "pieces",
                "messages", "sched s"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("family", "policy") else "right")
    last = None
    for r in summary:
        if last is not None and r["family"] != last:
            t.add_section()
        last = r["family"]
        ex = r["ratio_exact_mean"]
        t.add_row(
            r["family"], r["policy"], str(r["instances"]), f"{r['ratio_mean']:.4f}",
            f"{r['ratio_max']:.4f}", "-" if ex is None else f"{ex:.4f}", f"{r['pieces']:.0f}",
            f"{r['messages']:.0f}", f"{r['scheduling_seconds']:.4f}",
        )  # fmt: skip
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
    for col in ("policy", "medium units", "kernel s", "oracle s", "oracle÷kernel", "large units",
                "kernel s"):  # fmt: skip
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


@app.command("write-bench")
def write_bench_cmd(
    size: Annotated[
        str, typer.Option(help="Bytes to write per policy, e.g. 256MiB, 2GiB.")
    ] = "1GiB",
    clients: Annotated[int, typer.Option(min=1, help="Clients (contributing tasks).")] = 16,
    ionodes: Annotated[int, typer.Option(min=1, help="I/O workers of the embedded cluster.")] = 4,
    format: Annotated[str, typer.Option(help=_FORMATS)] = "hdf5",
    policy: Annotated[
        str, typer.Option(help="A policy name, a comma list, or 'all'.")
    ] = "ms-ecf,ecf,hdf,hash-ios",
    stripe: Annotated[str, typer.Option(help="Stripe (and Zarr shard) size.")] = "8MiB",
    strategy: Annotated[str, typer.Option(help="contiguous, list or two-phase.")] = "contiguous",
    repeat: Annotated[int, typer.Option(min=1, help="Rounds; the median is reported.")] = 3,
    anchors: Annotated[
        bool, typer.Option(help="Also time h5py, dask.array.to_zarr and ADIOS2 (same bytes).")
    ] = True,
    window: Annotated[
        str | None, typer.Option(help="Bytes an I/O worker may hold at once (default 128MiB).")
    ] = None,
    memory: Annotated[
        str, typer.Option(help="Memory limit of each compute worker (holds the contributions).")
    ] = "auto",
    out: Annotated[Path, typer.Option(help="Directory on the disk to measure.")] = Path(
        "out/write-bench"
    ),
    gantt: Annotated[
        Path | None, typer.Option(help="Draw planned vs realized Gantt charts into this folder.")
    ] = None,
) -> None:
    """Dispatch policies for real beside what a user would do instead, in one run.

    Rows: the raw sequential write (buffered and O_DIRECT), h5py from one
    process, dask.array.to_zarr on the cluster's workers, ADIOS2 BP5 (if
    installed), the cluster's worker-to-worker copy of the same bytes without
    writing (the bound of any dispatch between processes), each policy, and
    the first policy with every byte sent to the I/O workers — all fsync'd,
    median of ``--repeat`` rounds. Writes ``results.json`` and ``results.csv`` to ``--out``.

    Example: ``iorch write-bench --size 1GiB --clients 16 --ionodes 4 --format zarr``
    """
    import csv
    import json

    from ..bench.write import ionode_peak_rss, parse_size, run
    from ..cluster import local_cluster
    from ..engine import DEFAULT_WINDOW

    try:
        nbytes, stripe_bytes = parse_size(size), parse_size(stripe)
        win = parse_size(window) if window else None
        names = sorted(policies()) if policy == "all" else [p.strip() for p in policy.split(",")]
        for n in names:
            if n not in policies():
                raise PolicyError(f"unknown policy {n!r}; choose one of {sorted(policies())}")
        out.mkdir(parents=True, exist_ok=True)
        mem = memory if memory == "auto" else parse_size(memory)
        with local_cluster(n_ionodes=ionodes, n_compute=2, compute_memory=mem) as cl, \
                _progress() as prog:  # fmt: skip
            n_jobs = len(names) + 1 + (4 if anchors else 0)
            task = prog.add_task("write-bench", total=n_jobs * repeat)
            if gantt is not None:
                gantt.mkdir(parents=True, exist_ok=True)
            rows = run(cl, out, nbytes, clients, format, names, stripe_bytes, strategy,
                       advance=lambda msg: prog.update(task, advance=1, description=msg),
                       gantt_dir=gantt, repeat=repeat, anchors=anchors,
                       window=win)  # fmt: skip
            rss = ionode_peak_rss(cl)
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    win_bytes = win or DEFAULT_WINDOW
    raw = next(r for r in rows if r.name == "raw sequential write")
    h5 = next((r for r in rows if r.name.startswith("h5py")), None)
    records = [r.as_dict(raw, h5) for r in rows]
    (out / "results.json").write_text(json.dumps(
        {"size": nbytes, "clients": clients, "ionodes": ionodes, "format": format,
         "strategy": strategy, "stripe_bytes": stripe_bytes, "repeat": repeat,
         "window": win_bytes, "ionode_peak_rss": rss, "rows": records}, indent=2))  # fmt: skip
    with open(out / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[k for k in records[0] if k != "all_seconds"],
                           extrasaction="ignore")  # fmt: skip
        w.writeheader()
        w.writerows(records)
    # the settings go on their own unwrapped line: a table title wraps at the table's width
    console.print(
        f"write-bench: {nbytes / 2**20:,.0f} MiB, {clients} clients, {ionodes} I/O workers, "
        f"{format}, {strategy} stripes of {stripe_bytes / 2**20:g} MiB; median of {repeat}",
        soft_wrap=True,
    )
    t = Table()
    for col in ("row", "units", "s", "best s", "MB/s", "÷ raw", "÷ h5py", "best ÷ raw",
                "best ÷ h5py", "planned s", "realized s", "realized ÷ planned"):  # fmt: skip
        t.add_column(col, justify="right")
    for r, rec in zip(rows, records, strict=True):
        planned = rec["planned_makespan"] == rec["planned_makespan"]
        t.add_row(
            r.name if r.kind == "policy" else f"[dim]{r.name}[/dim]",
            str(r.units) if r.units else "",
            f"{r.median:.2f}",
            f"{r.best:.2f}",
            f"{r.throughput / 1e6:,.0f}",
            f"{rec['ratio_raw']:.2f}",
            f"{rec['ratio_h5py']:.2f}" if h5 else "",
            f"{rec['best_ratio_raw']:.2f}",
            f"{rec['best_ratio_h5py']:.2f}" if h5 else "",
            f"{rec['planned_makespan']:.3f}" if planned else "",
            f"{rec['realized_makespan']:.3f}" if planned else "",
            f"{rec['realized_over_planned']:.2f}" if planned else "",
        )
    console.print(t)
    console.print(
        "s: median seconds (best s: the fastest round; ratios are throughput ÷ the anchor's), "
        "everything included (policies: plan, dispatch, checksums while "
        "writing, fsync, commit; anchors: open, write, close, fsync). Planned makespan uses a "
        "cost model measured in this run (two calibration stages of equal loads, in large and "
        "in small pieces, give each I/O node's rate and what a unit costs beyond its bytes); "
        "realized is first write to last fsync. Bounds: what moving the bytes between "
        "processes costs, and what the device does with the stage's pieces when the "
        "workers write them with no plan. "
        f"Saved {out / 'results.json'}."
    )
    held = max((r.peak_held for r in rows), default=0)
    console.print(
        f"I/O workers' peak RSS {', '.join(f'{x / 2**20:,.0f}' for x in rss)} MiB (whole "
        f"run, anchors included); window {win_bytes / 2**20:,.0f} MiB, most batch bytes held "
        f"{held / 2**20:,.1f} MiB.",
        soft_wrap=True,
    )


@run_app.command("bips3d")
def run_bips3d(
    mesh: Annotated[
        Path | None,
        typer.Option(help="METIS .graph (partitions beside it are used) or a meshio file."),
    ] = None,
    nodes: Annotated[
        int | None, typer.Option(min=8, help="Generate a device mesh of this many nodes instead.")
    ] = None,
    parts: Annotated[int, typer.Option(min=1, max=1024, help="Partitions (clients).")] = 8,
    halo: Annotated[int, typer.Option(min=1, help="Replica depth in graph hops.")] = 1,
    load: Annotated[int, typer.Option(min=1, help="Values per node.")] = 100,
    assign: Annotated[
        str,
        typer.Option(help="Replica assignment: all, or a comma list of metis,random,first,idg."),
    ] = "all",
    policy: Annotated[str, typer.Option(help="Transfer scheduling policy.")] = "ms-ecf",
    strategy: Annotated[
        str, typer.Option(help="auto (the paper's Fig. 7 rule), list, two-phase or sequential.")
    ] = "auto",
    format: Annotated[str, typer.Option(help=_FORMATS)] = "hdf5",
    ionodes: IONodesOpt = None,
    stripe: Annotated[str, typer.Option(help="Stripe size of the I/O nodes' layout.")] = "1MiB",
    repeat: Annotated[int, typer.Option(min=1, help="Runs per method (median is shown).")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of METIS, generated meshes and 'random'.")] = 0,
    out: Annotated[Path, typer.Option(help="Output folder (dumps, plots, results.json).")] = Path(
        "out/bips3d"
    ),
    cluster: ClusterOpt = "auto",
    io_nodes: IOHostsOpt = "1",
    shared_nodes: SharedOpt = None,
    compute_per_node: ComputePerNodeOpt = 1,
    local_directory: LocalDirOpt = None,
) -> None:
    """The BIPS3D-like mesh dump: every assignment method written, verified and compared.

    Without --mesh or --nodes it uses the real BIPS3D mesh when this machine
    has it (``$IORCH_BIPS3D_MESH`` or ``../shared/data/bips3d-mesh2``) and a
    generated mesh of the same size otherwise. Inside a Slurm job it runs
    across the job's nodes (see ``iorch slurm script``).

    Example: ``iorch run bips3d --mesh mesh.graph --parts 8 --load 100 --format zarr``
    """
    from ..measure import calibrated_cost, parse_size, raw_write_bandwidth
    from ..replicas import METHODS
    from ..workflows import bips3d

    try:
        methods = list(METHODS) if assign == "all" else [m.strip() for m in assign.split(",")]
        for m in methods:
            if m not in METHODS:
                raise InputError(f"--assign: unknown method {m!r}; choose from {list(METHODS)}")
        if strategy not in bips3d.STRATEGIES:
            raise InputError(f"--strategy: {strategy!r} is not one of {list(bips3d.STRATEGIES)}")
        if policy not in policies():
            raise PolicyError(f"--policy: unknown policy {policy!r}; see `iorch policies`")
        stripe_bytes = parse_size(stripe)
        if mesh is None and nodes is None:
            mesh = bips3d.default_mesh()
            if mesh is None:
                err.print("the real BIPS3D mesh is not on this machine: generating 32,888 nodes")
                nodes = 32_888
        out.mkdir(parents=True, exist_ok=True)
        with _progress() as prog:
            task = prog.add_task("reading and partitioning the mesh", total=None)
            case = bips3d.load_case(mesh, nodes, parts=parts, halo=halo, seed=seed)
            prog.update(task, description="starting the cluster")
            nbytes = case.n_nodes * load * 8
            raw = raw_write_bandwidth(out, max(nbytes, 8 << 20))
            with workflow_cluster(cluster, ionodes, io_nodes, shared_nodes, compute_per_node,
                                  local_directory) as cl:  # fmt: skip
                n_io = cl.n_ionodes
                # planning and the auto rule see this machine's link and disk, measured
                cost = calibrated_cost(cl, raw, max(nbytes, 32 << 20), directory=out,
                                       fmt=format, stripe_bytes=stripe_bytes)  # fmt: skip
                net = cost.network_bandwidth * n_io
                total = repeat * (1 if strategy == "sequential" else len(methods))
                prog.update(task, description="dumping", total=total)
                results = bips3d.run_methods(
                    case, cl, out, methods, load=load, repeat=repeat, policy=policy,
                    strategy=strategy, format=format, stripe_bytes=stripe_bytes, cost=cost,
                    seed=seed, advance=lambda msg: prog.update(task, advance=1,
                                                              description=f"dumped {msg}"),
                )  # fmt: skip
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    _report_bips3d(case, results, raw, net, load, policy, format, n_io, stripe_bytes, out)


def _report_bips3d(
    case: object, results: list, raw: float, net: float, load: int, policy: str, fmt: str,
    ionodes: int, stripe_bytes: int, out: Path,
) -> None:  # fmt: skip
    from ..plots import close, interval_map, realized_gantt
    from ..workflows.bips3d import MeshCase

    assert isinstance(case, MeshCase)
    mb = case.n_nodes * load * 8 / 1e6
    console.print(
        f"BIPS3D mesh dump: {case.name}, {case.n_nodes:,} nodes, "
        f"{case.indices.size // 2:,} edges, {case.n_parts} partitions, halo {case.halo} "
        f"({100 * case.replicas.replicated_fraction:.1f} % shared); load {load} -> {mb:,.1f} MB; "
        f"{policy}, {fmt}, {ionodes} I/O workers, stripes of {stripe_bytes / 2**20:g} MiB; "
        f"raw sequential write {raw / 1e6:,.0f} MB/s, calibration stage {net / 1e6:,.0f} MB/s "
        "(all I/O workers)",
        soft_wrap=True,
    )
    t = Table()
    for col in ("assignment", "strategy", "intervals/writer", "avg length", "load balance",
                "pieces", "planned÷LB", "planned s", "write s", "realized÷planned", "MB/s",
                "÷ raw disk", "stage s"):  # fmt: skip
        t.add_column(col, justify="right")
    rows = []
    for r in results:
        s = r.stats
        t.add_row(r.method, r.strategy, f"{s.intervals_per_writer:,.1f}",
                  f"{s.mean_interval_length:,.1f}", f"{s.load_balance:.3f}", f"{r.pieces:,}",
                  f"{r.planned_ratio:.3f}", f"{r.planned_makespan:.3f}", f"{r.write_seconds:.3f}",
                  f"{r.write_seconds / r.planned_makespan:.2f}",
                  f"{r.write_throughput / 1e6:,.0f}", f"{r.write_throughput / raw:.2f}",
                  f"{r.stage_seconds:.3f}")  # fmt: skip
        rows.append({"method": r.method, "strategy": r.strategy, **s.as_dict(),
                     "pieces": r.pieces, "planned_ratio": r.planned_ratio,
                     "planned_makespan": r.planned_makespan,
                     "realized_over_planned": r.write_seconds / r.planned_makespan,
                     "write_seconds": r.write_seconds, "stage_seconds": r.stage_seconds,
                     "write_throughput": r.write_throughput, "raw_bandwidth": raw,
                     "path": str(r.path)})  # fmt: skip
    console.print(t)
    console.print(
        "every dump was verified row by row after its commit. write s: realized makespan, first "
        "write to last fsync (median run); planned s: the plan's makespan under the cost model "
        "measured at start; MB/s and ÷ raw disk from write s; stage s: plan, dispatch, "
        "checksums while writing and commit; planned ÷ LB: the plan's makespan over the lower "
        "bound."
    )
    with atomic_path(out / "results.json") as tmp:
        tmp.write_text(json.dumps(rows, indent=2))
    writers = {r.method: r.writer for r in results if r.strategy != "sequential"}
    if writers:
        title = f"{case.name}: writer of each node, {case.n_parts} partitions"
        close(interval_map(writers, case.n_parts, path=out / "interval-map.png", title=title))
    for r in results:
        tr = r.result.trace
        close(realized_gantt(r.result.plan, tr.unit, tr.ionode, tr.start, tr.end,
                             path=out / f"gantt-{r.method}.png"))  # fmt: skip
    console.print(f"plots and results.json in {out}/")


@bench_app.command("idg")
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
    from ..workflows.bips3d import default_mesh
    from ..workflows.idgbench import kernel_timing, table4

    real = mesh if mesh is not None else default_mesh()
    gen, parts = ((1, 2), (8, 64)) if quick else ((1, 2, 3, 4), (8, 16, 32, 64))
    if kernel_nodes is None:
        kernel_nodes = 1_000_000 if quick else 10_000_000
    try:
        with _progress() as prog:
            n_real = 3 if real is not None else 0
            task = prog.add_task("Table 4", total=n_real + len(gen) * len(parts))
            step = partial(prog.update, task, advance=1)
            rows = table4(real, generated=gen, parts=parts, seed=seed,
                          advance=lambda m: step(description=m))  # fmt: skip
            timing = None
            if kernel_nodes:
                prog.update(task, description=f"kernel timing on {kernel_nodes:,} nodes")
                timing = kernel_timing(kernel_nodes, seed=seed)
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    if real is None:
        err.print("the real BIPS3D mesh is not on this machine: generated meshes only")
    t = Table(
        title="IDG paper, Table 4: intervals per partition / average interval length (nodes); "
        "ours beside the paper's",
        title_justify="left",
    )
    for col in ("mesh", "nodes", "K", "shared h1 / h2", "METIS", "paper METIS", "IDG halo 1",
                "IDG halo 2", "paper IDG"):  # fmt: skip
        t.add_column(col, justify="right")

    def pair(x: tuple[float, ...] | None, i: int = 0) -> str:
        return "-" if x is None else f"{x[i]:,.1f} / {x[i + 1]:,.1f}"

    for r in rows:
        t.add_row(r.mesh, f"{r.nodes:,}", str(r.parts),
                  " / ".join(f"{100 * r.shared[h]:.1f} %" for h in sorted(r.shared)),
                  pair(r.metis), pair(r.paper), pair(r.idg.get(1)), pair(r.idg.get(2)),
                  pair(r.paper, 2))  # fmt: skip
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
        tmp.write_text(json.dumps({
            "rows": [{**r.__dict__, "idg": {str(h): v for h, v in r.idg.items()},
                      "shared": {str(h): v for h, v in r.shared.items()}} for r in rows],
            "kernel": None if timing is None else {**timing.__dict__,
                                                   "total_seconds": timing.total_seconds},
        }, indent=2))  # fmt: skip


@bench_app.command("stage")
def bench_stage(
    sizes: Annotated[
        str, typer.Option(help="Comma list of checkpoint sizes.")
    ] = "256MiB,1GiB,2GiB",
    tasks: Annotated[str, typer.Option(help="Comma list of task counts.")] = "16,64",
    formats: Annotated[str, typer.Option(help="Comma list: hdf5, zarr.")] = "hdf5,zarr",
    quick: Annotated[bool, typer.Option(help="256 MiB, 16 tasks, both formats.")] = False,
    policy: Annotated[str, typer.Option(help="Policy of the orchestrated stage.")] = "ecf",
    ionodes: Annotated[int, typer.Option(min=1, help="I/O workers.")] = 4,
    repeat: Annotated[int, typer.Option(min=1, help="Runs of each way; medians shown.")] = 3,
    out: Annotated[Path, typer.Option(help="Directory on the disk to measure.")] = Path(
        "out/bench-stage"
    ),
) -> None:
    """A checkpoint written by plain h5py/zarr tasks under a lock vs. through the decorator.

    Example: ``iorch bench stage --quick``
    """
    from ..cluster import local_cluster
    from ..measure import parse_size

    try:
        if quick:
            sizes, tasks = "256MiB", "16"
        size_list = [parse_size(x) for x in sizes.split(",")]
        task_list = [int(x) for x in tasks.split(",")]
        fmt_list = [x.strip() for x in formats.split(",")]
        for f in fmt_list:
            if f not in ("hdf5", "zarr"):
                raise InputError(f"--formats: {f!r} is not hdf5 or zarr")
        if policy not in policies():
            raise PolicyError(f"--policy: unknown policy {policy!r}; see `iorch policies`")
        from ..bench.stage import run as run_bench

        total = len(size_list) * len(task_list) * len(fmt_list)
        with local_cluster(n_ionodes=ionodes, n_compute=2, memory_limit="6GiB") as cl, \
                _progress() as prog:  # fmt: skip
            task = prog.add_task("bench stage", total=total)
            step = partial(prog.update, task, advance=1)
            rows = run_bench(cl, out, size_list, task_list, fmt_list, policy=policy,
                             advance=lambda m: step(description=m), repeat=repeat)  # fmt: skip
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    console.print(
        f"bench stage: {ionodes} I/O workers, 2 compute workers, policy {policy}; baseline = "
        "each task writes its block into the shared target under a lock (h5py / zarr)",
        soft_wrap=True,
    )
    t = Table()
    for col in ("format", "size", "tasks", "baseline s", "+ fsync s", "orchestrated s",
                "orchestrated MB/s", "baseline ÷ orch.", "baseline+fsync ÷ orch."):  # fmt: skip
        t.add_column(col, justify="right")
    for r in rows:
        mbs = r.nbytes / r.orchestrated_seconds / 1e6
        t.add_row(r.format, f"{r.nbytes / 2**20:,.0f} MiB", str(r.tasks),
                  f"{r.baseline_seconds:.2f}", f"{r.baseline_fsync_seconds:.2f}",
                  f"{r.orchestrated_seconds:.2f}", f"{mbs:,.0f}", f"{r.speedup:.2f}",
                  f"{r.durable_speedup:.2f}")  # fmt: skip
    console.print(t)
    console.print(
        f"median of {repeat} runs each, after an untimed full-size warm-up; times from "
        "submitting the tasks to the last result (orchestrated: committed, with checksums "
        "computed while writing); both outputs spot-checked"
    )


@app.command("verify")
def verify_cmd(
    path: Annotated[Path, typer.Argument(help="A checkpoint written by io-orchestrator.")],
) -> None:
    """Recompute every stripe checksum against the manifest; exit 1 on any mismatch.

    Example: ``iorch verify out/ckpt.h5``
    """
    from ..stage import verify

    try:
        bad = verify(path)
    except USER_ERRORS as e:
        raise fail(str(e)) from None
    if bad:
        for line in bad:
            err.print(f"[bold red]mismatch:[/] {line}")
        raise typer.Exit(code=1)
    console.print(f"{path}: every stripe matches its manifest checksum")


@app.command("cost")
def cost_cmd(
    preset: Annotated[str, typer.Argument(help="Preset name.")] = "cluster2004",
) -> None:
    """Print a cost-model preset as JSON (edit it and pass the file with --cost).

    Example: ``iorch cost modern > modern.json``
    """
    try:
        console.print_json(json.dumps(get_cost_model(preset).to_dict()))
    except USER_ERRORS as e:
        raise fail(str(e)) from None


def _terminate(signum: int, frame: object) -> None:
    # scancel and batch systems stop jobs with SIGTERM: unwind like Ctrl-C, so
    # a stage being written removes its temporary output instead of leaving it;
    # a second SIGTERM (scancel twice, then the time limit) must not cut that short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main() -> None:
    """Entry point of the ``iorch`` console script (``iorch --help`` lists the commands)."""
    signal.signal(signal.SIGTERM, _terminate)
    from ..kernels import refresh_cache  # here, once, before any worker loads a kernel

    refresh_cache()
    app()


if __name__ == "__main__":
    main()
