"""The walkers' protocol, free of any transport: work stealing with Dijkstra's token.

Lafon et al., *Distributed tree walk* (sec. IV): every walker keeps a LIFO
queue of items (paths); an idle walker asks a peer for work; a walker asked
for work splits its queue and gives a part away (``random``: DRQS, a random
share; ``equal``: DEQS, libcircle's, an equal share per asker) or says it has
none. No master: the root (rank 0) only detects termination, by Dijkstra,
Feijen and van Gasteren's token ring, as the paper states it:

* walkers are ordered by rank; each is white or black, white at the start;
* when the root is idle it sends a white token to rank 1;
* a walker that sends work to a lower rank turns black;
* a walker forwards a token only when idle — a black walker blackens the token
  and turns white, a white one forwards it unchanged;
* the root, idle, receiving a white token (and white itself), has detected
  termination; otherwise it starts a new white token.

*Idle* here is: an empty queue and no request of its own unanswered. Work only
ever travels as the answer to a request, so work in flight always has an
asker waiting for it, which holds any token that reaches it — that is what
makes the ring sound with asynchronous messages (libcircle does the same).
A walker whose request is refused is idle for a moment (it may forward a
token then) before it asks again.

:class:`Walker` is the state machine of one walker. A driver (the simulator
in the tests, the Dask actors of :mod:`orchestrator.treewalk`) delivers each
message with :meth:`Walker.receive`, lets the walker act with
:meth:`Walker.step`, sends the messages it returns, and processes the items
it hands out with :meth:`Walker.take`, handing the children back with
:meth:`Walker.finish`. Everything is deterministic given the seed.

Examples
--------
>>> ws = [Walker(r, 2) for r in range(2)]
>>> ws[0].put(["/"])
>>> ws[0].take()
'/'
>>> ws[0].finish([])  # a folder with nothing in it
>>> [(m.kind, m.dst) for m in ws[0].step()]  # idle now: starts a token, asks rank 1
[('token', 1), ('request', 1)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import InputError

__all__ = ["SPLITS", "VICTIMS", "Message", "Walker"]

#: queue splitting: DRQS (a random share) or DEQS (equal shares, libcircle's default)
SPLITS = ("random", "equal")
#: victim choice: uniform random (DRQS, H-DRQS), proximity-aware request vector (PA-DRQS)
VICTIMS = ("random", "proximity")

Kind = Literal["request", "work", "nowork", "token", "stop"]


@dataclass(frozen=True)
class Message:
    """One message between walkers: ``request`` (asks ``dst`` for work), ``work`` (the
    answer, with ``items``), ``nowork``, ``token`` (``black`` or white) and ``stop``."""

    kind: Kind
    src: int
    dst: int
    items: tuple[Any, ...] = ()
    black: bool = False


@dataclass
class Counts:
    """What a walker did: items processed, messages and items sent, by kind."""

    processed: int = 0
    sent: dict[str, int] = field(default_factory=dict)
    items_sent: int = 0
    splits: int = 0

    def add(self, m: Message) -> None:
        self.sent[m.kind] = self.sent.get(m.kind, 0) + 1
        self.items_sent += len(m.items)


class Walker:
    """One walker's state (see the module).

    Parameters
    ----------
    rank, n : int
        This walker's rank and the number of walkers.
    split : {"random", "equal"}
        How a queue is split for askers.
    victims : {"random", "proximity"}
        Whom an idle walker asks: a uniformly random peer, or the proximity-aware
        request vector (needs ``hosts``).
    hosts : sequence of hashable, optional
        Each rank's host, for ``proximity``: a host's first rank asks remote ranks
        (round robin, from a seeded shuffle); the others ask their co-located ranks
        in rank order, or remote ones if they have none.
    seed : int
        Seeds the split shares and the victims.

    Examples
    --------
    >>> w = Walker(1, 3, seed=2)
    >>> w.step()  # empty and idle: asks a peer
    [Message(kind='request', src=1, dst=0, items=(), black=False)]
    """

    def __init__(
        self,
        rank: int,
        n: int,
        split: str = "random",
        victims: str = "random",
        hosts: Sequence[Any] | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(f"n must be a whole number >= 1, got {n!r}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < n:
            raise InputError(f"rank must be a whole number in [0, {n}), got {rank!r}")
        if split not in SPLITS:
            raise InputError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if victims not in VICTIMS:
            raise InputError(f"victims must be one of {', '.join(VICTIMS)}, got {victims!r}")
        if hosts is not None and len(hosts) != n:
            raise InputError(f"hosts must name a host for each of the {n} ranks, got {len(hosts)}")
        if victims == "proximity" and hosts is None:
            raise InputError("victims='proximity' needs hosts (each rank's host)")
        self.rank, self.n, self.split = rank, n, split
        self.rng = np.random.default_rng([seed, rank])
        self.queue: list[Any] = []
        self.black = False
        self.waiting = False  # a request of ours is unanswered
        self.token: bool | None = None  # a token we hold (its blackness), to forward when idle
        self.token_out = False  # root: a token of ours is on its way round
        self.askers: list[int] = []
        self.in_hand = 0  # items taken and not finished (several with threads: H-DRQS)
        self.refused = 0  # requests refused in a row (a driver may back off on it)
        self.stopped = False
        self.counts = Counts()
        self._vector = self._request_vector(victims, hosts)
        self._next = 0

    def _request_vector(self, victims: str, hosts: Sequence[Any] | None) -> list[int] | None:
        """Whom to ask, in order, for ``proximity``; ``None`` for uniform random."""
        if victims == "random" or self.n == 1:
            return None
        assert hosts is not None
        mine = hosts[self.rank]
        local = [r for r in range(self.n) if hosts[r] == mine and r != self.rank]
        remote = [r for r in range(self.n) if hosts[r] != mine]
        self.rng.shuffle(remote)
        first_here = min(r for r in range(self.n) if hosts[r] == mine) == self.rank
        if first_here or not local:
            return remote or local
        return local

    @property
    def idle(self) -> bool:
        """Nothing to do, nothing being done and nothing asked for."""
        return not self.queue and not self.waiting and not self.in_hand

    @property
    def done(self) -> bool:
        """The walk is over for this walker (termination detected and announced)."""
        return self.stopped

    def put(self, items: Iterable[Any]) -> None:
        """Queue items (the root's start, or the children of a processed item)."""
        self.queue.extend(items)

    def take(self) -> Any:
        """The next item to process (the newest: depth first), or ``None`` if empty.

        Hand its children back with :meth:`finish`: until then the walker is not idle.
        """
        if not self.queue:
            return None
        self.counts.processed += 1
        self.in_hand += 1
        return self.queue.pop()

    def finish(self, children: Iterable[Any] = ()) -> None:
        """An item taken is processed: queue its children."""
        if self.in_hand <= 0:
            raise InputError("finish() without an item taken")
        self.in_hand -= 1
        self.queue.extend(children)

    def receive(self, m: Message) -> None:
        """Take in one message addressed to this walker."""
        if m.dst != self.rank:
            raise InputError(f"message for rank {m.dst} delivered to rank {self.rank}")
        if self.stopped:
            return  # late requests and refusals after the end: nothing to answer
        if m.kind == "request":
            self.askers.append(m.src)
        elif m.kind == "work":
            self.waiting, self.refused = False, 0
            self.queue[:0] = m.items  # under ours: we go on with our own newest first
        elif m.kind == "nowork":
            self.waiting = False
            self.refused += 1
        elif m.kind == "token":
            self.token = m.black
        elif m.kind == "stop":
            self.stopped = True

    def step(self, ask: bool = True) -> list[Message]:
        """One turn of the work loop (Algorithm 2, lines 4-12, without processing an item):
        answer askers, ask for work if idle, handle the token. Returns messages to send.

        ``ask=False`` holds back a request (a driver backing off after :attr:`refused`
        refusals): the walker stays idle, so the token may pass it meanwhile.
        """
        if self.stopped:
            return []
        out = self._answer()
        if self.idle:
            out += self._token()
            if ask and not self.stopped and self.n > 1:
                out.append(self._ask())
        return out

    def _answer(self) -> list[Message]:
        out = []
        askers, self.askers = self.askers, []
        shares = self._shares(len(askers))
        for a, k in zip(askers, shares, strict=True):
            if k == 0:
                out.append(Message("nowork", self.rank, a))
                continue
            # the oldest items: the shallowest directories, the largest subtrees left
            give, self.queue = self.queue[:k], self.queue[k:]
            out.append(Message("work", self.rank, a, tuple(give)))
            self.counts.splits += 1
            if a < self.rank:
                self.black = True
        for m in out:
            self.counts.add(m)
        return out

    def _shares(self, askers: int) -> list[int]:
        """How many items each asker gets; this walker always keeps at least one."""
        spare = len(self.queue) - 1
        if askers == 0:
            return []
        if spare <= 0:
            return [0] * askers
        if self.split == "equal":  # one part per asker and one kept, as equal as can be;
            # the kept part is never the smaller (it is never empty)
            base, extra = divmod(len(self.queue), askers + 1)
            return [base + (1 if i < extra - 1 else 0) for i in range(askers)]
        shares = []
        for _ in range(askers):  # a random share of what is left, one asker after another
            k = int(self.rng.integers(1, spare + 1)) if spare > 0 else 0
            shares.append(k)
            spare -= k
        return shares

    def _ask(self) -> Message:
        if self._vector is None:
            v = int(self.rng.integers(self.n - 1))
            dst = v + (v >= self.rank)  # any peer but ourselves
        else:
            dst = self._vector[self._next % len(self._vector)]
            self._next += 1
        self.waiting = True
        m = Message("request", self.rank, dst)
        self.counts.add(m)
        return m

    def _token(self) -> list[Message]:
        """Idle: forward a held token, or (root) start one or conclude."""
        nxt = (self.rank + 1) % self.n
        out: list[Message] = []
        if self.rank == 0:
            if self.token is not None:  # ours came back
                white = not self.token and not self.black
                self.token, self.token_out = None, False
                if white:
                    self.stopped = True
                    out = [Message("stop", 0, r) for r in range(1, self.n)]
            if not self.stopped and not self.token_out:
                if self.n == 1:
                    self.stopped = True  # alone and idle: nothing can be left
                else:
                    self.black = False
                    self.token_out = True
                    out.append(Message("token", 0, nxt))
        elif self.token is not None:
            out.append(Message("token", self.rank, nxt, black=self.token or self.black))
            self.token, self.black = None, False
        for m in out:
            self.counts.add(m)
        return out
