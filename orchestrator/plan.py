"""Plans: a global order of units, with timing derived by list scheduling."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from .cost import CostModel
from .errors import PlanError
from .kernels.blocks import split_pieces
from .kernels.timing import list_schedule, loads
from .transfers import TransferSet, write_rows

__all__ = ["Plan", "PlanError", "Units", "lower_bound"]


def lower_bound(transfers: TransferSet, cost: CostModel) -> float:
    """Open-shop lower bound of any plan: ``max(max client load, max I/O-node load)``.

    Loads are summed durations of whole transfers (no split overhead), so the
    bound is the same for every policy on ``transfers``.

    Examples
    --------
    >>> from orchestrator import TransferSet, CostModel
    >>> ts = TransferSet([0, 0, 1, 1], [0, 1, 1, 2], [30, 10, 10, 20])
    >>> lower_bound(ts, CostModel(1.0, 1.0))
    40.0
    """
    d = cost.duration(transfers.nbytes)
    cl, sl = loads(transfers.client, transfers.ionode, d, transfers.n_clients, transfers.n_ionodes)
    return float(max(cl.max(), sl.max()))


@dataclass(frozen=True, eq=False)
class Units:
    """What a policy orders: whole transfers, or pieces of them.

    Columns are indexed by unit id. ``split[u]`` says whether unit ``u`` is a
    piece of a transfer that was cut (it then pays the cost model's
    ``piece_overhead``). ``block_size`` is set for the fixed-size pieces of
    block-splitting policies (every one of their pieces counts as split);
    variable-size pieces (:meth:`from_pieces`) have ``block_size=None``.
    Build with :meth:`Units.of` or :meth:`Units.from_pieces`.
    """

    parent: npt.NDArray[np.int64]
    offset: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.int64]
    client: npt.NDArray[np.int64]
    ionode: npt.NDArray[np.int64]
    durations: npt.NDArray[np.float64]
    block_size: int | None
    split: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        if self.split.size != self.parent.size:  # default: block pieces are all split
            flag = np.full(self.parent.size, self.block_size is not None, dtype=bool)
            object.__setattr__(self, "split", flag)

    @classmethod
    def of(cls, transfers: TransferSet, cost: CostModel, block_size: int | None = None) -> Units:
        """Units of ``transfers``: themselves, or pieces of ``block_size`` bytes.

        Examples
        --------
        >>> from orchestrator import TransferSet, CostModel
        >>> u = Units.of(TransferSet([0], [0], [5]), CostModel(1.0, 1.0), block_size=2)
        >>> u.offset.tolist(), u.nbytes.tolist()
        ([0, 2, 4], [2, 2, 1])
        """
        if block_size is None:
            parent = np.arange(len(transfers), dtype=np.int64)
            offset = np.zeros(len(transfers), dtype=np.int64)
            nbytes = transfers.nbytes
        else:
            parent, offset, nbytes = split_pieces(transfers.nbytes, block_size)
        return cls(
            parent=parent,
            offset=offset,
            nbytes=nbytes,
            client=transfers.client[parent],
            ionode=transfers.ionode[parent],
            durations=cost.duration(nbytes, split=block_size is not None),
            block_size=block_size,
            split=np.full(parent.size, block_size is not None, dtype=bool),
        )

    @classmethod
    def from_pieces(
        cls,
        transfers: TransferSet,
        cost: CostModel,
        parent: npt.ArrayLike,
        offset: npt.ArrayLike,
        nbytes: npt.ArrayLike,
    ) -> Units:
        """Units of variable-size pieces: piece ``u`` moves ``nbytes[u]`` bytes of
        transfer ``parent[u]`` from byte ``offset[u]`` on.

        Pieces of a transfer cut into several are ``split`` and pay the cost
        model's ``piece_overhead``; a transfer given as one piece does not.
        Whether the pieces tile their transfers is checked by
        :meth:`Plan.validate`, not here.

        Examples
        --------
        >>> from orchestrator import TransferSet, CostModel
        >>> ts = TransferSet([0, 1], [0, 0], [5, 3])
        >>> cm = CostModel(1.0, 1.0, piece_overhead=0.5)
        >>> u = Units.from_pieces(ts, cm, [0, 0, 1], [0, 2, 0], [2, 3, 3])
        >>> u.split.tolist(), u.durations.tolist()
        ([True, True, False], [2.5, 3.5, 3.0])
        """
        p = np.ascontiguousarray(parent, dtype=np.int64)
        n = np.ascontiguousarray(nbytes, dtype=np.int64)
        split = np.bincount(p, minlength=len(transfers))[p] > 1
        return cls(
            parent=p,
            offset=np.ascontiguousarray(offset, dtype=np.int64),
            nbytes=n,
            client=transfers.client[p],
            ionode=transfers.ionode[p],
            durations=cost.duration(n) + np.where(split, cost.piece_overhead, 0.0),
            block_size=None,
            split=split,
        )

    @property
    def whole(self) -> bool:
        """True when unit ``i`` is exactly transfer ``i`` (nothing was cut).

        Examples
        --------
        >>> from orchestrator import TransferSet, CostModel
        >>> Units.of(TransferSet([0], [0], [5]), CostModel(1.0, 1.0)).whole
        True
        """
        return self.block_size is None and bool(
            np.array_equal(self.parent, np.arange(self.parent.size)) and not self.split.any()
        )


@dataclass(frozen=True, eq=False)
class Plan:
    """The output of a policy: a global priority order over units.

    A *unit* is a whole transfer, or for block-splitting policies
    (``block_size`` set) a piece of one. ``order`` is a permutation of unit
    ids; per-client and per-I/O-node sequences are its subsequences, and
    ``start``/``end`` follow by list scheduling (each unit starts as soon as
    both its client and its I/O node are free). Nothing about timing is
    stored apart from the order.

    Build plans with :func:`orchestrator.schedule`.

    Examples
    --------
    >>> import orchestrator as orc
    >>> ts = orc.TransferSet([0, 0, 1, 1], [0, 1, 1, 2], [30, 10, 10, 20])
    >>> plan = orc.schedule(ts, "ecf", cost=orc.CostModel(1.0, 1.0))
    >>> plan.order.tolist(), plan.makespan, plan.lower_bound
    ([1, 2, 0, 3], 40.0, 40.0)
    >>> plan.validate()
    """

    transfers: TransferSet
    units: Units
    order: npt.NDArray[np.int64]
    cost: CostModel
    policy: str
    kind: str = "centralized"
    seed: int = 0
    rounds: int = 0
    messages: int = 0
    kernel_seconds: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)
    #: what one policy alone reports about its plan (``exact``: ``optimality_gap``,
    #: ``proven_optimal``; ``auto``: ``chosen_policy``), so a new policy adds no field here
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def optimality_gap(self) -> float | None:
        """``exact``: relative gap ``(makespan - proven bound) / makespan`` of the solver."""
        return self.extras.get("optimality_gap")

    @property
    def proven_optimal(self) -> bool | None:
        """``exact``: whether the solver proved its plan optimal."""
        return self.extras.get("proven_optimal")

    @property
    def chosen_policy(self) -> str | None:
        """``auto``: the policy whose plan it returned."""
        return self.extras.get("chosen_policy")

    # ----------------------------------------------------------------- units
    @property
    def parent(self) -> npt.NDArray[np.int64]:
        """Transfer index of each unit (the identity when transfers are not split)."""
        return self.units.parent

    @property
    def offset(self) -> npt.NDArray[np.int64]:
        """Byte offset of each unit within its transfer."""
        return self.units.offset

    @property
    def nbytes(self) -> npt.NDArray[np.int64]:
        """Bytes of each unit."""
        return self.units.nbytes

    @property
    def client(self) -> npt.NDArray[np.int64]:
        """Client of each unit."""
        return self.units.client

    @property
    def ionode(self) -> npt.NDArray[np.int64]:
        """I/O node of each unit."""
        return self.units.ionode

    @property
    def durations(self) -> npt.NDArray[np.float64]:
        """Seconds each unit takes under :attr:`cost`."""
        return self.units.durations

    @property
    def block_size(self) -> int | None:
        """Piece size of block-splitting policies, ``None`` for whole transfers."""
        return self.units.block_size

    @property
    def split(self) -> npt.NDArray[np.bool_]:
        """Whether each unit is a piece of a cut transfer (and pays ``piece_overhead``)."""
        return self.units.split

    @property
    def pieces(
        self,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(parent, offset, nbytes)`` of every unit, in plan order: what dispatch executes.

        Examples
        --------
        >>> import orchestrator as orc
        >>> plan = orc.schedule(orc.TransferSet([0], [0], [5]), "uar", block_size=2)
        >>> [a.tolist() for a in plan.pieces]
        [[0, 0, 0], [4, 0, 2], [1, 2, 2]]
        """
        o = self.order
        return self.parent[o], self.offset[o], self.nbytes[o]

    @property
    def n_pieces(self) -> int:
        """Number of units that are pieces of cut transfers (0 when nothing is cut).

        Examples
        --------
        >>> import orchestrator as orc
        >>> orc.schedule(orc.TransferSet([0], [0], [5]), "ecf").n_pieces
        0
        """
        return int(self.split.sum())

    @property
    def n_units(self) -> int:
        """Number of units (transfers, or pieces for block-splitting policies)."""
        return int(self.parent.size)

    # ---------------------------------------------------------------- timing
    @cached_property
    def _times(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        ts = self.transfers
        return list_schedule(
            self.order, self.client, self.ionode, self.durations, ts.n_clients, ts.n_ionodes
        )

    @property
    def start(self) -> npt.NDArray[np.float64]:
        """Start time of each unit (indexed by unit id), by list scheduling."""
        return self._times[0]

    @property
    def end(self) -> npt.NDArray[np.float64]:
        """End time of each unit (indexed by unit id)."""
        return self._times[1]

    def under(self, cost: CostModel) -> Plan:
        """The same order with every unit's duration under ``cost`` (another machine, a
        calibrated model): what this plan would take there.

        Examples
        --------
        >>> import orchestrator as orc
        >>> plan = orc.schedule(orc.TransferSet([0, 1], [0, 0], [10, 30]), "ecf")
        >>> plan.under(orc.CostModel(10.0, 10.0)).makespan
        4.0
        """
        u = self.units
        durations = cost.duration(u.nbytes) + np.where(u.split, cost.piece_overhead, 0.0)
        return dataclasses.replace(
            self, units=dataclasses.replace(u, durations=durations), cost=cost
        )

    @cached_property
    def makespan(self) -> float:
        """Time at which the last unit ends."""
        return float(self.end.max())

    @cached_property
    def lower_bound(self) -> float:
        """The open-shop lower bound of the TransferSet (see :func:`lower_bound`)."""
        return lower_bound(self.transfers, self.cost)

    @property
    def ratio(self) -> float:
        """``makespan / lower_bound`` (1.0 is optimal)."""
        return self.makespan / self.lower_bound

    @property
    def scheduling_seconds(self) -> float:
        """Time spent deciding the order.

        Centralized policies: measured kernel wall time. Bidding policies:
        ``rounds * round_cost + messages * message_cost`` of the cost model.
        Decentralized policies decide nothing up front: 0.
        """
        if self.kind == "bidding":
            return self.cost.scheduling_seconds(self.rounds, self.messages)
        if self.kind == "centralized":
            return self.kernel_seconds
        return 0.0

    @property
    def total_seconds(self) -> float:
        """``scheduling_seconds + makespan``."""
        return self.scheduling_seconds + self.makespan

    @property
    def throughput(self) -> float:
        """Bytes per second including scheduling: ``total_bytes / total_seconds``."""
        return self.transfers.total_bytes / self.total_seconds

    def ionode_busy(self) -> npt.NDArray[np.float64]:
        """Seconds each I/O node spends moving data.

        Examples
        --------
        >>> import orchestrator as orc
        >>> ts = orc.TransferSet([0, 1], [0, 0], [3, 4])
        >>> orc.schedule(ts, "ecf", cost=orc.CostModel(1.0, 1.0)).ionode_busy().tolist()
        [7.0]
        """
        busy = np.bincount(self.ionode, weights=self.durations, minlength=self.transfers.n_ionodes)
        return busy.astype(np.float64)

    def idle_fraction(self) -> npt.NDArray[np.float64]:
        """Fraction of the makespan each I/O node is idle.

        Examples
        --------
        >>> import orchestrator as orc
        >>> ts = orc.TransferSet([0, 0], [0, 1], [3, 1])
        >>> orc.schedule(ts, "ecf", cost=orc.CostModel(1.0, 1.0)).idle_fraction().tolist()
        [0.25, 0.75]
        """
        return 1.0 - self.ionode_busy() / self.makespan

    # ------------------------------------------------------------- sequences
    def client_sequence(self, client: int) -> npt.NDArray[np.int64]:
        """Unit ids of ``client`` in the order it executes them.

        Examples
        --------
        >>> import orchestrator as orc
        >>> ts = orc.TransferSet([0, 0, 1], [0, 1, 1], [3, 1, 1])
        >>> orc.schedule(ts, "ecf").client_sequence(0).tolist()
        [1, 0]
        """
        return self.order[self.client[self.order] == client]

    def ionode_sequence(self, ionode: int) -> npt.NDArray[np.int64]:
        """Unit ids served by I/O node ``ionode``, in order.

        Examples
        --------
        >>> import orchestrator as orc
        >>> ts = orc.TransferSet([0, 1, 2], [0, 0, 0], [3, 1, 2])
        >>> orc.schedule(ts, "ecf").ionode_sequence(0).tolist()
        [1, 2, 0]
        """
        return self.order[self.ionode[self.order] == ionode]

    # ------------------------------------------------------------ validation
    def validate(self, rtol: float = 1e-9) -> None:
        """Prove the plan is executable and complete; raise :class:`PlanError` if not.

        Checks, each against the TransferSet and cost model rather than the
        plan's own derived data: the order is a permutation of the units;
        every unit names its transfer's client and I/O node; the units of
        every transfer tile its bytes exactly once from offset 0 (pieces no
        larger than ``block_size``); each unit's duration is the cost model's;
        and in the list schedule of the order no client or I/O node runs two
        units at once.

        Examples
        --------
        >>> import orchestrator as orc
        >>> orc.schedule(orc.TransferSet([0, 1], [0, 0], [5, 6]), "uar", block_size=2).validate()
        """
        n = self.n_units
        ts = self.transfers
        order = np.asarray(self.order)
        if order.dtype.kind not in "iu":
            raise PlanError(f"order must hold integer unit ids, got dtype {order.dtype}")
        if order.size != n or (n and (order.min() < 0 or order.max() >= n)):
            raise PlanError(f"order is not a permutation of {n} units (ids outside 0..{n - 1})")
        seen = np.bincount(order, minlength=n)
        if (seen != 1).any():
            bad = int(np.argmax(seen != 1))
            raise PlanError(
                f"order is not a permutation of {n} units (unit {bad} appears {seen[bad]} times)"
            )
        parent = self.parent
        if parent.size and (parent.min() < 0 or parent.max() >= len(ts)):
            raise PlanError(f"units name transfers outside 0..{len(ts) - 1}")
        for name, col, truth in (
            ("client", self.client, ts.client),
            ("ionode", self.ionode, ts.ionode),
        ):
            wrong = col != truth[parent]
            if wrong.any():
                u = int(np.argmax(wrong))
                raise PlanError(
                    f"unit {u}: {name} {col[u]} but its transfer {parent[u]} has {truth[parent[u]]}"
                )
        size_ok = self.nbytes > 0
        if self.block_size is not None:
            size_ok &= self.nbytes <= self.block_size
        if not size_ok.all():
            u = int(np.argmax(~size_ok))
            raise PlanError(f"unit {u}: {self.nbytes[u]} bytes is not a valid piece size")
        covered = np.zeros(len(ts), dtype=np.int64)
        np.add.at(covered, parent, self.nbytes)
        if not np.array_equal(covered, ts.nbytes):
            i = int(np.argmax(covered != ts.nbytes))
            raise PlanError(f"transfer {i}: pieces cover {covered[i]} of {ts.nbytes[i]} bytes")
        by = np.lexsort((self.offset, parent))
        first = np.ones(n, dtype=bool)
        first[1:] = parent[by][1:] != parent[by][:-1]
        if (self.offset[by][first] != 0).any():
            i = int(parent[by][first][self.offset[by][first] != 0][0])
            raise PlanError(f"transfer {i}: its first piece does not start at offset 0")
        gap = (self.offset[by] + self.nbytes[by])[:-1] != self.offset[by][1:]
        if (~first[1:] & gap).any():
            i = int(parent[by][1:][~first[1:] & gap][0])
            raise PlanError(f"transfer {i}: pieces overlap or leave a gap")
        if self.block_size is None:
            cut = np.bincount(parent, minlength=len(ts))[parent] > 1
            if not np.array_equal(cut, self.split):
                u = int(np.argmax(cut != self.split))
                raise PlanError(
                    f"unit {u}: split flag {bool(self.split[u])} but its transfer "
                    f"{parent[u]} is {'cut' if cut[u] else 'whole'}"
                )
        expected = self.cost.duration(self.nbytes) + np.where(
            self.split, self.cost.piece_overhead, 0.0
        )
        off = ~np.isclose(self.durations, expected, rtol=1e-12, atol=0.0)
        if off.any():
            u = int(np.argmax(off))
            raise PlanError(
                f"unit {u}: duration {self.durations[u]} s, the cost model says {expected[u]} s"
            )
        start, end = self.start, self.end
        # overlaps shorter than a billionth of the makespan are float noise,
        # but never accept one as long as half the shortest unit
        tol = min(rtol * self.makespan, 0.5 * float(self.durations.min()))
        for name, owner in (("client", self.client), ("ionode", self.ionode)):
            by = np.lexsort((start, owner))
            same = owner[by][1:] == owner[by][:-1]
            clash = end[by][:-1] > start[by][1:] + tol
            if (same & clash).any():
                k = int(np.argmax(same & clash))
                u, v = int(by[k]), int(by[k + 1])
                raise PlanError(
                    f"{name} {int(owner[u])} runs units {u} and {v} at once "
                    f"([{start[u]}, {end[u]}) and [{start[v]}, {end[v]}))"
                )

    # --------------------------------------------------------------- output
    def summary(self) -> dict[str, Any]:
        """Headline numbers as a plain dict.

        Examples
        --------
        >>> import orchestrator as orc
        >>> s = orc.schedule(orc.TransferSet([0], [0], [10]), "ecf").summary()
        >>> s["policy"], s["makespan"] == s["lower_bound"], s["ratio"]
        ('ecf', True, 1.0)
        """
        return {
            "policy": self.policy,
            "cost": self.cost.name,
            "transfers": len(self.transfers),
            "units": self.n_units,
            "block_size": self.block_size,
            "pieces": self.n_pieces,
            "makespan": self.makespan,
            "lower_bound": self.lower_bound,
            "ratio": self.ratio,
            "rounds": self.rounds,
            "messages": self.messages,
            "scheduling_seconds": self.scheduling_seconds,
            "throughput": self.throughput,
        }

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write ``transfer,client,ionode,nbytes,start,end`` rows in plan order.

        Plans over pieces add an ``offset`` column (the piece's byte
        offset in its transfer).

        Examples
        --------
        >>> import tempfile, pathlib, orchestrator as orc
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "plan.csv"
        >>> plan = orc.schedule(orc.TransferSet([0], [0], [5]), "ecf", cost=orc.CostModel(1.0, 1.0))
        >>> plan.to_csv(p)
        >>> p.read_text().splitlines()
        ['transfer,client,ionode,nbytes,start,end', '0,0,0,5,0.0,5.0']
        """
        o = self.order
        cols = [self.parent[o], self.client[o], self.ionode[o], self.nbytes[o]]
        header = ["transfer", "client", "ionode", "nbytes", "start", "end"]
        times = [self.start[o].tolist(), self.end[o].tolist()]
        rows: list[Any] = [c.tolist() for c in cols] + [[repr(t) for t in x] for x in times]
        if not self.units.whole:
            header.append("offset")
            rows.append(self.offset[o].tolist())
        write_rows(path, header, zip(*rows, strict=True))

    def __repr__(self) -> str:
        return (
            f"Plan(policy={self.policy!r}, units={self.n_units}, makespan={self.makespan:.6g}, "
            f"ratio={self.ratio:.4f}, rounds={self.rounds})"
        )
