"""The storage-backend interface; HDF5 and Zarr implement it in ``orchestrator.plugins``.

A backend knows one file format and nothing about scheduling. The parent
process creates the (temporary) target and finishes it; I/O workers get a
small picklable ``info`` dict and open a :class:`Writer` from it, which
receives byte ranges of datasets and decides when to write them.
"""

from __future__ import annotations

import importlib
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .contributions import DatasetSpec
from .layout import StripeLayout

__all__ = [
    "Backend",
    "StorageError",
    "WholeStripeWriter",
    "Writer",
    "get_backend",
    "stripe_checksum",
    "stripe_meta",
]

MANIFEST_VERSION = 1


class StorageError(RuntimeError):
    """A target could not be created, written, committed or verified."""


def stripe_checksum(data: bytes | memoryview) -> str:
    """Checksum recorded per stripe / shard in the manifest (CRC-32, hex).

    Examples
    --------
    >>> stripe_checksum(b"abc")
    '352441c2'
    """
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


class Writer(ABC):
    """Worker-side writer of one stage on one I/O node."""

    @abstractmethod
    def put(self, dataset: str, offset: int, data: memoryview) -> None:
        """Accept bytes ``[offset, offset + len(data))`` of ``dataset``."""

    @abstractmethod
    def flush(self) -> None:
        """Write anything buffered and make it durable (fsync)."""

    @abstractmethod
    def read(self, dataset: str, offset: int, nbytes: int) -> bytes:
        """Read back bytes of ``dataset`` from the (temporary) target, after :meth:`flush`."""

    @abstractmethod
    def release(self) -> None:
        """Close files."""


class WholeStripeWriter(Writer):
    """A writer that gathers each stripe's pieces in memory and stores the stripe whole, once.

    For formats whose unit of writing is a stripe (a Zarr shard, a compressed
    HDF5 chunk): writing part of one would rewrite or corrupt it. A stripe
    is stored as soon as all its bytes arrived; stripes with allowed-missing
    rows are stored at :meth:`flush`, padded with the fill value.

    ``meta[name]`` holds ``shape``, ``dtype``, ``fill_value``,
    ``rows_per_stripe``, ``stripe_bytes`` and ``row_bytes``.
    """

    def __init__(self, meta: dict[str, dict[str, Any]]) -> None:
        self.meta = meta
        self.buffers: dict[tuple[str, int], tuple[Any, list[int]]] = {}

    @abstractmethod
    def store(self, name: str, k: int, rows: Any) -> None:
        """Write stripe ``k`` of dataset ``name`` (its rows, complete)."""

    @abstractmethod
    def load(self, name: str, r0: int, r1: int) -> Any:
        """Rows ``r0 .. r1 - 1`` of ``name`` as stored (for read-back)."""

    def _stripe(self, name: str, k: int) -> tuple[Any, list[int]]:
        import numpy as np

        key = (name, k)
        if key not in self.buffers:
            m = self.meta[name]
            r0 = k * m["rows_per_stripe"]
            r1 = min(r0 + m["rows_per_stripe"], m["shape"][0])
            rows = np.full((r1 - r0, *m["shape"][1:]), m["fill_value"], dtype=np.dtype(m["dtype"]))
            self.buffers[key] = (rows, [0])
        return self.buffers[key]

    def put(self, dataset: str, offset: int, data: memoryview) -> None:
        import numpy as np

        sb = self.meta[dataset]["stripe_bytes"]
        pos = 0
        while pos < len(data):  # a piece lies inside one stripe, but be general
            k, inner = divmod(offset + pos, sb)
            rows, filled = self._stripe(dataset, k)
            flat = rows.reshape(-1).view(np.uint8)
            n = min(len(data) - pos, flat.size - inner)
            flat[inner : inner + n] = np.frombuffer(data[pos : pos + n], dtype=np.uint8)
            filled[0] += n
            pos += n
            if filled[0] == flat.size:
                self.store(dataset, k, self.buffers.pop((dataset, k))[0])

    def flush(self) -> None:
        for name, k in list(self.buffers):
            self.store(name, k, self.buffers.pop((name, k))[0])

    def read(self, dataset: str, offset: int, nbytes: int) -> bytes:
        import numpy as np

        rb = self.meta[dataset]["row_bytes"]
        r0, r1 = offset // rb, -(-(offset + nbytes) // rb)
        raw = np.ascontiguousarray(self.load(dataset, r0, r1)).reshape(-1).view(np.uint8)
        skip = offset - r0 * rb
        return bytes(raw[skip : skip + nbytes])


