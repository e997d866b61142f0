"""One write stage end to end: contributions → assignment → layout → plan → dispatch → commit.

The output is complete and verified, or absent: everything is written under a
temporary name beside the target, each I/O node reads back and checksums its
stripes, the manifest goes into the target, and one rename commits it.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .assignment import assign_holdings
from .cluster import IOCluster, local_cluster
from .contributions import Contribution, ContributionError, DatasetSpec, gather
from .cost import CostModel
from .files import fsync_path, remove_path
from .layout import StageTransfers, StripeLayout, derive_transfers
from .plan import Plan
from .policies import get_policy, schedule
from .storage import MANIFEST_VERSION, StorageError, get_backend, stripe_checksum
from .transfers import TransferSet

__all__ = ["StageError", "StageResult", "Trace", "open_datasets", "verify", "write_stage"]

log = logging.getLogger("orchestrator.stage")


class StageError(RuntimeError):
    """A stage could not complete; its temporary output has been removed."""


@dataclass(frozen=True, eq=False)
class Trace:
    """What dispatch really did: one row per executed unit (wall-clock seconds from start)."""

    unit: npt.NDArray[np.int64]
    ionode: npt.NDArray[np.int64]
    start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]
    nbytes: npt.NDArray[np.int64]
    worker: list[str]

    @property
    def makespan(self) -> float:
        """Seconds from the first start to the last end of a write."""
        return float(self.end.max() - self.start.min()) if self.end.size else 0.0


@dataclass(frozen=True, eq=False)
class StageResult:
    """The committed target, its manifest, the plan and the trace of its execution."""

    path: Path
    manifest: dict[str, Any]
    plan: Plan
    trace: Trace
    seconds: float

    @property
    def throughput(self) -> float:
        """Bytes written per second of the whole stage (plan, dispatch, verify, commit)."""
        return float(self.plan.transfers.total_bytes) / self.seconds


# ------------------------------------------------------------------ worker side
_WRITERS: dict[tuple[str, int], Any] = {}


def _writer(fmt: str, info: dict[str, Any], ionode: int, aggregate: bool) -> Any:
    key = (info["token"], ionode)
    if key not in _WRITERS:
        _WRITERS[key] = get_backend(fmt).writer(info, ionode, aggregate)
    return _WRITERS[key]


def _drop_writers(token: str) -> int:
    """On every worker after a failed stage: close its files so nothing stays open."""
    n = 0
    for key in [k for k in _WRITERS if k[0] == token]:
        try:
            _WRITERS.pop(key).release()
        except Exception:  # a half-written file is about to be deleted anyway
            pass
        n += 1
    return n


def _describe(con: Contribution) -> tuple[int, np.ndarray, tuple[int, ...], str]:
    """On the worker holding a contribution: what the parent needs to plan (no values)."""
    return con.client, con.rows, tuple(con.values.shape), con.values.dtype.str


def _standin(client: int, rows: np.ndarray, shape: tuple[int, ...], dtype: str) -> Contribution:
    """A Contribution with the real rows and a zero-byte view standing in for the values."""
    c = Contribution.__new__(Contribution)
    values = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=dtype), shape, (0,) * len(shape))
    object.__setattr__(c, "client", client)
    object.__setattr__(c, "rows", rows)
    object.__setattr__(c, "values", values)
    return c


def _is_future(x: Any) -> bool:
    return type(x).__name__ == "Future" and hasattr(x, "key")


def _localize(
    cl: IOCluster,
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Any]]],
    unique: bool,
) -> tuple[dict[str, tuple[DatasetSpec, list[Contribution]]], dict[tuple[str, int], Any]]:
    """Replace contributions that live on workers (Dask futures) by stand-ins with their rows.

    Their values never come to this process; only rows, shapes and dtypes do.
    """
    local: dict[str, tuple[DatasetSpec, list[Contribution]]] = {}
    remote: dict[tuple[str, int], Any] = {}
    for name, (spec, contribs) in datasets.items():
        futures = [c for c in contribs if _is_future(c)]
        if futures and unique:
            raise ContributionError(
                f"dataset {name!r}: unique=True compares replica values, which needs the "
                "contributions in this process; pass them as Contribution objects"
            )
        described = cl.client.gather([cl.client.submit(_describe, f, pure=False) for f in futures])
        stand = [_standin(*d) for d in described]
        for f, d in zip(futures, described, strict=True):
            remote[(name, d[0])] = f
        local[name] = (spec, [c for c in contribs if not _is_future(c)] + stand)
    return local, remote


def _cut(
    contribs: Mapping[str, Contribution], ranges: list[tuple[str, int, int, int, str]]
) -> list:
    """On the client's worker: the bytes of each (dataset, offset, nbytes, row_bytes, dtype)."""
    out = []
    for name, offset, nbytes, rb, dtype in ranges:
        r0, r1 = offset // rb, -(-(offset + nbytes) // rb)
        rows = np.ascontiguousarray(contribs[name].cut(r0, r1), dtype=dtype)
        raw = rows.reshape(-1).view(np.uint8)
        skip = offset - r0 * rb
        # a NumPy array, not bytes: Dask ships arrays as zero-copy frames
        out.append((name, offset, raw[skip : skip + nbytes].copy()))
    return out


