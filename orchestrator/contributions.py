"""Contributions of a write stage: which client holds which rows, and replicas."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .checks import is_int
from .errors import ContributionError
from .specs import check_chunks, check_dims, check_dtype, check_name, check_storage

__all__ = [
    "Contribution",
    "ContributionError",
    "DatasetSpec",
    "Holdings",
    "cast_exactly",
    "cast_problem",
    "check_attr",
    "check_attrs",
    "gather",
]


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset of shape ``(n_rows, ...)``, a fixed dtype, and how it is stored.

    ``name`` may hold groups (``"state/u"``). The dtype holds booleans,
    integers, floats, complex numbers, fixed-length strings or structured
    records of them (:func:`~orchestrator.specs.check_dtype`). Rows no
    contribution writes (``allow_missing``) read ``fill_value``, which must be
    a value of the dtype as given (None: 0, as in h5py and zarr).

    The keyword-only fields are the storage options users give h5py and
    zarr-python; each is honoured by the format or refused by it, by name:

    - ``dims``: a name per axis (None: ``<leaf>_dim<axis>``; False: none), stored
      as Zarr ``dimension_names`` and as netCDF-4 dimension scales in HDF5;
    - ``chunks`` (a tuple, or True for the library's guess), ``compression``
      (``"gzip"``, ``"lzf"``, ``"zstd"``, ``"blosc"`` or a gzip level),
      ``compression_opts``, ``shuffle``, ``fletcher32``, ``maxshape`` (HDF5: a
      growable dataset), as in ``h5py.Group.create_dataset``;
    - ``shards`` and ``compressors`` (Zarr), as in ``zarr.Group.create_array``.

    Without any of them a dataset is stored in the layout the engine writes
    fastest (contiguous HDF5, one shard per stripe in Zarr). Each writer owns
    whole chunks and shards: stripes are cut at chunk boundaries.

    Examples
    --------
    >>> spec = DatasetSpec("u", (10, 3), "float64")
    >>> spec.n_rows, spec.row_bytes, spec.nbytes, spec.dims
    (10, 24, 240, ('u_dim0', 'u_dim1'))
    >>> DatasetSpec("state/p", (10,), "f4", chunks=(5,), compression="gzip").chunked
    True
    >>> DatasetSpec("n", (4,), "int32", fill_value=float("nan"))
    Traceback (most recent call last):
    ...
    orchestrator.errors.ContributionError: dataset 'n': fill_value: value nan does not fit ...
    """

    name: str
    shape: tuple[int, ...]
    dtype: Any
    fill_value: Any = 0
    _: KW_ONLY
    dims: Any = None
    chunks: Any = None
    compression: Any = None
    compression_opts: Any = None
    shuffle: bool = False
    fletcher32: bool = False
    maxshape: Any = None
    shards: Any = None
    compressors: Any = "auto"

    def __post_init__(self) -> None:
        name = check_name(self.name)
        try:
            given = tuple(self.shape)
        except TypeError:
            raise ContributionError(
                f"dataset {name!r}: shape {self.shape!r} is not a sequence of whole numbers"
            ) from None
        for x in given:  # int() would truncate 10.7 to 10
            if not is_int(x):
                raise ContributionError(
                    f"dataset {name!r}: shape {self.shape!r}: {x!r} is not a whole number"
                )
        shape = tuple(int(x) for x in given)
        if len(shape) < 1 or any(x < 0 for x in shape):
            # no rows is allowed: an empty dataset, created with the others and written by
            # nobody (h5py's shape=(0, n), maxshape=(None, n) before a run appends)
            raise ContributionError(
                f"dataset {self.name!r}: shape {self.shape!r} needs one axis or more, each >= 0"
            )
        dtype = check_dtype(self.dtype, f"dataset {name!r}")
        fill = _fill_value(name, dtype, self.fill_value)
        # byte offsets are int64 everywhere (layout, kernels, files): a larger dataset would
        # wrap around in them instead of failing
        if int(np.prod(shape, dtype=object)) * dtype.itemsize >= 2**63:
            raise ContributionError(
                f"dataset {self.name!r}: shape {self.shape!r} of {dtype} holds 2**63 bytes "
                "or more, beyond any file"
            )
        maxshape, compression, opts = check_storage(
            name,
            shape,
            self.maxshape,
            self.compression,
            self.compression_opts,
            self.shuffle,
            self.fletcher32,
            self.shards,
        )
        chunks = check_chunks(self.chunks, name, shape, maxshape)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "fill_value", fill)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "dims", check_dims(self.dims, name, len(shape)))
        object.__setattr__(self, "chunks", chunks)
        object.__setattr__(self, "maxshape", maxshape)
        object.__setattr__(self, "compression", compression)
        object.__setattr__(self, "compression_opts", opts)
        object.__setattr__(self, "shuffle", bool(self.shuffle))
        object.__setattr__(self, "fletcher32", bool(self.fletcher32))
        if self.shards is not None:
            object.__setattr__(self, "shards", tuple(int(s) for s in self.shards))

    @property
    def chunked(self) -> bool:
        """Whether any storage option asks for chunks (else the format's own layout)."""
        return (
            self.chunks is not None
            or self.compression is not None
            or self.shuffle
            or self.fletcher32
            or self.maxshape is not None
            or self.shards is not None
            or not (isinstance(self.compressors, str) and self.compressors == "auto")
        )

    @property
    def leaf(self) -> str:
        """The dataset's own name, without its groups."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def group(self) -> str:
        """The group holding the dataset (``""``: the root)."""
        return self.name.rpartition("/")[0]

    @property
    def n_rows(self) -> int:
        """Number of rows (the first axis)."""
        return self.shape[0]

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one row."""
        return self.shape[1:]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row in C order."""
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the whole dataset."""
        return self.n_rows * self.row_bytes


