"""The pure core of dispatch: a plan becomes per-I/O-node instructions.

Nothing here touches Dask, files or the network; everything is plain
arrays, so the tests drive it with hypothesis and no cluster (as
``distributed.worker_state_machine`` is driven without a worker).

A stage's bytes are *ranges*: ``(dataset, offset, nbytes)`` of one client's
contribution, inside one stripe of one I/O node. Each unit of the plan moves
an ordered list of ranges (the pieces of its transfer, or the part of them
a block-splitting policy cut out). :func:`build_program` walks every I/O
node's units in plan order and cuts that stream of ranges into **batches**:
a batch is what the I/O worker fetches at once and then writes in order. The
first batches are small so writing starts early, later ones grow to
``batch_bytes``; a range is split where a batch ends, so no batch exceeds
its limit and an I/O worker's memory is bounded by its window whatever the
stage's size. Within a batch, the ranges held by one *source* (the worker
holding the contributions) form one **cut**: one task there copies them into
one buffer, which Dask moves to the I/O worker in one message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "Batch",
    "Cut",
    "NodeProgram",
    "Program",
    "Ranges",
    "StripeGroup",
    "build_program",
    "stripe_groups",
    "unit_ranges",
]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Ranges:
    """Columns of byte ranges: dataset index, client, byte offset in the dataset, length, unit."""

    dataset: I64
    client: I64
    offset: I64
    nbytes: I64
    unit: I64

    def __len__(self) -> int:
        return int(self.offset.size)

    def take(self, idx: npt.NDArray[np.intp] | slice) -> Ranges:
        """The ranges at ``idx`` (an index array or a slice)."""
        return Ranges(
            self.dataset[idx], self.client[idx], self.offset[idx], self.nbytes[idx], self.unit[idx]
        )


@dataclass(frozen=True, eq=False)
class Cut:
    """Ranges one source copies into one buffer, in buffer order (a task on that worker)."""

    source: int
    ranges: Ranges

    @property
    def nbytes(self) -> int:
        """Bytes of the cut's buffer."""
        return int(self.ranges.nbytes.sum())

    def contributions(self) -> tuple[list[tuple[int, int]], I64]:
        """The distinct ``(dataset, client)`` contributions the cut reads, and for each range
        the index of its contribution among them.

        Examples
        --------
        >>> r = Ranges(*[np.array(x) for x in ([1, 0, 1], [2, 2, 2], [0, 0, 8], [8, 8, 8],
        ...                                    [0, 0, 1])])
        >>> Cut(0, r).contributions()
        ([(0, 2), (1, 2)], array([1, 0, 1]))
        """
        pairs = np.stack([self.ranges.dataset, self.ranges.client], axis=1)
        uniq, which = np.unique(pairs, axis=0, return_inverse=True)
        return [(int(d), int(c)) for d, c in uniq], which.reshape(-1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Batch:
    """What an I/O worker fetches at once, then writes range by range in plan order.

    ``ranges`` are in write order; range ``i`` is range ``slot[i]`` of
    ``cuts[cut[i]]``, at bytes ``[pos[i], pos[i] + nbytes[i])`` of its buffer
    when the cut comes back packed.
    """

    ionode: int
    index: int
    ranges: Ranges
    cut: I64
    slot: I64
    pos: I64
    cuts: tuple[Cut, ...]
    planned_start: float

    @property
    def nbytes(self) -> int:
        """Bytes of the batch."""
        return int(self.ranges.nbytes.sum())


@dataclass(frozen=True, eq=False)
class NodeProgram:
    """Everything one I/O worker does, in order: its batches and its stripes."""

    ionode: int
    batches: tuple[Batch, ...]
    #: ``(dataset index, stripe offset, stripe bytes)`` of every stripe this I/O node owns
    stripes: tuple[tuple[int, int, int], ...]

    @property
    def nbytes(self) -> int:
        """Bytes this I/O node writes."""
        return sum(b.nbytes for b in self.batches)


@dataclass(frozen=True, eq=False)
class Program:
    """The per-I/O-node programs of one stage, and the ranks that order cuts across them."""

    nodes: tuple[NodeProgram, ...]
    #: ``priority[s][b]``: rank of batch ``b`` of I/O node ``s`` by planned start, over all
    #: I/O nodes (0 = earliest); cut tasks run in this order on the sources
    priority: tuple[tuple[int, ...], ...]

    @property
    def n_batches(self) -> int:
        """Batches over all I/O nodes."""
        return sum(len(n.batches) for n in self.nodes)


def unit_ranges(
    piece_dataset: I64,
    piece_offset: I64,
    piece_nbytes: I64,
    piece_transfer: I64,
    piece_client: I64,
    n_transfers: int,
    parent: I64,
    unit_offset: I64,
    unit_nbytes: I64,
) -> tuple[Ranges, I64]:
    """The ranges every unit moves, and ``ptr`` such that unit ``u`` has ranges ``ptr[u]:ptr[u+1]``.

    A transfer's bytes are its pieces in byte order; unit ``u`` is bytes
    ``[unit_offset[u], unit_offset[u] + unit_nbytes[u])`` of its parent
    transfer's bytes (the whole transfer when it is not split).

    Examples
    --------
    >>> r, ptr = unit_ranges(*[np.array(x) for x in ([0, 0], [0, 100], [10, 10], [0, 0], [3, 3])],
    ...                      1, np.array([0, 0]), np.array([0, 5]), np.array([5, 15]))
    >>> r.offset.tolist(), r.nbytes.tolist(), ptr.tolist()
    ([0, 5, 100], [5, 5, 10], [0, 1, 3])
    """
    order = np.lexsort((piece_offset, piece_dataset, piece_transfer))
    tr, nb = piece_transfer[order], piece_nbytes[order]
    t_bytes = np.bincount(tr, weights=nb, minlength=n_transfers).astype(np.int64)
    t_base = np.concatenate(([0], np.cumsum(t_bytes)[:-1])).astype(np.int64)
    # pieces tile [0, total) when laid out transfer after transfer
    p_end = np.cumsum(nb).astype(np.int64)
    p_start = p_end - nb
    u_start = t_base[parent] + unit_offset
    u_end = u_start + unit_nbytes
    first = np.searchsorted(p_end, u_start, side="right")
    last = np.searchsorted(p_start, u_end, side="left")
    count = np.maximum(last - first, 0)
    ptr = np.concatenate(([0], np.cumsum(count))).astype(np.int64)
    unit = np.repeat(np.arange(parent.size, dtype=np.int64), count)
    piece = first[unit] + (np.arange(unit.size) - ptr[unit])
    lo = np.maximum(p_start[piece], u_start[unit])
    hi = np.minimum(p_end[piece], u_end[unit])
    src = order[piece]
    ranges = Ranges(
        dataset=piece_dataset[src].astype(np.int64),
        client=piece_client[src].astype(np.int64),
        offset=(piece_offset[src] + (lo - p_start[piece])).astype(np.int64),
        nbytes=(hi - lo).astype(np.int64),
        unit=unit,
    )
    return ranges, ptr


def _split_batches(
    nbytes: Sequence[int],
    first: int,
    limit: int,
    units: Sequence[int] | None = None,
    close_at: int = 0,
) -> list[tuple[int, int, int]]:
    """Cut a stream of ranges into batches: ``(range index, start byte, end byte)`` triples.

    Batch ``k`` holds at most ``min(limit, first * 2**k)`` bytes (at least 1).
    With ``units`` (the unit of each range), a batch also ends where the unit
    changes once it holds ``close_at`` bytes (0: no batch holds two units).
    """
    out: list[tuple[int, int, int]] = []
    cap = max(1, min(first, limit))
    room = cap
    for i, n in enumerate(nbytes):
        if units is not None and i and units[i] != units[i - 1] and 0 < cap - room >= close_at:
            out.append((-1, 0, 0))
            cap = min(limit, cap * 2)
            room = cap
        done = 0
        while done < n:
            take = min(n - done, room)
            out.append((i, done, done + take))
            done += take
            room -= take
            if room == 0:
                out.append((-1, 0, 0))  # batch boundary
                cap = min(limit, cap * 2)
                room = cap
    return out


def build_program(
    ranges: Ranges,
    ptr: I64,
    order: I64,
    ionode: I64,
    planned_start: npt.NDArray[np.float64],
    source: npt.NDArray[np.int64],
    n_ionodes: int,
    stripes: Sequence[Sequence[tuple[int, int, int]]],
    batch_bytes: int = 32 << 20,
    first_batch_bytes: int = 2 << 20,
    unit_batches: int | None = None,
) -> Program:
    """Per I/O node, its units in plan order cut into batches of cuts.

    Parameters
    ----------
    ranges, ptr
        From :func:`unit_ranges`.
    order
        The plan's order (a permutation of unit ids).
    ionode, planned_start
        Per unit: its I/O node and its planned start (list scheduling).
    source
        ``source[d, c]``: index of the worker holding client ``c``'s
        contribution to dataset ``d``.
    stripes
        Per I/O node, the ``(dataset, offset, nbytes)`` stripes it owns.
    batch_bytes, first_batch_bytes
        Largest batch, and the first one (batches double up to the largest).
    unit_batches
        With a value, a batch also ends where a unit does once it holds that
        many bytes (0: a batch never holds two units, so each batch is one
        cut of one source, ranked by its unit's planned start). Sources
        handed every batch at once then run the plan's units in its order,
        side by side on the I/O nodes as the plan has them, at the grain of
        these batches.

    Examples
    --------
    >>> r, ptr = unit_ranges(*[np.array(x) for x in ([0, 0], [0, 8], [8, 8], [0, 1], [0, 1])],
    ...                      2, np.array([0, 1]), np.array([0, 0]), np.array([8, 8]))
    >>> prog = build_program(r, ptr, np.array([1, 0]), np.array([0, 0]), np.array([1.0, 0.0]),
    ...                      np.array([[0, 1]]), 1, [[(0, 0, 16)]], batch_bytes=8,
    ...                      first_batch_bytes=8)
    >>> [b.ranges.unit.tolist() for b in prog.nodes[0].batches]
    [[1], [0]]
    """
    if batch_bytes < 1 or first_batch_bytes < 1:
        raise ValueError(f"batch sizes must be >= 1, got {batch_bytes}, {first_batch_bytes}")
    nodes: list[NodeProgram] = []
    starts: list[tuple[float, int, int]] = []
    counts = np.diff(ptr)
    for s in range(n_ionodes):
        units = order[ionode[order] == s]
        idx = np.repeat(ptr[units], counts[units]) + (
            np.arange(int(counts[units].sum()))
            - np.repeat(np.cumsum(counts[units]) - counts[units], counts[units])
        )
        stream = ranges.take(idx.astype(np.intp))
        pieces = _split_batches(
            stream.nbytes.tolist(),
            first_batch_bytes,
            batch_bytes,
            stream.unit.tolist() if unit_batches is not None else None,
            unit_batches or 0,
        )
        batches: list[Batch] = []
        group: list[tuple[int, int, int]] = []
        for item in [*pieces, (-1, 0, 0)]:
            if item[0] >= 0:
                group.append(item)
                continue
            if not group:
                continue
            sel = np.array([g[0] for g in group], dtype=np.intp)
            lo = np.array([g[1] for g in group], dtype=np.int64)
            hi = np.array([g[2] for g in group], dtype=np.int64)
            part = stream.take(sel)
            part = Ranges(part.dataset, part.client, part.offset + lo, hi - lo, part.unit)
            src = source[part.dataset, part.client]
            cuts, cut_of, pos = [], np.empty(len(part), np.int64), np.empty(len(part), np.int64)
            slot = np.empty(len(part), np.int64)
            for j, w in enumerate(np.unique(src).tolist()):
                mine = np.flatnonzero(src == w)
                cut_of[mine] = j
                slot[mine] = np.arange(mine.size)
                pos[mine] = np.concatenate(([0], np.cumsum(part.nbytes[mine])[:-1]))
                cuts.append(Cut(int(w), part.take(mine)))
            t0 = float(planned_start[part.unit].min())
            starts.append((t0, s, len(batches)))
            batches.append(Batch(s, len(batches), part, cut_of, slot, pos, tuple(cuts), t0))
            group = []
        owned = tuple((int(d), int(o), int(n)) for d, o, n in stripes[s])
        nodes.append(NodeProgram(s, tuple(batches), owned))
    rank: list[list[int]] = [[0] * len(n.batches) for n in nodes]
    for r, (_, s, b) in enumerate(sorted(starts)):
        rank[s][b] = r
    return Program(tuple(nodes), tuple(tuple(x) for x in rank))


@dataclass(frozen=True, eq=False)
class StripeGroup:
    """Whole stripes of one I/O node, assembled and stored by the sources, together.

    For formats written a stripe at a time (a Zarr shard): a stripe is
    stored when the I/O node's plan reaches its last byte, by the source
    holding most of it (:attr:`assembler`), which receives the rest from the
    other sources. ``ranges[i]`` is held by source ``source[i]`` and belongs
    to stripe ``stripe[i]`` (an index into :attr:`stripes`); ranges are in
    stripe order, then file order.
    """

    ionode: int
    #: the batch of the node's program whose ranges complete these stripes
    batch: int
    #: ``(dataset index, stripe offset, stripe bytes)``, in the order their last byte comes
    stripes: tuple[tuple[int, int, int], ...]
    assembler: I64
    ranges: Ranges
    stripe: I64
    source: I64

    @property
    def nbytes(self) -> int:
        """Bytes of the stripes (what their assemblers hold at once)."""
        return sum(n for _, _, n in self.stripes)


def stripe_groups(
    node: NodeProgram, stripe_bytes: Sequence[int], limit: int
) -> tuple[StripeGroup, ...]:
    """The node's stripes in the order the plan completes them, in groups of ``limit`` bytes.

    A stripe completes at the batch holding its last range, and the stripes
    completing in one batch come in the order of their last ranges; a group
    takes consecutive stripes of one batch while they fit in ``limit`` (a
    larger stripe is a group alone). Each stripe's assembler is the source
    holding most of its bytes (the lowest index among equals): the others'
    ranges are the only bytes that move. Stripes no range touches (only
    fill values) are in no group.

    Examples
    --------
    >>> r = Ranges(*[np.array(x) for x in ([0, 0, 0], [0, 1, 1], [0, 4, 8], [4, 4, 8], [0, 1, 1])])
    >>> b = Batch(0, 0, r, np.array([0, 1, 1]), np.array([0, 0, 1]), np.array([0, 0, 4]),
    ...           (Cut(0, r.take(np.array([0]))), Cut(1, r.take(np.array([1, 2])))), 0.0)
    >>> (g,) = stripe_groups(NodeProgram(0, (b,), ((0, 0, 8), (0, 8, 8))), [8], 1 << 20)
    >>> g.stripes, g.assembler.tolist(), g.source.tolist()
    (((0, 0, 8), (0, 8, 8)), [0, 1], [0, 1, 1])
    """
    if not node.batches:
        return ()
    size = {(d, o): n for d, o, n in node.stripes}
    parts = [b.ranges for b in node.batches]
    fields = ("dataset", "client", "offset", "nbytes", "unit")
    ranges = Ranges(*(np.concatenate([getattr(r, f) for r in parts]) for f in fields))
    batch = np.repeat(np.arange(len(parts), dtype=np.int64), [len(r) for r in parts])
    source = np.concatenate(
        [np.array([c.source for c in b.cuts], dtype=np.int64)[b.cut] for b in node.batches]
    )
    sb = np.asarray(stripe_bytes, dtype=np.int64)[ranges.dataset]
    start = ranges.offset // sb * sb
    keys, sid = np.unique(np.stack([ranges.dataset, start], axis=1), axis=0, return_inverse=True)
    sid = sid.reshape(-1)
    pos = np.arange(len(ranges), dtype=np.int64)
    last = np.full(len(keys), -1, dtype=np.int64)
    np.maximum.at(last, sid, pos)  # the stream position of each stripe's last range
    order = np.argsort(last, kind="stable")
    n_src = int(source.max()) + 1
    held = np.zeros((len(keys), n_src), dtype=np.int64)
    np.add.at(held, (sid, source), ranges.nbytes)
    assembler = held.argmax(axis=1)  # the first of the largest among equals
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys))
    by = np.lexsort((ranges.offset, rank[sid]))  # stripe order, then file order
    groups: list[StripeGroup] = []
    members: list[int] = []
    room = 0

    def close() -> None:
        if not members:
            return
        sel = np.flatnonzero(np.isin(sid[by], members))
        idx = by[sel]
        local = np.full(len(keys), -1, dtype=np.int64)
        local[members] = np.arange(len(members))
        stripes = tuple((int(keys[m, 0]), int(keys[m, 1]), size[tuple(keys[m])]) for m in members)
        groups.append(
            StripeGroup(
                node.ionode,
                int(batch[last[members[0]]]),
                stripes,
                assembler[members].astype(np.int64),
                ranges.take(idx),
                local[sid[idx]],
                source[idx],
            )
        )
        members.clear()

    for m in order.tolist():
        n = size[(int(keys[m, 0]), int(keys[m, 1]))]
        same_batch = members and batch[last[members[0]]] == batch[last[m]]
        if not same_batch or n > room:
            close()
            room = limit
        members.append(m)
        room -= n
    close()
    return tuple(groups)
