"""The walkers on Dask: one long task per walker, messages worker to worker.

Effects only; the decisions are :class:`~orchestrator.treewalk.protocol.Walker`'s.
Each walker is a task pinned to its worker. Its messages travel on Dask's own
comms, straight to the peer's worker: a worker handler (``iorch_walk``,
installed for the walk by :func:`open_mailbox` through ``Client.run``) drops
each message into the walk's mailbox in that worker's process, and the walker
picks it up between two items. No scheduler round trip per message, no socket
of ours, and nothing sent for an item a walker processes itself.

Every message is counted where it is sent: by destination, with its size as
msgpack encodes it (what Dask puts on the wire, less the frame header).

``cp``, the centralized baseline (Algorithm 1 of the paper), runs on the same
transport: rank 0 is a master that holds the queue and hands items out one at
a time; every other rank processes what it is given and sends the results back
with its next request — a folder's entries, each of which the master hands
out again, so every entry costs two messages. ``cp-dirs`` is a kinder CP of
ours: only folders go through the master, a walker indexes the files it lists
(two messages per folder).

Examples
--------
>>> pack(Message("work", 0, 1, (("d", "/a", 12),)))
['work', 0, 1, [['d', b'/a', 12]], False]
>>> unpack(['work', 0, 1, [['d', b'/a', 12]], False]).items
(('d', '/a', 12),)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ..errors import WalkError, WalkStopped
from .index import IndexPart
from .lister import Tally, dir_item, entry_item, list_for_master, list_item
from .operations import Operation
from .protocol import Message, Walker

__all__ = [
    "HANDLER",
    "Mailbox",
    "WalkerSpec",
    "abort",
    "close_mailbox",
    "open_mailbox",
    "pack",
    "progress",
]

logger = logging.getLogger(__name__)

#: the worker handler every walker message is addressed to
HANDLER = "iorch_walk"
#: a refused walker waits 1 ms, doubling per refusal in a row up to this, before asking
#: again: with no pause an idle walker asks as fast as the round trip allows (thousands of
#: messages a second that only say "nothing")
BACKOFF_MAX = 0.05
#: an idle walker wakes at least this often to look for an abort (messages wake it at once)
POLL = 0.5

#: mailboxes of the walks under way in this worker process, by walk id
_MAILBOXES: dict[str, Mailbox] = {}


@dataclass
class Mailbox:
    """A walk's messages for the walker in this process, filled by the worker handler."""

    cv: threading.Condition = field(default_factory=threading.Condition)
    inbox: deque[list[Any]] = field(default_factory=deque)
    failed: str | None = None
    aborted: bool = False
    entries: int = 0  # listed so far, for progress (read by :func:`progress`)


def _deliver(walk: str, m: list[Any]) -> None:
    """The worker handler (on the worker's event loop): file one message."""
    box = _MAILBOXES.get(walk)
    if box is None:
        return  # a late message for a walk that has ended here
    with box.cv:
        box.inbox.append(m)
        box.cv.notify_all()


def open_mailbox(walk: str, dask_worker: Any = None) -> str:
    """Install the handler and the walk's mailbox on a worker (``Client.run``).

    Examples
    --------
    >>> client.run(open_mailbox, "walk-1")  # doctest: +SKIP
    """
    dask_worker.handlers[HANDLER] = _deliver
    _MAILBOXES[walk] = Mailbox()
    return str(dask_worker.address)


def close_mailbox(walk: str, dask_worker: Any = None) -> None:
    """Forget a walk on a worker: later messages for it are dropped.

    Examples
    --------
    >>> client.run(close_mailbox, "walk-1")  # doctest: +SKIP
    """
    _MAILBOXES.pop(walk, None)


def abort(walk: str, dask_worker: Any = None) -> None:
    """Tell a worker's walker to stop (a peer died, the driver was interrupted).

    Examples
    --------
    >>> client.run(abort, "walk-1")  # doctest: +SKIP
    """
    box = _MAILBOXES.get(walk)
    if box is not None:
        with box.cv:
            box.aborted = True
            box.cv.notify_all()