@dataclass(frozen=True, eq=False)
class Contribution:
    """What one client hands to a write stage for one dataset: global rows and their values.

    ``rows`` are sorted on construction (values follow), so a client can cut
    any row range with a binary search. Rows that are already sorted are
    kept as given, without copying the values: do not modify them until the
    stage is written.

    Examples
    --------
    >>> import numpy as np
    >>> c = Contribution(client=1, rows=[5, 2], values=np.array([[5.0], [2.0]]))
    >>> c.rows.tolist(), c.values[:, 0].tolist()
    ([2, 5], [2.0, 5.0])
    """

    client: int
    rows: npt.NDArray[np.int64]
    values: npt.NDArray[Any]

    def __init__(self, client: int, rows: Any, values: Any) -> None:
        if not is_int(client, 0, 2**63):
            raise ContributionError(f"client must be an integer in [0, 2**63), got {client!r}")
        r = np.asarray(rows)
        if r.ndim != 1 or (r.size and r.dtype.kind not in "iu"):
            raise ContributionError(
                f"client {client}: rows must be a 1-d integer array, got dtype {r.dtype}, "
                f"shape {r.shape}"
            )
        try:
            v = np.asarray(values)
        except (ValueError, TypeError) as err:  # ragged lists: NumPy's own words
            raise ContributionError(f"client {client}: values are not an array: {err}") from None
        if v.ndim == 0 or v.shape[0] != r.size:
            raise ContributionError(f"client {client}: {r.size} rows but values of shape {v.shape}")
        if r.size and (int(r.min()) < 0 or int(r.max()) >= 2**63):
            bad = int(r.min()) if int(r.min()) < 0 else int(r.max())
            raise ContributionError(
                f"client {client}: rows hold {bad}, not a row id (0 <= row < 2**63)"
            )
        r = r.astype(np.int64, copy=False)
        object.__setattr__(self, "client", int(client))
        # (a row given twice is refused where the replicas are gathered, naming both)
        if r.size < 2 or bool((r[1:] >= r[:-1]).all()):  # already sorted: no copy of the values
            object.__setattr__(self, "rows", r)
            object.__setattr__(self, "values", v)
        else:
            order = np.argsort(r, kind="stable")
            object.__setattr__(self, "rows", r[order])
            object.__setattr__(self, "values", v[order])

    def aligned_rows(self) -> npt.NDArray[np.int64]:
        """The row ids, aligned in memory (realigned once, in place, if they are not).

        Unpickled on a worker, the rows may sit unaligned in a message frame,
        and every ``searchsorted`` over them would copy the whole array.

        Examples
        --------
        >>> Contribution(0, [3, 4], np.zeros(2)).aligned_rows().flags.aligned
        True
        """
        if not self.rows.flags.aligned:
            object.__setattr__(self, "rows", np.require(self.rows, requirements=["A"]))
        return self.rows

    def cut(self, start_row: int, stop_row: int) -> npt.NDArray[Any]:
        """Values of rows ``start_row .. stop_row - 1``; all must be held by this client.

        Examples
        --------
        >>> import numpy as np
        >>> Contribution(0, [3, 4, 7], np.arange(3.0)).cut(3, 5).tolist()
        [0.0, 1.0]
        """
        rows = self.aligned_rows()
        lo = int(np.searchsorted(rows, start_row))
        hi = lo + (stop_row - start_row)
        if hi > rows.size or rows[lo] != start_row or rows[hi - 1] != stop_row - 1:
            raise ContributionError(
                f"client {self.client} does not hold all rows {start_row}..{stop_row - 1}"
            )
        return self.values[lo:hi]