def stripe_meta(spec: DatasetSpec, layout: StripeLayout) -> dict[str, Any]:
    """The ``meta`` entry :class:`WholeStripeWriter` needs for one dataset (row-aligned stripes).

    Examples
    --------
    >>> m = stripe_meta(DatasetSpec("u", (10, 2), "f8"), StripeLayout(2, 64))
    >>> m["rows_per_stripe"], m["row_bytes"]
    (4, 16)
    """
    return {
        "shape": list(spec.shape),
        "dtype": spec.dtype.str,
        "fill_value": spec.fill_value,
        "rows_per_stripe": layout.stripe_bytes // spec.row_bytes,
        "stripe_bytes": layout.stripe_bytes,
        "row_bytes": spec.row_bytes,
    }


class Backend(ABC):
    """One storage format: create, write (through :class:`Writer`), finish, verify, open."""

    #: Registry name, e.g. ``"hdf5"``.
    name: str = ""

    @abstractmethod
    def create(
        self, tmp: Path, specs: Sequence[DatasetSpec], layouts: Sequence[StripeLayout]
    ) -> dict[str, Any]:
        """Create the empty target at ``tmp``; return the picklable info workers write with."""

    @abstractmethod
    def writer(self, info: dict[str, Any], ionode: int, aggregate: bool) -> Writer:
        """A writer for I/O node ``ionode`` (``aggregate``: buffer stripes, write runs)."""

    @abstractmethod
    def finish(self, tmp: Path, manifest: dict[str, Any]) -> None:
        """Store the manifest inside the target and make it durable (before the rename)."""

    @abstractmethod
    def read_manifest(self, path: Path) -> dict[str, Any]:
        """The manifest stored by :meth:`finish`."""

    @abstractmethod
    def read_bytes(self, path: Path, dataset: str, offset: int, nbytes: int) -> bytes:
        """Bytes of a dataset in a committed target (for verification)."""

    @abstractmethod
    def open(self, path: Path) -> dict[str, Any]:
        """The datasets of a committed target as array-likes (h5py / zarr objects)."""

    @abstractmethod
    def fill(self, info: dict[str, Any], spec: DatasetSpec, rows: Any) -> None:
        """Write the fill value into ``rows`` nobody contributed (allowed missing rows)."""

    def stripe_size(self, spec: DatasetSpec, requested: int) -> int:
        """The stripe size this format needs for ``spec`` (default: as requested)."""
        return requested


_BACKENDS = {"hdf5": "orchestrator.plugins.hdf5:HDF5Backend",
             "hdf5-vds": "orchestrator.plugins.hdf5:HDF5SubfileBackend",
             "hdf5-chunked": "orchestrator.plugins.hdf5:HDF5ChunkedBackend",
             "zarr": "orchestrator.plugins.zarr:ZarrBackend"}  # fmt: skip


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (``"hdf5"`` or ``"zarr"``), imported lazily.

    Examples
    --------
    >>> get_backend("hdf5").name
    'hdf5'
    """
    try:
        module, cls = _BACKENDS[name].split(":")
    except KeyError:
        raise StorageError(f"unknown format {name!r}; choose one of {sorted(_BACKENDS)}") from None
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
