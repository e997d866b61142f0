"""The pure core of a restart read: which stripes each I/O node's aggregator reads for
one application, and which of their rows go to which task (no cluster, no file).

A committed checkpoint's dataset is cut into stripes of ``stripe_bytes``; stripe
``s`` lives on I/O node ``s % n_ionodes`` (:class:`orchestrator.layout.StripeLayout`),
and a stripe may end inside a row. A restart asks, per **task**, for rows of some
datasets, in any order, the same row possibly by several tasks (halo replicas).
The aggregator of node ``K`` reads every stripe on ``K`` that holds a requested
byte — one request in ``K``'s queue — and **shuffles**: each task gets, from each
aggregator, its bytes found there. Bytes travel as **runs** ``[position in the
task's rows, position in the dataset, length]`` clipped to stripes, so a task
asking for a block of rows costs a few runs, not one index per row; a row cut by a
stripe boundary comes in two runs from two aggregators.

Examples
--------
>>> meta = {"u": {"shape": [10], "dtype": "<f8", "stripe_bytes": 32, "n_ionodes": 2,
...               "checksums": {}}}
>>> plan = plan_reads(meta, [{"u": range(0, 6)}, {"u": [9, 2]}], n_nodes=2, aggregators=1)
>>> [a.stripes["u"].tolist() for a in plan.aggregators]
[[0, 2], [1]]
>>> plan.aggregators[0].pieces[1]["u"].tolist()   # task 1: row 9 (bytes 72..80), row 2
[[0, 72, 8], [8, 16, 8]]
>>> plan = plan_reads(meta, [{"u": range(0, 6)}, {"u": [9, 2]}], n_nodes=2, aggregators=2)
>>> [(a.domain, a.node, a.stripes["u"].tolist()) for a in plan.aggregators]
[(0, 0, [0]), (0, 1, [1]), (1, 0, [2])]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InputError
from ..limits import check_memory
from ..specs import dtype_from_json

__all__ = [
    "AggregatorPlan",
    "DatasetMeta",
    "ReadPlan",
    "copied_whole",
    "plan_reads",
    "split_at",
    "to_runs",
]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class DatasetMeta:
    """What a reader needs of one dataset of the manifest."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    stripe_bytes: int
    n_ionodes: int
    checksums: dict[str, str]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (the item size for a 1-D dataset)."""
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the whole dataset."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def stripe_node(self, stripe: IntArray | int, n_nodes: int) -> Any:
        """The I/O worker serving a stripe: the writer's node, folded onto ``n_nodes``."""
        return (stripe % self.n_ionodes) % n_nodes


@dataclass
class AggregatorPlan:
    """One application's aggregator's request on one I/O node: the stripes of its file
    domain there (per dataset,
    ascending) and, per task, the byte runs ``[position, offset, length]`` it sends
    there (position in the task's rows, offset in the dataset)."""

    node: int
    domain: int = 0
    stripes: dict[str, IntArray] = field(default_factory=dict)
    pieces: dict[int, dict[str, IntArray]] = field(default_factory=dict)

    def read_bytes(self, meta: Mapping[str, DatasetMeta]) -> int:
        """Bytes this aggregator reads."""
        total = 0
        for name, st in self.stripes.items():
            m = meta[name]
            ends = np.minimum((st + 1) * m.stripe_bytes, m.nbytes)
            total += int((ends - st * m.stripe_bytes).sum())
        return total

    def sends(self, meta: Mapping[str, DatasetMeta]) -> dict[int, int]:
        """Bytes this aggregator sends to each task."""
        return {t: sum(int(r[:, 2].sum()) for r in per.values()) for t, per in self.pieces.items()}


@dataclass
class ReadPlan:
    """Every I/O node's aggregator for one application, and each task's row counts."""

    meta: dict[str, DatasetMeta]
    aggregators: list[AggregatorPlan]
    #: per task, per dataset: how many rows it asked for (its output's length)
    lengths: list[dict[str, int]]

    @property
    def n_tasks(self) -> int:
        """Tasks of the restart."""
        return len(self.lengths)


