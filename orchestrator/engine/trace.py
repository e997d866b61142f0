"""What dispatch really did: when each unit was written, by whom, and when each I/O node flushed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Trace"]


_Spans = tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]


@dataclass(frozen=True, eq=False)
class Trace:
    """One row per executed unit, in the order each I/O node wrote them (seconds from start).

    ``start``/``end`` span the writes of the unit's bytes; ``worker`` is who
    wrote them (the I/O worker, or with direct writes the worker holding
    them); ``flush_start`` /
    ``flush_end`` (one per I/O node) the final flush (fsync) that makes
    them durable; ``peak_held`` (one per I/O node) the most bytes it
    held at once (batches, and pieces waiting for their stripes), which its
    window bounds. Times are wall-clock
    seconds since the first write began.
    """

    unit: npt.NDArray[np.int64]
    ionode: npt.NDArray[np.int64]
    start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]
    nbytes: npt.NDArray[np.int64]
    worker: list[str]
    flush_start: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    flush_end: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    #: per I/O node, the most bytes it held at once: batches fetching, fetched or being
    #: written, and pieces its writer keeps for stripes not yet complete (the window bounds it)
    peak_held: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    #: per I/O node, when its writer loop began (before its first fetch): on a network
    #: slower than memory the first batch's transfer is part of the makespan (testbed)
    began: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    #: per unit, the first and the last batch of its I/O node holding its bytes (batches are
    #: written one after another; with direct writes a batch's units may run side by side)
    batch_first: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    batch_last: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    #: the writes themselves, one row per distinct span (a unit whose bytes lie in several
    #: batches, or in runs written at different times, has several): what a realized
    #: chart draws. A unit's row above spans all of them, idle time between included
    spans: _Spans = field(
        default_factory=lambda: (
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0),
            np.zeros(0),
        )
    )

    def writes(self) -> _Spans:
        """``(unit, ionode, start, end)`` of every write (falls back to the unit rows).

        Examples
        --------
        >>> t = Trace(np.array([0]), np.array([0]), np.array([0.0]), np.array([1.0]),
        ...           np.array([8]), ["w"])
        >>> [a.tolist() for a in t.writes()]
        [[0], [0], [0.0], [1.0]]
        """
        if self.spans[0].size:
            return self.spans
        return self.unit, self.ionode, self.start, self.end

    @property
    def makespan(self) -> float:
        """Seconds from the first I/O node's start (its first fetch; the first write where
        that is not recorded) to the last byte durable (the end of the last flush).

        Examples
        --------
        >>> t = Trace(np.array([0]), np.array([0]), np.array([0.0]), np.array([1.0]),
        ...           np.array([8]), ["w"], np.array([1.0]), np.array([1.5]))
        >>> t.makespan
        1.5
        """
        if not self.end.size:
            return 0.0
        last = max(
            float(self.end.max()), float(self.flush_end.max()) if self.flush_end.size else 0.0
        )
        first = float(self.start.min())
        if self.began.size:
            first = min(first, float(self.began.min()))
        return last - first

    def ionode_sequence(self, ionode: int) -> npt.NDArray[np.int64]:
        """Units I/O node ``ionode`` wrote, in the order it started them."""
        mine = np.flatnonzero(self.ionode == ionode)
        return self.unit[mine[np.argsort(self.start[mine], kind="stable")]]

    @classmethod
    def from_results(cls, results: Sequence[dict[str, Any]], n_units: int) -> Trace:
        """Merge the writer loops' per-range rows into one row per unit."""
        rows, writes = [], []
        for r in results:
            if not r["unit"].size:
                continue
            u = r["unit"]
            # ranges of one unit are consecutive in write order (a unit is never interleaved)
            head = np.concatenate(([True], u[1:] != u[:-1]))
            idx = np.flatnonzero(head)
            # a direct write's ranges are written by their sources, side by side
            by = r.get("by", np.full(u.size, -1))[idx]
            names = [r["worker"] if b < 0 else r["sources"][b] for b in by.tolist()]
            batch = r.get("batch", np.zeros(u.size, np.int64))
            lo, hi, add = np.minimum.reduceat, np.maximum.reduceat, np.add.reduceat
            # a write: consecutive ranges of one unit with the same span (one run's)
            st, en = r["start"], r["end"]
            new = np.concatenate(
                ([True], (u[1:] != u[:-1]) | (st[1:] != st[:-1]) | (en[1:] != en[:-1]))
            )
            w = np.flatnonzero(new)
            writes.append((u[w], np.full(w.size, r["ionode"]), st[w], en[w]))
            rows.append(
                (
                    u[idx],
                    np.full(idx.size, r["ionode"]),
                    lo(r["start"], idx),
                    hi(r["end"], idx),
                    add(r["nbytes"], idx),
                    names,
                    lo(batch, idx),
                    hi(batch, idx),
                )
            )

        flush = np.array([r["flush"] for r in results]) if results else np.zeros((0, 2))
        peak = np.array([r.get("peak_held", 0) for r in results], dtype=np.int64)
        began = np.array([r["began"] for r in results if "began" in r], dtype=np.float64)
        if not rows:
            return cls(
                np.zeros(0, np.int64),
                np.zeros(0, np.int64),
                np.zeros(0),
                np.zeros(0),
                np.zeros(0, np.int64),
                [],
                np.zeros(0),
                np.zeros(0),
                peak,
            )
        t0 = min(float(r[2].min()) for r in rows)
        return cls(
            unit=np.concatenate([r[0] for r in rows]).astype(np.int64),
            ionode=np.concatenate([r[1] for r in rows]).astype(np.int64),
            start=np.concatenate([r[2] for r in rows]) - t0,
            end=np.concatenate([r[3] for r in rows]) - t0,
            nbytes=np.concatenate([r[4] for r in rows]).astype(np.int64),
            worker=[w for r in rows for w in r[5]],
            flush_start=flush[:, 0] - t0,
            flush_end=flush[:, 1] - t0,
            peak_held=peak,
            began=began - t0,
            batch_first=np.concatenate([r[6] for r in rows]).astype(np.int64),
            batch_last=np.concatenate([r[7] for r in rows]).astype(np.int64),
            spans=(
                np.concatenate([w[0] for w in writes]).astype(np.int64),
                np.concatenate([w[1] for w in writes]).astype(np.int64),
                np.concatenate([w[2] for w in writes]) - t0,
                np.concatenate([w[3] for w in writes]) - t0,
            ),
        )