@dataclass(frozen=True, eq=False)
class Holdings:
    """For every row, the clients holding a copy (CSR, lowest client id first).

    ``holders[ptr[r]:ptr[r + 1]]`` are the clients contributing row ``r``;
    rows with no holder are ``missing``.
    """

    spec: DatasetSpec
    ptr: npt.NDArray[np.int64]
    holders: npt.NDArray[np.int64]

    @property
    def count(self) -> npt.NDArray[np.int64]:
        """Number of holders of each row."""
        return np.diff(self.ptr)

    @property
    def missing(self) -> npt.NDArray[np.int64]:
        """Rows nobody contributed."""
        return np.flatnonzero(self.count == 0)

    @property
    def replicated_fraction(self) -> float:
        """Fraction of rows held by more than one client."""
        return float((self.count > 1).mean())


def gather(
    spec: DatasetSpec,
    contributions: Sequence[Contribution],
    unique: bool = False,
    allow_missing: bool = False,
) -> Holdings:
    """Check contributions against ``spec`` and find who holds each row.

    Parameters
    ----------
    spec : DatasetSpec
    contributions : sequence of Contribution
        At most one per client.
    unique : bool
        Declare that replicated rows carry identical values; a row given
        twice with different values is then an error.
    allow_missing : bool
        Rows nobody gives stay at the fill value instead of being an error.

    Raises
    ------
    ContributionError
        Naming the client, the row and the value: rows out of range, a row
        twice in one contribution, values of the wrong shape or of a dtype
        that does not cast safely, missing rows, conflicting replicas.

    Examples
    --------
    >>> import numpy as np
    >>> spec = DatasetSpec("u", (4,), "int32")
    >>> h = gather(spec, [Contribution(0, [0, 1, 2], np.array([0, 1, 2])),
    ...                   Contribution(1, [2, 3], np.array([2, 3]))], unique=True)
    >>> h.count.tolist(), h.holders.tolist()
    ([1, 1, 2, 1], [0, 0, 0, 1, 1])
    """
    if not contributions:
        raise ContributionError(f"dataset {spec.name!r}: no contributions")
    seen: set[int] = set()
    for con in contributions:
        if not isinstance(con, Contribution):
            raise ContributionError(f"expected Contribution objects, got {type(con).__name__}")
        if con.client in seen:
            raise ContributionError(f"client {con.client} contributes twice to {spec.name!r}")
        seen.add(con.client)
        _check_one(spec, con)
    # a counting sort, linear; the lexsort of (row, client) it replaces took 15-110 ms
    # of the driver's time for a 1 GiB stage of a million rows. Imported here: a worker
    # process that imports this module for its classes need not load Numba
    from .kernels.holdings import holders_of

    by_client = sorted(contributions, key=lambda c: c.client)
    starts = np.zeros(len(by_client) + 1, dtype=np.int64)
    np.cumsum([c.rows.size for c in by_client], out=starts[1:])
    flat = np.concatenate([c.rows for c in by_client]).astype(np.int64, copy=False)
    ptr, who, bad = holders_of(
        flat, starts, np.array([c.client for c in by_client], dtype=np.int64), spec.n_rows
    )
    if bad >= 0:
        # the checks above see each contribution's ends only: rows changed in place after
        # the Contribution was made (it keeps the caller's sorted array) are caught here
        con = by_client[int(np.searchsorted(starts, bad, side="right")) - 1]
        row = int(flat[bad])
        why = (
            f"is outside dataset {spec.name!r} of {spec.n_rows} rows"
            if not 0 <= row < spec.n_rows
            else "is out of order or repeated (were its rows changed after it was made?)"
        )
        raise ContributionError(f"client {con.client}: row {row} {why}")
    h = Holdings(spec, ptr, who)
    miss = h.missing
    if miss.size and not allow_missing:
        raise ContributionError(
            f"dataset {spec.name!r}: {miss.size} row(s) have no contribution, first row "
            f"{int(miss[0])}; pass allow_missing=True to leave them at the fill value"
        )
    if unique:
        _check_replicas_agree(spec, contributions, h)
    return h


