"""Concurrent collective reads (restarts): the model, the I/O nodes' read policies and the
simulator — after Liu et al., *Hierarchical I/O scheduling for collective I/O* (HIO).

Several **applications** restart at once. Each reads its checkpoint by a
two-phase collective read: its **aggregators** read contiguous file domains
from the I/O nodes that hold them — one **request** per aggregator and node —
then **shuffle** the pieces to the tasks that asked for them. A
:class:`ReadSet` holds, per request, its aggregator, node, read time and
arrival position in the node's queue, and per aggregator its application and
shuffle cost (eq. 1: :func:`shuffle_cost`).

Each node serves its queue one request at a time in the order a **read
policy** gives (``nio``: arrival order; ``sio``: one application at a time;
``hio``: the slowest aggregators first, tuned by their acceptable delay). An
aggregator finishes its shuffle after its last request is read; an
application ends with its last aggregator. The exact semantics, and where our
reading of the paper's garbled Algorithm 1 had to choose, are in
:doc:`/semantics`.

Examples
--------
>>> rs = ReadSet(node=[0, 0, 0], agg=[0, 1, 2], read=[6.0, 6.0, 6.0],
...              agg_app=[0, 0, 0], shuffle=[6.0, 6.0, 0.0])
>>> simulate_reads(rs, order=[[2, 0, 1]]).mean   # the paper's Fig. 3(a): p4, p0, p2
24.0
>>> simulate_reads(rs, order=[[0, 1, 2]]).mean   # Fig. 3(b): p0 first
18.0
>>> simulate_reads(rs, "hio").mean
18.0
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import InputError

__all__ = [
    "READ_POLICIES",
    "ReadSet",
    "ReadSimulation",
    "order_reads",
    "shuffle_cost",
    "simulate_reads",
]

#: the read policies: name -> summary
READ_POLICIES = {
    "nio": "arrival order on every I/O node (plain collective I/O)",
    "sio": "server-side: one application at a time, the same order on every node",
    "hio": "hierarchical: each application's slowest aggregators first, tuned by their "
    "acceptable delay (Liu et al., Algorithm 1)",
}
_CODE = {"nio": 0, "sio": 1, "hio": 2}

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _ints(name: str, values: Any) -> IntArray:
    a = np.asarray(values)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise InputError(f"{name} must be a 1-D sequence of whole numbers, got {values!r}"[:200])
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise InputError(f"{name} must be >= 0, got {int(a.min())}")
    return a


def _floats(name: str, values: Any) -> FloatArray:
    a = np.asarray(values, dtype=np.float64) if not isinstance(values, np.ndarray) else values
    if a.ndim != 1 or a.dtype.kind not in "iuf":
        raise InputError(f"{name} must be a 1-D sequence of numbers, got {values!r}"[:200])
    a = a.astype(np.float64)
    bad = ~np.isfinite(a) | (a < 0)
    if bad.any():
        raise InputError(f"{name} must be finite and >= 0, got {a[bad][0]!r}")
    return a


@dataclass(frozen=True, init=False)
class ReadSet:
    """Concurrent collective reads: per request its aggregator, I/O node, read seconds
    and arrival position; per aggregator its application and shuffle seconds.

    Parameters
    ----------
    node, agg : sequence of int
        Each request's I/O node and aggregator (``0 .. n - 1``).
    read : sequence of float
        Each request's service time at its node (seconds).
    agg_app, shuffle : sequence
        Each aggregator's application (``0 .. A - 1``, every application with an
        aggregator) and shuffle cost (seconds; :func:`shuffle_cost`).
    arrival : sequence of int, optional
        Each request's position in its node's queue (default: request order).
    access : sequence of int, optional
        Each aggregator's collective access within its application (0, 1, ...:
        an application that restarts twice reads twice; default all 0). An
        application's earlier access is served before its later one on every node.
    n_nodes : int, optional
        I/O nodes (default: the largest node id + 1).

    Examples
    --------
    >>> ReadSet(node=[0], agg=[0], read=[1.0], agg_app=[0], shuffle=[0.5]).n_apps
    1
    >>> ReadSet(node=[0], agg=[1], read=[1.0], agg_app=[0], shuffle=[0.5])
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: agg holds aggregator 1; there are 1 (agg_app, shuffle)
    """

    node: IntArray
    agg: IntArray
    read: FloatArray
    arrival: IntArray
    agg_app: IntArray
    shuffle: FloatArray
    access: IntArray
    n_nodes: int

    def __init__(
        self,
        node: Sequence[int] | IntArray,
        agg: Sequence[int] | IntArray,
        read: Sequence[float] | FloatArray,
        agg_app: Sequence[int] | IntArray,
        shuffle: Sequence[float] | FloatArray,
        arrival: Sequence[int] | IntArray | None = None,
        n_nodes: int | None = None,
        access: Sequence[int] | IntArray | None = None,
    ) -> None:
        nd, ag, rd = _ints("node", node), _ints("agg", agg), _floats("read", read)
        app, sh = _ints("agg_app", agg_app), _floats("shuffle", shuffle)
        arr = np.arange(nd.size, dtype=np.int64) if arrival is None else _ints("arrival", arrival)
        acc = np.zeros(app.size, dtype=np.int64) if access is None else _ints("access", access)
        if acc.size != app.size:
            raise InputError(
                f"access must have one entry per aggregator ({app.size}), got {acc.size}"
            )
        if not nd.size == ag.size == rd.size == arr.size:
            raise InputError(
                f"node, agg, read and arrival must have one entry per request, got lengths "
                f"{nd.size}, {ag.size}, {rd.size}, {arr.size}"
            )
        if app.size != sh.size:
            raise InputError(
                f"agg_app and shuffle must have one entry per aggregator, got {app.size}, {sh.size}"
            )
        if ag.size and ag.max() >= app.size:
            raise InputError(
                f"agg holds aggregator {int(ag.max())}; there are {app.size} (agg_app, shuffle)"
            )
        apps = np.unique(app)
        if apps.size and (apps[0] != 0 or apps[-1] != apps.size - 1):
            raise InputError(
                "agg_app must number applications 0..A-1 with none missing, got "
                f"{apps.tolist()[:20]}"
            )
        top = int(nd.max()) + 1 if nd.size else 0
        if n_nodes is None:
            n_nodes = top
        if not isinstance(n_nodes, (int, np.integer)) or isinstance(n_nodes, bool) or n_nodes < top:
            raise InputError(
                f"n_nodes must be a whole number >= {top} (the largest node + 1), got {n_nodes!r}"
            )
        for name, value in (
            ("node", nd),
            ("agg", ag),
            ("read", rd),
            ("arrival", arr),
            ("agg_app", app),
            ("shuffle", sh),
            ("access", acc),
        ):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "n_nodes", int(n_nodes))

    @property
    def n_apps(self) -> int:
        """Applications."""
        return int(self.agg_app.max()) + 1 if self.agg_app.size else 0


@dataclass(frozen=True)
class ReadSimulation:
    """A read policy's outcome: each node's service order, each request's end, each
    aggregator's finish and each application's execution time, and their mean."""

    order: list[IntArray]
    end: FloatArray
    finish: FloatArray
    time: FloatArray

    @property
    def mean(self) -> float:
        """The average execution time of the applications (what HIO minimises)."""
        return float(self.time.mean()) if self.time.size else 0.0


def order_reads(
    rs: ReadSet,
    policy: str = "hio",
    window: int = 10,
    threshold: float = 0.2,
    strict: bool = False,
    interleave: bool = False,
) -> list[IntArray]:
    """Each I/O node's service order (request ids) under a read policy.

    ``window`` is the flexible window's width in requests (any width of at least the
    number of requests is unbounded, however large); a window never holds two
    collective accesses of one application (``strict``: never two requests of one
    application, the paper's words taken literally — see :doc:`/semantics`).
    ``threshold`` is HIO's shuffle ÷ read ratio above which a window is sorted by
    acceptable delay: application by application, each one's slowest aggregators first
    (``interleave``: every application's slowest first, then every one's second
    slowest — Algorithm 1 read literally, see :doc:`/semantics`).

    Examples
    --------
    >>> rs = ReadSet(node=[0, 0], agg=[0, 1], read=[1.0, 1.0], agg_app=[1, 0], shuffle=[0, 0])
    >>> [o.tolist() for o in order_reads(rs, "sio")]
    [[1, 0]]
    """
    from .kernels.reads import service_orders

    if not isinstance(policy, str) or policy not in READ_POLICIES:
        raise InputError(f"policy must be one of {', '.join(READ_POLICIES)}, got {policy!r}")
    if not isinstance(window, (int, np.integer)) or isinstance(window, bool) or window < 1:
        raise InputError(f"window must be a whole number >= 1, got {window!r}")
    try:
        finite = isinstance(threshold, (int, float)) and bool(np.isfinite(float(threshold)))
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite or threshold < 0:
        raise InputError(f"threshold must be a number >= 0, got {reprlib.repr(threshold)}")
    # a window wider than every request there is holds them all: the same order for any
    # width from there on, and the kernel's width is an int64 (2**63 overflowed it, and a
    # read server fell back to arrival order)
    window = min(int(window), max(1, len(rs.agg)))
    for name, flag in (("strict", strict), ("interleave", interleave)):
        if not isinstance(flag, (bool, np.bool_)):
            raise InputError(f"{name} must be True or False, got {flag!r}")
    seq, bounds = service_orders(
        rs.node,
        rs.agg,
        rs.read,
        rs.arrival,
        rs.agg_app,
        rs.access,
        rs.shuffle,
        rs.n_nodes,
        _CODE[policy],
        int(window),
        float(threshold),
        bool(strict),
        bool(interleave),
    )
    return [seq[bounds[k] : bounds[k + 1]] for k in range(rs.n_nodes)]


def simulate_reads(
    rs: ReadSet,
    policy: str | None = None,
    *,
    order: Sequence[Sequence[int]] | None = None,
    window: int = 10,
    threshold: float = 0.2,
    strict: bool = False,
    interleave: bool = False,
) -> ReadSimulation:
    """Serve the requests in ``policy``'s order (or a given ``order``: per node, its
    requests' ids) and time every application.

    Examples
    --------
    >>> rs = ReadSet(node=[0, 1], agg=[0, 1], read=[2.0, 1.0], agg_app=[0, 1], shuffle=[1, 0])
    >>> simulate_reads(rs, "nio").time.tolist()
    [3.0, 1.0]
    """
    from .kernels.reads import serve

    if (policy is None) == (order is None):
        raise InputError("give exactly one of policy and order")
    if order is None:
        assert policy is not None
        orders = order_reads(rs, policy, window, threshold, strict, interleave)
    else:
        if len(order) != rs.n_nodes:
            raise InputError(f"order must list {rs.n_nodes} nodes' requests, got {len(order)}")
        orders = [_ints(f"order[{k}]", o) for k, o in enumerate(order)]
        got = np.concatenate(orders) if orders else np.empty(0, np.int64)
        if np.sort(got).tolist() != list(range(rs.node.size)):
            raise InputError("order must list every request exactly once")
        for k, o in enumerate(orders):
            if o.size and (rs.node[o] != k).any():
                raise InputError(f"order[{k}] holds a request of another node")
    seq = np.concatenate(orders) if orders else np.empty(0, np.int64)
    bounds = np.zeros(rs.n_nodes + 1, dtype=np.int64)
    bounds[1:] = np.cumsum([o.size for o in orders])
    end, finish, time = serve(seq, bounds, rs.read, rs.agg, rs.agg_app, rs.shuffle)
    return ReadSimulation(orders, end, finish, time)


def shuffle_cost(
    sizes: Sequence[float], intra: Sequence[bool], b_intra: float, b_inter: float, gamma: float
) -> float:
    """An aggregator's shuffle cost (eq. 1): its slowest message — ``size ÷ b_intra`` to a
    task on its own host, ``size ÷ b_inter`` to another host — plus the latency ``gamma``.
    An aggregator whose pieces all stay with it sends nothing and costs 0.

    Examples
    --------
    >>> shuffle_cost([4e6, 1e6], [True, False], b_intra=4e9, b_inter=1e9, gamma=1e-4)
    0.0011
    """
    for name, b in (("b_intra", b_intra), ("b_inter", b_inter)):
        if not isinstance(b, (int, float)) or not b > 0 or not np.isfinite(b):
            raise InputError(f"{name} must be a bandwidth > 0 (bytes/s), got {b!r}")
    if not isinstance(gamma, (int, float)) or not gamma >= 0 or not np.isfinite(gamma):
        raise InputError(f"gamma must be seconds >= 0, got {gamma!r}")
    s = _floats("sizes", list(sizes))
    inside = np.asarray(intra, dtype=bool)
    if inside.shape != s.shape:
        raise InputError(
            f"intra must say for each of the {s.size} messages whether it stays on the host"
        )
    if s.size == 0:
        return 0.0
    t = np.where(inside, s / b_intra, s / b_inter)
    return float(t.max() + gamma)
