"""The real `iorch` console script, run as a user would."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator as orc
from orchestrator.bench import optimal as optbench

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
    p = run(
        "schedule", "--transfers", str(t), "--policy", "ecf", "--out", str(out), "--gantt", str(png)
    )
    assert "makespan" in p.stdout and "lower_bound" in p.stdout
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    ts = orc.TransferSet.from_csv(t)
    plan = orc.schedule(ts, "ecf")
    assert [int(r["transfer"]) for r in rows] == plan.order.tolist()
    assert max(float(r["end"]) for r in rows) == pytest.approx(plan.makespan, rel=1e-12)
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
    # the near-optimal policies have their own benchmark, `iorch bench optimal`
    assert {r["policy"] for r in rows} == set(orc.policies()) - {
        "split-opt",
        "ecf-ls",
        "exact",
        "auto",
    }
    assert all(float(r["makespan"]) >= float(r["lower_bound"]) * (1 - 1e-9) for r in rows)


def test_policies_listing():
    p = run("policies")
    for name in orc.policies():
        assert name in p.stdout


def test_the_module_runs_as_the_command_does():
    """``python -m orchestrator.cli`` is ``iorch`` (where the console script is not on the path)."""
    p = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "policies"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == run("policies").stdout
    bad = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "schedule", "--policy", "nope"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_outputs_are_both_written_or_neither(tmp_path):
    t = tmp_path / "t.csv"
    t.write_text("client,ionode,nbytes\n0,0,3\n1,0,4\n")
    out = tmp_path / "plan.csv"
    p = run(
        "schedule",
        "--transfers",
        str(t),
        "--out",
        str(out),
        "--gantt",
        str(tmp_path / "missing-dir" / "g.png"),
        check=False,
    )
    assert p.returncode == 2 and "missing-dir" in p.stderr
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["t.csv"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", str(2**64)], "seed must be an integer in [0, 2**64)"),
        (["--policy", "uar", "--block-size", "0"], "block_size must be a positive integer, got 0"),
        (["--cost", "broken.json"], "cost model is not valid JSON"),
        (["--cost", "partial.json"], "lacks required field(s) ['disk_bandwidth']"),
        (
            ["--policy", "split-opt", "--option", "min_piece=0"],
            "min_piece must be an integer >= 1, got 0",
        ),
        (
            ["--policy", "exact", "--option", "time_limit=-1"],
            "time_limit must be a number > 0, got -1",
        ),
        (
            ["--policy", "ecf-ls", "--option", "moves"],
            "--option must look like KEY=VALUE, got 'moves'",
        ),
        (
            ["--policy", "auto", "--option", "split=maybe"],
            "split must be True or False, got 'maybe'",
        ),
        (
            ["--policy", "ecf-ls", "--option", "moves=ten"],
            "moves must be an integer >= 1, got 'ten'",
        ),
        (
            ["--policy", "ecf-ls", "--option", "moves=\uff11\uff10"],  # full-width digits
            "moves must be an integer >= 1, got '\uff11\uff10'",
        ),
        (
            ["--policy", "ecf-ls", "--option", "start=zzz"],
            "start must be a policy on whole transfers",
        ),
        (
            ["--policy", "ecf", "--option", "moves=10"],
            "policy 'ecf' has no option 'moves'; its options are none",
        ),
        (
            ["--policy", "exact", "--option", "time_limit=1", "--option", "time_limit=2"],
            "--option time_limit is given twice",
        ),
    ],
)
def test_schedule_bad_options_give_clear_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.json").write_text("{oops")
    (tmp_path / "partial.json").write_text('{"network_bandwidth": 1e9}')
    (tmp_path / "t.csv").write_text("client,ionode,nbytes\n0,0,3\n")
    p = run("schedule", "--transfers", "t.csv", *args, check=False)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr


def test_schedule_split_opt_with_options_writes_pieces_with_offsets(tmp_path):
    t = tmp_path / "t.csv"
    # split-opt cuts transfer 3 here (its decomposition needs two phases of that pair)
    t.write_text("client,ionode,nbytes\n1,2,1000\n1,0,3000\n2,0,4000\n1,1,4000\n2,2,4000\n")
    (tmp_path / "unit.json").write_text('{"network_bandwidth": 1, "disk_bandwidth": 1}')
    out = tmp_path / "plan.csv"
    run(
        "schedule",
        "--transfers",
        str(t),
        "--policy",
        "split-opt",
        "--cost",
        str(tmp_path / "unit.json"),
        "--option",
        "min_piece=1",
        "--option",
        "align=500",
        "--out",
        str(out),
    )
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert "offset" in rows[0]
    assert all(int(r["offset"]) % 500 == 0 for r in rows)
    assert [r["transfer"] for r in rows].count("3") == 2
    assert max(float(r["end"]) for r in rows) == 8000.0  # the lower bound


def test_bench_rejects_zero_seeds():
    p = run("bench", "schedulers", "--quick", "--seeds", "0", check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "seeds" in p.stderr


@pytest.mark.slow
def test_bench_optimal_quick_prints_the_table_and_writes_csv_and_json(tmp_path):
    p = run("bench", "optimal", "--quick", "--exact-limit", "1", "--out", str(tmp_path))
    header = (
        "family",
        "policy",
        "sets",
        "÷ LB mean",
        "÷ LB worst",
        "÷ exact",
        "pieces",
        "messages",
        "sched s",
    )
    for col in header:
        assert col in p.stdout
    fams = [f.name for f in optbench.families(quick=True)]
    table_rows = [line for line in p.stdout.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in table_rows]
    body = [c for c in cells if len(c) == len(header) and c[0] in fams]
    assert {(c[0], c[1]) for c in body} >= {(f, q) for f in fams for q in optbench.POLICIES[:-1]}
    for c in body:
        assert float(c[3]) >= 1.0 - 1e-4 and float(c[4]) >= float(c[3]) - 1e-4
    # the exact optimum is a column only where CP-SAT ran: the small sets have it
    assert all(c[5] != "-" for c in body if c[0] == "small")
    doc = json.loads((tmp_path / "optimal.json").read_text())
    assert set(doc["targets"]) >= {"split-opt <= 1.01 LB", "auto <= 1.02 LB (dense)"}
    assert all(isinstance(v["ok"], bool) for v in doc["targets"].values())
    with open(tmp_path / "optimal.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["family"] for r in rows} == set(fams)
    assert all(float(r["makespan"]) >= float(r["lower_bound"]) * (1 - 1e-9) for r in rows)
    assert {r["policy"] for r in rows if r["family"] == "small"} == set(optbench.POLICIES)


def test_mesh_dump_family_is_what_the_stage_schedules():
    """The mesh-dump family's sets cover the dump's bytes, one transfer per (partition, I/O node)."""
    from orchestrator.bench.optimal import families, mesh_case, mesh_dump_set

    case = mesh_case(8)
    for method in ("metis", "idg"):
        ts = mesh_dump_set(8, method, load=10)
        assert (ts.n_clients, ts.n_ionodes) == (8, 4)
        assert int(ts.nbytes.sum()) == case.n_nodes * 10 * 8  # every row written once
        pairs = set(zip(ts.client.tolist(), ts.ionode.tolist(), strict=True))
        assert len(pairs) == len(ts)  # list I/O: one transfer per pair
    names = [f.name for f in families(quick=False)]
    assert "mesh-idg" in names and "mesh-metis" in names
    assert not any(n.startswith("mesh-") for n in (f.name for f in families(quick=True)))


def test_one_handler_a_user_error_is_one_line_and_2_a_bug_keeps_its_traceback():
    """Every command goes through the one handler: our errors and the files a user named
    end with one line and exit code 2; anything else is a bug and shows where (exit 1)."""
    import typer
    from typer.testing import CliRunner

    from orchestrator.cli._common import handled
    from orchestrator.errors import PolicyError

    app = typer.Typer()

    @app.command()
    def go(kind: str) -> None:
        if kind == "user":
            raise PolicyError("--policy: unknown policy 'ecff'")
        if kind == "file":
            open("/nonexistent/transfers.csv")
        raise KeyError("a bug")

    app.registered_commands[0].callback = handled(go)
    runner = CliRunner()
    for kind, message in (("user", "unknown policy 'ecff'"), ("file", "transfers.csv")):
        res = runner.invoke(app, [kind])
        assert res.exit_code == 2 and message in res.output, (kind, res.output)
    res = runner.invoke(app, ["bug"])
    assert res.exit_code == 1 and isinstance(res.exception, KeyError)
