"""A stage written in waves, as its contributions arrive.

:func:`~orchestrator.engine.stage.write_stage` starts writing when every
contribution is in. When they arrive over time (tasks of a workflow finishing
one after another), the stripes they already cover completely can be written
meanwhile. :class:`WaveStage` creates the temporary target at once (the
datasets' shapes must be known), and each :meth:`WaveStage.write` plans and
dispatches the stripes that the contributions given so far cover completely
and no earlier wave wrote; :meth:`WaveStage.commit` writes the rest (rows
nobody gave are filled, if the options allow them) and commits.

A wave writes whole *blocks*: the fewest stripes that hold whole rows (one
stripe when the stripe size is a multiple of the row size; a row may span two
stripes otherwise). A stripe is thus written whole by one wave, and each I/O
node still checksums every stripe it writes from its pieces, as in a single
stage. A wave assigns a replicated row among the holders given so far: a
replica given after its block was written is not written (replicas carry
equal values; ``unique=True`` checks those that meet in one wave). Each wave
ends with its I/O nodes' flush, as a stage does.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from ..contributions import Contribution, ContributionError, DatasetSpec
from ..files import remove_path
from ..layout import StripeLayout
from ..limits import check_disk
from ..plan import Plan
from ..policies import get_policy, schedule
from .backends import get_backend
from .cluster import IOCluster
from .commit import commit
from .dispatch import StageError, dispatch, fill_pieces, stop
from .options import WriteOptions
from .stage import (
    StageResult,
    _check_replaceable,
    _localize,
    _manifest,
    _prepare,
    _standin,
    _storage_errors,
)
from .storage import StorageError, fold_crc32
from .trace import Trace

__all__ = ["WaveStage"]


class WaveStage:
    """Write a stage in waves: each :meth:`write` writes the blocks its contributions
    complete, :meth:`commit` the rest (also on leaving a ``with`` block without an error;
    with one, :meth:`abort`).

    Parameters
    ----------
    target : path
        The checkpoint to create.
    specs : sequence of DatasetSpec
        Every dataset of the stage, with its full shape.
    options : WriteOptions, optional
        As in :func:`~orchestrator.engine.stage.write_stage` (``**changes``
        too).
    cluster : IOCluster
        Where to run.

    Examples
    --------
    >>> with WaveStage("ckpt.h5", [spec], cluster=cl) as st:  # doctest: +SKIP
    ...     st.write({"u": [part0, part1]})   # their complete stripes, now
    ...     st.write({"u": [part2]})
    >>> st.result.path  # doctest: +SKIP
    PosixPath('ckpt.h5')
    """

    def __init__(
        self,
        target: str | os.PathLike[str],
        specs: Sequence[DatasetSpec],
        options: WriteOptions | None = None,
        *,
        cluster: IOCluster,
        **changes: Any,
    ) -> None:
        self.t_start = time.perf_counter()
        self.target = Path(target)
        base = options or WriteOptions()
        self.opts = base.updated(**changes) if changes else base
        self.backend = get_backend(self.opts.format)
        self.specs = {s.name: s for s in specs}
        if not specs or len(self.specs) != len(specs):
            raise ContributionError("specs: give each dataset of the stage once")
        for s in specs:
            if not isinstance(s, DatasetSpec):
                raise ContributionError(f"specs: {s!r} is not a DatasetSpec")
        _check_replaceable(self.target, self.opts.overwrite)
        if not self.target.parent.is_dir():
            raise StorageError(f"directory {self.target.parent} does not exist")
        total = sum(s.nbytes for s in specs)
        check_disk(self.target.parent, total, f"the datasets of {self.target.name}", StorageError)
        self.cl = cluster
        self.cl.refresh()
        self.layouts = {
            n: StripeLayout(self.cl.n_ionodes, self.backend.stripe_size(s, self.opts.stripe_bytes))
            for n, s in self.specs.items()
        }
        # waves write whole blocks: the fewest stripes that hold whole rows (a row may span
        # two stripes; a stripe is written by one wave, so its rows must be)
        self.block_rows, self.block_stripes, self.n_stripes = {}, {}, {}
        for n, lay in self.layouts.items():
            rb = max(self.specs[n].row_bytes, 1)
            block = math.lcm(lay.stripe_bytes, rb)
            self.block_rows[n] = block // rb
            self.block_stripes[n] = block // lay.stripe_bytes
            self.n_stripes[n] = lay.stripes(self.specs[n].nbytes)
        self.given: dict[str, list[Contribution]] = {n: [] for n in self.specs}
        self.remote: dict[tuple[str, int], Any] = {}
        self.covered = {n: np.zeros(s.shape[0], dtype=bool) for n, s in self.specs.items()}
        self.written = {  # per block
            n: np.zeros(-(-max(s.shape[0], 1) // self.block_rows[n]), dtype=bool)
            for n, s in self.specs.items()
        }
        self.sums: dict[str, str] = {}
        self.pieces = dict.fromkeys(self.specs, 0)
        self.waves: list[tuple[Plan, Trace, float]] = []
        self.result: StageResult | None = None
        self.tmp = self.target.parent / f".{self.target.name}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with _storage_errors(f"creating {self.tmp.name}"):
                self.info = self.backend.create(
                    self.tmp, list(self.specs.values()), list(self.layouts.values())
                )
            self.info["token"] = self.tmp.name
            self.info["stripe_bytes"] = {n: lay.stripe_bytes for n, lay in self.layouts.items()}
        except BaseException:
            remove_path(self.tmp)
            raise

    # ------------------------------------------------------------------ waves
    def write(self, datasets: Mapping[str, Sequence[Any]]) -> int:
        """Add contributions (or Dask futures of them) and write the stripes complete now.

        Returns the number of stripes this wave wrote.
        """
        try:
            unknown = sorted(set(datasets) - set(self.specs))
            if unknown:
                raise ContributionError(f"datasets {unknown} are not in this stage's specs")
            local, remote = _localize(
                self.cl,
                {n: (self.specs[n], list(cs)) for n, cs in datasets.items()},
                self.opts.unique,
            )
            for n, (_, cs) in local.items():
                seen = {c.client for c in self.given[n]}
                for c in cs:
                    if c.client in seen:
                        raise ContributionError(f"client {c.client} contributes twice to {n!r}")
                    rows = np.asarray(c.rows)
                    if rows.size and (rows[0] < 0 or rows[-1] >= self.specs[n].shape[0]):
                        raise ContributionError(
                            f"dataset {n!r}: client {c.client} gives rows outside "
                            f"0..{self.specs[n].shape[0] - 1}"
                        )
                    self.covered[n][rows] = True
                self.given[n].extend(cs)
            self.remote.update(remote)
            complete = {n: self._complete(n) & ~self.written[n] for n in self.specs}
            return self._wave(complete, last=False)
        except BaseException:
            self.abort()
            raise

    def commit(self) -> StageResult:
        """Write every stripe not written yet (rows nobody gave filled, if allowed) and commit."""
        try:
            if not any(c.rows.size for cs in self.given.values() for c in cs):
                raise ContributionError(f"{self.target.name}: no contribution was given")
            for n, cov in self.covered.items():
                if not self.opts.allow_missing and not cov.all():
                    first = int(np.flatnonzero(~cov)[0])
                    raise ContributionError(
                        f"dataset {n!r}: {int((~cov).sum())} rows have no contribution "
                        f"(first: row {first}); pass allow_missing=True to fill them"
                    )
            self._wave({n: ~w for n, w in self.written.items()}, last=True)
            manifest = self._manifest()
            with _storage_errors(f"writing the manifest of {self.tmp.name}"):
                self.backend.finish(self.tmp, manifest)
            _check_replaceable(self.target, self.opts.overwrite)
            commit(self.tmp, self.target, self.opts.overwrite)
        except BaseException:
            self.abort()
            raise
        plan, trace, _ = self.waves[-1]
        self.result = StageResult(
            self.target, manifest, plan, trace, time.perf_counter() - self.t_start
        )
        return self.result

    def abort(self) -> None:
        """Stop the writers and remove the temporary output (nothing is committed)."""
        remove_path(self.tmp)
        stop(self.cl, self.tmp.name, timeout=5.0)
        remove_path(self.tmp)  # again: a writer that was still busy may have recreated part

    def __enter__(self) -> WaveStage:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()

    # ------------------------------------------------------------------ inside
    def _complete(self, name: str) -> np.ndarray:
        """Per block of ``name``: every row in it given."""
        cov = self.covered[name]
        k = self.block_rows[name]
        padded = np.ones(len(self.written[name]) * k, dtype=bool)
        padded[: cov.size] = cov
        return np.asarray(padded.reshape(-1, k).all(axis=1))

    def _wave(self, blocks: dict[str, np.ndarray], last: bool) -> int:
        """Plan and dispatch the rows of ``blocks`` (per dataset, a mask of blocks); return
        the number of stripes written."""
        stripes = {
            n: np.repeat(m, self.block_stripes[n])[: self.n_stripes[n]] for n, m in blocks.items()
        }
        n_new = int(sum(int(m.sum()) for m in stripes.values()))
        if not n_new:
            return 0
        wave: dict[str, tuple[DatasetSpec, list[Contribution]]] = {}
        for n, mask in blocks.items():
            if not mask.any():
                continue
            rows_in = np.repeat(mask, self.block_rows[n])[: self.specs[n].shape[0]]
            cons = []
            for c in self.given[n]:
                keep = rows_in[c.rows]
                if keep.any():
                    cons.append(_restricted(c, keep, remote=(n, c.client) in self.remote))
            if not cons:  # (the last wave: stripes of fill values only)
                spec = self.specs[n]
                cons = [_standin(0, np.zeros(0, np.int64), (0, *spec.shape[1:]), spec.dtype.str)]
            wave[n] = (self.specs[n], cons)
        opts = self.opts.updated(allow_missing=True)  # rows of other stripes are not this wave's
        staged, transfers, _ = _prepare(wave, self.cl.n_ionodes, opts, self.backend)
        staged = dataclasses.replace(staged, only=[stripes[s.name] for s in staged.specs])
        fills: list[tuple[int, int, int, int]] = []
        if last:
            for d, spec in enumerate(staged.specs):
                missing = np.flatnonzero(~self.covered[spec.name])
                if missing.size:
                    self.backend.fill(self.info, spec, missing)
                    fills += fill_pieces(d, spec, staged.parts[d].layout.stripe_bytes, missing)
        if not len(transfers):  # the last stripes hold only rows nobody gave
            self._fill_only(staged, fills)
            for n, mask in blocks.items():
                self.written[n] |= mask
            return n_new
        policy_options = dict(opts.policy_options)
        if get_policy(opts.policy).default_block_size is not None:
            block = max(min(p.layout.stripe_bytes for p in staged.parts), 1)
            policy_options.setdefault("block_size", block)
        plan = schedule(transfers, opts.policy, cost=opts.cost, seed=opts.seed, **policy_options)
        began = time.time()
        trace, sums = dispatch(
            self.cl,
            self.backend.name,
            self.info,
            staged,
            plan,
            {n: (spec, list(self.given[n])) for n, (spec, _) in wave.items()},
            {k: f for k, f in self.remote.items() if k[0] in wave},
            aggregate=opts.strategy == "two-phase",
            fills=fills,
            window=opts.window,
            direct=opts.direct,
        )
        self.sums.update(sums)
        for spec, part in zip(staged.specs, staged.parts, strict=True):
            self.pieces[spec.name] += part.n_pieces
        for n, mask in blocks.items():
            self.written[n] |= mask
        self.waves.append((plan, trace, began))
        self._staged = staged
        return n_new

    def _fill_only(self, staged: Any, fills: list[tuple[int, int, int, int]]) -> None:
        """Checksums of stripes of fill values only: the fold of their fill pieces."""
        for d, spec in enumerate(staged.specs):
            sb = staged.parts[d].layout.stripe_bytes
            for k in np.flatnonzero(staged.only[d]):
                off = int(k) * sb
                n = min(sb, spec.nbytes - off)
                mine = sorted(p for p in fills if p[0] == d and off <= p[1] < off + n)
                if sum(p[2] for p in mine) != n:
                    raise StageError(f"{spec.name}: stripe at byte {off} has rows nobody wrote")
                value = fold_crc32([p[3] for p in mine], [p[2] for p in mine])
                self.sums[f"{spec.name}:{off}"] = f"{value:08x}"

    def _manifest(self) -> dict[str, Any]:
        plan, trace, _ = self.waves[-1]
        m = _manifest(
            self.backend.name,
            self._staged,
            plan,
            trace,
            self.sums,
            self.opts.policy,
            self.opts.strategy,
        )
        for n, spec in self.specs.items():
            if n not in m["datasets"]:  # not in the last wave
                m["datasets"][n] = {
                    "shape": list(spec.shape),
                    "dtype": spec.dtype.str,
                    "stripe_bytes": self.layouts[n].stripe_bytes,
                    "n_ionodes": self.layouts[n].n_ionodes,
                }
            m["datasets"][n]["pieces"] = self.pieces[n]
            m["datasets"][n]["checksums"] = {
                k.rsplit(":", 1)[1]: v for k, v in self.sums.items() if k.rsplit(":", 1)[0] == n
            }
        plans = [p for p, _, _ in self.waves]
        m["plan"] = {
            "transfers": sum(len(p.transfers) for p in plans),
            "units": sum(p.n_units for p in plans),
            "makespan": sum(p.makespan for p in plans),
            "lower_bound": sum(p.lower_bound for p in plans),
            "rounds": sum(p.rounds for p in plans),
            "messages": sum(p.messages for p in plans),
            "waves": len(plans),
        }
        first = min(b for _, _, b in self.waves)
        m["realized_makespan"] = max(b + t.makespan for _, t, b in self.waves) - first
        return m


def _restricted(c: Contribution, keep: np.ndarray, remote: bool) -> Contribution:
    """Contribution ``c`` with only its rows where ``keep`` (a stand-in for one held by a
    worker; the values themselves for one in this process, so that they are checked)."""
    if not remote:
        return Contribution(c.client, np.asarray(c.rows)[keep], np.asarray(c.values)[keep])
    shape = (int(keep.sum()), *np.shape(c.values)[1:])
    return _standin(c.client, np.asarray(c.rows)[keep], shape, np.asarray(c.values).dtype.str)
