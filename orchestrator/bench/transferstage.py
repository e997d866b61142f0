"""A stage whose transfers are a given TransferSet: the papers' workloads, written for real.

The bidding paper's workloads are (client, I/O node, bytes) triples, not
datasets. :func:`transfer_stage` lays each I/O node's transfers one after
another into that node's stripes (round-robin striping: node ``s`` owns
stripes ``s, s + n, …``), each transfer a run of whole rows held by its
client, so that the engine's layout (strategy ``"list"``: all pieces of a
(client, I/O node) pair are one transfer) derives exactly the given set,
sizes rounded up to whole rows. Rows past an I/O node's load are not written
(``allow_missing``).

Examples
--------
>>> from orchestrator import TransferSet
>>> ts = TransferSet(client=[0, 1, 1], ionode=[0, 0, 1], nbytes=[2048, 1024, 1024])
>>> st = transfer_stage(ts, row_bytes=1024, stripe_bytes=4096)
>>> st.spec.shape, [r.tolist() for r in st.rows]
((8, 128), [[0, 1], [2, 4]])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..contributions import Contribution, DatasetSpec
from ..engine.cluster import IOCluster
from ..errors import InputError
from ..layout import StripeLayout, derive_transfers
from ..transfers import TransferSet

__all__ = ["TransferStage", "contribution_of", "place", "transfer_stage"]


@dataclass(frozen=True, eq=False)
class TransferStage:
    """The dataset, each client's rows, and the TransferSet the engine will derive."""

    spec: DatasetSpec
    rows: list[npt.NDArray[np.int64]]
    stripe_bytes: int
    transfers: TransferSet
    #: the TransferSet given (its order is each client's own: the unordered baseline's)
    given: TransferSet | None = None

    @property
    def nbytes(self) -> int:
        """Bytes the stage writes (the transfers' sum)."""
        return int(self.transfers.total_bytes)


def transfer_stage(
    ts: TransferSet, row_bytes: int = 4096, stripe_bytes: int = 1 << 20
) -> TransferStage:
    """Lay ``ts`` out as one dataset of rows of ``row_bytes`` (see the module).

    Examples
    --------
    >>> from orchestrator.workload import bidding_workload
    >>> ts = bidding_workload(n_ionodes=4, n_clients=8, small_bytes=8192, large_bytes=65536)
    >>> st = transfer_stage(ts, row_bytes=1024, stripe_bytes=16384)
    >>> int(st.transfers.total_bytes) >= int(ts.total_bytes)
    True
    """
    if row_bytes < 8 or row_bytes % 8 or stripe_bytes % row_bytes:
        raise InputError(
            f"row_bytes must be a multiple of 8 dividing stripe_bytes, got {row_bytes} and "
            f"{stripe_bytes}"
        )
    n = ts.n_ionodes
    per_stripe = stripe_bytes // row_bytes
    rows_of = -(-ts.nbytes // row_bytes)  # whole rows, rounded up
    order = np.lexsort((np.arange(len(ts)), ts.ionode))  # by I/O node, then index
    # each transfer's first row in its node's own row space
    local = np.zeros(len(ts), dtype=np.int64)
    starts = np.cumsum(rows_of[order]) - rows_of[order]
    first_of_node = np.searchsorted(ts.ionode[order], np.arange(n))
    node_base = starts[np.minimum(first_of_node, len(ts) - 1)]
    local[order] = starts - node_base[ts.ionode[order]]
    load = np.bincount(ts.ionode, weights=rows_of, minlength=n).astype(np.int64)
    stripes = int(-(-load.max() // per_stripe))
    n_rows = stripes * n * per_stripe

    def global_rows(node: int, lo: int, count: int) -> npt.NDArray[np.int64]:
        r = np.arange(lo, lo + count, dtype=np.int64)
        return (r // per_stripe * n + node) * per_stripe + r % per_stripe

    held: list[list[npt.NDArray[np.int64]]] = [[] for _ in range(ts.n_clients)]
    for i in range(len(ts)):
        held[int(ts.client[i])].append(global_rows(int(ts.ionode[i]), local[i], int(rows_of[i])))
    rows = [np.sort(np.concatenate(h)) if h else np.zeros(0, np.int64) for h in held]
    spec = DatasetSpec("transfers", (n_rows, row_bytes // 8), "float64")
    writer = np.full(n_rows, -1, dtype=np.int64)
    for c, r in enumerate(rows):
        writer[r] = c
    derived = derive_transfers(
        spec, writer, StripeLayout(n, stripe_bytes), "list", n_clients=ts.n_clients
    ).transfers
    return TransferStage(spec, rows, stripe_bytes, derived, ts)


def contribution_of(client: int, rows: npt.NDArray[np.int64], width: int) -> Any:
    """Client ``client``'s contribution: every value its row id (checkable), made where it runs.

    Examples
    --------
    >>> contribution_of(2, np.array([3, 4]), 2).values.tolist()
    [[3.0, 3.0], [4.0, 4.0]]
    """
    values = np.repeat(rows.astype(np.float64)[:, None], width, axis=1)
    return Contribution(client, rows, values)


def place(cluster: IOCluster, st: TransferStage) -> list[Any]:
    """Each client's contribution, made on its compute worker (client ``c`` on worker ``c``);
    futures, to release when done.

    Examples
    --------
    >>> parts = place(cluster, stage)  # doctest: +SKIP
    """
    from distributed import wait

    width = st.spec.shape[1]
    parts = [
        cluster.client.submit(
            contribution_of, c, rows, width, pure=False, workers=[cluster.compute_worker(c)]
        )
        for c, rows in enumerate(st.rows)
        if rows.size
    ]
    wait(parts)
    return parts