def dataset_metas(manifest: Mapping[str, Any]) -> dict[str, DatasetMeta]:
    """The manifest's datasets as :class:`DatasetMeta` (``manifest["datasets"]``).

    Examples
    --------
    >>> m = dataset_metas({"u": {"shape": [4, 2], "dtype": "<f4", "stripe_bytes": 16,
    ...                          "n_ionodes": 2, "checksums": {}}})
    >>> m["u"].row_bytes, m["u"].nbytes
    (8, 32)
    """
    return {
        name: DatasetMeta(
            name,
            tuple(int(x) for x in ds["shape"]),
            np.dtype(dtype_from_json(ds["dtype"])),
            int(ds["stripe_bytes"]),
            int(ds.get("n_ionodes", 1)),
            dict(ds["checksums"]),
        )
        for name, ds in manifest.items()
    }


def to_runs(rows: IntArray) -> IntArray:
    """Rows (in the order wanted) as runs ``[position, first row, length]`` of consecutive
    increasing rows.

    Examples
    --------
    >>> to_runs(np.array([4, 5, 6, 1, 2, 9])).tolist()
    [[0, 4, 3], [3, 1, 2], [5, 9, 1]]
    """
    if rows.size == 0:
        return np.empty((0, 3), dtype=np.int64)
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate(([0], cut))
    lengths = np.diff(np.concatenate((starts, [rows.size])))
    return np.stack([starts, rows[starts], lengths], axis=1).astype(np.int64)


def split_at(runs: IntArray, unit: int) -> IntArray:
    """Runs ``[position, start, length]`` cut where they cross a multiple of ``unit``.

    Examples
    --------
    >>> split_at(np.array([[0, 6, 12]]), 8).tolist()
    [[0, 6, 2], [2, 8, 8], [10, 16, 2]]
    """
    rps = unit
    if runs.size == 0:
        return runs
    first = runs[:, 1] // rps
    last = (runs[:, 1] + runs[:, 2] - 1) // rps
    count = last - first + 1
    if (count == 1).all():
        return runs
    rep = np.repeat(np.arange(runs.shape[0]), count)
    k = np.arange(rep.size) - np.repeat(np.cumsum(count) - count, count)  # piece within run
    stripe = first[rep] + k
    lo = np.maximum(runs[rep, 1], stripe * rps)
    hi = np.minimum(runs[rep, 1] + runs[rep, 2], (stripe + 1) * rps)
    pos = runs[rep, 0] + (lo - runs[rep, 1])
    return np.stack([pos, lo, hi - lo], axis=1)


#: a task copying a stripe in more runs than this leaves its check to the I/O node
WHOLE_RUNS = 16


def copied_whole(
    stripes: IntArray,
    runs: Sequence[IntArray],
    stripe_bytes: int,
    nbytes: int,
    max_runs: int = WHOLE_RUNS,
) -> npt.NDArray[np.bool_]:
    """Per stripe (``stripes``: ascending ids): whether every task copying from it copies
    all of it, each byte once, in at most ``max_runs`` runs — so that each of those
    tasks can check the stripe's checksum on its own copy (``runs``: per task, its
    runs ``[position, offset, length]`` of this dataset, clipped to stripes).

    Examples
    --------
    >>> whole, half = np.array([[0, 0, 8]]), np.array([[0, 8, 4]])
    >>> copied_whole(np.array([0, 1]), [whole, half], 8, 16).tolist()
    [True, False]
    """
    stripes = np.asarray(stripes, dtype=np.int64)
    parts = [np.asarray(r, dtype=np.int64).reshape(-1, 3) for r in runs]
    task = np.concatenate(
        [np.full(len(r), t, dtype=np.int64) for t, r in enumerate(parts)] or [np.empty(0, np.int64)]
    )
    src = np.concatenate([r[:, 1] for r in parts] or [np.empty(0, np.int64)])
    length = np.concatenate([r[:, 2] for r in parts] or [np.empty(0, np.int64)])
    stripe = src // stripe_bytes
    order = np.lexsort((src, stripe, task))  # each task's runs on a stripe in file order
    task, src, length, stripe = task[order], src[order], length[order], stripe[order]
    first = np.ones(task.size, dtype=bool)
    first[1:] = (task[1:] != task[:-1]) | (stripe[1:] != stripe[:-1])
    last = np.ones(task.size, dtype=bool)
    last[:-1] = first[1:]
    end = src + length
    bad = first & (src != stripe * stripe_bytes)  # a gap at the start
    bad |= last & (end != np.minimum((stripe + 1) * stripe_bytes, nbytes))  # ... at the end
    bad[1:] |= ~first[1:] & (src[1:] != end[:-1])  # a gap or an overlap inside
    group = np.cumsum(first) - 1
    count = np.bincount(group) if group.size else np.empty(0, np.int64)
    bad |= count[group] > max_runs
    return ~np.isin(stripes, stripe[bad])


