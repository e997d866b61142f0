"""Chunked and compressed datasets in one HDF5 file, written by many I/O nodes.

HDF5 lets one process at a time change a file's chunk index, and a
compressed chunk's size is known only once it is compressed, so I/O nodes
cannot write chunks into the shared file at fixed places as they write
contiguous datasets. Each I/O node instead encodes its whole stripes —
bands of whole chunks, no chunk shared by two nodes — through HDF5's own
filter pipeline (an in-memory file with the dataset's creation properties,
so gzip, lzf, shuffle, fletcher32 and any hdf5plugin filter give exactly
h5py's bytes), appends each chunk to a *spool* file next to the output, and
lists it in an index. The committing process then stores every spooled
chunk with ``H5Dwrite_chunk`` (``write_direct_chunk``): one sequential pass
over the compressed bytes, no decoding. Contiguous datasets of the same
stage go to their fixed places in the file, as in the plain backend.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.engine.storage import PieceChecksums, WholeStripeWriter
from orchestrator.files import fsync_path

from .hdf5_tree import load_filters

#: stripes encoded before the in-memory file is made afresh (HDF5 reuses freed space,
#: but the image never shrinks)
RENEW_AFTER = 256


def spool_paths(tmp: Path, ionode: int) -> tuple[Path, Path]:
    """The spool of I/O node ``ionode`` for output ``tmp``, and its index.

    Examples
    --------
    >>> [p.name for p in spool_paths(Path(".ck.h5.tmp-1"), 2)]
    ['.ck.h5.tmp-1.chunks-2', '.ck.h5.tmp-1.chunks-2.json']
    """
    return (
        tmp.with_name(f"{tmp.name}.chunks-{ionode}"),
        tmp.with_name(f"{tmp.name}.chunks-{ionode}.json"),
    )


class ChunkSpoolWriter(WholeStripeWriter):
    """One I/O node's writer of a single-file HDF5 stage with chunked datasets (module doc).

    ``info`` holds ``path``, ``meta`` (:func:`~orchestrator.engine.storage.stripe_meta`),
    ``offsets`` of the contiguous datasets (their pieces are written at once, in
    place, as :class:`plugins.hdf5.HDF5Writer` writes them) and ``chunked``: per
    chunked dataset its ``create_dataset`` keywords with the resolved ``chunks``.
    """

    def __init__(self, info: dict[str, Any], ionode: int) -> None:
        super().__init__(info["meta"])
        self.path = info["path"]
        self.offsets: dict[str, int] = info["offsets"]
        self.chunked: dict[str, dict[str, Any]] = info["chunked"]
        for kw in self.chunked.values():
            load_filters(kw)
        self.pieces = PieceChecksums(
            {n: b for n, b in info["stripe_bytes"].items() if n not in self.chunked}
        )
        spool, index = spool_paths(Path(self.path), ionode)
        self.spool_path, self.index_path = str(spool), str(index)
        self.index: list[list[Any]] = []  # [dataset, chunk offset, filter mask, position, size]
        self._spool_no = -1
        self._file_fd = -1
        self._spooled = 0
        self._encoder: Any = None
        self._encoded = 0

    def _out(self) -> int:
        if self._file_fd < 0:
            self._file_fd = os.open(self.path, os.O_WRONLY)
        return self._file_fd

    def _spool_fd(self) -> int:
        if self._spool_no < 0:  # O_EXCL: a file of this name is someone else's
            self._spool_no = os.open(self.spool_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        return self._spool_no

    def _dataset(self, name: str) -> Any:
        """The in-memory dataset that encodes one stripe of ``name`` at a time."""
        import h5py

        if self._encoder is None or self._encoded >= RENEW_AFTER:
            if self._encoder is not None:
                self._encoder.close()
            self._encoder = h5py.File(f"enc-{id(self)}", "w", driver="core", backing_store=False)
            self._encoded = 0
        key = f"d{sorted(self.meta).index(name)}"  # a name of no groups in the encoder
        if key not in self._encoder:
            m = self.meta[name]
            kw = dict(self.chunked[name])
            kw["maxshape"] = (None,) * len(m["shape"])  # chunks may be larger than a stripe
            self._encoder.create_dataset(
                key,
                shape=(m["rows_per_stripe"], *m["shape"][1:]),
                dtype=np.dtype(m["dtype"]),
                **kw,
            )
        self._encoded += 1
        return self._encoder[key]

    def put(self, dataset: str, offset: int, data: memoryview) -> None:
        if dataset in self.chunked:
            super().put(dataset, offset, data)
            return
        # contiguous: straight to its fixed place in the file, checksummed as written
        self.pieces.add(dataset, offset, data)
        at, done = self.offsets[dataset] + offset, 0
        while done < len(data):
            done += os.pwrite(self._out(), data[done:], at + done)

    def add_checksum(self, dataset: str, offset: int, nbytes: int, crc: int) -> None:
        if dataset not in self.chunked:  # fill values of missing rows, written by fill()
            self.pieces.add_crc(dataset, offset, nbytes, crc)

    def checksums(self) -> dict[tuple[str, int], str]:
        return {**super().checksums(), **self.pieces.result()}

    def store(self, name: str, k: int, rows: Any) -> None:
        m = self.meta[name]
        r0 = k * m["rows_per_stripe"]
        ds = self._dataset(name)
        chunks = self.chunked[name]["chunks"]
        n = rows.shape[0]
        whole = -(-n // chunks[0]) * chunks[0]  # the stripe's rows in whole chunks
        if ds.shape[0] != whole:
            ds.resize(whole, axis=0)
        if n < whole:  # the last stripe: the rest of its last chunks hold the fill value
            full = np.empty(ds.shape, ds.dtype)
            full[...] = m["fill_value"]
            full[:n] = rows
            rows = full
        ds[...] = rows
        grid = [range(0, s, c) for s, c in zip(ds.shape, chunks, strict=True)]
        grid[0] = range(0, n, chunks[0])
        fd = self._spool_fd()
        for corner in np.stack(np.meshgrid(*grid, indexing="ij"), -1).reshape(-1, ds.ndim):
            local = tuple(int(c) for c in corner)
            mask, data = ds.id.read_direct_chunk(local)
            done = 0
            while done < len(data):
                done += os.pwrite(fd, memoryview(data)[done:], self._spooled + done)
            self.index.append(
                [name, [r0 + local[0], *local[1:]], int(mask), self._spooled, len(data)]
            )
            self._spooled += len(data)

    def flush(self) -> None:
        super().flush()
        if self._file_fd >= 0:
            os.fsync(self._file_fd)
        if self.index:
            os.fsync(self._spool_fd())
            with open(self.index_path, "x") as out:
                json.dump(self.index, out)
            fsync_path(Path(self.index_path))

    def release(self) -> None:
        # the spool stays: the committing process reads it (assemble) and removes it
        for fd in (self._file_fd, self._spool_no):
            if fd >= 0:
                os.close(fd)
        self._file_fd = self._spool_no = -1
        if self._encoder is not None:
            self._encoder.close()
            self._encoder = None
        super().release()


def assemble(tmp: Path) -> None:
    """Store every spooled chunk into ``tmp`` (``write_direct_chunk``), then remove the spools.

    Examples
    --------
    >>> import tempfile
    >>> assemble(Path(tempfile.mkdtemp()) / "nothing-spooled.h5")  # no spool: nothing to do
    """
    indexes = sorted(tmp.parent.glob(f"{glob.escape(tmp.name)}.chunks-*.json"))
    if not indexes:
        return
    import h5py

    with h5py.File(tmp, "r+") as f:
        for index in indexes:
            with open(index) as fh:
                entries = json.load(fh)
            with open(index.with_suffix(""), "rb") as src:
                for name, corner, mask, pos, size in entries:
                    src.seek(pos)
                    f[name].id.write_direct_chunk(tuple(corner), src.read(size), mask)
    remove_spools(tmp)


def remove_spools(tmp: Path) -> None:
    """Remove the spools of output ``tmp`` (after assembly, or when the stage failed).

    Examples
    --------
    >>> import tempfile
    >>> tmp = Path(tempfile.mkdtemp()) / "out.h5"
    >>> _ = spool_paths(tmp, 0)[0].write_bytes(b"x")
    >>> remove_spools(tmp); list(tmp.parent.iterdir())
    []
    """
    for p in tmp.parent.glob(f"{glob.escape(tmp.name)}.chunks-*"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