def cast_exactly(values: Any, dtype: Any, what: str) -> npt.NDArray[Any]:
    """``values`` as ``dtype``, or an error naming the first value the cast would change.

    A cast NumPy calls safe is done as is. Any other must keep every value:
    into an integer type a value must be a whole number within its range (no
    wrap-around, no cut-off fraction, no NaN); into a float type a finite value
    must stay finite (rounding to the nearer float is allowed, as h5py and
    zarr do; overflow to infinity is not); a complex value going into a real
    type must have no imaginary part.

    Examples
    --------
    >>> cast_exactly(np.array([1, 100]), "i1", "u").tolist()
    [1, 100]
    >>> cast_exactly(np.array([1, 1000]), "i1", "u")
    Traceback (most recent call last):
    ...
    orchestrator.errors.ContributionError: u: value 1000 does not fit dtype int8 (it would ...
    """
    v = np.asarray(values)
    dtype = np.dtype(dtype)
    if np.can_cast(v.dtype, dtype, casting="safe"):
        return v.astype(dtype, copy=False)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexWarning: judged below, value by value
        out = v.astype(dtype)
        if dtype.kind in "iub":
            bad = out.astype(v.dtype) != v
            if v.dtype.kind in "fc":
                bad |= ~np.isfinite(v)
            if dtype.kind in "iu" and v.dtype.kind in "iuf":
                # the round trip alone misses uint64 max -> -1 -> uint64 max
                info = np.iinfo(dtype)
                bad |= (v < info.min) | (v > info.max)
        elif dtype.kind in "fc":  # rounding is allowed, overflow to infinity is not
            bad = ~np.isfinite(out)
            if v.dtype.kind in "fc":
                bad &= np.isfinite(v)
        else:
            bad = np.zeros(v.shape, dtype=bool)
        if v.dtype.kind == "c" and dtype.kind != "c":
            bad |= v.imag != 0
    if bad.any():
        i = np.unravel_index(int(np.flatnonzero(bad.reshape(-1))[0]), bad.shape)
        raise ContributionError(
            f"{what}: value {v[i].item()!r} does not fit dtype {dtype} "
            f"(it would be stored as {out[i].item()!r})"
        )
    return out