def _cut_many(contribs: Mapping[str, Contribution], many: list[list]) -> list[list]:
    """On the client's worker: :func:`_cut` for several units in one task."""
    return [_cut(contribs, ranges) for ranges in many]


def _write(
    fmt: str,
    info: dict[str, Any],
    ionode: int,
    aggregate: bool,
    units: list[int],
    cut_groups: list[list[list]],
    where: list[tuple[int, int]],
    previous: Any,
) -> list[tuple]:
    """On the I/O worker: hand each unit's pieces to the writer in order; return trace rows.

    Unit ``i``'s pieces are ``cut_groups[g][j]`` with ``(g, j) = where[i]``
    (one cut task per client of the batch).
    """
    from distributed import get_worker

    w = _writer(fmt, info, ionode, aggregate)
    addr = get_worker().address
    rows = []
    for unit, (g, j) in zip(units, where, strict=True):
        pieces = cut_groups[g][j]
        t0 = time.time()
        n = 0
        for name, offset, blob in pieces:
            w.put(name, offset, memoryview(blob))
            n += len(blob)
        rows.append((unit, ionode, t0, time.time(), n, addr))
    return rows


def _close_and_checksum(
    fmt: str,
    info: dict[str, Any],
    ionode: int,
    aggregate: bool,
    stripes: list[tuple[str, int, int]],
    last: Any,
) -> dict[str, str]:
    """On the I/O worker after its last write: flush, then read back and checksum its stripes."""
    w = _writer(fmt, info, ionode, aggregate)
    try:
        w.flush()
        return {f"{name}:{off}": stripe_checksum(w.read(name, off, n)) for name, off, n in stripes}
    finally:
        w.release()
        _WRITERS.pop((info["token"], ionode), None)


# ------------------------------------------------------------------ parent side
@dataclass(frozen=True, eq=False)
class _Staged:
    specs: list[DatasetSpec]
    parts: list[StageTransfers]
    transfers: TransferSet
    first_transfer: list[int]  # first global transfer index of each dataset


def _prepare(
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Contribution]]],
    n_ionodes: int,
    stripe_bytes: int,
    strategy: str,
    assignment: str | Mapping[str, Any],
    unique: bool,
    allow_missing: bool,
    backend: Any,
) -> tuple[_Staged, dict[str, np.ndarray]]:
    specs, parts, missing = [], [], {}
    n_clients = 1 + max(c.client for _, cs in datasets.values() for c in cs)
    for name, (spec, contributions) in datasets.items():
        if spec.name != name:
            raise ContributionError(
                f"dataset key {name!r} differs from its spec name {spec.name!r}"
            )
        holdings = gather(spec, contributions, unique=unique, allow_missing=allow_missing)
        method = assignment if isinstance(assignment, str) else assignment[name]
        writer = assign_holdings(holdings, method)
        layout = StripeLayout(n_ionodes, backend.stripe_size(spec, stripe_bytes))
        specs.append(spec)
        parts.append(derive_transfers(spec, writer, layout, strategy, n_clients=n_clients))
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
    return _Staged(specs, parts, cat, first), missing


