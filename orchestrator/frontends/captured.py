"""Datasets and attributes of a capture: h5py's and zarr-python's spelling, recorded.

A :class:`CapturedDataset` records the writes made to it — whole rows,
parts of rows, strided or fancy row selections — and turns them into this
client's :class:`~orchestrator.contributions.Contribution` when the capture
ends (:meth:`CapturedDataset.contribution`). Scalar (0-d) datasets and
variable-length strings are *whole* datasets: kept in full and stored by the
committing process (``WriteOptions(values=...)``). Every h5py or zarr-python
name a capture does not have raises :class:`~orchestrator.errors.CaptureUnsupported`
naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..contributions import Contribution, ContributionError, DatasetSpec, cast_exactly, check_attr
from ..errors import CaptureError, CaptureKeyError, CaptureUnsupported

__all__ = ["CapturedAttrs", "CapturedDataset", "is_text_dtype", "unsupported"]

#: keywords of ``create_dataset`` / ``create_array`` a capture honours (others are refused)
STORAGE_KEYWORDS = {
    "chunks",
    "compression",
    "compression_opts",
    "shuffle",
    "fletcher32",
    "maxshape",
    "fillvalue",
    "fill_value",
    "dimension_names",
    "shards",
    "compressors",
}


def unsupported(what: str, name: str) -> CaptureUnsupported:
    """The error for an h5py / zarr-python name a capture lacks (``what``: the object).

    Examples
    --------
    >>> str(unsupported("dataset /u", "id")).split(":")[0]
    'dataset /u.id'
    """
    return CaptureUnsupported(
        f"{what}.{name}: not supported inside a capture (it records a checkpoint's writes; "
        "read the committed checkpoint with open_checkpoint())"
    )


def is_text_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` asks for variable-length text (``str``, an object dtype, or
    ``h5py.string_dtype()``: :func:`text_encoding` says which encoding, or refuses it).

    Examples
    --------
    >>> is_text_dtype(str), is_text_dtype("S5")
    (True, False)
    """
    if dtype is str:
        return True
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return False
    if dt.kind == "O":
        return True
    return dt.kind == "U" and dt.itemsize == 0


def text_encoding(dtype: Any, call: str) -> str:
    """The encoding of a variable-length text dtype; other object dtypes (h5py's
    ``vlen_dtype``, ``ref_dtype``) are refused by name.

    Examples
    --------
    >>> text_encoding(str, "create_dataset('t')")
    'utf-8'
    """
    if dtype is str:
        return "utf-8"
    dt = np.dtype(dtype)
    if dt.kind == "U":
        return "utf-8"
    vlen = (dt.metadata or {}).get("vlen")
    if vlen is str:
        return "utf-8"
    if vlen is bytes:
        return "ascii"
    raise CaptureError(
        f"{call}: dtype {dt} with metadata {dict(dt.metadata or {})} (variable-length arrays, "
        "references, plain objects) is not supported in a capture; text is "
        "(h5py.string_dtype())"
    )


