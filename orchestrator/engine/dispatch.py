"""Dispatch: the effects on the stage's side — place contributions, start writers, watch.

The plan becomes a :class:`~orchestrator.engine.program.Program` (pure);
each I/O worker gets its part and runs :func:`~orchestrator.engine.worker.run_ionode`
as one task. This module only submits, watches, aborts and collects; it is
the one place in the core that talks to Dask's client API for a stage.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed.comm.addressing import get_address_host

from ..contributions import Contribution, DatasetSpec
from ..errors import InputError, StageError
from ..layout import StageTransfers
from ..plan import Plan
from .backends import backend_ref, get_backend
from .cluster import IOCluster, ionode_name
from .options import DEFAULT_WINDOW
from .program import Program, build_program, unit_ranges
from .running import abort, busy
from .sources import hand_units, submit_cuts
from .storage import crc32, fold_crc32
from .trace import Trace
from .worker import run_ionode

__all__ = ["DEFAULT_WINDOW", "StageError", "dispatch", "fill_pieces", "stripes_of"]

log = logging.getLogger("orchestrator.engine")

#: with ``direct=None``, sources write directly when a stage holds at least this many full
#: batches per I/O node (measured: ``make demo``'s 6.5 MB per node ran its I/O nodes one
#: after another when written directly, side by side when sent)
DIRECT_MIN_BATCHES = 2
#: with direct writes on one host, batches grow to this (keeping at least
#: :data:`DIRECT_BATCHES_PER_NODE` per I/O node) whatever the window: no byte of them is
#: held by an I/O worker, and each batch's end costs every source a wait for the next
#: one. Measured on 2 cores, 1 GiB HDF5 ecf, 4 I/O nodes, stage seconds (median of 5):
#: batches of 32 MiB 0.82, 48 MiB 0.76, 64 MiB 0.71, 96 MiB 0.73, 128 MiB 0.75. A source
#: holds at most its share of a batch in copies (pieces it must gather), so larger is
#: not free either
DIRECT_BATCH = 64 << 20
#: ... and no fewer than this many batches per I/O node, so the nodes still advance side
#: by side in plan order
DIRECT_BATCHES_PER_NODE = 4


#: direct writes handed out by the stage come in batches that end with a unit of the plan,
#: about this many per I/O node. Measured on 2 cores (medians): a batch per unit cost too
#: much where units are small (1 GiB HDF5 ecf, 3,784 units: 7.6 s a stage); 16 batches
#: 1.0 s, 8 0.9 s, 4 0.8 s, as the old batches of 64 MiB; make demo (6.5 MB per node):
#: 4 batches wrote in 66 ms with two I/O nodes writing at once 54 % of the time, 16 in
#: 75 ms and 69 %
HAND_BATCHES = 4
#: direct writes handed out by the stage go to each source in tasks of its consecutive
#: units (in the plan's order) of at most this many bytes: a task per unit cost each
#: source a round trip per unit (see :func:`~orchestrator.engine.sources.write_cuts`)
HAND_GROUP = 64 << 20
#: per I/O node, the most bytes of its next batches (after the first) whose cuts the
#: stage's process submits with the writer tasks. They stay on their sources until the
#: stage ends (the stage holds them), so this also bounds that extra memory
SEND_AHEAD = 16 << 20
#: batches smaller than this may number at most :data:`MAX_SMALL_BATCHES` per I/O node:
#: each batch costs a round trip (15-35 ms measured), so a window of a few bytes made a
#: 16 KiB stage take 285 s and a 1 MiB one never end; a larger batch is mostly its write
SMALL_BATCH = 1 << 20
MAX_SMALL_BATCHES = 1024


@dataclass(frozen=True, eq=False)
class Staged:
    """The stage's datasets, cut into transfers (one TransferSet over all of them)."""

    specs: list[DatasetSpec]
    parts: list[StageTransfers]
    first_transfer: list[int]  # first global transfer index of each dataset