def _unit_ranges(staged: _Staged, plan: Plan) -> list[list[tuple[str, int, int, int, str]]]:
    """For every unit of the plan, the dataset byte ranges it moves."""
    per_transfer: list[list[tuple[str, int, int, int, str]]] = [
        [] for _ in range(len(staged.transfers))
    ]
    for spec, part, base in zip(staged.specs, staged.parts, staged.first_transfer, strict=True):
        order = np.argsort(part.piece_offset, kind="stable")
        for p in order.tolist():
            per_transfer[base + int(part.piece_transfer[p])].append(
                (
                    spec.name,
                    int(part.piece_offset[p]),
                    int(part.piece_nbytes[p]),
                    spec.row_bytes,
                    spec.dtype.str,
                )
            )
    if plan.units.whole:
        return per_transfer
    out = []
    for u in range(plan.n_units):  # a piece of a transfer spans part of its stripe pieces
        want0 = int(plan.offset[u])
        want1 = want0 + int(plan.nbytes[u])
        acc, rng = 0, []
        for name, off, n, rb, dt in per_transfer[int(plan.parent[u])]:
            lo, hi = max(want0, acc), min(want1, acc + n)
            if lo < hi:
                rng.append((name, off + lo - acc, hi - lo, rb, dt))
            acc += n
            if acc >= want1:
                break
        out.append(rng)
    return out


