"""Slurm: host lists, roles, batch scripts, and jobs on a real single-node Slurm.

The tests with the ``slurm`` fixture submit real jobs to a real slurmctld
started by the test session (see ``tests/localslurm.py``); they skip where
Slurm cannot run and fail instead on CI (``IORCH_REQUIRE_SLURM=1``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from orchestrator.plugins.slurm import (
    Allocation,
    SlurmError,
    batch_script,
    choose_roles,
    expand_hostlist,
    jobqueue_cluster,
    parsl_config,
)
from orchestrator.workflows.bips3d import verify_dump

import orchestrator as orc
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.stage import write_stage
from orchestrator.engine.verify import verify

IORCH = str(Path(sys.executable).parent / "iorch")


def iorch(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IORCH, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )


# ------------------------------------------------------------- host lists


@pytest.mark.parametrize(
    ("spec", "hosts"),
    [
        ("localhost", ["localhost"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("n[1-2,5],login", ["n1", "n2", "n5", "login"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("r[1-2]n[3]", ["r1n3", "r2n3"]),
        ("a b,,c ", ["a", "b", "c"]),  # white space separates, empty items vanish
        ("n[01-3],n[1-03]", ["n01", "n02", "n03", "n1", "n2", "n3"]),
    ],
)
def test_expand_hostlist(spec: str, hosts: list[str]) -> None:
    assert expand_hostlist(spec) == hosts


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("n[1-3", "never closed"),
        ("n1-3]", "without '['"),
        ("n[[1]]", "nested"),
        ("n[3-1]", "backwards"),
        ("n[a-b]", "bad range 'a-b'"),
        (" , ", "empty"),
        ("gpu[3]x", "text 'x' after ']'"),
        ("n1\ntouch /tmp/x", "character other than"),
        ("n[\u0663]", "bad range"),
    ],
)
def test_expand_hostlist_rejects(spec: str, message: str) -> None:
    with pytest.raises(SlurmError, match=re.escape(message)):
        expand_hostlist(spec)


def test_allocation_from_env() -> None:
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "c[1-3]",
        "SLURM_JOB_CPUS_PER_NODE": "36(x2),12",
        "SLURM_MEM_PER_NODE": "4000",
    }
    a = Allocation.from_env(env)
    assert a == Allocation("7", ("c1", "c2", "c3"), (36, 36, 12), 4000)
    assert not a.single_host
    assert Allocation.from_env({}) is None
    per_cpu = {k: v for k, v in env.items() if k != "SLURM_MEM_PER_NODE"}
    assert Allocation.from_env({**per_cpu, "SLURM_MEM_PER_CPU": "1000"}).mem_per_node_mb == 12000
    with pytest.raises(SlurmError, match="3 nodes"):
        Allocation.from_env({**env, "SLURM_JOB_CPUS_PER_NODE": "36(x2)"})
    with pytest.raises(SlurmError, match="SLURM_JOB_NODELIST"):
        Allocation.from_env({"SLURM_JOB_ID": "7"})


# ------------------------------------------------------------------ roles


def test_roles_split_and_spread() -> None:
    r = choose_roles(["a", "b", "c", "d"], io_nodes=2, n_ionodes=5)
    assert r.io_hosts == ("c", "d") and r.io_workers == (3, 2) and r.compute_hosts == ("a", "b")
    assert r.n_ionodes == 5
    r = choose_roles(["a", "b", "c"], io_nodes="a,c")
    assert r.io_hosts == ("a", "c") and r.compute_hosts == ("b",) and r.io_workers == (1, 1)
    r = choose_roles(["a"], io_nodes=1, n_ionodes=3)  # a one-node job shares by default
    assert r.compute_hosts == ("a",) and r.io_workers == (3,)
    assert choose_roles(["a", "b"], 1, shared_nodes=True).compute_hosts == ("a", "b")


@pytest.mark.parametrize(
    ("nodes", "kw", "message"),
    [
        (["a", "b"], {"io_nodes": 2}, "no node left for compute workers"),
        (["a"], {"io_nodes": 1, "shared_nodes": False}, "--shared-nodes"),
        (["a", "b"], {"io_nodes": 3}, "--io-nodes must be 1..2"),
        (["a", "b"], {"io_nodes": 0}, "--io-nodes must be 1..2"),
        (["a", "b"], {"io_nodes": "z[1-2]"}, "['z1', 'z2'] not in the allocation"),
        (["a", "b"], {"io_nodes": "b[", "shared_nodes": True}, "never closed"),
        (["a", "b", "c"], {"io_nodes": 2, "n_ionodes": 1}, "at least one I/O worker per I/O node"),
    ],
)
def test_roles_reject(nodes: list[str], kw: dict, message: str) -> None:
    with pytest.raises(SlurmError, match=re.escape(message)):
        choose_roles(nodes, **kw)


# ------------------------------------------------------------ batch scripts


def test_batch_script_lines(tmp_path: Path) -> None:
    s = batch_script(
        ["iorch", "run", "bips3d", "--out", "out/x-$SLURM_JOB_ID", "--mesh", "a b"],
        nodes=4,
        time_limit="1-00:00:00",
        partition="big",
        account="p1",
        workdir=tmp_path,
        python_bin="/opt/env/bin",
        extra_sbatch=["--constraint=nvme"],
    )
    lines = s.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in (
        "#SBATCH --nodes=4",
        "#SBATCH --time=1-00:00:00",
        "#SBATCH --partition=big",
        "#SBATCH --account=p1",
        "#SBATCH --exclusive",
        "#SBATCH --constraint=nvme",
        "export PATH=/opt/env/bin:$PATH",
        f"cd {tmp_path}",
    ):
        assert want in lines, want
    # the job id expands, the path with a space stays one word
    assert lines[-1] == "exec iorch run bips3d --out out/x-\"${SLURM_JOB_ID}\" --mesh 'a b'"
    assert s.endswith("\n")
    # every #SBATCH line comes before the first command, or sbatch ignores it
    first_cmd = next(i for i, x in enumerate(lines) if x and not x.startswith("#"))
    assert all(i < first_cmd for i, x in enumerate(lines) if x.startswith("#SBATCH"))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"time_limit": "ten minutes"}, "--time 'ten minutes'"),
        ({"partition": "a;rm -rf"}, "--partition 'a;rm -rf'"),
        ({"nodes": 0}, "--nodes must be a positive integer"),
    ],
)
def test_batch_script_rejects(kw: dict, message: str) -> None:
    with pytest.raises(SlurmError, match=re.escape(message)):
        batch_script(["iorch"], **kw)


@pytest.mark.parametrize(
    "kw",
    [
        {"output": "o.out\ntouch /tmp/pwned"},
        {"output": "a b.out"},
        {"extra_sbatch": ["--constraint=nvme\ntouch /tmp/pwned"]},
        {"extra_sbatch": [""]},
        {"time_limit": "00:30:00\n"},
        {"account": "p1\nx"},
    ],
)
def test_batch_script_refuses_line_breaks_in_options(kw: dict) -> None:
    with pytest.raises(SlurmError):
        batch_script(["iorch"], **kw)


def test_batch_script_comments_cannot_break_out() -> None:
    s = batch_script(
        ["iorch", "run", "x", "--mesh", "a\nb", "--out", "o/$SLURM_JOB_ID_x"],
        origin="iorch slurm script x -- --mesh 'a\ntouch /tmp/pwned'",
        notes=["two\nlines"],
    )
    lines = s.splitlines()
    assert not any(x.startswith("touch") for x in lines)
    assert "# two\\nlines" in lines
    # only $SLURM_JOB_ID expands; a longer name is not read as another variable;
    # an argument with a line break stays one quoted word
    assert s.rstrip().endswith("exec iorch run x --mesh 'a\nb' --out o/\"${SLURM_JOB_ID}\"_x")


def test_cli_script_prints_a_checked_script(tmp_path: Path) -> None:
    r = iorch(
        "slurm",
        "script",
        "bips3d",
        "--nodes",
        "4",
        "--io-nodes",
        "1",
        "--ionodes",
        "4",
        "--time",
        "01:00:00",
        "--no-check",
        "--",
        "--parts",
        "64",
        "--format",
        "zarr",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    s = r.stdout
    assert "#SBATCH --nodes=4" in s and "#SBATCH --time=01:00:00" in s
    cmd = s.rstrip().splitlines()[-1]
    assert cmd.startswith("exec iorch run bips3d --cluster slurm --io-nodes 1 --ionodes 4")
    assert "--parts 64 --format zarr" in cmd and '--out out/bips3d-"${SLURM_JOB_ID}"' in cmd
    assert "# Written by io-orchestrator: iorch slurm script bips3d --nodes 4" in s


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "2", "--io-nodes", "2"], "no node left for compute workers"),
        (["--no-shared-nodes"], "no node left for compute workers"),
        (["--nodes", "2", "--io-nodes", "n[1-"], "never closed"),
        (["--nodes", "1", "--io-nodes", "n[1-2]"], "names 2 nodes, the job has 1"),
        (["--nodes", "2", "--", "--parts", "0"], "iorch run bips3d"),
        (["--nodes", "2", "--", "--no-such-option"], "No such option"),
        (["--time", "soon"], "--time 'soon'"),
        (["--nodes", "2", "--io-nodes", "n1\ntouch /tmp/pwned"], "character other than"),
        (["--", "--help"], "see `iorch run bips3d --help`"),
    ],
)
def test_cli_script_rejects_before_submission(args: list[str], message: str) -> None:
    r = iorch("slurm", "script", "bips3d", "--no-check", *args)
    assert r.returncode == 2 and r.stdout == ""
    assert message in " ".join(r.stderr.split()), r.stderr


def test_cli_submit_always_checks() -> None:
    r = iorch("slurm", "submit", "bips3d", "--no-check")
    assert r.returncode == 2 and "submit always checks the partition" in r.stderr


def test_cli_script_unknown_workflow() -> None:
    r = iorch("slurm", "script", "nope", "--no-check")
    assert r.returncode == 2 and "workflow 'nope'" in r.stderr and "bips3d" in r.stderr


def test_run_with_cluster_slurm_outside_a_job(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    r = iorch(
        "run",
        "bips3d",
        "--nodes",
        "300",
        "--cluster",
        "slurm",
        "--repeat",
        "1",
        "--out",
        str(tmp_path),
        env=env,
    )
    assert r.returncode == 2 and "not inside a Slurm job" in r.stderr


def test_parsl_config_writes_through_our_scheduler() -> None:
    cfg = parsl_config("tcp://127.0.0.1:9999", partition="debug", walltime="00:05:00")
    htex = cfg.executors[0]
    prov = htex.provider
    assert type(prov).__name__ == "SlurmProvider" and prov.partition == "debug"
    assert type(prov.launcher).__name__ == "SrunLauncher" and prov.exclusive is False
    assert "IORCH_SCHEDULER=tcp://127.0.0.1:9999" in prov.worker_init
    assert f"{Path(sys.executable).parent}:$PATH" in prov.worker_init
    with pytest.raises(SlurmError, match="partition"):
        parsl_config("tcp://127.0.0.1:1", partition="a b")


# ------------------------------------------------------- on a real Slurm


_HOST = st.text("abcxyz-", min_size=1, max_size=4).filter(lambda s: not s.startswith("-"))
_RANGE = st.tuples(st.integers(0, 120), st.integers(0, 6), st.sampled_from([0, 2, 3])).map(
    lambda t: f"{t[0]:0{t[2]}d}-{t[0] + t[1]:0{t[2]}d}" if t[1] else f"{t[0]:0{t[2]}d}"
)
_BRACKET = st.lists(_RANGE, min_size=1, max_size=3).map(lambda r: f"[{','.join(r)}]")
# a host, then brackets each followed by some text (Slurm refuses text after the last)
_ITEM = st.tuples(
    _HOST, st.lists(st.tuples(_BRACKET, st.sampled_from(["", "", "-n", "x"])), max_size=2)
).map(lambda t: t[0] + "".join(b + txt for b, txt in t[1]))
_SEP = st.sampled_from([",", ",", " ", ",,", ", "])


@pytest.mark.slow
def test_hostlist_matches_scontrol(slurm) -> None:
    """Our parser against ``scontrol show hostnames`` on random host lists."""

    @settings(max_examples=150, deadline=None)
    @given(st.tuples(st.lists(_ITEM, min_size=1, max_size=3), _SEP).map(lambda t: t[1].join(t[0])))
    def check(spec: str) -> None:
        r = slurm.run(["scontrol", "show", "hostnames", spec], check=False)
        if r.returncode != 0 or "Invalid hostlist" in r.stderr:  # refused (rc may be 0): so must we
            with pytest.raises(SlurmError):
                expand_hostlist(spec)
        else:
            assert expand_hostlist(spec) == r.stdout.split(), spec

    check()


def _wait_job(slurm, job: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = slurm.run(["scontrol", "show", "job", "--oneliner", job])
        state = re.search(r"JobState=(\S+)", r.stdout).group(1)
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.5)
    slurm.run(["scancel", job], check=False)
    raise AssertionError(f"job {job} still running after {timeout} s:\n{slurm.logs()}")


def _mesh_args() -> list[str]:
    from orchestrator.workflows.bips3d import default_mesh

    mesh = default_mesh()
    return ["--mesh", str(mesh)] if mesh is not None and mesh.exists() else ["--nodes", "32888"]


@pytest.mark.slow
def test_submit_bips3d_dump_on_real_slurm(slurm, tmp_path: Path) -> None:
    out = tmp_path / "dump"
    r = iorch(
        "slurm",
        "submit",
        "bips3d",
        "--nodes",
        "1",
        "--io-nodes",
        "1",
        "--ionodes",
        "2",
        "--partition",
        "debug",
        "--time",
        "10",
        "--",
        *_mesh_args(),
        "--parts",
        "8",
        "--load",
        "20",
        "--repeat",
        "1",
        "--assign",
        "metis,idg",
        "--out",
        str(out),
        env=slurm.env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.isdigit()
    assert (tmp_path / f"iorch-bips3d-{job}.sbatch").read_text().startswith("#!/bin/bash")
    st_ = iorch("slurm", "status", job, "--wait", env=slurm.env, cwd=tmp_path)
    log = (tmp_path / f"iorch-bips3d-{job}.out").read_text()
    assert st_.returncode == 0, f"{st_.stdout}\n{log}\n{slurm.logs()}"
    assert "COMPLETED" in st_.stdout and "BIPS3D mesh dump" in st_.stdout  # the report is shown
    assert f"Slurm job {job}: starting Dask workers on localhost" in log
    rows = json.loads((out / "results.json").read_text())
    assert [x["method"] for x in rows] == ["metis", "idg"]
    for x in rows:  # read back here, outside the job: every row
        assert verify_dump(x["path"], load=20) > 0
    assert not slurm.job_pids(), "the job left processes behind"


@pytest.mark.slow
def test_cancelled_dump_leaves_no_partial_checkpoint(slurm, tmp_path: Path) -> None:
    out = tmp_path / "dump"
    r = iorch(
        "slurm",
        "submit",
        "bips3d",
        "--nodes",
        "1",
        "--io-nodes",
        "1",
        "--ionodes",
        "2",
        "--time",
        "10",
        "--",
        "--nodes",
        "200000",
        "--parts",
        "8",
        "--load",
        "200",
        "--repeat",
        "20",
        "--assign",
        "idg",
        "--format",
        "zarr",
        "--out",
        str(out),
        env=slurm.env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    deadline = time.monotonic() + 240
    while not list(out.glob(".*.tmp-*")):  # a stage is being written
        assert time.monotonic() < deadline, (tmp_path / f"iorch-bips3d-{job}.out").read_text()
        time.sleep(0.05)
    slurm.run(["scancel", job])
    state = _wait_job(slurm, job)
    assert state == "CANCELLED", state
    deadline = time.monotonic() + 30
    while slurm.job_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not slurm.job_pids(), "the cancelled job left processes behind"
    assert not list(out.glob(".*.tmp-*")), sorted(p.name for p in out.iterdir())
    for p in out.glob("*.zarr"):  # whatever was committed before the cancel is whole
        assert verify(p) == []


@pytest.mark.slow
def test_submit_to_missing_partition_fails_before_submission(slurm, tmp_path: Path) -> None:
    r = iorch("slurm", "submit", "bips3d", "--partition", "nope", env=slurm.env, cwd=tmp_path)
    assert r.returncode == 2
    msg = " ".join(r.stderr.split())
    assert "partition 'nope' does not exist" in msg and "['debug']" in msg
    assert slurm.run(["squeue", "-h"]).stdout.strip() == ""


@pytest.mark.slow
def test_status_of_unknown_job(slurm) -> None:
    r = iorch("slurm", "status", "99999", env=slurm.env)
    assert r.returncode == 2 and "does not know job 99999" in " ".join(r.stderr.split())
    r = iorch("slurm", "status", "abc", env=slurm.env)
    assert r.returncode == 2 and "not a Slurm job id" in r.stderr


@pytest.mark.slow
def test_jobqueue_cluster_writes_a_stage(slurm, tmp_path: Path, monkeypatch) -> None:
    for k, v in slurm.env.items():
        monkeypatch.setenv(k, v)
    n = 10_000
    values = np.arange(n, dtype=np.float64) * 0.5
    with jobqueue_cluster(
        n_ionodes=1,
        n_compute=1,
        cores=1,
        memory="1GB",
        queue="debug",
        walltime="00:10:00",
        log_directory=str(tmp_path / "logs"),
        local_directory=str(tmp_path),
    ) as io:
        assert len(io.ionodes) == 1 and len(io.compute) == 1
        jobs = slurm.run(["squeue", "-h", "-o", "%j"]).stdout.split()
        assert len(jobs) == 2  # each worker is its own Slurm job
        spec = DatasetSpec("u", (n,), "f8")
        half = n // 2
        parts = [
            Contribution(c, np.arange(c * half, (c + 1) * half), values[c * half : (c + 1) * half])
            for c in range(2)
        ]
        res = write_stage(tmp_path / "u.h5", {"u": (spec, parts)}, cluster=io)
    assert verify(res.path) == []
    assert np.array_equal(orc.open_checkpoint(res.path)["u"], values)
    deadline = time.monotonic() + 30
    while slurm.run(["squeue", "-h"]).stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert slurm.run(["squeue", "-h"]).stdout.strip() == ""


@pytest.mark.slow
def test_parsl_slurm_provider_app(slurm, tmp_path: Path) -> None:
    env = dict(slurm.env)
    script = tmp_path / "parsl_app.py"
    script.write_text(PARSL_APP)
    r = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{slurm.logs()}"
    assert "ok: 4 Parsl apps in a Slurm job wrote 4000 rows" in r.stdout
    deadline = time.monotonic() + 30  # Parsl cancels its block when the config unloads
    while slurm.run(["squeue", "-h"]).stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert slurm.run(["squeue", "-h"]).stdout.strip() == ""


PARSL_APP = """
import numpy as np
import parsl

import orchestrator as orc
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.stage import write_stage
from orchestrator.engine.verify import verify
from orchestrator.workflows.bips3d import verify_dump
from orchestrator.engine.cluster import local_cluster
from orchestrator.plugins.parsl import output_app
from orchestrator.plugins.slurm import parsl_config

if __name__ == "__main__":
    with local_cluster(n_ionodes=2, n_compute=1) as io:

        @output_app(target="ck/step{step}.h5", clients=4)
        def save(step, rank, inputs=(), outputs=()):
            import os
            import numpy as np

            assert os.environ.get("SLURM_JOB_ID"), "not running inside a Slurm job"
            rows = np.arange(rank * 1000, (rank + 1) * 1000)
            return rows, rows * 2.0 + step

        cfg = parsl_config(io.address, partition="debug", walltime="00:10:00",
                           max_workers_per_node=4, run_dir="runinfo")
        with parsl.load(cfg):
            ck = [save(3, r) for r in range(4)][0].result(timeout=240)
    u = orc.open_checkpoint(ck.path)["save"]
    assert np.array_equal(u, np.arange(4000) * 2.0 + 3)
    print("ok: 4 Parsl apps in a Slurm job wrote", len(u), "rows")
"""
