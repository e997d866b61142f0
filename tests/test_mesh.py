"""Mesh inputs and generated meshes: METIS files (strict and repaired), meshio round trips,
nodal graphs from cells, the Kuhn-lattice kernel against the cells it stands for, renumbering."""

import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from orchestrator.workflows.mesh import (
    MeshFormatError,
    MeshRepairWarning,
    nodal_graph,
    read_mesh,
    read_metis_graph,
    read_metis_partition,
    write_mesh,
)
from orchestrator.workflows.meshgen import generate_mesh, kuhn_cells, renumber

from orchestrator.kernels.meshgraph import kuhn_graph


def graph_sets(indptr, indices):
    return [set(indices[indptr[v] : indptr[v + 1]].tolist()) for v in range(indptr.size - 1)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3 2\n2\n1 3\n", "header says 3 vertices but the file has 2 vertex lines"),
        ("3 5\n2\n1 3\n2\n", "header says 5 edges but the body lists 4 neighbour entries"),
        ("3 2\n2\n1 4\n2\n", "line 3: neighbour 4 of vertex 2 is outside 1..3"),
        ("3 2\n2\n1 2\n2\n", "line 3: neighbour 2 of vertex 2 is the vertex itself"),
        ("3 2\n2\n1 3\n\n", "line 3: vertex 2 lists neighbour 3, but vertex 3 (line 4)"),
        ("x y\n", "line 1: header 'x y' is not 'n_vertices n_edges'"),
        ("2 1\n2 q\n1\n", "line 2: '2 q' holds a non-integer"),
    ],
)
def test_malformed_graphs_name_file_line_and_value(tmp_path, text, message):
    p = tmp_path / "bad.graph"
    p.write_text(text)
    with pytest.raises(MeshFormatError, match=re.escape(f"{p}")) as err:
        read_metis_graph(p)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("text", "assumed"),
    [
        ("4 2\n2\n1 3\n2\n", "assumed 3 vertices (the body)"),
        ("3 9\n2\n1 3\n2\n", "assumed 2 edges (the body)"),
        ("3 2\n2 7\n1 3\n2 3\n", "dropped 2 neighbour entries outside 1..3 or self loops"),
        ("3 2\n2\n1 3\n\n", "made one-sided edges two-sided"),
    ],
)
def test_repair_is_explicit_and_says_what_it_assumed(tmp_path, text, assumed):
    p = tmp_path / "bad.graph"
    p.write_text(text)
    with pytest.raises(MeshFormatError):
        read_metis_graph(p)
    with pytest.warns(MeshRepairWarning, match=re.escape(assumed)):
        indptr, indices = read_metis_graph(p, repair=True)
    assert graph_sets(indptr, indices) == [{1}, {0, 2}, {1}]  # the path every variant meant


def test_malformed_partitions_and_their_repair(tmp_path):
    p = tmp_path / "g.part"
    p.write_text("0\n-1\n")
    with pytest.raises(MeshFormatError, match=rf"{re.escape(str(p))}, line 2: part id -1"):
        read_metis_partition(p, 2)
    with pytest.warns(MeshRepairWarning, match="assumed part 0"):
        assert read_metis_partition(p, 2, repair=True).tolist() == [0, 0]
    p.write_text("0\n1\n")
    with pytest.raises(MeshFormatError, match="2 part ids for a graph of 3 vertices"):
        read_metis_partition(p, 3, repair=True)  # too short: nothing sound to assume
    p.write_text("0\n1\n1\n")
    with pytest.raises(MeshFormatError, match="3 part ids for a graph of 2 vertices"):
        read_metis_partition(p, 2)
    with pytest.warns(MeshRepairWarning, match="dropped the 1 extra lines"):
        assert read_metis_partition(p, 2, repair=True).tolist() == [0, 1]
    p.write_text("0\nseven\n")
    with pytest.raises(MeshFormatError, match="line 2: 'seven' is not a part id"):
        read_metis_partition(p)


def test_well_formed_input_never_warns(tmp_path):
    p = tmp_path / "g.graph"
    p.write_text("% a comment\n3 2\n2\n1 3\n2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        indptr, indices = read_metis_graph(p, repair=True)
    assert graph_sets(indptr, indices) == [{1}, {0, 2}, {1}]


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 7), st.integers(2, 7), st.integers(2, 7))
def test_kuhn_graph_kernel_is_the_nodal_graph_of_the_kuhn_cells(nx, ny, nz):
    indptr, indices = kuhn_graph(nx, ny, nz)
    want = nodal_graph(kuhn_cells(nx, ny, nz), nx * ny * nz)
    assert indptr.tolist() == want[0].tolist()
    assert indices.tolist() == want[1].tolist()  # rows sorted in both


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 14), min_size=4, max_size=4), min_size=1, max_size=20))
def test_nodal_graph_joins_exactly_the_cell_corners(cells):
    indptr, indices = nodal_graph(cells, 15)
    want = [set() for _ in range(15)]
    for c in cells:
        for a in c:
            want[a] |= set(c) - {a}
    assert graph_sets(indptr, indices) == want


