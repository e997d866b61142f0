"""One write stage end to end: contributions → assignment → layout → plan → dispatch → commit.

The output is complete and verified, or absent: everything is written under a
temporary name beside the target, each I/O node checksums its stripes from
the bytes it writes, the manifest goes into the target, and one rename
commits it (:mod:`orchestrator.engine.commit`). Dispatch itself is the
engine's (:mod:`orchestrator.engine`).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import defaults
from ..assignment import assign_holdings
from ..contributions import Contribution, ContributionError, DatasetSpec, gather
from ..errors import InputError, OrchestratorError
from ..files import check_path, remove_path
from ..layout import StripeLayout, derive_transfers
from ..limits import check_disk
from ..plan import Plan
from ..policies import get_policy, schedule
from ..specs import check_stage_dims, check_values, dtype_json, parent_groups
from ..transfers import TransferSet
from ..typedjson import encode
from .backends import MANIFEST_VERSION, get_backend, is_checkpoint
from .cluster import IOCluster, ionode_rule, local_cluster
from .commit import commit
from .cuts import describe_contributions, describe_held, expand_rows
from .dispatch import Staged, StageError, dispatch, fill_pieces, stop
from .options import WriteOptions
from .storage import StorageError
from .trace import Trace
from .verify import open_datasets, verify

__all__ = [
    "Described",
    "StageError",
    "StageResult",
    "Trace",
    "WriteOptions",
    "describe",
    "open_datasets",
    "verify",
    "write_stage",
]

log = logging.getLogger("orchestrator.engine.stage")


@dataclass(frozen=True, eq=False)
class StageResult:
    """The committed target, its manifest, the plan and the trace of its execution."""

    path: Path
    manifest: dict[str, Any]
    #: None for a stage with no rows to write (groups, small and empty datasets only)
    plan: Plan | None
    trace: Trace
    seconds: float
    #: seconds spent in each phase: refresh (the cluster's workers), describe (rows of
    #: contributions held by workers), prepare (contributions, assignment, layout), plan,
    #: create (the empty target), dispatch (writes, fsync, checksums), commit
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        """Bytes written per second of the whole stage (plan, dispatch, checksums, commit)."""
        if self.plan is None:
            return 0.0
        return float(self.plan.transfers.total_bytes) / self.seconds


def _standin(client: int, rows: np.ndarray, shape: tuple[int, ...], dtype: str) -> Contribution:
    """A Contribution with the real rows and a zero-byte view standing in for the values."""
    c = Contribution.__new__(Contribution)
    values = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=dtype), shape, (0,) * len(shape))
    object.__setattr__(c, "client", client)
    object.__setattr__(c, "rows", rows)
    object.__setattr__(c, "values", values)
    return c


def is_future(x: Any) -> bool:
    """Whether ``x`` is a Dask future (checked by shape: no import of ``distributed``).

    Examples
    --------
    >>> is_future(3)
    False
    """
    return type(x).__name__ == "Future" and hasattr(x, "key")


@dataclass(frozen=True, eq=False)
class Described:
    """A contribution held by a worker (its Dask future) with what planning needs of it.

    :func:`describe` makes these in one round of small tasks; a caller that
    already needed the rows (the decorator infers the dataset's shape from
    them) passes them on to :func:`write_stage`, which then does not ask again.
    """

    future: Any
    client: int
    rows: np.ndarray
    shape: tuple[int, ...]
    dtype: str


def describe(cl: IOCluster, futures: Sequence[Any], held: bool = False) -> list[Described]:
    """Ask the workers holding ``futures`` (Contributions) for their rows, shapes and dtypes.

    The workers holding them answer directly (:func:`describe_held`), all at
    once; what they cannot answer for is asked with one task per worker. The
    values stay where they are, and a stage of many tasks costs a few round
    trips, not one per task. ``held``: the futures were made from keys a step
    held in memory (:mod:`orchestrator.plugins.dask`), so a key the scheduler
    no longer knows was lost, not just submitted.

    Examples
    --------
    >>> [d.client for d in describe(cl, futures)]  # doctest: +SKIP
    [0, 1, 2, 3]
    """
    futures = list(futures)
    # (a future the scheduler forgot; one whose result is "lost" Dask computes again)
    _check_not_lost([f.key for f in futures if f.status == "cancelled"])
    try:
        who = cl.client.who_has(futures)  # one round trip for all
    except CancelledError:  # (Dask's FuturesCancelledError: forgotten since)
        _check_not_lost([f.key for f in futures if f.cancelled()] or ["?"])
        raise
    if any(not who.get(f.key) for f in futures):
        # still being computed (a workflow writes what it just submitted): wait until each
        # is where its task put it. One task over contributions not computed yet would
        # pull them all to the one worker it runs on, and Dask's memory manager then drops
        # the other copies: the stage's every byte on one process (measured, 1 GiB on 2
        # compute workers: one wrote all, the other idled)
        _wait_computed(cl, [f for f in futures if not who.get(f.key)], held)
        who = cl.client.who_has(futures)
    got: list[Any] = [None] * len(futures)
    # first straight from the workers that hold them (no task: one message each way)
    holding = {a for f in futures for a in who.get(f.key) or ()}
    if holding:
        seen = cl.client.run(
            describe_held, [f.key for f in futures], workers=sorted(holding), on_error="ignore"
        )
        for i, f in enumerate(futures):
            for a in sorted(who.get(f.key) or ()):
                if f.key in seen.get(a, {}):
                    got[i] = seen[a][f.key]
                    break
    by_worker: dict[str, list[int]] = {}
    for i, f in enumerate(futures):
        if got[i] is not None:
            continue
        holders = sorted(who.get(f.key) or [""])
        by_worker.setdefault(holders[0], []).append(i)
    # a holder not known yet (a scatter still under way): any worker, Dask fetches it
    where = {w: {"workers": [w], "allow_other_workers": True} if w else {} for w in by_worker}
    tasks = [
        cl.client.submit(describe_contributions, *(futures[i] for i in idx), pure=False, **where[w])
        for w, idx in by_worker.items()
    ]
    for idx, described in zip(by_worker.values(), cl.client.gather(tasks), strict=True):
        for i, d in zip(idx, described, strict=True):
            got[i] = d
    return [
        Described(f, c, expand_rows(rows), shape, dtype)
        for f, (c, rows, shape, dtype) in zip(futures, got, strict=True)
    ]


#: seconds a contribution may stay unknown to the scheduler (or known as data that is
#: nowhere) before the stage counts it lost: a task just submitted is unknown for a moment
LOST_AFTER = 2.0


def _suspects(cl: IOCluster, keys: list[Any], unknown: bool) -> list[Any]:
    """Those of ``keys`` that are nowhere and that nothing will compute: data (no task)
    in no worker's memory, and, with ``unknown``, keys the scheduler does not know (a
    scattered contribution whose worker died is forgotten; a task just submitted is not
    known yet). A task's result lost with its worker is computed again by Dask, so it is
    only late."""

    # defined here so that it travels by value: the scheduler need not import this package
    def nowhere(dask_scheduler: Any = None) -> list[Any]:
        out = []
        for key in keys:
            ts = dask_scheduler.tasks.get(key)
            if ts is None:
                if unknown:
                    out.append(key)
            elif ts.run_spec is None and ts.state != "memory":
                out.append(key)
        return out

    return list(cl.client.run_on_scheduler(nowhere))


def _wait_computed(
    cl: IOCluster, futures: list[Any], held: bool = False, poll: float = 0.5
) -> None:
    """Wait until ``futures`` are computed; a contribution lost on the way fails the stage
    (waiting for it would never end): one that stays a suspect (:func:`_suspects`) for
    :data:`LOST_AFTER` seconds, or that Dask says is lost or cancelled."""
    from distributed import wait

    since: dict[Any, float] = {}
    while futures:
        _check_not_lost([f.key for f in futures if f.status == "cancelled"])
        now = time.monotonic()
        suspects = set(_suspects(cl, [f.key for f in futures], held))
        since = {k: since.get(k, now) for k in suspects}
        _check_not_lost([k for k, t in since.items() if now - t >= LOST_AFTER])
        try:
            wait(futures, timeout=poll)
        except TimeoutError as err:
            err.__traceback__ = None  # it would keep the callers' frames in a cycle
            futures = [f for f in futures if not f.done()]
        except CancelledError:  # (Dask's FuturesCancelledError)
            _check_not_lost([f.key for f in futures if f.cancelled()] or ["?"])
            raise
        else:
            return


def _check_not_lost(lost: list[Any]) -> None:
    if lost:
        raise StageError(
            f"{len(lost)} contribution(s) were lost before the stage could read them "
            f"(their worker died, or they were cancelled), e.g. {lost[0]!r}"
        )


def _localize(
    cl: IOCluster,
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Any]]],
    unique: bool,
) -> tuple[dict[str, tuple[DatasetSpec, list[Contribution]]], dict[tuple[str, int], Any]]:
    """Replace contributions that live on workers (Dask futures) by stand-ins with their rows.

    Their values never come to this process; only rows, shapes and dtypes do
    (asked for here, or already in a :class:`Described`).
    """
    local: dict[str, tuple[DatasetSpec, list[Contribution]]] = {}
    remote: dict[tuple[str, int], Any] = {}
    for name, (spec, contribs) in datasets.items():
        futures = [c for c in contribs if is_future(c)]
        known = [c for c in contribs if isinstance(c, Described)]
        if (futures or known) and unique:
            raise ContributionError(
                f"dataset {name!r}: unique=True compares replica values, which needs the "
                "contributions in this process; pass them as Contribution objects"
            )
        stand = []
        for d in known + (describe(cl, futures) if futures else []):
            stand.append(_standin(d.client, d.rows, d.shape, d.dtype))
            remote[(name, d.client)] = d.future
        plain = [c for c in contribs if not is_future(c) and not isinstance(c, Described)]
        local[name] = (spec, plain + stand)
    return local, remote


# ------------------------------------------------------------------ parent side
def _prepare(
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Contribution]]],
    n_ionodes: int,
    opts: WriteOptions,
    backend: Any,
) -> tuple[Staged, TransferSet, dict[str, np.ndarray]]:
    assignment = opts.assignment
    specs, parts, missing = [], [], {}
    n_clients = 1 + max(c.client for _, cs in datasets.values() for c in cs)
    for name, (spec, contributions) in datasets.items():
        if spec.name != name:
            raise ContributionError(
                f"dataset key {name!r} differs from its spec name {spec.name!r}"
            )
        holdings = gather(spec, contributions, unique=opts.unique, allow_missing=opts.allow_missing)
        method = assignment if isinstance(assignment, str) else assignment[name]
        writer = assign_holdings(holdings, method)
        layout = StripeLayout(n_ionodes, backend.stripe_size(spec, opts.stripe_bytes))
        specs.append(spec)
        parts.append(derive_transfers(spec, writer, layout, opts.strategy, n_clients=n_clients))
        missing[name] = holdings.missing
    sizes = [len(p.transfers) for p in parts]
    first = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(int).tolist()
    cat = TransferSet(
        np.concatenate([p.transfers.client for p in parts]),
        np.concatenate([p.transfers.ionode for p in parts]),
        np.concatenate([p.transfers.nbytes for p in parts]),
        n_clients=n_clients,
        n_ionodes=n_ionodes,
    )
    return Staged(specs, parts, first), cat, missing


def _check_datasets(datasets: Any, opts: WriteOptions) -> None:
    """The shape of ``write_stage``'s ``datasets`` argument, or an error saying what is off."""
    if not isinstance(datasets, Mapping):
        raise ContributionError(
            "datasets must map names to (DatasetSpec, [Contribution, ...]); "
            f"got a {type(datasets).__name__}"
        )
    if not datasets and not (opts.values or opts.groups or opts.attrs):
        raise ContributionError("empty stage: datasets holds no dataset to write")
    for name, pair in datasets.items():
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise ContributionError(
                f"dataset {name!r}: expected a pair (DatasetSpec, [Contribution, ...]), "
                f"got {type(pair).__name__}"
            )
        spec, contribs = pair
        if not isinstance(spec, DatasetSpec):
            raise ContributionError(
                f"dataset {name!r}: the spec is a {type(spec).__name__}, not a DatasetSpec"
            )
        if isinstance(contribs, str | bytes) or not isinstance(contribs, Sequence):
            raise ContributionError(
                f"dataset {name!r}: contributions must be a list, got {type(contribs).__name__}"
            )
        for i, c in enumerate(contribs):
            if not (isinstance(c, Contribution | Described) or is_future(c)):
                raise ContributionError(
                    f"dataset {name!r}: item {i} is a {type(c).__name__}, not a Contribution "
                    "(make one: Contribution(client, rows, values))"
                )
    wrote = any(pair[1] for pair in datasets.values())
    rows = any(pair[0].n_rows for pair in datasets.values())
    if rows and not wrote and not opts.allow_missing:
        # a dataset nobody wrote is filled (allow_missing); a stage nobody wrote is a mistake
        raise ContributionError(f"the stage has no contributions for {sorted(datasets)}")