def stripes_of(staged: Staged, n_ionodes: int) -> list[list[tuple[int, int, int]]]:
    """Per I/O node, the ``(dataset index, offset, nbytes)`` of every stripe it owns.

    Examples
    --------
    >>> from orchestrator.layout import StripeLayout, derive_transfers
    >>> spec = DatasetSpec("u", (5,), "int64")
    >>> part = derive_transfers(spec, np.zeros(5, np.int64), StripeLayout(2, 16))
    >>> stripes_of(Staged([spec], [part], [0]), 2)
    [[(0, 0, 16), (0, 32, 8)], [(0, 16, 16)]]
    """
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(n_ionodes)]
    for d, (spec, part) in enumerate(zip(staged.specs, staged.parts, strict=True)):
        lay = part.layout
        for k in range(lay.stripes(spec.nbytes)):
            off = k * lay.stripe_bytes
            out[k % lay.n_ionodes].append((d, off, min(lay.stripe_bytes, spec.nbytes - off)))
    return out


def fill_pieces(
    d: int, spec: DatasetSpec, stripe_bytes: int, missing: np.ndarray
) -> list[tuple[int, int, int, int]]:
    """``(dataset, offset, nbytes, crc)`` of the fill-value bytes of ``missing`` rows, per stripe.

    Examples
    --------
    >>> fill_pieces(0, DatasetSpec("u", (4,), "int64"), 16, np.array([1, 2]))
    [(0, 8, 8, 1696784233), (0, 16, 8, 1696784233)]
    """
    if missing.size == 0:
        return []
    pattern = np.full(spec.row_shape, spec.fill_value, dtype=spec.dtype).reshape(-1).view(np.uint8)
    rb = spec.row_bytes
    breaks = np.flatnonzero(np.diff(missing) != 1) + 1
    out = []
    for run in np.split(missing, breaks):
        b0, b1 = int(run[0]) * rb, (int(run[-1]) + 1) * rb
        while b0 < b1:
            end = min(b1, (b0 // stripe_bytes + 1) * stripe_bytes)
            skip = b0 % rb
            reps = -(-(skip + end - b0) // rb)
            data = np.tile(pattern, reps)[skip : skip + end - b0]
            out.append((d, b0, end - b0, crc32(data.data)))
            b0 = end
    return out


def _place(
    cl: IOCluster,
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Any]]],
    remote: Mapping[tuple[str, int], Any],
    alive: Mapping[str, str | None],
) -> tuple[dict[tuple[int, int], Any], list[str], np.ndarray]:
    """Every contribution as a future on a worker: ``(dataset, client) -> future``, the
    source addresses, and ``source[d, c]`` (index into them). ``alive``: the workers
    when the stage began (:func:`_live_workers`)."""
    client = cl.client
    futures: dict[tuple[int, int], Any] = {}
    local: list[tuple[tuple[int, int], Contribution]] = []
    n_clients = 0
    for d, (name, (_, contribs)) in enumerate(datasets.items()):
        for con in contribs:
            n_clients = max(n_clients, con.client + 1)
            if (name, con.client) in remote:  # already on a worker: cut it where it is
                futures[(d, con.client)] = remote[(name, con.client)]
            else:
                local.append(((d, con.client), con))
    by_worker: dict[str, list[tuple[tuple[int, int], Contribution]]] = {}
    for dc, con in local:
        by_worker.setdefault(cl.compute_worker(dc[1]), []).append((dc, con))
    try:
        for addr, items in by_worker.items():
            # a list, not the objects: scatter treats dicts and tuples specially
            futs = client.scatter([c for _, c in items], workers=[addr], hash=False)
            futures.update({dc: f for (dc, _), f in zip(items, futs, strict=True)})
        where = client.who_has(list(futures.values()))
    except Exception as err:  # a worker that died under the scatter: say which
        died = _died(cl, _watch(alive, set(cl.compute) | set(by_worker)), 0.5)
        if died is None:
            raise
        raise StageError(died) from err
    orphans = [dc for dc, f in futures.items() if not where.get(f.key)]
    if orphans:
        # a worker killed between the scatter and the question takes its
        # contributions with it: name the death, not only its consequence
        died = _died(cl, _watch(alive, set(cl.compute) | set(by_worker)), 0.5)
        raise StageError(died or f"contribution of client {orphans[0][1]} is on no worker (lost?)")
    addrs = sorted({a for holders in where.values() for a in holders})
    source = np.zeros((len(datasets), max(n_clients, 1)), dtype=np.int64)
    for dc, f in futures.items():
        holders = where[f.key]
        source[dc] = addrs.index(sorted(holders)[0])
    return futures, addrs, source


