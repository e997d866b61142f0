"""Capture proxies: the h5py / zarr spelling a user's code already has, recorded as contributions.

.. code-block:: python

    with orchestrator.capture("ckpt/step3.h5") as f:      # instead of h5py.File(..., "w")
        g = f.create_group("state")
        u = g.create_dataset("u", shape=(n, 3), dtype="f8", chunks=(1000, 3),
                             compression="gzip")
        u[lo:hi] = block                                   # slices, arrays, masks, columns
        u.attrs["units"] = "V"
        f.attrs["step"] = np.int32(3)

Nothing is written while the block runs; writes are recorded, and on a clean
exit they become this client's contribution to a write stage that is planned,
dispatched to the I/O workers and committed (complete or absent), with the
groups, storage options, scalars, text and attributes the code gave. What a
capture cannot do raises :class:`CaptureError` naming the operation
(:mod:`orchestrator.frontends.captured` has the datasets).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from .. import defaults
from ..checks import is_int
from ..contributions import Contribution, ContributionError, DatasetSpec
from ..engine.backends import get_backend
from ..engine.options import WriteOptions
from ..errors import CaptureError, CaptureKeyError, CaptureUnsupported, StorageError
from ..specs import VALUE_OPTIONS, check_dtype, check_name, parent_groups
from .captured import (
    STORAGE_KEYWORDS,
    CapturedAttrs,
    CapturedDataset,
    is_text_dtype,
    text_encoding,
    unsupported,
)
from .checkpoint import Checkpoint
from .intercept import OutputStage, StageOptions

__all__ = [
    "CaptureError",
    "CaptureUnsupported",
    "CapturedDataset",
    "CapturedFile",
    "CapturedGroup",
    "capture",
]


def _spec(call: str, name: str, shape: Any, dtype: Any, options: dict[str, Any]) -> DatasetSpec:
    """A dataset's spec checked as every stage checks it (``(2.7,)`` made two rows,
    ``"bogus"`` a TypeError), refused as a CaptureError naming the call."""
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    elif not isinstance(shape, tuple | list):
        raise CaptureError(f"{call}: shape {shape!r} is not a tuple of whole numbers")
    try:
        return DatasetSpec(name, tuple(shape), dtype, **options)
    except ContributionError as err:
        raise CaptureError(f"{call}: {err}") from None


def _options(call: str, kw: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(fill value, DatasetSpec storage options)`` of ``create_dataset``'s keywords; any
    other keyword is refused by name (never accepted and ignored)."""
    for key, value in kw.items():
        if key in ("track_order", "exact") and not value:
            continue  # the default: nothing asked
        if key in ("filters", "attributes") and not value:
            continue
        if key in ("order",) and value in (None, "C"):
            continue
        if key not in STORAGE_KEYWORDS and key != "overwrite":
            raise CaptureError(f"{call}: option {key}={value!r} is not supported in a capture")
    fill = kw.get("fillvalue", kw.get("fill_value"))
    opts: dict[str, Any] = {}
    for key in ("chunks", "compression", "compression_opts", "maxshape", "shards", "compressors"):
        if kw.get(key) is not None:
            opts[key] = kw[key]
    if kw.get("compressors", "auto") is None:  # zarr: no compression at all
        opts["compressors"] = None
    for key in ("shuffle", "fletcher32"):
        if kw.get(key):
            opts[key] = True
    if opts.get("chunks") is False:
        del opts["chunks"]
    if "dimension_names" in kw and kw["dimension_names"] is not None:
        opts["dims"] = tuple(kw["dimension_names"])
    return fill, opts