def _write_tree_only(
    target: Path, tree: dict[str, Any], opts: WriteOptions, backend: Any, t_start: float
) -> StageResult:
    """A stage with no rows to write: created, given its tree, committed by this process."""
    _check_replaceable(target, opts.overwrite)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        with _storage_errors(f"creating {tmp.name}"):
            backend.create(tmp, [], [])
            backend.write_tree(tmp, tree)
        manifest: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "format": backend.name,
            "datasets": {},
            "policy": opts.policy,
            "strategy": opts.strategy,
            "checksum": "crc32",
        }
        manifest.update(_tree_manifest(tree))
        with _storage_errors(f"writing the manifest of {tmp.name}"):
            backend.finish(tmp, manifest)
        _check_replaceable(target, opts.overwrite)
        commit(tmp, target, opts.overwrite)
    except BaseException:
        remove_path(tmp)
        backend.discard(tmp)
        raise
    seconds = time.perf_counter() - t_start
    none = np.zeros(0, np.int64)
    trace = Trace(none, none, np.zeros(0), np.zeros(0), none, [])
    return StageResult(target, manifest, None, trace, seconds, {})


def _tree_manifest(tree: dict[str, Any]) -> dict[str, Any]:
    """What the manifest lists of the stage's tree: attributes, groups, small values and
    datasets created without rows."""
    out = {key: tree[key] for key in ("attrs", "groups", "values") if tree[key]}
    if tree["empty"]:
        out["empty"] = {
            s.name: {"shape": list(s.shape), "dtype": dtype_json(s.dtype), "dims": list(s.dims)}
            for s in tree["empty"]
        }
    return out


