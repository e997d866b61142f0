"""Capture proxies: the h5py / zarr spelling a user's code already has, recorded as contributions.

.. code-block:: python

    with orchestrator.capture("ckpt/step3.h5") as f:      # instead of h5py.File(..., "w")
        u = f.create_dataset("u", shape=(n, 3), dtype="f8")
        u[lo:hi] = block                                   # slices, integer arrays, masks
        u.attrs["units"] = "V"
        f.attrs["step"] = 3

Nothing is written while the block runs; region writes are recorded, and on a
clean exit they become this client's contribution to a write stage that is
planned, dispatched to the I/O workers and committed (complete or absent).
Whole rows only: a write of part of a row (``u[5, 0:2] = ...``), a strided
slice or a read raises :class:`CaptureError` naming the operation.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import defaults
from ..checks import is_int
from ..contributions import (
    Contribution,
    ContributionError,
    DatasetSpec,
    cast_exactly,
    check_attr,
)
from ..engine.backends import get_backend
from ..engine.options import WriteOptions
from ..errors import CaptureError
from .checkpoint import Checkpoint
from .intercept import OutputStage, StageOptions

__all__ = ["CaptureError", "CapturedDataset", "CapturedFile", "capture"]


def _json(value: Any) -> Any:
    """An attribute value as JSON (NumPy scalars and arrays become numbers and lists)."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode()
    return value


class _Attrs(dict[str, Any]):
    """``.attrs``: a dict whose values are kept as JSON."""

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key or "\0" in key or not key.isprintable():
            raise CaptureError(
                f"attribute name {key!r} must be a non-empty printable string without NUL"
            )
        value = _json(value)
        try:
            check_attr(f"attrs[{key!r}]", value)
        except ContributionError as err:  # what h5py or Zarr would refuse, or read back changed
            raise CaptureError(str(err)) from None
        super().__setitem__(key, value)


def _spec(call: str, name: str, shape: Any, dtype: Any) -> DatasetSpec:
    """A dataset's shape and dtype checked as every stage checks them (``(2.7,)`` made two
    rows, ``"bogus"`` a TypeError), refused as a CaptureError naming the call."""
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    elif not isinstance(shape, tuple | list):
        raise CaptureError(f"{call}: shape {shape!r} is not a tuple of whole numbers")
    try:
        return DatasetSpec(name, tuple(shape), np.float64 if dtype is None else dtype)
    except ContributionError as err:
        raise CaptureError(f"{call}: {err}") from None


def _describe_key(key: Any) -> str:
    if not isinstance(key, tuple):
        key = (key,)
    parts = []
    for k in key:
        if isinstance(k, slice):
            text = "" if k.start is None else str(k.start)
            text += ":" + ("" if k.stop is None else str(k.stop))
            parts.append(text + ("" if k.step is None else f":{k.step}"))
        elif k is Ellipsis:
            parts.append("...")
        elif isinstance(k, np.ndarray | list):
            parts.append(f"<{np.asarray(k).dtype} array of {np.asarray(k).size}>")
        else:
            parts.append(repr(k))
    return ", ".join(parts)


