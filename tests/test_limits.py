"""Sizes that would exhaust memory or disk get an error naming the value.

Each case runs in a child process whose address space is capped at 4 GiB: a
missing check shows up as a MemoryError there, never as an out-of-memory kill
of the machine running the tests.
"""

import subprocess
import sys
import textwrap

import pytest

CASES = {
    "client id 2e9": (
        "orc.schedule(orc.TransferSet([0, 2_000_000_000], [0, 1], [10, 10]), 'ecf')",
        "TransferSetError: 2,000,000,001 clients (largest client id 2000000000)",
    ),
    "client id 2**31-2": (
        "orc.TransferSet([0, 2**31 - 2], [0, 0], [10, 10])",
        "TransferSetError: 2,147,483,647 clients",
    ),
    "I/O node id 2e9": (
        "orc.TransferSet([0, 1], [0, 2_000_000_000], [10, 10])",
        "largest I/O node id 2000000000",
    ),
    "block_size=1 on 400 MB": (
        "orc.schedule(orc.TransferSet([0, 1], [0, 1], [200_000_000] * 2), 'uar', block_size=1)",
        "PolicyError: block_size=1: the 400,000,000 pieces of these transfers need about",
    ),
    "a dataset of 2**40 rows": (
        "orc.write_stage(pathlib.Path(tempfile.mkdtemp()) / 'x.h5', "
        "{'u': (orc.DatasetSpec('u', (2**40, 8), 'f8'), "
        "[orc.Contribution(0, [0], [[0.0] * 8])])})",
        "StorageError: the datasets of x.h5 (1) need 64.0 TiB on the disk",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_size_beyond_the_machine_is_a_clear_error(case):
    code, message = CASES[case]
    script = textwrap.dedent(f"""
        import pathlib, resource, tempfile
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        import orchestrator as orc
        try:
            {code}
        except orc.OrchestratorError as err:
            print(f"{{type(err).__name__}}: {{err}}")
        else:
            print("ACCEPTED")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert message in run.stdout, run.stdout


def test_write_bench_refuses_a_size_the_disk_cannot_hold(tmp_path):
    from pathlib import Path

    iorch = str(Path(sys.executable).with_name("iorch"))
    run = subprocess.run(
        [iorch, "write-bench", "--size", "1e15", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "--size 1e15" in run.stdout + run.stderr and "Traceback" not in run.stderr
