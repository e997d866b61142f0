"""Replica sets of partitioned meshes and the choice of one writer per row (IDG and baselines).

A mesh partitioned over clients replicates its boundary nodes: every
partition that touches a node holds a valid copy of its row. Exactly one copy
is written, and which one decides how contiguous each writer's rows are
(Filgueira et al., *Data locality aware strategy for two-phase collective
I/O*, sections 4-5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .checks import is_int
from .errors import ReplicaError

__all__ = [
    "METHODS",
    "IntervalStats",
    "ReplicaError",
    "ReplicaSets",
    "assign",
    "interval_stats",
    "replica_sets",
]

METHODS = ("metis", "first", "random", "idg")


def _int_array(name: str, x: Any) -> npt.NDArray[np.int64]:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ReplicaError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise ReplicaError(f"{name} must hold integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ReplicaSets:
    """For each row, the clients holding a valid copy: CSR, own partition first.

    Row ``v``'s set is ``clients[indptr[v]:indptr[v + 1]]``; its first entry
    is the partition that owns the row, the others follow in ascending order.
    A row with one member is *local*, with more it is *shared*.

    Parameters
    ----------
    indptr : array_like of int, length ``n_rows + 1``
    clients : array_like of int

    Examples
    --------
    >>> rs = ReplicaSets.from_lists([[0], [0, 1], [1, 0]])
    >>> rs.n_rows, rs[2].tolist(), rs.replicated_fraction
    (3, [1, 0], 0.6666666666666666)
    """

    indptr: npt.NDArray[np.int64]
    clients: npt.NDArray[np.int64]
    n_clients: int = field(default=-1)

    def __post_init__(self) -> None:
        ptr = _int_array("indptr", self.indptr)
        cl = _int_array("clients", self.clients)
        if ptr.size == 0 or ptr[0] != 0 or ptr[-1] != cl.size:
            raise ReplicaError(
                f"indptr must start at 0 and end at len(clients) = {cl.size}, got "
                f"{ptr[:1].tolist()} ... {ptr[-1:].tolist()}"
            )
        sizes = np.diff(ptr)
        if (sizes < 1).any():
            r = int(np.argmax(sizes < 1))
            raise ReplicaError(
                f"row {r} has an empty replica set (indptr[{r}:{r + 2}] = "
                f"{ptr[r : r + 2].tolist()}); every row needs its own partition"
            )
        if cl.size and cl.min() < 0:
            i = int(np.argmax(cl < 0))
            row = int(np.searchsorted(ptr, i, side="right") - 1)
            raise ReplicaError(f"clients[{i}] = {int(cl[i])} (row {row}) is negative")
        k = int(cl.max()) + 1 if cl.size else 0
        if self.n_clients != -1 and self.n_clients < k:
            raise ReplicaError(f"n_clients = {self.n_clients} but client id {k - 1} appears")
        for name, value in (("indptr", ptr), ("clients", cl)):
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "n_clients", k if self.n_clients == -1 else self.n_clients)

    @classmethod
    def from_lists(cls, sets: Any, n_clients: int = -1) -> ReplicaSets:
        """Build from one sequence of client ids per row (own partition first).

        Examples
        --------
        >>> ReplicaSets.from_lists([[1], [1, 0]]).clients.tolist()
        [1, 1, 0]
        """
        sizes = [len(s) for s in sets]
        ptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        flat = np.array([c for s in sets for c in s], dtype=np.int64)
        return cls(ptr, flat, n_clients)

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.indptr.size - 1)

    @property
    def sizes(self) -> npt.NDArray[np.int64]:
        """Number of copies of each row."""
        return np.diff(self.indptr)

    @property
    def own(self) -> npt.NDArray[np.int64]:
        """The owning partition of each row (first member)."""
        return self.clients[self.indptr[:-1]]

    @property
    def shared(self) -> npt.NDArray[np.bool_]:
        """Rows held by more than one client."""
        return self.sizes > 1

    @property
    def replicated_fraction(self) -> float:
        """Fraction of rows that are shared."""
        return float(self.shared.mean()) if self.n_rows else 0.0

    def rows_of(self, client: int) -> npt.NDArray[np.int64]:
        """The rows ``client`` holds a copy of, ascending.

        Examples
        --------
        >>> ReplicaSets.from_lists([[0], [0, 1], [1, 0]]).rows_of(1).tolist()
        [1, 2]
        """
        row = np.repeat(np.arange(self.n_rows, dtype=np.int64), self.sizes)
        return row[self.clients == client]

    def __getitem__(self, row: int) -> npt.NDArray[np.int64]:
        return self.clients[self.indptr[row] : self.indptr[row + 1]]

    def __len__(self) -> int:
        return self.n_rows


def check_graph(
    indptr: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
    error: type[Exception] = ReplicaError,
    what: str = "node",
) -> None:
    """Reject a CSR graph the kernels (and METIS) would read out of bounds, with ``error``.

    Examples
    --------
    >>> check_graph(np.array([0, 1, 2]), np.array([1, 5]))
    Traceback (most recent call last):
    ...
    orchestrator.errors.ReplicaError: indices holds node 5, outside 0..1
    """
    n = indptr.size - 1
    if indptr[0] != 0 or indptr[-1] != indices.size or (np.diff(indptr) < 0).any():
        raise error(f"indptr must rise from 0 to len(indices) = {indices.size}")
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = int(indices[(indices < 0) | (indices >= n)][0])
        raise error(f"indices holds {what} {bad}, outside 0..{n - 1}")


def replica_sets(
    indptr: Any, indices: Any, partition: Any, halo: int = 1, n_parts: int | None = None
) -> ReplicaSets:
    """Replica sets of a partitioned mesh graph: own partition first, then the others.

    A node is held by every partition that owns a node within ``halo`` graph
    hops (1 = graph neighbours, 2 = two hops, ...). On the real BIPS3D mesh
    the IDG paper's interval counts match ``halo=2``; the depth is a
    property of the application, applications with their own halo logic
    build :class:`ReplicaSets` directly.

    Parameters
    ----------
    indptr, indices : array_like of int
        The mesh's nodal graph, 0-based CSR (both directions of each edge).
    partition : array_like of int
        Partition (client) of each node.
    halo : int
        Replication depth in graph hops, ``>= 1``.
    n_parts : int, optional
        Number of partitions (default: ``max(partition) + 1``).

    Examples
    --------
    >>> import numpy as np
    >>> indptr, indices = np.array([0, 1, 3, 4]), np.array([1, 0, 2, 1])  # the path 0 - 1 - 2
    >>> rs = replica_sets(indptr, indices, np.array([0, 0, 1]))
    >>> [rs[v].tolist() for v in range(3)]
    [[0], [0, 1], [1, 0]]
    """
    # Numba loads on first call: workers import this module through the workflows
    from .kernels.idg import replica_sets as kernel

    part = _int_array("partition", partition)
    ptr, idx = _int_array("indptr", indptr), _int_array("indices", indices)
    if not is_int(halo, 1):
        raise ReplicaError(f"halo must be an integer >= 1, got {halo!r}")
    if part.size and part.min() < 0:
        i = int(np.argmax(part < 0))
        raise ReplicaError(f"partition[{i}] = {int(part[i])} is negative")
    k = (int(part.max()) + 1 if part.size else 0) if n_parts is None else int(n_parts)
    if part.size and k <= int(part.max()):
        raise ReplicaError(f"n_parts = {k} but partition holds id {int(part.max())}")
    if ptr.size != part.size + 1:
        raise ReplicaError(
            f"indptr has {ptr.size} entries for {part.size} nodes (needs len(partition) + 1)"
        )
    check_graph(ptr, idx, ReplicaError)
    out_ptr, members = kernel(ptr, idx, part, k, int(halo))
    return ReplicaSets(out_ptr, members, k)


def assign(
    replicas: ReplicaSets,
    partition: Any = None,
    method: str = "idg",
    seed: int = 0,
) -> npt.NDArray[np.int64]:
    """The writing client of every row, chosen from its replica set.

    Parameters
    ----------
    replicas : ReplicaSets
        One set per row, own partition first.
    partition : array_like of int, optional
        Owning partition of each row; checked against the first member of
        each set when given.
    method : {"idg", "metis", "first", "random"}
        ``metis``: the own partition (METIS' balance, no grouping);
        ``first``: the smallest client id in the set; ``random``: uniform
        over the set (``seed``, reproducible); ``idg``: Interval Data
        Grouping — a shared row takes the *assigned* writer of the previous
        row if that writer holds a copy, else the partition of the next row
        if it holds one, else its own partition.
    seed : int
        Seed of ``random``.

    Returns
    -------
    numpy.ndarray of int64
        Writer per row; always a member of the row's replica set.

    Examples
    --------
    The IDG paper's example mesh (its Tables 1 and 2):

    >>> rs = ReplicaSets.from_lists([[0], [0, 1], [1, 0], [0], [1, 0], [0, 1], [1], [0, 1]])
    >>> assign(rs, method="idg").tolist()
    [0, 0, 0, 0, 0, 0, 1, 1]
    >>> assign(rs, method="metis").tolist()
    [0, 0, 1, 0, 1, 0, 1, 0]
    """
    # Numba loads on first call: workers import this module through the workflows
    from .kernels import idg as k
    from .kernels.rng import make_state  # Numba too

    if not isinstance(replicas, ReplicaSets):
        raise ReplicaError(
            f"replicas must be a ReplicaSets (see replica_sets()), got {type(replicas).__name__}"
        )
    if partition is not None:
        part = _int_array("partition", partition)
        if part.size != replicas.n_rows:
            raise ReplicaError(
                f"partition has {part.size} entries for {replicas.n_rows} rows of replica sets"
            )
        bad = part != replicas.own
        if bad.any():
            r = int(np.argmax(bad))
            raise ReplicaError(
                f"row {r}: partition says {int(part[r])} but its replica set starts with "
                f"{int(replicas.own[r])} (own partition first)"
            )
    ptr, members = replicas.indptr, replicas.clients
    if method == "metis":
        return replicas.own.copy()
    if method == "first":
        return np.asarray(k.first(ptr, members))
    if method == "random":
        return np.asarray(k.uniform(ptr, members, make_state(seed)))
    if method == "idg":
        return np.asarray(k.idg(ptr, members))
    raise ReplicaError(f"unknown assignment method {method!r}; choose one of {list(METHODS)}")


@dataclass(frozen=True, eq=False)
class IntervalStats:
    """Locality and balance of an assignment (the IDG paper's Table 4 and Eq. 1).

    An *interval* is a maximal run of consecutive rows with the same writer.

    Attributes
    ----------
    n_writers : int
    intervals : numpy.ndarray
        Intervals of each writer.
    rows : numpy.ndarray
        Rows of each writer.
    """

    n_writers: int
    intervals: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64]

    @property
    def total_intervals(self) -> int:
        """Intervals over all writers."""
        return int(self.intervals.sum())

    @property
    def intervals_per_writer(self) -> float:
        """Average number of intervals per writer (Table 4's "Nr. of intervals")."""
        return self.total_intervals / self.n_writers if self.n_writers else 0.0

    @property
    def mean_interval_length(self) -> float:
        """Rows per interval (Table 4's "Average length")."""
        return float(self.rows.sum()) / self.total_intervals if self.total_intervals else 0.0

    @property
    def load_balance(self) -> float:
        """``(max - min) / mean`` rows per writer (Eq. 1); 0 is perfect balance."""
        mean = self.rows.mean() if self.n_writers else 0.0
        return float((self.rows.max() - self.rows.min()) / mean) if mean else 0.0

    def as_dict(self) -> dict[str, float]:
        """The scalar metrics by name.

        Examples
        --------
        >>> interval_stats([0, 0, 1]).as_dict()["total_intervals"]
        2.0
        """
        return {
            "total_intervals": float(self.total_intervals),
            "intervals_per_writer": self.intervals_per_writer,
            "mean_interval_length": self.mean_interval_length,
            "load_balance": self.load_balance,
        }


def interval_stats(writers: Any, n_writers: int | None = None) -> IntervalStats:
    """Intervals per writer, average interval length and load balance of a writer array.

    Parameters
    ----------
    writers : array_like of int
        Writer of each row, in storage order.
    n_writers : int, optional
        Number of writers (default ``max(writers) + 1``); writers without
        rows count, as idle clients do in the paper's averages.

    Examples
    --------
    >>> s = interval_stats([0, 0, 1, 1, 0])
    >>> s.total_intervals, s.intervals_per_writer, s.mean_interval_length, s.load_balance
    (3, 1.5, 1.6666666666666667, 0.4)
    """
    # Numba loads on first call: workers import this module through the workflows
    from .kernels.idg import intervals

    w = _int_array("writers", writers)
    if w.size and w.min() < 0:
        i = int(np.argmax(w < 0))
        raise ReplicaError(f"writers[{i}] = {int(w[i])} is negative")
    top = int(w.max()) + 1 if w.size else 0
    k = top if n_writers is None else int(n_writers)
    if k < top:
        raise ReplicaError(f"n_writers = {k} but writer id {top - 1} appears")
    return IntervalStats(k, np.asarray(intervals(w, k)), np.bincount(w, minlength=k))
