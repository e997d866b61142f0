"""``iorch testbed up|down|status|run``: the emulated cluster from the command line."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Annotated

import typer
from rich.table import Table

from ._common import console, err

testbed_app = typer.Typer(
    help="An emulated cluster on this machine: hosts in network namespaces, shaped links "
    "(needs root)."
)

_PROFILE = typer.Option(help="cluster2004, clusterfile2006 or modern.")
_IO = typer.Option("--io", min=1, help="I/O hosts (default: the profile's).")
_COMPUTE = typer.Option("--compute", min=1, help="Compute hosts (default: the profile's).")


def up_cmd(
    profile: Annotated[str, _PROFILE] = "cluster2004",
    n_io: Annotated[int | None, _IO] = None,
    n_compute: Annotated[int | None, _COMPUTE] = None,
) -> None:
    """Build a testbed that outlives this command (remove it with ``iorch testbed down``).

    Prints the scheduler's address; ``connect(address)`` (or ``$IORCH_SCHEDULER``)
    finds its I/O workers.

    Example: ``iorch testbed up --profile modern --io 2 --compute 8``
    """
    from .. import testbed

    t0 = time.perf_counter()
    tb = testbed.up(profile, n_io, n_compute, detached=True)
    err.print(
        f"testbed {tb.tid}: {len(tb.hosts)} hosts ({tb.profile.n_io} I/O, "
        f"{tb.profile.n_compute} compute, profile {tb.profile.name}) up in "
        f"{time.perf_counter() - t0:.1f} s"
        + ("" if tb.delay_applied else "; link latency not emulated (no sch_netem here)")
    )
    console.print(tb.scheduler_address)


def down_cmd(
    testbed_id: Annotated[str | None, typer.Argument(help="The testbed's id.")] = None,
    all_: Annotated[
        bool,
        typer.Option("--all", help="Every testbed of this machine, other runs' live ones too."),
    ] = False,
) -> None:
    """Stop a testbed's processes and remove its namespaces, links and files.

    Example: ``iorch testbed down 3fa9c1`` (``iorch testbed status`` lists the ids)
    """
    from .. import testbed
    from ..errors import InputError

    if (testbed_id is None) == (not all_):
        raise InputError("name one testbed id, or --all (`iorch testbed status` lists them)")
    gone = testbed.down(testbed_id)
    err.print(f"removed {len(gone)} testbed(s): {', '.join(gone) or 'none'}")


def status_cmd() -> None:
    """List the testbeds of this machine: live, detached or stale (their maker is gone).

    Example: ``iorch testbed status``
    """
    from .. import testbed

    rows = testbed.status()
    why = testbed.available()
    if why is not None:
        err.print(f"this machine cannot host a testbed: {why}")
    if not rows:
        err.print("no testbed on this machine")
        return
    t = Table()
    for col in ("id", "profile", "hosts", "scheduler", "state", "processes running"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["id"],
            str(r["profile"]),
            str(r["hosts"]),
            str(r["scheduler"]),
            r["state"],
            f"{r['running']}/{r['processes']}",
        )
    console.print(t)


def run_cmd(
    command: Annotated[list[str], typer.Argument(help="The command and its arguments.")],
    profile: Annotated[str, _PROFILE] = "cluster2004",
    n_io: Annotated[int | None, _IO] = None,
    n_compute: Annotated[int | None, _COMPUTE] = None,
) -> None:
    """Build a testbed, run COMMAND with ``$IORCH_SCHEDULER`` set to its scheduler, remove it.

    The command's exit code is this command's.

    Example: ``iorch testbed run --io 4 -- python my_workflow.py``
    """
    from .. import testbed

    with testbed.up(profile, n_io, n_compute) as tb:
        env = dict(os.environ, IORCH_SCHEDULER=tb.scheduler_address, IORCH_TESTBED=tb.tid)
        err.print(f"testbed {tb.tid} at {tb.scheduler_address}: running {' '.join(command)}")
        try:
            code = subprocess.run(command, env=env).returncode
        except FileNotFoundError:
            err.print(f"no such command: {command[0]!r}")
            code = 127
    if code:
        raise typer.Exit(code=code)
