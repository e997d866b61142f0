"""What a dataset may be: its name (with groups), dtype, dimension names and storage options.

:class:`~orchestrator.contributions.DatasetSpec` calls these checks; each
refuses a value with a :class:`~orchestrator.errors.ContributionError`
naming the dataset, the field and the value. They know no format: what one
format cannot store is refused by its backend (``Backend.check_spec``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .checks import is_int
from .errors import ContributionError

__all__ = [
    "COMPRESSIONS",
    "check_chunks",
    "check_dims",
    "check_dtype",
    "check_name",
    "check_stage_dims",
    "check_storage",
    "check_values",
    "default_dims",
    "dtype_from_json",
    "dtype_json",
    "parent_groups",
]

#: compression names every format is asked for by (h5py's, plus hdf5plugin's where installed)
COMPRESSIONS = ("gzip", "lzf", "zstd", "blosc")


def check_name(name: Any, what: str = "dataset") -> str:
    """``name`` as stored: a path of groups and a leaf (``"state/u"``), leading ``/`` removed.

    Examples
    --------
    >>> check_name("/state/u")
    'state/u'
    >>> check_name("state//u")
    Traceback (most recent call last):
    ...
    orchestrator.errors.ContributionError: dataset name 'state//u' has an empty part ...
    """
    if not isinstance(name, str) or not name.strip("/"):
        raise ContributionError(f"{what} name must be a non-empty string, got {name!r}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        # NUL ends a name in HDF5's C API; other control characters break listings
        raise ContributionError(f"{what} name {name!r} holds a control character (NUL, tab, …)")
    path = name.strip("/")
    for part in path.split("/"):
        if not part:
            raise ContributionError(f"{what} name {name!r} has an empty part (two '/' in a row)")
        if part in (".", "..") or part.startswith("__"):
            raise ContributionError(
                f"{what} name {name!r} is reserved (., .. and names starting with __ in Zarr)"
            )
        problem = _part_problem(part)
        if problem:
            raise ContributionError(f"{what} name {name!r}: {part!r} {problem}")
    return path


def _part_problem(part: str) -> str:
    """What keeps one part of a name from naming a group or dataset in every format."""
    try:
        encoded = part.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (from a file name read as bytes)
        return "is not valid Unicode (it cannot be stored as UTF-8)"
    if "\\" in part:  # Zarr on some systems stores it as a folder separator: a split dataset
        return "holds a backslash"
    if len(encoded) > 255:  # a Zarr array is a folder: no file system takes a longer name
        return f"is {len(encoded)} bytes long (at most 255)"
    if part == "zarr.json":
        return "is reserved (Zarr's metadata file)"
    return ""


def parent_groups(name: str) -> list[str]:
    """The groups above ``name``, outermost first.

    Examples
    --------
    >>> parent_groups("a/b/u")
    ['a', 'a/b']
    """
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def check_dtype(dtype: Any, what: str) -> np.dtype[Any]:
    """A dtype every format stores with fixed-size rows, or an error saying why not.

    Booleans, integers, floats (16 to 64 bits), complex numbers, fixed-length
    byte strings (``S``) and text (``U``), and structured dtypes of those.

    Examples
    --------
    >>> check_dtype([("t", "f8"), ("id", "i4")], "dataset 'p'").names
    ('t', 'id')
    """
    if dtype is None:  # NumPy would read it as float64
        raise ContributionError(f"{what}: dtype must be given, got None")
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as err:
        raise ContributionError(f"{what}: dtype {dtype!r}: {err}") from None
    if dt.subdtype is not None:  # ("f8", (3,)): NumPy moves the 3 into the shape
        raise ContributionError(
            f"{what}: dtype {dt} is a sub-array; give its shape {dt.subdtype[1]} as more "
            f"axes of the dataset, of dtype {dt.subdtype[0]}"
        )
    problem = _dtype_problem(dt)
    if problem:
        raise ContributionError(f"{what}: dtype {dt}: {problem}")
    return dt


def _dtype_problem(dt: np.dtype[Any]) -> str:
    if dt.hasobject:
        return (
            "holds Python objects (variable-length strings go in a capture, or as "
            "WriteOptions(values=...), not as rows)"
        )
    if dt.subdtype is not None:
        return _dtype_problem(dt.subdtype[0])
    if dt.names:
        for field in dt.names:
            problem = _dtype_problem(dt.fields[field][0])  # type: ignore[index]
            if problem:
                return f"field {field!r}: {problem}"
        return ""
    if dt.kind in "SU":
        return "" if dt.itemsize else "a string of length 0"
    if dt.kind not in "biufc" or dt.itemsize > {"c": 16}.get(dt.kind, 8):
        return (
            "not supported (booleans, integers, floats of up to 64 bits, complex numbers of "
            "up to 128, fixed-length strings and structured dtypes of them are)"
        )
    return ""


def default_dims(name: str, ndim: int) -> tuple[str, ...]:
    """Dimension names for a dataset given none: ``<leaf>_dim<axis>``.

    Unique per dataset, so two datasets never claim one dimension with
    different sizes (xarray refuses that).

    Examples
    --------
    >>> default_dims("state/u", 2)
    ('u_dim0', 'u_dim1')
    """
    leaf = name.rsplit("/", 1)[-1]
    return tuple(f"{leaf}_dim{i}" for i in range(ndim))


def check_dims(dims: Any, name: str, ndim: int) -> tuple[str | None, ...]:
    """Dimension names as stored: one per axis (None: that axis has none), or ``()`` for
    none at all (``False``).

    ``None`` gives :func:`default_dims`.

    Examples
    --------
    >>> check_dims(["node", "xyz"], "u", 2)
    ('node', 'xyz')
    >>> check_dims(False, "u", 2)
    ()
    """
    if dims is None:
        return default_dims(name, ndim)
    if dims is False or (isinstance(dims, tuple | list) and not dims):
        return ()
    if isinstance(dims, str) or not isinstance(dims, tuple | list):
        raise ContributionError(
            f"dataset {name!r}: dims {dims!r} must be a list of names, one per axis"
        )
    out = tuple(dims)
    if len(out) != ndim:
        raise ContributionError(
            f"dataset {name!r}: dims {dims!r} names {len(out)} axes, the dataset has {ndim}"
        )
    for d in out:
        if d is None:  # an axis without a name (h5py: no scale attached to it)
            continue
        if not isinstance(d, str) or not d or "/" in d:
            raise ContributionError(
                f"dataset {name!r}: dims {dims!r}: {d!r} is not a plain non-empty name"
            )
        try:
            check_name(d, "dimension")
        except ContributionError as err:
            raise ContributionError(f"dataset {name!r}: dims {dims!r}: {err}") from None
    return out


def check_chunks(chunks: Any, name: str, shape: tuple[int, ...], maxshape: Any) -> Any:
    """``chunks`` as stored: None (the format's layout), True (the library guesses) or a
    tuple of positive sizes (HDF5 also wants each within its axis unless the axis may grow:
    its backend refuses the rest).

    Examples
    --------
    >>> check_chunks([10, 3], "u", (100, 3), None)
    (10, 3)
    """
    if chunks is None or chunks is True:
        return chunks
    if chunks is False:
        return None
    if isinstance(chunks, str) or not isinstance(chunks, tuple | list):
        raise ContributionError(
            f"dataset {name!r}: chunks {chunks!r} must be a tuple of sizes, True or None"
        )
    if len(chunks) != len(shape) or not all(is_int(c, 1, 2**62) for c in chunks):
        raise ContributionError(
            f"dataset {name!r}: chunks {chunks!r} must give a size >= 1 for each of the "
            f"{len(shape)} axes"
        )
    return tuple(int(c) for c in chunks)


def check_storage(
    name: str,
    shape: tuple[int, ...],
    maxshape: Any,
    compression: Any,
    compression_opts: Any,
    shuffle: Any,
    fletcher32: Any,
    shards: Any,
) -> tuple[Any, Any, Any]:
    """``(maxshape, compression, compression_opts)`` as stored; everything else checked.

    ``compression`` an integer 0–9 is gzip at that level, as in h5py.

    Examples
    --------
    >>> check_storage("u", (4, 3), (None, 3), 4, None, False, False, None)
    ((None, 3), 'gzip', 4)
    """
    where = f"dataset {name!r}"
    if maxshape is not None:
        if isinstance(maxshape, str) or not isinstance(maxshape, tuple | list):
            raise ContributionError(f"{where}: maxshape {maxshape!r} must be a tuple")
        if len(maxshape) != len(shape):
            raise ContributionError(
                f"{where}: maxshape {maxshape!r} has {len(maxshape)} axes, the shape "
                f"{shape} has {len(shape)}"
            )
        for m, n in zip(maxshape, shape, strict=True):
            if m is not None and not (is_int(m, 0, 2**62) and m >= n):
                raise ContributionError(
                    f"{where}: maxshape {maxshape!r}: {m!r} is smaller than the shape {shape} "
                    "or not a whole number (None: unlimited)"
                )
        maxshape = tuple(None if m is None else int(m) for m in maxshape)
    if is_int(compression, 0, 10) and not isinstance(compression, bool):
        if compression_opts is not None:
            raise ContributionError(
                f"{where}: compression={compression!r} is gzip's level already; "
                f"compression_opts {compression_opts!r} too is one too many"
            )
        compression, compression_opts = "gzip", int(compression)
    if compression is not None and compression not in COMPRESSIONS:
        raise ContributionError(
            f"{where}: compression {compression!r} is not one of {', '.join(COMPRESSIONS)} "
            "(or a gzip level 0-9)"
        )
    if compression == "gzip" and compression_opts is not None:
        if not is_int(compression_opts, 0, 10):
            raise ContributionError(
                f"{where}: compression_opts {compression_opts!r}: gzip's level is 0-9"
            )
    elif compression == "lzf" and compression_opts is not None:
        raise ContributionError(f"{where}: compression_opts {compression_opts!r}: lzf takes none")
    elif compression == "zstd" and compression_opts is not None:
        if not is_int(compression_opts, -131072, 23):
            raise ContributionError(
                f"{where}: compression_opts {compression_opts!r}: zstd's level is -131072..22"
            )
    elif compression == "blosc" and compression_opts is not None:
        if not is_int(compression_opts, 0, 10):
            raise ContributionError(
                f"{where}: compression_opts {compression_opts!r}: blosc's level is 0-9"
            )
    elif compression is None and compression_opts is not None:
        raise ContributionError(
            f"{where}: compression_opts {compression_opts!r} without a compression"
        )
    for field, value in (("shuffle", shuffle), ("fletcher32", fletcher32)):
        if not isinstance(value, bool | np.bool_):
            raise ContributionError(f"{where}: {field} must be True or False, got {value!r}")
    if shards is not None:
        if isinstance(shards, str) or not isinstance(shards, tuple | list):
            raise ContributionError(f"{where}: shards {shards!r} must be a tuple of sizes")
        if len(shards) != len(shape) or not all(is_int(s, 1, 2**62) for s in shards):
            raise ContributionError(
                f"{where}: shards {shards!r} must give a size >= 1 for each of the "
                f"{len(shape)} axes"
            )
    return maxshape, compression, compression_opts


def check_stage_dims(specs: Any, groups: Any = ()) -> None:
    """Refuse dimension names netCDF-4 and xarray cannot hold: one name with two sizes in a
    group, or a name another dataset of the group has that is not its 1-d coordinate.

    Examples
    --------
    >>> from orchestrator.contributions import DatasetSpec
    >>> check_stage_dims([DatasetSpec("u", (4,), "f8", dims=["n"]),
    ...                   DatasetSpec("v", (5,), "f8", dims=["n"])])
    Traceback (most recent call last):
    ...
    orchestrator.errors.ContributionError: dimension 'n' of group '/' is 4 long for 'u' but 5 ...
    """
    by_name = {s.name: s for s in specs}
    sizes: dict[tuple[str, str], tuple[int, str]] = {}
    for s in specs:
        for axis, d in enumerate(s.dims):
            if d is None:
                continue
            key = (s.group, d)
            n = s.shape[axis]
            if key in sizes and sizes[key][0] != n:
                raise ContributionError(
                    f"dimension {d!r} of group {s.group or '/'!r} is {sizes[key][0]} long for "
                    f"{sizes[key][1]!r} but {n} for {s.name!r}"
                )
            sizes.setdefault(key, (n, s.name))
            path = f"{s.group}/{d}" if s.group else d
            other = by_name.get(path)
            if other is not None and not (other.shape == (n,) and other.dims == (d,)):
                raise ContributionError(
                    f"dataset {s.name!r}: dimension {d!r} is also the name of dataset "
                    f"{other.name!r}, which is not its 1-d coordinate (dims ({d!r},), "
                    f"shape ({n},))"
                )
            if path in groups:
                raise ContributionError(
                    f"dataset {s.name!r}: dimension {d!r} is also a group's name"
                )


#: bytes of JSON all small datasets of a stage may take (they travel in the manifest)
MAX_VALUES_BYTES = 1 << 20


#: storage options a small dataset may be given (h5py's ``create_dataset`` keywords)
VALUE_OPTIONS = (
    "chunks",
    "compression",
    "compression_opts",
    "shuffle",
    "fletcher32",
    "maxshape",
    "fillvalue",
)


def check_values(values: Any) -> dict[str, Any]:
    """Small datasets stored whole by the committing process, as the manifest lists them.

    A value is a NumPy array or scalar (its dtype kept; 0-d is a scalar
    dataset), a Python number, a string, or a list of strings (variable-length
    text, as ``h5py.string_dtype()``); or a mapping ``{"data": value, "text":
    bool, "dims": names or False, **options}`` with h5py storage options
    (:data:`VALUE_OPTIONS`), e.g. growable text (``maxshape=(None,)``). Each comes
    back as ``{"value": encoded, "text": bool, "options": {...}, "dims": [...]}``.

    Examples
    --------
    >>> check_values({"time": 2.5, "names": ["a", "bc"]})["names"]
    {'value': ['a', 'bc'], 'text': True, 'options': {}, 'dims': ['names_dim0'], 'encoding': 'utf-8'}
    """
    import json

    from .typedjson import encode

    if not isinstance(values, dict):
        try:
            values = dict(values)
        except (TypeError, ValueError):
            raise ContributionError(
                f"values must map dataset names to values, got {type(values).__name__}"
            ) from None
    out: dict[str, Any] = {}
    for name, given in values.items():
        path = check_name(name)
        what = f"values[{name!r}]"
        options: dict[str, Any] = {}
        text = dims = None
        encoding = "utf-8"
        value = given
        if isinstance(given, dict):
            extra = set(given) - {"data", "text", "dims", "encoding", *VALUE_OPTIONS}
            if "data" not in given or extra:
                raise ContributionError(
                    f"{what}: a mapping needs 'data' and takes 'text' and "
                    f"{', '.join(VALUE_OPTIONS)}; got {sorted(given)}"
                )
            value, text, dims = given["data"], given.get("text"), given.get("dims")
            encoding = given.get("encoding", "utf-8")
            if encoding not in ("utf-8", "ascii"):
                raise ContributionError(f"{what}: encoding {encoding!r} is not utf-8 or ascii")
            options = {
                k: _plain_option(given[k]) for k in VALUE_OPTIONS if given.get(k) is not None
            }
        if isinstance(value, np.ndarray) and value.dtype == object:
            value = value.tolist()
        if isinstance(value, tuple):
            value = list(value)
        if text is None:
            text = isinstance(value, str) or (
                isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
            )
        if text:
            texts = [value] if isinstance(value, str) else value
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ContributionError(f"{what}: text must be a string or a list of strings")
            if any("\0" in t for t in texts):
                raise ContributionError(f"{what}: a string holds NUL")
            ndim = 0 if isinstance(value, str) else 1
            out[path] = {
                "value": value,
                "text": True,
                "options": options,
                "dims": list(check_dims(dims, path, ndim)),
                "encoding": encoding,
            }
            continue
        if isinstance(value, bool | int | float | complex) and not isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray | np.generic):
            raise ContributionError(
                f"{what}: a {type(value).__name__} is not an array, a number, a string or a "
                "list of strings"
            )
        dt = check_dtype(value.dtype, what)
        if dt.names:
            raise ContributionError(f"{what}: structured values are stored as rows, not here")
        out[path] = {
            "value": encode(value),
            "text": False,
            "options": options,
            "dims": list(check_dims(dims, path, np.ndim(value))),
        }
    size = len(json.dumps(out))
    if size > MAX_VALUES_BYTES:
        raise ContributionError(
            f"values: {size:,} bytes of small datasets, at most {MAX_VALUES_BYTES:,}; "
            "write large ones as rows (DatasetSpec)"
        )
    return out


def _plain_option(value: Any) -> Any:
    """An option as JSON keeps it (tuples become lists; h5py takes either)."""
    if isinstance(value, tuple | list):
        return [None if v is None else int(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def dtype_json(dt: Any) -> Any:
    """``dt`` as JSON that :func:`dtype_from_json` makes the same dtype again (``dt.str`` loses
    a structured dtype's fields: ``'|V12'``).

    Examples
    --------
    >>> dtype_json(np.dtype("<f4"))
    '<f4'
    >>> dt = np.dtype([("t", "<f8"), ("v", "<f4", (3,))])
    >>> dtype_from_json(dtype_json(dt)) == dt
    True
    """
    dt = np.dtype(dt)
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return {"base": dtype_json(base), "shape": list(shape)}
    if dt.names:
        return {
            "names": list(dt.names),
            "formats": [dtype_json(dt.fields[n][0]) for n in dt.names],
            "offsets": [int(dt.fields[n][1]) for n in dt.names],
            "itemsize": dt.itemsize,
        }
    return dt.str


def dtype_from_json(value: Any) -> np.dtype[Any]:
    """The dtype :func:`dtype_json` described.

    Examples
    --------
    >>> dtype_from_json({"base": "<i2", "shape": [3]})
    dtype(('<i2', (3,)))
    """
    if isinstance(value, dict) and "base" in value:
        return np.dtype((dtype_from_json(value["base"]), tuple(value["shape"])))
    if isinstance(value, dict):
        return np.dtype(
            {
                "names": value["names"],
                "formats": [dtype_from_json(f) for f in value["formats"]],
                "offsets": value["offsets"],
                "itemsize": value["itemsize"],
            }
        )
    return np.dtype(value)
