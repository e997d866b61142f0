"""``split-opt``: the preemptive open-shop optimum, built by Birkhoff–von Neumann decomposition.

When transfers may be cut, the best makespan is the lower bound
``max(max client load, max I/O-node load)`` (Gonzalez & Sahni 1976). This
module builds such a plan from the client × I/O-node load matrix:

1. Each transfer weighs ``nbytes + latency·bandwidth`` *byte-equivalents*
   (its duration times the bandwidth, rounded to whole bytes), so a pair's
   entry is its summed duration and the matrix's largest line sum is the
   lower bound (in bytes: the cost model has one bandwidth for all pairs).
2. The matrix is padded to a square regular one and decomposed into
   perfect matchings (phases) by :mod:`orchestrator.kernels.decompose`
   (a Numba kernel; see there why not scipy). A pair matched in consecutive
   phases is one piece.
3. Each pair's pieces (time slots) consume its transfers (in index order)
   as one stream; a slot crossing a transfer boundary becomes one slot per
   transfer.
4. Bytes go into slots so that *no piece outlasts its slot*: a transfer
   that fits one of its slots whole takes it uncut; otherwise its bytes
   fill its slots in time order, each holding its length minus the latency
   and piece overhead a cut piece pays, cut offsets rounded down to
   multiples of ``align``, and slots that would hold less than
   ``min_piece`` bytes left empty (only a transfer's last piece may be
   smaller than ``min_piece``: it is what is left). Transfers whose slots
   cannot hold them are inflated by the missing bytes plus one piece's
   cost and the decomposition is redone (at most ``max_rounds`` times);
   the round whose plan is shortest is kept (inflating trades overruns
   for a larger bound, and the best balance varies).
5. Units are ordered by the start of their slot. List scheduling then
   runs every unit no later than its slot, so the makespan is at most the
   padded matrix's bound: exactly the lower bound with zero latency,
   overhead and ``min_piece=1``; otherwise the bound plus the cost of the
   cuts on the busiest client or I/O node.
6. Consecutive pieces of a transfer with nothing of their client or I/O
   node between them are merged (same start times, one piece cost less).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..cost import CostModel
from ..kernels import decompose
from ..kernels.timing import list_schedule
from ..plan import Units
from ..transfers import TransferSet

__all__ = ["effective_bytes", "split_opt_units"]


def effective_bytes(transfers: TransferSet, cost: CostModel) -> npt.NDArray[np.int64]:
    """Byte-equivalents of each transfer: ``nbytes + round(latency · bandwidth)``.

    Examples
    --------
    >>> from orchestrator import CostModel, TransferSet
    >>> cm = CostModel(2.0, 2.0, network_latency=1.5)
    >>> effective_bytes(TransferSet([0], [0], [10]), cm).tolist()
    [13]
    """
    lat = round(cost.latency * cost.bandwidth)
    return transfers.nbytes + np.int64(lat)


def split_opt_units(
    transfers: TransferSet,
    cost: CostModel,
    min_piece: int = 1,
    align: int = 1,
    max_rounds: int = 4,
) -> tuple[Units, npt.NDArray[np.int64], dict[str, Any]]:
    """Pieces and order of the ``split-opt`` plan of ``transfers`` (see the module docstring).

    Returns the units, the order, and statistics of the kept round:
    ``phases`` of its decomposition, its number (``rounds``), the ``bound``
    its padded matrix reached (seconds), and the ``overrun_bytes`` that did
    not fit their slots (then pieces run past their slots).

    Examples
    --------
    >>> from orchestrator import CostModel, TransferSet
    >>> ts = TransferSet([0, 0, 1, 1], [0, 1, 0, 1], [2, 1, 1, 2])
    >>> units, order, stats = split_opt_units(ts, CostModel(1.0, 1.0))
    >>> units.parent[order].tolist(), stats["phases"]
    ([0, 3, 1, 2], 2)
    """
    nc, ns = transfers.n_clients, transfers.n_ionodes
    nbytes = transfers.nbytes
    lat_eq = round(cost.latency * cost.bandwidth)
    cut_eq = round((cost.latency + cost.piece_overhead) * cost.bandwidth)
    pair = transfers.client * ns + transfers.ionode
    by_pair = np.argsort(pair, kind="stable").astype(np.int64)  # a pair's transfers, index order
    upair, first = np.unique(pair[by_pair], return_index=True)
    tr_ptr = np.append(first, pair.size).astype(np.int64)
    n = max(nc, ns)
    extra = np.zeros(len(transfers), dtype=np.int64)
    best: tuple[Units, npt.NDArray[np.int64], dict[str, Any]] | None = None
    best_makespan = np.inf
    for rnd in range(1, max_rounds + 1):
        eff = nbytes + lat_eq + extra
        load = np.add.reduceat(eff[by_pair], first).astype(np.int64)
        row, col, w, lim = decompose.regularize(upair // ns, upair % ns, load, n)
        p_edge, p_t0, p_t1, phases = decompose.bvn(row, col, w, n, lim, upair.size)
        real = p_edge < upair.size
        p_edge, p_t0, p_t1 = p_edge[real], p_t0[real], p_t1[real]
        srt = np.lexsort((p_t0, p_edge))
        parent, elo, ehi, key = decompose.pair_pieces_to_units(
            p_edge[srt], p_t0[srt], p_t1[srt], tr_ptr, by_pair, eff
        )
        # slots are already in (transfer, start) order within each pair; make it global
        by_tr = np.lexsort((elo, parent))
        parent, elo, ehi, key = parent[by_tr], elo[by_tr], ehi[by_tr], key[by_tr]
        size, short = decompose.fill_slots(
            parent, ehi - elo, nbytes, lat_eq, cut_eq, int(min_piece), int(align)
        )
        units, order = _units_and_order(transfers, cost, parent, key, size)
        _, end = list_schedule(order, units.client, units.ionode, units.durations, nc, ns)
        stats = {
            "phases": int(phases),
            "rounds": rnd,
            "bound": float(lim) / cost.bandwidth,
            "overrun_bytes": int(short.sum()),
        }
        if float(end.max()) < best_makespan:
            best, best_makespan = (units, order, stats), float(end.max())
        if not short.any():
            break
        extra += short + cut_eq  # room for the bytes that did not fit, and one more piece
    assert best is not None
    return best


def _units_and_order(
    transfers: TransferSet,
    cost: CostModel,
    parent: npt.NDArray[np.int64],
    key: npt.NDArray[np.int64],
    size: npt.NDArray[np.int64],
) -> tuple[Units, npt.NDArray[np.int64]]:
    """Units of the filled slots (sorted by transfer, then start) and their order by start."""
    used = size > 0
    parent, key, size = parent[used], key[used], size[used]
    offset = np.cumsum(size) - size
    starts = np.flatnonzero(np.r_[True, parent[1:] != parent[:-1]])
    offset -= np.repeat(offset[starts], np.diff(np.r_[starts, parent.size]))
    rank = np.empty(parent.size, dtype=np.int64)
    rank[np.lexsort((offset, parent, key))] = np.arange(parent.size)
    keep = decompose.merge_pieces(
        parent,
        rank,
        transfers.client[parent],
        transfers.ionode[parent],
        transfers.n_clients,
        transfers.n_ionodes,
    )
    # a merged piece absorbs the pieces after it: sizes summed over each kept run
    run = np.cumsum(keep) - 1
    size = np.bincount(run, weights=size).astype(np.int64)
    parent, offset, rank = parent[keep], offset[keep], rank[keep]
    units = Units.from_pieces(transfers, cost, parent, offset, size)
    order = np.argsort(rank, kind="stable").astype(np.int64)
    return units, order
