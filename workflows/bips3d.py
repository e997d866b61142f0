"""The BIPS3D-like mesh dump: every partition writes the ``load`` vector of its mesh nodes.

BIPS3D (Filgueira et al., sections 2 and 4) distributes a tetrahedral mesh
over compute nodes with METIS; each node carries ``load`` values (1 ... 500 in
the paper) and the results are dumped in node order. Boundary nodes are
replicated on every partition that touches them, so the dump first decides
who writes each replicated row (:func:`orchestrator.assign`: metis, random,
first or IDG), then moves the rows to the I/O nodes with one of the paper's
strategies, through the execution engine (:func:`orchestrator.engine.stage.write_stage`):

- ``sequential``: gather everything on one writer (the original BIPS3D);
- ``list``: every writer sends all its intervals for an I/O node as one
  request (list I/O);
- ``two-phase``: the same requests, aggregated by the I/O node into whole
  stripes before writing;
- ``auto``: the paper's decision tree (its Fig. 7), :class:`DecisionRule`.

Values are a pure function of node id and entry (:func:`expected_values`), so
the committed output is checked row by row after the commit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator import defaults
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.cost import get_cost_model
from orchestrator.engine.backends import get_backend
from orchestrator.engine.options import WriteOptions
from orchestrator.errors import DumpError, InputError
from orchestrator.files import remove_path
from orchestrator.replicas import METHODS, IntervalStats, ReplicaSets, assign, interval_stats
from orchestrator.replicas import replica_sets as _replica_sets

from .mesh import IntArray, MeshFormatError, partition, read_mesh, read_metis_graph
from .mesh import read_metis_partition as _read_part
from .meshgen import generate_mesh

__all__ = [
    "DATASET",
    "STRATEGIES",
    "DecisionRule",
    "DumpError",
    "DumpResult",
    "MeshCase",
    "default_mesh",
    "dump",
    "expected_values",
    "load_case",
    "make_contributions",
    "run_methods",
    "verify_dump",
]

DATASET = "load"
STRATEGIES = ("sequential", "list", "two-phase", "auto")
MAX_LOAD = 1 << 20
#: the dump's default stripe size (smaller than a write stage's default)
DUMP_STRIPE_BYTES = 1 << 20


@dataclass(frozen=True)
class DecisionRule:
    """The paper's decision tree (Fig. 7) for choosing the output strategy.

    On a fast network (Myrinet in the paper, here: a network bandwidth of at
    least ``fast_network`` bytes/s), meshes under ``node_threshold`` nodes use
    two-phase I/O for loads under ``small_mesh_load`` and list I/O above;
    larger meshes switch to list I/O above ``large_mesh_load``. On a slow
    network (Fast Ethernet) list I/O always wins. All thresholds can be
    overridden, e.g. after measuring a new machine.

    Examples
    --------
    >>> rule = DecisionRule()
    >>> rule.choose(32_888, 50, 160e6), rule.choose(32_888, 100, 160e6)
    ('two-phase', 'list')
    >>> rule.choose(289_650, 60, 160e6), rule.choose(289_650, 60, 12.5e6)
    ('list', 'list')
    """

    node_threshold: int = 70_000  # N_x
    small_mesh_load: int = 90  # N_ld below N_x nodes
    large_mesh_load: int = 50  # N_ld above N_x nodes
    fast_network: float = 100e6  # between Fast Ethernet (12.5 MB/s) and Myrinet (160 MB/s)

    def choose(self, n_nodes: int, load: int, network_bandwidth: float) -> str:
        """``"two-phase"`` or ``"list"`` for a mesh of ``n_nodes`` with ``load`` values per node."""
        if network_bandwidth < self.fast_network:
            return "list"
        limit = self.small_mesh_load if n_nodes < self.node_threshold else self.large_mesh_load
        return "two-phase" if load < limit else "list"


def expected_values(rows: Any, load: int) -> npt.NDArray[np.float64]:
    """The values of node ``v``, entry ``j``: ``v * load + j`` (exact in float64, all distinct).

    Examples
    --------
    >>> expected_values([0, 5], 3).tolist()
    [[0.0, 1.0, 2.0], [15.0, 16.0, 17.0]]
    """
    r = np.asarray(rows, dtype=np.int64)
    return (r[:, None] * load + np.arange(load)).astype(np.float64)


def _contribution(client: int, rows: IntArray, load: int) -> Contribution:
    """On a compute worker: one partition's rows (own nodes and replicas) with their values."""
    return Contribution(client, rows, expected_values(rows, load))


