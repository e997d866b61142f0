"""Zarr v3 backend: sharded arrays, every shard owned and written whole by one I/O node.

The stripe of the layout is one shard (``rows_per_shard`` rows), so the
round-robin striping gives each shard exactly one I/O node. zarr-python
rewrites a whole shard on any write and concurrent partial writes of one
shard lose data, so a shard is stored once, whole: by the worker holding
most of its rows when every source is on the I/O node's host
(:func:`orchestrator.engine.worker.store_stripes`), else by the I/O worker,
which gathers its pieces in memory (padded with the fill value where rows
were allowed to be missing). The manifest is an attribute of the root
group, committed with the store directory by one rename.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contributions import DatasetSpec
from orchestrator.engine.storage import (
    Backend,
    StorageError,
    WholeStripeWriter,
    Writer,
    stripe_meta,
)
from orchestrator.files import fsync_tree
from orchestrator.layout import StripeLayout

MANIFEST_ATTR = "io_orchestrator_manifest"


def _rows_per_shard(spec: DatasetSpec, requested: int) -> int:
    return max(1, requested // max(spec.row_bytes, 1))


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

    def store(self, name: str, k: int, rows: Any) -> None:
        import zarr

        if name not in self.arrays:  # opened on first use: a source stores few datasets
            # a checkpoint's chunks are seldom all fill values: comparing every chunk with
            # the fill value (to skip storing it) took as long as encoding it (measured:
            # 550 vs 1,250 MiB/s per process); the data read back is the same either way
            self.arrays[name] = zarr.open_array(self.path, path=name, mode="r+").with_config(
                {"write_empty_chunks": True}
            )
        r0 = k * self.meta[name]["rows_per_stripe"]
        self.arrays[name][r0 : r0 + rows.shape[0]] = rows

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

    def guess_can_open(self, path: Path) -> bool:
        """A folder holding a Zarr v3 group's ``zarr.json``."""
        return path.is_dir() and (path / "zarr.json").is_file()

    def stripe_size(self, spec: DatasetSpec, requested: int) -> int:
        return _rows_per_shard(spec, requested) * spec.row_bytes

    def create(
        self, tmp: Path, specs: Sequence[DatasetSpec], layouts: Sequence[StripeLayout]
    ) -> dict[str, Any]:
        import zarr

        group = zarr.open_group(tmp, mode="w-")
        meta = {}
        for spec, lay in zip(specs, layouts, strict=True):
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
                shards=(rps, *spec.row_shape),
                fill_value=spec.fill_value,
            )
            meta[spec.name] = stripe_meta(spec, lay)
        return {"path": str(tmp), "datasets": meta}

    def writer(self, info: dict[str, Any], ionode: int, aggregate: bool) -> Writer:
        return ZarrWriter(info)

    def direct_writes(self, info: dict[str, Any]) -> bool:
        return True

    def fill(self, info: dict[str, Any], spec: DatasetSpec, rows: Any) -> None:
        """Nothing to do: unwritten rows read as the array's fill value."""

    def finish(self, tmp: Path, manifest: dict[str, Any]) -> None:
        import zarr

        group = zarr.open_group(tmp, mode="r+")
        for where, attrs in manifest.get("attrs", {}).items():  # "" = the group, else an array
            (group[where] if where else group).attrs.update(attrs)
        group.attrs[MANIFEST_ATTR] = manifest
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
        rb = DatasetSpec(dataset, arr.shape, arr.dtype).row_bytes
        r0, r1 = offset // rb, -(-(offset + nbytes) // rb)
        raw = np.ascontiguousarray(arr[r0:r1]).reshape(-1).view(np.uint8)
        return raw[offset - r0 * rb : offset - r0 * rb + nbytes].tobytes()

    def open(self, path: Path) -> dict[str, Any]:
        import zarr

        group = zarr.open_group(path, mode="r")
        return {name: arr for name, arr in group.arrays()}
