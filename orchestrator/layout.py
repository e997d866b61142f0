"""Layout: striping a dataset's bytes over I/O nodes, and the transfers it implies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from . import defaults
from .checks import is_int
from .contributions import DatasetSpec
from .errors import LayoutError
from .transfers import TransferSet

__all__ = ["STRATEGIES", "LayoutError", "StageTransfers", "StripeLayout", "derive_transfers"]

STRATEGIES = ("contiguous", "list", "two-phase")


@dataclass(frozen=True)
class StripeLayout:
    """Round-robin striping: stripe ``k`` (bytes ``[k*S, (k+1)*S)``) lives on I/O node ``k % n``.

    Like a parallel file system: each stripe has exactly one I/O node, which
    is the only one to write it.

    Examples
    --------
    >>> lay = StripeLayout(n_ionodes=3, stripe_bytes=100)
    >>> lay.ionode_of_byte(250), lay.stripes(1000)
    (2, 10)
    """

    n_ionodes: int
    stripe_bytes: int

    def __post_init__(self) -> None:
        for name in ("n_ionodes", "stripe_bytes"):
            v = getattr(self, name)
            if not is_int(v, 1):
                raise LayoutError(f"{name} must be an integer >= 1, got {v!r}")

    def ionode_of_byte(self, offset: int) -> int:
        """The I/O node owning byte ``offset``."""
        return (offset // self.stripe_bytes) % self.n_ionodes

    def stripes(self, nbytes: int) -> int:
        """Number of stripes covering ``nbytes`` bytes."""
        return -(-nbytes // self.stripe_bytes)


@dataclass(frozen=True, eq=False)
class StageTransfers:
    """The pieces of a dataset each writer sends to each I/O node, grouped into transfers.

    A *piece* is a byte range ``[offset, offset + nbytes)`` of the dataset,
    contiguous in rows of one writer and inside one stripe run of one I/O
    node. ``piece_transfer`` maps pieces to the transfers of
    :attr:`transfers` (one piece each for ``"contiguous"``; all pieces of a
    (client, I/O node) pair for ``"list"`` and ``"two-phase"``).
    """

    spec: DatasetSpec
    layout: StripeLayout
    strategy: str
    transfers: TransferSet
    piece_client: npt.NDArray[np.int64]
    piece_ionode: npt.NDArray[np.int64]
    piece_offset: npt.NDArray[np.int64]
    piece_nbytes: npt.NDArray[np.int64]
    piece_transfer: npt.NDArray[np.int64]

    @property
    def n_pieces(self) -> int:
        """Number of pieces."""
        return int(self.piece_offset.size)


def derive_transfers(
    spec: DatasetSpec,
    writer: npt.NDArray[np.int64],
    layout: StripeLayout,
    strategy: str = defaults.STRATEGY,
    n_clients: int | None = None,
) -> StageTransfers:
    """Cut every writer's rows at stripe boundaries and group the pieces into transfers.

    Rows with writer ``-1`` (allowed missing rows) are skipped.

    Examples
    --------
    >>> import numpy as np
    >>> spec = DatasetSpec("u", (8,), "int64")            # 8 rows x 8 bytes
    >>> st = derive_transfers(spec, np.array([0, 0, 0, 1, 1, 1, 1, 0]), StripeLayout(2, 16))
    >>> st.piece_offset.tolist(), st.piece_nbytes.tolist(), st.piece_ionode.tolist()
    ([0, 16, 24, 32, 48, 56], [16, 8, 8, 16, 8, 8], [0, 1, 1, 0, 1, 1])
    >>> st.transfers.client.tolist()
    [0, 0, 1, 1, 1, 0]
    """
    if strategy not in STRATEGIES:
        raise LayoutError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    n, rb, sb = spec.n_rows, spec.row_bytes, layout.stripe_bytes
    if rb == 0:
        raise LayoutError(f"dataset {spec.name!r} has zero-size rows; nothing to write")
    # runs of equal writer over consecutive rows
    change = np.flatnonzero(writer[1:] != writer[:-1]) + 1
    run_start = np.concatenate(([0], change))
    run_stop = np.concatenate((change, [n]))
    keep = writer[run_start] >= 0
    run_start, run_stop = run_start[keep], run_stop[keep]
    run_client = writer[run_start]
    b0 = run_start * rb
    b1 = run_stop * rb
    # cut every run at stripe boundaries
    first_stripe = b0 // sb
    last_stripe = (b1 - 1) // sb
    per_run = last_stripe - first_stripe + 1
    idx = np.repeat(np.arange(run_start.size), per_run)
    k = np.arange(idx.size) - np.repeat(np.cumsum(per_run) - per_run, per_run)
    stripe = first_stripe[idx] + k
    p0 = np.maximum(b0[idx], stripe * sb)
    p1 = np.minimum(b1[idx], (stripe + 1) * sb)
    client = run_client[idx]
    ionode = stripe % layout.n_ionodes
    # adjacent pieces of one writer on one I/O node are one piece (one I/O node, or
    # stripe-aligned runs cut only by the stripe grid)
    if p0.size:
        join = (client[1:] == client[:-1]) & (ionode[1:] == ionode[:-1]) & (p0[1:] == p1[:-1])
        head = np.concatenate(([True], ~join))
        p1 = np.maximum.reduceat(p1, np.flatnonzero(head))
        p0, client, ionode = p0[head], client[head], ionode[head]
    nbytes = p1 - p0
    if strategy == "contiguous":
        piece_transfer = np.arange(p0.size, dtype=np.int64)
        tc, ts_, tb = client, ionode, nbytes
    else:
        n_io = layout.n_ionodes
        pair = client * n_io + ionode
        uniq, piece_transfer = np.unique(pair, return_inverse=True)
        tc, ts_ = uniq // n_io, uniq % n_io
        tb = np.bincount(piece_transfer, weights=nbytes).astype(np.int64)
    transfers = TransferSet(tc, ts_, tb, n_clients=n_clients, n_ionodes=layout.n_ionodes)
    return StageTransfers(
        spec=spec,
        layout=layout,
        strategy=strategy,
        transfers=transfers,
        piece_client=client,
        piece_ionode=ionode,
        piece_offset=p0,
        piece_nbytes=nbytes,
        piece_transfer=piece_transfer.astype(np.int64),
    )
