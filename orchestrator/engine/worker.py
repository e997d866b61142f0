"""The writer loop of an I/O worker: one long task that runs the node's program in order.

:func:`run_ionode` runs as one long task on its I/O worker. It follows
:class:`~orchestrator.engine.window.Window`: for a *Fetch* it submits the
batch's cut tasks (:mod:`.cuts`, on the workers holding the contributions,
ranked by planned start over all I/O nodes) and gathers their buffers in a
background thread, so data moves — worker to worker, through Dask's comms —
while the loop writes the batch before. A *Write* hands the batch's ranges to
the backend's writer in plan order; the writer checksums them as it writes.
Sources on the I/O worker's host write their cuts themselves, or store whole
stripes, instead (:mod:`.sources`); the loop still orders them, batch by
batch, and records their checksums.
"""

from __future__ import annotations

import collections
import functools
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Any, ParamSpec

import numpy as np

from ..errors import StageError
from ..files import remove_path
from .backends import get_backend
from .cuts import cut
from .program import Batch, Cut, NodeProgram, StripeGroup, stripe_groups
from .running import _ABORTED, _ACTIVE, _LOCK, _check, _stopped
from .sources import stage_cut, store_stripes, submit_cut, write_cut
from .staging import open_staging, remove_staging
from .storage import Backend, WholeStripeWriter
from .window import Fetch, Window, Write

__all__ = ["DIRECT_AHEAD", "run_ionode"]

#: batches whose direct writes are handed to their sources before the batch in hand is
#: done. With none, a source that finished its cut of a batch waits while another source
#: finishes its own and the I/O node learns of it and submits the next batch — measured
#: on 2 cores, 2 sources writing 1 GiB for 4 I/O nodes: ~40 waits of 15 ms per source,
#: a third of the writing. A source still writes an I/O node's batches in order (their
#: cut tasks are ranked by planned start); two sources may be one batch apart
DIRECT_AHEAD = 1


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


P = ParamSpec("P")


