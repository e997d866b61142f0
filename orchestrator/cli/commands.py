"""The ``iorch`` application: every command group registered on one Typer app.

Kept apart from :mod:`orchestrator.cli` so that importing that package (as
every worker process of the embedded cluster does: multiprocessing's spawn
re-imports the ``iorch`` script) loads neither the commands nor what they
import (the scheduling kernels, Numba, SciPy).
"""

from __future__ import annotations

import typer

from . import bench, run, scheduling, testbed, walk, writebench
from ._common import handled
from .slurm import slurm_app

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
app.add_typer(testbed.testbed_app, name="testbed")

# in the order ``iorch --help`` lists them
app.command("policies")(handled(scheduling.policies_cmd))
app.command("schedule")(handled(scheduling.schedule_cmd))
workload_app.command("bidding")(handled(scheduling.workload_bidding))
app.command("cost")(handled(scheduling.cost_cmd))
bench_app.command("schedulers")(handled(bench.bench_schedulers))
bench_app.command("optimal")(handled(bench.bench_optimal))
app.command("write-bench")(handled(writebench.write_bench_cmd))
bench_app.command("idg")(handled(bench.bench_idg))
bench_app.command("stage")(handled(bench.bench_stage))
bench_app.command("testbed")(handled(bench.bench_testbed))
bench_app.command("walk")(handled(bench.bench_walk))
bench_app.command("hio")(handled(bench.bench_hio))
bench_app.command("restart")(handled(bench.bench_restart))
run_app.command("bips3d")(handled(run.run_bips3d))
app.command("verify")(handled(run.verify_cmd))
app.command("walk")(handled(walk.walk_cmd))
testbed.testbed_app.command("up")(handled(testbed.up_cmd))
testbed.testbed_app.command("down")(handled(testbed.down_cmd))
testbed.testbed_app.command("status")(handled(testbed.status_cmd))
testbed.testbed_app.command("run", context_settings={"allow_interspersed_args": False})(
    handled(testbed.run_cmd)
)
