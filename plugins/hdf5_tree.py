"""What an HDF5 checkpoint holds besides the bytes of its datasets: groups, storage options,
dimension scales, attributes and small datasets.

Shared by the single-file and the subfile backends. Storage options go to
h5py as the user gave them (``create_dataset`` keywords), so a chunked or
compressed dataset is the one their own h5py code would have made;
dimensions are netCDF-4 dimension scales, as h5netcdf and netCDF-C write
them, so xarray names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchestrator.contributions import DatasetSpec
from orchestrator.errors import StorageError
from orchestrator.specs import parent_groups
from orchestrator.typedjson import decode

#: what netCDF-4 names a dimension scale that is not also a variable (h5netcdf, netCDF-C)
NOT_A_VARIABLE = b"This is a netCDF dimension but not a netCDF variable."


def check_spec(spec: DatasetSpec, fmt: str, subfiles: bool = False) -> None:
    """Refuse what HDF5 (or its subfile layout) cannot store as asked, naming the option.

    Examples
    --------
    >>> check_spec(DatasetSpec("u", (4,), "f8", shards=(2,)), "hdf5")
    Traceback (most recent call last):
    ...
    orchestrator.errors.StorageError: dataset 'u': shards=(2,) is a Zarr option; ...
    """
    where = f"dataset {spec.name!r}"
    if spec.shards is not None:
        raise StorageError(
            f"{where}: shards={spec.shards} is a Zarr option; HDF5 has chunks (format {fmt})"
        )
    if not (isinstance(spec.compressors, str) and spec.compressors == "auto"):
        raise StorageError(
            f"{where}: compressors={spec.compressors!r} is a Zarr option; give HDF5 "
            f"compression= and compression_opts= (format {fmt})"
        )
    if spec.dtype.kind == "U":
        raise StorageError(
            f"{where}: dtype {spec.dtype} (NumPy text) has no HDF5 type (h5py refuses it too); "
            "store bytes ('S') or variable-length strings"
        )
    if isinstance(spec.chunks, tuple):
        for i, (c, n) in enumerate(zip(spec.chunks, spec.shape, strict=True)):
            grows = spec.maxshape is not None and (spec.maxshape[i] is None or spec.maxshape[i] > n)
            if c > n and not grows:
                raise StorageError(
                    f"{where}: chunks={spec.chunks}: {c} is larger than axis {i} ({n}), which "
                    "cannot grow without maxshape (h5py refuses it too)"
                )
    if subfiles and spec.maxshape is not None:
        raise StorageError(
            f"{where}: maxshape={spec.maxshape} (a growable dataset) cannot be a virtual "
            f"dataset over subfiles (format {fmt}); use format 'hdf5'"
        )
    if spec.compression in ("zstd", "blosc"):
        try:
            import hdf5plugin  # noqa: F401
        except ImportError:
            raise StorageError(
                f"{where}: compression={spec.compression!r} needs the hdf5plugin package"
            ) from None


def h5_kwargs(spec: DatasetSpec, chunks: Any = None) -> dict[str, Any]:
    """``h5py.Group.create_dataset`` keywords of ``spec``'s storage options (chunks: override).

    Examples
    --------
    >>> h5_kwargs(DatasetSpec("u", (8, 3), "f4", compression="gzip", shuffle=True))["compression"]
    'gzip'
    """
    kw: dict[str, Any] = {"fillvalue": spec.fill_value}
    chunks = spec.chunks if chunks is None else chunks
    if chunks is not None:
        kw["chunks"] = chunks
    if spec.maxshape is not None:
        kw["maxshape"] = spec.maxshape
    if spec.compression in ("gzip", "lzf"):
        kw["compression"] = spec.compression
        if spec.compression_opts is not None:
            kw["compression_opts"] = spec.compression_opts
    elif spec.compression == "zstd":
        import hdf5plugin

        kw.update(
            hdf5plugin.Zstd(clevel=3 if spec.compression_opts is None else spec.compression_opts)
        )
    elif spec.compression == "blosc":
        import hdf5plugin

        kw.update(
            hdf5plugin.Blosc(clevel=5 if spec.compression_opts is None else spec.compression_opts)
        )
    if spec.shuffle:
        kw["shuffle"] = True
    if spec.fletcher32:
        kw["fletcher32"] = True
    return kw


def load_filters(kwargs: Mapping[str, Any]) -> None:
    """Register hdf5plugin's filters in this process when ``kwargs`` name one by number (a
    worker process has not imported it; h5py then knows no filter 32015).

    Examples
    --------
    >>> load_filters({"compression": "gzip"})  # h5py's own: nothing to load
    """
    if isinstance(kwargs.get("compression"), int):
        import hdf5plugin  # noqa: F401


def resolved_chunks(spec: DatasetSpec) -> tuple[int, ...] | None:
    """The chunk shape h5py gives ``spec`` (its own guess for ``chunks=True`` or a compressed
    dataset given no chunks); None for a contiguous dataset.

    Examples
    --------
    >>> resolved_chunks(DatasetSpec("u", (100, 3), "f8", chunks=(10, 3)))
    (10, 3)
    >>> resolved_chunks(DatasetSpec("u", (100, 3), "f8")) is None
    True
    """
    if not spec.chunked:
        return None
    if isinstance(spec.chunks, tuple):
        return spec.chunks
    import h5py

    with h5py.File("chunks", "w", driver="core", backing_store=False) as f:
        ds = f.create_dataset("d", shape=spec.shape, dtype=spec.dtype, **h5_kwargs(spec))
        return tuple(ds.chunks)


def chunk_band_bytes(spec: DatasetSpec) -> int:
    """Bytes of one band of whole chunks along the rows (0: contiguous, any cut will do).

    Examples
    --------
    >>> chunk_band_bytes(DatasetSpec("u", (100, 3), "f8", chunks=(10, 3)))
    240
    """
    chunks = resolved_chunks(spec)
    return 0 if chunks is None else chunks[0] * max(spec.row_bytes, 1)


def link_create() -> Any:
    """A link-creation property list that makes missing groups on the way (``"a/b/u"``).

    Examples
    --------
    >>> link_create().get_create_intermediate_group()
    True
    """
    import h5py

    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(True)
    lcpl.set_char_encoding(h5py.h5t.CSET_UTF8)
    return lcpl


def create_contiguous(
    f: Any, name: str, shape: tuple[int, ...], dtype: Any, fill: Any = None
) -> int:
    """A contiguous dataset allocated now, never filled; its byte offset in the file.

    Examples
    --------
    >>> import h5py
    >>> with h5py.File("mem", "w", driver="core", backing_store=False) as f:
    ...     offset = create_contiguous(f, "state/u", (4, 2), np.dtype("f8"))
    ...     f["state/u"].shape, offset > 0
    ((4, 2), True)
    """
    import h5py

    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    if fill is not None:  # kept as the dataset's property, as h5py's fillvalue= keeps it
        dcpl.set_fill_value(np.array(fill, dtype=dtype))
    space = h5py.h5s.create_simple(shape)
    tid = h5py.h5t.py_create(dtype, logical=True)
    dsid = h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl, lcpl=link_create())
    offset = int(dsid.get_offset())
    dsid.close()
    return offset


#: most chunks of one dataset written in place (their addresses go to every I/O node)
MAX_TABLE = 1 << 20


def create_chunked(f: Any, spec: DatasetSpec, kw: dict[str, Any]) -> list[int] | None:
    """Create ``spec``'s chunked dataset with keywords ``kw``; where its chunks need no
    encoding, the file address of each (in row order), for writes in place.

    That is the case of chunks without filters that span whole rows (``chunks[1:]``
    the row's shape), at most :data:`MAX_TABLE` of them: allocated now
    (``H5D_ALLOC_TIME_EARLY``, never filled), a chunk holds its rows' bytes as they
    are, and I/O nodes write them at its address as they write a contiguous
    dataset. Otherwise (None) the chunks are encoded by the I/O nodes and stored at
    the end (:mod:`plugins.hdf5_chunks`).

    Examples
    --------
    >>> import h5py
    >>> spec = DatasetSpec("u", (8, 3), "f8", chunks=(2, 3))
    >>> with h5py.File("mem", "w", driver="core", backing_store=False) as f:
    ...     len(create_chunked(f, spec, h5_kwargs(spec)))
    4
    """
    import h5py

    chunks = kw["chunks"]
    plain = not (spec.compression or spec.shuffle or spec.fletcher32)
    whole_rows = tuple(chunks[1:]) == tuple(spec.shape[1:])
    n = -(-spec.n_rows // chunks[0]) if spec.n_rows else 0
    if not (plain and whole_rows and 0 < n <= MAX_TABLE):
        f.create_dataset(spec.name, shape=spec.shape, dtype=spec.dtype, **kw)
        return None
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)  # every byte is written (or filled)
    ds = f.create_dataset(spec.name, shape=spec.shape, dtype=spec.dtype, dcpl=dcpl, **kw)
    if ds.id.get_num_chunks() != n:
        return None
    addrs = [0] * n
    for i in range(n):
        info = ds.id.get_chunk_info(i)
        addrs[info.chunk_offset[0] // chunks[0]] = int(info.byte_offset)
    return addrs


def _scale_path(spec: DatasetSpec, dim: str, names: set[str]) -> str:
    """Where dimension ``dim`` of ``spec`` has its scale: a coordinate dataset of that name in
    the dataset's group or the nearest group above (netCDF-4 scoping), else its own group."""
    groups = [spec.group, *reversed(parent_groups(spec.name)[:-1])] if spec.group else [""]
    if spec.group:
        groups.append("")
    for g in groups:
        path = f"{g}/{dim}" if g else dim
        if path in names:
            return path
    return f"{spec.group}/{dim}" if spec.group else dim


def _helper_scale(f: Any, path: str, n: int, grows: bool) -> None:
    """An empty ``>f4`` dimension scale of length ``n`` that is not a variable (netCDF-C's)."""
    ds = f.create_dataset(
        path, shape=(n,), dtype=">f4", maxshape=(None,) if grows or not n else None
    )
    ds.make_scale(NOT_A_VARIABLE + f"{n:10}".encode())


def make_scales(f: Any, specs: Sequence[DatasetSpec]) -> None:
    """netCDF-4 dimension scales in ``f`` for every dimension named by ``specs``, attached.

    A 1-d dataset whose name is its own dimension is that dimension's scale (a
    coordinate variable); any other dimension gets an empty ``>f4`` scale
    dataset named after it in the dataset's group, as netCDF-C makes them.

    Examples
    --------
    >>> import h5py
    >>> specs = [DatasetSpec("x", (3,), "f8", dims=["x"]),
    ...          DatasetSpec("u", (3, 2), "f8", dims=["x", "c"])]
    >>> with h5py.File("mem", "w", driver="core", backing_store=False) as f:
    ...     for s in specs:
    ...         _ = f.create_dataset(s.name, shape=s.shape, dtype=s.dtype)
    ...     make_scales(f, specs)
    ...     [d[0].name for d in f["u"].dims]
    ['/x', '/c']
    """
    names = {s.name for s in specs}
    scales: dict[str, Any] = {}
    for s in specs:
        for d in s.dims:
            if d is None:
                continue
            path = _scale_path(s, d, names)
            if path in scales:
                continue
            if path in names:  # a coordinate variable: the scale of its own dimension
                f[path].make_scale(d)
            elif path in f:  # made with the datasets of rows
                pass
            else:
                grows = any(
                    o.maxshape is not None and o.maxshape[o.dims.index(d)] is None
                    for o in specs
                    if o.group == s.group and d in o.dims
                )
                _helper_scale(f, path, s.shape[s.dims.index(d)], grows)
            scales[path] = f[path]
    for s in specs:
        for axis, d in enumerate(s.dims):
            if d is None:
                continue
            path = _scale_path(s, d, names)
            if path != s.name:
                f[s.name].dims[axis].attach_scale(scales[path])


def write_tree(f: Any, tree: Mapping[str, Any]) -> None:
    """Groups, small datasets and attributes of a stage (``tree``: ``groups``, ``values``,
    ``empty``, ``attrs`` with NumPy values as :mod:`orchestrator.typedjson` encodes them).

    Examples
    --------
    >>> import h5py
    >>> from orchestrator.specs import check_values
    >>> from orchestrator.typedjson import encode
    >>> tree = {"groups": ["run"], "values": check_values({"run/t": np.float32(1.5)}),
    ...         "attrs": {"run": {"n": encode(np.int16(3))}}}
    >>> with h5py.File("mem", "w", driver="core", backing_store=False) as f:
    ...     write_tree(f, tree)
    ...     f["run/t"][()], f["run"].attrs["n"].dtype
    (np.float32(1.5), dtype('int16'))
    """
    import h5py

    for g in tree.get("groups", ()):
        f.require_group(g)
    empty = tree.get("empty", ())
    for spec in empty:
        f.create_dataset(spec.name, shape=spec.shape, dtype=spec.dtype, **h5_kwargs(spec))
    make_scales(f, empty)
    for name, value in tree.get("values", {}).items():
        for g in parent_groups(name):
            f.require_group(g)
        arr = decode(value["value"])
        opts = {k: tuple(v) if isinstance(v, list) else v for k, v in value["options"].items()}
        if value["text"]:  # variable-length text
            encoding = value.get("encoding", "utf-8")
            items = [arr] if isinstance(arr, str) else arr
            if encoding == "ascii":  # h5py stores ASCII text from bytes, one per character
                items = [t.encode("latin-1") for t in items]
            data: Any = np.empty(len(items), dtype=object)
            data[:] = items
            if isinstance(arr, str):
                data = data.reshape(())
            opts.pop("fillvalue", None)  # h5py keeps no fill value for variable-length text
            ds = f.create_dataset(name, data=data, dtype=h5py.string_dtype(encoding), **opts)
        else:
            ds = f.create_dataset(name, data=arr, **opts)
        for axis, d in enumerate(value["dims"]):  # named, as rows' datasets are
            group = name.rpartition("/")[0]
            path = f"{group}/{d}" if group else d
            if path not in f:
                _helper_scale(f, path, ds.shape[axis], grows=False)
            ds.dims[axis].attach_scale(f[path])
    for where, attrs in tree.get("attrs", {}).items():
        node = f[where] if where else f
        for key, value in attrs.items():
            node.attrs[key] = decode(value)
