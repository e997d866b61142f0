"""The BIPS3D-like mesh dump on a real embedded cluster: every assignment method and strategy,
HDF5 and Zarr, checked row by row; the paper's decision rule; the `iorch run bips3d` command."""

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr
from orchestrator.workflows.bips3d import (
    DATASET,
    DecisionRule,
    DumpError,
    dump,
    expected_values,
    load_case,
    make_contributions,
    verify_dump,
)
from orchestrator.workflows.mesh import MeshFormatError

from orchestrator import interval_stats
from orchestrator.engine.cluster import local_cluster
from orchestrator.engine.storage import StorageError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bips3d-mesh2"
if not DATA.exists():
    DATA = Path("/work/shared/data/bips3d-mesh2")
IORCH = str(Path(sys.executable).with_name("iorch"))


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=3, n_compute=2) as cl:
        yield cl


@pytest.fixture(scope="module")
def case():
    return load_case(nodes=4000, parts=5, halo=1, seed=3)


def read_all(path):
    if Path(path).is_dir():
        return np.asarray(zarr.open_group(path, mode="r")[DATASET][...])
    with h5py.File(path, "r") as f:
        return f[DATASET][...]


def test_decision_rule_follows_figure_7_and_can_be_overridden():
    r = DecisionRule()
    myrinet, fast_ethernet = 1.28e9 / 8, 100e6 / 8
    assert [r.choose(69_999, load, myrinet) for load in (89, 90)] == ["two-phase", "list"]
    assert [r.choose(70_000, load, myrinet) for load in (49, 50, 89)] == [
        "two-phase",
        "list",
        "list",
    ]
    assert {r.choose(n, load, fast_ethernet) for n in (1000, 10**6) for load in (1, 500)} == {
        "list"
    }
    assert DecisionRule(small_mesh_load=200).choose(30_000, 150, myrinet) == "two-phase"


def test_values_are_distinct_and_a_function_of_node_and_entry():
    v = expected_values(np.arange(1000), 500)
    assert np.unique(v).size == v.size
    assert expected_values([7], 3).tolist() == [[21.0, 22.0, 23.0]]


COMBOS = [(s, m) for s in ("list", "two-phase") for m in ("metis", "first", "random", "idg")]


@pytest.mark.parametrize("fmt", ["hdf5", "zarr"])
@pytest.mark.parametrize(("strategy", "method"), [*COMBOS, ("sequential", "metis")])
def test_every_method_and_strategy_writes_every_row_correctly(
    cluster, case, tmp_path, fmt, strategy, method
):
    target = tmp_path / f"dump.{'zarr' if fmt == 'zarr' else 'h5'}"
    res = dump(
        case,
        cluster,
        target,
        load=7,
        method=method,
        strategy=strategy,
        format=fmt,
        stripe_bytes=16 << 10,
        seed=2,
    )
    assert np.array_equal(read_all(target), expected_values(np.arange(case.n_nodes), 7))
    assert res.strategy == strategy
    if strategy == "sequential":
        assert res.stats.total_intervals == 1 and res.result.plan.transfers.n_clients == 1
    else:
        held = [set(case.replicas[v].tolist()) for v in range(case.n_nodes)]
        assert all(int(w) in s for w, s in zip(res.writer, held, strict=True))
        want = interval_stats(res.writer, case.n_parts)
        assert res.stats.total_intervals == want.total_intervals
        # every interval is cut into at least one piece, and pieces only at stripe ends
        assert res.pieces >= res.stats.total_intervals
    assert not list(tmp_path.glob(".*tmp*"))  # nothing left beside the committed target
    assert not any(k.startswith(("_contribution", "_gather_root")) for k in cluster.client.futures)


def test_idg_gives_fewer_pieces_than_metis_on_the_same_dump(cluster, tmp_path):
    case = load_case(nodes=6000, parts=8, halo=2, seed=1)
    parts = make_contributions(case, 4, cluster)
    got = {
        m: dump(
            case,
            cluster,
            tmp_path / f"{m}.h5",
            load=4,
            method=m,
            strategy="list",
            contributions=parts,
        )
        for m in ("metis", "idg")
    }
    assert got["idg"].stats.total_intervals < got["metis"].stats.total_intervals
    assert got["idg"].pieces < got["metis"].pieces
    for m in got:
        assert verify_dump(tmp_path / f"{m}.h5", 4) == case.n_nodes


