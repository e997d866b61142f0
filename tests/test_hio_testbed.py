"""Concurrent restarts for real: the I/O nodes' emulation hooks (a held gate, an
emulated disk rate, independent arrivals), and one point of ``iorch bench hio
--testbed`` on a real emulated cluster, checked against the simulator's order."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from readtasks import empty_request

from orchestrator import testbed
from orchestrator.bench import hio_testbed as ht
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine import readserver
from orchestrator.engine.cluster import local_cluster
from orchestrator.engine.readstage import read_stage
from orchestrator.engine.stage import write_stage
from orchestrator.errors import InputError

N = 3000
TRUTH_U = np.random.default_rng(0).random((N, 3))


def _write(cluster, folder: Path) -> Path:
    target = folder / "ck.h5"
    parts = [Contribution(c, np.arange(c, N, 4), TRUTH_U[c::4]) for c in range(4)]
    write_stage(
        target,
        {"u": (DatasetSpec("u", (N, 3), "float64"), parts)},
        cluster=cluster,
        stripe_bytes=4096,
    )
    return target


def _requests() -> list[dict]:
    blocks = np.linspace(0, N, 4).astype(int)
    return [{"u": range(max(0, lo - 40), min(N, hi + 40))} for lo, hi in itertools.pairwise(blocks)]


def _needs_testbed() -> None:
    why = testbed.available()
    if why is not None:
        if os.environ.get("IORCH_REQUIRE_TESTBED") == "1":
            pytest.fail(f"IORCH_REQUIRE_TESTBED=1 but {why}")
        pytest.skip(why)


def test_a_closed_gate_holds_every_request_until_opened_and_inject_never_strands_one() -> None:
    readserver.inject(hold=True)
    try:
        server = readserver._server(11)
        reqs = [server.submit(empty_request(a, "sio", node=11)) for a in (2, 0, 1)]
        time.sleep(0.2)
        assert readserver.queued() >= 3  # nothing started: the disk is held
        assert not any(r.done.is_set() for r in reqs)
        opened = readserver.open_gate()
        for r in reqs:
            assert r.done.wait(120)
        assert all(r.start >= opened for r in reqs)
        assert sorted(reqs, key=lambda r: r.position) == [reqs[1], reqs[2], reqs[0]]  # sio
        # closed again, then every hook removed: what waited is served, not stranded
        readserver.inject(hold=True)
        late = server.submit(empty_request(5, "sio", node=11))
        time.sleep(0.1)
        assert not late.done.is_set()
    finally:
        readserver.inject()
    assert late.done.wait(60)
    assert readserver.queued() == 0


def test_an_emulated_disk_makes_each_request_last_its_bytes_at_the_rate(tmp_path: Path) -> None:
    rate = 2e6
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        target = _write(cl, tmp_path)
        cl.client.run(readserver.inject, rate=rate, jitter=0.05, seed=3, workers=cl.ionodes)
        try:  # pipelined (the tasks copy stripes as their flags turn): paced stripe by stripe
            res = read_stage(target, _requests(), cluster=cl, policy="sio", aggregators=2)
        finally:
            cl.client.run(readserver.inject, workers=cl.ionodes)
        assert res.served and all(s["bytes"] > 0 for s in res.served)
        for s in res.served:  # one at a time per node, each at least its bytes ÷ rate
            assert s["end"] - s["start"] >= s["bytes"] / rate
        # the rows are still right: the emulation only slows the disk
        for want, got in zip(_requests(), res.gather(), strict=True):
            assert np.array_equal(got["u"], TRUTH_U[np.asarray(want["u"])])


def test_the_testbed_benchmark_refuses_bad_sweeps() -> None:
    with pytest.raises(InputError, match="apps"):
        ht.run(apps=(0,))
    with pytest.raises(InputError, match="seeds"):
        ht.run(apps=(2,), seeds=0)
    with pytest.raises(InputError, match="aggregators"):
        ht.run(apps=(2,), aggregators=0)
    with pytest.raises(InputError, match="compute_link"):
        ht.run(apps=(2,), compute_link=float("nan"))
    with pytest.raises(InputError, match="mb_per_app"):
        ht.run(apps=(2,), mb_per_app=-1)


def test_concurrent_restarts_on_a_testbed_follow_the_simulators_order(tmp_path: Path) -> None:
    _needs_testbed()
    prof = testbed.get_profile("cluster2004")
    disk = 8e6  # faster than the profile's disk: a short test
    with testbed.up(prof, 2, 2) as tb, tb.connect() as cl:
        path = tmp_path / "ck.h5"
        n = ht._checkpoint(cl, path, 1.0)
        from orchestrator.engine.readstage import measure_links

        links = measure_links(cl)
        assert links.b_inter < 2 * prof.compute.rate  # measured across a shaped link
        cal = ht.Calibration(disk, 0.0, 0.0, links.b_intra, links.b_inter, links.gamma)
        for policy in ("nio", "sio"):
            raw = ht.run_point(cl, path, n, 3, policy, disk, seed=1, cost=prof.cost_model())
            row = ht.predict(raw, cal)
            assert row["same_order"], policy  # each node served in the simulator's order
            reqs = raw["requests"]
            assert len(reqs) == 3 * 2 * 2  # 3 applications, 2 domains, 2 nodes
            assert min(q["start"] for q in reqs) >= 0  # nothing served before all arrived
            assert all(q["end"] - q["start"] >= q["bytes"] / disk for q in reqs)
            for i, t in enumerate(raw["realized"]):  # an application ends after its reads
                assert t >= max(q["end"] for q in reqs if q["app"] == i)
            if policy == "sio":  # one application after another, the same on both nodes
                firsts = [
                    [
                        reqs[k]["app"]
                        for k in sorted(
                            (k for k, q in enumerate(reqs) if q["node"] == node),
                            key=lambda k: reqs[k]["position"],
                        )
                    ]
                    for node in (0, 1)
                ]
                assert firsts[0] == sorted(firsts[0]) and firsts[0] == firsts[1]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rate": -1.0}, "rate"),
        ({"rate": float("nan")}, "rate"),
        ({"jitter": float("inf")}, "jitter"),
        ({"delay": "1"}, "delay"),
        ({"rate": True}, "rate"),
        ({"hold": "yes"}, "hold"),
    ],
)
def test_the_hooks_refuse_bad_values_and_keep_what_was_set(kwargs, field) -> None:
    readserver.inject(rate=5e6)
    try:
        with pytest.raises(InputError, match=field):
            readserver.inject(**kwargs)
        assert readserver._FAULTS.get("rate") == 5e6  # a refused call changed nothing
    finally:
        readserver.inject()
    assert not readserver._FAULTS


def test_read_stage_refuses_a_cost_model_it_cannot_use(tmp_path: Path) -> None:
    with local_cluster(n_ionodes=1, n_compute=1) as cl:
        target = _write(cl, tmp_path)
        with pytest.raises(InputError, match="cost must be"):
            read_stage(target, _requests(), cluster=cl, cost=None)
        with pytest.raises(InputError, match="'laptop'"):
            read_stage(target, _requests(), cluster=cl, cost="laptop")
        # a model of another disk is taken: only HIO's estimates change, not the rows
        res = read_stage(target, _requests(), cluster=cl, cost="cluster2004")
        for want, got in zip(_requests(), res.gather(), strict=True):
            assert np.array_equal(got["u"], TRUTH_U[np.asarray(want["u"])])


def _iorch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    iorch = str(Path(sys.executable).with_name("iorch"))
    return subprocess.run([iorch, *args], capture_output=True, text=True, timeout=timeout)


def test_the_command_names_a_bad_application_count() -> None:
    res = _iorch("bench", "hio", "--testbed", "--apps", "2,zero")
    assert res.returncode != 0
    assert "--apps" in res.stdout + res.stderr and "zero" in res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr


def test_the_command_refuses_a_testbed_option_without_the_testbed(tmp_path: Path) -> None:
    for option in (["--apps", "2"], ["--compute-link", "4"], ["--aggregators", "3"]):
        res = _iorch("bench", "hio", *option, "--out", str(tmp_path))
        assert res.returncode != 0
        said = res.stdout + res.stderr
        assert option[0] in said and "--testbed" in said and "Traceback" not in said
        assert not (tmp_path / "results.json").exists()  # nothing ran


def test_the_command_runs_the_sweep_on_a_testbed(tmp_path: Path) -> None:
    _needs_testbed()
    before = {r["id"] for r in testbed.status()}  # another run's may come and go
    res = _iorch("bench", "hio", "--testbed", "--apps", "2", "--seeds", "1", "--out", str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads((tmp_path / "results-testbed.json").read_text())
    assert [r["policy"] for r in out["rows"]] == ["nio", "sio", "hio"]
    assert all(r["same_order"] for r in out["rows"])  # HIO too: its order from the nodes' estimates
    assert out["summary"][0]["apps"] == 2 and "hio_is_sio" in out["summary"][0]
    assert out["calibration"]["disk"] == testbed.get_profile("cluster2004").disk
    assert (tmp_path / "hio-testbed.png").stat().st_size > 10_000
    assert "realized ÷ simulated over 3 runs" in res.stdout
    assert {r["id"] for r in testbed.status()} <= before  # the command took its testbed down


def test_a_gate_closed_again_while_a_node_waits_still_holds_it() -> None:
    readserver.inject(hold=True)
    try:
        server = readserver._server(12)
        req = server.submit(empty_request(1, "nio", node=12))
        time.sleep(0.1)
        readserver.inject(hold=True)  # a new gate: the old one opens as it is replaced
        time.sleep(0.7)  # longer than the node's re-check of the gate
        assert not req.done.is_set()
        assert readserver.queued() >= 1
        readserver.open_gate()
        assert req.done.wait(60)
    finally:
        readserver.inject()


def _rows(times: dict[str, float], same: bool = True) -> list[dict]:
    return [
        {"apps": 4, "policy": p, "realized_mean": t, "simulated_mean": t, "ratio": 1.0,
         "hio_is_sio": same}
        for p, t in times.items()
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("times", "same", "ordered"),
    [
        ({"nio": 3.0, "sio": 2.0, "hio": 1.9}, False, True),
        ({"nio": 3.0, "sio": 2.0, "hio": 2.01}, False, False),  # HIO its own: no slack
        ({"nio": 3.0, "sio": 2.0, "hio": 2.01}, True, True),  # one policy: a tie
        ({"nio": 3.0, "sio": 2.0, "hio": 2.1}, True, False),  # beyond the tie
        ({"nio": 1.9, "sio": 2.0, "hio": 2.0}, True, False),  # SIO lost to NIO
        ({"nio": 2.0, "sio": 1.99, "hio": 2.02}, True, False),  # HIO lost to NIO
    ],
)
def test_the_summary_says_ordered_only_when_it_is(times, same, ordered) -> None:
    (row,) = ht.summarize(_rows(times, same))
    assert row["ordered"] is ordered
    assert row["hio_is_sio"] is same
    assert row["hio_vs_nio"] == pytest.approx(times["hio"] / times["nio"] - 1)


def test_the_summary_needs_every_policy() -> None:
    with pytest.raises(InputError, match="lack a policy"):
        ht.summarize(
            [r for r in _rows({"nio": 3.0, "sio": 2.0, "hio": 1.0}) if r["policy"] != "sio"]
        )