class CapturedGroup:
    """A group of a capture: h5py's ``Group`` and zarr-python's ``Group`` spelling.

    Examples
    --------
    >>> f = CapturedFile("ckpt.h5")
    >>> g = f.create_group("state")
    >>> g.create_dataset("u", shape=(4,), dtype="f8").name
    '/state/u'
    >>> sorted(f), "state/u" in f
    (['state'], True)
    """

    def __init__(self, file: CapturedFile | None, path: str) -> None:
        self._file = file
        self._path = path
        self.attrs = CapturedAttrs("/" + path)

    @property
    def file(self) -> CapturedFile:
        """The capture's file."""
        assert self._file is not None
        return self._file

    @property
    def name(self) -> str:
        """The group's path from the root (``/state``)."""
        return "/" + self._path

    @property
    def parent(self) -> CapturedGroup:
        """The group above (the root's parent is the root)."""
        return self.file._groups[self._path.rpartition("/")[0]]

    def __repr__(self) -> str:
        return f'<captured group "{self.name}" ({len(self)} members)>'

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(f"group {self.name}", name)

    # ------------------------------------------------------------ names
    def _resolve(self, name: Any, call: str) -> str:
        if not isinstance(name, str):
            raise CaptureError(f"{call}: name must be a string, got {name!r}")
        path = name if name.startswith("/") else f"{self._path}/{name}"
        try:
            return check_name(path) if path.strip("/") else ""
        except ContributionError as err:
            raise CaptureError(f"{call}: {err}") from None

    def _children(self) -> list[str]:
        prefix = f"{self._path}/" if self._path else ""
        names = [*self.file._datasets, *self.file._groups]
        return sorted(
            {
                n[len(prefix) :]
                for n in names
                if n.startswith(prefix) and n != self._path and "/" not in n[len(prefix) :] and n
            }
        )

    def _make_parents(self, path: str, call: str) -> None:
        for g in parent_groups(path):
            if g in self.file._datasets:
                raise CaptureError(f"{call}: {g!r} is a dataset, not a group")
            if g not in self.file._groups:
                self.file._groups[g] = CapturedGroup(self.file, g)

    def _exists(self, path: str, call: str) -> None:
        if path in self.file._datasets or path in self.file._groups:
            raise CaptureError(f"{call}: {('/' + path)!r} exists already")

    # ------------------------------------------------------------ groups
    def create_group(
        self, name: str, track_order: Any = None, overwrite: bool = False, **kw: Any
    ) -> CapturedGroup:
        """As h5py's / zarr-python's ``create_group`` (missing groups on the way are made;
        zarr-python's ``overwrite=True`` replaces what has that name)."""
        call = f"create_group({name!r})"
        self.file._check_open(call)
        path = self._resolve(name, call)
        for key, value in kw.items():
            if value is not None and key != "attributes":
                raise CaptureError(f"{call}: option {key}={value!r} is not supported in a capture")
        if overwrite is True and path in self:
            del self[name]
        self._exists(path, call)
        self._make_parents(path, call)
        group = self.file._groups[path] = CapturedGroup(self.file, path)
        group.attrs.update(kw.get("attributes") or {})
        return group

    def require_group(self, name: str, **kw: Any) -> CapturedGroup:
        """As ``require_group``: the group of that name, made if missing."""
        call = f"require_group({name!r})"
        path = self._resolve(name, call)
        if path in self.file._datasets:
            raise CaptureError(f"{call}: {('/' + path)!r} is a dataset, not a group")
        return self.file._groups.get(path) or self.create_group(name)

    # ------------------------------------------------------------ datasets
    def create_dataset(
        self,
        name: str,
        shape: Any = None,
        dtype: Any = None,
        data: Any = None,
        **kw: Any,
    ) -> CapturedDataset:
        """As h5py's ``create_dataset``: ``shape``/``dtype`` or ``data``, and its storage
        options (``chunks``, ``compression``, ``compression_opts``, ``shuffle``,
        ``fletcher32``, ``maxshape``, ``fillvalue``), each honoured or refused by name.

        A scalar (``shape=()``) or variable-length text (``h5py.string_dtype()``)
        dataset is kept whole and stored by the committing process.

        Examples
        --------
        >>> f = CapturedFile("ckpt.h5")
        >>> f.create_dataset("u", shape=(4, 2), dtype="f4", chunks=(2, 2), compression="gzip")
        <captured dataset "/u": shape (4, 2), type "<f4">
        """
        call = f"create_dataset({name!r})"
        path = self._resolve(name, call)
        if not path:
            raise CaptureError(f"{call}: the root is a group")
        self.file._check_open(call)
        if kw.pop("overwrite", False) is True and path in self.file._datasets:
            del self[name]  # zarr-python's create_array(overwrite=True): replace it
        self._exists(path, call)
        if dtype is None and (
            isinstance(data, str)
            or (isinstance(data, list | tuple) and data and all(isinstance(v, str) for v in data))
        ):
            dtype = str  # Python text: h5py stores it as variable-length UTF-8
        if data is not None:
            arr = data if isinstance(data, np.ndarray) else np.asarray(data, dtype=_plain(dtype))
            shape = arr.shape if shape is None else shape
            dtype = arr.dtype if dtype is None else dtype
        if shape is None:
            raise CaptureError(f"{call}: give shape or data")
        if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
            shape = (int(shape),)
        if not isinstance(shape, tuple | list):
            raise CaptureError(f"{call}: shape {shape!r} is not a tuple of whole numbers")
        fill, opts = _options(call, kw)
        if dtype is None:
            dtype = np.float32 if not self.file._zarr else np.float64  # each library's default
        text = is_text_dtype(dtype)
        if isinstance(opts.get("chunks"), int | np.integer) and len(shape) == 1:
            opts["chunks"] = (int(opts["chunks"]),)  # zarr-python takes one size for 1-d
        if opts.get("chunks") == "auto":
            opts["chunks"] = True
        whole = text or tuple(shape) == ()
        if self.file._zarr and not whole and "chunks" not in opts and "shards" not in opts:
            opts["chunks"] = True  # zarr-python's own chunks ("auto"), as the user's code gets
        if whole:
            ds = self._whole_dataset(call, path, tuple(shape), dtype, text, fill, opts)
        else:
            spec = _spec(
                call,
                path,
                shape,
                dtype,
                {**opts, "fill_value": fill, "dims": opts.get("dims", False)},
            )
            try:
                self.file._backend.check_spec(spec)
                if spec.chunked and not isinstance(spec.chunks, tuple):
                    # the library guesses chunks from the shape at creation, not at the end
                    spec = replace(spec, chunks=self.file._backend.chunk_shape(spec))
            except StorageError as err:
                raise CaptureError(f"{call}: {err}") from None
            ds = CapturedDataset(self, path, spec)
            ds._dims_given = "dims" in opts
        self._make_parents(path, call)
        self.file._datasets[path] = ds
        if data is not None:
            ds[()] = data
        return ds

    def _whole_dataset(
        self,
        call: str,
        path: str,
        shape: tuple[int, ...],
        dtype: Any,
        text: bool,
        fill: Any,
        opts: dict[str, Any],
    ) -> CapturedDataset:
        kept = {k: v for k, v in opts.items() if k in VALUE_OPTIONS}
        refused = set(opts) - set(kept) - {"dims"}
        if refused or (kept and not shape):
            raise CaptureError(
                f"{call}: {', '.join(sorted(refused or kept))} on a "
                f"{'scalar' if not shape else 'text'} dataset is not supported in a capture"
            )
        if fill is not None:
            kept["fillvalue"] = fill
        if text:
            kept["encoding"] = text_encoding(dtype, call)
            if len(shape) > 1:
                raise CaptureError(f"{call}: variable-length text of more than one axis")
            value = np.empty(shape, dtype=object)
            value[...] = "" if fill is None else fill
            return CapturedDataset(
                self,
                path,
                None,
                value=value,
                text=True,
                fill=fill,
                dtype=np.dtype(object),
                options=kept,
            )
        try:
            dt = check_dtype(dtype, f"dataset {path!r}")
        except ContributionError as err:
            raise CaptureError(f"{call}: {err}") from None
        value = np.zeros((), dt)
        if fill is not None:
            value[()] = fill
        return CapturedDataset(
            self, path, None, value=value, text=False, fill=fill, dtype=dt, options=kept
        )

    def create_array(self, name: str, shape: Any = None, dtype: Any = None, **kw: Any) -> Any:
        """As zarr-python's ``create_array`` (``chunks``, ``shards``, ``compressors``,
        ``fill_value``, ``dimension_names``, ``attributes``)."""
        attrs = kw.pop("attributes", None) or {}
        data = kw.pop("data", None)
        ds = self.create_dataset(name, shape=shape, dtype=dtype, data=data, **kw)
        ds.attrs.update(attrs)
        return ds

    def require_dataset(
        self, name: str, shape: Any, dtype: Any, exact: bool = False, **kw: Any
    ) -> CapturedDataset:
        """As h5py's ``require_dataset``: the dataset of that name, made if missing."""
        call = f"require_dataset({name!r})"
        path = self._resolve(name, call)
        ds = self.file._datasets.get(path)
        if ds is None:
            return self.create_dataset(name, shape=shape, dtype=dtype, **kw)
        want = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
        if (
            ds.shape != want
            or (exact and ds.dtype != np.dtype(dtype))
            or not np.can_cast(np.dtype(dtype), ds.dtype)
        ):
            raise CaptureError(f"{call}: exists as {ds.shape} {ds.dtype}")
        return ds

    def create_dataset_like(self, name: str, other: Any, **kw: Any) -> CapturedDataset:
        """As h5py's ``create_dataset_like``: shape, dtype and storage options of ``other``."""
        opts = {
            k: getattr(other, k)
            for k in ("chunks", "compression", "compression_opts", "fillvalue")
            if getattr(other, k, None) is not None
        }
        for k in ("shuffle", "fletcher32"):
            if getattr(other, k, False):
                opts[k] = True
        if getattr(other, "maxshape", None) not in (None, tuple(other.shape)):
            opts["maxshape"] = other.maxshape
        return self.create_dataset(name, shape=other.shape, dtype=other.dtype, **{**opts, **kw})

    # ------------------------------------------------------------ the mapping
    def __getitem__(self, name: str) -> Any:
        path = self._resolve(name, f"[{name!r}]")
        node: CapturedDataset | CapturedGroup | None = self.file._datasets.get(path)
        if node is None:
            node = self.file._groups.get(path)
        if node is None:
            raise CaptureKeyError(
                f"[{name!r}]: no such dataset or group in this capture ({self._children()})"
            )
        return node

    def get(
        self, name: str, default: Any = None, getclass: bool = False, getlink: bool = False
    ) -> Any:
        """As h5py's ``get``: the member, or ``default``."""
        if getlink:
            raise unsupported(f"group {self.name}", "get(getlink=True)")
        try:
            node = self[name]
        except CaptureError:
            return default
        if getclass:
            return type(node)
        return node

    def __setitem__(self, name: str, data: Any) -> None:
        if isinstance(data, CapturedDataset | CapturedGroup):
            raise CaptureError(f"[{name!r}] = {data!r}: links are not supported in a capture")
        self.create_dataset(name, data=data)

    def __delitem__(self, name: str) -> None:
        path = self._resolve(name, f"del [{name!r}]")
        if path not in self.file._datasets and path not in self.file._groups:
            raise CaptureError(f"del [{name!r}]: no such dataset or group")
        for table in (self.file._datasets, self.file._groups):
            for key in [k for k in table if k == path or k.startswith(path + "/")]:
                del table[key]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            path = self._resolve(name, "in")
        except CaptureError:
            return False
        return path in self.file._datasets or path in self.file._groups

    def __iter__(self) -> Iterator[str]:
        return iter(self._children())

    def __len__(self) -> int:
        return len(self._children())

    def __bool__(self) -> bool:
        return True

    def keys(self) -> list[str]:
        """Names of the members."""
        return self._children()

    def values(self) -> list[Any]:
        """The members."""
        return [self[n] for n in self._children()]

    def items(self) -> list[tuple[str, Any]]:
        """``(name, member)`` pairs."""
        return [(n, self[n]) for n in self._children()]

    def zeros(self, name: str, shape: Any, **kw: Any) -> CapturedDataset:
        """zarr-python: a new array reading 0 where unwritten."""
        return self.create_array(name, shape=shape, **{"fill_value": 0, **kw})

    def ones(self, name: str, shape: Any, **kw: Any) -> CapturedDataset:
        """zarr-python: a new array reading 1 where unwritten."""
        return self.create_array(name, shape=shape, **{"fill_value": 1, **kw})

    def full(self, name: str, shape: Any, fill_value: Any, **kw: Any) -> CapturedDataset:
        """zarr-python: a new array reading ``fill_value`` where unwritten."""
        return self.create_array(name, shape=shape, fill_value=fill_value, **kw)

    def empty(self, name: str, shape: Any, **kw: Any) -> CapturedDataset:
        """zarr-python: a new array (unwritten values read its fill value)."""
        return self.create_array(name, shape=shape, **kw)

    def array(self, name: str, data: Any, **kw: Any) -> CapturedDataset:
        """zarr-python: a new array holding ``data``."""
        return self.create_array(name, data=data, **kw)

    def array_keys(self) -> list[str]:
        """zarr-python: names of the arrays."""
        return [n for n, v in self.items() if isinstance(v, CapturedDataset)]

    def group_keys(self) -> list[str]:
        """zarr-python: names of the groups."""
        return [n for n, v in self.items() if isinstance(v, CapturedGroup)]

    def arrays(self) -> list[tuple[str, Any]]:
        """zarr-python: ``(name, array)`` pairs."""
        return [(n, v) for n, v in self.items() if isinstance(v, CapturedDataset)]

    def groups(self) -> list[tuple[str, Any]]:
        """zarr-python: ``(name, group)`` pairs."""
        return [(n, v) for n, v in self.items() if isinstance(v, CapturedGroup)]

    def members(self) -> list[tuple[str, Any]]:
        """zarr-python: ``(name, member)`` pairs."""
        return self.items()

    def visit(self, func: Any) -> Any:
        """As h5py's ``visit``: ``func(name)`` for every member below, until it returns a value."""
        return self.visititems(lambda name, _: func(name))

    def visititems(self, func: Any) -> Any:
        """As h5py's ``visititems``: ``func(name, member)`` below this group, in name order."""
        prefix = f"{self._path}/" if self._path else ""
        names = sorted(
            n
            for n in [*self.file._datasets, *self.file._groups]
            if n.startswith(prefix) and n and n != self._path
        )
        for n in names:
            node = self.file._datasets[n] if n in self.file._datasets else self.file._groups[n]
            out = func(n[len(prefix) :], node)
            if out is not None:
                return out
        return None

    def flush(self) -> None:
        """Nothing to do: the capture writes when its block ends."""

    def close(self) -> None:
        """Accepted for h5py compatibility; the capture commits when its ``with`` block ends."""


