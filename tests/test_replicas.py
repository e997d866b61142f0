"""Replica sets and replica assignment (IDG and baselines) against plain-Python oracles,
the IDG paper's example, and the real BIPS3D mesh."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from orchestrator.workflows.mesh import read_metis_graph, read_metis_partition

from orchestrator import ReplicaError, ReplicaSets, assign, interval_stats, replica_sets
from orchestrator.testing.oracles import SplitMix64

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bips3d-mesh2"
if not DATA.exists():  # the shared data sits beside the checkout on these machines
    DATA = Path("/work/shared/data/bips3d-mesh2")


def oracle_sets(nbrs, part, halo):
    out = []
    for v in range(len(part)):
        reach, frontier = {v}, {v}
        for _ in range(halo):
            frontier = {w for u in frontier for w in nbrs[u]} - reach
            reach |= frontier
        others = sorted({part[w] for w in reach} - {part[v]})
        out.append([part[v], *others])
    return out


def oracle_assign(sets, method, seed=0):
    writer = []
    rng = SplitMix64(seed)
    for v, s in enumerate(sets):
        if method == "metis":
            writer.append(s[0])
        elif method == "first":
            writer.append(min(s))
        elif method == "random":
            writer.append(s[rng.below(len(s))] if len(s) > 1 else s[0])
        elif len(s) == 1:  # idg, local node
            writer.append(s[0])
        elif v > 0 and writer[v - 1] in s:
            writer.append(writer[v - 1])
        elif v + 1 < len(sets) and sets[v + 1][0] in s:
            writer.append(sets[v + 1][0])
        else:
            writer.append(s[0])
    return writer


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 30))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    nbrs = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    part = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    return [sorted(x) for x in nbrs], part


def csr(nbrs):
    xadj = np.cumsum([0] + [len(x) for x in nbrs])
    adj = np.array([w for x in nbrs for w in x], dtype=np.int64)
    return xadj, adj


@settings(max_examples=500, deadline=None)
@given(graphs(), st.integers(1, 3), st.integers(0, 2**32))
def test_replica_sets_and_every_method_match_oracles(g, halo, seed):
    nbrs, part = g
    rs = replica_sets(*csr(nbrs), np.array(part), halo=halo, n_parts=5)
    sets = [rs[v].tolist() for v in range(len(part))]
    assert sets == oracle_sets(nbrs, part, halo)
    for method in ("metis", "first", "random", "idg"):
        writer = assign(rs, part, method, seed=seed)
        assert writer.tolist() == oracle_assign(sets, method, seed)
        assert all(w in s for w, s in zip(writer.tolist(), sets, strict=True))


def test_the_idg_papers_example_mesh():
    # Filgueira et al., Table 1 (neighbours, METIS distribution) -> Table 2 (IDG)
    nbrs = [[1, 3], [0, 4, 7], [4, 5, 6, 7], [0, 5, 7], [1, 2, 6], [2, 3, 7], [2, 4], [1, 2, 3, 5]]
    part = np.array([0, 0, 1, 0, 1, 0, 1, 0])
    rs = replica_sets(*csr(nbrs), part)
    assert [rs[v].tolist() for v in range(8)] == [
        [0],
        [0, 1],
        [1, 0],
        [0],
        [1, 0],
        [0, 1],
        [1],
        [0, 1],
    ]
    assert assign(rs, part, "idg").tolist() == [0, 0, 0, 0, 0, 0, 1, 1]
    assert rs.replicated_fraction == 5 / 8  # nodes 1, 2, 4, 5, 7 are shared (the paper)


@pytest.mark.skipif(not DATA.exists(), reason="the shared BIPS3D data is not on this machine")
def test_real_bips3d_mesh_reproduces_the_measured_facts():
    xadj, adj = read_metis_graph(DATA / "mesh.graph")
    assert (xadj.size - 1, adj.size // 2) == (32888, 210437)  # the paper's Table 3
    for k, shared, metis_intervals in ((8, 0.083, 204.0), (64, 0.349, 99.1)):
        part = read_metis_partition(DATA / f"mesh.graph.part.{k}", xadj.size - 1)
        rs = replica_sets(xadj, adj, part, halo=1)
        assert rs.replicated_fraction == pytest.approx(shared, abs=5e-4)
        assert interval_stats(part, k).intervals_per_writer == pytest.approx(
            metis_intervals, abs=0.05
        )
        idg = interval_stats(assign(rs, part, "idg"), k).intervals_per_writer
        assert idg < metis_intervals / 1.9  # IDG at least halves the intervals here


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_edge_cut_counts_each_cut_edge_once(g):
    from orchestrator.workflows.mesh import edge_cut

    nbrs, part = g
    want = sum(1 for a in range(len(nbrs)) for b in nbrs[a] if a < b and part[a] != part[b])
    assert edge_cut(*csr(nbrs), np.array(part)) == want


@pytest.mark.skipif(not DATA.exists(), reason="the shared BIPS3D data is not on this machine")
def test_metis_partition_of_the_real_mesh_is_balanced_and_cuts_like_the_papers():
    from orchestrator.workflows.mesh import edge_cut, partition

    xadj, adj = read_metis_graph(DATA / "mesh.graph")
    ours = partition(xadj, adj, 8, seed=1)
    assert ours.tolist() == partition(xadj, adj, 8, seed=1).tolist()  # seeded
    sizes = np.bincount(ours, minlength=8)
    assert sizes.min() > 0 and sizes.max() / sizes.mean() < 1.05
    theirs = read_metis_partition(DATA / "mesh.graph.part.8", xadj.size - 1)
    cut_ours, cut_theirs = edge_cut(xadj, adj, ours), edge_cut(xadj, adj, theirs)
    assert 0 < cut_ours < 1.5 * cut_theirs  # METIS-quality: same order as the paper's partition


@pytest.mark.skipif(not DATA.exists(), reason="the shared BIPS3D data is not on this machine")
def test_table4_rows_of_the_real_mesh():
    from orchestrator.workflows.idgbench import PAPER_TABLE4, table4

    rows = table4(DATA / "mesh.graph", real_parts=(8, 64), generated=(), halos=(1, 2))
    got = {r.parts: r for r in rows}
    assert sorted(got) == [8, 64]
    assert got[8].metis[0] == pytest.approx(204.0, abs=0.05)  # the paper: 203.8
    assert got[64].metis[0] == pytest.approx(PAPER_TABLE4[2][64][0], abs=0.05)  # 99.1 exactly
    assert got[8].idg[1][0] == pytest.approx(103.6, abs=0.05)
    assert got[8].idg[2][0] == pytest.approx(76.4, abs=0.05)
    for r in rows:  # deeper replicas leave IDG more to group, never less
        assert r.idg[2][0] <= r.idg[1][0] < r.metis[0]
        assert r.idg[1][1] * r.idg[1][0] * r.parts == pytest.approx(r.nodes)


def test_replica_inputs_are_checked_and_named():
    with pytest.raises(ReplicaError, match="row 1 has an empty replica set"):
        ReplicaSets(np.array([0, 1, 1]), np.array([0]))
    with pytest.raises(ReplicaError, match=r"clients\[1\] = -2 \(row 1\) is negative"):
        ReplicaSets.from_lists([[0], [-2]])
    with pytest.raises(ReplicaError, match="indptr must start at 0 and end at len"):
        ReplicaSets(np.array([0, 3]), np.array([0, 1]))
    rs = ReplicaSets.from_lists([[0], [0, 1], [1, 0]])
    with pytest.raises(ReplicaError, match=r"row 2: partition says 0 but its replica set starts"):
        assign(rs, [0, 0, 0])
    with pytest.raises(ReplicaError, match="partition has 2 entries for 3 rows"):
        assign(rs, [0, 0])
    with pytest.raises(ReplicaError, match="unknown assignment method 'owner'"):
        assign(rs, method="owner")
    with pytest.raises(ReplicaError, match="replicas must be a ReplicaSets"):
        assign([[0], [0, 1]])
    xadj, adj = np.array([0, 1, 2]), np.array([1, 0])
    with pytest.raises(ReplicaError, match="halo must be an integer >= 1, got 0"):
        replica_sets(xadj, adj, [0, 1], halo=0)
    with pytest.raises(ReplicaError, match=r"partition\[1\] = -1 is negative"):
        replica_sets(xadj, adj, [0, -1])
    with pytest.raises(ReplicaError, match=r"indices holds node 5, outside 0\.\.1"):
        replica_sets(xadj, np.array([5, 0]), [0, 1])
    with pytest.raises(ReplicaError, match="indptr has 3 entries for 3 nodes"):
        replica_sets(xadj, adj, [0, 1, 1])
    with pytest.raises(ReplicaError, match="n_writers = 1 but writer id 2 appears"):
        interval_stats([0, 2], 1)
    with pytest.raises(ReplicaError, match=r"writers\[1\] = -1 is negative"):
        interval_stats([0, -1])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=60), st.integers(7, 9))
def test_interval_stats_match_a_direct_count(writers, k):
    s = interval_stats(writers, k)
    runs = [w for i, w in enumerate(writers) if i == 0 or writers[i - 1] != w]
    assert s.intervals.tolist() == [runs.count(c) for c in range(k)]
    rows = [writers.count(c) for c in range(k)]
    assert s.total_intervals == len(runs) and s.intervals_per_writer == len(runs) / k
    assert s.mean_interval_length == len(writers) / len(runs)
    assert s.load_balance == pytest.approx((max(rows) - min(rows)) / (len(writers) / k))
