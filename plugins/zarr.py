"""Zarr v3 backend: sharded arrays, every shard owned and written whole by one I/O node.

The stripe of the layout is one shard (``rows_per_shard`` rows), so the
round-robin striping gives each shard exactly one I/O node. zarr-python
rewrites a whole shard on any write and concurrent partial writes of one
shard lose data, so the I/O worker gathers a shard's pieces in memory and
writes it once, when complete (or at the end, padded with the fill value
where rows were allowed to be missing). The manifest is an attribute of the
root group, committed with the store directory by one rename.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contributions import DatasetSpec
from orchestrator.files import fsync_tree
from orchestrator.layout import StripeLayout
from orchestrator.storage import Backend, StorageError, Writer

MANIFEST_ATTR = "io_orchestrator_manifest"


def _rows_per_shard(spec: DatasetSpec, requested: int) -> int:
    rows = max(1, requested // max(spec.row_bytes, 1))
    if rows >= 4:
        rows -= rows % 4  # four inner chunks per shard
    return rows


class ZarrWriter(Writer):
    """Gathers pieces per shard and writes each shard whole, once."""

    def __init__(self, info: dict[str, Any]) -> None:
        import zarr

        self.path = info["path"]
        self.meta: dict[str, dict[str, Any]] = info["datasets"]
        self.arrays = {name: zarr.open_array(self.path, path=name, mode="r+") for name in self.meta}
        self.buffers: dict[tuple[str, int], tuple[np.ndarray, list[int]]] = {}

    def _shard(self, name: str, k: int) -> tuple[np.ndarray, list[int]]:
        key = (name, k)
        if key not in self.buffers:
            m = self.meta[name]
            r0 = k * m["rows_per_shard"]
            r1 = min(r0 + m["rows_per_shard"], m["shape"][0])
            rows = np.full((r1 - r0, *m["shape"][1:]), m["fill_value"], dtype=np.dtype(m["dtype"]))
            self.buffers[key] = (rows, [0])
        return self.buffers[key]

    def put(self, dataset: str, offset: int, data: memoryview) -> None:
        m = self.meta[dataset]
        sb = m["stripe_bytes"]
        pos = 0
        while pos < len(data):  # a piece lies inside one shard, but be general
            k, inner = divmod(offset + pos, sb)
            rows, filled = self._shard(dataset, k)
            flat = rows.reshape(-1).view(np.uint8)
            n = min(len(data) - pos, flat.size - inner)
            flat[inner : inner + n] = np.frombuffer(data[pos : pos + n], dtype=np.uint8)
            filled[0] += n
            pos += n
            if filled[0] == flat.size:
                self._write(dataset, k)

    def _write(self, name: str, k: int) -> None:
        rows, _ = self.buffers.pop((name, k))
        r0 = k * self.meta[name]["rows_per_shard"]
        self.arrays[name][r0 : r0 + rows.shape[0]] = rows

    def flush(self) -> None:
        for name, k in list(self.buffers):  # shards with allowed-missing rows
            self._write(name, k)

    def read(self, dataset: str, offset: int, nbytes: int) -> bytes:
        return _read(self.arrays[dataset], self.meta[dataset], offset, nbytes)

    def release(self) -> None:
        self.arrays.clear()


def _read(arr: Any, m: dict[str, Any], offset: int, nbytes: int) -> bytes:
    rb = m["row_bytes"]
    r0, r1 = offset // rb, -(-(offset + nbytes) // rb)
    raw = np.ascontiguousarray(arr[r0:r1]).reshape(-1).view(np.uint8)
    skip = offset - r0 * rb
    return raw[skip : skip + nbytes].tobytes()


class ZarrBackend(Backend):
    """Zarr v3 with shards as stripes (see module docstring)."""

    name = "zarr"

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
            chunk = rps // 4 if rps % 4 == 0 else rps
            group.create_array(
                spec.name,
                shape=spec.shape,
                dtype=spec.dtype,
                chunks=(chunk, *spec.row_shape),
                shards=(rps, *spec.row_shape),
                fill_value=spec.fill_value,
            )
            meta[spec.name] = {
                "shape": list(spec.shape),
                "dtype": spec.dtype.str,
                "fill_value": spec.fill_value,
                "rows_per_shard": rps,
                "stripe_bytes": lay.stripe_bytes,
                "row_bytes": spec.row_bytes,
            }
        return {"path": str(tmp), "datasets": meta}

    def writer(self, info: dict[str, Any], ionode: int, aggregate: bool) -> Writer:
        return ZarrWriter(info)

    def fill(self, info: dict[str, Any], spec: DatasetSpec, rows: Any) -> None:
        """Nothing to do: unwritten rows read as the array's fill value."""

    def finish(self, tmp: Path, manifest: dict[str, Any]) -> None:
        import zarr

        zarr.open_group(tmp, mode="r+").attrs[MANIFEST_ATTR] = manifest
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
        spec = DatasetSpec(dataset, arr.shape, arr.dtype)
        return _read(arr, {"row_bytes": spec.row_bytes}, offset, nbytes)

    def open(self, path: Path) -> dict[str, Any]:
        import zarr

        group = zarr.open_group(path, mode="r")
        return {name: arr for name, arr in group.arrays()}