def _plain(dtype: Any) -> Any:
    return None if dtype is None or is_text_dtype(dtype) else dtype


class CapturedFile(CapturedGroup):
    """What ``capture()`` yields: the root group, h5py's ``File`` / zarr-python's root ``Group``."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        mode: str = "w",
        format: str = defaults.FORMAT,
        shared: bool = False,
    ) -> None:
        if mode not in ("w", "w-", "x"):
            raise CaptureError(f"mode {mode!r}: a capture creates a new checkpoint; use 'w'")
        super().__init__(None, "")
        self._file = self
        self.filename = os.fspath(target)
        self.mode = "r+"
        #: The committed :class:`~orchestrator.Checkpoint`, once the block ended.
        self.checkpoint: Checkpoint | None = None
        self._backend = get_backend(format)
        self._zarr = self._backend.name == "zarr"
        self._shared = shared
        self._closed = False  # the block ended: later writes would be lost, so refused
        self._datasets: dict[str, CapturedDataset] = {}
        self._groups: dict[str, CapturedGroup] = {"": self}

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise CaptureError(
                f"{call}: the capture has ended (its checkpoint is written); h5py refuses "
                "a closed file too"
            )

    def __enter__(self) -> CapturedFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        """Leaving ``with f:`` inside the capture closes nothing: the capture commits."""

    def specs_and_contributions(
        self, client: int
    ) -> tuple[dict[str, DatasetSpec], dict[str, Contribution]]:
        """What the stage needs: a spec per dataset of rows and this client's contributions."""
        specs, cons = {}, {}
        for name, ds in self._datasets.items():
            spec = ds.spec(self._dims(ds))
            if spec is None:
                continue
            specs[name] = spec
            c = ds.contribution(client)
            if c is not None:
                cons[name] = c
        return specs, cons

    def _dims(self, ds: CapturedDataset) -> Any:
        """Dimension names: as given (zarr), from attached scales (h5py), or none."""
        if getattr(ds, "_dims_given", False):
            return ds._spec.dims if ds._spec is not None else False
        names: list[str | None] = [None] * ds.ndim
        for axis, scale in ds._scales.items():
            names[axis] = scale.name.rsplit("/", 1)[-1]
        if ds.is_scale and ds.ndim == 1:
            names[0] = ds.name.rsplit("/", 1)[-1]
        return tuple(names) if any(n is not None for n in names) else False

    def values_(self) -> dict[str, Any]:
        """Scalar and text datasets, whole (``WriteOptions(values=...)``)."""
        return {
            n: {"data": ds.whole_value(), "text": ds._text, "dims": False, **ds._options}
            for n, ds in self._datasets.items()
            if ds._spec is None
        }

    def all_groups(self) -> list[str]:
        """Every group made (empty ones too)."""
        return sorted(g for g in self._groups if g)

    def all_attrs(self) -> dict[str, dict[str, Any]]:
        """``{"": file attributes, group or dataset: its attributes}`` for the stage."""
        out = {p: dict(g.attrs) for p, g in self._groups.items() if g.attrs}
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
    f = CapturedFile(target, mode, format=format, shared=clients > 1)
    escaped = os.fspath(target).replace("{", "{{").replace("}", "}}")
    name = f"capture:{f.filename}"  # every capture of one target agrees on it: one stage
    try:
        yield f
    except BaseException as err:
        f._closed = True
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
    f._closed = True  # what the block wrote is final: later writes are refused, not lost
    specs, cons = f.specs_and_contributions(client)
    if not f._datasets and not f.all_groups() and not f.attrs:
        raise CaptureError(
            f"capture({f.filename!r}): nothing was created (no dataset, group or attribute)"
        )
    tree: dict[str, Any] = {"groups": f.all_groups(), "values": f.values_() or None}
    attrs = f.all_attrs()
    for where, given in (stage_options.get("attrs") or {}).items():  # the caller's win
        attrs[where.strip("/")] = {**attrs.get(where.strip("/"), {}), **given}
    tree["attrs"] = attrs or None
    try:
        write = write.updated(**tree)
    except ContributionError as err:
        raise CaptureError(f"capture({f.filename!r}): {err}") from None
    opts = StageOptions(
        target=escaped,
        clients=clients,
        write=write,
        cluster=cluster,
        scheduler=scheduler,
        shapes={n: s.shape for n, s in specs.items()},
        specs=specs,
    )

    def record(step: int, client: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {n: (c.rows, c.values) for n, c in cons.items()}

    record.__name__ = record.__qualname__ = name
    result = OutputStage(record, opts)(0, client)
    f.checkpoint = result.result() if isinstance(result, Future) else result
