"""Plain descriptions of HDF5 files and Zarr groups, and the differences between two of them.

``describe_h5(path)`` / ``describe_zarr(path)`` return ``{"format", "groups", "datasets"}``
where ``groups`` maps each group's absolute path (``"/"`` for the root) to
``{"attrs": ...}`` and ``datasets`` maps each dataset's (array's) path to its shape,
dtype, values, attributes and storage properties.  Every attribute is
``{"dtype", "shape", "value"}`` (HDF5: the stored NumPy dtype; Zarr: the JSON type).
Values are plain Python (``ndarray.tolist()``), so a description prints, pickles and
compares without NumPy.

``diff(a, b)`` lists every difference as a readable line; an empty list means the two
are the same.  ``ignore`` takes attribute names (``fnmatch`` patterns), object paths
(patterns starting with ``/``), dataset fields (``"field:chunks"``) and
:data:`NETCDF_HELPERS`, which drops the datasets that only exist as netCDF dimensions
(dimension scales whose ``NAME`` starts with "This is a netCDF dimension but not a
netCDF variable"), their attachments and the netCDF bookkeeping attributes.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Iterable
from typing import Any

import h5py
import numpy as np

__all__ = [
    "DEFAULT_IGNORE",
    "MANIFEST_ATTR",
    "NETCDF_HELPERS",
    "describe",
    "describe_h5",
    "describe_zarr",
    "diff",
]

#: The attribute the orchestrator adds to the root of every checkpoint it commits.
MANIFEST_ATTR = "io_orchestrator_manifest"
#: ``ignore`` token: netCDF dimension-only datasets, their attachments, netCDF bookkeeping.
NETCDF_HELPERS = "@netcdf-dimension-helpers"
DEFAULT_IGNORE: tuple[str, ...] = (MANIFEST_ATTR, NETCDF_HELPERS)

_NETCDF_DIM_NAME = b"This is a netCDF dimension but not a netCDF variable"
_NETCDF_ATTRS = ("_Netcdf4Dimid", "_Netcdf4Coordinates", "_NCProperties", "_nc3_strict")
# the dimension-scale machinery, described by "is_scale"/"scale_name"/"dims"/"dim_labels"
_DIMS_ATTRS = ("REFERENCE_LIST", "DIMENSION_LIST", "DIMENSION_LABELS")
_SCALE_ATTRS = ("CLASS", "NAME")
_LAYOUTS = {
    h5py.h5d.COMPACT: "compact",
    h5py.h5d.CONTIGUOUS: "contiguous",
    h5py.h5d.CHUNKED: "chunked",
    h5py.h5d.VIRTUAL: "virtual",
}


# ---------------------------------------------------------------------------- values


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays (also nested in lists/tuples) as plain Python values."""
    if isinstance(value, h5py.Empty):
        return {"empty": str(value.dtype)}
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _dtype_str(dt: np.dtype) -> str:
    """A dtype as text that keeps what HDF5 keeps: string kind/length/encoding, compounds."""
    info = h5py.check_string_dtype(dt)
    if info is not None:
        length = "variable" if info.length is None else info.length
        return f"str({info.encoding}, {length})"
    vlen = h5py.check_vlen_dtype(dt)
    if vlen is not None:
        return f"vlen({_dtype_str(vlen)})"
    if dt.kind == "b":
        return "|b1"
    enum = h5py.check_enum_dtype(dt)
    if enum is not None:
        return f"enum({dt.str}, {sorted(enum.items())})"
    if h5py.check_ref_dtype(dt) is not None:
        return "reference"
    if dt.names is not None:
        fields = ", ".join(f"{n}: {_dtype_str(dt.fields[n][0])}" for n in dt.names)
        return "{" + fields + "}"
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return f"{_dtype_str(base)}{list(shape)}"
    return dt.str


# ---------------------------------------------------------------------------- HDF5


