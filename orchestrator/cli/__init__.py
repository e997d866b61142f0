"""The ``iorch`` command line: one module per command group, registered here.

- :mod:`.scheduling` — ``policies``, ``schedule``, ``workload``, ``cost``;
- :mod:`.bench` — ``bench schedulers|optimal|idg|stage`` and ``write-bench``;
- :mod:`.run` — ``run bips3d`` (the main job) and ``verify``;
- :mod:`.slurm` — ``slurm script|submit|status`` and the cluster options;
- :mod:`._common` — the consoles, shared options and the one error handler.
"""

from __future__ import annotations

import os
import signal
import sys

import typer

from . import bench, run, scheduling
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

# in the order ``iorch --help`` lists them
app.command("policies")(scheduling.policies_cmd)
app.command("schedule")(scheduling.schedule_cmd)
workload_app.command("bidding")(scheduling.workload_bidding)
app.command("cost")(scheduling.cost_cmd)
bench_app.command("schedulers")(bench.bench_schedulers)
bench_app.command("optimal")(bench.bench_optimal)
app.command("write-bench")(bench.write_bench_cmd)
bench_app.command("idg")(bench.bench_idg)
bench_app.command("stage")(bench.bench_stage)
run_app.command("bips3d")(run.run_bips3d)
app.command("verify")(run.verify_cmd)


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
    try:
        app()
    except SystemExit as stop:
        # Ctrl-C (130) and SIGTERM (143) end quietly in typer: say what became of the work
        if stop.code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            name = "interrupted" if stop.code == 128 + signal.SIGINT else "stopped by SIGTERM"
            print(
                f"iorch: {name}; the stage in progress, if any, was not committed and its "
                "temporary output was removed; checkpoints committed before are intact",
                file=sys.stderr,
            )
            # everything the command started is stopped by now (the cluster's `with`
            # has closed it, the stage's cleanup has run); what is left is the
            # interpreter's own finalization, which now and then crashed with SIGSEGV
            # in a library thread still alive after the interrupt (1 of 12 signal points
            # of tests/faults/test_signals.py), turning a clean 130 into -11. Skip it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(stop.code))
        raise


if __name__ == "__main__":
    main()
