"""The effects on the workers: cut tasks on the sources, one writer loop per I/O worker.

:func:`run_ionode` runs as one long task on its I/O worker. It follows
:class:`~orchestrator.engine.window.Window`: for a *Fetch* it submits the
batch's cut tasks (on the workers holding the contributions, ranked by
planned start over all I/O nodes) and gathers their buffers in a background
thread, so data moves — worker to worker, through Dask's comms — while the
loop writes the batch before. A *Write* hands the batch's ranges to the
backend's writer in plan order; the writer checksums them as it writes.

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
on the I/O worker's host, the loop walks the node's stripes in the order the
plan completes them (:func:`~orchestrator.engine.program.stripe_groups`) and
has each assembled and stored by the source holding most of its bytes
(:func:`store_stripes`), the other sources' ranges handed to it through the
host's shared memory (:func:`stage_cut`, :mod:`.staging`), or moved to it by
Dask where that is off.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Any

import numpy as np

from ..contributions import ContributionError, cast_exactly
from ..errors import StageAborted as Aborted
from ..errors import StageError
from ..files import remove_path
from .backends import get_backend
from .buffers import STRIPES
from .directio import contiguous_runs
from .program import Batch, Cut, NodeProgram, StripeGroup, stripe_groups
from .staging import open_staging, read_staged, remove_staging, stage_pieces, sweep_dead
from .storage import Backend, WholeStripeWriter, crc32
from .window import Fetch, Window, Write

__all__ = [
    "Aborted",
    "abort",
    "busy",
    "compact_rows",
    "cut",
    "describe_contributions",
    "expand_rows",
    "run_ionode",
    "stage_cut",
    "store_stripes",
    "submit_cut",
    "write_cut",
]

#: tokens of stages told to stop (per worker process)
_ABORTED: set[str] = set()
#: (token, I/O node) of writer loops running in this process
_ACTIVE: set[tuple[str, int]] = set()
_LOCK = threading.Lock()
#: a test's hook, called in a direct write before it touches the output (it may sleep
#: there, to let the stage be stopped under it)
cut_hook: Callable[[str], None] | None = None
#: ranges whose mean size is below this are packed into one buffer by :func:`cut`
PACK_BELOW = 256 << 10
#: batches whose direct writes are handed to their sources before the batch in hand is
#: done. With none, a source that finished its cut of a batch waits while another source
#: finishes its own and the I/O node learns of it and submits the next batch — measured
#: on 2 cores, 2 sources writing 1 GiB for 4 I/O nodes: ~40 waits of 15 ms per source,
#: a third of the writing. A source still writes an I/O node's batches in order (their
#: cut tasks are ranked by planned start); two sources may be one batch apart
DIRECT_AHEAD = 1


def abort(token: str) -> int:
    """On every worker: tell the stage's writer loops to stop; return how many are running.

    Runs in the worker's event loop (``Client.run``), so it never blocks.

    Examples
    --------
    >>> abort("ckpt.h5.tmp-0123")
    0
    """
    # a stage stops when an I/O worker died: its shared-memory folder is left behind
    threading.Thread(target=sweep_dead, name="iorch-sweep", daemon=True).start()
    with _LOCK:
        _ABORTED.add(token)
        return sum(1 for t, _ in _ACTIVE if t == token)


def busy(token: str) -> int:
    """On every worker: how many writer loops of the stage still run (0 once all stopped).

    Examples
    --------
    >>> busy("ckpt.h5.tmp-0123")
    0
    """
    with _LOCK:
        return sum(1 for t, _ in _ACTIVE if t == token)


def compact_rows(rows: np.ndarray) -> Any:
    """``rows`` as runs ``(first rows, lengths)`` when that is much smaller, else as they are.

    A contribution's rows are mostly long runs (a partition's blocks); sent
    as runs, a stage's description is a few kilobytes instead of 8 bytes per
    row (measured: 50 ms of a 1 GiB stage's 1.0 s went to describing
    contributions with their rows in full). :func:`expand_rows` undoes it.

    Examples
    --------
    >>> starts, lengths = compact_rows(np.r_[np.arange(100), np.arange(500, 600)])
    >>> starts.tolist(), lengths.tolist()
    ([0, 500], [100, 100])
    """
    rows = np.asarray(rows)
    if rows.ndim != 1 or rows.size < 64 or rows.dtype != np.int64:
        return rows
    head = np.flatnonzero(np.diff(rows) != 1) + 1
    if 2 * (head.size + 1) > rows.size // 8:
        return rows
    bounds = np.concatenate(([0], head, [rows.size]))
    return rows[bounds[:-1]], np.diff(bounds)


def expand_rows(rows: Any) -> np.ndarray:
    """The rows :func:`compact_rows` compacted (an array passes through unchanged).

    Examples
    --------
    >>> expand_rows((np.array([3, 10]), np.array([2, 3]))).tolist()
    [3, 4, 10, 11, 12]
    """
    if not isinstance(rows, tuple):
        return np.asarray(rows)
    starts, lengths = rows
    offsets = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    return np.arange(total, dtype=starts.dtype) + np.repeat(starts - offsets, lengths)


def describe_contributions(*cons: Any) -> list[tuple[int, Any, tuple[int, ...], str]]:
    """On the worker holding contributions: what the stage needs to plan, without the values.

    ``(client, rows, shape of the values, dtype)`` of each; the rows
    compacted (:func:`compact_rows`).

    Examples
    --------
    >>> from orchestrator.contributions import Contribution
    >>> [(c, expand_rows(r).tolist(), s, d) for c, r, s, d in describe_contributions(
    ...     Contribution(1, [4, 5], np.zeros((2, 3))))]
    [(1, [4, 5], (2, 3), '<f8')]
    """
    return [
        (c.client, compact_rows(c.rows), tuple(c.values.shape), c.values.dtype.str) for c in cons
    ]


def describe_held(keys: Sequence[Any], dask_worker: Any = None) -> dict[Any, Any]:
    """On a worker, called by ``Client.run``: :func:`describe_contributions` of those of
    ``keys`` it holds, by key.

    One message each way between the stage's process and the worker, where a task
    takes four through the scheduler (measured here: 3 ms against 14-17 ms). Keys
    it does not hold, or that hold something else than a
    :class:`~orchestrator.contributions.Contribution`, are left out: the caller
    asks for those with a task, which reports whatever is wrong with them.

    Examples
    --------
    >>> client.run(describe_held, [f.key for f in futures], workers=[addr])  # doctest: +SKIP
    {'contribution-4f2a...': [(0, (array([0]), array([512])), (512, 128), '<f8')]}
    """
    from ..contributions import Contribution

    out = {}
    for k in keys:
        value = dask_worker.data.get(k)
        if isinstance(value, Contribution):
            out[k] = describe_contributions(value)[0]
    return out


def _parts(
    contributions: Sequence[Any],
    which: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    row_bytes: Sequence[int],
    dtypes: Sequence[str],
    labels: Sequence[str] = (),
) -> list[np.ndarray]:
    """The bytes of each range, as views of the contributions where no cast is needed.

    A cast must keep every value (:func:`~orchestrator.contributions.cast_exactly`);
    ``labels[k]`` names the dataset of contribution ``k`` in its error.
    """
    which = np.asarray(which, dtype=np.int64)
    offset = np.asarray(offset, dtype=np.int64)
    nbytes = np.asarray(nbytes, dtype=np.int64)
    start = np.zeros(len(which), dtype=np.int64)  # byte position in its source's buffer
    sources: list[np.ndarray] = []
    for k in range(len(contributions)):
        mine = np.flatnonzero(which == k)
        if not mine.size:
            sources.append(np.empty(0, np.uint8))
            continue
        con, rb, dtype = contributions[k], int(row_bytes[k]), np.dtype(dtypes[k])
        r0 = offset[mine] // rb
        r1 = -(-(offset[mine] + nbytes[mine]) // rb)
        values = con.values
        if values.dtype == dtype and values.flags.c_contiguous:
            # one vectorized lookup for all ranges; the bytes are sliced, not copied
            rows = con.aligned_rows()
            lo = np.searchsorted(rows, r0)
            hi = lo + (r1 - r0)
            ok = (hi <= rows.size) & (rows[np.minimum(lo, rows.size - 1)] == r0)
            ok &= rows[np.clip(hi - 1, 0, rows.size - 1)] == r1 - 1
            if not ok.all():
                bad = int(np.flatnonzero(~ok)[0])
                raise ContributionError(
                    f"client {con.client} does not hold all rows {int(r0[bad])}..{int(r1[bad]) - 1}"
                )
            sources.append(values.reshape(-1).view(np.uint8))
            start[mine] = lo * rb + (offset[mine] - r0 * rb)
        else:  # a cast: convert only the rows each range needs
            chunks, at = [], 0
            for i, a, b in zip(mine.tolist(), r0.tolist(), r1.tolist(), strict=True):
                label = f"dataset {labels[k]!r}, " if k < len(labels) else ""
                what = f"{label}client {con.client}, rows {a}..{b - 1}"
                exact = cast_exactly(con.cut(a, b), dtype, what)
                raw = np.ascontiguousarray(exact).reshape(-1).view(np.uint8)
                chunks.append(raw)
                start[i] = at + int(offset[i]) - a * rb
                at += raw.size
            sources.append(np.concatenate(chunks))
    triples = zip(which.tolist(), start.tolist(), nbytes.tolist(), strict=True)
    return [sources[k][s : s + n] for k, s, n in triples]


def cut(
    contributions: Sequence[Any],
    which: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    row_bytes: Sequence[int],
    dtypes: Sequence[str],
    labels: Sequence[str] = (),
) -> np.ndarray:
    """On a source: copy byte ranges of contributions into one buffer (one Dask message).

    Range ``i`` is bytes ``[offset[i], offset[i] + nbytes[i])`` of the dataset
    of ``contributions[which[i]]``, stored as ``dtypes[which[i]]``. Large
    ranges that need no cast come back as a list of views (Dask sends each
    as its own frame, without copying); small ones are packed into one
    buffer (one frame, instead of a header per few bytes).

    Examples
    --------
    >>> from orchestrator.contributions import Contribution
    >>> con = Contribution(0, [2, 3], np.array([7, 8], dtype=np.int32))
    >>> cut([con], np.array([0, 0]), np.array([12, 8]), np.array([4, 4]), [4], ["<i4"]).tolist()
    [8, 0, 0, 0, 7, 0, 0, 0]
    """
    return _packed(_parts(contributions, which, offset, nbytes, row_bytes, dtypes, labels))


def _packed(parts: list[np.ndarray]) -> Any:
    """A cut's ranges as one Dask message: one array, the views, or one packed buffer."""
    if len(parts) == 1:
        return parts[0]
    if parts and sum(p.size for p in parts) >= len(parts) * PACK_BELOW:
        return parts
    return np.concatenate(parts) if parts else np.empty(0, np.uint8)