def _tree(specs: Sequence[DatasetSpec], opts: WriteOptions) -> dict[str, Any]:
    """The stage's groups, small datasets and attributes as stored (and in the manifest).

    Groups are those asked for, those holding a dataset and those given
    attributes; an attribute's place must be the root, a dataset or one of
    them (a misspelt dataset name is an error, not a new group).
    """
    values = check_values(opts.values) if opts.values else {}
    names = {s.name for s in specs}
    for name in values:
        if name in names:
            raise ContributionError(f"values: {name!r} is also a dataset of rows in this stage")
    groups = set(opts.groups)
    for g in opts.groups:  # a group inside a dataset
        for above in [*parent_groups(g), g]:
            if above in names or above in values:
                raise ContributionError(f"groups: {g!r} lies inside dataset {above!r}")
    for name in [*names, *values]:
        groups.update(parent_groups(name))
    for name in [*names, *values]:
        if name in groups:
            raise ContributionError(f"{name!r} is both a dataset and a group of this stage")
    attrs: dict[str, Any] = {}
    for where, given in (opts.attrs or {}).items():
        key = where.strip("/")
        if key and key not in names and key not in values and key not in groups:
            raise ContributionError(
                f"attrs: {where!r} is not a dataset or group of this stage (datasets "
                f"{sorted(names)}, groups {sorted(groups)}; more groups with groups=[...])"
            )
        attrs[key] = {str(k): encode(v) for k, v in given.items()}
    return {"groups": sorted(groups), "values": values, "attrs": attrs}


