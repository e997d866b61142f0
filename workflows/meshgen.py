"""Device-like unstructured tetrahedral meshes of a requested size, and node renumbering.

A bipolar transistor's mesh is fine where the physics is steep — at the
emitter/base and base/collector junctions and along the emitter window's edge
— and coarse elsewhere. :func:`generate_mesh` samples nodes from such a graded
density and tetrahedralizes them:

- ``"delaunay"``: the Delaunay tetrahedralization of the sampled points
  (scipy/Qhull); an unstructured mesh like a device mesher's, up to about a
  million nodes (Qhull takes ~36 s for 10^6 points on one core here).
- ``"lattice"``: the graded points snapped to a jittered tensor grid and cut
  into six Kuhn tetrahedra per cell; same grading, any size (10 million
  nodes in seconds), used by default above :data:`DELAUNAY_LIMIT` nodes.

Storage order is node order, and locality depends on it, so the numbering is
a choice: ``"morton"`` (along a Z-order space-filling curve, the order in which
Delaunay meshers insert points — the default, and on the real BIPS3D mesh's
sizes the closest to its METIS and IDG interval counts, see ``iorch bench
idg``), ``"sweep"`` (layer by layer through the device), ``"rcm"`` (reverse
Cuthill–McKee, a bandwidth-reducing order) or ``"random"`` (no locality: the
worst case).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .mesh import IntArray, Mesh, MeshFormatError, nodal_graph

__all__ = ["DELAUNAY_LIMIT", "ORDERS", "Device", "generate_mesh", "renumber"]

DELAUNAY_LIMIT = 500_000
ORDERS = ("morton", "sweep", "rcm", "random")


@dataclass(frozen=True)
class Device:
    """Geometry and grading of a generated device (arbitrary length unit).

    The box is ``[0, size[0]] x [0, size[1]] x [0, size[2]]``; ``z`` runs from
    the emitter contact down to the collector. Node density is
    ``1 + peak * exp(-((z - z_j) / width)^2 / 2)`` summed over the junction
    planes ``z_j``, times the same bump (half as high) across the emitter
    window's edge at ``x = emitter_edge``.

    Examples
    --------
    >>> Device().junctions
    (0.25, 0.55)
    """

    size: tuple[float, float, float] = (2.0, 1.0, 1.0)
    junctions: tuple[float, ...] = (0.25, 0.55)
    emitter_edge: float = 0.8
    width: float = 0.04
    peak: float = 8.0

    def density_z(self, z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Relative node density across the junction planes."""
        bumps = sum(np.exp(-0.5 * ((z - zj) / self.width) ** 2) for zj in self.junctions)
        return 1.0 + self.peak * np.asarray(bumps)

    def density_x(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Relative node density across the emitter window's edge."""
        return 1.0 + 0.5 * self.peak * np.exp(-0.5 * ((x - self.emitter_edge) / self.width) ** 2)

    def quantiles(self, axis: int, q: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Coordinates along ``axis`` at cumulative-density fractions ``q`` (inverse CDF).

        Examples
        --------
        >>> z = Device().quantiles(2, np.linspace(0, 1, 5))
        >>> float(z[0]), float(z[-1])
        (0.0, 1.0)
        """
        length = self.size[axis]
        grid = np.linspace(0.0, length, 4097)
        dens = {0: self.density_x, 2: self.density_z}.get(axis, np.ones_like)(grid)
        cdf = np.concatenate(([0.0], np.cumsum((dens[1:] + dens[:-1]) / 2)))
        return np.interp(q, cdf / cdf[-1], grid)


def _grid_dims(n: int, size: tuple[float, float, float]) -> tuple[int, int, int]:
    """Grid dimensions proportional to the box with a product as close to ``n`` as possible."""
    h = (size[0] * size[1] * size[2] / n) ** (1 / 3)
    base = [max(2, round(s / h)) for s in size]
    shapes = []
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            nx, ny = max(2, base[0] + dx), max(2, base[1] + dy)
            shapes.append((nx, ny, max(2, round(n / (nx * ny)))))
    return min(shapes, key=lambda s: abs(s[0] * s[1] * s[2] - n))


def kuhn_cells(nx: int, ny: int, nz: int) -> npt.NDArray[np.int64]:
    """The six tetrahedra around the main diagonal of every grid cell (node ids, 4 per row).

    Examples
    --------
    >>> kuhn_cells(2, 2, 2).shape
    (6, 4)
    """
    i, j, k = np.meshgrid(np.arange(nx - 1), np.arange(ny - 1), np.arange(nz - 1), indexing="ij")
    base = (i + nx * (j + ny * k)).ravel()
    step = np.array([1, nx, nx * ny])
    cells = []
    for p in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)):
        a = base + step[p[0]]
        b = a + step[p[1]]
        cells.append(np.stack([base, a, b, b + step[p[2]]], axis=1))
    return np.concatenate(cells).astype(np.int64)


def _morton_order(points: npt.NDArray[np.float64], bits: int = 10) -> IntArray:
    """Nodes along a Z-order curve over a ``2^bits``-per-axis grid (ties keep their order)."""
    lo, hi = points.min(axis=0), points.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    q = ((points - lo) / span * (2**bits - 1)).astype(np.uint64)
    code = np.zeros(points.shape[0], dtype=np.uint64)
    for b in range(bits):
        for a in range(3):
            code |= ((q[:, a] >> np.uint64(b)) & np.uint64(1)) << np.uint64(3 * b + a)
    return np.argsort(code, kind="stable").astype(np.int64)


def _sweep_order(points: npt.NDArray[np.float64]) -> IntArray:
    """Layer by layer in z, strip by strip in y, along x: how layered generators number."""
    layers = max(1, round(points.shape[0] ** (1 / 3)))
    lo, hi = points.min(axis=0), points.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    u = (points - lo) / span
    zl = np.minimum((u[:, 2] * layers).astype(np.int64), layers - 1)
    yl = np.minimum((u[:, 1] * layers).astype(np.int64), layers - 1)
    return np.lexsort((u[:, 0], yl, zl)).astype(np.int64)


def generate_mesh(
    n_nodes: int,
    seed: int = 0,
    method: str = "auto",
    order: str = "morton",
    device: Device | None = None,
    cells: bool = True,
) -> Mesh:
    """A device-like tetrahedral mesh of about ``n_nodes`` nodes, graded towards the junctions.

    Parameters
    ----------
    n_nodes : int
        Requested size (exact for ``"delaunay"``; the nearest grid product,
        within a fraction of a percent, for ``"lattice"``). 8 ... 10^8.
    seed : int
        Same seed, same mesh.
    method : {"auto", "delaunay", "lattice"}
        ``auto`` = Delaunay up to :data:`DELAUNAY_LIMIT` nodes, lattice above.
    order : {"morton", "sweep", "rcm", "random"}
        Node numbering (= storage order of a dump); see :func:`renumber`.
    device : Device, optional
        Geometry and grading.
    cells : bool
        Keep the tetrahedra (lattice meshes can skip them: the graph does not
        need them, and at 10^7 nodes they take 2 GB).

    Examples
    --------
    >>> m = generate_mesh(2000, seed=3)
    >>> m.n_nodes, m.cells.shape[1], 5 < m.n_edges / m.n_nodes < 9
    (2000, 4, True)
    """
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int | np.integer):
        raise MeshFormatError(f"n_nodes must be an integer, got {n_nodes!r}")
    if not 8 <= n_nodes <= 10**8:
        raise MeshFormatError(f"n_nodes must be in 8..10^8, got {n_nodes}")
    if method not in ("auto", "delaunay", "lattice"):
        raise MeshFormatError(f"method must be 'auto', 'delaunay' or 'lattice', got {method!r}")
    if order not in ORDERS:
        raise MeshFormatError(f"order must be one of {list(ORDERS)}, got {order!r}")
    dev = device or Device()
    rng = np.random.default_rng(seed)
    if method == "delaunay" or (method == "auto" and n_nodes <= DELAUNAY_LIMIT):
        from scipy.spatial import Delaunay

        q = rng.random((int(n_nodes), 3))
        points = np.stack([dev.quantiles(a, q[:, a]) for a in range(3)], axis=1)
        # number the points before meshing, so these orders need no second permutation
        if order in ("morton", "sweep"):
            first = _morton_order if order == "morton" else _sweep_order
            points = points[first(points)]
            order = "done"
        tets = _oriented(points, Delaunay(points).simplices.astype(np.int64))
        indptr, indices = nodal_graph(tets, points.shape[0])
        mesh = Mesh(points, indptr, indices, tets if cells else None)
    else:
        # kernels load Numba: workers import this module through bips3d
        from orchestrator.kernels.meshgraph import kuhn_graph

        nx, ny, nz = _grid_dims(int(n_nodes), dev.size)
        axes = [dev.quantiles(a, (np.arange(m) + 0.5) / m) for a, m in enumerate((nx, ny, nz))]
        gx, gy, gz = np.meshgrid(*axes, indexing="ij")
        points = np.stack([g.transpose(2, 1, 0).ravel() for g in (gx, gy, gz)], axis=1)
        spacing = np.stack(
            [np.gradient(ax)[idx] for ax, idx in zip(axes, _grid_index(nx, ny, nz), strict=True)],
            axis=1,
        )
        # nodes off the perfect grid by up to 15 % of the local spacing, like a mesher's
        points += (rng.random(points.shape) - 0.5) * 0.3 * spacing
        indptr, indices = kuhn_graph(nx, ny, nz)
        kuhn = _oriented(points, kuhn_cells(nx, ny, nz)) if cells else None
        mesh = Mesh(points, indptr, indices, kuhn)
    return mesh if order == "done" else renumber(mesh, order, seed=seed)[0]


def _oriented(
    points: npt.NDArray[np.float64], tets: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Tetrahedra with positive volume (Qhull returns both orientations; solvers want one)."""
    p = points[tets]
    vol = np.einsum("ij,ij->i", np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), p[:, 3] - p[:, 0])
    flip = vol < 0
    tets[flip, 2], tets[flip, 3] = tets[flip, 3], tets[flip, 2].copy()
    return tets


def _grid_index(nx: int, ny: int, nz: int) -> tuple[Any, Any, Any]:
    """Per-node grid indices ``(i, j, k)`` for node id ``i + nx*(j + ny*k)``."""
    v = np.arange(nx * ny * nz, dtype=np.int64)
    return v % nx, (v // nx) % ny, v // (nx * ny)


def renumber(mesh: Mesh, order: str = "morton", seed: int = 0) -> tuple[Mesh, IntArray]:
    """Renumber a mesh's nodes: the new mesh and ``perm`` (new node ``i`` is old ``perm[i]``).

    Parameters
    ----------
    mesh : Mesh
    order : {"morton", "rcm", "sweep", "random"}
        ``morton``: along a Z-order space-filling curve through the points;
        ``rcm``: reverse Cuthill–McKee (scipy), neighbours get close numbers;
        ``sweep``: layer by layer through the device; ``random``: a seeded
        shuffle, no locality at all.

    Examples
    --------
    >>> m = generate_mesh(500, seed=1)
    >>> r, perm = renumber(m, "rcm")
    >>> r.n_edges == m.n_edges, sorted(perm.tolist()) == list(range(500))
    (True, True)
    """
    # kernels load Numba: workers import this module through bips3d
    from orchestrator.kernels.meshgraph import sort_rows

    n = mesh.n_nodes
    if order == "rcm":
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        g = csr_matrix((np.ones(mesh.indices.size, np.int8), mesh.indices, mesh.indptr), (n, n))
        perm = np.asarray(reverse_cuthill_mckee(g, symmetric_mode=True), dtype=np.int64)
    elif order == "morton":
        perm = _morton_order(mesh.points)
    elif order == "sweep":
        perm = _sweep_order(mesh.points)
    elif order == "random":
        perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    else:
        raise MeshFormatError(f"order must be one of {list(ORDERS)}, got {order!r}")
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n, dtype=np.int64)
    deg = np.diff(mesh.indptr)[perm]
    indptr = np.concatenate(([0], np.cumsum(deg))).astype(np.int64)
    src = np.repeat(mesh.indptr[perm] - indptr[:-1], deg) + np.arange(indptr[-1], dtype=np.int64)
    indices = inv[mesh.indices[src]]
    sort_rows(indptr, indices)  # rows ascending, as every graph this package builds
    cells = None if mesh.cells is None else inv[mesh.cells]
    return Mesh(mesh.points[perm], indptr, indices, cells, mesh.cell_type), perm
