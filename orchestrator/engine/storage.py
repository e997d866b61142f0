"""The storage-backend interface; HDF5 and Zarr implement it in ``orchestrator.plugins``.

A backend knows one file format and nothing about scheduling. The parent
process creates the (temporary) target and finishes it; I/O workers get a
small picklable ``info`` dict and open a :class:`Writer` from it, which
receives byte ranges of datasets and decides when to write them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

from ..contributions import DatasetSpec
from ..errors import CheckpointError, OrchestratorError, StorageError
from ..layout import StripeLayout
from .buffers import STRIPES

__all__ = [
    "Backend",
    "PieceChecksums",
    "StorageError",
    "WholeStripeWriter",
    "Writer",
    "backend_names",
    "backend_ref",
    "check_manifest",
    "fold_crc32",
    "format_of",
    "get_backend",
    "is_checkpoint",
    "read_checked_manifest",
    "register_backend",
    "stripe_checksum",
    "stripe_meta",
    "unregister_backend",
]

MANIFEST_VERSION = 1


try:  # Intel ISA-L's CRC-32: the same values as zlib's, several times faster
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - no wheel for this platform
    _crc32 = zlib.crc32


def crc32(data: bytes | memoryview, value: int = 0) -> int:
    """CRC-32 of ``data`` (zlib's polynomial and values), continuing from ``value``.

    ISA-L's implementation (python-isal) where installed: the engine
    checksums every byte it writes, and zlib's runs at a fraction of the
    disk's speed.

    Examples
    --------
    >>> crc32(b"abc") == zlib.crc32(b"abc")
    True
    """
    return int(_crc32(data, value))


def stripe_checksum(data: bytes | memoryview) -> str:
    """Checksum recorded per stripe / shard in the manifest (CRC-32, hex).

    Examples
    --------
    >>> stripe_checksum(b"abc")
    '352441c2'
    """
    return f"{crc32(data) & 0xFFFFFFFF:08x}"


_CRC32_COMBINE: Any = None


def fold_crc32(crcs: Sequence[int], lengths: Sequence[int]) -> int:
    """CRC-32 of the concatenation of pieces given in byte order, from their CRC-32s.

    zlib's own ``crc32_combine`` (the system's libz, through ctypes: Python's
    ``zlib`` module does not expose it); where libz cannot be loaded, the
    Numba kernel :func:`orchestrator.kernels.crc.fold` (same values).

    Examples
    --------
    >>> fold_crc32([zlib.crc32(b"ab"), zlib.crc32(b"cde")], [2, 3]) == zlib.crc32(b"abcde")
    True
    """
    global _CRC32_COMBINE
    if _CRC32_COMBINE is None:
        _CRC32_COMBINE = False
        try:
            import ctypes
            import ctypes.util

            fn = ctypes.CDLL(ctypes.util.find_library("z") or "libz.so.1").crc32_combine
            fn.restype = ctypes.c_ulong
            fn.argtypes = [ctypes.c_ulong, ctypes.c_ulong, ctypes.c_long]
            _CRC32_COMBINE = fn
        except (OSError, AttributeError):
            pass
    if _CRC32_COMBINE:
        acc = 0
        for c, n in zip(crcs, lengths, strict=True):
            acc = int(_CRC32_COMBINE(acc, c, n)) & 0xFFFFFFFF
        return acc
    import numpy as np

    from ..kernels import crc  # Numba: loaded only where a stripe's pieces are folded

    return int(crc.fold(np.array(crcs, dtype=np.uint32), np.array(lengths, dtype=np.int64)))


class PieceChecksums:
    """Stripe checksums folded from the CRC-32s of the pieces written, in any order.

    The I/O node checksums each piece from the bytes it writes; a stripe's
    CRC-32 is the fold of its pieces in byte order (:mod:`orchestrator.kernels.crc`),
    equal to ``zlib.crc32`` of the whole stripe, so nothing is read back.

    Examples
    --------
    >>> sums = PieceChecksums({"u": 8})
    >>> sums.add("u", 4, b"efgh"); sums.add("u", 0, b"abcd"); sums.add("u", 8, b"ij")
    >>> sums.result() == {("u", 0): stripe_checksum(b"abcdefgh"), ("u", 8): stripe_checksum(b"ij")}
    True
    """

    def __init__(self, stripe_bytes: dict[str, int]) -> None:
        self.stripe_bytes = stripe_bytes
        self.pieces: dict[tuple[str, int], list[tuple[int, int, int]]] = {}

    def add(self, dataset: str, offset: int, data: bytes | memoryview) -> None:
        """Checksum ``data``, bytes ``[offset, offset + len(data))`` of ``dataset``."""
        self.add_crc(dataset, offset, len(data), crc32(data))

    def add_crc(self, dataset: str, offset: int, nbytes: int, crc: int) -> None:
        """Record a piece by its CRC-32 (bytes written by someone else, e.g. fill values)."""
        sb = self.stripe_bytes[dataset]
        k = offset // sb
        if nbytes and (offset + nbytes - 1) // sb != k:
            raise StorageError(f"{dataset}: piece at byte {offset} (+{nbytes}) crosses a stripe")
        self.pieces.setdefault((dataset, k * sb), []).append((offset, nbytes, crc))

    def result(self) -> dict[tuple[str, int], str]:
        """``(dataset, stripe offset) -> CRC-32`` of every stripe touched; pieces must tile it."""
        out = {}
        for (name, start), pieces in self.pieces.items():
            pieces.sort()
            at = start
            for off, n, _ in pieces:
                if off != at:
                    raise StorageError(
                        f"{name}: stripe at byte {start} has a gap or an overlap at byte {at}"
                    )
                at += n
            value = fold_crc32([p[2] for p in pieces], [p[1] for p in pieces])
            out[(name, start)] = f"{value:08x}"
        return out


class Writer(ABC):
    """Worker-side writer of one stage on one I/O node.

    The engine hands it pieces in plan order (:meth:`put`), ends each batch
    (:meth:`end_batch`), then :meth:`flush` es and asks for the
    :meth:`checksums` of the stripes it wrote, computed from the bytes as
    they were written — no read-back.
    """

    @abstractmethod
    def put(self, dataset: str, offset: int, data: memoryview) -> None:
        """Accept bytes ``[offset, offset + len(data))`` of ``dataset``."""

    def end_batch(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """The batch is over; its buffers may be reused after this returns."""

    @abstractmethod
    def flush(self) -> None:
        """Write anything buffered and make it durable (fsync)."""

    @abstractmethod
    def checksums(self) -> dict[tuple[str, int], str]:
        """``(dataset, stripe offset) -> CRC-32`` of the stripes written, after :meth:`flush`."""

    @abstractmethod
    def add_checksum(self, dataset: str, offset: int, nbytes: int, crc: int) -> None:
        """Bytes of a stripe someone else wrote (fill values of missing rows)."""

    @abstractmethod
    def release(self) -> None:
        """Close files."""

    #: what other processes on this host may write into the same output themselves
    #: (direct writes, see :mod:`orchestrator.engine.worker`): ``"pieces"`` (any piece, at
    #: its fixed position: :meth:`position`, :meth:`write_run`), ``"stripes"`` (whole stripes only:
    #: :meth:`WholeStripeWriter.store_whole`) or None (every byte must come to this writer)
    direct: str | None = None

    def file_identity(self) -> tuple[int, int] | None:
        """``(st_dev, st_ino)`` of the file or store this writer writes into, or None.

        Two processes that see the same pair write the same output. None
        (the default) means pieces must come to this writer.
        """
        return None

    def position(self, dataset: str, offset: int) -> int:
        """Byte position in the file of byte ``offset`` of ``dataset`` (``direct == "pieces"``)."""
        raise NotImplementedError(f"{type(self).__name__} takes no direct writes")

    def write_run(self, position: int, views: Sequence[memoryview]) -> None:
        """Write pieces that follow each other in the file from ``position``, unchecksummed.

        For ``direct == "pieces"``: sources write their cuts' pieces with it.
        """
        raise NotImplementedError(f"{type(self).__name__} takes no direct writes")

    def held_bytes(self) -> int:
        """Bytes this writer buffers now, of pieces put and not yet written (0: none)."""
        return 0

    def add_stored(self, dataset: str, offset: int, checksum: str) -> None:
        """A stripe a source stored whole, with its checksum (``direct == "stripes"``)."""
        raise NotImplementedError(f"{type(self).__name__} takes no direct writes")


class _OpenStripe:
    """A stripe some of whose bytes arrived: the pieces held, and those spilled."""

    __slots__ = ("held", "pieces", "slot", "spilled")

    def __init__(self) -> None:
        self.pieces: list[tuple[int, bytes]] = []  # (byte in stripe, bytes) held in memory
        self.held = 0  # bytes of ``pieces``
        self.spilled: list[tuple[int, int]] = []  # (byte in stripe, nbytes) in the spill file
        self.slot = -1  # the stripe's place in the spill file


class WholeStripeWriter(Writer):
    """A writer that gathers each stripe's pieces in memory and stores the stripe whole, once.

    For formats whose unit of writing is a stripe (a Zarr shard, a compressed
    HDF5 chunk): writing part of one would rewrite or corrupt it. A stripe
    is stored as soon as all its bytes arrived; stripes with allowed-missing
    rows are stored at :meth:`flush`, padded with the fill value.

    **Bounded memory.** In plan order a stripe's pieces come from many
    clients, so most stripes complete only near the end of the stage and an
    I/O node would hold all of its pieces at once. With a :attr:`limit` and
    a :attr:`spill_path`, when the pieces held exceed the limit those of the
    stripes completed last (:attr:`due`; the fullest among equals) are
    *spilled*: written, raw, at their place in a scratch file. When a stripe
    completes, its spilled pieces are read back and the stripe is stored
    whole as usual. Each byte is spilled at most once,
    nothing of the format is written twice, and the file is removed by
    :meth:`flush` and :meth:`release` (as Dask's workers spill to disk, with
    the same cost: a copy to the page cache and back).

    ``meta[name]`` holds ``shape``, ``dtype``, ``fill_value``,
    ``rows_per_stripe``, ``stripe_bytes`` and ``row_bytes``.
    """

    #: most bytes of pieces held before the fullest stripes' are spilled (None: no bound)
    limit: int | None = None
    #: the scratch file spilled pieces go to (None: never spill)
    spill_path: str | os.PathLike[str] | None = None
    #: ``(dataset, stripe) -> when its last piece arrives`` (any increasing count, e.g. the
    #: batch): the stripes due last are spilled first, as a cache evicts the page needed
    #: furthest in the future; stripes not listed count as due last
    due: dict[tuple[str, int], int] | None = None

    def __init__(self, meta: dict[str, dict[str, Any]]) -> None:
        self.meta = meta
        self.open: dict[tuple[str, int], _OpenStripe] = {}
        self.sums: dict[tuple[str, int], str] = {}
        self.held = 0  # bytes of the pieces held by open stripes
        self.spills = 0  # stripes whose pieces were spilled (a stripe may count twice)
        self._fd = -1
        self._slots = 0  # bytes of the spill file given to stripes

    @abstractmethod
    def store(self, name: str, k: int, rows: Any) -> None:
        """Write stripe ``k`` of dataset ``name`` (its rows, complete)."""

    def held_bytes(self) -> int:
        """Bytes of pieces held now, waiting for the rest of their stripes."""
        return self.held

    def _size(self, name: str, k: int) -> int:
        m = self.meta[name]
        r0 = k * m["rows_per_stripe"]
        return (min(r0 + m["rows_per_stripe"], m["shape"][0]) - r0) * m["row_bytes"]

    def _store(self, name: str, k: int, rows: Any) -> None:
        import numpy as np

        # the stripe's logical bytes, as verify reads them back
        self.sums[(name, k * self.meta[name]["stripe_bytes"])] = stripe_checksum(
            memoryview(np.ascontiguousarray(rows).reshape(-1).view(np.uint8).data)
        )
        self.store(name, k, rows)

    def checksums(self) -> dict[tuple[str, int], str]:
        return dict(self.sums)

    def add_checksum(self, dataset: str, offset: int, nbytes: int, crc: int) -> None:
        """Nothing to record: stripes are stored padded with the fill value, and checksummed."""

    def put(self, dataset: str, offset: int, data: memoryview) -> None:
        sb = self.meta[dataset]["stripe_bytes"]
        pos = 0
        while pos < len(data):  # a piece lies inside one stripe, but be general
            k, inner = divmod(offset + pos, sb)
            size = self._size(dataset, k)
            n = min(len(data) - pos, size - inner)
            if inner == 0 and n == size:  # a whole stripe in one piece: nothing to gather
                self._store(dataset, k, self._rows(dataset, k, [(0, data[pos : pos + n])]))
                pos += n
                continue
            st = self.open.get((dataset, k))
            if st is None:
                st = self.open[(dataset, k)] = _OpenStripe()
            # a copy: the piece's buffer goes back to Dask once its batch is written
            st.pieces.append((inner, bytes(data[pos : pos + n])))
            st.held += n
            self.held += n
            pos += n
            if st.held + sum(m for _, m in st.spilled) == size:
                self._finish(dataset, k)
        if self.limit is not None and self.spill_path is not None and self.held > self.limit:
            self._spill(self.limit * 3 // 4)

    def _rows(
        self,
        name: str,
        k: int,
        pieces: Sequence[tuple[int, Any]],
        complete: bool = True,
        out: Any = None,
    ) -> Any:
        """Stripe ``k``'s rows from its pieces (fill value where none is, unless ``complete``),
        in ``out`` (a ``uint8`` buffer of the stripe's size) when given."""
        import numpy as np

        m = self.meta[name]
        shape = (self._size(name, k) // m["row_bytes"], *m["shape"][1:])
        dtype = np.dtype(m["dtype"])
        if out is None:
            rows = np.empty(shape, dtype)
        else:
            rows = out.view(dtype).reshape(shape)
        if not complete:
            rows[...] = m["fill_value"]
        flat = rows.reshape(-1).view(np.uint8)
        for at, raw in pieces:
            flat[at : at + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        return rows

    def _finish(self, name: str, k: int) -> None:
        """Store stripe ``k`` (complete, or padded at flush), its spilled pieces read back."""
        import numpy as np

        st = self.open.pop((name, k))
        size = self._size(name, k)
        got = st.held + sum(n for _, n in st.spilled)
        buf = STRIPES.take(size)
        rows = self._rows(name, k, st.pieces, complete=got == size, out=buf)
        self.held -= st.held
        flat = rows.reshape(-1).view(np.uint8)
        for a, n in st.spilled:
            view, at = memoryview(flat[a : a + n].data), 0
            while at < n:  # a regular file reads short only at its end: be safe anyway
                m = os.preadv(self._fd, [view[at:]], st.slot + a + at)
                if m <= 0:
                    raise StorageError(f"{self.spill_path}: spilled bytes of {name!r} are gone")
                at += m
        self._store(name, k, rows)
        STRIPES.give(buf)  # stored: its pages serve the next stripe

    def _spill(self, target: int) -> None:
        """Write the pieces of the fullest open stripes to the spill file, to hold ``target``."""
        if self._fd < 0:
            # O_EXCL: a file of this name is someone else's, not ours to overwrite
            self._fd = os.open(self.spill_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)  # type: ignore[arg-type]
        due = self.due or {}
        last = 1 << 62

        def order(kv: tuple[tuple[str, int], _OpenStripe]) -> tuple[int, int]:
            return (-due.get(kv[0], last), -kv[1].held)  # due last, then fullest, first

        for (name, k), st in sorted(self.open.items(), key=order):
            if self.held <= target:
                break
            if not st.held:
                continue
            if st.slot < 0:
                size = self._size(name, k)
                st.slot, self._slots = self._slots, self._slots + size
            for at, raw in st.pieces:
                done = 0
                while done < len(raw):
                    done += os.pwrite(self._fd, memoryview(raw)[done:], st.slot + at + done)
                st.spilled.append((at, len(raw)))
            self.held -= st.held
            st.pieces, st.held = [], 0
            self.spills += 1

    def _drop_spill_file(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.spill_path)  # type: ignore[arg-type]

    def flush(self) -> None:
        for name, k in list(self.open):
            self._finish(name, k)
        self._drop_spill_file()

    def release(self) -> None:
        """Remove the spill file; subclasses close their files too."""
        self.open.clear()
        self.held = 0
        self._drop_spill_file()

    def store_whole(
        self, pieces: Sequence[tuple[str, int, memoryview]]
    ) -> tuple[dict[tuple[str, int], str], list[bool]]:
        """On a source (direct writes): store every stripe these pieces cover whole.

        Returns the checksums of the stripes stored, and for each piece
        whether it is left over (its stripe is not all here: it goes to the
        I/O node, which gathers the rest of that stripe).

        Examples
        --------
        >>> class Mem(WholeStripeWriter):
        ...     def store(self, name, k, rows): print("stored", name, k, rows.tolist())
        ...     def release(self): pass
        >>> w = Mem({"u": stripe_meta(DatasetSpec("u", (4,), "i1"), StripeLayout(1, 2))})
        >>> pieces = [("u", i, memoryview(bytes([i + 1]))) for i in range(3)]
        >>> sums, rest = w.store_whole(pieces)
        stored u 0 [1, 2]
        >>> rest
        [False, False, True]
        """
        import numpy as np

        by_stripe: dict[tuple[str, int], list[int]] = {}
        for i, (name, off, _) in enumerate(pieces):
            by_stripe.setdefault((name, off // self.meta[name]["stripe_bytes"]), []).append(i)
        rest = [True] * len(pieces)
        stored = {}
        for (name, k), idx in by_stripe.items():
            m = self.meta[name]
            r0 = k * m["rows_per_stripe"]
            size = (min(r0 + m["rows_per_stripe"], m["shape"][0]) - r0) * m["row_bytes"]
            if sum(len(pieces[i][2]) for i in idx) != size:
                continue
            base = k * m["stripe_bytes"]
            buf = None
            if len(idx) == 1:  # one piece is the whole stripe: store it as it is
                flat = np.frombuffer(pieces[idx[0]][2], dtype=np.uint8)
            else:
                flat = buf = STRIPES.take(size)
                for i in idx:
                    _, off, data = pieces[i]
                    flat[off - base : off - base + len(data)] = np.frombuffer(data, np.uint8)
            for i in idx:
                rest[i] = False
            rows = flat.view(np.dtype(m["dtype"])).reshape(-1, *m["shape"][1:])
            self._store(name, k, rows)
            if buf is not None:
                STRIPES.give(buf)
            stored[(name, base)] = self.sums[(name, base)]
        return stored, rest

    def blank_stripe(self, name: str, k: int, complete: bool, out: Any = None) -> Any:
        """A buffer for stripe ``k``'s rows: uninitialised, or the fill value unless ``complete``.

        ``out``, a ``uint8`` array of the stripe's size, is used rather than new
        memory (:data:`~orchestrator.engine.buffers.STRIPES`).

        Examples
        --------
        >>> class Mem(WholeStripeWriter):
        ...     def store(self, name, k, rows): pass
        >>> w = Mem({"u": stripe_meta(DatasetSpec("u", (5,), "i1", fill_value=7),
        ...                           StripeLayout(1, 2))})
        >>> w.blank_stripe("u", 2, complete=False).tolist()  # the last stripe: one row
        [7]
        """
        return self._rows(name, k, (), complete, out)

    def store_stripe(self, name: str, k: int, rows: Any) -> str:
        """Store stripe ``k`` of ``name`` whole (its rows, in a :meth:`blank_stripe` buffer).

        Returns its checksum, which :meth:`checksums` reports too.

        Examples
        --------
        >>> class Mem(WholeStripeWriter):
        ...     def store(self, name, k, rows): print("stored", name, k, rows.tolist())
        >>> w = Mem({"u": stripe_meta(DatasetSpec("u", (4,), "i1"), StripeLayout(1, 2))})
        >>> rows = w.blank_stripe("u", 1, complete=True)
        >>> rows[:] = [3, 4]
        >>> w.store_stripe("u", 1, rows)
        stored u 1 [3, 4]
        '6d998525'
        """
        self._store(name, k, rows)
        return self.sums[(name, k * self.meta[name]["stripe_bytes"])]

    def add_stored(self, dataset: str, offset: int, checksum: str) -> None:
        """A stripe a source stored whole (:meth:`store_whole`), with its checksum."""
        self.sums[(dataset, offset)] = checksum


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

    #: how a target of this format ends (``".h5"``, ``".zarr"``): for default target names
    suffix: str = ""

    def guess_can_open(self, path: Path) -> bool:
        """Whether ``path`` looks like a target of this format (cheap: no full open).

        Like xarray's ``BackendEntrypoint.guess_can_open``: used by
        :func:`format_of` to find who reads a committed target.
        """
        return False

    def direct_writes(self, info: dict[str, Any]) -> bool:
        """Whether this target's writers put raw bytes at fixed file positions, so workers
        on an I/O worker's host may write pieces themselves (:meth:`Writer.file_identity`).
        """
        return False


#: built-in formats: name -> "module:Class" (imported on first use)
_BUILTIN: dict[str, str] = {
    "hdf5": "orchestrator.plugins.hdf5:HDF5Backend",
    "hdf5-vds": "orchestrator.plugins.hdf5:HDF5SubfileBackend",
    "hdf5-chunked": "orchestrator.plugins.hdf5:HDF5ChunkedBackend",
    "zarr": "orchestrator.plugins.zarr:ZarrBackend",
}
_BACKENDS: dict[str, str | type[Backend]] = dict(_BUILTIN)
#: formats of installed packages, as every process finds them
_ENTRY: dict[str, str] = {}
#: entry point group through which installed packages add formats
ENTRY_POINTS = "orchestrator.backends"
_loaded_entry_points = False


def _entry_points() -> None:
    """Formats of installed packages (``[project.entry-points."orchestrator.backends"]``)."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        _ENTRY.setdefault(ep.name, ep.value)
        _BACKENDS.setdefault(ep.name, ep.value)


def register_backend(name: str, backend: str | type[Backend], replace: bool = False) -> None:
    """Make format ``name`` available: a :class:`Backend` subclass or ``"module:Class"``.

    Installed packages can do the same without code, through the entry
    point group ``orchestrator.backends``.

    Examples
    --------
    >>> register_backend("hdf5-again", "orchestrator.plugins.hdf5:HDF5Backend")
    >>> "hdf5-again" in backend_names()
    True
    >>> unregister_backend("hdf5-again")
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise StorageError(f"a format's name must be a non-empty string without ':', got {name!r}")
    if not (isinstance(backend, str) and ":" in backend) and not (
        isinstance(backend, type) and issubclass(backend, Backend)
    ):
        raise StorageError(
            f"format {name!r}: need a Backend subclass or 'module:Class', got {backend!r}"
        )
    _entry_points()
    if name in _BACKENDS and not replace:
        raise StorageError(f"a format named {name!r} is registered already")
    _BACKENDS[name] = backend


def unregister_backend(name: str) -> None:
    """Forget format ``name`` (for tests and plugins that replace one).

    Examples
    --------
    >>> unregister_backend("no-such-format")
    """
    _BACKENDS.pop(name, None)


def backend_names() -> list[str]:
    """Every format that can be written, built-in ones first.

    Examples
    --------
    >>> backend_names()[:4]
    ['hdf5', 'hdf5-vds', 'hdf5-chunked', 'zarr']
    """
    _entry_points()
    return list(_BACKENDS)


def backend_ref(name: str) -> str | type[Backend]:
    """What to send another process for it to find format ``name``: the name itself when
    that process finds it as this one does (built in, or an installed entry point), else
    the registered class (pickled by Dask: a class registered at run time is known only
    to the process that registered it).

    Examples
    --------
    >>> backend_ref("hdf5")
    'hdf5'
    """
    _entry_points()
    where = _BACKENDS.get(name)
    if where is None or where in (_BUILTIN.get(name), _ENTRY.get(name)):
        return name  # every process finds it under this name
    if isinstance(where, str):  # registered here as "module:Class": send the class
        module, cls = where.split(":")
        found: type[Backend] = getattr(importlib.import_module(module), cls)
        return found
    return where


def get_backend(name: str | type[Backend]) -> Backend:
    """The backend registered as ``name`` (see :func:`backend_names`), imported lazily.

    ``name`` may also be a :class:`Backend` subclass (from :func:`backend_ref`).

    Examples
    --------
    >>> get_backend("hdf5").name
    'hdf5'
    """
    if isinstance(name, type) and issubclass(name, Backend):
        return name()
    _entry_points()
    try:
        where = _BACKENDS[name]
    except (KeyError, TypeError):
        raise StorageError(f"unknown format {name!r}; choose one of {list(_BACKENDS)}") from None
    if isinstance(where, str):
        module, cls = where.split(":")
        where = getattr(importlib.import_module(module), cls)
    backend: Backend = where()
    return backend


def _guesser(name: str) -> Backend | None:
    """The backend called ``name``, or None when it cannot be loaded (a broken plugin)."""
    try:
        return get_backend(name)
    except Exception:  # a third party's import error must not hide ours
        return None


def _guess(backend: Backend, path: Path) -> bool:
    try:
        return bool(backend.guess_can_open(path))
    except Exception:  # a third party's guess that fails is a no
        return False


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """``manifest`` if its datasets are well formed, else :class:`CheckpointError` naming
    the field and its value.

    Checked: ``datasets`` maps at least one name to a ``shape`` (whole numbers,
    at least one row), a ``dtype`` NumPy knows, a ``stripe_bytes`` of at least
    one byte and ``checksums`` mapping byte offsets (whole numbers, on stripe
    starts, inside the dataset) to 8 hex digits. What the checksums say of the
    bytes is :func:`~orchestrator.engine.stage.verify`'s job.

    Examples
    --------
    >>> m = {"datasets": {"u": {"shape": [4], "dtype": "<f8", "stripe_bytes": 16,
    ...                         "checksums": {"0": "0badcafe", "16": "00000000"}}}}
    >>> check_manifest(m, "ck.h5") is m
    True
    >>> check_manifest({"datasets": {"u": {**m["datasets"]["u"], "stripe_bytes": 0}}}, "ck.h5")
    Traceback (most recent call last):
    ...
    orchestrator.errors.CheckpointError: ck.h5: manifest field datasets.u.stripe_bytes is 0; ...
    """
    import numpy as np

    def bad(field: str, value: Any, want: str) -> CheckpointError:
        return CheckpointError(f"{where}: manifest field {field} is {value!r}; expected {want}")

    def whole(x: Any) -> TypeGuard[int]:
        return isinstance(x, int) and not isinstance(x, bool)

    if not isinstance(manifest, dict):
        raise CheckpointError(
            f"{where}: the manifest is a {type(manifest).__name__}, not a mapping"
        )
    datasets = manifest.get("datasets")
    if not isinstance(datasets, dict) or not datasets:
        raise bad("datasets", datasets, "a mapping of at least one dataset")
    for name, ds in datasets.items():
        at = f"datasets.{name}"
        if not isinstance(ds, dict):
            raise bad(at, ds, "a mapping")
        shape = ds.get("shape")
        if not isinstance(shape, list) or not shape or not all(whole(x) and x >= 0 for x in shape):
            raise bad(f"{at}.shape", shape, "a list of whole numbers >= 0")
        if shape[0] < 1:
            raise bad(f"{at}.shape", shape, "at least one row")
        try:
            dtype = np.dtype(ds.get("dtype"))
        except (TypeError, ValueError):
            raise bad(f"{at}.dtype", ds.get("dtype"), "a NumPy dtype") from None
        if dtype.hasobject or ds.get("dtype") is None:
            raise bad(f"{at}.dtype", ds.get("dtype"), "a NumPy dtype of plain values")
        stripe = ds.get("stripe_bytes")
        if not whole(stripe) or stripe < 1:
            raise bad(f"{at}.stripe_bytes", stripe, "a whole number of bytes >= 1")
        checksums = ds.get("checksums")
        if not isinstance(checksums, dict):
            raise bad(f"{at}.checksums", checksums, "a mapping of byte offsets to checksums")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        for off, crc in checksums.items():
            if (
                not (isinstance(off, str) and off.isdigit())
                or int(off) % stripe
                or (int(off) >= max(nbytes, 1))
            ):
                raise bad(f"{at}.checksums", off, f"stripe offsets (multiples of {stripe})")
            if (
                not isinstance(crc, str)
                or len(crc) != 8
                or not all(c in "0123456789abcdef" for c in crc)
            ):
                raise bad(f"{at}.checksums[{off}]", crc, "8 hex digits")
    return manifest


def read_checked_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the committed target at ``path``, checked (:func:`check_manifest`).

    Whatever is wrong — not ours, truncated, unreadable, a malformed manifest —
    is a :class:`CheckpointError` that says so.

    Examples
    --------
    >>> read_checked_manifest("no/such.h5")
    Traceback (most recent call last):
    ...
    orchestrator.errors.CheckpointError: no/such.h5 does not exist
    """
    path = Path(path)
    try:
        manifest = get_backend(format_of(path)).read_manifest(path)
    except CheckpointError:
        raise
    except StorageError as err:
        raise CheckpointError(str(err)) from None
    except Exception as err:  # a damaged file: h5py, zarr and json each raise their own
        raise CheckpointError(
            f"{path}: unreadable manifest ({type(err).__name__}: {err})"
        ) from None
    return check_manifest(manifest, str(path))


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether some registered format recognises ``path`` as one of its targets.

    Only such a target may be replaced by a stage with ``overwrite=True``: a
    folder of the user's files, or any file no format claims, never is.

    Examples
    --------
    >>> import tempfile
    >>> is_checkpoint(tempfile.mkdtemp())
    False
    """
    path = Path(path)
    if path.is_symlink() or not (path.is_file() or path.is_dir()):
        return False
    for name in backend_names():
        backend = _guesser(name)
        if backend is not None and _guess(backend, path):
            return True
    return False


def format_of(path: str | os.PathLike[str]) -> str:
    """The format a committed target was written in.

    The first registered backend that recognises the target's shape on
    disk (:meth:`Backend.guess_can_open`) reads its manifest, which names
    the format (formats may share a shape: ``hdf5-vds`` and
    ``hdf5-chunked`` are both a folder with ``master.h5``).

    Examples
    --------
    >>> format_of("ckpt/3.zarr")  # doctest: +SKIP
    'zarr'
    """
    path = Path(path)
    if not path.exists():
        raise StorageError(f"{path} does not exist")
    if not (path.is_file() or path.is_dir()):  # a FIFO or a device: opening it may block
        raise StorageError(f"{path} is neither a file nor a folder")
    for name in backend_names():
        backend = _guesser(name)
        if backend is None or not _guess(backend, path):
            continue
        try:
            manifest = backend.read_manifest(path)
        except (OrchestratorError, OSError, ValueError, KeyError, TypeError):
            manifest = None  # damaged or not ours: verify says what is wrong with it
        named = manifest.get("format") if isinstance(manifest, dict) else None
        if isinstance(named, str) and named != name and named in _BACKENDS:
            # formats may share a shape on disk; the manifest's word counts only if that
            # format recognises the target too
            other = _guesser(named)
            if other is not None and _guess(other, path):
                return named
        return name
    raise StorageError(f"{path} is not a checkpoint in any known format {list(_BACKENDS)}")
