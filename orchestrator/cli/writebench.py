"""``iorch write-bench``: the policies dispatched for real beside what a user would do instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import defaults
from ..engine import DEFAULT_WINDOW
from ..engine.cluster import local_cluster
from ..errors import InputError
from ..files import atomic_path
from ..limits import check_disk, check_memory
from ..policies import PolicyError, policies
from ._common import FORMATS, console, progress


def write_bench_cmd(
    size: Annotated[
        str, typer.Option(help="Bytes to write per policy, e.g. 256MiB, 2GiB.")
    ] = "1GiB",
    clients: Annotated[int, typer.Option(min=1, help="Clients (contributing tasks).")] = 16,
    ionodes: Annotated[
        int, typer.Option(min=1, help="I/O workers of the embedded cluster.")
    ] = defaults.N_IONODES,
    format: Annotated[str, typer.Option(help=FORMATS)] = defaults.FORMAT,
    policy: Annotated[
        str, typer.Option(help="A policy name, a comma list, or 'all'.")
    ] = "ms-ecf,ecf,hdf,hash-ios",
    stripe: Annotated[str, typer.Option(help="Stripe (and Zarr shard) size.")] = "8MiB",
    strategy: Annotated[
        str, typer.Option(help="contiguous, list or two-phase.")
    ] = defaults.STRATEGY,
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
    tls: Annotated[
        bool,
        typer.Option(
            help="Secure the embedded cluster (TLS, the default of every cluster we start); "
            "--no-tls measures plain TCP, open to every local user."
        ),
    ] = True,
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

    # bench.write loads distributed: when the command runs, not at iorch --help
    from ..bench.write import ionode_peak_rss, parse_size, run

    nbytes, stripe_bytes = parse_size(size, "--size"), parse_size(stripe, "--stripe")
    win = parse_size(window, "--window") if window else None
    names = sorted(policies()) if policy == "all" else [p.strip() for p in policy.split(",")]
    for n in names:
        if n not in policies():
            raise PolicyError(f"unknown policy {n!r}; choose one of {sorted(policies())}")
    out.mkdir(parents=True, exist_ok=True)
    # the stage's data is held in memory by the compute workers, then written once
    # by each policy (one at a time, each deleted before the next)
    check_disk(out, 2 * nbytes, f"--size {size}: the output and the raw probe", InputError)
    # with the anchors, this process holds the values, and the gathered rows beside them
    check_memory((3 if anchors else 2) * nbytes, f"--size {size}: the stage's data and its copies")
    mem = memory if memory == "auto" else parse_size(memory, "--memory")
    if isinstance(mem, int) and mem < nbytes // 2 + (64 << 20):
        # the two compute workers hold the stage's data between them, beside their own needs
        raise InputError(
            f"--memory {memory}: each of the 2 compute workers holds half of --size {size} and "
            f"needs about 64 MiB besides; give at least {(nbytes // 2 + (64 << 20)) >> 20} MiB"
        )
    with (
        local_cluster(n_ionodes=ionodes, n_compute=2, compute_memory=mem, security=tls) as cl,
        progress() as prog,
    ):
        n_jobs = len(names) + 1 + (5 if anchors else 0)
        task = prog.add_task("write-bench", total=n_jobs * repeat)
        if gantt is not None:
            gantt.mkdir(parents=True, exist_ok=True)
        rows = run(
            cl,
            out,
            nbytes,
            clients,
            format,
            names,
            stripe_bytes,
            strategy,
            advance=lambda msg: prog.update(task, advance=1, description=msg),
            gantt_dir=gantt,
            repeat=repeat,
            anchors=anchors,
            window=win,
        )
        rss = ionode_peak_rss(cl)
    win_bytes = win or DEFAULT_WINDOW
    raw = next(r for r in rows if r.name == "raw sequential write")
    h5 = next((r for r in rows if r.name.startswith("h5py")), None)
    records = [r.as_dict(raw, h5) for r in rows]
    # written aside and renamed: a link planted at these names is replaced, never followed
    with atomic_path(out / "results.json") as tmp:
        tmp.write_text(
            json.dumps(
                {
                    "size": nbytes,
                    "clients": clients,
                    "ionodes": ionodes,
                    "format": format,
                    "strategy": strategy,
                    "stripe_bytes": stripe_bytes,
                    "repeat": repeat,
                    "window": win_bytes,
                    "tls": tls,
                    "ionode_peak_rss": rss,
                    "rows": records,
                },
                indent=2,
            )
        )
    with atomic_path(out / "results.csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(
            fh, fieldnames=[k for k in records[0] if k != "all_seconds"], extrasaction="ignore"
        )
        w.writeheader()
        w.writerows(records)
    # the settings go on their own unwrapped line: a table title wraps at the table's width
    console.print(
        f"write-bench: {nbytes / 2**20:,.0f} MiB, {clients} clients, {ionodes} I/O workers, "
        f"{format}, {strategy} stripes of {stripe_bytes / 2**20:g} MiB, "
        f"{'TLS' if tls else 'plain TCP'} between workers; median of {repeat}",
        soft_wrap=True,
    )
    t = Table()
    for col in (
        "row",
        "units",
        "s",
        "best s",
        "MB/s",
        "÷ raw",
        "÷ h5py",
        "best ÷ raw",
        "best ÷ h5py",
        "planned s",
        "realized s",
        "realized ÷ planned",
        "CPU busy",
    ):
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
            f"{r.cpu_busy:.2f}" if r.cpu_busy == r.cpu_busy else "",
        )
    console.print(t)
    console.print(
        "s: median seconds (best s: the fastest round; ratios are throughput ÷ the anchor's), "
        "everything included (policies: plan, dispatch, checksums while "
        "writing, fsync, commit; anchors: open, write, close, fsync). Planned makespan uses a "
        "cost model measured in this run (two calibration stages of equal loads, in large and "
        "in small pieces, give each I/O node's rate and what a unit costs beyond its bytes); "
        "realized is the first I/O node's start (its first fetch) to the last fsync. "
        "Bounds: what moving the bytes between "
        "processes costs, and what the device does with the stage's pieces when the "
        "workers write them with no plan. CPU busy: CPU seconds of every process of the run "
        f"(this one with the scheduler, the I/O and the compute workers) ÷ ({os.cpu_count()} "
        "cores × the row's wall time): near 1, the row is bound by the machine's CPUs "
        "rather than its disk "
        "(results.json has each kind's seconds). "
        f"Saved {out / 'results.json'}."
    )
    held = max((r.peak_held for r in rows), default=0)
    console.print(
        f"I/O workers' peak RSS {', '.join(f'{x / 2**20:,.0f}' for x in rss)} MiB (whole "
        f"run, anchors included); window {win_bytes / 2**20:,.0f} MiB, most bytes held "
        f"{held / 2**20:,.1f} MiB.",
        soft_wrap=True,
    )