class CapturedDataset:
    """One dataset of a capture: shape, dtype, ``attrs``, and recorded row writes."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: Any) -> None:
        self.name = name
        self.shape = tuple(int(x) for x in shape)
        self.dtype = np.dtype(dtype)
        self.attrs = _Attrs()
        self.ndim = len(self.shape)
        self._rows: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        if not self.shape or self.shape[0] < 1:
            raise CaptureError(f"dataset {name!r}: shape {shape!r} needs at least one row")

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f'<captured dataset "{self.name}": shape {self.shape}, type "{self.dtype.str}">'

    def _rows_of(self, key: Any) -> np.ndarray:
        op = f"{self.name}[{_describe_key(key)}] = ..."
        rest: tuple[Any, ...] = ()
        if isinstance(key, tuple):
            key, rest = (key[0], key[1:]) if key else (slice(None), ())
        for k in rest:  # everything after the row selection must be whole
            if k is not Ellipsis and k != slice(None):
                raise CaptureError(
                    f"{op}: writes part of each row; a capture records whole rows only"
                )
        n = self.shape[0]
        if key is Ellipsis:
            return np.arange(n, dtype=np.int64)
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise CaptureError(f"{op}: strided slices are not supported; use an index array")
            start, stop, _ = key.indices(n)
            return np.arange(start, max(start, stop), dtype=np.int64)
        if isinstance(key, int | np.integer) and not isinstance(key, bool):
            k = int(key) + (n if key < 0 else 0)
            if not 0 <= k < n:
                raise CaptureError(f"{op}: row {int(key)} is outside 0..{n - 1}")
            return np.array([k], dtype=np.int64)
        arr = np.asarray(key)
        if arr.dtype == bool:
            if arr.shape != (n,):
                raise CaptureError(f"{op}: a boolean mask must have shape ({n},), got {arr.shape}")
            return np.flatnonzero(arr).astype(np.int64)
        if arr.ndim == 1 and (arr.size == 0 or arr.dtype.kind in "iu"):
            r = arr.astype(np.int64)
            r = np.where(r < 0, r + n, r)
            if r.size and (r.min() < 0 or r.max() >= n):
                bad = int(arr[(r < 0) | (r >= n)][0])
                raise CaptureError(f"{op}: row {bad} is outside 0..{n - 1}")
            return r
        raise CaptureError(f"{op}: unsupported selection ({type(key).__name__})")

    def __setitem__(self, key: Any, value: Any) -> None:
        rows = self._rows_of(key)
        v = np.asarray(value)
        want = (rows.size, *self.shape[1:])
        try:
            v = np.broadcast_to(v, want) if v.shape != want else v
        except ValueError:
            raise CaptureError(
                f"{self.name}[{_describe_key(key)}] = ...: value of shape {v.shape} does not "
                f"fit {want}"
            ) from None
        if not np.can_cast(v.dtype, self.dtype, casting="same_kind"):
            raise CaptureError(f"{self.name}: cannot store {v.dtype} values in {self.dtype}")
        self._rows.append(rows)
        try:  # every value kept, or an error now: h5py would wrap 1000 into int8 as -24
            exact = cast_exactly(v, self.dtype, f"{self.name}[{_describe_key(key)}] = ...")
        except ContributionError as err:
            raise CaptureError(str(err)) from None
        self._values.append(np.array(exact))  # a copy: the caller may reuse it

    def __getitem__(self, key: Any) -> Any:
        raise CaptureError(
            f"{self.name}[{_describe_key(key)}]: reading is not supported inside a capture "
            "(it records writes); read the committed checkpoint with open_checkpoint()"
        )

    def resize(self, *args: Any, **kwargs: Any) -> None:
        raise CaptureError(f"{self.name}.resize(): datasets of a capture have a fixed shape")

    def contribution(self, client: int) -> Contribution | None:
        """The recorded writes as one contribution (a row written twice keeps the last value)."""
        if not self._rows:
            return None
        rows = np.concatenate(self._rows)
        values = np.concatenate(self._values)
        # the last write of each row wins, as in h5py
        last = rows.size - 1 - np.unique(rows[::-1], return_index=True)[1]
        return Contribution(client, rows[last], values[last])


class CapturedFile:
    """What ``capture()`` yields: ``create_dataset`` / ``create_array``, ``[name]``, ``attrs``."""

    def __init__(self, target: str | os.PathLike[str], mode: str = "w") -> None:
        if mode not in ("w", "w-", "x"):
            raise CaptureError(f"mode {mode!r}: a capture creates a new checkpoint; use 'w'")
        self.filename = os.fspath(target)
        #: The committed :class:`~orchestrator.Checkpoint`, once the block ended.
        self.checkpoint: Checkpoint | None = None
        self.attrs = _Attrs()
        self._datasets: dict[str, CapturedDataset] = {}

    def create_dataset(
        self,
        name: str,
        shape: Any = None,
        dtype: Any = None,
        data: Any = None,
        **ignored: Any,
    ) -> CapturedDataset:
        """As ``h5py.Group.create_dataset``: ``shape``/``dtype`` or ``data``.

        Chunking, compression and fill options are accepted and ignored: the
        layout belongs to the orchestrator.

        Examples
        --------
        >>> f = CapturedFile("ckpt.h5")
        >>> f.create_dataset("u", shape=(4, 2), dtype="f4", chunks=True)
        <captured dataset "u": shape (4, 2), type "<f4">
        """
        if not isinstance(name, str):
            raise CaptureError(f"create_dataset: name must be a string, got {name!r}")
        name = name.strip("/")
        if name in self._datasets:
            raise CaptureError(f"create_dataset({name!r}): a dataset of that name exists")
        if "/" in name:
            raise CaptureError(
                f"create_dataset({name!r}): groups are not supported; use a plain name"
            )
        if data is not None:
            arr = np.asarray(data)
            shape = arr.shape if shape is None else shape
            dtype = arr.dtype if dtype is None else dtype
        if shape is None:
            raise CaptureError(f"create_dataset({name!r}): give shape or data")
        spec = _spec(f"create_dataset({name!r})", name, shape, dtype)
        ds = CapturedDataset(name, spec.shape, spec.dtype)
        self._datasets[name] = ds
        if data is not None:
            ds[...] = data
        return ds

    def create_array(self, name: str, shape: Any = None, dtype: Any = None, **kw: Any) -> Any:
        """As ``zarr.Group.create_array`` (chunks/shards are ignored)."""
        return self.create_dataset(name, shape=shape, dtype=dtype, **kw)

    def require_dataset(self, name: str, shape: Any, dtype: Any, **kw: Any) -> CapturedDataset:
        """As ``h5py.Group.require_dataset``."""
        if not isinstance(name, str):
            raise CaptureError(f"require_dataset: name must be a string, got {name!r}")
        ds = self._datasets.get(name.strip("/"))
        if ds is None:
            return self.create_dataset(name, shape=shape, dtype=dtype, **kw)
        spec = _spec(f"require_dataset({name!r})", ds.name, shape, dtype)
        if ds.shape != spec.shape or ds.dtype != spec.dtype:
            raise CaptureError(f"require_dataset({name!r}): exists as {ds.shape} {ds.dtype}")
        return ds

    def __getitem__(self, name: str) -> CapturedDataset:
        try:
            return self._datasets[name.strip("/")]
        except KeyError:
            raise CaptureError(
                f"[{name!r}]: no such dataset in this capture ({sorted(self._datasets)})"
            ) from None

    def __setitem__(self, name: str, data: Any) -> None:
        self.create_dataset(name, data=data)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip("/") in self._datasets

    def __iter__(self) -> Iterator[str]:
        return iter(self._datasets)

    def keys(self) -> list[str]:
        """Dataset names."""
        return list(self._datasets)

    def create_group(self, name: str, **kw: Any) -> Any:
        raise CaptureError(f"create_group({name!r}): groups are not supported in a capture")

    def close(self) -> None:
        """Accepted for h5py compatibility; the capture commits when its ``with`` block ends."""

    def specs_and_contributions(
        self, client: int
    ) -> tuple[dict[str, DatasetSpec], dict[str, Contribution]]:
        """What the stage needs: a spec per dataset and this client's contributions."""
        specs, cons = {}, {}
        for name, ds in self._datasets.items():
            specs[name] = DatasetSpec(name, ds.shape, ds.dtype)
            c = ds.contribution(client)
            if c is not None:
                cons[name] = c
        return specs, cons

    def all_attrs(self) -> dict[str, dict[str, Any]]:
        """``{"": file attributes, dataset: its attributes}`` for the stage."""
        out = {"": dict(self.attrs)} if self.attrs else {}
        out.update({n: dict(d.attrs) for n, d in self._datasets.items() if d.attrs})
        return out


