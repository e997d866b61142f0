"""What a source sends or writes: the byte ranges of its contributions, and their description.

A stage's process plans from the rows, shapes and dtypes of contributions
that stay on the workers (:func:`describe_contributions`, :func:`describe_held`);
an I/O node asks a source for the ranges of a batch with one :func:`cut` task
(:func:`~orchestrator.engine.sources.submit_cut`), which returns their bytes in one
Dask message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..contributions import Contribution, ContributionError, cast_exactly

__all__ = [
    "compact_rows",
    "cut",
    "describe_contributions",
    "describe_held",
    "expand_rows",
]

#: ranges whose mean size is below this are packed into one buffer by :func:`cut`
PACK_BELOW = 256 << 10


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
    [(1, [4, 5], (2, 3), dtype('float64'))]
    """
    for c in cons:
        if not isinstance(c, Contribution):  # a future of something else: said, not a raw error
            raise ContributionError(
                f"a Dask future given as a contribution holds a {type(c).__name__}, not a "
                "Contribution"
            )
    return [(c.client, compact_rows(c.rows), tuple(c.values.shape), c.values.dtype) for c in cons]


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

    # in memory only: a spilled one would be read back from disk here, on the worker's
    # event loop (Client.run), pushing others out; the task path takes those
    data = getattr(dask_worker.data, "fast", dask_worker.data)
    out = {}
    for k in keys:
        value = data.get(k)
        if isinstance(value, Contribution):
            out[k] = describe_contributions(value)[0]
    return out


def _parts(
    contributions: Sequence[Any],
    which: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    row_bytes: Sequence[int],
    dtypes: Sequence[Any],
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
    dtypes: Sequence[Any],
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


def _split_cut(got: Any, nbytes: Sequence[int]) -> list[np.ndarray]:
    """The ranges of a :func:`cut`'s result (one array, a list of views, or one packed buffer)."""
    if isinstance(got, list):
        return [np.asarray(g).reshape(-1).view(np.uint8) for g in got]
    flat = np.asarray(got).reshape(-1).view(np.uint8)
    ends = np.cumsum(np.asarray(nbytes, dtype=np.int64))
    return [flat[e - n : e] for e, n in zip(ends.tolist(), list(nbytes), strict=True)]