def _cut_at_stripes(
    offset: np.ndarray, nbytes: np.ndarray, stripe: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pieces ``[offset, offset + nbytes)`` cut where stripes of ``stripe`` bytes begin:
    for each part, the index of its piece, its offset and its size (in order)."""
    first = offset // stripe
    count = (offset + nbytes - 1) // stripe - first + 1
    idx = np.repeat(np.arange(offset.size), count)
    k = np.arange(idx.size) - np.repeat(np.cumsum(count) - count, count)
    s = first[idx] + k
    lo = np.maximum(offset[idx], s * stripe)
    hi = np.minimum(offset[idx] + nbytes[idx], (s + 1) * stripe)
    return idx, lo.astype(np.int64), (hi - lo).astype(np.int64)


def program_of(
    staged: Staged,
    plan: Plan,
    n_ionodes: int,
    source: np.ndarray,
    batch_bytes: int,
    first_batch_bytes: int,
    unit_batches: int | None = None,
) -> Program:
    """The stage's :class:`Program` (pure: see :mod:`orchestrator.engine.program`).

    Examples
    --------
    >>> from orchestrator.layout import StripeLayout, derive_transfers
    >>> from orchestrator.policies import schedule
    >>> spec = DatasetSpec("u", (4,), "int64")
    >>> part = derive_transfers(spec, np.array([0, 0, 1, 1]), StripeLayout(2, 16))
    >>> plan = schedule(part.transfers, "ecf")
    >>> prog = program_of(Staged([spec], [part], [0]), plan, 2, np.array([[0, 0]]), 64, 64)
    >>> [n.nbytes for n in prog.nodes]
    [16, 16]
    """
    pd, po, pn, pt, pc = [], [], [], [], []
    for d, (part, base) in enumerate(zip(staged.parts, staged.first_transfer, strict=True)):
        # a piece may run over several stripes of one I/O node (one I/O node, or stripes
        # that come back to it): the writers checksum stripe by stripe, so every range
        # they get lies in one stripe (one I/O node failed any stage past a stripe: probe)
        idx, off, nb = _cut_at_stripes(
            part.piece_offset, part.piece_nbytes, part.layout.stripe_bytes
        )
        pd.append(np.full(idx.size, d, dtype=np.int64))
        po.append(off)
        pn.append(nb)
        pt.append(part.piece_transfer[idx] + base)
        pc.append(part.piece_client[idx])
    ranges, ptr = unit_ranges(
        np.concatenate(pd),
        np.concatenate(po),
        np.concatenate(pn),
        np.concatenate(pt),
        np.concatenate(pc),
        len(plan.transfers),
        plan.parent,
        plan.offset,
        plan.nbytes,
    )
    return build_program(
        ranges,
        ptr,
        plan.order,
        plan.ionode,
        plan.start,
        source,
        n_ionodes,
        stripes_of(staged, n_ionodes),
        batch_bytes=batch_bytes,
        first_batch_bytes=first_batch_bytes,
        unit_batches=unit_batches,
    )


def dispatch(
    cl: IOCluster,
    fmt: str,
    info: dict[str, Any],
    staged: Staged,
    plan: Plan,
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Any]]],
    remote: Mapping[tuple[str, int], Any],
    aggregate: bool,
    fills: Sequence[tuple[int, int, int, int]] = (),
    window: int = DEFAULT_WINDOW,
    batch_bytes: int | None = None,
    direct: bool | None = None,
) -> tuple[Trace, dict[str, str]]:
    """Run the plan on the I/O workers; return the trace and the stripe checksums.

    Each I/O worker executes its units in plan order, fetching the next
    batches (at most ``window`` bytes held) while it writes. On failure it
    raises :class:`StageError`; the caller stops the writers (:func:`stop`)
    and removes the temporary output. ``direct`` lets sources on an I/O
    worker's host write their pieces themselves (see
    :mod:`orchestrator.engine.sources`); False sends every byte to the I/O
    workers; None (the default) decides by size (:data:`DIRECT_MIN_BATCHES`).

    Examples
    --------
    Called by :func:`~orchestrator.engine.stage.write_stage` after planning:

    >>> trace, sums = dispatch(cl, "hdf5", info, staged, plan, datasets, {},
    ...                        aggregate=False)  # doctest: +SKIP
    """
    if window < 1:
        raise StageError(f"window must be >= 1 byte, got {window}")
    batch = batch_bytes or max(1, window // 4)
    alive = _live_workers(cl)  # who is who now: a worker restarted later is another one
    futures, addrs, source = _place(cl, datasets, remote, alive)
    # small first batches let a fetching I/O worker start writing early; sources that
    # write directly have nothing to wait for, and full batches cost fewer round trips
    hosts = {get_address_host(a) for a in cl.ionodes}
    per_node = int(plan.transfers.total_bytes) // max(1, cl.n_ionodes)
    can = not aggregate and get_backend(fmt).direct_writes(info)
    source_hosts = {get_address_host(a) for a in addrs}
    # one host for every worker: every source writes directly for every I/O node (with
    # several hosts, the other hosts' cuts are fetched, and the window bounds them)
    same_host = len(hosts | source_hosts) == 1
    # every worker on this machine (so this process sees the file they see): the direct
    # writes go to the sources from here, as the writer tasks leave, rather than from
    # the writer tasks once they run (measured: 20-60 ms before the first byte)
    loopback = same_host and _is_loopback(get_address_host(cl.ionodes[0]))
    if direct is None:
        # handed out from here, one task per unit in plan order, the sources run the plan
        # themselves; otherwise few batches per I/O node would have a source write one
        # node's whole stream before the next node's (the nodes stop writing side by side)
        # while the copy it saves is small
        direct = loopback or per_node >= DIRECT_MIN_BATCHES * batch
    direct = direct and can
    local = direct and source_hosts <= hosts
    one_host = local and same_host
    loopback = loopback and one_host
    if one_host and batch_bytes is None:
        batch = max(batch, min(DIRECT_BATCH, per_node // DIRECT_BATCHES_PER_NODE))
    _check_batches(window, batch, per_node)
    # the file each I/O node's sources write into, as seen here: None for a writer that
    # takes no pieces from other processes (a whole-stripe writer stores stripes instead)
    identities = _identities(fmt, info, cl.n_ionodes) if loopback else [None] * cl.n_ionodes
    program = program_of(
        staged,
        plan,
        cl.n_ionodes,
        source,
        batch,
        batch if local else min(batch, 2 << 20),
        unit_batches=per_node // HAND_BATCHES if any(identities) else None,
    )
    names = [s.name for s in staged.specs]
    row_bytes = [s.row_bytes for s in staged.specs]
    dtypes = [s.dtype for s in staged.specs]  # objects: .str loses fields
    stripes_on = {(d, off): s for s, node in enumerate(program.nodes) for d, off, _ in node.stripes}
    node_fills: list[list[tuple[int, int, int, int]]] = [[] for _ in program.nodes]
    for piece in fills:
        sb = staged.parts[piece[0]].layout.stripe_bytes
        node_fills[stripes_on[(piece[0], piece[1] // sb * sb)]].append(piece)
    keys = {dc: f.key for dc, f in futures.items()}
    writers = []
    firsts: list[Any] = []
    try:
        # every cut the stage moves early, over all I/O nodes, submitted here in planned-start
        # order: the first batch of each node goes with its writer task (Dask moves it
        # before the task starts, so every node writes at once; measured on make demo's
        # dumps: cut tasks submitted from inside the task first wrote 45-100 ms after it
        # started, and the nodes' starts spread by up to 45 ms, against planned makespans
        # of 30-110 ms), and the next batches in its window up to SEND_AHEAD bytes are
        # handed to it as keys: they run back to back on the sources while the writers
        # start, instead of one batch per round trip from each writer. Only when every
        # byte is sent: a direct write is the source's own task, not data to move
        early: dict[tuple[int, int], list[Any]] = {}
        if not direct:
            order = sorted(
                (program.priority[s][b], s, b)
                for s, node in enumerate(program.nodes)
                for b in _sent_ahead(node, window)
            )
            todo = [
                (c, addrs[c.source], -rank, (s, b))
                for rank, s, b in order
                for c in program.nodes[s].batches[b].cuts
            ]
            got = submit_cuts(cl.client, [t[:3] for t in todo], futures, row_bytes, dtypes, names)
            for t, f in zip(todo, got, strict=True):
                early.setdefault(t[3], []).append(f)
            firsts.extend(got)
        aheads: list[Any] = [None] * len(program.nodes)
        if loopback:
            aheads, handed = _hand_ahead(
                cl, fmt, info, program, identities, futures, row_bytes, dtypes, names, addrs
            )
            firsts.extend(handed)
        for s, node in enumerate(program.nodes):
            ahead = aheads[s]
            first = early.get((s, 0))
            sent = {b: [f.key for f in fs] for (t, b), fs in early.items() if t == s and b > 0}
            used = {
                (d, c)
                for b in node.batches
                for d, c in zip(b.ranges.dataset.tolist(), b.ranges.client.tolist(), strict=True)
            }
            mine = {dc: k for dc, k in keys.items() if dc in used}
            ref = backend_ref(fmt)
            writers.append(
                cl.client.submit(
                    run_ionode,
                    ref,
                    info,
                    node,
                    names,
                    mine,
                    addrs,
                    program.priority[s],
                    row_bytes,
                    dtypes,
                    aggregate,
                    window,
                    node_fills[s],
                    direct,
                    first,
                    ahead,
                    sent,
                    resources={ionode_name(s): 1},
                    pure=False,
                )
            )
        _wait_watching(cl, writers, alive)
        results = cl.client.gather(writers)
        if any(r.get("aborted") for r in results):  # stopped from elsewhere meanwhile
            raise StageError(
                "the stage was stopped, or its temporary output removed, while its I/O nodes wrote"
            )
    finally:
        for f in writers + firsts:
            f.release()
        for f in futures.values():
            if f.key not in {r.key for r in remote.values()}:
                f.release()
    sums: dict[str, str] = {}
    for r in results:
        sums.update(r["checksums"])
    _complete_fill_only(staged, program, fills, sums)
    return Trace.from_results(results, plan.n_units), sums


def _check_batches(window: int, batch: int, per_node: int) -> None:
    """Refuse a window so small for the stage that its batches' round trips would take
    longer than any write: more than :data:`MAX_SMALL_BATCHES` below :data:`SMALL_BATCH`."""
    n = -(-per_node // batch)
    if batch < SMALL_BATCH and n > MAX_SMALL_BATCHES:
        need = 4 * min(SMALL_BATCH, -(-per_node // MAX_SMALL_BATCHES))
        raise InputError(
            f"window={window} cuts each I/O node's {per_node:,} bytes into {n:,} batches of "
            f"{batch:,} bytes, one round trip each; give a window of at least {need:,} bytes"
        )


def _sent_ahead(node: Any, window: int) -> list[int]:
    """The batches of ``node`` whose cuts the stage's process submits: those its window
    fetches at once, while they total at most :data:`SEND_AHEAD` bytes (the first always).

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> node = NS(batches=[NS(nbytes=n) for n in (2 << 20, 4 << 20, 8 << 20, 16 << 20)])
    >>> _sent_ahead(node, 128 << 20)
    [0, 1, 2]
    >>> _sent_ahead(node, 3 << 20)
    [0]
    """
    out: list[int] = []
    held = 0
    for b in node.batches:
        held += b.nbytes
        if out and (held > window or held > SEND_AHEAD):
            break
        out.append(len(out))
    return out


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _identities(fmt: str, info: dict[str, Any], n_ionodes: int) -> list[tuple[int, int] | None]:
    """Per I/O node, the identity of the file its writer puts pieces in, as this process
    sees it; None where the writer takes no pieces from other processes."""
    out: list[tuple[int, int] | None] = []
    for s in range(n_ionodes):
        try:
            writer = get_backend(fmt).writer(info, s, False)
            try:
                out.append(writer.file_identity() if writer.direct == "pieces" else None)
            finally:
                writer.release()
        except OSError as err:
            raise StageError(
                f"opening {info.get('path')} to hand out its direct writes: {err}"
            ) from err
    return out


def _hand_ahead(
    cl: IOCluster,
    fmt: str,
    info: dict[str, Any],
    program: Program,
    identities: Sequence[tuple[int, int] | None],
    futures: dict[tuple[int, int], Any],
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
    names: Sequence[str],
    addrs: Sequence[str],
) -> tuple[list[tuple[tuple[int, int], dict[int, list[tuple[str, int]]]] | None], list[Any]]:
    """Submit the direct writes of every I/O node from this process, in the plan's order.

    Returns, per I/O node, ``run_ionode``'s ``ahead`` argument (the file
    identity seen here, and per batch each cut's task key and place in its
    results; None for a node whose writer takes no pieces), and the futures
    to hold until the stage ends. A writer of pieces gets all its batches (a
    direct write holds no copy, so nothing bounds how many wait), in batches
    ending with a unit of the plan (``unit_batches`` of
    :func:`~orchestrator.engine.program.build_program`): each source runs its
    cuts in the batches' order, in tasks of up to :data:`HAND_GROUP` bytes,
    side by side with the other sources on the I/O nodes as the plan has them.
    """
    ref = backend_ref(fmt)
    out: list[tuple[tuple[int, int], dict[int, list[tuple[str, int]]]] | None] = []
    todo: list[tuple[int, int, int, Any, tuple[Any, ...]]] = []
    for s, node in enumerate(program.nodes):
        identity = identities[s]
        if identity is None:
            out.append(None)
            continue
        out.append((identity, {}))
        for b in node.batches:
            for c in b.cuts:
                todo.append((program.priority[s][b.index], s, b.index, c, (ref, info, s, identity)))
    todo.sort(key=lambda t: t[:3])
    handed = hand_units(
        cl.client,
        [(t[3], addrs[t[3].source], -t[0], t[4]) for t in todo],
        futures,
        row_bytes,
        dtypes,
        names,
        HAND_GROUP,
    )
    for (_, s, k, _, _), (f, j) in zip(todo, handed, strict=True):
        entry = out[s]
        assert entry is not None
        entry[1].setdefault(k, []).append((f.key, j))
    return out, list({f.key: f for f, _ in handed}.values())


def _complete_fill_only(
    staged: Staged,
    program: Program,
    fills: Sequence[tuple[int, int, int, int]],
    sums: dict[str, str],
) -> None:
    """Stripes no piece touched hold only fill values: their checksum is the fills' fold."""

    for node in program.nodes:
        for d, off, n in node.stripes:
            name = staged.specs[d].name
            if f"{name}:{off}" in sums:
                continue
            mine = sorted(p for p in fills if p[0] == d and off <= p[1] < off + n)
            if sum(p[2] for p in mine) != n:
                raise StageError(f"{name}: stripe at byte {off} was not written by any I/O node")
            value = fold_crc32([p[3] for p in mine], [p[2] for p in mine])
            sums[f"{name}:{off}"] = f"{value:08x}"