@contextmanager
def capture(
    target: str | os.PathLike[str],
    format: str = defaults.FORMAT,
    mode: str = "w",
    client: int = 0,
    clients: int = 1,
    overwrite: bool = False,
    cluster: Any = None,
    scheduler: str | None = None,
    **stage_options: Any,
) -> Iterator[CapturedFile]:
    """Record h5py/zarr-style writes and commit them as one write stage when the block ends.

    Parameters
    ----------
    target : path
        The checkpoint to create.
    format : {"hdf5", "hdf5-vds", "hdf5-chunked", "zarr"}
    client, clients : int
        This process's client id and how many captures of ``target`` make the
        stage (several tasks each capturing their part, on Dask or Parsl, as
        with :func:`~orchestrator.output_stage`).
    overwrite : bool
        Replace an existing checkpoint.
    cluster, scheduler
        As for :func:`~orchestrator.output_stage`.
    **stage_options
        Fields of :class:`~orchestrator.engine.options.WriteOptions` (``policy``,
        ``strategy``, ``stripe_bytes``, ``n_ionodes``, …) or options of the policy.

    Examples
    --------
    >>> import numpy as np
    >>> with capture("ckpt.h5") as f:  # doctest: +SKIP
    ...     u = f.create_dataset("u", shape=(100, 3), dtype="f8")
    ...     u[0:50] = np.ones((50, 3))
    ...     u[[60, 70]] = 2.0
    ...     f.attrs["step"] = 3
    >>> f.checkpoint.path  # doctest: +SKIP
    PosixPath('ckpt.h5')
    """
    # what the block cannot change is checked before it runs, not when it ends
    if not is_int(clients, 1, 2**63):
        raise CaptureError(f"clients must be an integer >= 1, got {clients!r}")
    if not is_int(client, 0, clients):
        raise CaptureError(f"client must be an integer in [0, clients={clients}), got {client!r}")
    get_backend(format)
    write = WriteOptions(format=format, allow_missing=True, overwrite=overwrite).updated(
        **stage_options
    )
    f = CapturedFile(target, mode)
    escaped = os.fspath(target).replace("{", "{{").replace("}", "}}")
    name = f"capture:{f.filename}"  # every capture of one target agrees on it: one stage
    try:
        yield f
    except BaseException as err:
        cause = err
        if clients > 1:  # the other captures of this target must not wait for this one

            def failed(step: int, client: int) -> Any:
                raise cause

            failed.__name__ = failed.__qualname__ = name
            opts = StageOptions(
                target=escaped, clients=clients, cluster=cluster, scheduler=scheduler
            )
            try:
                OutputStage(failed, opts)(0, client)
            except BaseException:
                pass
        raise
    specs, cons = f.specs_and_contributions(client)
    if not specs:
        raise CaptureError(f"capture({f.filename!r}): no dataset was created")
    unwritten = [n for n in specs if n not in cons]
    if unwritten and clients == 1:
        raise CaptureError(f"capture({f.filename!r}): dataset(s) {unwritten} were never written")
    opts = StageOptions(
        target=escaped,
        clients=clients,
        # the file's attributes, unless the caller gave its own (as before: theirs win)
        write=write if "attrs" in stage_options else write.updated(attrs=f.all_attrs()),
        cluster=cluster,
        scheduler=scheduler,
        shapes={n: s.shape for n, s in specs.items()},
        dtypes={n: s.dtype.str for n, s in specs.items()},
    )

    def record(step: int, client: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {n: (c.rows, c.values) for n, c in cons.items()}

    record.__name__ = record.__qualname__ = name
    result = OutputStage(record, opts)(0, client)
    f.checkpoint = result.result() if isinstance(result, Future) else result
