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

__all__ = ["Backend", "StorageError", "Writer", "get_backend", "stripe_checksum"]

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