def stop(cl: IOCluster, token: str, timeout: float = 30.0) -> None:
    """Tell the stage's writer loops to stop and wait (bounded) until none runs.

    Examples
    --------
    >>> stop(cl, "ckpt.h5.tmp-0123", timeout=5.0)  # doctest: +SKIP
    """
    try:
        cl.client.run(abort, token)
        deadline = time.monotonic() + timeout
        while sum(cl.client.run(busy, token).values()) and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception as err:  # cleanup must not hide the original error
        log.warning("could not stop the writers of %s: %s", token, err)


def _wait_watching(
    cl: IOCluster, futures: list[Any], alive: Mapping[str, str | None], poll: float = 0.5
) -> None:
    """Wait for ``futures``; fail fast, saying who died, if a worker disappears or a task errs."""
    from concurrent.futures import CancelledError  # FuturesCancelledError's base

    from distributed import wait

    watched = _watch(alive, set(cl.ionodes) | set(cl.compute))
    pending = list(futures)
    while pending:
        try:
            # wait() asks for a default client; a Parsl worker has none
            with cl.client.as_current():
                done, not_done = wait(pending, timeout=poll, return_when="FIRST_COMPLETED")
        except TimeoutError as err:
            err.__traceback__ = None  # it would keep the callers' frames in a cycle
            done = {f for f in pending if f.done()}
            not_done = {f for f in pending if not f.done()}
        except CancelledError as err:
            # wait() raises for a cancelled future: a writer whose first batch was lost
            # with the compute worker holding its contributions is cancelled by the
            # scheduler before it starts. Name the worker, as for any other death
            died = _died(cl, watched, poll)
            raise StageError(died or f"dispatch failed: {err}") from err
        for f in done:
            if f.status in ("error", "cancelled"):
                exc = f.exception() if f.status == "error" else None
                if isinstance(exc, InputError):  # the user's input, found on a worker: say so
                    raise exc
                # a task cancelled or failing because a worker died: name the worker
                died = _died(cl, watched, poll)
                if died:
                    raise StageError(died) from exc
                what = f"{type(exc).__name__}: {exc}" if exc is not None else "a task was cancelled"
                raise StageError(f"dispatch failed: {what}") from exc
        pending = list(not_done)
        if not pending:
            break
        died = _died(cl, _watch(alive, set(cl.ionodes)), poll)
        if died:
            raise StageError(died)