def test_auto_uses_the_cost_models_network(cluster, case, tmp_path):
    from orchestrator.cost import get_cost_model

    slow = get_cost_model("cluster2004")  # Myrinet: fast network in the paper's sense
    small = dump(case, cluster, tmp_path / "a.h5", load=10, strategy="auto", cost=slow)
    big = dump(case, cluster, tmp_path / "b.h5", load=120, strategy="auto", cost=slow)
    assert (small.strategy, big.strategy) == ("two-phase", "list")


@pytest.mark.skipif(not DATA.exists(), reason="the shared BIPS3D data is not on this machine")
def test_the_real_mesh_with_its_own_partition(cluster, tmp_path):
    case = load_case(DATA / "mesh.graph", parts=8)  # uses mesh.graph.part.8 beside it
    assert (case.n_nodes, case.n_parts) == (32888, 8)
    res = dump(
        case,
        cluster,
        tmp_path / "mesh2.zarr",
        load=3,
        method="idg",
        format="zarr",
        strategy="list",
        stripe_bytes=64 << 10,
    )
    assert res.stats.intervals_per_writer == pytest.approx(103.6, abs=0.05)
    assert verify_dump(tmp_path / "mesh2.zarr", 3) == 32888


def test_a_corrupted_row_is_named(cluster, case, tmp_path):
    target = tmp_path / "dump.h5"
    dump(case, cluster, target, load=5, strategy="list")
    with h5py.File(target, "r+") as f:
        f[DATASET][1234, 2] = -1.0
    with pytest.raises(DumpError, match=r"row 1234 holds"):
        verify_dump(target)
    with pytest.raises(DumpError, match="expected load 6"):
        verify_dump(target, 6)


def test_bad_arguments_and_existing_targets(cluster, case, tmp_path):
    with pytest.raises(ValueError, match="load must be an integer"):
        dump(case, cluster, tmp_path / "x.h5", load=0)
    with pytest.raises(ValueError, match="unknown assignment method 'best'"):
        dump(case, cluster, tmp_path / "x.h5", method="best")
    with pytest.raises(ValueError, match="unknown strategy 'collective'"):
        dump(case, cluster, tmp_path / "x.h5", strategy="collective")
    target = tmp_path / "x.h5"
    dump(case, cluster, target, load=2)
    before = target.read_bytes()
    with pytest.raises(StorageError, match="exists"):
        dump(case, cluster, target, load=3)
    assert target.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"]


def test_load_case_inputs(tmp_path):
    with pytest.raises(MeshFormatError, match="either a mesh file or a number of nodes"):
        load_case()
    with pytest.raises(MeshFormatError, match="no such mesh file"):
        load_case(tmp_path / "nope.graph")
    from orchestrator.workflows.mesh import write_mesh
    from orchestrator.workflows.meshgen import generate_mesh

    write_mesh(generate_mesh(800, seed=2), tmp_path / "m.vtu")
    c = load_case(tmp_path / "m.vtu", parts=3, halo=2)
    assert (c.n_nodes, c.n_parts, c.halo) == (800, 3, 2)
    (tmp_path / "p.txt").write_text("\n".join(["1"] * 800))
    c = load_case(tmp_path / "m.vtu", parts=2, partition_file=tmp_path / "p.txt")
    assert c.partition.tolist() == [1] * 800 and c.n_parts == 2


def test_iorch_run_bips3d_end_to_end(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(
        [
            IORCH,
            "run",
            "bips3d",
            "--nodes",
            "3000",
            "--parts",
            "4",
            "--load",
            "8",
            "--repeat",
            "1",
            "--ionodes",
            "2",
            "--format",
            "zarr",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    for m in ("metis", "random", "first", "idg"):
        assert f"│ {m:>10} │" in p.stdout
        assert (out / f"gantt-{m}.png").stat().st_size > 0
        assert verify_dump(out / f"bips3d-{m}.zarr", 8) == 3000
    rows = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in rows] == ["metis", "first", "random", "idg"]
    assert (out / "interval-map.png").stat().st_size > 0
    assert not list(out.glob(".bips3d-warmup*"))


def test_iorch_run_bips3d_rejects_bad_options(tmp_path):
    p = subprocess.run(
        [IORCH, "run", "bips3d", "--nodes", "100", "--assign", "idg,best", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "--assign: unknown method 'best'" in p.stderr
    assert not any(tmp_path.iterdir())


def test_network_bandwidth_is_measured_between_workers(cluster):
    before = set(cluster.client.futures)
    bw = cluster.network_bandwidth(nbytes=4 << 20, repeats=2)
    assert 1e6 < bw < 1e12  # loopback TCP: hundreds of MB/s to a few GB/s, never free
    assert set(cluster.client.futures) <= before  # the probe arrays are released