def _rows(task: int, name: str, rows: Any, n_rows: int) -> IntArray | range:
    """The rows a task asks for, checked: row numbers, or a range of step 1."""
    where = f"requests[{task}][{name!r}]"
    if isinstance(rows, slice):
        try:
            rows = range(*rows.indices(n_rows))
        except (TypeError, ValueError) as err:
            raise InputError(f"{where}: a slice of whole numbers, step not 0: {err}") from None
    if isinstance(rows, range):
        # len() of a range is a C integer: bool() and indexing are not (range(0, 2**63))
        if not rows:
            return range(0, 0)
        if not (0 <= min(rows[0], rows[-1]) and max(rows[0], rows[-1]) < n_rows):
            bad = rows[0] if not 0 <= rows[0] < n_rows else rows[-1]
            raise InputError(f"{where} asks for row {bad}; the dataset has rows 0..{n_rows - 1}")
        if rows.step == 1 or len(rows) <= 1:  # one run: no row numbers to make
            return range(rows.start, rows.start + len(rows))
        else:
            out = np.asarray(rows, dtype=np.int64)
    else:
        if isinstance(rows, np.ma.MaskedArray):
            raise InputError(f"{where}: a masked array (which rows are meant?); give plain rows")
        a = np.asarray(rows)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise InputError(f"{where} must be row numbers (1-D whole numbers), got {a.dtype}")
        # a view may hold few bytes for many rows (np.broadcast_to): its row numbers are
        # made here, 8 bytes each
        check_memory(a.size * 8, f"{where}: {a.size:,} row numbers", InputError)
        if a.size and a.dtype.kind == "u" and int(a.max()) >= n_rows:
            raise InputError(
                f"{where} asks for row {int(a.max())}; the dataset has rows 0..{n_rows - 1}"
            )
        out = a.astype(np.int64)
    if out.size and (out.min() < 0 or out.max() >= n_rows):
        bad = int(out[(out < 0) | (out >= n_rows)][0])
        raise InputError(f"{where} asks for row {bad}; the dataset has rows 0..{n_rows - 1}")
    return out


