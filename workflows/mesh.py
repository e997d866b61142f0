"""Mesh inputs: METIS graph and partition files (the BIPS3D data format)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["MeshFormatError", "edge_cut", "partition", "read_metis_graph", "read_partition"]


class MeshFormatError(ValueError):
    """A mesh or partition file is malformed; the message names the file, line and value."""


def read_metis_graph(
    path: str | os.PathLike[str],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Read a METIS graph file into 0-based CSR ``(xadj, adjncy)``.

    Format: a header ``n_vertices n_edges`` then one line per vertex with its
    1-based neighbours. The header must agree with the body (``n_edges``
    counts each undirected edge once), ids must be in range.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "g.graph"
    >>> _ = p.write_text("3 2\\n2\\n1 3\\n2\\n")
    >>> xadj, adj = read_metis_graph(p)
    >>> xadj.tolist(), adj.tolist()
    ([0, 1, 3, 4], [1, 0, 2, 1])
    """
    path = Path(path)
    with path.open() as fh:
        lines = fh.read().splitlines()
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
    if len(fields) > 2 and fields[2] not in (0,):
        raise MeshFormatError(
            f"{path}, line {hline}: weighted graphs (fmt {fields[2]}) are not supported"
        )
    rows = body[1:]
    while rows and not rows[-1][1].strip():  # trailing blank lines
        rows.pop()
    if len(rows) != n:
        raise MeshFormatError(
            f"{path}: header says {n} vertices but the file has {len(rows)} vertex lines"
        )
    xadj = np.zeros(n + 1, dtype=np.int64)
    parts = []
    for v, (lineno, text) in enumerate(rows):
        try:
            nb = np.array(text.split(), dtype=np.int64)
        except ValueError:
            raise MeshFormatError(
                f"{path}, line {lineno}: {text.strip()[:40]!r} holds a non-integer"
            ) from None
        bad = (nb < 1) | (nb > n)
        if bad.any():
            raise MeshFormatError(
                f"{path}, line {lineno}: neighbour {int(nb[bad][0])} of vertex {v + 1} "
                f"is outside 1..{n}"
            )
        parts.append(nb - 1)
        xadj[v + 1] = xadj[v] + nb.size
    adjncy = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if adjncy.size != 2 * m:
        raise MeshFormatError(
            f"{path}, line {hline}: header says {m} edges but the body lists {adjncy.size} "
            f"neighbour entries (expected {2 * m})"
        )
    return xadj, adjncy


def read_partition(path: str | os.PathLike[str], n_vertices: int) -> npt.NDArray[np.int64]:
    """Read a METIS partition file: one 0-based part id per line, in vertex order.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "g.graph.part.2"
    >>> _ = p.write_text("0\\n1\\n1\\n")
    >>> read_partition(p, 3).tolist()
    [0, 1, 1]
    """
    path = Path(path)
    values = []
    with path.open() as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                v = int(text)
            except ValueError:
                raise MeshFormatError(
                    f"{path}, line {lineno}: {text.strip()!r} is not a part id"
                ) from None
            if v < 0:
                raise MeshFormatError(f"{path}, line {lineno}: part id {v} is negative")
            values.append(v)
    if len(values) != n_vertices:
        raise MeshFormatError(
            f"{path}: {len(values)} part ids for a graph of {n_vertices} vertices"
        )
    return np.array(values, dtype=np.int64)


def edge_cut(xadj: npt.ArrayLike, adjncy: npt.ArrayLike, part: npt.ArrayLike) -> int:
    """Number of undirected edges whose endpoints lie in different parts.

    Computed here rather than taken from pymetis, whose reported cut was
    seen to be 0 on a mesh with thousands of cut faces.

    Examples
    --------
    >>> import numpy as np
    >>> edge_cut(np.array([0, 1, 3, 4]), np.array([1, 0, 2, 1]), np.array([0, 0, 1]))
    1
    """
    xadj, adjncy, part = (np.asarray(a, dtype=np.int64) for a in (xadj, adjncy, part))
    src = np.repeat(np.arange(part.size), np.diff(xadj))
    return int((part[src] != part[adjncy]).sum() // 2)


def partition(
    xadj: npt.ArrayLike, adjncy: npt.ArrayLike, n_parts: int, seed: int = 0
) -> npt.NDArray[np.int64]:
    """METIS k-way partition of a graph (pymetis, ``CSRAdjacency`` form), part id per vertex.

    Examples
    --------
    >>> import numpy as np
    >>> xadj, adj = np.array([0, 1, 3, 5, 6]), np.array([1, 0, 2, 1, 3, 2])  # path 0-1-2-3
    >>> sorted(np.bincount(partition(xadj, adj, 2)).tolist())
    [2, 2]
    """
    import pymetis

    if isinstance(n_parts, bool) or not isinstance(n_parts, int | np.integer) or n_parts < 1:
        raise MeshFormatError(f"n_parts must be an integer >= 1, got {n_parts!r}")
    xadj, adjncy = np.asarray(xadj, dtype=np.int64), np.asarray(adjncy, dtype=np.int64)
    if n_parts == 1:
        return np.zeros(xadj.size - 1, dtype=np.int64)
    opts = pymetis.Options(seed=seed)
    result = pymetis.part_graph(n_parts, adjacency=pymetis.CSRAdjacency(xadj, adjncy), options=opts)
    return np.asarray(result[1], dtype=np.int64)
