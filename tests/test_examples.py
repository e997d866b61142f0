"""Every script in examples/ runs as a user would run it, in a fresh folder."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parents[1] / "examples"
EXAMPLES = sorted(HERE.glob("*.py"))
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def run(args, cwd, timeout=600):
    p = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=ENV
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    out = run([str(script)], tmp_path)
    assert ("MB/s" if script.name == "compare_policies.py" else "ok:") in out


def test_parsl_example_on_a_high_throughput_executor(tmp_path):
    out = run([str(HERE / "parsl_checkpoint.py"), "--htex"], tmp_path)
    assert "ok: Parsl apps wrote 50000 rows" in out


def _kill_group_but_the_tracker(pgid):
    """SIGKILL every process of group ``pgid`` except multiprocessing's resource tracker,
    which then unlinks the named semaphores the killed ones held (killed too, it left 24
    in /dev/shm per run)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # again: a worker may have been starting meanwhile
        left = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z" and b"resource_tracker" not in cmdline:
                left += 1
                try:
                    os.kill(int(stat.parent.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not left:
            return
        time.sleep(0.1)


def test_restart_after_a_real_kill_resumes_and_ends_in_the_same_state(tmp_path):
    (tmp_path / "clean").mkdir()
    clean = run([str(HERE / "restart.py"), "--steps", "10"], tmp_path / "clean")
    killed = tmp_path / "killed"
    killed.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "restart.py"), "--steps", "10", "--pause", "0.5"],
        cwd=killed,
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        seen = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen.append(line)
            if line.startswith("step 3 checkpointed"):
                break
        else:
            pytest.fail("the simulation never reached step 3:\n" + "".join(seen))
        _kill_group_but_the_tracker(proc.pid)  # the script and its Dask workers, mid-run
    finally:
        if proc.poll() is None:
            _kill_group_but_the_tracker(proc.pid)
        proc.wait(timeout=60)
        proc.stdout.close()
    again = run([str(HERE / "restart.py"), "--steps", "10"], killed)
    resumed = int(again.split("resuming after step ")[1].split()[0])
    assert 3 <= resumed < 9
    assert again.splitlines()[-1] == clean.splitlines()[-1]  # same final checksum
    from orchestrator.engine.verify import verify

    for ck in (killed / "checkpoints").glob("sim-step*.h5"):  # every visible one is complete
        assert verify(ck) == []
