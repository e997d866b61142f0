"""Clients pushing their own data, with no plan: the baselines a plan must beat.

A client sends its pieces one at a time, in an order it chooses itself, and
waits for each to be written before the next (a one-port client). With
``fcfs`` an I/O node serves one piece at a time in the order they reach it
(the papers' one-port I/O node: it pulls the bytes when the piece's turn
comes); without, clients push at once and share the I/O node's link (what
plain concurrent writers over TCP get). :func:`unordered_seconds` is the
bidding paper's baseline (whole transfers, each client's own order);
:mod:`.clusterfile` pushes pieces in the Clusterfile paper's orders.
:func:`sequence_plan` is the simulator's account of the same run.

Examples
--------
>>> from orchestrator import CostModel, TransferSet
>>> ts = TransferSet([0, 0, 1, 1], [0, 1, 0, 1], [1, 1, 1, 1])
>>> sequence_plan(ts, CostModel(1.0, 1.0)).makespan  # both clients start at node 0
3.0
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import is_int
from ..cost import CostModel
from ..engine.cluster import IOCluster
from ..errors import InputError
from ..files import remove_path
from ..plan import Plan
from ..policies.scheduling import schedule
from ..transfers import TransferSet
from .transferstage import TransferStage, place, transfer_stage

__all__ = [
    "client_sequences",
    "push_overhead",
    "push_seconds",
    "sequence_plan",
    "unordered_plan",
    "unordered_seconds",
]

#: one client's sends, in order: (I/O node, the rows sent, sorted)
Sends = Sequence[tuple[int, npt.NDArray[np.int64]]]


def _fsync(path: str) -> None:
    """On an I/O worker: make what it wrote durable (the engine's stage ends with a flush)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pwrite(path: str, offsets: list[tuple[int, int]], data: Any) -> int:
    """On an I/O worker: write the runs of one transfer at their offsets."""
    fd = os.open(path, os.O_WRONLY)
    try:
        at = 0
        for off, n in offsets:
            os.pwrite(fd, memoryview(data)[at : at + n], off)
            at += n
    finally:
        os.close(fd)
    return at


def _pull_write(path: str, offsets: list[tuple[int, int]], key: str) -> int:
    """On an I/O worker: fetch one transfer's bytes from its client, then write them.

    The fetch happens inside the task, on the worker's one thread (``get_client``
    does not secede), so the I/O node receives one transfer at a time, in the
    order the tasks reached it: FCFS service, as the papers' one-port I/O node.
    Passing the future as an argument instead would let Dask fetch several
    transfers' bytes at once, before any of them runs.
    """
    from distributed import Future, get_client

    client = get_client()
    fut: Any = Future(key, client=client)
    # a future made from a key is not known to be wanted until the scheduler hears it
    # (as the engine's I/O node does for cuts handed ahead)
    client._send_to_scheduler({"op": "client-desires-keys", "keys": [key]})
    data = client.gather(fut, direct=True)
    return _pwrite(path, offsets, data)


def _push(
    contrib: Any,
    sends: list[tuple[str, list[int], list[tuple[int, int]]]],
    path: str,
    fcfs: bool = True,
) -> list[tuple[str, int, float, float]]:
    """On a compute worker: send each transfer to its I/O worker and wait until it is written,
    one at a time, in this client's own order (the unordered baseline). Returns each send's
    I/O worker, bytes written, and wall-clock start and end (one clock: one machine).

    With ``fcfs`` the I/O worker pulls the bytes when the transfer's turn comes
    (:func:`_pull_write`); without, the client pushes them at once and every client
    pushing to an I/O node shares its link (TCP's fair share, not a queue).
    """
    from distributed import get_worker, worker_client

    rows = contrib.rows
    me = get_worker().address
    done = []
    with worker_client() as wc:
        for io, sel_rows, offsets in sends:
            idx = np.searchsorted(rows, np.asarray(sel_rows, dtype=np.int64))
            data = np.ascontiguousarray(contrib.values[idx]).view(np.uint8).ravel()
            t0 = time.time()
            if fcfs:
                [fut] = wc.scatter([data], workers=[me], direct=True, hash=False)
                # served in arrival order: tasks submitted from tasks share one priority,
                # and a worker's ready queue breaks ties by arrival
                task = wc.submit(_pull_write, path, offsets, fut.key, workers=[io], pure=False)
            else:
                [fut] = wc.scatter([data], workers=[io], direct=True, hash=False)
                task = wc.submit(_pwrite, path, offsets, fut, workers=[io], pure=False)
            n = task.result()
            done.append((io, int(n), t0, time.time()))
            fut.release()
    return done


def sequence_plan(ts: TransferSet, cost: CostModel) -> Plan:
    """The simulator's run of clients sending ``ts``'s transfers whole, each client in index
    order, one at a time, against FCFS I/O nodes (``first-ios`` on whole transfers).

    Examples
    --------
    >>> from orchestrator import CostModel, TransferSet
    >>> ts = TransferSet([0, 1], [0, 0], [2, 1])  # both at node 0 at once: c0 first
    >>> sequence_plan(ts, CostModel(1.0, 1.0)).start.tolist()
    [0.0, 2.0]
    """
    # one block per transfer: nothing is cut, so no unit may pay the piece overhead —
    # neither in the order the clients' arrivals make nor in the durations
    whole = dataclasses.replace(cost, piece_overhead=0.0)
    plan = schedule(ts, "first-ios", cost=whole, block_size=max(1, int(ts.nbytes.max())))
    units = dataclasses.replace(plan.units, split=np.zeros(len(plan.units.parent), dtype=bool))
    return dataclasses.replace(plan, units=units, cost=cost)


def client_sequences(st: TransferStage) -> list[list[int]]:
    """Each client's I/O nodes in the order unordered dispatch sends to them: as its
    transfers first name them in the given workload (random, as the bidding workload's),
    then any others the layout added.

    Examples
    --------
    >>> from orchestrator import TransferSet
    >>> from orchestrator.bench.transferstage import transfer_stage
    >>> st = transfer_stage(TransferSet([0, 0, 1], [1, 0, 0], [64, 64, 64]), 8, 64)
    >>> client_sequences(st)
    [[1, 0], [0]]
    """
    ts, given = st.transfers, st.given
    out = []
    for c in range(ts.n_clients):
        mine = given.ionode[given.client == c].tolist() if given is not None else []
        has = set(ts.ionode[ts.client == c].tolist())
        out.append([s for s in dict.fromkeys([*mine, *range(ts.n_ionodes)]) if s in has])
    return out


def unordered_plan(st: TransferStage, cost: CostModel) -> Plan:
    """The simulator's unordered dispatch of ``st``: each client's transfers, whole, in
    :func:`client_sequences` order, against FCFS I/O nodes (``first-ios`` on whole
    transfers), under ``cost``.

    Examples
    --------
    >>> from orchestrator import TransferSet
    >>> from orchestrator.bench.transferstage import transfer_stage
    >>> st = transfer_stage(TransferSet([0, 0, 1, 1], [0, 1, 0, 1], [64] * 4), 8, 64)
    >>> unordered_plan(st, CostModel(64.0, 64.0)).makespan  # both start at node 0
    3.0
    >>> from orchestrator import schedule
    >>> schedule(st.transfers, "ecf", cost=CostModel(64.0, 64.0)).makespan
    2.0
    """
    ts = st.transfers
    rank = np.empty(len(ts), dtype=np.int64)
    for c, seq in enumerate(client_sequences(st)):
        at = {s: k for k, s in enumerate(seq)}
        idx = np.flatnonzero(ts.client == c)
        rank[idx] = [at[int(s)] for s in ts.ionode[idx]]
    perm = np.lexsort((rank, ts.client))
    mine = TransferSet(
        ts.client[perm], ts.ionode[perm], ts.nbytes[perm], ts.n_clients, ts.n_ionodes
    )
    return sequence_plan(mine, cost)


def push_overhead(
    cluster: IOCluster, directory: Path, pieces: int = 16, piece: int = 4096, repeats: int = 3
) -> float:
    """Seconds a pushed piece costs beyond its bytes, measured: client 0 pushes the same
    ``pieces * piece`` bytes to I/O node 0 as one piece and as ``pieces`` pieces (medians
    of ``repeats`` after a warm-up); the difference over ``pieces - 1``.

    Examples
    --------
    >>> push_overhead(cluster, tmp)  # doctest: +SKIP
    0.021
    """
    if not is_int(pieces, 2, 1 << 20) or not is_int(piece, 8, 1 << 30) or piece % 8:
        raise InputError(
            f"pieces must be >= 2 and piece a multiple of 8, got pieces={pieces!r}, piece={piece!r}"
        )
    ts = TransferSet([0], [0], [pieces * piece], n_clients=1, n_ionodes=cluster.n_ionodes)
    st = transfer_stage(ts, row_bytes=8, stripe_bytes=pieces * piece)
    rows = st.rows[0]
    one = [[(0, rows)]]
    many = [[(0, r) for r in np.array_split(rows, pieces)]]
    parts = place(cluster, st)
    try:
        seconds = {}
        for name, sends in (("one", one), ("many", many)):
            got = [push_seconds(cluster, st, parts, directory, sends) for _ in range(repeats + 1)]
            seconds[name] = float(np.median(got[1:]))
    finally:
        for p in parts:
            p.release()
    return max(0.0, (seconds["many"] - seconds["one"]) / (pieces - 1))


def unordered_seconds(
    cluster: IOCluster,
    st: TransferStage,
    parts: list[Any],
    directory: Path,
    trace: list[tuple[int, int, int, float, float]] | None = None,
    fcfs: bool = True,
) -> float:
    """Unordered dispatch of ``st``: each client sends its transfers whole, in its own
    order (:func:`client_sequences`); wall seconds until all are written and flushed.

    See :func:`push_seconds` for ``trace`` and ``fcfs``.

    Examples
    --------
    >>> unordered_seconds(cluster, stage, parts, tmp)  # doctest: +SKIP
    3.21
    """
    per_stripe = st.stripe_bytes // st.spec.row_bytes
    sends: list[list[tuple[int, npt.NDArray[np.int64]]]] = []
    for rows, seq in zip(st.rows, client_sequences(st), strict=True):
        node = (rows // per_stripe) % st.transfers.n_ionodes
        sends.append([(s, rows[node == s]) for s in seq])
    return push_seconds(cluster, st, parts, directory, sends, trace=trace, fcfs=fcfs)


def push_seconds(
    cluster: IOCluster,
    st: TransferStage,
    parts: list[Any],
    directory: Path,
    sends: Sequence[Sends],
    trace: list[tuple[int, int, int, float, float]] | None = None,
    fcfs: bool = True,
) -> float:
    """Clients push ``sends`` (per client, in order) to the I/O workers; wall seconds until
    every piece is written and each I/O node has flushed (as the engine's stage ends).

    ``parts`` are the clients' contributions (:func:`~.transferstage.place`: client ``c``'s on
    compute worker ``c``); the file is a plain one of the dataset's bytes, checked
    byte for byte afterwards and removed. ``fcfs``: see the module. ``trace``, if
    given, receives each send as (client, I/O node, bytes, start, end), seconds from
    the first send: the realized Gantt chart.

    Examples
    --------
    >>> sends = [[(0, stage.rows[0])], [(1, stage.rows[1])]]  # doctest: +SKIP
    >>> push_seconds(cluster, stage, parts, tmp, sends)  # doctest: +SKIP
    0.84
    """
    from distributed import wait

    path = directory / "tb-push.bin"
    # NaN everywhere first: a row never written must not pass for row 0 (whose values are 0)
    np.full(st.spec.nbytes // 8, np.nan).tofile(path)
    rb = st.spec.row_bytes
    by_client = dict(zip((c for c, r in enumerate(st.rows) if r.size), parts, strict=True))
    jobs = []
    for c, mine in enumerate(sends):
        out = []
        for s, sel in mine:
            if not sel.size:
                continue
            brk = np.flatnonzero(np.diff(sel) != 1) + 1
            runs = [(int(r[0]) * rb, int(r.size) * rb) for r in np.split(sel, brk)]
            out.append((cluster.ionodes[s], sel.tolist(), runs))
        if out:
            jobs.append((c, out))
    t0 = time.perf_counter()
    futs = [
        cluster.client.submit(
            _push,
            by_client[c],
            out,
            str(path),
            fcfs,
            workers=[cluster.compute_worker(c)],
            pure=False,
        )
        for c, out in jobs
    ]
    wait(futs)
    wait(
        [
            cluster.client.submit(_fsync, str(path), workers=[io], pure=False)
            for io in cluster.ionodes
        ]
    )
    seconds = time.perf_counter() - t0
    pushed: list[list[tuple[str, int, float, float]]] = [f.result() for f in futs]
    done = sum(n for one in pushed for _, n, _, _ in one)
    if trace is not None and jobs:
        first = min(t for one in pushed for _, _, t, _ in one)
        index = {w: k for k, w in enumerate(cluster.ionodes)}
        for (c, _), one in zip(jobs, pushed, strict=True):
            trace.extend((c, index[io], n, a - first, b - first) for io, n, a, b in one)
    try:
        want = rb * sum(r.size for r in st.rows)
        if done != want:
            raise RuntimeError(f"the clients' pushes wrote {done} bytes of {want}")
        # every value is its row's id: a byte sent to the wrong place shows
        got = np.fromfile(path, dtype=np.float64).reshape(st.spec.shape)
        every = np.concatenate(st.rows)
        if not (got[every] == every[:, None]).all():
            raise RuntimeError("the clients' pushes wrote rows at the wrong offsets")
    finally:
        remove_path(path)
    return seconds