def progress(walk: str, dask_worker: Any = None) -> int:
    """Entries this worker's walker has listed so far (``Client.run``; 0 if none).

    Examples
    --------
    >>> progress("no-such-walk")
    0
    """
    box = _MAILBOXES.get(walk)
    return box.entries if box is not None else 0


def _pack_item(item: Any) -> Any:
    # items are tuples: a tag ("d" a folder, "e" an entry for CP, or the operation's own),
    # then paths and numbers; paths go as bytes (a Linux name need not be UTF-8)
    return [item[0], *(os.fsencode(x) if isinstance(x, str) else x for x in item[1:])]


def _unpack_item(item: Any) -> Any:
    return (item[0], *(os.fsdecode(x) if isinstance(x, bytes) else x for x in item[1:]))


def pack(m: Message) -> list[Any]:
    """A message as the handler receives it (msgpack-able)."""
    return [m.kind, m.src, m.dst, [_pack_item(i) for i in m.items], m.black]


def unpack(p: list[Any]) -> Message:
    """The message back from :func:`pack`."""
    kind, src, dst, items, black = p
    return Message(kind, int(src), int(dst), tuple(_unpack_item(i) for i in items), bool(black))


@dataclass(frozen=True)
class WalkerSpec:
    """Everything a walker task needs (pickled to its worker)."""

    walk: str
    rank: int
    addresses: tuple[str, ...]
    hosts: tuple[str, ...]
    root: str
    root_ino: int
    dev: int  # the walk's file system: folders elsewhere are not walked
    algorithm: str
    split: str
    victims: str
    threads: int
    seed: int
    index: str
    op: Operation


class _Sender:
    """Sends from a walker's threads through the worker's event loop; counts each message."""

    def __init__(self, worker: Any, spec: WalkerSpec, box: Mailbox) -> None:
        self.worker, self.spec, self.box = worker, spec, box
        n = len(spec.addresses)
        self.messages = [0] * n
        self.nbytes = [0] * n
        self.kinds: dict[str, int] = {}

    def send(self, msgs: list[Message]) -> None:
        for m in msgs:
            p = pack(m)
            self.messages[m.dst] += 1
            self.nbytes[m.dst] += len(msgpack.packb(p))
            self.kinds[m.kind] = self.kinds.get(m.kind, 0) + 1
            self.worker.loop.add_callback(self._send, self.spec.addresses[m.dst], p)

    async def _send(self, address: str, p: list[Any]) -> None:
        try:
            await self.worker.rpc(address).iorch_walk(walk=self.spec.walk, m=p, reply=False)
        except Exception as err:  # the peer's worker is gone: the walk cannot finish
            with self.box.cv:
                self.box.failed = f"a message to {address} failed ({type(err).__name__}: {err})"
                self.box.cv.notify_all()


def _check(box: Mailbox, spec: WalkerSpec) -> None:
    if box.aborted:
        raise WalkStopped
    if box.failed:
        raise WalkError(f"walker {spec.rank}: {box.failed}")


def _part(spec: WalkerSpec, thread: int) -> IndexPart:
    path = os.path.join(spec.index, f"part-{spec.rank:05d}-{thread:03d}.parquet")
    return IndexPart(path, spec.rank, stat=spec.op.stat, results=spec.op.results)


def _process(item: Any, spec: WalkerSpec, part: IndexPart, tally: Tally) -> list[Any]:
    if item[0] == "d":  # a folder; anything else is the operation's own (a piece to copy)
        children = list_item(item, part, tally, spec.op, spec.dev)
    else:
        children = spec.op.item(item)
    if part.full():
        part.flush()
    return children


