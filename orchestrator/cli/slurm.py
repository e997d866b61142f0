"""``iorch slurm …`` and the cluster choice of ``iorch run …`` (embedded, or across a Slurm job)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..errors import InputError
from ..files import atomic_path
from ._common import USER_ERRORS, console, err, fail

__all__ = ["slurm_app"]

slurm_app = typer.Typer(help="Run workflows as Slurm batch jobs on I/O-node-bound Dask workers.")

# The options `iorch run <workflow>` takes for its cluster, declared once for every workflow
ClusterOpt = Annotated[
    str,
    typer.Option(
        help="auto (across the Slurm job when inside one, else embedded), local or slurm."
    ),
]
IONodesOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="I/O workers (the plan's I/O nodes): of the embedded cluster (default 4), or "
        "spread over --io-nodes under Slurm (default one per I/O node).",
    ),
]
IOHostsOpt = Annotated[
    str,
    typer.Option(
        "--io-nodes",
        help="Slurm: how many of the job's nodes carry I/O workers (the last ones), or a "
        "node list naming them.",
    ),
]
SharedOpt = Annotated[
    bool | None,
    typer.Option(
        "--shared-nodes/--no-shared-nodes",
        help="Slurm: compute workers on the I/O nodes too (default: only in one-node jobs).",
    ),
]
ComputePerNodeOpt = Annotated[
    int, typer.Option(min=1, help="Slurm: compute worker processes per compute node.")
]
LocalDirOpt = Annotated[
    str | None,
    typer.Option(
        help="Slurm: workers' scratch (spill) folder, e.g. node-local NVMe ('$TMPDIR', quoted)."
    ),
]


# ---------------------------------------------------------------- iorch slurm

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}
WorkflowArg = Annotated[str, typer.Argument(help="A workflow of `iorch run` (e.g. bips3d).")]
NodesOpt = Annotated[int, typer.Option(min=1, help="Nodes of the job (#SBATCH --nodes).")]
TimeOpt = Annotated[str, typer.Option("--time", help="Time limit (#SBATCH --time).")]
PartitionOpt = Annotated[str | None, typer.Option(help="Partition (#SBATCH --partition).")]
AccountOpt = Annotated[str | None, typer.Option(help="Account (#SBATCH --account).")]
JobNameOpt = Annotated[str | None, typer.Option(help="Job name (default iorch-WORKFLOW).")]
OutputOpt = Annotated[
    str | None, typer.Option(help="Job output file (default JOBNAME-%j.out in this folder).")
]
ExclusiveOpt = Annotated[bool, typer.Option(help="Whole nodes (#SBATCH --exclusive).")]
SbatchOpt = Annotated[
    list[str] | None, typer.Option("--sbatch", help="More #SBATCH options, verbatim; repeatable.")
]
CheckOpt = Annotated[
    bool, typer.Option(help="Ask Slurm whether the partition exists (needs scontrol here).")
]


def _workflow_command(root: Any, workflow: str) -> Any:
    """The click command of ``iorch run WORKFLOW``, from the root command ``iorch``.

    The root comes from the caller (the invocation's context), not by
    importing the CLI package, which imports this module.
    """
    group = root.commands["run"]
    names = sorted(group.commands)
    if workflow not in names:
        raise InputError(f"workflow {workflow!r}: `iorch run` has {names}")
    return group.commands[workflow]


def script_text(
    workflow: str,
    args: list[str],
    nodes: int,
    io_nodes: str,
    ionodes: int | None,
    shared_nodes: bool | None,
    compute_per_node: int,
    local_directory: str | None,
    time_limit: str,
    partition: str | None,
    account: str | None,
    job_name: str | None,
    output: str | None,
    exclusive: bool,
    sbatch: list[str] | None,
    check: bool | None,
    origin: str,
    workdir: str | None = None,
    python_bin: str | None = None,
    root: Any = None,
) -> str:
    """Check everything that can be checked before submission, then write the script.

    ``root`` is the ``iorch`` click command (``ctx.find_root().command`` in a
    command, ``typer.main.get_command(orchestrator.cli.app)`` elsewhere).
    ``iorch slurm script`` prints what this returns; the docs draw their
    example with it.

    Examples
    --------
    >>> import typer.main
    >>> from orchestrator.cli import app
    >>> text = script_text(
    ...     "bips3d", [], nodes=2, io_nodes="1", ionodes=2, shared_nodes=None,
    ...     compute_per_node=1, local_directory=None, time_limit="00:10:00",
    ...     partition=None, account=None, job_name=None, output=None, exclusive=False,
    ...     sbatch=None, check=False, origin="iorch slurm script", workdir="/scratch/run",
    ...     root=typer.main.get_command(app))  # doctest: +SKIP
    """
    # the Slurm plugin loads when a slurm command runs, not at iorch --help
    from ..plugins.slurm import (
        SlurmError,
        SlurmUnreachable,
        batch_script,
        check_partition,
        choose_roles,
    )
    from ..plugins.slurm import expand_hostlist as hosts  # likewise

    cmd = _workflow_command(root, workflow)
    # the job's nodes are unknown until it runs: check the split on placeholders,
    # with the named I/O nodes among them
    named = [] if io_nodes.strip().isdigit() else hosts(io_nodes)
    if len(named) > nodes:
        raise SlurmError(f"--io-nodes {io_nodes!r} names {len(named)} nodes, the job has {nodes}")
    others = [f"(node {i})" for i in range(nodes - len(named))]
    roles = choose_roles(others + named, io_nodes, ionodes, shared_nodes)
    run_args = ["--cluster", "slurm", "--io-nodes", io_nodes]
    if ionodes is not None:
        run_args += ["--ionodes", str(ionodes)]
    if shared_nodes is not None:
        run_args.append("--shared-nodes" if shared_nodes else "--no-shared-nodes")
    run_args += ["--compute-per-node", str(compute_per_node)]
    if local_directory:
        run_args += ["--local-directory", local_directory]
    run_args += args
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        run_args += ["--out", f"out/{workflow}-$SLURM_JOB_ID"]
    if "--help" in args:  # parsing would print the help into the script
        raise SlurmError(f"see `iorch run {workflow} --help` for the workflow's options")
    try:  # parse (not run) the workflow's options now, not an hour later in the queue
        cmd.make_context(workflow, list(run_args))
    except Exception as e:  # a usage error (typer carries its own copy of click's classes)
        msg = e.format_message() if hasattr(e, "format_message") else str(e)
        raise SlurmError(f"iorch run {workflow}: {msg}") from None
    if partition is not None and check is not False:
        try:
            check_partition(partition)
        except SlurmUnreachable as e:
            if check:  # submitting: sbatch would fail the same way
                raise
            err.print(f"partition {partition!r} not checked: {e}")
    extra = list(sbatch or [])
    if named:
        extra.append(f"--nodelist={io_nodes}")  # the named I/O nodes must be in the job
    n_io, n_cn = len(roles.io_hosts), len(roles.compute_hosts)
    where = ", ".join(roles.io_hosts) if named else f"the last {n_io} of the {nodes} node(s)"
    notes = [
        f"I/O nodes: {where}, carrying {roles.n_ionodes} I/O worker(s) io-0..io-"
        f"{roles.n_ionodes - 1} (one thread each, Dask resources io=1, io-K=1);",
        f"compute nodes: {'all ' if n_cn == nodes else ''}{n_cn} node(s), "
        f"{compute_per_node} compute worker process(es) each, sharing the node's cores.",
    ]
    return batch_script(
        ["iorch", "run", workflow, *run_args],
        nodes=nodes,
        time_limit=time_limit,
        partition=partition,
        account=account,
        job_name=job_name or f"iorch-{workflow}",
        output=output,
        exclusive=exclusive,
        extra_sbatch=extra,
        origin=origin,
        workdir=workdir,
        python_bin=python_bin,
        notes=notes,
    )


_SCRIPT_HELP = """Print a complete, commented batch script running WORKFLOW across the job's nodes.

Options the workflow takes (``--parts``, ``--format`` …) follow ``--``.

Example: ``iorch slurm script bips3d --nodes 4 --io-nodes 1 -- --parts 64 > job.sbatch``
"""
_SUBMIT_HELP = """Write the batch script (as ``iorch slurm script``), submit it, print the job id.

The script is kept as ``JOBNAME-JOBID.sbatch``; a --partition is always checked.

Example: ``iorch slurm submit bips3d --nodes 4 --io-nodes 1 --partition debug -- --parts 64``
"""


# one function for both commands: the same options, the same checks
@slurm_app.command("script", context_settings=_EXTRA, help=_SCRIPT_HELP)
@slurm_app.command("submit", context_settings=_EXTRA, help=_SUBMIT_HELP)
def script_cmd(
    ctx: typer.Context,
    workflow: WorkflowArg,
    nodes: NodesOpt = 1,
    io_nodes: IOHostsOpt = "1",
    ionodes: IONodesOpt = None,
    shared_nodes: SharedOpt = None,
    compute_per_node: ComputePerNodeOpt = 1,
    local_directory: LocalDirOpt = None,
    time_limit: TimeOpt = "00:30:00",
    partition: PartitionOpt = None,
    account: AccountOpt = None,
    job_name: JobNameOpt = None,
    output: OutputOpt = None,
    exclusive: ExclusiveOpt = True,
    sbatch: SbatchOpt = None,
    check: CheckOpt = True,
) -> None:
    """``iorch slurm script`` and ``iorch slurm submit`` (see their help texts)."""
    # the Slurm plugin loads when a slurm command runs, not at iorch --help
    from ..plugins.slurm import SlurmError, submit

    submitting = ctx.info_name == "submit"
    origin = shlex.join(["iorch", "slurm", *sys.argv[2:]]) if sys.argv[1:2] == ["slurm"] else ""
    try:
        if submitting and not check:
            raise SlurmError("--no-check: submit always checks the partition (sbatch would too)")
        text = script_text(
            workflow,
            list(ctx.args),
            nodes,
            io_nodes,
            ionodes,
            shared_nodes,
            compute_per_node,
            local_directory,
            time_limit,
            partition,
            account,
            job_name,
            output,
            exclusive,
            sbatch,
            True if submitting else (None if check else False),
            origin,
            root=ctx.find_root().command,
        )
        job = submit(text) if submitting else None
    except USER_ERRORS as e:  # ours and the files named; a bug keeps its traceback
        raise fail(str(e)) from None
    if job is None:
        sys.stdout.write(text)
        return
    console.print(job)  # first: the job runs whatever happens to the copy below
    kept = Path(f"{job_name or 'iorch-' + workflow}-{job}.sbatch")
    try:
        with atomic_path(kept) as tmp:  # a link planted at the job's name is not followed
            tmp.write_text(text)
    except (OSError, InputError) as e:  # the job runs anyway: say where the script is not
        err.print(f"submitted, but the script could not be kept in {kept}: {e}")
        return
    err.print(f"submitted; script kept in {kept}; follow it with `iorch slurm status {job}`")


@slurm_app.command("status")
def status_cmd(
    job_id: Annotated[str, typer.Argument(help="The job id sbatch printed.")],
    wait: Annotated[bool, typer.Option(help="Wait until the job has ended.")] = False,
    lines: Annotated[int, typer.Option(min=0, help="Lines of the job's report to show.")] = 40,
) -> None:
    """Show a job's state and, once it has ended, the workflow's report (its output file).

    With ``--wait`` the exit code says how it ended: 0 completed, 1 otherwise.

    Example: ``iorch slurm status 17 --wait``
    """
    # the Slurm plugin loads when a slurm command runs, not at iorch --help
    from ..plugins.slurm import SlurmError, job_status

    try:
        st = job_status(job_id)
        while wait and not st.done:
            time.sleep(1.0)
            st = job_status(job_id)
    except SlurmError as e:
        raise fail(str(e)) from None
    t = Table(show_header=True)
    for col in ("job", "state", "reason", "nodes", "run time", "exit code"):
        t.add_column(col)
    t.add_row(st.job_id, st.state, st.reason, st.nodes, st.elapsed, st.exit_code)
    console.print(t)
    if st.done and lines:
        # default output name of our scripts, for a job the controller no longer describes
        out = (
            Path(st.stdout)
            if st.stdout
            else next(iter(Path.cwd().glob(f"*-{job_id}.out")), Path(f"iorch-*-{job_id}.out"))
        )
        if out.exists():
            tail = out.read_text(errors="replace").splitlines()[-lines:]
            console.print(f"[bold]{out}[/] (last {len(tail)} lines):")
            console.print("\n".join(tail), markup=False, highlight=False, soft_wrap=True)
        else:
            err.print(f"the job's output {out} is not on this machine")
    if wait and st.state != "COMPLETED":
        raise typer.Exit(code=1)
