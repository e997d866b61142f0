"""The effects on the workers: cut tasks on the sources, one writer loop per I/O worker.

:func:`run_ionode` runs as one long task on its I/O worker. It follows
:class:`~orchestrator.engine.window.Window`: for a *Fetch* it submits the
batch's cut tasks (on the workers holding the contributions, ranked by
planned start over all I/O nodes) and gathers their buffers in a background
thread, so data moves — worker to worker, through Dask's comms — while the
loop writes the batch before. A *Write* hands the batch's ranges to the
backend's writer in plan order; the writer checksums them as it writes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..contributions import ContributionError
from ..files import remove_path
from ..storage import get_backend
from .program import Batch, NodeProgram
from .window import Fetch, Window, Write

__all__ = ["Aborted", "abort", "busy", "cut", "run_ionode"]

#: tokens of stages told to stop (per worker process)
_ABORTED: set[str] = set()
#: (token, I/O node) of writer loops running in this process
_ACTIVE: set[tuple[str, int]] = set()
_LOCK = threading.Lock()
#: ranges whose mean size is below this are packed into one buffer by :func:`cut`
PACK_BELOW = 256 << 10


class Aborted(RuntimeError):
    """The stage was aborted while this I/O worker was writing it."""


def abort(token: str) -> int:
    """On every worker: tell the stage's writer loops to stop; return how many are running.

    Runs in the worker's event loop (``Client.run``), so it never blocks.

    Examples
    --------
    >>> abort("ckpt.h5.tmp-0123")
    0
    """
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


def cut(
    contributions: Sequence[Any],
    which: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    row_bytes: Sequence[int],
    dtypes: Sequence[str],
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
                raise ContributionError(f"client {con.client} does not hold all rows "
                                        f"{int(r0[bad])}..{int(r1[bad]) - 1}")  # fmt: skip
            sources.append(values.reshape(-1).view(np.uint8))
            start[mine] = lo * rb + (offset[mine] - r0 * rb)
        else:  # a cast: convert only the rows each range needs
            chunks, at = [], 0
            for i, a, b in zip(mine.tolist(), r0.tolist(), r1.tolist(), strict=True):
                raw = np.ascontiguousarray(con.cut(a, b), dtype=dtype).reshape(-1).view(np.uint8)
                chunks.append(raw)
                start[i] = at + int(offset[i]) - a * rb
                at += raw.size
            sources.append(np.concatenate(chunks))
    triples = zip(which.tolist(), start.tolist(), nbytes.tolist(), strict=True)
    parts = [sources[k][s : s + n] for k, s, n in triples]
    if len(parts) == 1:
        return parts[0]
    if parts and int(nbytes.sum()) >= len(parts) * PACK_BELOW:
        return parts  # type: ignore[return-value]
    return np.concatenate(parts) if parts else np.empty(0, np.uint8)


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
    fmt: str,
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
) -> dict[str, Any]:
    """On I/O worker ``node.ionode``: fetch and write its batches in order; flush; checksum.

    ``keys[(dataset, client)]`` is the Dask key of that contribution (kept
    alive by the stage's process); ``sources[j]`` the address of source
    ``j``; ``fills`` the ``(dataset, offset, nbytes, crc)`` of missing rows
    the stage's process filled in this node's stripes.

    Returns the trace (per range: unit, start, end, bytes), the flush's
    span, the most batch bytes held at once, when the task started (to see
    how far apart the I/O nodes began), and the stripe checksums.

    Examples
    --------
    Submitted by :func:`~orchestrator.engine.dispatch.dispatch`, one per I/O worker:

    >>> client.submit(run_ionode, "hdf5", info, program.nodes[0], ["u"], keys, sources,
    ...               program.priority[0], [8], ["<f8"], False, 128 << 20, [],
    ...               resources={"io-0": 1})  # doctest: +SKIP
    """
    from distributed import Future, get_client, get_worker, secede

    t_task = time.time()
    token, s = info["token"], node.ionode
    secede()  # a long task: free the thread so cut tasks may run here too
    client = get_client()
    with _LOCK:
        _ACTIVE.add((token, s))
    pool = ThreadPoolExecutor(2, thread_name_prefix=f"iorch-fetch-{s}")
    events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
    held: dict[int, list[Any]] = {}  # batch -> cut futures, released once written
    arrived: dict[int, list[Any]] = {}
    futures: dict[tuple[int, int], Any] = {dc: Future(k, client=client) for dc, k in keys.items()}
    writer = get_backend(fmt).writer(info, s, aggregate)
    me = get_worker()
    t_unit, t_start, t_end, t_bytes = [], [], [], []
    ok = False
    try:
        _check(token, me)

        def fetch(b: Batch) -> None:
            cuts = []
            for c in b.cuts:
                dcs, which = c.contributions()
                cuts.append(client.submit(
                    cut, [futures[dc] for dc in dcs], which, c.ranges.offset, c.ranges.nbytes,
                    [row_bytes[d] for d, _ in dcs], [dtypes[d] for d, _ in dcs],
                    workers=[sources[c.source]], allow_other_workers=False,
                    priority=-priority[b.index], pure=False,
                ))  # fmt: skip
            held[b.index] = cuts

            def done(f: Any, b: int = b.index) -> None:
                try:
                    events.put(("fetched", b, f.result()))
                except BaseException as err:  # reported to the loop, which raises it
                    events.put(("error", b, err))

            pool.submit(client.gather, cuts).add_done_callback(done)

        def write(b: Batch) -> None:
            bufs = arrived.pop(b.index)
            r = b.ranges
            units, offs, sizes = r.unit.tolist(), r.offset.tolist(), r.nbytes.tolist()
            datasets, cut_of, pos = r.dataset.tolist(), b.cut.tolist(), b.pos.tolist()
            slot = b.slot.tolist()
            for i in range(len(units)):
                _check(token, me)
                got = bufs[cut_of[i]]
                if isinstance(got, list):  # one view per range
                    view = memoryview(got[slot[i]])
                else:
                    view = memoryview(got)[pos[i] : pos[i] + sizes[i]]
                t0 = time.time()
                writer.put(names[datasets[i]], offs[i], view)
                t_unit.append(units[i])
                t_start.append(t0)
                t_end.append(time.time())
                t_bytes.append(sizes[i])
            writer.end_batch()
            for f in held.pop(b.index):
                f.release()

        state = Window([b.nbytes for b in node.batches], window)
        todo = state.start()
        peak = state.held
        while not state.done:
            peak = max(peak, state.held)
            for ins in todo:
                if isinstance(ins, Fetch):
                    fetch(node.batches[ins.batch])
            todo = [i for i in todo if isinstance(i, Write)]
            if todo:
                (w,) = todo
                write(node.batches[w.batch])
                todo = state.written(w.batch)
                continue
            try:
                kind, b, payload = events.get(timeout=0.2)
            except queue.Empty:
                _check(token, me)
                continue
            if kind == "error":
                raise payload
            arrived[b] = list(payload)
            todo = state.fetched(b)
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
            for fs in held.values():
                for f in fs:
                    f.release()
            for f in futures.values():
                f.release()
            if not ok:
                # the stage failed: its process removes the temporary output, but a
                # write of ours may have recreated part of it after that (a Zarr
                # store makes its directories), so the last writer removes it too
                remove_path(info["path"])
            with _LOCK:
                _ACTIVE.discard((token, s))