def _gather_root(rows: IntArray, *parts: Contribution) -> Contribution:
    """On the root's worker: every node's row, each from its own partition (sequential I/O)."""
    out = np.empty((rows.size, parts[0].values.shape[1]), dtype=np.float64)
    for con in parts:
        pos = np.searchsorted(rows, con.rows)
        hit = (pos < rows.size) & (rows[np.minimum(pos, rows.size - 1)] == con.rows)
        out[pos[hit]] = con.values[hit]
    return Contribution(0, rows, out)


@dataclass(frozen=True, eq=False)
class MeshCase:
    """A partitioned mesh ready to dump: graph, partition, replica sets."""

    name: str
    indptr: IntArray
    indices: IntArray
    partition: IntArray
    replicas: ReplicaSets
    halo: int

    @property
    def n_nodes(self) -> int:
        """Number of mesh nodes (rows of the dump)."""
        return int(self.partition.size)

    @property
    def n_parts(self) -> int:
        """Number of partitions (clients)."""
        return self.replicas.n_clients


def load_case(
    mesh: str | os.PathLike[str] | None = None,
    nodes: int | None = None,
    parts: int = 8,
    halo: int = 1,
    seed: int = 0,
    partition_file: str | os.PathLike[str] | None = None,
) -> MeshCase:
    """Read or generate a mesh, partition it and derive its replica sets.

    A METIS graph (``*.graph``) uses the partition file beside it
    (``<graph>.part.<parts>``) when there is one, like the BIPS3D data;
    other meshes are read through meshio; ``nodes`` generates a device mesh
    (:func:`~orchestrator.workflows.meshgen.generate_mesh`). Missing
    partitions are computed with METIS (seeded).

    Examples
    --------
    >>> case = load_case(nodes=2000, parts=4, seed=1)
    >>> case.n_nodes, case.n_parts, 0 < case.replicas.replicated_fraction < 1
    (2000, 4, True)
    """
    if (mesh is None) == (nodes is None):
        raise MeshFormatError("give either a mesh file or a number of nodes to generate")
    part: IntArray | None = None
    if mesh is not None:
        path = Path(mesh)
        if not path.exists():
            raise MeshFormatError(f"{path}: no such mesh file")
        if path.suffix == ".graph" or path.name.endswith(".graph"):
            indptr, indices = read_metis_graph(path)
            beside = path.with_name(f"{path.name}.part.{parts}")
            pfile = (
                Path(partition_file) if partition_file else (beside if beside.exists() else None)
            )
            if pfile is not None:
                part = _read_part(pfile, indptr.size - 1)
        else:
            m = read_mesh(path)
            indptr, indices = m.indptr, m.indices
            if partition_file:
                part = _read_part(partition_file, m.n_nodes)
        name = path.name
    else:
        assert nodes is not None
        m = generate_mesh(nodes, seed=seed, cells=False)
        indptr, indices = m.indptr, m.indices
        name = f"generated-{m.n_nodes}"
    if part is None:
        part = partition(indptr, indices, parts, seed=seed)
    elif part.size and int(part.max()) >= parts:
        # a partition file names its parts 0..parts-1: a larger id is a mistake (or another
        # file), not a reason to make thousands of empty partitions
        where = partition_file or path.with_name(f"{path.name}.part.{parts}")
        raise MeshFormatError(
            f"{where}: part id {int(part.max())} is not below parts={parts} "
            "(the file names parts 0..parts-1)"
        )
    reps = _replica_sets(indptr, indices, part, halo=halo, n_parts=parts)
    return MeshCase(name, indptr, indices, part, reps, halo)


def make_contributions(case: MeshCase, load: int, cluster: Any) -> list[Any]:
    """One Dask future per partition, built on a compute worker: its rows and their values.

    The values never pass through this process (only the rows, to plan).

    Examples
    --------
    >>> futures = make_contributions(load_case(nodes=2000, parts=4), 10, cluster)  # doctest: +SKIP
    >>> len(futures)  # doctest: +SKIP
    4
    """
    futures = []
    for c in range(case.n_parts):
        rows = case.replicas.rows_of(c)
        if rows.size == 0:
            continue
        futures.append(
            cluster.client.submit(
                _contribution, c, rows, load, pure=False, workers=[cluster.compute_worker(c)]
            )
        )
    return futures


@dataclass(frozen=True, eq=False)
class DumpResult:
    """One assignment method's dump: locality, plan quality, measured write, verification."""

    method: str
    strategy: str
    stats: IntervalStats
    planned_ratio: float
    write_seconds: float
    planned_makespan: float
    stage_seconds: float
    nbytes: int
    path: Path
    writer: IntArray = field(repr=False)
    result: Any = field(repr=False)

    @property
    def pieces(self) -> int:
        """Contiguous byte ranges written (intervals cut at stripe boundaries)."""
        return int(self.result.manifest["datasets"][DATASET]["pieces"])

    @property
    def write_throughput(self) -> float:
        """Bytes per second of the traced writes (first start to last end)."""
        return self.nbytes / self.write_seconds if self.write_seconds > 0 else float("inf")


