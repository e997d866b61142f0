"""``iorch run bips3d`` and ``iorch verify``: the main job, and checking what it wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import defaults
from ..errors import InputError
from ..files import atomic_path
from ..plots import close, interval_map, realized_gantt
from ..policies import PolicyError, policies
from ..replicas import METHODS
from ._common import (
    FORMATS,
    console,
    err,
    progress,
)
from .slurm import (
    ClusterOpt,
    ComputePerNodeOpt,
    IOHostsOpt,
    IONodesOpt,
    LocalDirOpt,
    SharedOpt,
)


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
    policy: Annotated[str, typer.Option(help="Transfer scheduling policy.")] = defaults.POLICY,
    strategy: Annotated[
        str, typer.Option(help="auto (the paper's Fig. 7 rule), list, two-phase or sequential.")
    ] = "auto",
    format: Annotated[str, typer.Option(help=FORMATS)] = defaults.FORMAT,
    ionodes: IONodesOpt = None,
    stripe: Annotated[str, typer.Option(help="Stripe size of the I/O nodes' layout.")] = "1MiB",
    repeat: Annotated[int, typer.Option(min=1, help="Runs per method (median is shown).")] = 3,
    seed: Annotated[
        int,
        typer.Option(min=0, max=2**31 - 1, help="Seed of METIS, generated meshes and 'random'."),
    ] = 0,
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
    # engine.measure loads distributed: when the command runs, not at iorch --help
    from ..engine.measure import calibrated_cost, parse_size, raw_write_bandwidth
    from ..plugins.slurm import workflow_cluster  # Slurm only where a workflow runs
    from ..workflows import bips3d  # the workflow too

    methods = list(METHODS) if assign == "all" else [m.strip() for m in assign.split(",")]
    for m in methods:
        if m not in METHODS:
            raise InputError(f"--assign: unknown method {m!r}; choose from {list(METHODS)}")
    if strategy not in bips3d.STRATEGIES:
        raise InputError(f"--strategy: {strategy!r} is not one of {list(bips3d.STRATEGIES)}")
    if policy not in policies():
        raise PolicyError(f"--policy: unknown policy {policy!r}; see `iorch policies`")
    stripe_bytes = parse_size(stripe, "--stripe")
    if mesh is None and nodes is None:
        mesh = bips3d.default_mesh()
        if mesh is None:
            err.print("the real BIPS3D mesh is not on this machine: generating 32,888 nodes")
            nodes = 32_888
    out.mkdir(parents=True, exist_ok=True)
    with progress() as prog:
        task = prog.add_task("reading and partitioning the mesh", total=None)
        case = bips3d.load_case(mesh, nodes, parts=parts, halo=halo, seed=seed)
        prog.update(task, description="starting the cluster")
        nbytes = case.n_nodes * load * 8
        raw = raw_write_bandwidth(out, max(nbytes, 8 << 20), repeat=5)
        with workflow_cluster(
            cluster,
            ionodes,
            io_nodes,
            shared_nodes,
            compute_per_node,
            local_directory,
            announce=err.print,
        ) as cl:
            n_io = cl.n_ionodes
            # planning and the auto rule see this machine's link and disk, measured
            cost = calibrated_cost(
                cl,
                raw,
                max(nbytes, 32 << 20),
                directory=out,
                fmt=format,
                stripe_bytes=stripe_bytes,
            )
            net = cost.network_bandwidth * n_io
            total = repeat * (1 if strategy == "sequential" else len(methods))
            prog.update(task, description="dumping", total=total)
            results = bips3d.run_methods(
                case,
                cl,
                out,
                methods,
                load=load,
                repeat=repeat,
                policy=policy,
                strategy=strategy,
                format=format,
                stripe_bytes=stripe_bytes,
                cost=cost,
                seed=seed,
                advance=lambda msg: prog.update(task, advance=1, description=f"dumped {msg}"),
            )
    _report_bips3d(case, results, raw, net, load, policy, format, n_io, stripe_bytes, out)


def _report_bips3d(
    case: object,
    results: list,
    raw: float,
    net: float,
    load: int,
    policy: str,
    fmt: str,
    ionodes: int,
    stripe_bytes: int,
    out: Path,
) -> None:
    # the workflow loads when the command runs, not at iorch --help
    from ..workflows.bips3d import MeshCase

    assert isinstance(case, MeshCase)
    mb = case.n_nodes * load * 8 / 1e6
    console.print(
        f"BIPS3D mesh dump: {case.name}, {case.n_nodes:,} nodes, "
        f"{case.indices.size // 2:,} edges, {case.n_parts} partitions, halo {case.halo} "
        f"({100 * case.replicas.replicated_fraction:.1f} % shared); load {load} -> {mb:,.1f} MB; "
        f"{policy}, {fmt}, {ionodes} I/O workers, stripes of {stripe_bytes / 2**20:g} MiB; "
        f"raw sequential write {raw / 1e6:,.0f} MB/s (median of 5), "
        f"calibration stage {net / 1e6:,.0f} MB/s (all I/O workers)",
        soft_wrap=True,
    )
    t = Table()
    for col in (
        "assignment",
        "strategy",
        "intervals/writer",
        "avg length",
        "load balance",
        "pieces",
        "planned÷LB",
        "planned s",
        "write s",
        "realized÷planned",
        "MB/s",
        "÷ raw disk",
        "stage s",
    ):
        t.add_column(col, justify="right")
    rows = []
    for r in results:
        s = r.stats
        t.add_row(
            r.method,
            r.strategy,
            f"{s.intervals_per_writer:,.1f}",
            f"{s.mean_interval_length:,.1f}",
            f"{s.load_balance:.3f}",
            f"{r.pieces:,}",
            f"{r.planned_ratio:.3f}",
            f"{r.planned_makespan:.3f}",
            f"{r.write_seconds:.3f}",
            f"{r.write_seconds / r.planned_makespan:.2f}",
            f"{r.write_throughput / 1e6:,.0f}",
            f"{r.write_throughput / raw:.2f}",
            f"{r.stage_seconds:.3f}",
        )
        rows.append(
            {
                "method": r.method,
                "strategy": r.strategy,
                **s.as_dict(),
                "pieces": r.pieces,
                "planned_ratio": r.planned_ratio,
                "planned_makespan": r.planned_makespan,
                "realized_over_planned": r.write_seconds / r.planned_makespan,
                "write_seconds": r.write_seconds,
                "stage_seconds": r.stage_seconds,
                "write_throughput": r.write_throughput,
                "raw_bandwidth": raw,
                "path": str(r.path),
            }
        )
    console.print(t)
    console.print(
        "every dump was verified row by row after its commit. write s: realized makespan, "
        "the first I/O node's start (its first fetch) to the last fsync (median run); "
        "planned s: the plan's makespan under the cost model measured at start; "
        "MB/s and ÷ raw disk from write s; stage s: plan, dispatch, "
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
        # each write where it happened (a unit's row would span the idle time between the
        # batches holding its bytes), over each node's fetches and waits and its fsync: the
        # chart's realized makespan is the table's write s
        tr = r.result.trace
        unit, ionode, start, end = tr.writes()
        close(
            realized_gantt(
                r.result.plan,
                unit,
                ionode,
                start,
                end,
                path=out / f"gantt-{r.method}.png",
                began=tr.began,
                flush_start=tr.flush_start,
                flush_end=tr.flush_end,
            )
        )
    console.print(f"plots and results.json in {out}/")


def verify_cmd(
    target: Annotated[
        str, typer.Argument(metavar="PATH", help="A checkpoint written by io-orchestrator.")
    ],
) -> None:
    """Recompute every stripe checksum against the manifest; exit 1 on any mismatch.

    Example: ``iorch verify out/ckpt.h5``
    """
    if not target.strip():  # a Path would read "" as ".", the current folder
        raise InputError(f"PATH {target!r} is empty; give a checkpoint")
    path = Path(target)
    # engine.stage loads distributed: when the command runs, not at iorch --help
    from ..engine.verify import verify

    bad = verify(path)
    if bad:
        for line in bad:
            err.print(f"[bold red]mismatch:[/] {line}")
        raise typer.Exit(code=1)
    console.print(f"{path}: every stripe matches its manifest checksum")