def run_walker(spec: WalkerSpec) -> dict[str, Any]:
    """A walker's whole life, as one Dask task on its worker (DRQS, DEQS, PA-DRQS,
    H-DRQS; ``cp`` goes to the master or a slave). Returns what it did.

    Examples
    --------
    >>> client.submit(run_walker, spec, workers=[addr], pure=False)  # doctest: +SKIP
    """
    from distributed import get_worker

    worker = get_worker()
    box = _MAILBOXES.get(spec.walk)
    if box is None:
        raise WalkError(f"walker {spec.rank}: no mailbox for walk {spec.walk} on {worker.address}")
    sender = _Sender(worker, spec, box)
    start = time.perf_counter()
    try:
        if spec.algorithm in ("cp", "cp-dirs"):
            parts, tallies, busy, processed = (
                _cp_master(spec, box, sender) if spec.rank == 0 else _cp_slave(spec, box, sender)
            )
            walker_counts: dict[str, Any] = {"splits": 0}
        else:
            parts, tallies, busy, processed, walker_counts = _drqs(spec, box, sender)
    except WalkStopped:  # not an error of this task: no traceback in the worker's log
        return {"rank": spec.rank, "stopped": True}
    rows = [p.close() for p in parts]
    tally = Tally()
    for t in tallies:
        for k, v in t.as_dict().items():
            setattr(tally, k, getattr(tally, k) + v)
    return {
        "rank": spec.rank,
        "address": str(worker.address),
        "host": spec.hosts[spec.rank],
        "processed": processed,
        "rows": sum(rows),
        "tally": tally.as_dict(),
        "messages": sender.messages,
        "bytes": sender.nbytes,
        "kinds": sender.kinds,
        "busy": busy,
        "seconds": time.perf_counter() - start,
        "end": time.time(),
        "parts": [p.path for p in parts],
        "splits": walker_counts["splits"],
        "op": spec.op.summary(),
    }


def _drqs(
    spec: WalkerSpec, box: Mailbox, sender: _Sender
) -> tuple[list[IndexPart], list[Tally], float, int, dict[str, Any]]:
    """The distributed walkers: one :class:`Walker`, ``threads`` threads sharing its queue
    (one thread: DRQS/DEQS/PA-DRQS; several: H-DRQS)."""
    n = len(spec.addresses)
    walker = Walker(spec.rank, n, spec.split, spec.victims, list(spec.hosts), spec.seed)
    if spec.rank == 0:
        walker.put([dir_item(spec.root, spec.root_ino)])
    parts = [_part(spec, t) for t in range(spec.threads)]
    tallies = [Tally() for _ in range(spec.threads)]
    busy = [0.0] * spec.threads
    errors: list[BaseException] = []
    pace = {"until": 0.0, "seen": 0}  # backing off after refusals, shared by the threads

    def loop(t: int) -> None:
        part, tally = parts[t], tallies[t]
        while True:
            with box.cv:
                while box.inbox:
                    walker.receive(unpack(box.inbox.popleft()))
                _check(box, spec)
                if errors or walker.done:
                    box.cv.notify_all()
                    return
                now = time.monotonic()
                if walker.refused != pace["seen"]:
                    pace["seen"] = walker.refused
                    if walker.refused:
                        pace["until"] = now + min(1e-3 * 2 ** (walker.refused - 1), BACKOFF_MAX)
                sender.send(walker.step(ask=now >= pace["until"]))
                item = walker.take()
                if item is None:
                    if walker.done:
                        box.cv.notify_all()
                        return
                    wait = pace["until"] - now if walker.idle else POLL
                    box.cv.wait(min(max(wait, 1e-4), POLL))
                    continue
            t0 = time.perf_counter()
            children = _process(item, spec, part, tally)
            busy[t] += time.perf_counter() - t0
            with box.cv:
                walker.finish(children)
                box.entries = sum(x.entries for x in tallies)
                box.cv.notify_all()

    def guarded(t: int) -> None:
        try:
            loop(t)
        except BaseException as err:  # the other threads stop, the task raises it
            with box.cv:
                errors.append(err)
                box.cv.notify_all()

    threads = [
        threading.Thread(target=guarded, args=(t,), daemon=True) for t in range(1, spec.threads)
    ]
    for th in threads:
        th.start()
    guarded(0)
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    c = walker.counts
    return parts, tallies, sum(busy), c.processed, {"splits": c.splits}


