"""``iorch bench hio``: the simulator sweeps keep HIO <= SIO <= NIO, the picture's
example is the paper's best case, and the command writes its results and plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.bench import hio
from orchestrator.errors import InputError
from orchestrator.reads import simulate_reads


def test_the_sweeps_keep_hio_below_sio_below_nio() -> None:
    rows = hio.run(seeds=2, quick=True)
    assert {r["sweep"] for r in rows} == set(hio.SWEEPS)
    for r in rows:
        assert r["ordered"], r
        assert r["hio"] <= r["sio"] <= r["nio"]
        assert 0 < r["shuffle_share"] < 1


def test_the_workload_is_the_papers_shape() -> None:
    rs = hio.workload(n_apps=3, n_nodes=4, n_aggs=2, request=1 << 20, seed=5)
    assert rs.n_apps == 3 and rs.n_nodes == 4
    # every aggregator reads its whole domain, spread over the nodes its stripes hit
    per_agg = {}
    for g, r in zip(rs.agg.tolist(), rs.read.tolist(), strict=True):
        per_agg[g] = per_agg.get(g, 0.0) + r
    assert len(per_agg) == 6
    # each node's queue is a permutation: arrivals 0..q-1
    for k in range(4):
        mine = sorted(rs.arrival[rs.node == k].tolist())
        assert mine == list(range(len(mine)))


def test_the_example_is_eq6() -> None:
    m = 4
    rs = hio.example(m)
    sio = simulate_reads(rs, "sio", window=hio.WINDOW).mean
    mix = simulate_reads(rs, "hio", window=hio.WINDOW, interleave=True).mean
    assert mix == pytest.approx(1 + 3 * m)
    assert sio - mix == pytest.approx((m - 1) / 2)


def test_bad_seeds_are_named() -> None:
    with pytest.raises(InputError, match="seeds"):
        hio.run(seeds=0)


def test_the_command_writes_results_and_plots(tmp_path) -> None:
    iorch = str(Path(sys.executable).with_name("iorch"))
    res = subprocess.run(
        [iorch, "bench", "hio", "--seeds", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads((tmp_path / "results.json").read_text())
    assert len(rows) == sum(len(xs) for _, xs, _ in hio.SWEEPS.values())
    assert (tmp_path / "hio-sweeps.png").stat().st_size > 10_000
    assert (tmp_path / "hio-service.png").stat().st_size > 10_000
    assert "best HIO vs NIO" in res.stdout