def _check_one(spec: DatasetSpec, con: Contribution) -> None:
    r = con.rows
    if r.size:
        if r[0] < 0 or r[-1] >= spec.n_rows:
            bad = r[0] if r[0] < 0 else r[-1]
            raise ContributionError(
                f"client {con.client}: row {int(bad)} is outside dataset {spec.name!r} "
                f"of {spec.n_rows} rows"
            )
        dup = np.flatnonzero(r[1:] == r[:-1])
        if dup.size:
            raise ContributionError(
                f"client {con.client}: row {int(r[dup[0]])} appears twice in its contribution "
                f"to {spec.name!r}"
            )
    want = (r.size, *spec.row_shape)
    if con.values.shape != want:
        raise ContributionError(
            f"client {con.client}: values of {spec.name!r} have shape {con.values.shape}, "
            f"expected {want}"
        )
    problem = cast_problem(con.values.dtype, spec.dtype)
    if problem:
        raise ContributionError(
            f"client {con.client}: values of dtype {con.values.dtype} cannot be stored in "
            f"{spec.name!r} of dtype {spec.dtype} ({problem})"
        )


def cast_problem(src: Any, dst: Any) -> str:
    """Why values of ``src`` cannot be stored as ``dst`` ('' if they can), checked when the
    stage starts, never inside dispatch.

    Numbers cast within their kind or to a wider one (each value is then kept
    exactly or refused, :func:`cast_exactly`); strings only into strings as
    long or longer; records only as the same record (NumPy would assign fields
    by position, h5py by name: neither is guessed).

    Examples
    --------
    >>> cast_problem(np.dtype("S8"), np.dtype("S4"))
    'strings of 8 bytes would be cut to 4'
    >>> cast_problem(np.dtype("i4"), np.dtype("f8"))
    ''
    """
    src, dst = np.dtype(src), np.dtype(dst)
    if dst.names or src.names:
        return "" if src == dst else "a record dtype must be given exactly as the dataset's"
    if dst.kind in "SU" or src.kind in "SU":
        if src.kind != dst.kind:
            return "text and bytes or numbers do not mix"
        if src.itemsize > dst.itemsize:
            n = 4 if src.kind == "U" else 1
            unit = "characters" if n == 4 else "bytes"
            return f"strings of {src.itemsize // n} {unit} would be cut to {dst.itemsize // n}"
        return ""
    if src.kind not in "biufc" or not np.can_cast(src, dst, casting="same_kind"):
        return f"{src.kind!r} values into {dst.kind!r} is not a cast within a kind"
    return ""


def _check_replicas_agree(
    spec: DatasetSpec, contributions: Sequence[Contribution], h: Holdings
) -> None:
    by_client = {c.client: c for c in contributions}
    multi = np.flatnonzero(h.count > 1)
    if multi.size == 0:
        return
    first = h.holders[h.ptr[multi]]
    for r, c0 in zip(multi.tolist(), first.tolist(), strict=True):
        ref = by_client[c0].cut(r, r + 1).astype(spec.dtype)
        for c in h.holders[h.ptr[r] + 1 : h.ptr[r + 1]].tolist():
            other = by_client[c].cut(r, r + 1).astype(spec.dtype)
            if ref.tobytes() != other.tobytes():
                raise ContributionError(
                    f"dataset {spec.name!r}: row {r} is given by clients {c0} and {c} with "
                    "different values, but rows were declared unique"
                )