def submit_cut(
    client: Any,
    task: Callable[..., Any],
    c: Any,
    contributions: dict[tuple[int, int], Any],
    row_bytes: Sequence[int],
    dtypes: Sequence[str],
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
    dcs, which = c.contributions()
    return client.submit(
        task,
        *extra,
        [contributions[dc] for dc in dcs],
        which,
        c.ranges.offset,
        c.ranges.nbytes,
        [row_bytes[d] for d, _ in dcs],
        [dtypes[d] for d, _ in dcs],
        *((names, c.ranges.dataset) if task in (write_cut, stage_cut) else ()),
        labels=[names[d] for d, _ in dcs],
        workers=[worker],
        allow_other_workers=False,
        priority=priority,
        pure=False,
    )


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
    dtypes: Sequence[str],
    names: Sequence[str],
    dataset: Sequence[int],
    labels: Sequence[str] = (),
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

    Returns ``("written", crc, start, end)`` (per range: CRC-32 of its bytes,
    wall-clock span of the write of its run — ranges that meet in the file
    are written together, in file order) or ``("data", parts)``.

    Examples
    --------
    Submitted by :func:`run_ionode` on the worker holding the contributions:

    >>> client.submit(write_cut, "hdf5", info, 0, (2049, 1234), [con], np.array([0]),
    ...               np.array([0]), np.array([4096]), [8], ["<f8"], ["u"], [0],
    ...               workers=[source])  # doctest: +SKIP
    """
    token = info["token"]
    with _direct_writer(info):
        _check(token)
        parts = _parts(contributions, which, offset, nbytes, row_bytes, dtypes, labels)
        if cut_hook is not None:
            cut_hook("write_cut")
        _check(token)  # not a byte into a stage that was stopped meanwhile
        return _write_parts(fmt, info, ionode, identity, parts, names, dataset, offset)


@contextlib.contextmanager
def _direct_writer(info: dict[str, Any], staging: str | None = None) -> Iterator[None]:
    """A source writing into the stage's output for the block: counted by :func:`busy`
    (``stop()`` waits for it too), and if the stage was stopped meanwhile, whatever it
    may have recreated of the output (and of the ``staging`` directory) is removed when
    it ends."""
    token = info["token"]
    me = (token, -1 - threading.get_ident())
    with _LOCK:
        _ACTIVE.add(me)
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE.discard(me)
            stopped = token in _ABORTED
        if stopped:  # a Zarr writer makes folders: nothing of the stage may outlive it
            remove_path(info["path"])
            if staging is not None:
                remove_staging(staging)


def _write_parts(
    fmt: str | type[Backend],
    info: dict[str, Any],
    ionode: int,
    identity: tuple[int, int],
    parts: list[np.ndarray],
    names: Sequence[str],
    dataset: Sequence[int],
    offset: np.ndarray,
) -> tuple[Any, ...]:
    """The body of :func:`write_cut`, once the stage is known to be running."""
    writer = get_backend(fmt).writer(info, ionode, False)
    try:
        if writer.file_identity() != tuple(identity):
            return ("data", parts)
        if writer.direct == "stripes":  # whole stripes only: the rest goes to the I/O node
            t0 = time.time()
            pieces = [
                (names[dataset[i]], int(offset[i]), memoryview(p.data)) for i, p in enumerate(parts)
            ]
            stored, rest = writer.store_whole(pieces)  # type: ignore[attr-defined]
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
    dtypes: Sequence[str],
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
        _check(info["token"])
        parts = _parts(contributions, which, offset, nbytes, row_bytes, dtypes, labels)
        if cut_hook is not None:
            cut_hook("stage_cut")
        _check(info["token"])
        pieces = [
            (int(d), int(o) // stripe_bytes[d] * stripe_bytes[d], int(o), memoryview(p.data))
            for d, o, p in zip(dataset, offset, parts, strict=True)
        ]
        if stage_pieces(staging, identity, pieces):
            return ("staged", staging, tuple(identity))
        return _packed(parts)


def _split_cut(got: Any, nbytes: Sequence[int]) -> list[np.ndarray]:
    """The ranges of a :func:`cut`'s result (one array, a list of views, or one packed buffer)."""
    if isinstance(got, list):
        return [np.asarray(g).reshape(-1).view(np.uint8) for g in got]
    flat = np.asarray(got).reshape(-1).view(np.uint8)
    ends = np.cumsum(np.asarray(nbytes, dtype=np.int64))
    return [flat[e - n : e] for e, n in zip(ends.tolist(), list(nbytes), strict=True)]


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
    dtypes: Sequence[str],
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
    (``identity``), ``("data", rows)`` for the I/O node to store.

    Examples
    --------
    Submitted by :func:`run_ionode` on each stripe group's assembler:

    >>> client.submit(store_stripes, "zarr", info, 0, (2049, 1234), [(0, 0, 4096)], [con],
    ...               np.array([0]), np.array([0]), np.array([4096]), np.array([0]), [8],
    ...               ["<f8"], ["u"], ["u"], [], workers=[source])  # doctest: +SKIP
    """
    token = info["token"]
    with _direct_writer(info):
        _check(token)
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
        _check(token)  # not a byte into a stage that was stopped meanwhile
        return _store_assembled(fmt, info, ionode, identity, stripes, names, pieces)


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


def _holds_a_stripe(writer: Any, names: Sequence[str], c: Any) -> bool:
    """Whether cut ``c`` holds every byte of at least one stripe of a whole-stripe writer."""
    held: dict[tuple[int, int], int] = {}
    r = c.ranges
    for d, off, n in zip(r.dataset.tolist(), r.offset.tolist(), r.nbytes.tolist(), strict=True):
        m = writer.meta[names[d]]
        k = off // m["stripe_bytes"]
        held[(d, k)] = held.get((d, k), 0) + n
    for (d, k), n in held.items():
        m = writer.meta[names[d]]
        r0 = k * m["rows_per_stripe"]
        if n == (min(r0 + m["rows_per_stripe"], m["shape"][0]) - r0) * m["row_bytes"]:
            return True
    return False


class _Trim:
    """Hands freed heap memory back to the system every ``every`` bytes written (glibc).

    The batches' buffers are freed once written, but the C heap keeps the
    pages for reuse, scattered between live objects, so the worker's
    resident memory creeps past its window; ``malloc_trim`` returns them.
    """

    def __init__(self, every: int) -> None:
        self.every, self.due = max(int(every), 1 << 20), 0
        self.fn: Any = None
        try:
            import ctypes

            self.fn = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc: nothing to do
            pass

    def written(self, nbytes: int) -> None:
        self.due += nbytes
        if self.fn is not None and self.due >= self.every:
            self.due = 0
            self.fn(0)


def _check(token: str, worker: Any = None) -> None:
    if token in _ABORTED:
        raise Aborted(f"stage {token} aborted")
    # a worker told to close (scancel, SIGTERM) stops writing before its process goes
    if worker is not None and getattr(worker.status, "name", "running") not in (
        "running",
        "paused",
    ):
        raise Aborted(f"stage {token}: the worker is closing")


def run_ionode(
    fmt: str | type[Backend],
    info: dict[str, Any],
    node: NodeProgram,
    names: Sequence[str],
    keys: dict[tuple[int, int], str],
    sources: Sequence[str],
    priority: Sequence[int],
    row_bytes: Sequence[int],
    dtypes: Sequence[str],
    aggregate: bool,
    window: int,
    fills: Sequence[tuple[int, int, int, int]],
    direct: bool = True,
    first: Sequence[Any] | None = None,
    ahead: tuple[tuple[int, int], dict[int, list[str]]] | None = None,
) -> dict[str, Any]:
    """On I/O worker ``node.ionode``: fetch and write its batches in order; flush; checksum.

    ``keys[(dataset, client)]`` is the Dask key of that contribution (kept
    alive by the stage's process); ``sources[j]`` the address of source
    ``j``; ``fills`` the ``(dataset, offset, nbytes, crc)`` of missing rows
    the stage's process filled in this node's stripes. With ``direct``, the
    sources on this worker's host write their cuts into the output
    themselves (:func:`write_cut`) when the backend's writer allows it.
    ``first`` holds the cuts of the first batch, in cut order, when they
    came with the task (Dask fetched them before starting it): the node
    writes at once, instead of one round trip through the scheduler later.
    ``ahead`` is ``(identity, {batch: [key of each cut's write_cut]})``: the
    direct writes of the first batches, handed to the sources by the stage's
    process with the file identity it saw (on this host), so the sources
    begin while this task starts.

    Returns the trace (per range: unit, start, end, bytes), the flush's
    span, the most bytes held at once (batches, and pieces waiting for the
    rest of their stripes), when the task started (to see how far apart the
    I/O nodes began), and the stripe checksums.

    Examples
    --------
    Submitted by :func:`~orchestrator.engine.dispatch.dispatch`, one per I/O worker:

    >>> client.submit(run_ionode, "hdf5", info, program.nodes[0], ["u"], keys, sources,
    ...               program.priority[0], [8], ["<f8"], False, 128 << 20, [],
    ...               resources={"io-0": 1})  # doctest: +SKIP
    """
    from distributed import Future, get_client, get_worker, secede
    from distributed.comm.addressing import get_address_host

    t_task = time.time()
    token, s = info["token"], node.ionode
    secede()  # a long task: free the thread so cut tasks may run here too
    client = get_client()
    with _LOCK:
        _ACTIVE.add((token, s))
    # counted by busy() from here on, so the setup too must end in the discard: an error
    # opening the writer (the stage stopped and its output removed meanwhile) left the
    # node counted for good, and stop() waited its whole timeout on it
    try:
        pool = ThreadPoolExecutor(4, thread_name_prefix=f"iorch-fetch-{s}")
        events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        held: dict[int, list[Any]] = {}  # batch -> cut futures, released once written
        # batch -> its direct cuts, their write_cut futures and the gather of their results
        handed: dict[int, tuple[list[int], list[Any], Any]] = {}
        gathers: list[Any] = []  # the background gathers of cut futures
        arrived: dict[int, dict[int, Any]] = {}  # batch -> cut index -> its bytes
        futures: dict[tuple[int, int], Any] = {
            dc: Future(k, client=client) for dc, k in keys.items()
        }
        writer = get_backend(fmt).writer(info, s, aggregate)
        if isinstance(writer, WholeStripeWriter):
            # stripes waiting for their other pieces share the window with the batches
            # fetched ahead: half each, so fetching never stops for want of room. The
            # spill file lives inside the temporary output when it is a folder, so that
            # whatever removes a failed stage's output removes it too
            writer.limit = window // 2
            due: dict[tuple[str, int], int] = {}  # when each stripe's last piece comes
            for bt in node.batches:
                for d, off in zip(
                    bt.ranges.dataset.tolist(), bt.ranges.offset.tolist(), strict=True
                ):
                    due[(names[d], off // writer.meta[names[d]]["stripe_bytes"])] = bt.index
            writer.due = due
            out = Path(info["path"])
            writer.spill_path = (
                out / f".iorch-spill-{s}"
                if out.is_dir()
                else out.with_name(f"{out.name}.spill-{s}")
            )
    except BaseException:
        try:
            if "writer" in locals():
                writer.release()
            with _LOCK:
                stopped = token in _ABORTED
            if stopped:  # a writer opened after the stage's cleanup may have recreated output
                remove_path(info["path"])
        finally:  # counted until then, so that stop() waits for the removal too
            with _LOCK:
                _ACTIVE.discard((token, s))
        raise
    me = get_worker()
    staging: tuple[str, tuple[int, int]] | None = None
    trim = _Trim(window)
    t_unit, t_start, t_end, t_bytes, t_by, t_batch = [], [], [], [], [], []
    ok = False
    try:
        _check(token, me)

        # direct writes: a source on this host writes its cuts into our file itself
        # (no copy between processes); others send their bytes here
        identity = writer.file_identity() if direct and not aggregate else None
        here = get_address_host(me.address)
        local = [identity is not None and get_address_host(a) == here for a in sources]
        # which cuts of each batch their sources write themselves; a whole-stripe writer
        # only takes cuts that hold a stripe whole (the others are fetched ahead as usual)
        stripes = writer.direct == "stripes"
        direct_cuts = [
            {
                i
                for i, c in enumerate(b.cuts)
                if local[c.source] and (not stripes or _holds_a_stripe(writer, names, c))
            }
            for b in node.batches
        ]
        # a whole-stripe format with every source on this host: the sources store the
        # stripes themselves, each assembled where most of its bytes are (store_stripes);
        # only the rest of each stripe moves, and nothing passes through this worker
        groups = None
        if (
            isinstance(writer, WholeStripeWriter)
            and stripes
            and identity is not None
            and all(local)
        ):
            sb = [writer.meta[n]["stripe_bytes"] for n in names]
            # two groups are under way at once, so half the window each: the fewer the
            # groups, the fewer tasks the scheduler and the sources handle (measured, 1 GiB
            # Zarr stage on 2 cores: a quarter of the window 1.83 s and 3.2 CPU s, a half
            # 1.45 s and 2.5, of which the scheduler 0.67 and 0.48)
            groups = stripe_groups(node, sb, max(1, window // 2))
            # the other sources' ranges of a stripe go through this host's shared memory
            # rather than Dask's comms (serialized, encrypted, copied on both ends)
            staging = open_staging(token, s)

        def submit(b: Batch, i: int, task: Any, *extra: Any) -> Any:
            c = b.cuts[i]
            return submit_cut(
                client,
                task,
                c,
                futures,
                row_bytes,
                dtypes,
                names,
                sources[c.source],
                -priority[b.index],
                *extra,
            )

        def fetch(b: Batch) -> None:
            mine = [i for i in range(len(b.cuts)) if i not in direct_cuts[b.index]]
            if b.index == 0 and first is not None:  # came with the task: nothing to wait for
                held[0] = []
                events.put(("fetched", 0, dict(zip(mine, first, strict=True))))
                return
            cuts = [submit(b, i, cut) for i in mine]
            held[b.index] = cuts

            def done(f: Any, b: int = b.index) -> None:
                try:
                    events.put(("fetched", b, dict(zip(mine, f.result(), strict=True))))
                except BaseException as err:  # reported to the loop, which raises it
                    events.put(("error", b, err))

            gathers.append(pool.submit(client.gather, cuts))
            gathers[-1].add_done_callback(done)

        if ahead is not None:
            theirs, by_batch = ahead
            if identity is None or tuple(theirs) != identity:
                raise StageError(
                    f"I/O node {s} sees another file at {info['path']} than the stage's "
                    "process, which handed its sources their first writes"
                )
            for index, ks in by_batch.items():
                if direct_cuts[index] != set(range(len(ks))):
                    raise StageError(f"I/O node {s}: batch {index} was handed to other sources")
                futs: list[Any] = [Future(k, client=client) for k in ks]
                # a Future made from a key tells the scheduler nothing: without this, it
                # never hears that the task is done (Client._inform_scheduler_of_futures
                # and fire_and_forget send the same message)
                client._send_to_scheduler({"op": "client-desires-keys", "keys": ks})
                gathers.append(pool.submit(client.gather, futs))
                handed[index] = (list(range(len(ks))), futs, gathers[-1])

        def hand(b: Batch) -> None:
            """Ask the sources of this host to write their cuts of batch ``b``."""
            mine = sorted(direct_cuts[b.index])
            if b.index in handed or not mine:
                return
            futs = [submit(b, i, write_cut, fmt, info, s, identity) for i in mine]
            gathering = pool.submit(client.gather, futs)
            gathers.append(gathering)
            handed[b.index] = (mine, futs, gathering)

        def write_direct(b: Batch) -> dict[int, Any]:
            """The batch's cuts on sources of this host: they write, we wait. The next
            batches' cuts are handed over first, so no source waits for the others to end
            this one (each source writes the batches in order; a batch's sources write
            side by side)."""
            for nxt in node.batches[b.index : b.index + 1 + DIRECT_AHEAD]:
                hand(nxt)
            if b.index not in handed:
                return {}
            mine, futs, gathering = handed.pop(b.index)
            held[b.index].extend(futs)
            while True:
                try:
                    return dict(zip(mine, gathering.result(timeout=0.2), strict=True))
                except FuturesTimeout:
                    _check(token, me)

        def write(b: Batch) -> None:
            bufs = arrived.pop(b.index)
            wrote = write_direct(b)
            for i, res in wrote.items():
                if res[0] == "data":  # the source sees another file: write its bytes here
                    bufs[i] = res[1]
                elif res[0] == "stored":  # whole stripes stored there, the rest comes here
                    for (name, off), checksum in res[1].items():
                        writer.add_stored(name, off, checksum)
                    bufs[i] = res[2]
            r = b.ranges
            units, offs, sizes = r.unit.tolist(), r.offset.tolist(), r.nbytes.tolist()
            datasets, cut_of, pos = r.dataset.tolist(), b.cut.tolist(), b.pos.tolist()
            slot = b.slot.tolist()
            for i in range(len(units)):
                _check(token, me)
                res = wrote.get(cut_of[i])
                if res is not None and res[0] == "written":
                    _, crc, w0, w1 = res
                    k = slot[i]
                    writer.add_checksum(names[datasets[i]], offs[i], sizes[i], int(crc[k]))
                    t0, t1 = float(w0[k]), float(w1[k])
                    t_by.append(b.cuts[cut_of[i]].source)
                elif res is not None and res[0] == "stored" and res[2][slot[i]] is None:
                    t0, t1 = res[3], res[4]  # stored with its whole stripe, by the source
                    t_by.append(b.cuts[cut_of[i]].source)
                else:
                    t_by.append(-1)
                    got = bufs[cut_of[i]]
                    if isinstance(got, list):  # one view per range
                        view = memoryview(got[slot[i]])
                    else:
                        view = memoryview(got)[pos[i] : pos[i] + sizes[i]]
                    t0 = time.time()
                    writer.put(names[datasets[i]], offs[i], view)
                    t1 = time.time()
                t_unit.append(units[i])
                t_start.append(t0)
                t_end.append(t1)
                t_bytes.append(sizes[i])
                t_batch.append(b.index)
            writer.end_batch()
            for f in held.pop(b.index):
                f.release()
            # a finished gather holds its result, the batch's bytes: forget it, or the
            # worker keeps every byte it received until the stage ends (measured: RSS
            # 1.2 GiB per I/O worker for a 4 GiB stage with a 128 MiB window)
            gathers[:] = [g for g in gathers if not g.done()]
            trim.written(int(sum(sizes)))

        def store_group(g: StripeGroup) -> tuple[list[Any], list[Any]]:
            """Submit the group's stripes to their assemblers, the rest of their bytes to
            come from the other sources (Dask moves them, worker to worker)."""
            futs, stores = [], []
            prio = -priority[g.batch]
            for a in np.unique(g.assembler).tolist():
                theirs = np.isin(g.stripe, np.flatnonzero(g.assembler == a))
                received = []
                for o in np.unique(g.source[theirs & (g.source != a)]).tolist():
                    sel = np.flatnonzero(theirs & (g.source == o))
                    c = Cut(o, g.ranges.take(sel))
                    how: tuple[Any, ...] = (cut,)
                    if staging is not None:
                        how = (stage_cut, info, *staging, sb)
                    f = submit_cut(
                        client,
                        how[0],
                        c,
                        futures,
                        row_bytes,
                        dtypes,
                        names,
                        sources[o],
                        prio,
                        *how[1:],
                    )
                    futs.append(f)
                    r = c.ranges
                    received.append((f, r.dataset, r.offset, r.nbytes))
                own = Cut(a, g.ranges.take(np.flatnonzero(theirs & (g.source == a))))
                dcs, which = own.contributions()
                stores.append(
                    client.submit(
                        store_stripes,
                        fmt,
                        info,
                        s,
                        identity,
                        [g.stripes[j] for j in np.flatnonzero(g.assembler == a).tolist()],
                        [futures[dc] for dc in dcs],
                        which,
                        own.ranges.offset,
                        own.ranges.nbytes,
                        own.ranges.dataset,
                        [row_bytes[d] for d, _ in dcs],
                        [dtypes[d] for d, _ in dcs],
                        [names[d] for d, _ in dcs],
                        names,
                        received,
                        workers=[sources[a]],
                        allow_other_workers=False,
                        priority=prio,
                        pure=False,
                    )
                )
            return stores, futs

        def stored(g: StripeGroup, stores: list[Any], futs: list[Any]) -> None:
            """Wait for the group's assemblers; record its checksums and its trace."""
            gathering = pool.submit(client.gather, stores)
            gathers.append(gathering)
            while True:
                try:
                    results = gathering.result(timeout=0.2)
                    break
                except FuturesTimeout:
                    _check(token, me)
            ws = writer
            assert isinstance(ws, WholeStripeWriter)  # groups are made only for such writers
            span: dict[int, tuple[float, float, int]] = {}
            for a, res in zip(np.unique(g.assembler).tolist(), results, strict=True):
                mine = np.flatnonzero(g.assembler == a).tolist()
                if res[0] == "data":  # the assembler sees another file: we store its rows
                    for j, rows in res[1].items():
                        d, base, _ = g.stripes[mine[j]]
                        sb = ws.meta[names[d]]["stripe_bytes"]
                        t0 = time.time()
                        ws.store_stripe(names[d], base // sb, rows)
                        span[mine[j]] = (t0, time.time(), -1)
                    continue
                for (name, off), checksum in res[1].items():
                    ws.add_stored(name, off, checksum)
                for j, t0, t1 in zip(mine, res[2].tolist(), res[3].tolist(), strict=True):
                    span[j] = (t0, t1, a)
            for f in stores + futs:
                f.release()
            gathers[:] = [x for x in gathers if not x.done()]
            r = g.ranges
            for i, j in enumerate(g.stripe.tolist()):
                t0, t1, by = span[j]
                t_unit.append(int(r.unit[i]))
                t_start.append(t0)
                t_end.append(t1)
                t_bytes.append(int(r.nbytes[i]))
                t_by.append(by)
                t_batch.append(g.batch)

        if groups is not None:
            # two groups under way: the next one's bytes move while this one is stored
            peak = 0
            pending: collections.deque[tuple[Any, ...]] = collections.deque()
            for g in groups:
                _check(token, me)
                pending.append((g, *store_group(g)))
                peak = max(peak, sum(x[0].nbytes for x in pending))
                if len(pending) == 2:
                    stored(*pending.popleft())
            while pending:
                stored(*pending.popleft())
            # the trace has a unit's ranges together, units in plan order (a unit's bytes
            # lie in several stripes, each stored when the plan completes it)
            seen = np.concatenate([b.ranges.unit for b in node.batches] or [np.zeros(0, int)])
            units_, at_ = np.unique(seen, return_index=True)
            rank = dict(zip(units_.tolist(), at_.tolist(), strict=True))  # first appearance
            keep = sorted(range(len(t_unit)), key=lambda i: rank[t_unit[i]])
            cols: tuple[list[Any], ...] = (t_unit, t_start, t_end, t_bytes, t_by, t_batch)
            for col in cols:
                col[:] = [col[i] for i in keep]
        else:
            fetched = [
                sum(c.nbytes for i, c in enumerate(b.cuts) if i not in direct_cuts[b.index])
                for b in node.batches
            ]
            state = Window(fetched, window)
            todo = state.start()
            peak = state.held
            while not state.done:
                peak = max(peak, state.held + state.outside)
                for ins in todo:
                    if isinstance(ins, Fetch):
                        fetch(node.batches[ins.batch])
                todo = [i for i in todo if isinstance(i, Write)]
                if todo:
                    (w,) = todo
                    write(node.batches[w.batch])
                    todo = state.written(w.batch, writer.held_bytes())
                    continue
                try:
                    kind, b, payload = events.get(timeout=0.2)
                except queue.Empty:
                    _check(token, me)
                    continue
                if kind == "error":
                    raise payload
                arrived[b] = payload
                todo = state.fetched(b)
            peak = max(peak, state.held + state.outside)
        for d, off, n, crc in fills:
            writer.add_checksum(names[d], off, n, crc)
        f0 = time.time()
        writer.flush()
        f1 = time.time()
        sums = writer.checksums()
        ok = True
        return {
            "ionode": s,
            "worker": me.address,
            "unit": np.array(t_unit, dtype=np.int64),
            "start": np.array(t_start),
            "end": np.array(t_end),
            "nbytes": np.array(t_bytes, dtype=np.int64),
            "by": np.array(t_by, dtype=np.int64),  # -1: this worker, else the source
            "sources": list(sources),
            "batch": np.array(t_batch, dtype=np.int64),
            "flush": (f0, f1),
            "peak_held": peak,
            "task_start": t_task,
            "checksums": {f"{k[0]}:{k[1]}": v for k, v in sums.items()},
        }
    finally:
        try:
            writer.release()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            # a gather still under way when its futures are released asks the scheduler
            # for forgotten keys, which logs an error and reschedules them: let it end
            # first (bounded: a stage that is stopped must not wait on a dying source)
            wait_futures([g for g in gathers if g.running()], timeout=2.0)
            for fs in held.values():
                for f in fs:
                    f.release()
            for _, fs, _ in handed.values():
                for f in fs:
                    f.release()
            for f in futures.values():
                f.release()
            if staging is not None:  # memory: gone with the stage, whatever its outcome
                remove_staging(staging[0])
            if not ok and token in _ABORTED:
                # the stage was stopped: its process removes the temporary output, but
                # a write of ours may have recreated part of it after that (a Zarr
                # store makes its directories), so the last writer removes it too.
                # Not when only this node failed: the others still write into it, and
                # would fail on a missing file instead of reporting the first error
                remove_path(info["path"])
            with _LOCK:
                _ACTIVE.discard((token, s))
