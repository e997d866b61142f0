"""What the sources on an I/O node's host do themselves: direct writes into the output.

**Direct writes.** A source on the I/O worker's own host does not send its
bytes: when the batch comes up, it writes its cut into the I/O node's file
itself (:func:`write_cut`, positioned writes) and returns the CRC-32 of each
range. On one machine this removes the copy between processes, which is
what bounds a stage there; the I/O node still decides the order (batch by
batch, in plan order, the next batch handed over while this one ends),
checksums every stripe and makes it durable. Only
writers that put raw bytes at fixed positions of a plain file allow it
(:meth:`~orchestrator.engine.storage.Writer.file_identity`); a source that sees
another file (another mount) sends its bytes instead.

**Whole stripes at the sources.** A format written a stripe at a time (a
Zarr shard) cannot take pieces from several processes. When every source is
on the I/O worker's host, each stripe is assembled and stored by the source
holding most of its bytes (:func:`store_stripes`), the other sources' ranges
handed to it through the host's shared memory (:func:`stage_cut`,
:mod:`.staging`), or moved to it by Dask where that is off.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .backends import get_backend
from .buffers import STRIPES
from .cuts import _packed, _parts, _split_cut, cut
from .directio import contiguous_runs
from .running import _direct_writer, _stopped
from .staging import read_staged, stage_pieces
from .storage import Backend, WholeStripeWriter, crc32

__all__ = [
    "hand_units",
    "map_placed",
    "stage_cut",
    "store_stripes",
    "submit_cut",
    "submit_cuts",
    "write_cut",
    "write_cuts",
]

#: a test's hook, called in a direct write before it touches the output (it may sleep
#: there, to let the stage be stopped under it)
cut_hook: Callable[[str], None] | None = None


def write_cut(
    fmt: str | type[Backend],
    info: dict[str, Any],
    ionode: int,
    identity: tuple[int, int],
    contributions: Sequence[Any],
    which: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    names: Sequence[str],
    dataset: Sequence[int],
    labels: Sequence[str] = (),
    *,
    writers: dict[int, Any] | None = None,
) -> tuple[Any, ...]:
    """On a source on the I/O node's host: write the cut's ranges into the output itself.

    The direct write: the bytes go from the contributions straight into the
    I/O node's file with positioned writes — ranges that meet in the file as
    one run, runs in file order — and never cross between processes. Range
    ``i`` is as in :func:`cut`, of dataset ``names[dataset[i]]``.
    ``identity`` is the ``(st_dev, st_ino)`` the I/O node sees for the
    file; if this process opens another file (another
    mount, another file system view), nothing is written and the bytes come
    back instead, as :func:`cut` would return them, for the I/O node to write.
    ``writers`` keeps the writers opened, per I/O node, for the caller to
    release (:func:`write_cuts`: one open file for a run of cuts).

    Returns ``("written", crc, start, end)`` (per range: CRC-32 of its bytes,
    wall-clock span of the write of its run — ranges that meet in the file
    are written together, in file order), ``("data", parts)``, or
    ``("aborted",)`` when the stage was stopped before it wrote.

    Examples
    --------
    Submitted by :func:`run_ionode` on the worker holding the contributions:

    >>> client.submit(write_cut, "hdf5", info, 0, (2049, 1234), [con], np.array([0]),
    ...               np.array([0]), np.array([4096]), [8], ["<f8"], ["u"], [0],
    ...               workers=[source])  # doctest: +SKIP
    """
    token = info["token"]
    with _direct_writer(info):
        # a stage stopped meanwhile: nothing is written, and it is no error of this task
        # (raising made Dask log "Compute Failed" with a traceback under a user's Ctrl-C,
        # for every write the stage had handed out ahead); its I/O node stops on its own
        if _stopped(token):
            return ("aborted",)
        parts = _parts(contributions, which, offset, nbytes, row_bytes, dtypes, labels)
        if cut_hook is not None:
            cut_hook("write_cut")
        if _stopped(token):  # not a byte into a stage that was stopped meanwhile
            return ("aborted",)
        try:
            return _write_parts(fmt, info, ionode, identity, parts, names, dataset, offset, writers)
        except Exception:
            # stopped under the write, or its output removed (by the stage's cleanup, before
            # the stop reached this process): nothing more to write, and no error of ours
            if _stopped(token) or not os.path.exists(info["path"]):
                return ("aborted",)
            raise


def _write_parts(
    fmt: str | type[Backend],
    info: dict[str, Any],
    ionode: int,
    identity: tuple[int, int],
    parts: list[np.ndarray],
    names: Sequence[str],
    dataset: Sequence[int],
    offset: np.ndarray,
    writers: dict[int, Any] | None = None,
) -> tuple[Any, ...]:
    """The body of :func:`write_cut`, once the stage is known to be running."""
    writer: Any = writers.get(ionode) if writers is not None else None
    if writer is None:
        writer = get_backend(fmt).writer(info, ionode, False)
        if writers is not None:
            writers[ionode] = writer
    try:
        if writer.file_identity() != tuple(identity):
            return ("data", parts)
        if writer.direct == "stripes":  # whole stripes only: the rest goes to the I/O node
            t0 = time.time()
            pieces = [
                (names[dataset[i]], int(offset[i]), memoryview(p.data)) for i, p in enumerate(parts)
            ]
            stored, rest = writer.store_whole(pieces)
            left = [p if r else None for p, r in zip(parts, rest, strict=True)]
            return ("stored", stored, left, t0, time.time())
        start, end = np.zeros(len(parts)), np.zeros(len(parts))
        crc = np.zeros(len(parts), dtype=np.int64)
        views = [memoryview(p.data) for p in parts]
        where = [writer.position(names[d], int(o)) for d, o in zip(dataset, offset, strict=True)]
        # pieces that meet in the file (neighbouring rows of two clients of this worker)
        # go as one run, in file order: fewer, larger writes. One run at a time: measured
        # on 2 cores, 4 threads writing a cut at once were slower than one
        for run in contiguous_runs(where, [len(v) for v in views]):
            t0 = time.time()
            writer.write_run(where[run[0]], [views[i] for i in run])
            start[run], end[run] = t0, time.time()
            for i in run.tolist():
                crc[i] = crc32(views[i])
        # no end_batch: the I/O node ends the batch (and starts its writeback) once all
        # its sources are done; here it would only repeat that, once per source
        return ("written", crc, start, end)
    finally:
        if writers is None:
            writer.release()


def stage_cut(
    info: dict[str, Any],
    staging: str,
    identity: tuple[int, int],
    stripe_bytes: Sequence[int],
    contributions: Sequence[Any],
    which: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    names: Sequence[str],
    dataset: Sequence[int],
    labels: Sequence[str] = (),
) -> Any:
    """On a source: hand its ranges of other sources' stripes over through shared memory.

    Ranges as in :func:`cut`, of dataset ``names[dataset[i]]`` whose stripes
    are ``stripe_bytes[dataset[i]]`` long; each is written at its place in
    its stripe's file in the ``staging`` directory (:mod:`.staging`), which
    the stripe's assembler (:func:`store_stripes`) reads. Returns
    ``("staged", staging, identity)``, or — when this process does not see
    that directory (``identity``: another host) or shared memory is full —
    the bytes, as :func:`cut` returns them, for Dask to move.

    Examples
    --------
    Submitted by :func:`run_ionode` on a source of the stripes' I/O node's host:

    >>> client.submit(stage_cut, info, "/dev/shm/iorch-stage-...", (23, 5), [8 << 20], [con],
    ...               np.array([0]), np.array([0]), np.array([4096]), [8], ["<f8"], ["u"],
    ...               [0], workers=[source])  # doctest: +SKIP
    """
    with _direct_writer(info, staging):
        # a stopped stage: nothing staged, and no error (see write_cut)
        if _stopped(info["token"]):
            return ("aborted",)
        parts = _parts(contributions, which, offset, nbytes, row_bytes, dtypes, labels)
        if cut_hook is not None:
            cut_hook("stage_cut")
        if _stopped(info["token"]):
            return ("aborted",)
        pieces = [
            (int(d), int(o) // stripe_bytes[d] * stripe_bytes[d], int(o), memoryview(p.data))
            for d, o, p in zip(dataset, offset, parts, strict=True)
        ]
        if stage_pieces(staging, identity, pieces):
            return ("staged", staging, tuple(identity))
        return _packed(parts)


def store_stripes(
    fmt: str | type[Backend],
    info: dict[str, Any],
    ionode: int,
    identity: tuple[int, int],
    stripes: Sequence[tuple[int, int, int]],
    contributions: Sequence[Any],
    which: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    dataset: np.ndarray,
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    labels: Sequence[str],
    names: Sequence[str],
    received: Sequence[tuple[Any, np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[Any, ...]:
    """On the source holding most of them: assemble whole stripes and store each, in order.

    The direct write of formats written a stripe at a time (a Zarr shard):
    this worker's own ranges (as in :func:`cut`, of dataset
    ``names[dataset[i]]``) are copied into each stripe's buffer, the other
    sources' ranges arrive as ``received`` — ``(cut result, dataset,
    offset, nbytes)``, moved here by Dask, or staged in shared memory by
    :func:`stage_cut` (the result is then ``("staged", directory, its identity)``,
    checked here before reading) — and each stripe
    ``(dataset, offset, nbytes)`` is stored and checksummed as soon as it is
    assembled; rows no range holds keep the fill value. Only the minority of
    each stripe's bytes crosses between processes, and the I/O workers hold
    none of them.

    Returns ``("stored", checksums, start, end)`` (per stripe: the span of its
    store) or, when this process sees another file than the I/O node
    (``identity``), ``("data", rows)`` for the I/O node to store;
    ``("aborted",)`` when the stage was stopped before it stored.

    Examples
    --------
    Submitted by :func:`run_ionode` on each stripe group's assembler:

    >>> client.submit(store_stripes, "zarr", info, 0, (2049, 1234), [(0, 0, 4096)], [con],
    ...               np.array([0]), np.array([0]), np.array([4096]), np.array([0]), [8],
    ...               ["<f8"], ["u"], ["u"], [], workers=[source])  # doctest: +SKIP
    """
    token = info["token"]
    with _direct_writer(info):
        # a stopped stage: nothing stored, and no error (see write_cut)
        if _stopped(token) or any(
            isinstance(r[0], tuple) and r[0][:1] == ("aborted",) for r in received
        ):
            return ("aborted",)
        own = _parts(contributions, which, offset, nbytes, row_bytes, dtypes, labels)
        pieces: list[tuple[int, int, Any]] = [
            (int(d), int(o), p) for d, o, p in zip(dataset, offset, own, strict=True)
        ]
        for got, ds, offs, ns in received:
            if isinstance(got, tuple) and got[:1] == ("staged",):
                # in shared memory: read straight into the stripe's buffer there
                where = (str(got[1]), tuple(got[2]))
                pieces += [
                    (int(d), int(o), (where, int(n)))
                    for d, o, n in zip(ds.tolist(), offs.tolist(), ns.tolist(), strict=True)
                ]
                continue
            parts = _split_cut(got, ns.tolist())
            pieces += [(int(d), int(o), p) for d, o, p in zip(ds, offs, parts, strict=True)]
        if cut_hook is not None:
            cut_hook("store_stripes")
        if _stopped(token):  # not a byte into a stage that was stopped meanwhile
            return ("aborted",)
        try:
            return _store_assembled(fmt, info, ionode, identity, stripes, names, pieces)
        except Exception:
            if _stopped(token) or not os.path.exists(info["path"]):  # as in write_cut
                return ("aborted",)
            raise


def _store_assembled(
    fmt: str | type[Backend],
    info: dict[str, Any],
    ionode: int,
    identity: tuple[int, int],
    stripes: Sequence[tuple[int, int, int]],
    names: Sequence[str],
    pieces: list[tuple[int, int, Any]],
) -> tuple[Any, ...]:
    """The body of :func:`store_stripes`, once its pieces are here (an array, or
    ``(staging directory, nbytes)`` for a staged one)."""
    writer = get_backend(fmt).writer(info, ionode, False)
    try:
        if not isinstance(writer, WholeStripeWriter):
            raise TypeError(f"{fmt!r} does not store whole stripes")
        mine = writer.file_identity() == tuple(identity)
        by_stripe: dict[tuple[int, int], list[tuple[int, Any]]] = {}
        for d, o, p in pieces:
            sb = writer.meta[names[d]]["stripe_bytes"]
            by_stripe.setdefault((d, o // sb * sb), []).append((o, p))

        def size_of(p: Any) -> int:
            return int(p[1]) if isinstance(p, tuple) else int(p.size)

        start, end = np.zeros(len(stripes)), np.zeros(len(stripes))
        sums: dict[tuple[str, int], str] = {}
        rows_of: dict[int, Any] = {}
        for j, (d, base, size) in enumerate(stripes):
            name = names[d]
            m = writer.meta[name]
            got = by_stripe.pop((d, base), [])
            complete = sum(size_of(p) for _, p in got) == size
            # stored here, the buffer serves the next stripe; sent, it leaves with the rows
            buf = STRIPES.take(size) if mine else None
            rows = writer.blank_stripe(name, base // m["stripe_bytes"], complete, out=buf)
            flat = rows.reshape(-1).view(np.uint8)
            staged: dict[tuple[str, Any], list[tuple[int, memoryview]]] = {}
            for o, p in got:
                if isinstance(p, tuple):
                    if o - base + p[1] > flat.size:
                        raise ValueError(f"a staged range of {name!r} at {o} ends past its stripe")
                    into = memoryview(flat[o - base : o - base + p[1]].data)
                    staged.setdefault(p[0], []).append((o, into))
                else:
                    flat[o - base : o - base + p.size] = p
            for (where, ident), ranges in staged.items():
                read_staged(where, ident, d, base, ranges)
            del got
            if not mine:  # the I/O node sees another file: it stores them
                rows_of[j] = rows
                continue
            start[j] = time.time()
            sums[(name, base)] = writer.store_stripe(name, base // m["stripe_bytes"], rows)
            end[j] = time.time()
            del rows, flat
            if buf is not None:
                STRIPES.give(buf)
        if not mine:
            return ("data", rows_of)
        return ("stored", sums, start, end)
    finally:
        writer.release()


def submit_cut(
    client: Any,
    task: Callable[..., Any],
    c: Any,
    contributions: dict[tuple[int, int], Any],
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    names: Sequence[str],
    worker: str,
    priority: int,
    *extra: Any,
) -> Any:
    """Submit cut ``c`` of a batch as ``task`` (:func:`cut` or :func:`write_cut`) on its source.

    ``contributions[(dataset, client)]`` is the future of that contribution;
    ``extra`` are :func:`write_cut`'s leading arguments. Higher ``priority``
    runs first (the batch's rank by planned start over all I/O nodes).

    Examples
    --------
    >>> submit_cut(client, cut, batch.cuts[0], futures, [8], ["<f8"], ["u"],
    ...            sources[0], 3)  # doctest: +SKIP
    <Future: pending, key: cut-...>
    """
    tail = task in (write_cut, stage_cut)
    return client.submit(
        task,
        *_cut_call(c, contributions, row_bytes, dtypes, names, tail, extra),
        workers=[worker],
        allow_other_workers=False,
        priority=priority,
        pure=False,
    )


def write_cuts(calls: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """On a source: :func:`write_cut` for each of ``calls`` in turn, their results in order.

    One task for a run of the source's units in the plan's order, possibly for
    several I/O nodes: a task per unit costs its source a round trip each
    (measured, ``make demo``'s 32 units on 2 sources: writing took 0.10 s
    against 0.04 s in 8 tasks).

    Examples
    --------
    >>> write_cuts([])
    []
    """
    writers: dict[int, Any] = {}
    try:
        return [write_cut(*c, writers=writers) for c in calls]
    finally:
        for w in writers.values():
            w.release()


def _cut_call(
    c: Any,
    contributions: dict[tuple[int, int], Any],
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    names: Sequence[str],
    tail: bool,
    lead: Sequence[Any] = (),
) -> tuple[Any, ...]:
    """The arguments of :func:`cut` (or, with ``lead`` and ``tail``, :func:`write_cut`)
    for cut ``c``."""
    dcs, which = c.contributions()
    return (
        *lead,
        [contributions[dc] for dc in dcs],
        which,
        c.ranges.offset,
        c.ranges.nbytes,
        [row_bytes[d] for d, _ in dcs],
        [dtypes[d] for d, _ in dcs],
        *((names, c.ranges.dataset) if tail else ()),
        [names[d] for d, _ in dcs],
    )


def map_placed(
    client: Any,
    task: Callable[..., Any],
    calls: Sequence[tuple[Any, ...]],
    workers: Sequence[str],
    priority: Sequence[int],
) -> list[Any]:
    """Submit ``task(*calls[i])`` on ``workers[i]`` at ``priority[i]``, all in one message.

    The scheduler handles every message in turn, with two hops through a thread
    pool, and on 2 busy cores that cost ~2 ms per task submitted alone
    (:func:`submit_cut`) while the I/O nodes waited for their first bytes.
    The worker and priority of each task go as annotations, read per key.

    Examples
    --------
    >>> map_placed(client, write_cuts, [([],)], [sources[0]], [3])  # doctest: +SKIP
    [<Future: pending, key: write-cuts-...>]
    """
    import uuid

    import dask

    if not calls:
        return []
    name = task.__name__.replace("_", "-")
    keys = [f"{name}-{uuid.uuid4()}" for _ in calls]
    where = {k: [w] for k, w in zip(keys, workers, strict=True)}
    rank = {k: int(p) for k, p in zip(keys, priority, strict=True)}
    # bound methods of dicts pickle by value: the scheduler needs nothing of ours
    with dask.annotate(workers=where.__getitem__, priority=rank.__getitem__):
        return list(client.map(task, *zip(*calls, strict=True), key=keys, pure=False))


def submit_cuts(
    client: Any,
    cuts: Sequence[tuple[Any, str, int]],
    contributions: dict[tuple[int, int], Any],
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    names: Sequence[str],
) -> list[Any]:
    """Submit many :func:`cut` tasks at once: ``cuts`` are ``(cut, source address, priority)``
    (one message to the scheduler: see :func:`map_placed`).

    Examples
    --------
    >>> submit_cuts(client, [(batch.cuts[0], sources[0], 3)], futures, [8], ["<f8"],
    ...             ["u"])  # doctest: +SKIP
    [<Future: pending, key: cut-...>]
    """
    calls = [_cut_call(c, contributions, row_bytes, dtypes, names, False) for c, _, _ in cuts]
    return map_placed(client, cut, calls, [w for _, w, _ in cuts], [p for _, _, p in cuts])


def hand_units(
    client: Any,
    cuts: Sequence[tuple[Any, str, int, tuple[Any, ...]]],
    contributions: dict[tuple[int, int], Any],
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    names: Sequence[str],
    group_bytes: int,
) -> list[tuple[Any, int]]:
    """Hand direct writes to their sources, in runs: ``cuts`` are ``(cut, source address,
    priority, write_cut's leading arguments)``, in the plan's order.

    Each source's cuts, in the order given, go in tasks of :func:`write_cuts`
    of at most ``group_bytes`` (at least one cut each). Returns, per cut, its
    task's future and its place in that task's results.

    Examples
    --------
    >>> hand_units(client, [(cut0, sources[0], 3, ("hdf5", info, 0, identity))], futures,
    ...            [8], ["<f8"], ["u"], 64 << 20)  # doctest: +SKIP
    [(<Future: pending, key: write-cuts-...>, 0)]
    """
    groups: list[list[int]] = []
    open_group: dict[str, tuple[int, int]] = {}  # source -> (group, its bytes)
    for i, (c, w, _, _) in enumerate(cuts):
        g = open_group.get(w)
        if g is None or g[1] + c.nbytes > group_bytes:
            groups.append([])
            g = (len(groups) - 1, 0)
        groups[g[0]].append(i)
        open_group[w] = (g[0], g[1] + c.nbytes)
    calls = [
        (
            [
                _cut_call(cuts[i][0], contributions, row_bytes, dtypes, names, True, cuts[i][3])
                for i in members
            ],
        )
        for members in groups
    ]
    futs = map_placed(
        client,
        write_cuts,
        calls,
        [cuts[m[0]][1] for m in groups],
        [cuts[m[0]][2] for m in groups],
    )
    out: list[tuple[Any, int]] = [(None, 0)] * len(cuts)
    for f, members in zip(futs, groups, strict=True):
        for j, i in enumerate(members):
            out[i] = (f, j)
    return out
