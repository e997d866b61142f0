"""``iorch policies``, ``schedule``, ``workload``, ``cost``: the schedulers on TransferSets."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import defaults
from ..cost import get_cost_model
from ..files import atomic_path
from ..plots import check_figure_path, close
from ..plots import gantt as draw
from ..policies import policies, schedule
from ..workload import bidding_workload
from ._common import (
    console,
    cost_model,
    load_transfers,
    options,
)


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


def schedule_cmd(
    transfers: Annotated[Path, typer.Option(help="CSV (client,ionode,nbytes) or .npz file.")],
    policy: Annotated[
        str, typer.Option(help="Policy name (see `iorch policies`).")
    ] = defaults.POLICY,
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
    if gantt is not None:  # before the plan: a suffix Matplotlib cannot write failed after it
        check_figure_path(gantt, "--gantt")
    ts = load_transfers(transfers)
    opts: dict[str, object] = {} if block_size is None else {"block_size": block_size}
    opts |= options(option or [], policy)
    plan = schedule(ts, policy, cost=cost_model(cost), seed=seed, **opts)
    plan.validate()
    # both outputs or neither: each is written aside and renamed at the end
    with ExitStack() as outputs:
        if out is not None:
            plan.to_csv(outputs.enter_context(atomic_path(out)))
        if gantt is not None:
            close(draw(plan, path=outputs.enter_context(atomic_path(gantt))))
    t = Table(title=f"{plan.policy} on {transfers.name} ({plan.cost.name} cost model)")
    t.add_column("metric")
    t.add_column("value", justify="right")
    s = plan.summary()
    for key in (
        "transfers",
        "units",
        "makespan",
        "lower_bound",
        "ratio",
        "rounds",
        "messages",
        "scheduling_seconds",
        "throughput",
    ):
        v = s[key]
        t.add_row(key, f"{v:.6g}" if isinstance(v, float) else str(v))
    console.print(t)
    if out is not None:
        console.print(f"plan written to {out}")
    if gantt is not None:
        console.print(f"Gantt chart written to {gantt}")


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
    ts = bidding_workload(ionodes, busy, large, n_clients=clients, seed=seed)
    ts.save_npz(out) if out.suffix == ".npz" else ts.to_csv(out)
    console.print(f"{ts!r} written to {out}")


def cost_cmd(
    preset: Annotated[str, typer.Argument(help="Preset name.")] = "cluster2004",
) -> None:
    """Print a cost-model preset as JSON (edit it and pass the file with --cost).

    Example: ``iorch cost modern > modern.json``
    """
    console.print_json(json.dumps(get_cost_model(preset).to_dict()))
