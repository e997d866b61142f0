"""Zarr v3 backend: sharded arrays, every shard owned and written whole by one I/O node.

The stripe of the layout is one shard (``rows_per_shard`` rows), so the
round-robin striping gives each shard exactly one I/O node. zarr-python
rewrites a whole shard on any write and concurrent partial writes of one
shard lose data, so a shard is stored once, whole: by the worker holding
most of its rows when every source is on the I/O node's host
(:func:`orchestrator.engine.sources.store_stripes`), else by the I/O worker,
which gathers its pieces in memory (padded with the fill value where rows
were allowed to be missing). The manifest is an attribute of the root
group, committed with the store directory by one rename.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contributions import DatasetSpec
from orchestrator.engine.directio import write_file
from orchestrator.engine.storage import (
    Backend,
    StorageError,
    WholeStripeWriter,
    Writer,
    stripe_meta,
)
from orchestrator.files import fsync_tree
from orchestrator.layout import StripeLayout
from orchestrator.typedjson import decode

MANIFEST_ATTR = "io_orchestrator_manifest"


def _rows_per_shard(spec: DatasetSpec, requested: int) -> int:
    # never more rows than the dataset has: a writer holds a stripe whole, and a 4 GiB
    # stripe of a 24 kB dataset cost its worker 4 GiB (killed at its memory limit)
    return max(1, min(requested // max(spec.row_bytes, 1), spec.n_rows))


def _plain_record(dt: np.dtype[Any]) -> bool:
    """A record zarr-python stores and reads back as given: packed, plain native fields."""
    offset = 0
    for name in dt.names or ():
        field, at = dt.fields[name][:2]  # type: ignore[index]
        if field.subdtype is not None or field.names or at != offset:
            return False
        if field.byteorder not in "=|" and field != field.newbyteorder("="):
            return False
        offset += field.itemsize
    return offset == dt.itemsize


def _plain(value: Any) -> Any:
    """An attribute value as zarr-python stores it: JSON, NumPy values as Python ones."""
    if isinstance(value, np.generic | np.ndarray):
        value = value.tolist()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, complex):
        return [value.real, value.imag]
    return value


def zarr_fill(spec: DatasetSpec) -> Any:
    """The fill value as zarr-python takes it: a structured one as its bytes (given as a
    NumPy record, zarr-python 3.1 fails reading the array: its scalar is not hashable).

    Examples
    --------
    >>> zarr_fill(DatasetSpec("p", (2,), [("a", "<i2")], fill_value=(7,)))
    b'\\x07\\x00'
    """
    if spec.dtype.names:
        return np.array(spec.fill_value, dtype=spec.dtype).tobytes()
    return spec.fill_value


def zarr_kwargs(spec: DatasetSpec) -> dict[str, Any]:
    """``zarr.Group.create_array`` keywords of ``spec`` as the user asked for it.

    Examples
    --------
    >>> zarr_kwargs(DatasetSpec("u", (10, 3), "f4", chunks=(5, 3)))["chunks"]
    (5, 3)
    """
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    kw: dict[str, Any] = {
        "shape": spec.shape,
        "dtype": spec.dtype,
        "fill_value": zarr_fill(spec),
        "dimension_names": spec.dims or None,
        "chunks": "auto" if spec.chunks in (None, True) else spec.chunks,
    }
    if spec.shards is not None:
        kw["shards"] = spec.shards
    level = spec.compression_opts
    if spec.compression == "gzip":
        kw["compressors"] = GzipCodec(level=5 if level is None else level)
    elif spec.compression == "zstd":
        kw["compressors"] = ZstdCodec(level=0 if level is None else level)
    elif spec.compression == "blosc":
        kw["compressors"] = BloscCodec(clevel=5 if level is None else level)
    elif not (isinstance(spec.compressors, str) and spec.compressors == "auto"):
        kw["compressors"] = spec.compressors
    return kw


def resolved_chunks(spec: DatasetSpec) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """``(chunks, shards)`` zarr-python gives ``spec`` (its own guess for ``"auto"``).

    Examples
    --------
    >>> resolved_chunks(DatasetSpec("u", (100, 3), "f4", chunks=(10, 3), shards=(50, 3)))
    ((10, 3), (50, 3))
    """
    import zarr

    a = zarr.create_array(zarr.storage.MemoryStore(), **zarr_kwargs(spec))
    return tuple(a.chunks), None if a.shards is None else tuple(a.shards)


_LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}


def shard_encoder(metadata: dict[str, Any]) -> Callable[[Any], list[Any]] | None:
    """Our own encoder of one whole shard of the array ``metadata`` describes, if it can.

    The layout :class:`ZarrBackend` creates — one inner chunk per shard, its
    bytes little-endian then zstd (or nothing), the index at the end,
    little-endian with its CRC-32C — is encoded here directly: the chunk's
    bytes compressed by the same ``numcodecs`` codec zarr-python uses, then
    the index ``(offset 0, length)`` and its checksum. zarr-python spends
    as long again as the compression around each shard (its event loop,
    a ``mkdir`` and an atomic rename per write, a read of the shard it
    replaces) — measured in a 1 GiB stage, ~40 % of the compute workers'
    time. Any other layout (other codecs, several inner chunks, big-endian)
    returns None: zarr-python writes it. The shard comes as buffers to be
    written one after the other (the chunk's bytes, then the index and its
    checksum); joined they are zarr-python's bytes (tests compare them shard
    by shard).

    Examples
    --------
    >>> import zarr, tempfile
    >>> a = zarr.create_array(tempfile.mkdtemp(), shape=(4, 2), dtype="<i4", chunks=(2, 2),
    ...                       shards=(2, 2), compressors=None)
    >>> enc = shard_encoder(a.metadata.to_dict())
    >>> shard = b"".join(enc(np.ones((2, 2), "<i4")))
    >>> shard[:16] == np.ones(4, "<i4").tobytes()  # no compressor: the chunk's bytes
    True
    >>> np.frombuffer(shard[16:32], "<u8").tolist()  # the index: offset, length
    [0, 16]
    """
    try:
        (codec,) = metadata["codecs"]
        conf = codec["configuration"]
        chunks = list(metadata["chunk_grid"]["configuration"]["chunk_shape"])
        key = metadata["chunk_key_encoding"]
    except (KeyError, TypeError, ValueError):
        return None
    if (
        codec.get("name") != "sharding_indexed"
        or list(conf.get("chunk_shape", ())) != chunks
        or conf.get("index_location", "end") != "end"
        or list(conf.get("index_codecs", ())) != [_LITTLE, {"name": "crc32c"}]
        or metadata.get("storage_transformers")
        or key != {"name": "default", "configuration": {"separator": "/"}}
        or sys.byteorder != "little"
    ):
        return None
    inner = list(conf.get("codecs", ()))
    # one-byte types have no byte order: their bytes codec has no configuration
    if not inner or inner[0] not in (_LITTLE, {"name": "bytes"}):
        return None
    compress: Callable[[Any], Any] | None = None
    if len(inner) == 2 and inner[1].get("name") == "zstd":
        from numcodecs import Zstd

        zc = inner[1].get("configuration", {})
        compress = Zstd(
            level=int(zc.get("level", 0)), checksum=bool(zc.get("checksum", False))
        ).encode
    elif len(inner) != 1:
        return None

    import google_crc32c

    def encode(chunk: Any) -> list[Any]:
        raw = np.ascontiguousarray(chunk)
        if raw.dtype.byteorder == ">":
            raw = raw.astype(raw.dtype.newbyteorder("<"))
        body = raw.reshape(-1).view(np.uint8)
        # uncompressed, the chunk's own buffer is the shard's body: no copy into a new
        # bytes object and again into the joined shard (each in fresh memory)
        data = memoryview(compress(body)) if compress is not None else body.data
        index = np.array([0, len(data)], dtype="<u8").tobytes()
        return [data, index + google_crc32c.value(index).to_bytes(4, "little")]

    return encode


class ZarrWriter(WholeStripeWriter):
    """Gathers pieces per shard and writes each shard whole, once.

    A shard is its own file, so workers on the I/O node's host may assemble,
    encode and store shards themselves (``direct = "stripes"``).
    """

    direct = "stripes"

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(info["datasets"])
        self.path = info["path"]
        self.arrays: dict[str, Any] = {}
        self.encoders: dict[str, Callable[[Any], list[Any]] | None] = {}

    def store(self, name: str, k: int, rows: Any) -> None:
        import zarr

        if name not in self.arrays:  # opened on first use: a source stores few datasets
            # a checkpoint's chunks are seldom all fill values: comparing every chunk with
            # the fill value (to skip storing it) took as long as encoding it (measured:
            # 550 vs 1,250 MiB/s per process); the data read back is the same either way
            self.arrays[name] = zarr.open_array(self.path, path=name, mode="r+").with_config(
                {"write_empty_chunks": True}
            )
            self.encoders[name] = shard_encoder(self.arrays[name].metadata.to_dict())
        m = self.meta[name]
        r0 = k * m["rows_per_stripe"]
        encode = self.encoders[name]
        if encode is None:
            self.arrays[name][r0 : r0 + rows.shape[0]] = rows
            return
        if rows.shape[0] < m["rows_per_stripe"]:  # the last shard: stored full size, padded
            # with the array's own fill value, as zarr-python pads (None is 0 there)
            fill = self.arrays[name].fill_value
            full = np.full((m["rows_per_stripe"], *rows.shape[1:]), fill, rows.dtype)
            full[: rows.shape[0]] = rows
            rows = full
        # the shard's key: c/<k>/0/... (rows are split along the first axis only)
        folder = os.path.join(self.path, name, "c", *([str(k)] + ["0"] * (rows.ndim - 1))[:-1])
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, str(k) if rows.ndim == 1 else "0")
        # the shard's whole pages straight to the device, its last partial page (the end
        # of the index) through the cache: written through the cache, 1 GiB of 8 MiB
        # shards cost 0.24 s of CPU (2 s while the cache's memory was fresh) and 0.65 s
        # with the fsync; direct 0.05 s and 0.47 s (128 files written then fsync'd, one
        # process). 0o666 less the umask, as zarr-python creates them
        write_file(path, [memoryview(b).cast("B") for b in encode(rows)], 0o666)

    def file_identity(self) -> tuple[int, int] | None:
        st = os.stat(self.path)
        return (st.st_dev, st.st_ino)

    def release(self) -> None:
        self.arrays.clear()
        super().release()


class ZarrBackend(Backend):
    """Zarr v3 with shards as stripes (see module docstring)."""

    name = "zarr"
    suffix = ".zarr"
    #: zarr-python reads a big-endian array back in this machine's order (see write_stage)
    native_byte_order_only = True

    def guess_can_open(self, path: Path) -> bool:
        """A folder holding a Zarr v3 group's ``zarr.json``."""
        return path.is_dir() and (path / "zarr.json").is_file()

    def stripe_size(self, spec: DatasetSpec, requested: int) -> int:
        if spec.chunked:  # bands of whole shards (or chunks, unsharded): one writer each
            chunks, shards = resolved_chunks(spec)
            rows = (shards or chunks)[0]
            band = rows * max(spec.row_bytes, 1)
            return max(1, min(requested // band, -(-spec.n_rows // max(rows, 1)))) * band
        return _rows_per_shard(spec, requested) * spec.row_bytes

    def chunk_shape(self, spec: DatasetSpec) -> tuple[int, ...] | None:
        """zarr-python's chunks for ``spec`` (its ``"auto"`` guess when none are given)."""
        return resolved_chunks(spec)[0] if spec.chunked else None

    def check_spec(self, spec: DatasetSpec) -> None:
        """Refuse what Zarr cannot store as asked (HDF5's options), by name."""
        where = f"dataset {spec.name!r}"
        for option, given in (
            ("maxshape", spec.maxshape is not None),
            ("shuffle", spec.shuffle),
            ("fletcher32", spec.fletcher32),
        ):
            if given:
                raise StorageError(
                    f"{where}: {option}={getattr(spec, option)!r} is an HDF5 option; Zarr has "
                    + (
                        "no such filter (give compressors=)"
                        if option != "maxshape"
                        else "arrays that grow without it (resize them)"
                    )
                )
        if spec.compression == "lzf":
            raise StorageError(f"{where}: compression='lzf' has no Zarr codec (use zstd or gzip)")
        if spec.compression is not None and not (
            isinstance(spec.compressors, str) and spec.compressors == "auto"
        ):
            raise StorageError(
                f"{where}: compression={spec.compression!r} and compressors= both given; give one"
            )
        if spec.dtype.names and not _plain_record(spec.dtype):
            raise StorageError(
                f"{where}: dtype {spec.dtype}: Zarr (zarr-python 3.1) stores records of plain "
                "fields in this machine's byte order, packed; this one has a sub-array, "
                "another byte order or padding (store it in HDF5, or split its fields)"
            )
        if spec.shards is not None and spec.dtype.names:
            raise StorageError(
                f"{where}: shards={spec.shards} with a structured dtype: zarr-python 3.1 cannot "
                "read such an array back once reopened; give chunks only"
            )
        if spec.chunked:
            try:
                resolved_chunks(spec)
            except StorageError:
                raise
            except Exception as err:  # zarr-python's own refusal: shards not a multiple, …
                raise StorageError(
                    f"{where}: chunks={spec.chunks!r}, shards={spec.shards!r}, "
                    f"compressors={spec.compressors!r}: {err}"
                ) from None

    def create(
        self, tmp: Path, specs: Sequence[DatasetSpec], layouts: Sequence[StripeLayout]
    ) -> dict[str, Any]:
        import zarr

        group = zarr.open_group(tmp, mode="w-")
        meta = {}
        for spec, lay in zip(specs, layouts, strict=True):
            if spec.chunked:  # as the user's zarr-python would create it
                group.create_array(spec.name, **zarr_kwargs(spec))
            else:
                rps = lay.stripe_bytes // spec.row_bytes
                # one inner chunk per shard: zarr-python encodes a shard given whole as it is,
                # but copies it into a buffer of fill values per inner chunk when there are
                # several (measured: 1,290 against 890 MB/s per process for 8 MiB shards, and
                # 12 % of the compute workers' time in a 1 GiB stage). A reader of a few rows
                # decodes the whole shard, as with dask.array.to_zarr's chunks of the same size
                group.create_array(
                    spec.name,
                    shape=spec.shape,
                    dtype=spec.dtype,
                    chunks=(rps, *spec.row_shape),
                    # zarr-python 3.1 cannot read a sharded structured array it reopens
                    # ("unhashable type: 'writeable void-scalar'"): one chunk per stripe
                    shards=None if spec.dtype.names else (rps, *spec.row_shape),
                    fill_value=zarr_fill(spec),
                    dimension_names=spec.dims or None,
                )
            meta[spec.name] = stripe_meta(spec, lay)
        return {"path": str(tmp), "datasets": meta}

    def writer(self, info: dict[str, Any], ionode: int, aggregate: bool) -> Writer:
        return ZarrWriter(info)

    def direct_writes(self, info: dict[str, Any]) -> bool:
        return True

    def fill(self, info: dict[str, Any], spec: DatasetSpec, rows: Any) -> None:
        """Nothing to do: unwritten rows read as the array's fill value."""

    def write_tree(self, tmp: Path, tree: dict[str, Any]) -> None:
        """Groups, small datasets and attributes (JSON in Zarr: NumPy values as their
        Python values, as zarr-python stores them)."""
        import zarr

        write_tree(zarr.open_group(tmp, mode="r+"), tree)

    def check_tree(self, tree: dict[str, Any]) -> None:
        """Try the stage's groups, values and attributes in memory first: what zarr-python
        refuses fails here, by name, not after every row is written."""
        import zarr

        try:
            group = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
            write_tree(group, {**tree, "attrs": {}})
            for where in tree.get("attrs") or {}:  # a dataset of rows: a stand-in
                if where and where not in group:
                    group.create_array(where, shape=(1,), dtype="f8")
            write_tree(group, {"attrs": tree.get("attrs") or {}})
        except StorageError:
            raise
        except Exception as err:  # zarr-python's own refusal, of any type
            raise StorageError(f"the stage's groups, values or attributes: {err}") from None

    def finish(self, tmp: Path, manifest: dict[str, Any]) -> None:
        import zarr

        group = zarr.open_group(tmp, mode="r+")
        group.attrs[MANIFEST_ATTR] = manifest
        # one read gives a reader every array's metadata (xarray.open_zarr looks for it first).
        # zarr-python warns that Zarr v3 has it as an extension, not in the core spec yet:
        # known and chosen (readers without it read the arrays' own zarr.json)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
            zarr.consolidate_metadata(tmp)
        fsync_tree(tmp)

    def read_manifest(self, path: Path) -> dict[str, Any]:
        import zarr

        try:
            stored: Any = zarr.open_group(path, mode="r").attrs[MANIFEST_ATTR]
            manifest: dict[str, Any] = dict(stored)
        except Exception as err:  # zarr raises several types for a missing/invalid store
            msg = f"{path}: not a checkpoint written by io-orchestrator ({err})"
            raise StorageError(msg) from None
        return manifest

    def read_bytes(self, path: Path, dataset: str, offset: int, nbytes: int) -> bytes:
        import zarr

        arr = zarr.open_array(path, path=dataset, mode="r")
        rb = int(np.prod(arr.shape[1:], dtype=np.int64)) * np.dtype(arr.dtype).itemsize
        r0, r1 = offset // rb, -(-(offset + nbytes) // rb)
        raw = np.ascontiguousarray(arr[r0:r1]).reshape(-1).view(np.uint8)
        return raw[offset - r0 * rb : offset - r0 * rb + nbytes].tobytes()

    def open(self, path: Path) -> dict[str, Any]:
        import zarr

        group = zarr.open_group(path, mode="r")
        manifest: dict[str, Any] = dict(group.attrs[MANIFEST_ATTR])  # type: ignore[arg-type]
        names = [
            *manifest.get("datasets", {}),
            *manifest.get("values", {}),
            *manifest.get("empty", {}),
        ]
        return {name: group[name] for name in names}


def write_tree(group: Any, tree: dict[str, Any]) -> None:
    """A stage's groups, small and empty datasets and attributes into a Zarr ``group``.

    Examples
    --------
    >>> import zarr
    >>> from orchestrator.specs import check_values
    >>> g = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    >>> write_tree(g, {"groups": ["run"], "values": check_values({"run/t": 1.5})})
    >>> float(g["run/t"][()])
    1.5
    """
    for g in tree.get("groups", ()):
        group.require_group(g)
    for spec in tree.get("empty", ()):
        group.create_array(spec.name, **zarr_kwargs(spec))
    for name, value in tree.get("values", {}).items():
        arr = decode(value["value"])
        options = dict(value["options"])
        if "fillvalue" in options:
            options["fill_value"] = options.pop("fillvalue")
        if set(options) - {"chunks", "fill_value"}:
            raise StorageError(
                f"values[{name!r}]: options {sorted(options)} are HDF5's; Zarr "
                "takes chunks and a fill value only here"
            )
        if value["text"]:  # variable-length text
            items = [arr] if isinstance(arr, str) else arr
            data: Any = np.empty(len(items), dtype=object)
            data[:] = items
            if isinstance(arr, str):
                data = data.reshape(())
            options.pop("fill_value", None)
            a = group.create_array(
                name,
                shape=data.shape,
                dtype=str,
                fill_value="",
                dimension_names=value["dims"] or None,
                **options,
            )
            a[...] = data
        else:
            arr = np.asarray(arr)
            a = group.create_array(
                name,
                shape=arr.shape,
                dtype=arr.dtype,
                dimension_names=value["dims"] or None,
                **options,
            )
            a[...] = arr
    for where, attrs in tree.get("attrs", {}).items():  # "" = the root, else a group/array
        node = group[where] if where else group
        node.attrs.update({k: _plain(decode(v)) for k, v in attrs.items()})