def _h5_attrs(obj: h5py.HLObject, skip: Iterable[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    skip = set(skip)
    for name in obj.attrs:
        if name in skip:
            continue
        aid = obj.attrs.get_id(name)
        try:
            value = _plain(obj.attrs[name])
        except Exception as err:  # an attribute h5py cannot read back is a finding too
            value = f"<unreadable: {type(err).__name__}: {err}>"
        shape = aid.shape if aid.shape is not None else None
        out[name] = {"dtype": _dtype_str(aid.dtype), "shape": shape, "value": value}
    return out


def _h5_filters(ds: h5py.Dataset) -> list[Any]:
    dcpl = ds.id.get_create_plist()
    out = []
    for i in range(dcpl.get_nfilters()):
        code, _flags, values, name = dcpl.get_filter(i)
        out.append((int(code), name.decode(errors="replace"), tuple(int(v) for v in values)))
    return out


def _h5_dataset(ds: h5py.Dataset) -> dict[str, Any]:
    is_scale = bool(h5py.h5ds.is_scale(ds.id))
    scale_name = None
    if is_scale:
        raw = h5py.h5ds.get_scale_name(ds.id)
        scale_name = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    helper = is_scale and (scale_name or "").encode().startswith(_NETCDF_DIM_NAME)
    skip = _DIMS_ATTRS + (_SCALE_ATTRS if is_scale else ())
    try:
        values = _plain(ds[()])
    except Exception as err:
        values = f"<unreadable: {type(err).__name__}: {err}>"
    dims = []
    labels = []
    for axis in range(ds.ndim):
        dim = ds.dims[axis]
        labels.append(dim.label)
        dims.append(sorted(s.name for s in dim.values()))
    return {
        "shape": ds.shape,
        "dtype": _dtype_str(ds.dtype),
        "values": values,
        "attrs": _h5_attrs(ds, skip),
        "layout": _LAYOUTS.get(ds.id.get_create_plist().get_layout(), "other"),
        "chunks": ds.chunks,
        "maxshape": ds.maxshape,
        "compression": ds.compression,
        "compression_opts": _plain(ds.compression_opts),
        "shuffle": ds.shuffle,
        "fletcher32": ds.fletcher32,
        "scaleoffset": ds.scaleoffset,
        "filters": _h5_filters(ds),
        "fillvalue": _plain(ds.fillvalue),
        "is_scale": is_scale,
        "scale_name": scale_name,
        "dims": dims,
        "dim_labels": labels,
        "netcdf_dimension_helper": helper,
    }


def describe_h5(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Every group and dataset of the HDF5 file at ``path``, as plain data."""
    groups: dict[str, Any] = {}
    datasets: dict[str, Any] = {}
    other: dict[str, Any] = {}
    with h5py.File(path, "r") as f:
        groups["/"] = {"attrs": _h5_attrs(f)}

        def visit(name: str, obj: Any) -> None:
            p = "/" + name
            if isinstance(obj, h5py.Group):
                groups[p] = {"attrs": _h5_attrs(obj)}
            elif isinstance(obj, h5py.Dataset):
                datasets[p] = _h5_dataset(obj)
            else:  # committed datatypes and the like
                other[p] = {"attrs": _h5_attrs(obj), "type": type(obj).__name__}

        f.visititems(visit)
    for p, v in other.items():  # reported as groups of an odd type, so a diff shows them
        groups[p] = v
    return {"format": "hdf5", "groups": groups, "datasets": datasets}


# ---------------------------------------------------------------------------- Zarr


def _json_attrs(attrs: Any) -> dict[str, Any]:
    return {
        k: {"dtype": type(v).__name__, "shape": None, "value": _plain(v)}
        for k, v in dict(attrs).items()
    }


def _codec(c: Any) -> Any:
    to_dict = getattr(c, "to_dict", None)
    if callable(to_dict):
        return _plain(to_dict())
    get_config = getattr(c, "get_config", None)
    if callable(get_config):
        return _plain(get_config())
    return repr(c)


def _zarr_array(a: Any) -> dict[str, Any]:
    meta = a.metadata
    try:
        values = _plain(a[...])
    except Exception as err:
        values = f"<unreadable: {type(err).__name__}: {err}>"
    serializer = getattr(a, "serializer", None)
    return {
        "shape": tuple(a.shape),
        "dtype": _dtype_str(np.dtype(a.dtype)),
        "values": values,
        "attrs": _json_attrs(a.attrs),
        "zarr_format": meta.zarr_format,
        "chunks": tuple(a.chunks),
        "shards": None if a.shards is None else tuple(a.shards),
        "filters": [_codec(c) for c in a.filters],
        "serializer": None if serializer is None else _codec(serializer),
        "compressors": [_codec(c) for c in a.compressors],
        "fill_value": _plain(a.fill_value),
        "order": getattr(a, "order", None),
        "dimension_names": getattr(meta, "dimension_names", None),
        "netcdf_dimension_helper": False,
    }


def describe_zarr(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Every group and array of the Zarr hierarchy at ``path``, as plain data."""
    import zarr  # imported here: describing HDF5 files needs no Zarr

    root = zarr.open_group(os.fspath(path), mode="r")
    groups: dict[str, Any] = {"/": {"attrs": _json_attrs(root.attrs)}}
    datasets: dict[str, Any] = {}
    for name, member in root.members(max_depth=None):
        p = "/" + name
        if isinstance(member, zarr.Group):
            groups[p] = {"attrs": _json_attrs(member.attrs)}
        else:
            datasets[p] = _zarr_array(member)
    return {"format": "zarr", "groups": groups, "datasets": datasets}


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``describe_zarr`` for a directory (a Zarr store), ``describe_h5`` otherwise."""
    return describe_zarr(path) if os.path.isdir(path) else describe_h5(path)


# ---------------------------------------------------------------------------- diff


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (math.isnan(x) and math.isnan(y))
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if type(x) is not type(y) and {type(x), type(y)} & {str, bytes, type(None)}:
        return False
    return bool(x == y)


def _short(v: Any, limit: int = 100) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(x: Any, y: Any, index: tuple[int, ...] = ()) -> str:
    """Where two nested value lists first differ: ``[i, j]`` and both values there."""
    if isinstance(x, list | tuple) and isinstance(y, list | tuple) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            if not _same(u, v):
                return _where(u, v, (*index, i))
    at = "[" + ", ".join(map(str, index)) + "]" if index else "value"
    return f"{at}: {_short(x, 60)} != {_short(y, 60)}"


class _Ignore:
    def __init__(self, entries: Iterable[str]) -> None:
        entries = list(entries)
        self.helpers = NETCDF_HELPERS in entries
        self.fields = {e[len("field:") :] for e in entries if e.startswith("field:")}
        self.paths = [e for e in entries if e.startswith("/")]
        self.attrs = [
            e for e in entries if e != NETCDF_HELPERS and not e.startswith(("/", "field:"))
        ]
        if self.helpers:
            self.attrs += list(_NETCDF_ATTRS)

    def object(self, path: str, entry: dict[str, Any]) -> bool:
        if any(fnmatch.fnmatchcase(path, p) for p in self.paths):
            return True
        return self.helpers and bool(entry.get("netcdf_dimension_helper"))

    def attr(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.attrs)


def _diff_attrs(
    path: str, a: dict[str, Any], b: dict[str, Any], ign: _Ignore, la: str, lb: str
) -> list[str]:
    out = []
    for name in sorted(a.keys() | b.keys()):
        if ign.attr(name):
            continue
        if name not in b:
            out.append(f"{path}: attribute {name!r} only in {la} ({a[name]['dtype']})")
            continue
        if name not in a:
            out.append(f"{path}: attribute {name!r} only in {lb} ({b[name]['dtype']})")
            continue
        x, y = a[name], b[name]
        for key in ("dtype", "shape"):
            if not _same(x[key], y[key]):
                out.append(
                    f"{path}: attribute {name!r} {key} {_short(x[key])} ({la}) "
                    f"!= {_short(y[key])} ({lb})"
                )
        if not _same(x["value"], y["value"]):
            out.append(f"{path}: attribute {name!r} {_where(x['value'], y['value'])}")
    return out


def _diff_entry(
    path: str,
    a: dict[str, Any],
    b: dict[str, Any],
    ign: _Ignore,
    dropped: set[str],
    la: str,
    lb: str,
) -> list[str]:
    out = []
    for key in [k for k in a if k != "attrs"] + [k for k in b if k not in a and k != "attrs"]:
        if key in ign.fields or key == "netcdf_dimension_helper":
            continue
        if key not in a or key not in b:
            out.append(f"{path}: {key} only described in {la if key in a else lb}")
            continue
        x, y = a[key], b[key]
        if key == "dims":
            x = [[s for s in axis if s not in dropped] for axis in x]
            y = [[s for s in axis if s not in dropped] for axis in y]
        if _same(x, y):
            continue
        if key == "values":
            out.append(f"{path}: values differ at {_where(x, y)}")
        else:
            out.append(f"{path}: {key} {_short(x)} ({la}) != {_short(y)} ({lb})")
    out += _diff_attrs(path, a.get("attrs", {}), b.get("attrs", {}), ign, la, lb)
    return out


def diff(
    a: dict[str, Any],
    b: dict[str, Any],
    ignore: Iterable[str] = DEFAULT_IGNORE,
    labels: tuple[str, str] = ("a", "b"),
) -> list[str]:
    """Every difference between two descriptions, one readable line each ([] = same)."""
    ign = _Ignore(ignore)
    la, lb = labels
    out: list[str] = []
    if a.get("format") != b.get("format"):
        out.append(f"/: format {a.get('format')!r} ({la}) != {b.get('format')!r} ({lb})")
    dropped = {
        p
        for d in (a, b)
        for p, entry in d["datasets"].items()
        if ign.helpers and entry.get("netcdf_dimension_helper")
    }
    for kind, what in (("groups", "group"), ("datasets", "dataset")):
        xa = {p: v for p, v in a[kind].items() if not ign.object(p, v)}
        xb = {p: v for p, v in b[kind].items() if not ign.object(p, v)}
        for p in sorted(xa.keys() - xb.keys()):
            out.append(f"{p}: {what} only in {la}")
        for p in sorted(xb.keys() - xa.keys()):
            out.append(f"{p}: {what} only in {lb}")
        for p in sorted(xa.keys() & xb.keys()):
            out += _diff_entry(p, xa[p], xb[p], ign, dropped, la, lb)
    return out