def _quiet_when_stopped(fn: Callable[P, dict[str, Any]]) -> Callable[P, dict[str, Any]]:
    """A writer loop whose stage was stopped (:func:`~orchestrator.engine.running.abort`)
    returns ``{"ionode": s, "aborted": True}`` whatever stopped it — the output removed
    under it, the stop seen between two writes — rather than raise: nobody waits for it
    any more, and Dask would log the error with its traceback into the user's terminal
    (seen under a Ctrl-C of ``iorch run``). A live stage's errors still raise."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        try:
            return fn(*args, **kwargs)
        except Exception:
            info: Any = kwargs["info"] if "info" in kwargs else args[1]
            node: Any = kwargs["node"] if "node" in kwargs else args[2]
            # or its output removed by the stage's cleanup before the stop reached us
            if _stopped(info["token"]) or not Path(info["path"]).exists():
                return {"ionode": node.ionode, "aborted": True}
            raise

    return run


@_quiet_when_stopped
def run_ionode(
    fmt: str | type[Backend],
    info: dict[str, Any],
    node: NodeProgram,
    names: Sequence[str],
    keys: dict[tuple[int, int], str],
    sources: Sequence[str],
    priority: Sequence[int],
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    aggregate: bool,
    window: int,
    fills: Sequence[tuple[int, int, int, int]],
    direct: bool = True,
    first: Sequence[Any] | None = None,
    ahead: tuple[tuple[int, int], dict[int, list[tuple[str, int]]]] | None = None,
    sent: dict[int, list[str]] | None = None,
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
    ``ahead`` is ``(identity, {batch: [(key, j) for each cut]})``: direct
    writes handed to the sources by the stage's process with the file
    identity it saw (on this host), so the sources begin while this task
    starts; a cut's result is item ``j`` of its :func:`write_cuts` task's.
    ``sent[batch]`` are the keys of the cut tasks of the next batches in this
    node's window, submitted by the stage's process with every node's, in
    planned-start order: they run back to back on the sources while the
    writer tasks start, not one batch per round trip from here.

    Returns the trace (per range: unit, start, end, bytes), the flush's
    span, the most bytes held at once (batches, and pieces waiting for the
    rest of their stripes), when the task started (to see how far apart the
    I/O nodes began), and the stripe checksums; ``{"ionode": s, "aborted":
    True}`` when the stage was stopped under it (:func:`_quiet_when_stopped`).

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
        # batch -> its direct cuts, their futures, and (handed by the stage, in write_cuts
        # tasks) each cut's place in its task's results
        handed: dict[int, tuple[list[int], list[Any], list[tuple[str, int]] | None]] = {}
        tasks: dict[str, Any] = {}  # key -> Future of the write_cuts tasks handed to us
        results: dict[str, Any] = {}  # key -> the gather of its result
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
            if sent and b.index in sent:
                ks = sent[b.index]
                if len(ks) != len(mine):
                    raise StageError(f"I/O node {s}: batch {b.index} was sent with other cuts")
                cuts: list[Any] = [Future(k, client=client) for k in ks]
                # as for the direct writes handed ahead: the scheduler must hear we want them
                client._send_to_scheduler({"op": "client-desires-keys", "keys": ks})
            else:
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
                for k, _ in ks:
                    if k not in tasks:
                        tasks[k] = Future(k, client=client)
                handed[index] = (list(range(len(ks))), [], [(k, j) for k, j in ks])
            # a Future made from a key tells the scheduler nothing: without this, it
            # never hears that the task is done (Client._inform_scheduler_of_futures
            # and fire_and_forget send the same message); one message for them all
            client._send_to_scheduler({"op": "client-desires-keys", "keys": list(tasks)})
            # one write_cuts task holds a source's run of units, often of several of our
            # batches: each is gathered once, as soon as it ends, in the order handed out
            # (a gather per batch when the batch came up cost a round trip each after the
            # writes had ended: 0.1 s of make demo's 0.15)
            for k, f in tasks.items():
                results[k] = pool.submit(client.gather, f)
                gathers.append(results[k])

        def hand(b: Batch) -> None:
            """Ask the sources of this host to write their cuts of batch ``b``."""
            mine = sorted(direct_cuts[b.index])
            if b.index in handed or not mine:
                return
            futs = [submit(b, i, write_cut, fmt, info, s, identity) for i in mine]
            handed[b.index] = (mine, futs, None)

        def write_direct(b: Batch) -> dict[int, Any]:
            """The batch's cuts on sources of this host: they write, we wait. The next
            batches' cuts are handed over first, so no source waits for the others to end
            this one (each source writes the batches in order; a batch's sources write
            side by side)."""
            for nxt in node.batches[b.index : b.index + 1 + DIRECT_AHEAD]:
                hand(nxt)
            if b.index not in handed:
                return {}
            mine, futs, picks = handed.pop(b.index)
            held[b.index].extend(futs)
            waits = [results[k] for k, _ in picks] if picks is not None else None
            if waits is None:
                waits = [pool.submit(client.gather, futs)]
                gathers.extend(waits)
            while True:
                done, pending = wait_futures(waits, timeout=0.2, return_when="FIRST_EXCEPTION")
                for w in done:
                    if (err := w.exception()) is not None:
                        raise err
                if not pending:
                    break
                _check(token, me)
            got = [w.result() for w in waits]
            if picks is None:
                return dict(zip(mine, got[0], strict=True))
            # write_cuts: each cut's result is one of its task's
            return dict(
                zip(mine, [g[j] for g, (_, j) in zip(got, picks, strict=True)], strict=True)
            )

        def write(b: Batch) -> None:
            bufs = arrived.pop(b.index)
            wrote = write_direct(b)
            if any(res[0] == "aborted" for res in wrote.values()):  # a source saw the stop
                _check(token, me)
                raise StageError(f"I/O node {s}: a source found the stage stopped")
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
            if any(res[0] == "aborted" for res in results):  # a source saw the stop
                _check(token, me)
                raise StageError(f"I/O node {s}: a source found the stage stopped")
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
            "began": t_task,
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
            for f in tasks.values():
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
