"""``iorch bench idg``: the IDG paper's Table 4 reproduced, and the classification + IDG kernel
timed on a 10-million-node mesh.

Table 4 of Filgueira et al. lists, for four BIPS3D meshes and 8/16/32/64
partitions, the number of intervals per partition and their average length
under METIS' own assignment and under IDG. We compute the same on the real
mesh 2 (with the partitions shipped beside it) and on generated device meshes
of the four sizes (METIS partitions of our own), for replicas one and two
graph hops deep, and print the paper's numbers beside ours.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.replicas import assign, interval_stats, replica_sets

from .mesh import IntArray, partition, read_metis_graph, read_metis_partition
from .meshgen import generate_mesh

__all__ = ["PAPER_SIZES", "PAPER_TABLE4", "KernelTiming", "Table4Row", "kernel_timing", "table4"]

#: Nodes of the paper's meshes 1-4 (its Table 3).
PAPER_SIZES = {1: 47_219, 2: 32_888, 3: 73_260, 4: 289_650}

#: Table 4: mesh -> partitions -> (METIS intervals, METIS length, IDG intervals, IDG length).
PAPER_TABLE4: dict[int, dict[int, tuple[float, float, float, float]]] = {
    1: {
        8: (258.0, 22.5, 88.3, 70.6),
        16: (217.4, 13.4, 71.6, 43.5),
        32: (169.6, 8.0, 54.5, 28.1),
        64: (137.0, 4.5, 41.2, 19.1),
    },
    2: {
        8: (203.8, 19.8, 67.1, 63.1),
        16: (171.3, 11.5, 58.3, 37.9),
        32: (136.7, 6.9, 44.9, 24.6),
        64: (99.1, 4.3, 31.7, 17.5),
    },
    3: {
        8: (244.0, 96.6, 57.0, 251.8),
        16: (189.8, 27.9, 49.5, 151.2),
        32: (149.4, 15.8, 38.7, 73.6),
        64: (112.9, 10.3, 25.4, 55.1),
    },
    4: {
        8: (965.5, 38.7, 126.0, 306.5),
        16: (642.4, 29.7, 99.8, 195.4),
        32: (511.7, 19.3, 75.2, 141.5),
        64: (344.4, 13.7, 51.7, 99.2),
    },
}


@dataclass(frozen=True)
class Table4Row:
    """One mesh and partition count: ours (METIS, IDG per halo) beside the paper's."""

    mesh: str
    nodes: int
    parts: int
    metis: tuple[float, float]  # intervals per partition, average length
    idg: dict[int, tuple[float, float]]  # halo -> (intervals, length)
    shared: dict[int, float]  # halo -> replicated fraction
    paper: tuple[float, float, float, float] | None


def _row(
    name: str,
    paper_mesh: int | None,
    indptr: IntArray,
    indices: IntArray,
    part: IntArray,
    k: int,
    halos: Sequence[int],
) -> Table4Row:
    m = interval_stats(part, k)
    idg, shared = {}, {}
    for h in halos:
        rs = replica_sets(indptr, indices, part, halo=h, n_parts=k)
        s = interval_stats(assign(rs, part, "idg"), k)
        idg[h] = (s.intervals_per_writer, s.mean_interval_length)
        shared[h] = rs.replicated_fraction
    paper = PAPER_TABLE4.get(paper_mesh, {}).get(k) if paper_mesh else None
    return Table4Row(
        name,
        int(part.size),
        k,
        (m.intervals_per_writer, m.mean_interval_length),
        idg,
        shared,
        paper,
    )


def table4(
    real_graph: Path | None,
    real_parts: Sequence[int] = (8, 14, 64),
    generated: Sequence[int] = (1, 2, 3, 4),
    parts: Sequence[int] = (8, 16, 32, 64),
    halos: Sequence[int] = (1, 2),
    seed: int = 0,
    advance: Callable[[str], None] = lambda msg: None,
) -> list[Table4Row]:
    """Rows of the Table 4 reproduction.

    Parameters
    ----------
    real_graph : path or None
        The real mesh's METIS graph; its partitions ``<graph>.part.K`` are used.
    real_parts : partition counts of the real mesh (files that exist)
    generated : which of the paper's meshes (1-4) to generate at their sizes
    parts : partition counts for generated meshes (METIS, seeded)
    halos : replica depths for IDG

    Examples
    --------
    >>> rows = table4(None, generated=[2], parts=[8], halos=[1])
    >>> rows[0].nodes, rows[0].parts, rows[0].idg[1][0] < rows[0].metis[0]
    (32888, 8, True)
    """
    rows = []
    if real_graph is not None:
        indptr, indices = read_metis_graph(real_graph)
        for k in real_parts:
            pfile = real_graph.with_name(f"{real_graph.name}.part.{k}")
            if not pfile.exists():
                continue
            part = read_metis_partition(pfile, indptr.size - 1)
            rows.append(_row("real mesh 2", 2, indptr, indices, part, k, halos))
            advance(f"real mesh, {k} parts")
    for mesh_id in generated:
        m = generate_mesh(PAPER_SIZES[mesh_id], seed=seed + mesh_id, cells=False)
        for k in parts:
            part = partition(m.indptr, m.indices, k, seed=seed)
            rows.append(
                _row(f"generated ({mesh_id})", mesh_id, m.indptr, m.indices, part, k, halos)
            )
            advance(f"generated mesh {mesh_id}, {k} parts")
    return rows


@dataclass(frozen=True)
class KernelTiming:
    """Classification (replica sets) and IDG on one large mesh, best of ``repeats`` runs."""

    nodes: int
    edges: int
    parts: int
    halo: int
    generate_seconds: float
    metis_seconds: float
    classify_seconds: float
    idg_seconds: float
    shared: float

    @property
    def total_seconds(self) -> float:
        """Classification + IDG."""
        return self.classify_seconds + self.idg_seconds


def kernel_timing(
    nodes: int = 10_000_000, parts: int = 64, halo: int = 1, repeats: int = 3, seed: int = 0
) -> KernelTiming:
    """Time classification + IDG (one core, compiled beforehand) on a generated mesh.

    Examples
    --------
    >>> t = kernel_timing(20_000, parts=8, repeats=1)
    >>> t.nodes > 19_000 and t.total_seconds > 0
    True
    """
    t0 = time.perf_counter()
    m = generate_mesh(nodes, seed=seed, cells=False)
    t1 = time.perf_counter()
    part = partition(m.indptr, m.indices, parts, seed=seed)
    t2 = time.perf_counter()
    small = generate_mesh(2000, seed=seed, cells=False)  # compile before timing
    assign(replica_sets(small.indptr, small.indices, small.indptr[:-1] % 2, halo=halo), None)
    best_c, best_i = float("inf"), float("inf")
    for _ in range(repeats):
        a = time.perf_counter()
        rs = replica_sets(m.indptr, m.indices, part, halo=halo, n_parts=parts)
        b = time.perf_counter()
        assign(rs, None, "idg")
        c = time.perf_counter()
        best_c, best_i = min(best_c, b - a), min(best_i, c - b)
    return KernelTiming(
        m.n_nodes, m.n_edges, parts, halo, t1 - t0, t2 - t1, best_c, best_i, rs.replicated_fraction
    )
