"""Mesh inputs: METIS graph and partition files (the BIPS3D data format), meshes read through
meshio, the nodal graph of a cell mesh, METIS partitioning and the edge cut.

Storage order is node order: row ``v`` of a mesh dump is node ``v``, so the
numbering decides how contiguous each writer's rows can be
(:func:`orchestrator.workflows.meshgen.renumber` changes it).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator.errors import MeshFormatError
from orchestrator.files import check_input_file
from orchestrator.replicas import check_graph

__all__ = [
    "Mesh",
    "MeshFormatError",
    "MeshRepairWarning",
    "edge_cut",
    "nodal_graph",
    "partition",
    "read_mesh",
    "read_metis_graph",
    "read_metis_partition",
    "write_mesh",
]

IntArray = npt.NDArray[np.int64]


class MeshRepairWarning(UserWarning):
    """Malformed input was repaired because the caller asked for it; says what was assumed."""


def _repair(path: Path, what: str) -> None:
    warnings.warn(f"{path}: {what}", MeshRepairWarning, stacklevel=3)


def read_metis_graph(
    path: str | os.PathLike[str], repair: bool = False
) -> tuple[IntArray, IntArray]:
    """Read a METIS graph file into 0-based CSR ``(indptr, indices)``.

    Format: a header ``n_vertices n_edges`` then one line per vertex with its
    1-based neighbours (``%`` lines are comments). The header must agree with
    the body (``n_edges`` counts each undirected edge once), ids must be in
    range and every edge must be listed from both ends.

    Parameters
    ----------
    path : path
    repair : bool
        Instead of rejecting a malformed file, repair it and warn
        (:class:`MeshRepairWarning`) saying what was assumed: the body's
        vertex and edge counts win over the header, out-of-range neighbours
        and self loops are dropped, one-sided edges are made two-sided.

    Raises
    ------
    MeshFormatError
        Naming the file, the line and the offending value.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "g.graph"
    >>> _ = p.write_text("3 2\\n2\\n1 3\\n2\\n")
    >>> indptr, indices = read_metis_graph(p)
    >>> indptr.tolist(), indices.tolist()
    ([0, 1, 3, 4], [1, 0, 2, 1])
    """
    path = Path(path)
    # the text, its lines and their numbers in lists of Python ints
    check_input_file(path, "METIS graph", MeshFormatError, per_byte=12)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise MeshFormatError(f"{path}: not a text file (METIS graph expected)") from None
    lines = text.splitlines()
    body = [(i + 1, ln) for i, ln in enumerate(lines) if not ln.lstrip().startswith("%")]
    if not body:
        raise MeshFormatError(f"{path}: empty file, expected a header 'n_vertices n_edges'")
    hline, header = body[0]
    try:
        fields = [int(x) for x in header.split()]
        n, m = fields[0], fields[1]
    except (ValueError, IndexError):
        raise MeshFormatError(
            f"{path}, line {hline}: header {header!r} is not 'n_vertices n_edges'"
        ) from None
    if n < 0 or m < 0:
        raise MeshFormatError(f"{path}, line {hline}: header {header!r} holds a negative count")
    if len(fields) > 2 and fields[2] != 0:
        raise MeshFormatError(
            f"{path}, line {hline}: weighted graphs (fmt {fields[2]}) are not supported"
        )
    rows = body[1:]
    while len(rows) > n and not rows[-1][1].strip():  # trailing blank lines, not isolated vertices
        rows.pop()
    if len(rows) != n:
        msg = f"header says {n} vertices but the file has {len(rows)} vertex lines"
        if not repair:
            raise MeshFormatError(f"{path}: {msg}")
        _repair(path, f"{msg}; assumed {len(rows)} vertices (the body)")
        n = len(rows)
    lengths = np.zeros(n, dtype=np.int64)
    parts = []
    dropped = 0
    for v, (lineno, line) in enumerate(rows):
        try:
            nb = np.array(line.split(), dtype=np.int64)
        except (ValueError, OverflowError):  # (beyond 64 bits: no vertex id either)
            raise MeshFormatError(
                f"{path}, line {lineno}: {line.strip()[:40]!r} holds a non-integer"
                " or one beyond 64 bits"
            ) from None
        bad = (nb < 1) | (nb > n) | (nb == v + 1)
        if bad.any():
            if not repair:
                value = int(nb[bad][0])
                what = "is the vertex itself" if value == v + 1 else f"is outside 1..{n}"
                raise MeshFormatError(
                    f"{path}, line {lineno}: neighbour {value} of vertex {v + 1} {what}"
                )
            dropped += int(bad.sum())
            nb = nb[~bad]
        parts.append(nb - 1)
        lengths[v] = nb.size
    if dropped:
        _repair(path, f"dropped {dropped} neighbour entries outside 1..{n} or self loops")
    indices = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    src = np.repeat(np.arange(n, dtype=np.int64), lengths)
    indptr, indices, one_sided, dup = _symmetric(n, src, indices)
    if one_sided is not None or dup:
        if not repair:
            if one_sided is None:
                raise MeshFormatError(f"{path}: {dup} neighbour entries are listed twice")
            v, w = one_sided
            raise MeshFormatError(
                f"{path}, line {rows[v][0]}: vertex {v + 1} lists neighbour {w + 1}, but "
                f"vertex {w + 1} (line {rows[w][0]}) does not list {v + 1}"
            )
        _repair(path, "made one-sided edges two-sided and dropped repeated neighbours")
    if indices.size != 2 * m:
        msg = (
            f"header says {m} edges but the body lists {indices.size} neighbour entries "
            f"(expected {2 * m})"
        )
        if not repair:
            raise MeshFormatError(f"{path}, line {hline}: {msg}")
        _repair(path, f"{msg}; assumed {indices.size // 2} edges (the body)")
    return indptr, indices


def _symmetric(
    n: int, src: IntArray, dst: IntArray
) -> tuple[IntArray, IntArray, tuple[int, int] | None, int]:
    """CSR of the symmetric closure of ``src -> dst``, rows sorted, repeats dropped.

    Also returns the first one-sided edge (``()`` if none) and how many
    entries were repeats, so a strict reader can reject them (``None``: none).
    """
    key = src * n + dst
    uniq = np.unique(key)
    dup = int(key.size - uniq.size)
    rev = np.unique(dst * n + src)
    one_sided: tuple[int, int] | None = None
    missing = np.setdiff1d(uniq, rev, assume_unique=True)  # (v, w) present, (w, v) absent
    if missing.size:
        one_sided = (int(missing[0] // n), int(missing[0] % n))
        uniq = np.union1d(uniq, rev)
    s, d = uniq // n, uniq % n
    indptr = np.concatenate(([0], np.cumsum(np.bincount(s, minlength=n)))).astype(np.int64)
    return indptr, d.astype(np.int64), one_sided, dup


def read_metis_partition(
    path: str | os.PathLike[str], n_vertices: int | None = None, repair: bool = False
) -> IntArray:
    """Read a METIS partition file: one 0-based part id per line, in vertex order.

    Parameters
    ----------
    path : path
    n_vertices : int, optional
        The graph's vertex count; the file must have exactly that many ids.
    repair : bool
        Instead of rejecting, warn and assume: surplus lines are dropped,
        negative ids become part 0. A file that is too short cannot be
        repaired.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "g.graph.part.2"
    >>> _ = p.write_text("0\\n1\\n1\\n")
    >>> read_metis_partition(p, 3).tolist()
    [0, 1, 1]
    """
    path = Path(path)
    check_input_file(path, "METIS partition", MeshFormatError, per_byte=30)
    values, lines = [], []
    with path.open() as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip() or text.lstrip().startswith("%"):
                continue
            t = text.strip()
            # plain ASCII digits: int() would also take "1_000" and full-width digits
            if not (t.isascii() and t.removeprefix("-").isdigit()):
                raise MeshFormatError(f"{path}, line {lineno}: {t[:40]!r} is not a part id")
            v = int(t)
            if not -(2**63) <= v < 2**63:
                raise MeshFormatError(
                    f"{path}, line {lineno}: part id {t[:40]} does not fit in 64 bits"
                )
            values.append(v)
            lines.append(lineno)
    part = np.array(values, dtype=np.int64)
    if n_vertices is not None and part.size != n_vertices:
        msg = f"{part.size} part ids for a graph of {n_vertices} vertices"
        if not repair or part.size < n_vertices:
            raise MeshFormatError(f"{path}: {msg}")
        _repair(path, f"{msg}; dropped the {part.size - n_vertices} extra lines")
        part = part[:n_vertices]
    neg = np.flatnonzero(part < 0)
    if neg.size:
        i = int(neg[0])
        msg = f"line {lines[i]}: part id {int(part[i])} is negative"
        if not repair:
            raise MeshFormatError(f"{path}, {msg}")
        _repair(path, f"{msg} ({neg.size} such lines); assumed part 0")
        part[neg] = 0
    return part


# edges of each cell type, as pairs of local corner indices (meshio's corner order)
_CELL_EDGES: dict[str, list[tuple[int, int]]] = {
    "tetra": [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)],
    "hexahedron": [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 0),
        (4, 5),
        (5, 6),
        (6, 7),
        (7, 4),
        (0, 4),
        (1, 5),
        (2, 6),
        (3, 7),
    ],
    "wedge": [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 4), (2, 5)],
    "pyramid": [(0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (1, 4), (2, 4), (3, 4)],
    "triangle": [(0, 1), (1, 2), (2, 0)],
    "quad": [(0, 1), (1, 2), (2, 3), (3, 0)],
}
_CELL_EDGES["tetra10"] = _CELL_EDGES["tetra"]  # corner nodes first; mid-edge nodes ride along
_VOLUME = ("tetra", "tetra10", "hexahedron", "wedge", "pyramid")


def nodal_graph(
    cells: Any, n_nodes: int | None = None, cell_type: str = "tetra"
) -> tuple[IntArray, IntArray]:
    """The nodal graph (0-based CSR, sorted rows) of a cell mesh: nodes joined by cell edges.

    Parameters
    ----------
    cells : array_like of int, shape (n_cells, corners)
    n_nodes : int, optional
        Number of nodes (default ``max(cells) + 1``); unused nodes get no edges.
    cell_type : str
        ``tetra`` (all six pairs), ``hexahedron``, ``wedge``, ``pyramid``,
        ``triangle``, ``quad``, ``tetra10``.

    Examples
    --------
    >>> indptr, indices = nodal_graph([[0, 1, 2, 3], [1, 2, 3, 4]])
    >>> indptr.tolist()
    [0, 3, 7, 11, 15, 18]
    >>> indices[indptr[4]:indptr[5]].tolist()
    [1, 2, 3]
    """
    if cell_type not in _CELL_EDGES:
        raise MeshFormatError(
            f"cell type {cell_type!r} is not supported; use one of {sorted(_CELL_EDGES)}"
        )
    c = np.asarray(cells)
    need = 1 + max(max(e) for e in _CELL_EDGES[cell_type])
    if c.ndim != 2 or c.shape[1] < need or (c.size and c.dtype.kind not in "iu"):
        raise MeshFormatError(
            f"{cell_type} cells must be an integer array of shape (n_cells, >= {need}), "
            f"got shape {c.shape} dtype {c.dtype}"
        )
    c = c.astype(np.int64, copy=False)
    n = (int(c.max()) + 1 if c.size else 0) if n_nodes is None else int(n_nodes)
    if c.size and (c.min() < 0 or c.max() >= n):
        bad = int(c[(c < 0) | (c >= n)][0])
        raise MeshFormatError(f"cells reference node {bad}, outside 0..{n - 1}")
    pairs = np.array(_CELL_EDGES[cell_type], dtype=np.int64)
    a, b = c[:, pairs[:, 0]].ravel(), c[:, pairs[:, 1]].ravel()
    keep = a != b  # degenerate (collapsed) cells
    a, b = a[keep], b[keep]
    indptr, indices, _, _ = _symmetric(n, np.concatenate((a, b)), np.concatenate((b, a)))
    return indptr, indices


@dataclass(frozen=True, eq=False)
class Mesh:
    """An unstructured mesh: node coordinates, cells (optional) and the nodal graph (CSR).

    Node ``v`` is row ``v`` of any dump of this mesh.
    """

    points: npt.NDArray[np.float64]
    indptr: IntArray
    indices: IntArray
    cells: IntArray | None = None
    cell_type: str = "tetra"

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return int(self.indptr.size - 1)

    @property
    def n_edges(self) -> int:
        """Number of undirected edges of the nodal graph."""
        return int(self.indices.size // 2)

    def __repr__(self) -> str:
        cells = "" if self.cells is None else f", {len(self.cells)} {self.cell_type} cells"
        return f"Mesh({self.n_nodes} nodes, {self.n_edges} edges{cells})"


def read_mesh(path: str | os.PathLike[str]) -> Mesh:
    """Read a mesh file through meshio (.msh, .vtu, .xdmf, ...) and build its nodal graph.

    Volume cells (tetrahedra, hexahedra, wedges, pyramids) define the graph;
    surface cells are used only when the mesh has no volume cells.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from orchestrator.workflows.meshgen import generate_mesh
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "device.vtu"
    >>> write_mesh(generate_mesh(200, seed=1), p)
    >>> read_mesh(p).n_nodes
    200
    """
    import meshio

    path = Path(path)
    # meshio holds the mesh in memory several times over as it converts it
    check_input_file(path, "mesh", MeshFormatError, per_byte=8)
    try:
        m = meshio.read(path)
    except (Exception, SystemExit) as err:  # meshio raises many types, and exits on some files
        raise MeshFormatError(f"{path}: meshio could not read it ({err!r})") from None
    blocks = [(b.type, np.asarray(b.data)) for b in m.cells if b.type in _CELL_EDGES]
    volume = [x for x in blocks if x[0] in _VOLUME]
    use = volume or blocks
    if not use:
        raise MeshFormatError(
            f"{path}: no supported cells (found {sorted({b.type for b in m.cells})})"
        )
    n = int(m.points.shape[0])
    graphs = [nodal_graph(data, n, t) for t, data in use]
    if len(graphs) == 1:
        indptr, indices = graphs[0]
    else:
        src = np.concatenate([np.repeat(np.arange(n), np.diff(p)) for p, _ in graphs])
        dst = np.concatenate([i for _, i in graphs])
        indptr, indices, _, _ = _symmetric(n, src, dst)
    tets = [d for t, d in use if t in ("tetra", "tetra10")]
    cells = np.concatenate([d[:, :4] for d in tets]).astype(np.int64) if tets else None
    points = np.asarray(m.points, dtype=np.float64)
    return Mesh(points, indptr, indices, cells, "tetra")


def write_mesh(mesh: Mesh, path: str | os.PathLike[str]) -> None:
    """Write a mesh with tetrahedra through meshio (format from the suffix).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from orchestrator.workflows.meshgen import generate_mesh
    >>> write_mesh(generate_mesh(100), pathlib.Path(tempfile.mkdtemp()) / "m.msh")
    """
    import meshio

    if mesh.cells is None:
        raise MeshFormatError("this mesh has no cells to write (generated with cells=False)")
    meshio.write(Path(path), meshio.Mesh(mesh.points, [("tetra", mesh.cells)]))


def edge_cut(indptr: Any, indices: Any, part: Any) -> int:
    """Number of undirected edges whose endpoints lie in different parts.

    Computed here rather than taken from pymetis, whose reported cut was
    seen to be 0 on a mesh with thousands of cut faces.

    Examples
    --------
    >>> import numpy as np
    >>> edge_cut(np.array([0, 1, 3, 4]), np.array([1, 0, 2, 1]), np.array([0, 0, 1]))
    1
    """
    indptr, indices, part = (np.asarray(a, dtype=np.int64) for a in (indptr, indices, part))
    src = np.repeat(np.arange(part.size), np.diff(indptr))
    return int((part[src] != part[indices]).sum() // 2)


def partition(indptr: Any, indices: Any, n_parts: int, seed: int = 0) -> IntArray:
    """METIS k-way partition of a graph (pymetis, ``CSRAdjacency`` form), part id per vertex.

    Parameters
    ----------
    indptr, indices : array_like of int
        Symmetric 0-based CSR graph.
    n_parts : int
        2 ... 1024 parts (1 gives everything to part 0).
    seed : int
        METIS' random seed: the same seed gives the same partition.

    Examples
    --------
    >>> import numpy as np
    >>> indptr, indices = np.array([0, 1, 3, 5, 6]), np.array([1, 0, 2, 1, 3, 2])  # path 0-1-2-3
    >>> sorted(np.bincount(partition(indptr, indices, 2)).tolist())
    [2, 2]
    """
    import pymetis

    if isinstance(n_parts, bool) or not isinstance(n_parts, int | np.integer):
        raise MeshFormatError(f"n_parts must be an integer, got {n_parts!r}")
    indptr, indices = np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)
    n = indptr.size - 1
    if not 1 <= n_parts <= 1024:
        raise MeshFormatError(f"n_parts must be in 1..1024, got {n_parts}")
    if n_parts > n:
        raise MeshFormatError(f"n_parts = {n_parts} exceeds the graph's {n} vertices")
    # METIS reads out of bounds on a malformed graph instead of reporting it
    check_graph(indptr, indices, MeshFormatError, "vertex")
    if n_parts == 1:
        return np.zeros(n, dtype=np.int64)
    opts = pymetis.Options(seed=seed)
    adjacency = pymetis.CSRAdjacency(indptr, indices)
    result = pymetis.part_graph(int(n_parts), adjacency=adjacency, options=opts)
    return np.asarray(result[1], dtype=np.int64)