def dump(
    case: MeshCase,
    cluster: Any,
    target: str | os.PathLike[str],
    load: int = 100,
    method: str = "idg",
    strategy: str = "auto",
    rule: DecisionRule | None = None,
    contributions: Sequence[Any] | None = None,
    options: WriteOptions | None = None,
    **changes: Any,
) -> DumpResult:
    """Dump the mesh's ``load`` vector to ``target`` and check every row after the commit.

    Parameters
    ----------
    case : MeshCase
    cluster : orchestrator.engine.cluster.IOCluster
    target : path
        The HDF5 file or Zarr directory to create.
    load : int
        Values per node.
    method : {"idg", "metis", "first", "random"}
        Replica assignment.
    strategy : {"auto", "list", "two-phase", "sequential"}
    rule : DecisionRule, optional
        Thresholds of ``auto``.
    contributions : list of futures, optional
        From :func:`make_contributions` (reuse them across methods).
    options : WriteOptions, optional
        How the dump is written (default: 1 MiB stripes); its ``cost``
        model's network bandwidth also feeds the ``auto`` rule, its ``seed``
        the assignment's ties.
    **changes
        Fields of :class:`~orchestrator.engine.options.WriteOptions` to change
        (``format=``, ``policy=``, ``stripe_bytes=``, ``cost=``, ``seed=``,
        ``overwrite=``, …), as in :func:`~orchestrator.engine.stage.write_stage`.

    Examples
    --------
    >>> from orchestrator.engine.cluster import local_cluster
    >>> case = load_case(nodes=5000, parts=4)
    >>> with local_cluster(2, 2) as cl:  # doctest: +SKIP
    ...     res = dump(case, cl, "mesh.h5", load=10, method="idg")
    >>> res.stats.total_intervals, res.strategy  # doctest: +SKIP
    (1032, 'two-phase')
    """
    # engine.stage loads the planner (Numba, SciPy) and distributed: not on compute workers
    from orchestrator.engine.stage import write_stage

    if (
        isinstance(load, bool)
        or not isinstance(load, int | np.integer)
        or not 1 <= load <= MAX_LOAD
    ):
        raise InputError(f"load must be an integer in 1..{MAX_LOAD}, got {load!r}")
    if method not in METHODS:
        raise InputError(f"unknown assignment method {method!r}; choose one of {list(METHODS)}")
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    target = Path(target)
    base = options or WriteOptions(stripe_bytes=DUMP_STRIPE_BYTES)
    write = base.updated(**changes) if changes else base
    seed = write.seed
    rule = rule or DecisionRule()
    if strategy == "auto":
        cost = get_cost_model(write.cost) if isinstance(write.cost, str) else write.cost
        bandwidth = cost.network_bandwidth if cost is not None else float("inf")
        strategy = rule.choose(case.n_nodes, load, bandwidth)
    own = contributions is None
    parts = make_contributions(case, load, cluster) if own else list(contributions or [])
    spec = DatasetSpec(DATASET, (case.n_nodes, load), "float64")
    temporary = parts if own else []
    try:
        if strategy == "sequential":
            rows = np.arange(case.n_nodes, dtype=np.int64)
            root = cluster.client.submit(
                _gather_root, rows, *parts, pure=False, workers=[cluster.compute_worker(0)]
            )
            temporary = [*temporary, root]
            writer = np.zeros(case.n_nodes, dtype=np.int64)
            opts = write.updated(strategy="contiguous")
            res = write_stage(target, {DATASET: (spec, [root])}, opts, cluster=cluster)
            n_writers = 1
        else:
            writer = assign(case.replicas, case.partition, method, seed=seed)
            opts = write.updated(strategy=strategy, assignment={DATASET: writer})
            res = write_stage(target, {DATASET: (spec, parts)}, opts, cluster=cluster)
            n_writers = case.n_parts
    finally:  # what this call put on the workers goes when it is done
        if temporary:  # root depends on parts: release, not cancel (see IOCluster.release)
            cluster.release(temporary)
    verify_dump(target, load)
    assert res.plan is not None  # a dump has rows: it was planned
    return DumpResult(
        method=method if strategy != "sequential" else "root",
        strategy=strategy,
        stats=interval_stats(writer, n_writers),
        planned_ratio=res.plan.makespan / res.plan.lower_bound if res.plan.lower_bound else 1.0,
        write_seconds=res.trace.makespan,
        planned_makespan=res.plan.makespan,
        stage_seconds=res.seconds,
        nbytes=spec.nbytes,
        path=target,
        writer=writer,
        result=res,
    )


