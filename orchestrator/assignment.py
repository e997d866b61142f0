"""Assignment: which client writes each row when several hold a copy."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .contributions import ContributionError, Holdings

__all__ = ["assign"]


def assign(holdings: Holdings, method: str | Any = "owner") -> npt.NDArray[np.int64]:
    """The writing client of every row (``-1`` for rows nobody holds).

    Parameters
    ----------
    holdings : Holdings
        From :func:`orchestrator.contributions.gather`.
    method : str or array_like
        ``"owner"``: the lowest client id among the holders. An array of one
        client per row: an assignment computed elsewhere (IDG, METIS, ...),
        checked to name a holder of every row.

    Examples
    --------
    >>> import numpy as np
    >>> from orchestrator.contributions import Contribution, DatasetSpec, gather
    >>> spec = DatasetSpec("u", (3,), "f8")
    >>> a, b = Contribution(1, [0, 1], np.zeros(2)), Contribution(0, [1, 2], np.zeros(2))
    >>> h = gather(spec, [a, b])
    >>> assign(h).tolist()
    [1, 0, 0]
    >>> assign(h, [1, 1, 0]).tolist()
    [1, 1, 0]
    """
    n = holdings.spec.n_rows
    count = holdings.count
    if isinstance(method, str):
        if method != "owner":
            raise ContributionError(
                f"unknown assignment method {method!r}; use 'owner' or pass a writer array"
            )
        writer = np.full(n, -1, dtype=np.int64)
        held = count > 0
        writer[held] = holdings.holders[holdings.ptr[:-1][held]]  # holders are sorted
        return writer
    writer = np.asarray(method)
    if writer.shape != (n,) or (writer.size and writer.dtype.kind not in "iu"):
        raise ContributionError(
            f"writer array must hold one integer per row ({n}), got shape {writer.shape} "
            f"dtype {writer.dtype}"
        )
    writer = writer.astype(np.int64)
    row_of = np.repeat(np.arange(n), count)
    is_writer = holdings.holders == writer[row_of]
    ok = np.zeros(n, dtype=bool)
    ok[row_of[is_writer]] = True
    ok |= (count == 0) & (writer == -1)
    if not ok.all():
        r = int(np.argmax(~ok))
        held_by = holdings.holders[holdings.ptr[r] : holdings.ptr[r + 1]].tolist()
        raise ContributionError(
            f"writer array: row {r} is assigned to client {int(writer[r])}, which does not "
            f"hold it (holders: {held_by})"
        )
    return writer


REPLICA_METHODS = ("metis", "first", "random", "idg")


def replica_sets(
    xadj: Any, adjncy: Any, part: Any, halo: int = 1, n_parts: int | None = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Replica sets of a partitioned mesh graph, CSR: own partition first, then the others.

    A node is held by every partition that owns a node within ``halo``
    graph hops (1 = graph neighbours, 2 = two hops, ...).

    Examples
    --------
    >>> import numpy as np
    >>> xadj, adjncy = np.array([0, 1, 3, 4]), np.array([1, 0, 2, 1])  # the path 0 - 1 - 2
    >>> ptr, members = replica_sets(xadj, adjncy, np.array([0, 0, 1]))
    >>> [members[ptr[v]:ptr[v + 1]].tolist() for v in range(3)]
    [[0], [0, 1], [1, 0]]
    """
    from .kernels.idg import replica_sets as kernel

    part = np.asarray(part, dtype=np.int64)
    if isinstance(halo, bool) or not isinstance(halo, int | np.integer) or halo < 1:
        raise ContributionError(f"halo must be an integer >= 1, got {halo!r}")
    if part.size and part.min() < 0:
        raise ContributionError(f"partition ids must be >= 0, got {int(part.min())}")
    k = int(part.max()) + 1 if n_parts is None else n_parts
    xadj, adjncy = np.asarray(xadj, dtype=np.int64), np.asarray(adjncy, dtype=np.int64)
    if xadj.size != part.size + 1:
        raise ContributionError(f"xadj has {xadj.size} entries for {part.size} nodes (needs n + 1)")
    result: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] = kernel(
        xadj, adjncy, part, k, int(halo)
    )
    return result


def assign_replicas(
    ptr: Any, members: Any, method: str = "idg", seed: int = 0
) -> npt.NDArray[np.int64]:
    """The writing partition of every node from its replica set (CSR, own partition first).

    Methods: ``metis`` (own partition), ``first`` (smallest partition id in
    the set), ``random`` (uniform over the set, seeded), ``idg`` (Interval
    Data Grouping: the previous node's assigned writer if it holds a copy,
    else the next node's partition if it does, else its own).

    Examples
    --------
    >>> import numpy as np
    >>> ptr = np.array([0, 1, 3, 5, 6, 8, 10, 11, 13])       # the IDG paper's Table 1
    >>> members = np.array([0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1])
    >>> assign_replicas(ptr, members, "idg").tolist()
    [0, 0, 0, 0, 0, 0, 1, 1]
    """
    from .kernels import idg as k
    from .kernels.rng import make_state

    ptr, members = np.asarray(ptr, dtype=np.int64), np.asarray(members, dtype=np.int64)
    if method == "metis":
        return members[ptr[:-1]].copy()
    if method == "first":
        return np.asarray(k.first(ptr, members))
    if method == "random":
        return np.asarray(k.uniform(ptr, members, make_state(seed)))
    if method == "idg":
        return np.asarray(k.idg(ptr, members))
    raise ContributionError(
        f"unknown replica method {method!r}; choose one of {list(REPLICA_METHODS)}"
    )


def interval_stats(writer: Any, n_parts: int | None = None) -> dict[str, float]:
    """Intervals (maximal runs of one writer) and balance of an assignment.

    Examples
    --------
    >>> s = interval_stats([0, 0, 1, 1, 0])
    >>> s["intervals"], s["intervals_per_writer"], s["load_balance"]
    (3.0, 1.5, 0.4)
    """
    from .kernels.idg import intervals

    w = np.asarray(writer, dtype=np.int64)
    k = int(w.max()) + 1 if n_parts is None else n_parts
    runs = intervals(w, k)
    rows = np.bincount(w, minlength=k)
    return {
        "intervals": float(runs.sum()),
        "intervals_per_writer": float(runs.mean()),
        "mean_interval_length": float(w.size / runs.sum()),
        "load_balance": float((rows.max() - rows.min()) / rows.mean()),
    }