def _text_item(value: Any, op: str, encoding: str = "utf-8") -> str:
    """One element of a text dataset as text (bytes of an ASCII dataset kept as they are:
    each byte one character, as :func:`~orchestrator.plugins.hdf5_tree.write_tree` reads them)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bytes | np.bytes_):
        if encoding == "ascii":
            return bytes(value).decode("latin-1")
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise CaptureError(f"{op}: {value!r} is not UTF-8 text") from None
    if isinstance(value, str):
        return str(value)
    raise CaptureError(f"{op}: a {type(value).__name__} is not text")


def _attr_value(value: Any) -> Any:
    """An attribute value as it will be stored (h5py's conversions, NumPy dtypes kept)."""
    if isinstance(value, np.str_):
        return str(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        return value.tolist()
    if isinstance(value, tuple):
        value = list(value)
    return value


class CapturedAttrs(dict[str, Any]):
    """``.attrs``: h5py's ``AttributeManager`` spelling, values kept with their NumPy dtype."""

    def __init__(self, owner: str) -> None:
        super().__init__()
        self._owner = owner

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key or "\0" in key:
            raise CaptureError(
                f"{self._owner}.attrs[{key!r}]: a name must be a non-empty string without NUL"
            )
        value = _attr_value(value)
        try:
            check_attr(f"{self._owner}.attrs[{key!r}]", value)
        except ContributionError as err:  # what h5py or Zarr would refuse, or read back changed
            raise CaptureError(str(err)) from None
        super().__setitem__(key, value)

    def create(self, name: str, data: Any, shape: Any = None, dtype: Any = None) -> None:
        """As h5py's ``attrs.create``: ``data`` as ``dtype``, reshaped to ``shape``."""
        value = np.asarray(data, dtype=dtype) if dtype is not None else data
        if shape is not None:
            value = np.asarray(value).reshape(shape)
        self[name] = value

    def modify(self, name: str, value: Any) -> None:
        """As h5py's ``attrs.modify``."""
        self[name] = value

    def update(self, *args: Any, **kwargs: Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(f"{self._owner}.attrs", name)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise CaptureKeyError(f"del {self._owner}.attrs[{key!r}]: no such attribute")
        super().__delitem__(key)

    def asdict(self) -> dict[str, Any]:
        """As zarr-python's ``attrs.asdict``."""
        return dict(self)

    def put(self, values: dict[str, Any]) -> None:
        """As zarr-python's ``attrs.put``: replace every attribute."""
        self.clear()
        self.update(values)


def _norm_key(key: Any, ndim: int, op: str) -> tuple[Any, ...]:
    """``key`` as one entry per axis (Ellipsis expanded, missing axes whole)."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise CaptureError(f"{op}: more than one Ellipsis")
    if Ellipsis in [k for k in key if not isinstance(k, np.ndarray | list)]:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
    if len(key) > ndim:
        raise CaptureError(f"{op}: {len(key)} indices for {ndim} axes")
    return key + (slice(None),) * (ndim - len(key))


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


class _Write:
    """One recorded write: rows, whether the row axis was an integer (dropped), the rest of
    the selection (integers and slices) and the values, cast."""

    __slots__ = ("drop", "rest", "rows", "values", "whole")

    def __init__(
        self, rows: np.ndarray, drop: bool, rest: tuple[Any, ...], values: np.ndarray, whole: bool
    ) -> None:
        self.rows, self.drop, self.rest, self.values, self.whole = rows, drop, rest, values, whole


class _Dim:
    """``ds.dims[i]``: the scales attached to one axis (h5py's ``DimensionProxy``)."""

    def __init__(self, ds: CapturedDataset, axis: int) -> None:
        self._ds, self._axis = ds, axis

    def attach_scale(self, scale: Any) -> None:
        """Attach ``scale`` (a 1-d dataset of this capture as long as the axis)."""
        op = f"{self._ds.name}.dims[{self._axis}].attach_scale"
        if not isinstance(scale, CapturedDataset):
            raise CaptureError(f"{op}: the scale must be a dataset of this capture")
        if scale.ndim != 1 or scale.shape[0] != self._ds.shape[self._axis]:
            raise CaptureError(
                f"{op}({scale.name}): a scale of axis {self._axis} must be 1-d and "
                f"{self._ds.shape[self._axis]} long, got shape {scale.shape}"
            )
        self._ds._scales[self._axis] = scale
        scale._is_scale = True

    def detach_scale(self, scale: Any) -> None:
        """Detach ``scale``."""
        if self._ds._scales.get(self._axis) is scale:
            del self._ds._scales[self._axis]

    @property
    def label(self) -> str:
        """The axis' name: its scale's (labels without a scale are not stored)."""
        scale = self._ds._scales.get(self._axis)
        return "" if scale is None else scale.name.rsplit("/", 1)[-1]

    @label.setter
    def label(self, value: str) -> None:
        raise CaptureError(
            f"{self._ds.name}.dims[{self._axis}].label = {value!r}: labels without a scale "
            "are not stored; make a 1-d dataset of that name a scale (make_scale) and attach it"
        )

    def __len__(self) -> int:
        return int(self._axis in self._ds._scales)

    def __getitem__(self, i: Any) -> CapturedDataset:
        scale = self._ds._scales.get(self._axis)
        if scale is None or i not in (0, scale.name.rsplit("/", 1)[-1]):
            raise CaptureError(f"{self._ds.name}.dims[{self._axis}][{i!r}]: no such scale")
        return scale

    def keys(self) -> list[str]:
        """Names of the attached scales."""
        return [self.label] if len(self) else []

    def values(self) -> list[CapturedDataset]:
        """The attached scales."""
        return [self[0]] if len(self) else []


class _Dims:
    """``ds.dims`` (h5py's ``DimensionManager``)."""

    def __init__(self, ds: CapturedDataset) -> None:
        self._ds = ds

    def __getitem__(self, axis: int) -> _Dim:
        if not isinstance(axis, int) or not 0 <= axis < self._ds.ndim:
            raise CaptureError(f"{self._ds.name}.dims[{axis!r}]: no such axis")
        return _Dim(self._ds, axis)

    def __len__(self) -> int:
        return self._ds.ndim

    def __iter__(self) -> Iterator[_Dim]:
        return (_Dim(self._ds, i) for i in range(self._ds.ndim))

    def create_scale(self, ds: Any, name: str = "") -> None:
        """h5py's older spelling of ``ds.make_scale(name)``."""
        ds.make_scale(name)


class CapturedDataset:
    """One dataset of a capture: h5py's ``Dataset`` / zarr-python's ``Array``, recording writes.

    Examples
    --------
    >>> from orchestrator.frontends.capturing import CapturedFile
    >>> f = CapturedFile("ckpt.h5")
    >>> u = f.create_dataset("state/u", shape=(4, 2), dtype="f4", chunks=(2, 2))
    >>> u[1:3, 0] = 5.0
    >>> u[1:3].tolist()  # read back, as h5py would, before the checkpoint is written
    [[5.0, 0.0], [5.0, 0.0]]
    """

    def __init__(self, group: Any, path: str, spec: DatasetSpec | None, **whole: Any) -> None:
        self._group = group
        self._path = path
        self._spec = spec
        self.attrs = CapturedAttrs(f"/{path}")
        self._writes: list[_Write] = []
        self._scales: dict[int, CapturedDataset] = {}
        self._is_scale = False
        self._dims_given = False  # dimension_names= given (zarr): else from attached scales
        self._whole: np.ndarray | None = None
        if spec is None:  # a scalar or variable-length text: kept whole
            self._whole = whole["value"]
            self._options: dict[str, Any] = whole.get("options", {})
            self._text = whole["text"]
            self._fill = whole["fill"]
            self.shape: tuple[int, ...] = self._whole.shape
            self.dtype = whole["dtype"]
        else:
            self.shape = spec.shape
            self.dtype = spec.dtype

    # -------------------------------------------------------------- what h5py shows
    @property
    def name(self) -> str:
        """The dataset's path, from the root (``/state/u``)."""
        return "/" + self._path

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of values."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of the values."""
        return self.size * self.dtype.itemsize

    def __bool__(self) -> bool:  # as h5py: an open dataset is true, whatever its length
        return True

    def __len__(self) -> int:
        if not self.shape:
            raise CaptureError(f"len({self.name}): a scalar dataset has no length")
        return self.shape[0]

    def __repr__(self) -> str:
        return f'<captured dataset "{self.name}": shape {self.shape}, type "{self.dtype.str}">'

    def _opt(self, field: str) -> Any:
        return None if self._spec is None else getattr(self._spec, field)

    chunks = property(lambda self: self._opt("chunks"), doc="Chunk shape as given.")
    compression = property(lambda self: self._opt("compression"), doc="Compression as given.")
    compression_opts = property(lambda self: self._opt("compression_opts"), doc="Its level.")
    shuffle = property(lambda self: bool(self._opt("shuffle")), doc="Shuffle filter as given.")
    fletcher32 = property(lambda self: bool(self._opt("fletcher32")), doc="Checksum filter.")
    shards = property(lambda self: self._opt("shards"), doc="Zarr shards as given.")

    @property
    def maxshape(self) -> tuple[Any, ...]:
        """Largest shape (h5py: the shape itself unless given)."""
        m = self._opt("maxshape")
        return self.shape if m is None else m

    @property
    def fillvalue(self) -> Any:
        """Value of rows never written."""
        return self._fill if self._spec is None else self._spec.fill_value

    fill_value = fillvalue

    @property
    def dims(self) -> _Dims:
        """Dimension scales, as h5py's ``ds.dims``."""
        return _Dims(self)

    @property
    def file(self) -> Any:
        """The capture's file."""
        return self._group.file

    @property
    def parent(self) -> Any:
        """The group holding the dataset."""
        return self._group.file._groups[self._path.rpartition("/")[0]]

    def make_scale(self, name: str = "") -> None:
        """Make this 1-d dataset a dimension scale (its own name names the dimension)."""
        if self.ndim != 1 or self._spec is None:
            raise CaptureError(f"{self.name}.make_scale(): a scale must be a 1-d dataset")
        self._is_scale = True

    @property
    def is_scale(self) -> bool:
        """Whether the dataset is a dimension scale."""
        return self._is_scale

    def flush(self) -> None:
        """Nothing to do: the capture writes when its block ends."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(f"dataset {self.name}", name)

    # -------------------------------------------------------------- writes
    def _check_open(self, op: str) -> None:
        if self._group.file._closed:
            raise CaptureError(
                f"{op}: the capture has ended (its checkpoint is written); h5py refuses "
                "writes to a closed file too"
            )

    def __setitem__(self, key: Any, value: Any) -> None:
        op = f"{self.name}[{_describe_key(key)}] = ..."
        self._check_open(op)
        if self._whole is not None:
            self._set_whole(key, value, op)
            return
        key = _norm_key(key, self.ndim, op)
        rows, drop = self._row_selection(key[0], op)
        rest = tuple(self._axis_key(k, i + 1, op) for i, k in enumerate(key[1:]))
        target = np.broadcast_to(np.empty((), np.uint8), (rows.size, *self.shape[1:]))
        want = target[(0 if drop else slice(None), *rest)].shape
        v = self._values(value, op)
        if v.shape != want:
            try:
                v = np.broadcast_to(v, want)
            except ValueError:
                raise CaptureError(f"{op}: value of shape {v.shape} does not fit {want}") from None
        try:  # every value kept, or an error now: h5py would wrap 1000 into int8 as -24
            exact = cast_exactly(v, self.dtype, op) if self.dtype.kind in "biufc" else v
        except ContributionError as err:
            raise CaptureError(str(err)) from None
        whole = all(k == slice(None) for k in rest)
        self._writes.append(_Write(rows, drop, rest, np.array(exact), whole))

    def _values(self, value: Any, op: str) -> np.ndarray:
        if self.dtype.kind in "SUV":  # records from tuples, text into bytes: as h5py converts
            try:
                return np.asarray(value, dtype=self.dtype)
            except (TypeError, ValueError, UnicodeEncodeError) as err:
                raise CaptureError(f"{op}: {err}") from None
        v = np.asarray(value)
        if v.dtype.kind not in "biufc":  # numbers cast as h5py does, each value kept exactly
            raise CaptureError(f"{op}: cannot store {v.dtype} values in {self.dtype}")
        return v

    def _row_selection(self, k: Any, op: str) -> tuple[np.ndarray, bool]:
        n = self.shape[0]
        if isinstance(k, slice):
            if k.step is not None and k.step < 1:
                raise CaptureError(f"{op}: a step must be >= 1 (h5py refuses others too)")
            return np.arange(*k.indices(n), dtype=np.int64), False
        if isinstance(k, int | np.integer) and not isinstance(k, bool):
            r = int(k) + (n if k < 0 else 0)
            if not 0 <= r < n:
                raise CaptureError(f"{op}: row {int(k)} is outside 0..{n - 1}")
            return np.array([r], dtype=np.int64), True
        arr = np.asarray(k)
        if arr.dtype == bool:
            if arr.shape != (n,):
                raise CaptureError(f"{op}: a boolean mask must have shape ({n},), got {arr.shape}")
            return np.flatnonzero(arr).astype(np.int64), False
        if arr.ndim == 1 and (arr.size == 0 or arr.dtype.kind in "iu"):
            got = arr.astype(np.int64)
            got = np.where(got < 0, got + n, got)
            if got.size and (got.min() < 0 or got.max() >= n):
                bad = int(arr[(got < 0) | (got >= n)][0])
                raise CaptureError(f"{op}: row {bad} is outside 0..{n - 1}")
            return got, False
        raise CaptureError(f"{op}: unsupported selection ({type(k).__name__})")

    def _axis_key(self, k: Any, axis: int, op: str) -> Any:
        n = self.shape[axis]
        if isinstance(k, slice):
            if k.step is not None and k.step < 1:
                raise CaptureError(f"{op}: a step must be >= 1 (h5py refuses others too)")
            start, stop, step = k.indices(n)
            if (start, stop, step) == (0, n, 1):
                return slice(None)
            return slice(start, stop, step)
        if isinstance(k, int | np.integer) and not isinstance(k, bool):
            i = int(k) + (n if k < 0 else 0)
            if not 0 <= i < n:
                raise CaptureError(f"{op}: index {int(k)} is outside 0..{n - 1} on axis {axis}")
            return i
        raise CaptureError(
            f"{op}: index arrays on axis {axis} are not supported in a capture; write whole "
            "rows or slices"
        )

    def _set_whole(self, key: Any, value: Any, op: str) -> None:
        assert self._whole is not None
        try:
            if self._text:
                target = self._whole[key]
                if isinstance(target, np.ndarray):  # several elements: each one text
                    items = np.empty(np.shape(value), dtype=object)
                    flat = np.asarray(value, dtype=object).reshape(-1)
                    enc = self._options.get("encoding", "utf-8")
                    items.reshape(-1)[:] = [_text_item(v, op, enc) for v in flat]
                    self._whole[key] = items
                else:
                    self._whole[key] = _text_item(value, op, self._options.get("encoding", "utf-8"))
            else:
                v = cast_exactly(np.asarray(value), self.dtype, op)
                self._whole[key] = v
        except ContributionError as err:
            raise CaptureError(str(err)) from None
        except (IndexError, ValueError, TypeError) as err:
            raise CaptureError(f"{op}: {err}") from None

    def write_direct(self, source: Any, source_sel: Any = None, dest_sel: Any = None) -> None:
        """As h5py's ``write_direct``: ``self[dest_sel] = source[source_sel]``."""
        src = np.asarray(source)
        self[Ellipsis if dest_sel is None else dest_sel] = src[
            Ellipsis if source_sel is None else source_sel
        ]

    def read_direct(self, dest: Any, source_sel: Any = None, dest_sel: Any = None) -> None:
        """As h5py's ``read_direct``: ``dest[dest_sel] = self[source_sel]``."""
        dest[Ellipsis if dest_sel is None else dest_sel] = self[
            Ellipsis if source_sel is None else source_sel
        ]

    def append(self, data: Any, axis: int = 0) -> tuple[int, ...]:
        """As zarr-python's ``Array.append`` along the rows."""
        if axis != 0:
            raise CaptureError(f"{self.name}.append(axis={axis}): only along the rows (axis 0)")
        data = np.asarray(data)
        n = self.shape[0]
        self.resize((n + data.shape[0], *self.shape[1:]))
        self[n:] = data
        return self.shape

    def resize(self, size: Any, axis: int | None = None) -> None:
        """As h5py's ``resize`` (within ``maxshape``) and zarr-python's (any shape)."""
        op = f"{self.name}.resize({size!r}" + ("" if axis is None else f", axis={axis}") + ")"
        self._check_open(op)
        if self._spec is None:
            self._resize_whole(size, axis, op)
            return
        if axis is not None:
            if not isinstance(axis, int) or not 0 <= axis < self.ndim:
                raise CaptureError(f"{op}: no axis {axis!r}")
            shape = list(self.shape)
            shape[axis] = size
            size = tuple(shape)
        if isinstance(size, int | np.integer):
            size = (int(size),)
        size = tuple(size)
        if len(size) != self.ndim or not all(
            isinstance(s, int | np.integer) and s >= 0 for s in size
        ):
            raise CaptureError(f"{op}: give {self.ndim} sizes >= 0")
        if self._group.file._zarr:
            maxshape = None
        else:
            maxshape = self._spec.maxshape
            if maxshape is None:
                raise CaptureError(
                    f"{op}: the dataset was created without maxshape; h5py cannot resize it either"
                )
        if maxshape is not None:
            for s, m in zip(size, maxshape, strict=True):
                if m is not None and s > m:
                    raise CaptureError(f"{op}: beyond maxshape {maxshape}")
        if size[1:] != self.shape[1:] and self._writes:
            raise CaptureError(f"{op}: only the rows may change once the dataset is written")
        if size[0] < self.shape[0]:  # shrinking discards the rows cut off, as in h5py
            self._truncate(size[0])
        self._spec = _respec(self._spec, size)
        self.shape = self._spec.shape

    def _truncate(self, n: int) -> None:
        kept = []
        for w in self._writes:
            keep = w.rows < n
            if keep.all():
                kept.append(w)
            elif keep.any() and not w.drop:
                kept.append(_Write(w.rows[keep], False, w.rest, w.values[keep], w.whole))
        self._writes = kept

    def _resize_whole(self, size: Any, axis: int | None, op: str) -> None:
        """Grow or shrink a text dataset along its one axis, within its maxshape."""
        assert self._whole is not None
        n = size[0] if isinstance(size, tuple | list) and len(size) == 1 else size
        if self._whole.ndim != 1 or axis not in (None, 0) or not isinstance(n, int | np.integer):
            raise CaptureError(f"{op}: a scalar has no shape to change; text one axis")
        maxshape = self._options.get("maxshape")
        if maxshape is None or (maxshape[0] is not None and n > maxshape[0]):
            raise CaptureError(f"{op}: beyond maxshape {maxshape} (h5py refuses it too)")
        self._check_open(op)
        grown = np.empty((int(n),), dtype=self._whole.dtype)
        grown[...] = "" if self._fill is None else self._fill
        keep = min(int(n), self._whole.shape[0])
        grown[:keep] = self._whole[:keep]
        self._whole = grown
        self.shape = grown.shape

    # -------------------------------------------------------------- reads
    def __getitem__(self, key: Any) -> Any:
        op = f"{self.name}[{_describe_key(key)}]"
        if self._whole is not None:
            try:
                return self._whole[key]
            except (IndexError, ValueError, TypeError) as err:
                raise CaptureError(f"{op}: {err}") from None
        if self._group.file._shared:
            raise CaptureError(
                f"{op}: reading is not supported in a capture shared by several clients (the "
                "others' rows are not here); read the committed checkpoint with "
                "open_checkpoint()"
            )
        if self.nbytes > 1 << 30:
            raise CaptureError(f"{op}: reads of datasets over 1 GiB are not supported here")
        try:
            return self._dense()[key]
        except (IndexError, ValueError, TypeError) as err:
            raise CaptureError(f"{op}: {err}") from None

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[()] if self._whole is not None else self[...]
        return np.asarray(out, dtype=dtype)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def _dense(self) -> np.ndarray:
        assert self._spec is not None
        out = np.empty(self.shape, self.dtype)
        out[...] = self._spec.fill_value
        for w in self._writes:
            keep = w.rows < self.shape[0]
            if not keep.all():
                if w.drop:
                    continue
                w = _Write(w.rows[keep], False, w.rest, w.values[keep], w.whole)
            out[(int(w.rows[0]) if w.drop else w.rows, *w.rest)] = w.values
        return out

    # -------------------------------------------------------------- the stage
    def spec(self, dims: Any) -> DatasetSpec | None:
        """The dataset's spec with its dimension names (None for a whole dataset)."""
        if self._spec is None:
            return None
        from dataclasses import replace

        try:
            return replace(self._spec, dims=dims)
        except ContributionError as err:
            raise CaptureError(str(err)) from None

    def whole_value(self) -> Any:
        """A whole dataset's value, as :func:`orchestrator.specs.check_values` takes it."""
        assert self._whole is not None
        if self._text:
            items = ["" if v is None else str(v) for v in self._whole.reshape(-1).tolist()]
            return items[0] if self._whole.ndim == 0 else items
        return self._whole

    def contribution(self, client: int) -> Contribution | None:
        """The recorded writes as one contribution (a row written twice keeps the last value;
        rows written in part read the fill value elsewhere, as in h5py)."""
        if not self._writes or self._spec is None:
            return None
        n = self.shape[0]
        if all(w.whole for w in self._writes):
            rows = np.concatenate([w.rows for w in self._writes])
            values = np.concatenate(
                [w.values.reshape(w.rows.size, *self.shape[1:]) for w in self._writes]
            )
            last = rows.size - 1 - np.unique(rows[::-1], return_index=True)[1]
            rows, values = rows[last], values[last]
        else:  # parts of rows: assembled here, the rest of each row the fill value
            rows = np.unique(np.concatenate([w.rows for w in self._writes]))
            values = np.empty((rows.size, *self.shape[1:]), self.dtype)
            values[...] = self._spec.fill_value
            for w in self._writes:
                pos = np.searchsorted(rows, w.rows)
                values[(int(pos[0]) if w.drop else pos, *w.rest)] = w.values
        keep = rows < n  # rows beyond a shrinking resize are gone, as in h5py
        if not keep.all():
            rows, values = rows[keep], values[keep]
        if not rows.size:
            return None
        return Contribution(client, rows, values)


def _respec(spec: DatasetSpec, shape: tuple[int, ...]) -> DatasetSpec:
    from dataclasses import replace

    try:
        return replace(spec, shape=shape)
    except ContributionError as err:
        raise CaptureError(str(err)) from None