def write_stage(
    target: str | os.PathLike[str],
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Contribution]]],
    format: str = "hdf5",
    policy: str = "ms-ecf",
    cluster: IOCluster | None = None,
    n_ionodes: int = 4,
    stripe_bytes: int = 4 << 20,
    strategy: str = "contiguous",
    assignment: str | Mapping[str, Any] = "owner",
    unique: bool = False,
    allow_missing: bool = False,
    overwrite: bool = False,
    cost: CostModel | str | None = None,
    seed: int = 0,
    attrs: Mapping[str, Mapping[str, Any]] | None = None,
    **policy_options: Any,
) -> StageResult:
    """Write contributed datasets to ``target`` through the I/O workers, in plan order.

    Parameters
    ----------
    target : path
        The checkpoint to create (an HDF5 file or a Zarr directory).
    datasets : mapping
        ``name -> (DatasetSpec, [Contribution, ...])``; an entry may also be a
        Dask future of a Contribution living on a worker (its values are then
        never sent to this process).
    format : {"hdf5", "hdf5-vds", "hdf5-chunked", "zarr"}
    policy : str
        Scheduling policy (see :func:`orchestrator.policies`).
    cluster : IOCluster, optional
        Where to run; default: an embedded local cluster with ``n_ionodes``
        I/O workers, started and stopped here.
    stripe_bytes : int
        Stripe size of the round-robin layout (Zarr rounds it to whole shards).
    strategy : {"contiguous", "list", "two-phase"}
        One transfer per contiguous piece; one per (client, I/O node) with a
        list of pieces; or list transfers that the I/O node aggregates and
        writes as contiguous runs.
    assignment : "owner" or mapping
        Replica resolution, or a writer array per dataset name.
    unique, allow_missing : bool
        See :func:`orchestrator.contributions.gather`.
    overwrite : bool
        Replace an existing target (otherwise it is an error).
    attrs : mapping, optional
        Attributes to store, ``{"": {...}}`` for the file / group and
        ``{dataset: {...}}`` per dataset; JSON values (they are also kept in
        the manifest).

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
    :class:`~orchestrator.cluster.IOCluster` to reuse one across stages.

    Examples
    --------
    >>> import numpy as np, tempfile, pathlib
    >>> from orchestrator.contributions import Contribution, DatasetSpec
    >>> spec = DatasetSpec("u", (8,), "float64")
    >>> parts = [Contribution(0, [0, 1, 2, 3, 4], np.arange(5.0)),
    ...          Contribution(1, [4, 5, 6, 7], np.arange(4.0, 8.0))]
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "ckpt.h5"
    >>> res = write_stage(out, {"u": (spec, parts)}, n_ionodes=2, stripe_bytes=16)  # doctest: +SKIP
    >>> verify(out)  # doctest: +SKIP
    []
    """
    t_start = time.perf_counter()
    target = Path(target)
    backend = get_backend(format)
    if target.exists() and not overwrite:
        raise StorageError(f"{target} exists; pass overwrite=True to replace it")
    if not target.parent.is_dir():
        raise StorageError(f"directory {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK):
        raise StorageError(f"directory {target.parent} is not writable")
    if attrs:
        import json

        for where in attrs:
            if where and where not in datasets:
                raise ContributionError(
                    f"attrs: {where!r} is not a dataset of this stage ({sorted(datasets)})"
                )
        try:
            json.dumps(attrs)
        except TypeError as err:
            raise ContributionError(f"attrs must hold JSON values: {err}") from None
    own = cluster is None
    cl = local_cluster(n_ionodes=n_ionodes, n_compute=2) if cluster is None else cluster
    if not own:
        cl.refresh()  # a worker restarted since the last stage has a new address
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        datasets, remote = _localize(cl, datasets, unique)
        staged, missing = _prepare(
            datasets, cl.n_ionodes, stripe_bytes, strategy, assignment, unique, allow_missing,
            backend,
        )  # fmt: skip
        if get_policy(policy).default_block_size is not None and "block_size" not in policy_options:
            policy_options["block_size"] = max(min(p.layout.stripe_bytes for p in staged.parts), 1)
        plan = schedule(staged.transfers, policy, cost=cost, seed=seed, **policy_options)
        info = backend.create(tmp, staged.specs, [p.layout for p in staged.parts])
        info["token"] = tmp.name
        for spec in staged.specs:
            if missing[spec.name].size:
                backend.fill(info, spec, missing[spec.name])
        aggregate = strategy == "two-phase"
        trace, sums = _dispatch(cl, backend.name, info, staged, plan, datasets, remote, aggregate)
        manifest = _manifest(backend.name, staged, plan, trace, sums, policy, strategy)
        if attrs:
            manifest["attrs"] = {str(k): dict(v) for k, v in attrs.items()}
        backend.finish(tmp, manifest)
        if target.exists():  # overwrite: the old target goes only once the new one is complete
            remove_path(target)
        os.rename(tmp, target)
        fsync_path(target.parent)
    except BaseException:
        # remove first: under a batch system SIGKILL follows SIGTERM within
        # seconds, and releasing the writers waits on workers that may be dying
        remove_path(tmp)
        try:
            cl.client.run(_drop_writers, tmp.name, wait=True)
        except Exception as err:  # cleanup must not hide the original error
            log.warning("could not release writers of %s: %s", tmp.name, err)
        remove_path(tmp)  # again: a writer still busy may have recreated part of it
        raise
    finally:
        if own:
            cl.close()
    return StageResult(target, manifest, plan, trace, time.perf_counter() - t_start)


def _dispatch(
    cl: IOCluster,
    fmt: str,
    info: dict[str, Any],
    staged: _Staged,
    plan: Plan,
    datasets: Mapping[str, tuple[DatasetSpec, Sequence[Contribution]]],
    remote: Mapping[tuple[str, int], Any],
    aggregate: bool,
    batch_bytes: int = 8 << 20,
    batch_units: int = 64,
) -> tuple[Trace, dict[str, str]]:
    client = cl.client
    held: dict[int, dict[str, Any]] = {}  # client -> dataset -> future of its Contribution
    pin: dict[int, list[str] | None] = {}
    for name, (_, contribs) in datasets.items():
        for con in contribs:
            c = con.client
            if (name, c) in remote:  # already on a worker: cut it where it is
                held.setdefault(c, {})[name] = remote[(name, c)]
                pin[c] = None
            else:  # a list, not the object: scatter treats dicts and tuples specially
                fut = client.scatter([con], workers=[cl.compute_worker(c)], hash=False)[0]
                held.setdefault(c, {})[name] = fut
                pin.setdefault(c, [cl.compute_worker(c)])
    ranges = _unit_ranges(staged, plan)
    # Ordered plans: each I/O node's units in plan order, as a chain of write
    # tasks; consecutive units are batched into one task (up to batch_bytes /
    # batch_units) so Dask's per-task latency is not paid per small piece.
    # Decentralized plans: one task per unit, chained per client (a client
    # issues its next piece when the previous one is written).
    decentralized = plan.kind == "decentralized"
    limit_units = 1 if decentralized else batch_units
    chain: dict[int, Any] = {}
    open_batch: dict[int, tuple[int, list[int], int]] = {}
    writes = []

    def flush(key: int) -> None:
        s, units, _ = open_batch.pop(key)
        by_client: dict[int, list[int]] = {}
        where = []
        for u in units:  # one cut task per client of the batch, on that client's worker
            mine = by_client.setdefault(int(plan.client[u]), [])
            where.append((list(by_client).index(int(plan.client[u])), len(mine)))
            mine.append(u)
        groups = [
            client.submit(
                _cut_many,
                held[c],
                [ranges[u] for u in us],
                workers=pin[c],
                pure=False,
            )
            for c, us in by_client.items()
        ]
        w = client.submit(_write, fmt, info, s, aggregate, units, groups, where, chain.get(key),
                          resources={f"io-{s}": 1}, pure=False)  # fmt: skip
        chain[key] = w
        writes.append((s, w))

    for u in plan.order.tolist():
        c, s = int(plan.client[u]), int(plan.ionode[u])
        key = c if decentralized else s
        if key in open_batch and open_batch[key][0] != s:
            flush(key)
        _, units, nbytes = open_batch.setdefault(key, (s, [], 0))
        units.append(u)
        nbytes += int(plan.nbytes[u])
        open_batch[key] = (s, units, nbytes)
        if len(units) >= limit_units or nbytes >= batch_bytes:
            flush(key)
    for key in list(open_batch):
        flush(key)
    stripes: dict[int, list[tuple[str, int, int]]] = {s: [] for s in range(cl.n_ionodes)}
    for spec, part in zip(staged.specs, staged.parts, strict=True):
        lay = part.layout
        for k in range(lay.stripes(spec.nbytes)):
            off = k * lay.stripe_bytes
            stripes[k % lay.n_ionodes].append(
                (spec.name, off, min(lay.stripe_bytes, spec.nbytes - off))
            )
    closes = []
    for s in range(cl.n_ionodes):  # after every write of the stage on that I/O node
        last = [w for node, w in writes if node == s]
        closes.append(client.submit(_close_and_checksum, fmt, info, s, aggregate, stripes[s], last,
                                    resources={f"io-{s}": 1}, pure=False))  # fmt: skip
    _wait_watching(cl, [w for _, w in writes] + closes)
    rows = [r for batch in client.gather([w for _, w in writes]) for r in batch]
    sums: dict[str, str] = {}
    for part in client.gather(closes):
        sums.update(part)
    t0 = min(r[2] for r in rows) if rows else 0.0
    trace = Trace(
        unit=np.array([r[0] for r in rows], dtype=np.int64),
        ionode=np.array([r[1] for r in rows], dtype=np.int64),
        start=np.array([r[2] - t0 for r in rows]),
        end=np.array([r[3] - t0 for r in rows]),
        nbytes=np.array([r[4] for r in rows], dtype=np.int64),
        worker=[r[5] for r in rows],
    )
    return trace, sums


def _wait_watching(cl: IOCluster, futures: list[Any], poll: float = 0.5) -> None:
    """Wait for ``futures``; fail fast if an I/O worker disappears or a task errs."""
    from distributed import wait

    start_workers = set(cl.ionodes)
    pending = list(futures)
    while pending:
        try:
            with (
                cl.client.as_current()
            ):  # wait() asks for a default client; a Parsl worker has none
                done, not_done = wait(pending, timeout=poll, return_when="ALL_COMPLETED")
        except TimeoutError:
            done = [f for f in pending if f.done()]
            not_done = [f for f in pending if not f.done()]
        for f in done:
            if f.status == "error":
                exc = f.exception()
                for g in futures:
                    g.cancel()
                raise StageError(f"dispatch failed: {type(exc).__name__}: {exc}") from exc
        pending = list(not_done)
        if not pending:
            break
        lost = start_workers - _live_workers(cl)
        if lost:  # ask again: a worker is lost only if it is gone twice in a row
            time.sleep(poll)
            lost &= start_workers - _live_workers(cl)
        if lost:
            for g in futures:
                g.cancel()
            names = ", ".join(f"io-{cl.ionodes.index(a)} ({a})" for a in sorted(lost))
            raise StageError(
                f"I/O worker {names} died during dispatch; the stage was aborted and its "
                "temporary output removed"
            )


def _live_workers(cl: IOCluster) -> set[str]:
    """Addresses of the workers the scheduler knows now (a fresh query, not the client cache)."""
    # Client.scheduler_info() returns a cache that a background refresh may
    # replace with one that lists no workers; ask the scheduler directly.
    identity = cl.client.sync(cl.client.scheduler.identity, n_workers=-1)
    return set(identity.get("workers", {}))


def _manifest(fmt: str, staged: _Staged, plan: Plan, trace: Trace, sums: dict[str, str],
              policy: str, strategy: str) -> dict[str, Any]:  # fmt: skip
    return {
        "version": MANIFEST_VERSION,
        "format": fmt,
        "datasets": {
            spec.name: {
                "shape": list(spec.shape),
                "dtype": spec.dtype.str,
                "stripe_bytes": part.layout.stripe_bytes,
                "n_ionodes": part.layout.n_ionodes,
                "pieces": part.n_pieces,
                "checksums": {
                    k.split(":", 1)[1]: v
                    for k, v in sums.items()
                    if k.split(":", 1)[0] == spec.name
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


def _format_of(path: Path) -> str:
    """The backend that wrote a committed target, from its shape on disk."""
    if not path.exists():
        raise StorageError(f"{path} does not exist")
    return "hdf5" if not path.is_dir() else "hdf5-vds" if (path / "master.h5").exists() else "zarr"


@contextmanager
def open_datasets(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The datasets of a committed target as h5py / zarr arrays, closed on exit.

    Examples
    --------
    >>> with open_datasets("ckpt.h5") as data:  # doctest: +SKIP
    ...     data["u"][:4]
    """
    path = Path(path)
    data = get_backend(_format_of(path)).open(path)
    try:
        yield data
    finally:
        files = {id(f): f for f in (getattr(a, "file", None) for a in data.values()) if f}
        for f in files.values():
            f.close()


def verify(path: str | os.PathLike[str]) -> list[str]:
    """Recompute every stripe checksum of a committed target; return the mismatches.

    An empty list means the target is complete and intact.

    Examples
    --------
    >>> verify("ckpt.h5")  # doctest: +SKIP
    []
    >>> verify("no-such-checkpoint.h5")
    Traceback (most recent call last):
    ...
    orchestrator.storage.StorageError: no-such-checkpoint.h5 does not exist
    """
    path = Path(path)
    backend = get_backend(_format_of(path))
    manifest = backend.read_manifest(path)
    bad = []
    for name, ds in manifest["datasets"].items():
        spec = DatasetSpec(name, tuple(ds["shape"]), np.dtype(ds["dtype"]))
        sb = int(ds["stripe_bytes"])
        n_stripes = -(-spec.nbytes // sb)
        if len(ds["checksums"]) != n_stripes:
            bad.append(f"{name}: manifest lists {len(ds['checksums'])} of {n_stripes} stripes")
        for off_text, want in ds["checksums"].items():
            off = int(off_text)
            got = stripe_checksum(backend.read_bytes(path, name, off, min(sb, spec.nbytes - off)))
            if got != want:
                bad.append(f"{name}: stripe at byte {off}: checksum {got}, manifest says {want}")
    return bad
