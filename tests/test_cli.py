"""The real `iorch` console script, run as a user would."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator as orc

IORCH = str(Path(sys.executable).with_name("iorch"))


def run(*args, check=True):
    p = subprocess.run([IORCH, *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"iorch {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
    return p


def test_workload_then_schedule_writes_plan_and_gantt(tmp_path):
    t = tmp_path / "t.csv"
    run("workload", "bidding", "--out", str(t), "--ionodes", "8", "--busy", "0.25", "--seed", "1")
    out, png = tmp_path / "plan.csv", tmp_path / "plan.png"
    p = run("schedule", "--transfers", str(t), "--policy", "ecf", "--out", str(out),
            "--gantt", str(png))  # fmt: skip
    assert "makespan" in p.stdout and "lower_bound" in p.stdout
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    ts = orc.TransferSet.from_csv(t)
    plan = orc.schedule(ts, "ecf")
    assert [int(r["transfer"]) for r in rows] == plan.order.tolist()
    assert float(rows[-1]["end"]) <= plan.makespan
    assert png.stat().st_size > 1000


def test_schedule_reports_bad_input_without_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("client,ionode,nbytes\n0,0,-3\n")
    p = run("schedule", "--transfers", str(bad), check=False)
    assert p.returncode == 2
    assert "column 'nbytes': value -3 at index 0" in p.stderr and "Traceback" not in p.stderr
    good = tmp_path / "good.csv"
    good.write_text("client,ionode,nbytes\n0,0,3\n")
    p = run("schedule", "--transfers", str(good), "--policy", "nope", check=False)
    assert p.returncode == 2 and "unknown policy 'nope'" in p.stderr


def test_cost_json_round_trip_through_the_cli(tmp_path):
    p = run("cost", "modern")
    cm = orc.CostModel.from_json(p.stdout)
    assert cm == orc.get_cost_model("modern")
    f = tmp_path / "slow.json"
    f.write_text(cm.replace(disk_bandwidth=1e6, name="slow").to_json())
    t = tmp_path / "t.csv"
    t.write_text("client,ionode,nbytes\n0,0,1000000\n")
    p = run("schedule", "--transfers", str(t), "--cost", str(f), "--policy", "fcfs")
    assert "slow cost model" in p.stdout


@pytest.mark.slow
def test_bench_schedulers_prints_ratios_and_writes_plots(tmp_path):
    p = run("bench", "schedulers", "--quick", "--no-timings", "--out", str(tmp_path))
    for label in ("MS/ECF ÷ ECF", "MS/ML ÷ MWM", "best bidding ÷ HDF", "sweep 'large'"):
        assert label in p.stdout
    for name in ("ionodes", "busy", "large"):
        assert (tmp_path / f"sweep_{name}.png").stat().st_size > 1000
    with open(tmp_path / "sweeps.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["policy"] for r in rows} == set(orc.policies())
    assert all(float(r["makespan"]) >= float(r["lower_bound"]) * (1 - 1e-9) for r in rows)


def test_policies_listing():
    p = run("policies")
    for name in orc.policies():
        assert name in p.stdout