def _fill_value(name: str, dtype: np.dtype[Any], given: Any) -> Any:
    """The fill value as stored: a value of ``dtype``, kept exactly, or an error naming it."""
    if dtype.kind in "SUV":  # strings and records: zero bytes unless a value of theirs is given
        if given is None or (isinstance(given, int | float) and given == 0):
            return np.zeros((), dtype)[()]
        try:
            value = np.array(given, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as err:
            raise ContributionError(
                f"dataset {name!r}: fill_value {given!r} is not a value of {dtype} ({err})"
            ) from None
        if value.ndim != 0:
            raise ContributionError(f"dataset {name!r}: fill_value {given!r} must be one value")
        if dtype.kind in "SU" and value.item() != given:  # cut to the string's length
            raise ContributionError(f"dataset {name!r}: fill_value {given!r} does not fit {dtype}")
        return value[()]
    if np.ndim(given) != 0:
        raise ContributionError(f"dataset {name!r}: fill_value {given!r} must be one value")
    given = 0 if given is None else given  # None: as h5py, zarr
    if isinstance(given, np.datetime64 | np.timedelta64):  # NumPy made 1 s into 1.0
        raise ContributionError(
            f"dataset {name!r}: fill_value {given!r} is a time, not a {dtype} value"
        )
    if isinstance(given, str | bytes):  # "1" would be parsed into 1
        raise ContributionError(
            f"dataset {name!r}: fill_value {given!r} is text, not a {dtype} value"
        )
    try:  # stored as given or refused, as the values are: NaN into int32 read back -2**31
        fill = cast_exactly(np.asarray(given), dtype, f"dataset {name!r}: fill_value")
    except ContributionError:
        raise
    except (TypeError, ValueError, OverflowError):  # "abc" into a float, 2**64 into u8
        raise ContributionError(
            f"dataset {name!r}: fill_value {given!r} is not a value of {dtype}"
        ) from None
    return fill.item()


#: attribute names HDF5's dimension scales keep their links in (writing them breaks readers)
RESERVED_ATTRS = ("DIMENSION_LIST", "REFERENCE_LIST")

#: values in one list attribute (HDF5 keeps attributes in an object header of 64 KiB)
MAX_ATTR_ITEMS = 4096


def _attr_leaves(value: Any) -> list[Any] | None:
    """The scalars of an attribute value (nested lists walked); None if it holds another kind."""
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for v in value:
            leaves = _attr_leaves(v)
            if leaves is None:
                return None
            out += leaves
        return out
    return [value] if isinstance(value, bool | int | float | str | bytes) else None


def check_attrs(attrs: Any) -> None:
    """Refuse attributes that some format would refuse at commit, or store as other values.

    ``attrs`` maps ``""`` (the file or group) or a dataset name to ``{name: value}``.
    A name is a non-empty string without NUL. A value is a bool, an integer that
    fits 64 bits, a float, a string without NUL, or a rectangular (nested) list
    of one of these kinds (numbers may mix ints and floats); NumPy values come
    as these (``.tolist()``). None, mappings and mixed lists are refused: HDF5
    cannot hold them, or would read them back as other values than Zarr.

    Raises
    ------
    ContributionError
        Naming the attribute and the value.

    Examples
    --------
    >>> check_attrs({"": {"step": 3, "units": "m/s"}, "u": {"range": [0.0, 1.5]}})
    >>> check_attrs({"u": {"mixed": [1, "a"]}})
    Traceback (most recent call last):
    ...
    orchestrator.errors.ContributionError: attrs['u']['mixed'] = [1, 'a']: ...
    """
    if not isinstance(attrs, Mapping):
        raise ContributionError(
            f"attrs must be a mapping of '' or a dataset name to attributes, got {attrs!r}"
        )
    for where, group in attrs.items():
        if not isinstance(where, str):
            raise ContributionError(f"attrs: key {where!r} is not '' or a dataset name")
        if not isinstance(group, Mapping):
            raise ContributionError(
                f"attrs[{where!r}] must be a mapping of names to values, got {group!r}"
            )
        for name, value in group.items():
            if name in RESERVED_ATTRS:  # HDF5's dimension scales, made by the backend
                raise ContributionError(
                    f"attrs[{where!r}]: {name!r} is HDF5's dimension-scale bookkeeping; give "
                    "dims= (or attach scales in a capture) instead"
                )
            if name == "io_orchestrator_manifest":  # it went into the manifest, not stored
                raise ContributionError(f"attrs[{where!r}]: {name!r} is reserved for the manifest")
            if not isinstance(name, str) or not name or "\0" in name or not _utf8(name):
                raise ContributionError(
                    f"attrs[{where!r}]: name {name!r} must be a non-empty UTF-8 string without NUL"
                )
            check_attr(f"attrs[{where!r}][{name!r}]", value)


def check_attr(what: str, value: Any) -> None:
    """Refuse one attribute value as :func:`check_attrs` does; ``what`` names it.

    Examples
    --------
    >>> check_attr("units", "m/s")
    >>> check_attr("dt", np.float32(0.5))  # kept a float32
    >>> check_attr("step", None)
    Traceback (most recent call last):
    ...
    orchestrator.errors.ContributionError: step = None: a value must be a bool, ...
    """
    shown = repr(value) if len(repr(value)) < 80 else repr(value)[:76] + " ..."
    if isinstance(value, np.str_):
        value = str(value)
    if isinstance(value, np.generic | np.ndarray):  # stored with its dtype (float32 stays so)
        dt = value.dtype
        if dt.kind not in "biufcS" or dt.itemsize > {"c": 16}.get(
            dt.kind, 8 if dt.kind != "S" else 2**16
        ):
            raise ContributionError(
                f"{what} = {shown}: a NumPy value must be of booleans, integers, floats of up "
                f"to 64 bits, complex numbers or bytes, not {dt}"
            )
        if np.size(value) > MAX_ATTR_ITEMS:
            raise ContributionError(
                f"{what}: an array of {np.size(value):,} values; an attribute holds at most "
                f"{MAX_ATTR_ITEMS:,} (store larger arrays as a dataset)"
            )
        return
    leaves = _attr_leaves(value)
    if leaves is None:
        raise ContributionError(
            f"{what} = {shown}: a value must be a bool, an integer, a float, a string or a "
            "list of one of them"
        )
    kinds = {
        "bool"
        if isinstance(v, bool)
        else "str"
        if isinstance(v, str)
        else "bytes"
        if isinstance(v, bytes)
        else "number"
        for v in leaves
    }
    if "bytes" in kinds and not (isinstance(value, bytes) or _flat_list(value)):
        raise ContributionError(f"{what} = {shown}: bytes alone or in a flat list")
    if len(kinds) > 1:
        raise ContributionError(
            f"{what} = {shown}: a list must hold values of one kind, got {sorted(kinds)}"
        )
    for v in leaves:
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
            raise ContributionError(f"{what} = {shown}: {v} does not fit 64 bits")
        if isinstance(v, str) and ("\0" in v or not _utf8(v)):
            raise ContributionError(f"{what} = {shown}: a string must be UTF-8 without NUL")
    ints = [v for v in leaves if isinstance(v, int) and not isinstance(v, bool)]
    if ints and min(ints) < 0 and max(ints) >= 2**63:  # HDF5 made them floats, Zarr kept them
        raise ContributionError(f"{what} = {shown}: no 64-bit integer type holds all of them")
    if isinstance(value, list | tuple) and len(leaves) > MAX_ATTR_ITEMS:
        # HDF5 keeps an attribute in its object's header, at most 64 KiB: h5py failed at the
        # commit, after the whole stage was written
        raise ContributionError(
            f"{what}: a list of {len(leaves):,} values; an attribute holds at most "
            f"{MAX_ATTR_ITEMS:,} (store larger arrays as a dataset)"
        )
    if isinstance(value, list | tuple) and leaves:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumPy's warning for ragged lists
            try:
                ragged = np.asarray(value).dtype == object
            except ValueError:
                ragged = True
        if ragged:
            raise ContributionError(f"{what} = {shown}: nested lists must be rectangular")


def _flat_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and not any(isinstance(v, list | tuple) for v in value)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