def verify_dump(
    path: str | os.PathLike[str], load: int | None = None, block_rows: int = 1 << 16
) -> int:
    """Read a committed dump back and check every row against :func:`expected_values`.

    Returns the number of rows checked; raises :class:`DumpError` naming the
    first wrong row.

    Examples
    --------
    >>> verify_dump("mesh.h5")  # doctest: +SKIP
    32888
    """
    # engine.stage loads the planner (Numba, SciPy) and distributed: not on compute workers
    from orchestrator.engine.verify import open_datasets

    with open_datasets(path) as data:
        if DATASET not in data:
            raise DumpError(f"{path}: no dataset {DATASET!r} (found {sorted(data)})")
        arr = data[DATASET]
        n, width = arr.shape
        if load is not None and width != load:
            raise DumpError(f"{path}: rows hold {width} values, expected load {load}")
        for r0 in range(0, n, block_rows):
            r1 = min(n, r0 + block_rows)
            got = np.asarray(arr[r0:r1])
            bad = np.flatnonzero((got != expected_values(np.arange(r0, r1), width)).any(axis=1))
            if bad.size:
                r = r0 + int(bad[0])
                raise DumpError(
                    f"{path}: row {r} holds {got[bad[0], :4].tolist()}..., expected "
                    f"{expected_values([r], width)[0, :4].tolist()}... ({bad.size} bad rows in "
                    f"{r0}..{r1 - 1})"
                )
    return int(n)


def run_methods(
    case: MeshCase,
    cluster: Any,
    out: Path,
    methods: Sequence[str] = METHODS,
    load: int = 100,
    repeat: int = 1,
    advance: Callable[[str], None] = lambda m: None,
    **options: Any,
) -> list[DumpResult]:
    """:func:`dump` with each assignment method into ``out``, sharing the contributions.

    The contributions are built once on the compute workers and one
    unrecorded warm-up dump runs first (worker imports, kernel compilation,
    file-system metadata), then the methods take turns ``repeat`` times; each
    method's result is its run with the median write time. ``sequential``
    has a single writer whatever the method, so it runs once per repeat.

    Examples
    --------
    >>> run_methods(case, cl, Path("out"), ["metis", "idg"])  # doctest: +SKIP
    """
    from distributed import wait

    if repeat < 1:
        raise InputError(f"repeat must be >= 1, got {repeat}")
    # the format's own file suffix (".h5", ".zarr"), whichever backend writes it
    suffix = get_backend(options.get("format", defaults.FORMAT)).suffix.lstrip(".") or "out"
    if options.get("strategy") == "sequential":
        methods = list(methods)[:1]
    parts = make_contributions(case, load, cluster)
    wait(parts)
    try:
        warm = out / f".bips3d-warmup.{suffix}"
        try:
            dump(
                case,
                cluster,
                warm,
                load=load,
                method=methods[0],
                contributions=parts,
                overwrite=True,
                **options,
            )
        finally:
            # never a result, also when a signal lands between its commit and here
            remove_path(warm)
        runs: dict[str, list[DumpResult]] = {m: [] for m in methods}
        for _ in range(repeat):
            for m in methods:
                t0 = time.perf_counter()
                runs[m].append(
                    dump(
                        case,
                        cluster,
                        out / f"bips3d-{m}.{suffix}",
                        load=load,
                        method=m,
                        contributions=parts,
                        overwrite=True,
                        **options,
                    )
                )
                advance(f"{m} in {time.perf_counter() - t0:.1f} s")
    finally:
        cluster.release(parts)
    return [sorted(r, key=lambda x: x.write_seconds)[(len(r) - 1) // 2] for r in runs.values()]


def default_mesh() -> Path | None:
    """The real BIPS3D mesh, if this machine has it: ``$IORCH_BIPS3D_MESH``, else the shared
    data folder beside the checkout (``../shared/data/bips3d-mesh2/mesh.graph``).

    Examples
    --------
    >>> p = default_mesh()
    >>> p is None or p.name == "mesh.graph" or p.exists()
    True
    """
    env = os.environ.get("IORCH_BIPS3D_MESH")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[1]
    for base in (Path.cwd(), repo):
        p = base.parent / "shared" / "data" / "bips3d-mesh2" / "mesh.graph"
        if p.exists():
            return p
    return None
