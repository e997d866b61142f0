"""HDF5 backend: one standard HDF5 file, datasets written with positioned writes.

Each dataset is created contiguous, with early allocation and no fill
writes, so it has a fixed byte range in the file (``get_offset``). I/O
workers then ``os.pwrite`` their stripes straight into that range from any
process: no MPI, and the result is a normal HDF5 file h5py and h5dump read.
The manifest is a JSON string attribute of the root group, so the file and
its manifest are committed by one rename.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contributions import DatasetSpec
from orchestrator.files import fsync_path
from orchestrator.layout import StripeLayout
from orchestrator.storage import Backend, StorageError, Writer

MANIFEST_ATTR = "io_orchestrator_manifest"


class HDF5Writer(Writer):
    """Positioned writes into one HDF5 file; optionally aggregating contiguous runs."""

    def __init__(self, info: dict[str, Any], aggregate: bool) -> None:
        self.path = info["path"]
        self.offsets: dict[str, int] = info["offsets"]
        self.fd = os.open(self.path, os.O_RDWR)
        self.aggregate = aggregate
        self.pending: list[tuple[int, bytes]] = []

    def put(self, dataset: str, offset: int, data: memoryview) -> None:
        pos = self.offsets[dataset] + offset
        if self.aggregate:
            self.pending.append((pos, bytes(data)))
        else:
            _pwrite_all(self.fd, data, pos)

    def flush(self) -> None:
        if self.pending:  # two-phase: write the gathered pieces as contiguous runs
            self.pending.sort()
            run_start, chunks = self.pending[0][0], [self.pending[0][1]]
            for pos, blob in self.pending[1:]:
                if pos == run_start + sum(len(c) for c in chunks):
                    chunks.append(blob)
                    continue
                _pwrite_all(self.fd, memoryview(b"".join(chunks)), run_start)
                run_start, chunks = pos, [blob]
            _pwrite_all(self.fd, memoryview(b"".join(chunks)), run_start)
            self.pending.clear()
        os.fsync(self.fd)

    def read(self, dataset: str, offset: int, nbytes: int) -> bytes:
        return os.pread(self.fd, nbytes, self.offsets[dataset] + offset)

    def release(self) -> None:
        os.close(self.fd)


def _pwrite_all(fd: int, data: memoryview, pos: int) -> None:
    done = 0
    while done < len(data):
        n = os.pwrite(fd, data[done:], pos + done)
        if n <= 0:
            raise StorageError(f"short write at byte {pos + done}")
        done += n


class HDF5Backend(Backend):
    """Single-file HDF5 with positioned writes (see module docstring)."""

    name = "hdf5"

    def create(
        self, tmp: Path, specs: Sequence[DatasetSpec], layouts: Sequence[StripeLayout]
    ) -> dict[str, Any]:
        import h5py

        offsets = {}
        with h5py.File(tmp, "w") as f:
            for spec in specs:
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_layout(h5py.h5d.CONTIGUOUS)
                dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
                dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
                space = h5py.h5s.create_simple(spec.shape)
                tid = h5py.h5t.py_create(spec.dtype, logical=True)
                dsid = h5py.h5d.create(f.id, spec.name.encode(), tid, space, dcpl=dcpl)
                offsets[spec.name] = int(dsid.get_offset())
                dsid.close()
        return {"path": str(tmp), "offsets": offsets}

    def writer(self, info: dict[str, Any], ionode: int, aggregate: bool) -> Writer:
        return HDF5Writer(info, aggregate)

    def fill(self, tmp: Path, spec: DatasetSpec, rows: np.ndarray) -> None:
        """Write the fill value into rows nobody contributed (allowed missing rows)."""
        import h5py

        with h5py.File(tmp, "r+") as f:
            ds = f[spec.name]
            block = np.full((rows.size, *spec.row_shape), spec.fill_value, dtype=spec.dtype)
            ds[np.asarray(rows, dtype=np.int64)] = block  # rows are sorted and unique

    def finish(self, tmp: Path, manifest: dict[str, Any]) -> None:
        import h5py

        with h5py.File(tmp, "r+") as f:
            f.attrs[MANIFEST_ATTR] = json.dumps(manifest, sort_keys=True)
        fsync_path(tmp)

    def read_manifest(self, path: Path) -> dict[str, Any]:
        import h5py

        try:
            with h5py.File(path, "r") as f:
                text = f.attrs[MANIFEST_ATTR]
        except (OSError, KeyError) as err:
            raise StorageError(
                f"{path}: not a checkpoint written by io-orchestrator ({err})"
            ) from None
        manifest: dict[str, Any] = json.loads(text)
        return manifest

    def read_bytes(self, path: Path, dataset: str, offset: int, nbytes: int) -> bytes:
        import h5py

        with h5py.File(path, "r") as f:
            base = int(f[dataset].id.get_offset())
        with open(path, "rb") as fh:
            fh.seek(base + offset)
            return fh.read(nbytes)

    def open(self, path: Path) -> dict[str, Any]:
        import h5py

        f = h5py.File(path, "r")
        return {name: f[name] for name in f if isinstance(f[name], h5py.Dataset)}