def _check_replaceable(target: Path, overwrite: bool) -> None:
    """An existing target is an error, unless ``overwrite`` and it is a checkpoint."""
    if not os.path.lexists(target):
        return
    if not overwrite:
        raise StorageError(f"{target} exists; pass overwrite=True to replace it")
    if not is_checkpoint(target):
        raise StorageError(
            f"{target} exists and is not a checkpoint (no format recognises it); "
            "overwrite=True replaces checkpoints only: move or remove it yourself"
        )


def _check_target(target: Any) -> Path:
    """The target as a path, or a StorageError naming what no file system takes."""
    path = check_path(target, "target", StorageError)  # a NUL left a stray '.a' (probe)
    # the temporary output is named .<name>.tmp-<12 hex>: 18 bytes more, within 255
    if len(os.fsencode(path.name)) > 255 - 18:
        raise StorageError(f"target name {path.name[:40]!r}... is longer than 237 bytes")
    return path


def write_stage(
    target: str | os.PathLike[str],
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Contribution | Described | Any]]],
    options: WriteOptions | None = None,
    *,
    cluster: IOCluster | None = None,
    **changes: Any,
) -> StageResult:
    """Write contributed datasets to ``target`` through the I/O workers, in plan order.

    Parameters
    ----------
    target : path
        The checkpoint to create (an HDF5 file or a Zarr directory).
    datasets : mapping
        ``name -> (DatasetSpec, [Contribution, ...])``; an entry may also be a
        Dask future of a Contribution living on a worker (its values are then
        never sent to this process), or a :class:`Described` one.
    options : WriteOptions, optional
        Format, policy, layout, replicas, overwrite, window, … (defaults if
        not given).
    cluster : IOCluster, optional
        Where to run; default: an embedded local cluster with
        ``options.n_ionodes`` I/O workers, started and stopped here.
    **changes
        Fields of :class:`~orchestrator.engine.options.WriteOptions` to
        change (``format="zarr"``, ``policy="ecf"``, ``overwrite=True``, …);
        any other name is an option of the policy (``block_size=…``).

    Returns
    -------
    StageResult

    Raises
    ------
    StageError
        Dispatch failed (e.g. an I/O worker died); the temporary output is gone.

    Notes
    -----
    Without ``cluster`` an embedded cluster of worker processes is started
    (and stopped) here; scripts that do this need the usual
    ``if __name__ == "__main__":`` guard of multiprocessing. Pass an
    :class:`~orchestrator.engine.cluster.IOCluster` to reuse one across stages.

    Examples
    --------
    >>> import numpy as np, tempfile, pathlib
    >>> from orchestrator.contributions import Contribution, DatasetSpec
    >>> spec = DatasetSpec("u", (8,), "float64")
    >>> parts = [Contribution(0, [0, 1, 2, 3, 4], np.arange(5.0)),
    ...          Contribution(1, [4, 5, 6, 7], np.arange(4.0, 8.0))]
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "ckpt.h5"
    >>> opts = WriteOptions(n_ionodes=2, stripe_bytes=16)
    >>> res = write_stage(out, {"u": (spec, parts)}, opts)  # doctest: +SKIP
    >>> verify(out)  # doctest: +SKIP
    []
    """
    t_start = time.perf_counter()
    target = _check_target(target)
    if options is not None and not isinstance(options, WriteOptions):
        raise InputError(
            f"options must be a WriteOptions (or give them as keywords), got "
            f"{type(options).__name__}"
        )
    opts = (options or WriteOptions()).updated(**changes) if changes else options or WriteOptions()
    backend = get_backend(opts.format)
    _check_datasets(datasets, opts)
    if getattr(backend, "native_byte_order_only", False):
        for spec, _ in datasets.values():
            if spec.dtype.byteorder not in "=|" and spec.dtype != spec.dtype.newbyteorder("="):
                # Zarr read the bytes back in this machine's order: its own verify failed
                raise StorageError(
                    f"dataset {spec.name!r}: dtype {spec.dtype.str} is not in this machine's "
                    f"byte order, which {opts.format} needs here; give "
                    f"{spec.dtype.newbyteorder('=').str} (the values are the same)"
                )
    _check_replaceable(target, opts.overwrite)
    if not target.parent.is_dir():
        raise StorageError(f"directory {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK):
        raise StorageError(f"directory {target.parent} is not writable")
    if not isinstance(opts.assignment, str):
        for name in set(opts.assignment) ^ set(datasets):
            raise ContributionError(
                f"assignment: {name!r} is not a dataset of this stage ({sorted(datasets)})"
                if name in opts.assignment
                else f"assignment has no entry for dataset {name!r}; give each dataset a "
                "writer array or a method ('owner')"
            )
    specs = [spec for spec, _ in datasets.values()]
    for spec in specs:
        backend.check_spec(spec)
    tree = _tree(specs, opts)
    check_stage_dims(specs, tree["groups"])
    # datasets of no rows, and those nobody wrote (allow_missing), are created with the
    # groups, reading their fill value: nothing to plan or write
    unwritten = {
        n
        for n, (spec, cons) in datasets.items()
        if spec.n_rows == 0 or (not cons and opts.allow_missing)
    }
    for n in unwritten:
        if datasets[n][0].n_rows == 0 and datasets[n][1]:
            raise ContributionError(f"dataset {n!r} has no rows, yet contributions")
    tree["empty"] = [datasets[n][0] for n in sorted(unwritten)]
    backend.check_tree(tree)
    datasets = {n: pair for n, pair in datasets.items() if n not in unwritten}
    if not datasets:  # nothing for the I/O nodes: groups, small and empty datasets only
        return _write_tree_only(target, tree, opts, backend, t_start)
    total = sum(spec.nbytes for spec, _ in datasets.values() if isinstance(spec, DatasetSpec))
    check_disk(
        target.parent, total, f"the datasets of {target.name} ({len(datasets)})", StorageError
    )
    own = cluster is None
    cl = (
        local_cluster(n_ionodes=opts.n_ionodes, n_compute=defaults.N_COMPUTE)
        if cluster is None
        else cluster
    )
    clock = _Clock()
    if not own:
        cl.refresh()  # a worker restarted since the last stage has a new address
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        clock.lap("refresh")
        datasets, remote = _localize(cl, datasets, opts.unique)
        clock.lap("describe")
        staged, transfers, missing = _prepare(datasets, cl.n_ionodes, opts, backend)
        policy_options = dict(opts.policy_options)
        if get_policy(opts.policy).default_block_size is not None:
            # the policy's blocks default to the smallest stripe of the stage
            block = max(min(p.layout.stripe_bytes for p in staged.parts), 1)
            policy_options.setdefault("block_size", block)
        clock.lap("prepare")
        plan = schedule(transfers, opts.policy, cost=opts.cost, seed=opts.seed, **policy_options)
        clock.lap("plan")
        with _storage_errors(f"creating {tmp.name}"):
            info = backend.create(tmp, staged.specs, [p.layout for p in staged.parts])
        info["token"] = tmp.name
        info.setdefault("stripe_bytes", {})
        fills = []
        for d, (spec, part) in enumerate(zip(staged.specs, staged.parts, strict=True)):
            info["stripe_bytes"][spec.name] = part.layout.stripe_bytes
            if missing[spec.name].size:
                backend.fill(info, spec, missing[spec.name])
                fills += fill_pieces(d, spec, part.layout.stripe_bytes, missing[spec.name])
        clock.lap("create")
        trace, sums = dispatch(
            cl,
            backend.name,
            info,
            staged,
            plan,
            datasets,
            remote,
            aggregate=opts.strategy == "two-phase",
            fills=fills,
            window=opts.window,
            direct=opts.direct,
        )
        clock.lap("dispatch")
        manifest = _manifest(backend.name, staged, plan, trace, sums, opts.policy, opts.strategy)
        with _storage_errors(f"writing the groups, values and attributes of {tmp.name}"):
            backend.write_tree(tmp, tree)
        manifest.update(_tree_manifest(tree))
        rule = ionode_rule(cl.client)
        if rule != "declared":  # we chose the I/O workers of a cluster that named none
            manifest["ionodes"] = {"chosen": rule, "n": cl.n_ionodes}
        with _storage_errors(f"writing the manifest of {tmp.name}"):
            backend.finish(tmp, manifest)
        _check_replaceable(target, opts.overwrite)  # again: it may have changed meanwhile
        commit(tmp, target, opts.overwrite)  # renamed over an old target, never deleting it first
        clock.lap("commit")
    except BaseException:
        # remove first: under a batch system SIGKILL follows SIGTERM within
        # seconds, and stopping the writers waits on workers that may be dying
        remove_path(tmp)
        stop(cl, tmp.name, timeout=5.0)
        remove_path(tmp)  # again: a writer that was still busy may have recreated part of it
        backend.discard(tmp)
        raise
    finally:
        if own:
            cl.close()
    seconds = time.perf_counter() - t_start
    phases = ", ".join(f"{k} {v:.3f} s" for k, v in clock.laps.items())
    log.info(
        "stage %s: %.3f s (started at %.2f), %s, realized makespan %.3f s",
        target,
        seconds,
        time.time() - seconds,
        phases,
        trace.makespan,
    )
    return StageResult(target, manifest, plan, trace, seconds, clock.laps)


@contextmanager
def _storage_errors(what: str) -> Iterator[None]:
    """An ``OSError`` of the file system (a full disk, a quota) as a :class:`StorageError`."""
    try:
        yield
    except OSError as err:
        raise StorageError(f"{what}: {err}") from err
    except RuntimeError as err:  # h5py's own, e.g. a flush that found the disk full
        if isinstance(err, OrchestratorError):
            raise
        raise StorageError(f"{what}: {err}") from err


class _Clock:
    """Seconds between successive laps, by name."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self.t
        self.t = now


def _manifest(
    fmt: str,
    staged: Staged,
    plan: Plan,
    trace: Trace,
    sums: dict[str, str],
    policy: str,
    strategy: str,
) -> dict[str, Any]:
    return {
        "version": MANIFEST_VERSION,
        "format": fmt,
        "datasets": {
            spec.name: {
                "shape": list(spec.shape),
                "dtype": dtype_json(spec.dtype),
                "dims": list(spec.dims),
                "stripe_bytes": part.layout.stripe_bytes,
                "n_ionodes": part.layout.n_ionodes,
                "pieces": part.n_pieces,
                "checksums": {
                    k.rsplit(":", 1)[1]: v
                    for k, v in sums.items()
                    if k.rsplit(":", 1)[0] == spec.name
                },
            }
            for spec, part in zip(staged.specs, staged.parts, strict=True)
        },
        "policy": policy,
        "strategy": strategy,
        "plan": {
            "transfers": len(plan.transfers),
            "units": plan.n_units,
            "makespan": plan.makespan,
            "lower_bound": plan.lower_bound,
            "rounds": plan.rounds,
            "messages": plan.messages,
        },
        "realized_makespan": trace.makespan,
        "checksum": "crc32",
    }