def _cp_master(
    spec: WalkerSpec, box: Mailbox, sender: _Sender
) -> tuple[list[IndexPart], list[Tally], float, int]:
    """CP's master: the one queue; hands out one directory per request."""
    n = len(spec.addresses)
    queue: deque[Any] = deque([dir_item(spec.root, spec.root_ino)])
    idle: deque[int] = deque()
    while True:
        with box.cv:
            while not box.inbox:
                _check(box, spec)
                box.cv.wait(POLL)
            msgs = [unpack(box.inbox.popleft()) for _ in range(len(box.inbox))]
        for m in msgs:  # "want": the slave is idle, with the children of its last item
            queue.extend(m.items)
            idle.append(m.src)
        out = []
        while queue and idle:
            out.append(Message("work", 0, idle.popleft(), (queue.popleft(),)))
        if not queue and len(idle) == n - 1:
            out += [Message("stop", 0, r) for r in range(1, n)]
            sender.send(out)
            return [_part(spec, 0)], [Tally()], 0.0, 0
        sender.send(out)


def _cp_slave(
    spec: WalkerSpec, box: Mailbox, sender: _Sender
) -> tuple[list[IndexPart], list[Tally], float, int]:
    """CP's slave: asks the master, processes what it gets, sends the results back with
    its next request. ``cp``: a folder's entries all go back to the master, which hands
    out each one again; ``cp-dirs``: only subfolders go back, files are indexed here."""
    part, tally = _part(spec, 0), Tally()
    busy, processed = 0.0, 0
    children: list[Any] = []
    while True:
        sender.send([Message("request", spec.rank, 0, tuple(children))])
        with box.cv:
            while not box.inbox:
                _check(box, spec)
                box.cv.wait(POLL)
            m = unpack(box.inbox.popleft())
        if m.kind == "stop":
            return [part], [tally], busy, processed
        t0 = time.perf_counter()
        box.entries = tally.entries
        children = []
        for item in m.items:
            if item[0] == "e":
                entry_item(item, part, tally)
            elif spec.algorithm == "cp":
                children += list_for_master(item, part, tally, spec.dev)
            else:
                children += list_item(item, part, tally, None, spec.dev)
            processed += 1
        if part.full():
            part.flush()
        busy += time.perf_counter() - t0


def cp_traffic(
    paths: list[str], kinds: list[int], inodes: list[int | None], n: int
) -> tuple[int, int]:
    """CP's messages and bytes on a tree, counted from its index instead of run: every
    entry is an item the master sends (``work``) and whose results come back with the
    slave's next request (a folder's: all its entries), plus each slave's first request
    and its ``stop``. For trees where running CP would take hours (two Dask messages per
    entry); the benchmark checks the count against a real CP run on a smaller tree.

    Examples
    --------
    >>> cp_traffic(["/t", "/t/a"], [0, 1], [7, None], 2)[0]  # 2 works, 2+1 requests, 1 stop
    6
    """
    if not n <= 127:  # msgpack writes ranks up to 127 in one byte, as assumed below
        raise WalkError(f"cp_traffic counts up to 127 walkers, got {n}")
    items = {
        p: (dir_item(p, i or 0) if k == 0 else ("e", p, k))
        for p, k, i in zip(paths, kinds, inodes, strict=True)
    }
    children: dict[str, list[Any]] = {}
    for p in paths:
        parent = os.path.dirname(p)
        if parent != p and parent in items:
            children.setdefault(parent, []).append(items[p])
    size = 0
    for p in paths:
        size += len(msgpack.packb(pack(Message("work", 0, 1, (items[p],)))))
        size += len(msgpack.packb(pack(Message("request", 1, 0, tuple(children.get(p, ()))))))
    first = len(msgpack.packb(pack(Message("request", 1, 0))))
    stop = len(msgpack.packb(pack(Message("stop", 0, 1))))
    return 2 * len(paths) + 2 * (n - 1), size + (n - 1) * (first + stop)
