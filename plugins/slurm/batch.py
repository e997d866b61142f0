"""Batch scripts, and the Slurm commands that submit them and report on jobs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import SlurmError, SlurmUnreachable

_TIME = re.compile(r"([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}")
#: what Slurm takes as a partition, account or job name without quoting
SLURM_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
#: Slurm keeps a time limit in 32-bit minutes; all ones means INFINITE
_SLURM_MAX_MINUTES = 2**32 - 1


def _minutes(time_limit: str) -> float:
    """Minutes of a time limit in one of Slurm's forms (checked by ``_TIME``).

    Examples
    --------
    >>> _minutes("90"), _minutes("1:30"), _minutes("1:00:00"), _minutes("2-1"), _minutes("1-0:1:30")
    (90.0, 1.5, 60.0, 2940.0, 1441.5)
    """
    days, _, rest = time_limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        h, m, sec = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        h, m, sec = parts
    else:  # M or M:S
        h, m, sec = 0, parts[0], [*parts, 0][1]
    return int(days or 0) * 1440 + h * 60 + m + sec / 60


def _field_over(time_limit: str) -> str:
    """What is out of range in a time limit of Slurm's forms ('' if nothing): minutes and
    seconds after a larger unit below 60, hours after days below 24 (``1:99:99`` went into
    the script unchanged).

    Examples
    --------
    >>> _field_over("1:99:99"), _field_over("0-24:00:00"), _field_over("90"), _field_over("1:30")
    ('minutes 99 must be below 60', 'hours 24 must be below 24', '', '')
    """
    days, _, rest = time_limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    names = ["hours", "minutes", "seconds"] if days or len(parts) == 3 else ["minutes", "seconds"]
    limits = {"hours": 24 if days else None, "minutes": 60, "seconds": 60}
    for i, (name, value) in enumerate(zip(names, parts, strict=False)):
        limit = limits[name]
        # the first field of M, M:S or H:M:S may be as large as it likes
        if limit is not None and (i > 0 or days) and value >= limit:
            return f"{name} {value} must be below {limit}"
    return ""


def batch_script(
    command: Sequence[str],
    nodes: int = 1,
    time_limit: str = "00:30:00",
    partition: str | None = None,
    account: str | None = None,
    job_name: str = "iorch",
    output: str | None = None,
    exclusive: bool = True,
    workdir: str | os.PathLike[str] | None = None,
    python_bin: str | os.PathLike[str] | None = None,
    extra_sbatch: Sequence[str] = (),
    origin: str = "",
    notes: Sequence[str] = (),
) -> str:
    """A complete, commented ``sbatch`` script that runs ``command`` (an ``iorch run …``).

    Parameters
    ----------
    command : sequence of str
        The command line the job runs (as argv; quoted into the script).
    nodes : int
        ``#SBATCH --nodes``.
    time_limit, partition, account, job_name
        ``--time``, ``--partition``, ``--account``, ``--job-name``.
    output : str, optional
        ``--output`` (default ``<job_name>-%j.out`` in the submit folder).
    exclusive : bool
        Whole nodes (``--exclusive``): the workers share them with no one.
    workdir : path, optional
        The folder the job runs in (default: the current one).
    python_bin : path, optional
        The ``bin`` folder of the environment with io-orchestrator (default:
        this interpreter's).
    extra_sbatch : sequence of str
        More ``#SBATCH`` options, verbatim (e.g. ``--constraint=nvme``).
    origin : str
        The command that generated the script, recorded in its header.
    notes : sequence of str
        Comment lines for the header (what runs where).

    Examples
    --------
    >>> s = batch_script(["iorch", "run", "bips3d"], nodes=4, partition="debug",
    ...                  workdir="/scratch/me", python_bin="/opt/venv/bin")
    >>> print(s.splitlines()[0]); "#SBATCH --nodes=4" in s
    #!/bin/bash
    True
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise SlurmError(f"--nodes must be a positive integer, got {nodes!r}")
    if not isinstance(time_limit, str) or not _TIME.fullmatch(time_limit):
        raise SlurmError(
            f"--time {time_limit!r}: use minutes, MM:SS, HH:MM:SS or D-HH:MM:SS (Slurm's forms)"
        )
    over = _field_over(time_limit)
    if over:
        raise SlurmError(f"--time {time_limit!r}: {over}")
    if _minutes(time_limit) >= _SLURM_MAX_MINUTES:
        raise SlurmError(
            f"--time {time_limit!r} is beyond what Slurm can hold "
            f"({_SLURM_MAX_MINUTES - 1:,} minutes)"
        )
    for name, val in (("--partition", partition), ("--account", account), ("--job-name", job_name)):
        if val is not None and not SLURM_NAME.fullmatch(val):
            raise SlurmError(f"{name} {val!r}: letters, digits and . _ + - only")
    # one #SBATCH line each: white space or a line break would end the option
    # or start a command of its own
    for name, val in (("--output", output), *(("--sbatch", x) for x in extra_sbatch)):
        if val is not None and (not val or re.search(r"[\x00-\x20\x7f]", val)):
            raise SlurmError(f"{name} {val!r}: must be one word without spaces or line breaks")
    workdir = Path(workdir or Path.cwd()).resolve()
    bin_dir = Path(python_bin or Path(sys.executable).parent)
    out = output or f"{job_name}-%j.out"
    q = shlex.quote
    origin = _one_line(origin)
    lines = [
        "#!/bin/bash",
        f"# Written by io-orchestrator{': ' + origin if origin else ''}",
        "# Submit with `sbatch <this file>` (or `iorch slurm submit`); check with `iorch slurm status`.",  # noqa: E501
        *(f"# {_one_line(n)}" for n in notes),
        "#",
        "# (sbatch reads #SBATCH lines only before the first command)",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nodes}",
        "# one task per node: the batch step; the workers are srun steps that overlap it",
        "#SBATCH --ntasks-per-node=1",
    ]
    if exclusive:
        lines.append("#SBATCH --exclusive")
    lines.append(f"#SBATCH --time={time_limit}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if account:
        lines.append(f"#SBATCH --account={account}")
    lines.append(f"#SBATCH --output={out}")
    lines += [f"#SBATCH {opt}" for opt in extra_sbatch]
    lines += [
        "",
        "# stop at the first failing command, on unset variables and inside pipes",
        "set -euo pipefail",
        "",
        "# the Python environment io-orchestrator is installed in (workers start from it too)",
        f"export PATH={q(str(bin_dir))}:$PATH",
        "# relative paths (the outputs) are taken from here: a folder every node sees",
        f"cd {q(str(workdir))}",
        "",
        ': "${SLURM_JOB_ID:?this is a batch script: submit it with sbatch}"',
        'echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST ($SLURM_JOB_NUM_NODES nodes)"',
        "# `--cluster slurm`: the Dask scheduler runs in this batch step; iorch starts the",
        "# I/O and compute workers with srun on the allocation's nodes and stops them at the",
        "# end. exec: scancel's SIGTERM reaches iorch, which removes unfinished outputs.",
        "exec " + " ".join(_quote_keep_vars(a) for a in command),
        "",
    ]
    return "\n".join(lines)


def _quote_keep_vars(arg: str) -> str:
    """Shell-quote ``arg``, letting only ``$SLURM_JOB_ID`` in it expand.

    Examples
    --------
    >>> print(_quote_keep_vars("out/run-$SLURM_JOB_ID"), _quote_keep_vars("a b$HOME"))
    out/run-"${SLURM_JOB_ID}" 'a b$HOME'
    """
    parts = arg.split("$SLURM_JOB_ID")
    return '"${SLURM_JOB_ID}"'.join(shlex.quote(p) if p else "" for p in parts)


def _one_line(text: str) -> str:
    """``text`` safe inside a ``#`` comment line: line breaks shown, not obeyed."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _slurm_cmd(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise SlurmUnreachable(f"{argv[0]} is not installed here: cannot {what}")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{shlex.join(argv)} did not answer within 60 s") from None


def check_partition(partition: str) -> None:
    """Raise :class:`SlurmError` unless the cluster has ``partition`` (asks ``scontrol``).

    Examples
    --------
    >>> check_partition("no-such-partition")  # doctest: +SKIP
    Traceback (most recent call last):
    SlurmError: partition 'no-such-partition' does not exist; this cluster has ['debug']
    """
    r = _slurm_cmd(["scontrol", "show", "partition", partition], "check the partition")
    if r.returncode == 0 and f"PartitionName={partition}" in r.stdout:
        return
    names = _slurm_cmd(["sinfo", "-h", "-o", "%R"], "list partitions")
    if names.returncode != 0:
        last = ((r.stderr or names.stderr).strip().splitlines() or ["no answer"])[-1]
        raise SlurmUnreachable(f"cannot reach Slurm to check partition {partition!r}: {last}")
    raise SlurmError(
        f"partition {partition!r} does not exist; this cluster has "
        f"{sorted(set(names.stdout.split()))}"
    )


def submit(script: str, cwd: str | os.PathLike[str] | None = None) -> str:
    """Submit ``script`` (its text) with ``sbatch`` and return the job id.

    Examples
    --------
    >>> submit(batch_script(["iorch", "run", "bips3d"]))  # doctest: +SKIP
    '17'
    """
    if shutil.which("sbatch") is None:
        raise SlurmError("sbatch is not installed here: cannot submit")
    try:
        r = subprocess.run(
            ["sbatch", "--parsable"],
            input=script,
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        raise SlurmUnreachable("sbatch did not answer within 60 s") from None
    if r.returncode != 0:
        raise SlurmError(f"sbatch refused the job: {r.stderr.strip()}")
    return r.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class JobStatus:
    """What Slurm says about one job (from ``scontrol show job``)."""

    job_id: str
    state: str
    reason: str
    nodes: str
    elapsed: str
    exit_code: str
    stdout: str | None

    @property
    def done(self) -> bool:
        """The job has ended (in any way)."""
        return self.state not in (
            "PENDING",
            "RUNNING",
            "CONFIGURING",
            "COMPLETING",
            "SUSPENDED",
            "REQUEUED",
            "RESIZING",
        )


def job_status(job_id: str) -> JobStatus:
    """State, reason, nodes, run time, exit code and output file of job ``job_id``.

    Examples
    --------
    >>> job_status("17").state  # doctest: +SKIP
    'COMPLETED'
    """
    if not re.fullmatch(r"\d+(_\d+)?", str(job_id)):
        raise SlurmError(f"job id {job_id!r} is not a Slurm job id (digits)")
    r = _slurm_cmd(["scontrol", "show", "job", "--oneliner", str(job_id)], "ask for the job")
    if r.returncode != 0:
        # the controller forgets ended jobs after MinJobAge; accounting remembers (where kept)
        acct = _accounting(str(job_id))
        if acct is not None:
            return acct
        last = (r.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SlurmError(f"Slurm does not know job {job_id}: {last}")
    fields = dict(
        kv.split("=", 1) for kv in r.stdout.split() if "=" in kv and not kv.startswith("=")
    )
    return JobStatus(
        job_id=str(job_id),
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", ""),
        nodes=fields.get("NodeList", ""),
        elapsed=fields.get("RunTime", ""),
        exit_code=fields.get("ExitCode", ""),
        stdout=fields.get("StdOut"),
    )


def _accounting(job_id: str) -> JobStatus | None:
    """The job as ``sacct`` remembers it, or ``None`` (no sacct, no accounting, unknown)."""
    if shutil.which("sacct") is None:
        return None
    try:
        r = subprocess.run(
            [
                "sacct",
                "-j",
                job_id,
                "-X",
                "-n",
                "-P",
                "-o",
                "JobID,State,NodeList,Elapsed,ExitCode",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return None
    rows = [x.split("|") for x in r.stdout.splitlines() if x.count("|") == 4]
    if r.returncode != 0 or not rows:
        return None
    _, state, nodes, elapsed, code = rows[0]
    return JobStatus(job_id, state.split()[0], "", nodes, elapsed, code, None)