def test_nodal_graph_rejects_bad_cells():
    with pytest.raises(MeshFormatError, match=r"outside 0\.\.3"):
        nodal_graph([[0, 1, 2, 9]], 4)
    with pytest.raises(MeshFormatError, match=r"shape \(n_cells, >= 4\)"):
        nodal_graph([[0, 1, 2]])
    with pytest.raises(MeshFormatError, match="cell type 'polyhedron42'"):
        nodal_graph([[0, 1, 2, 3]], cell_type="polyhedron42")


@pytest.mark.parametrize("method", ["delaunay", "lattice"])
def test_generated_meshes_are_valid_graded_and_reproducible(method):
    m = generate_mesh(20_000, seed=4, method=method)
    assert abs(m.n_nodes - 20_000) <= 200
    p, c = m.points, m.cells
    vol = np.einsum(
        "ij,ij->i",
        np.cross(p[c[:, 1]] - p[c[:, 0]], p[c[:, 2]] - p[c[:, 0]]),
        p[c[:, 3]] - p[c[:, 0]],
    )
    assert (vol > 0).all()  # every tetrahedron is positively oriented
    g = nodal_graph(c, m.n_nodes)
    assert np.array_equal(g[0], m.indptr) and np.array_equal(g[1], m.indices)
    # graded: the slab around a junction plane is denser than a slab far from both
    near = (np.abs(p[:, 2] - 0.25) < 0.05).mean()
    far = (np.abs(p[:, 2] - 0.85) < 0.05).mean()
    assert near > 3 * far
    again = generate_mesh(20_000, seed=4, method=method)
    assert np.array_equal(again.points, m.points) and np.array_equal(again.indices, m.indices)


def test_orders_change_locality_as_documented():
    from orchestrator.workflows.mesh import partition

    from orchestrator import assign, interval_stats, replica_sets

    runs, idg = {}, {}
    for order in ("morton", "sweep", "rcm", "random"):
        m = generate_mesh(6000, seed=2, order=order)
        part = partition(m.indptr, m.indices, 8, seed=0)
        runs[order] = interval_stats(part, 8).mean_interval_length
        writer = assign(replica_sets(m.indptr, m.indices, part), part, "idg")
        idg[order] = interval_stats(writer, 8).mean_interval_length
    assert runs["random"] < 1.5 < runs["sweep"]  # a random numbering has no runs to speak of
    assert min(runs["rcm"], runs["morton"]) > runs["random"]
    assert idg["morton"] > 2 * runs["morton"]  # a mesher's numbering leaves IDG much to group


def test_renumbering_is_an_isomorphism():
    m = generate_mesh(3000, seed=5)
    r, perm = renumber(m, "rcm")
    old = graph_sets(m.indptr, m.indices)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    new = graph_sets(r.indptr, r.indices)
    assert all(new[inv[v]] == {int(inv[w]) for w in old[v]} for v in range(m.n_nodes))
    assert np.array_equal(r.points, m.points[perm])
    assert np.array_equal(np.sort(r.cells, axis=1), np.sort(inv[m.cells], axis=1))


@pytest.mark.parametrize("suffix", [".vtu", ".msh", ".xdmf"])
def test_meshio_round_trip(tmp_path, suffix):
    m = generate_mesh(1500, seed=6)
    path = tmp_path / f"device{suffix}"
    write_mesh(m, path)
    back = read_mesh(path)
    assert back.n_nodes == m.n_nodes
    assert np.array_equal(back.indptr, m.indptr) and np.array_equal(back.indices, m.indices)


def test_read_mesh_names_a_bad_file(tmp_path):
    p = tmp_path / "broken.vtu"
    p.write_text("<VTKFile nonsense")
    with pytest.raises(MeshFormatError, match=re.escape(str(p))):
        read_mesh(p)


def test_generate_mesh_rejects_bad_arguments():
    with pytest.raises(MeshFormatError, match=r"n_nodes must be in 8\.\.10"):
        generate_mesh(3)
    with pytest.raises(MeshFormatError, match="order must be one of"):
        generate_mesh(100, order="zigzag")
    with pytest.raises(MeshFormatError, match="method must be"):
        generate_mesh(100, method="octree")


def test_partition_range_of_part_counts():
    from orchestrator.workflows.mesh import edge_cut, partition

    m = generate_mesh(5000, seed=7)
    for k in (2, 1024):
        part = partition(m.indptr, m.indices, k, seed=3)
        assert part.min() >= 0 and part.max() < k and part.size == 5000
        assert np.unique(part).size > 0.9 * k  # METIS uses (nearly) every part
        assert 0 < edge_cut(m.indptr, m.indices, part) < m.n_edges
    with pytest.raises(MeshFormatError, match=r"n_parts must be in 1\.\.1024, got 1025"):
        partition(m.indptr, m.indices, 1025)
    with pytest.raises(MeshFormatError, match="exceeds the graph's 10 vertices"):
        partition(m.indptr[:11], m.indices[: m.indptr[10]], 20)
    with pytest.raises(MeshFormatError, match=r"indices holds vertex 7, outside 0\.\.1"):
        partition(np.array([0, 1, 2]), np.array([1, 7]), 2)