def plan_reads(
    manifest_datasets: Mapping[str, Any],
    requests: Sequence[Mapping[str, Any]],
    n_nodes: int,
    aggregators: int | None = None,
) -> ReadPlan:
    """Each I/O node's aggregator for one application's restart.

    Parameters
    ----------
    manifest_datasets : mapping
        The checkpoint manifest's ``datasets``.
    requests : sequence of mappings
        Per task, ``{dataset: rows}``: rows as row numbers in the order wanted
        (replicas allowed), a ``range`` or a ``slice``.
    n_nodes : int
        I/O workers reading (stripes of a checkpoint written for another count are
        folded onto them).
    aggregators : int, optional
        File domains: the stripes wanted, in order, cut into this many ranges of as
        many stripes each; one request per domain and node holding part of it
        (default 1: one request per node — more domains let the first tasks start
        earlier, but each request is a Dask task, which costs more here than it saves).

    Examples
    --------
    >>> meta = {"u": {"shape": [8, 2], "dtype": "<i4", "stripe_bytes": 16,
    ...               "n_ionodes": 2, "checksums": {}}}
    >>> p = plan_reads(meta, [{"u": slice(0, 8)}], n_nodes=2)
    >>> [a.read_bytes(p.meta) for a in p.aggregators], p.lengths
    ([32, 32], [{'u': 8}])
    """
    if not isinstance(n_nodes, int) or isinstance(n_nodes, bool) or n_nodes < 1:
        raise InputError(f"n_nodes must be a whole number >= 1, got {n_nodes!r}")
    if isinstance(requests, Mapping) or not isinstance(requests, Sequence) or not requests:
        raise InputError(
            "requests must be a non-empty list with one {dataset: rows} mapping per task, got "
            f"{type(requests).__name__}"
        )
    if aggregators is not None and (
        not isinstance(aggregators, int) or isinstance(aggregators, bool) or aggregators < 1
    ):
        raise InputError(f"aggregators must be a whole number >= 1, got {aggregators!r}")
    meta = dataset_metas(manifest_datasets)
    lengths: list[dict[str, int]] = []
    cut: list[tuple[int, str, IntArray, IntArray]] = []  # task, dataset, runs, stripes
    for t, req in enumerate(requests):
        if not isinstance(req, Mapping):
            raise InputError(
                f"requests[{t}] must be a mapping {{dataset: rows}}, got {type(req).__name__}"
            )
        mine: dict[str, int] = {}
        for name, rows in req.items():
            m = meta.get(name) if isinstance(name, str) else None
            if m is None:
                raise InputError(
                    f"requests[{t}] names dataset {name!r}; the checkpoint has "
                    f"{', '.join(sorted(meta)) or 'none'}"
                )
            if not m.shape:
                raise InputError(f"requests[{t}][{name!r}]: a scalar dataset has no rows")
            r = _rows(t, name, rows, m.shape[0])
            if isinstance(r, range):
                mine[name] = len(r)
                runs = np.array([[0, r.start, len(r)]], dtype=np.int64)
            else:
                mine[name] = int(r.size)
                runs = to_runs(r)
            runs = runs * np.array([m.row_bytes, m.row_bytes, m.row_bytes])
            runs = split_at(runs[runs[:, 2] > 0], m.stripe_bytes)
            cut.append((t, name, runs, runs[:, 1] // m.stripe_bytes))
        lengths.append(mine)
    # the file domains: every stripe wanted, dataset by dataset in stripe order, cut into
    # ``aggregators`` ranges of as many stripes each
    names = sorted(meta)
    wanted = {
        name: np.unique(
            np.concatenate([st for _, n, _, st in cut if n == name] or [np.empty(0, np.int64)])
        )
        for name in names
    }
    first = np.cumsum([0] + [wanted[n].size for n in names])
    total = int(first[-1])
    k = min(aggregators or 1, max(1, total))
    where = {n: int(first[i]) for i, n in enumerate(names)}
    aggs: dict[tuple[int, int], AggregatorPlan] = {}
    parts: dict[tuple[int, int], dict[str, list[IntArray]]] = {}
    for t, name, runs, stripe in cut:
        m = meta[name]
        domain = (where[name] + np.searchsorted(wanted[name], stripe)) * k // max(1, total)
        node = m.stripe_node(stripe, n_nodes)
        key = domain * n_nodes + node
        for one in np.unique(key).tolist():
            d, kn = divmod(int(one), n_nodes)
            a = aggs.setdefault((d, kn), AggregatorPlan(kn, domain=d))
            mask = key == one
            a.pieces.setdefault(t, {})[name] = runs[mask]
            parts.setdefault((d, kn), {}).setdefault(name, []).append(stripe[mask])
    for key, a in aggs.items():
        a.stripes = {n: np.unique(np.concatenate(p)) for n, p in parts[key].items()}
    ordered = [aggs[key] for key in sorted(aggs)]  # domain by domain, node by node
    return ReadPlan(meta, ordered, lengths)
