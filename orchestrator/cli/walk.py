"""``iorch walk``: index, verify, checksum, archive or prune a checkpoint tree with walkers
on Dask workers (see :func:`orchestrator.treewalk.walk`)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..errors import InputError
from ._common import console, err

OPS = ("list", "stat", "verify", "checksum", "copy", "delete")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``--older-than``: seconds from ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` or a number.

    Examples
    --------
    >>> parse_age("7d"), parse_age("1.5h"), parse_age("20")
    (604800.0, 5400.0, 20.0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if m is None:
        raise InputError(f"--older-than must be an age like 90s, 30m, 12h, 7d or 2w, got {text!r}")
    return float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1)


def _operation(
    op: str, root: str, dest: str | None, older: str | None, keep: int | None, apply: bool
) -> Any:
    from ..treewalk.operations import Operation
    from ..treewalk.ops import Checksum, Copy, Delete, Verify

    if op not in OPS:
        raise InputError(f"--op must be one of {', '.join(OPS)}, got {op!r}")
    if (dest is not None) != (op == "copy"):
        raise InputError(
            "DEST is for --op copy, and --op copy needs it" + (f" (got {dest!r})" if dest else "")
        )
    if op != "delete" and (older is not None or keep is not None or apply):
        raise InputError("--older-than, --keep-latest and --apply are for --op delete")
    if op == "copy":
        assert dest is not None
        return Copy(root, dest)
    if op == "delete":
        return Delete(root, parse_age(older) if older is not None else None, keep, apply)
    if op == "verify":
        return Verify()
    if op == "checksum":
        return Checksum()
    return Operation(stat=op == "stat")


def walk_cmd(
    path: Annotated[str, typer.Argument(metavar="PATH", help="The folder to walk.")],
    dest: Annotated[
        str | None, typer.Argument(metavar="[DEST]", help="Where --op copy archives the tree.")
    ] = None,
    op: Annotated[str, typer.Option(help=", ".join(OPS))] = "list",
    older_than: Annotated[
        str | None, typer.Option(help="delete: checkpoints older than this (7d, 12h, 30m).")
    ] = None,
    keep_latest: Annotated[
        int | None, typer.Option(min=0, help="delete: keep this many newest per folder.")
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="delete: really delete (default: a dry run).")
    ] = False,
    algorithm: Annotated[
        str, typer.Option(help="h-drqs, drqs, deqs, pa-drqs, cp or cp-dirs.")
    ] = "h-drqs",
    walkers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Walkers (default: 2, or every I/O worker of --scheduler-file's cluster)."
        ),
    ] = None,
    threads: Annotated[
        int | None, typer.Option(min=1, max=256, help="h-drqs: threads per walker (4).")
    ] = None,
    index: Annotated[
        str | None, typer.Option(help="Folder for the index (default: a new temporary one).")
    ] = None,
    scheduler_file: Annotated[
        str | None, typer.Option(help="Walk on this running cluster instead of an embedded one.")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seeds the walkers' random choices.")] = 0,
) -> None:
    """Walk a tree with walkers on Dask workers; every entry goes to a Parquet index.

    Exit code 1 if ``--op verify`` finds a damaged checkpoint, or ``--op copy`` could not
    copy a file whole.

    Examples: ``iorch walk runs/ --op verify``;
    ``iorch walk runs/ --op delete --older-than 30d --keep-latest 2`` (a dry run; add
    ``--apply``); ``iorch walk runs/ /archive/runs --op copy``
    """
    from ..engine.cluster import connect, local_cluster
    from ..treewalk import walk

    if not path.strip():
        raise InputError("PATH is empty; give a folder")
    if index is not None and not index.strip():  # a Path would read "" as ".", here
        raise InputError("--index is empty; give a folder (or leave it out)")
    operation = _operation(op, str(Path(path).absolute()), dest, older_than, keep_latest, apply)
    shown = [0.0]

    def report(entries: int, seconds: float) -> None:
        if sys.stderr.isatty() or time.monotonic() - shown[0] > 5:
            shown[0] = time.monotonic()
            err.print(
                f"  {entries:,} entries, {entries / max(seconds, 1e-9):,.0f}/s",
                end="\r" if sys.stderr.isatty() else "\n",
            )

    kw: dict[str, Any] = {
        "op": operation,
        "algorithm": algorithm,
        "walkers": walkers,
        "threads": threads,
        "index": index,
        "seed": seed,
        "on_progress": report,
    }
    if scheduler_file is not None:
        with connect(scheduler_file=scheduler_file) as cl:
            result = walk(path, cluster=cl, **kw)
    else:
        from ..treewalk.api import check_walkers

        check_walkers(walkers or 2)
        with local_cluster(n_ionodes=walkers or 2, n_compute=0) as cl:
            result = walk(path, cluster=cl, **kw)
    _print(result, operation)
    damaged = sum(len(w["op"].get("damaged", ())) for w in result.walkers)
    if operation.name == "verify" and damaged:
        raise typer.Exit(code=1)
    if operation.name == "copy" and sum(w["op"]["problems"] for w in result.walkers):
        raise typer.Exit(code=1)


def _print(result: Any, op: Any) -> None:
    table = Table(
        title=f"{op.name} {result.root} ({result.algorithm}, {len(result.walkers)} walkers)"
    )
    for col in ("walker", "host", "entries", "folders", "busy s", "messages sent", "bytes sent"):
        table.add_column(col, justify="right")
    for w in result.walkers:
        table.add_row(
            str(w["rank"]),
            str(w["host"]),
            f"{w['tally']['entries']:,}",
            f"{w['tally']['directories']:,}",
            f"{w['busy']:.2f}",
            f"{sum(w['messages']):,}",
            f"{sum(w['bytes']):,}",
        )
    console.print(table)
    console.print(
        f"{result.entries:,} entries in {result.seconds:.2f} s "
        f"({result.entries_per_second:,.0f}/s); "
        f"{result.total_messages:,} messages, {result.total_bytes:,} bytes between walkers; "
        f"work within ±{100 * result.imbalance():.0f} % of the mean"
    )
    keys = ("links", "hard_links", "unreadable", "vanished", "replaced")
    reported: dict[str, Any] = {k: result.total(k) for k in keys}
    if not op.stat:  # a hard link shows only in lstat's st_nlink
        reported["hard_links"] = "not counted without stat"
    console.print(
        ", ".join(
            f"{k.replace('_', ' ')}: {v:,}" if isinstance(v, int) else f"{k.replace('_', ' ')}: {v}"
            for k, v in reported.items()
        )
        + " (links never followed; the index's error column says why)"
    )
    summaries = [w["op"] for w in result.walkers]
    if op.name == "verify":
        checked = sum(s["checked"] for s in summaries)
        damaged = sorted(p for s in summaries for p in s["damaged"])
        console.print(f"{checked:,} checkpoints checked, {len(damaged):,} damaged")
        for p in damaged[:20]:
            err.print(f"[bold red]damaged:[/] {p}", soft_wrap=True)
        if len(damaged) > 20:
            err.print(f"... and {len(damaged) - 20} more (the index's result column)")
    elif op.name == "delete":
        n = sum(s["deleted"] for s in summaries)
        console.print(
            f"deleted {n:,} targets ({sum(s['bytes'] for s in summaries):,} bytes of files)"
            if op.apply
            else "dry run: nothing deleted; the rows whose result is 'would delete' are what "
            "--apply deletes"
        )
    elif op.name == "copy":
        console.print(
            f"copied {sum(s['files'] for s in summaries):,} files, "
            f"{sum(s['bytes'] for s in summaries):,} bytes to {op.dest}"
        )
        problems = sum(s["problems"] for s in summaries)
        if problems:
            err.print(
                f"[bold red]{problems:,} files or pieces were not copied whole[/] (the index's "
                "result column says which)"
            )
            for line in sorted(x for s in summaries for x in s["failed"])[:20]:
                err.print(f"  {line}", soft_wrap=True)
    elif op.name == "checksum":
        console.print(f"{sum(s['bytes'] for s in summaries):,} bytes checksummed")
    console.print(
        f"index: {result.index} (pyarrow.dataset.dataset(..., format='parquet'))", soft_wrap=True
    )