def _died(cl: IOCluster, watched: Mapping[str, str | None], poll: float) -> str | None:
    """Which of ``watched`` (address -> worker instance when the stage began) died, said
    for a user; None if all live.

    A worker is lost if it is gone, or back at the same address as another process
    (its nanny restarted it), twice in a row (``poll`` apart). By address alone a
    worker restarted quickly on its old port went unnoticed: Dask ran the dead I/O
    worker's writer loop again there, the stage committed, and a direct write of the
    first run, still asleep in a source, recreated part of the output afterwards."""

    def gone() -> set[str]:
        live = _live_workers(cl)
        return {a for a, inst in watched.items() if a not in live or live[a] != inst}

    lost = gone()
    if lost:
        time.sleep(poll)
        lost &= gone()
    if not lost:
        return None
    names = []
    for a in sorted(lost):
        if a in cl.ionodes:
            names.append(f"I/O worker {ionode_name(cl.ionodes.index(a))} ({a})")
        else:
            names.append(f"compute worker {a} (the contributions it held are lost)")
    return (
        f"{'; '.join(names)} died during dispatch; the stage was aborted and its "
        "temporary output removed"
    )


def _live_workers(cl: IOCluster) -> dict[str, str | None]:
    """Address -> instance id (``server_id``, new at every start) of the workers the
    scheduler knows now (a fresh query, not the client cache)."""
    # Client.scheduler_info() returns a cache that a background refresh may
    # replace with one that lists no workers; ask the scheduler directly, with
    # a small answer: identity() carries every worker's metrics, and decoding it
    # twice a second on the event loop of a leader's worker slowed the transfers
    # that loop serves

    # defined here so that it travels by value: the scheduler need not import this package
    def instances(dask_scheduler: Any = None) -> dict[str, str]:
        return {a: ws.server_id for a, ws in dask_scheduler.workers.items()}

    return dict(cl.client.run_on_scheduler(instances))


def _watch(alive: Mapping[str, str | None], addresses: set[str]) -> dict[str, str | None]:
    """The worker instances the stage began with at ``addresses`` (None: gone already)."""
    return {a: alive.get(a) for a in addresses}
