"""The storage-backend interface; HDF5 and Zarr implement it in ``orchestrator.plugins``.

A backend knows one file format and nothing about scheduling. The parent
process creates the (temporary) target and finishes it; I/O workers get a
small picklable ``info`` dict and open a :class:`Writer` from it, which
receives byte ranges of datasets and decides when to write them.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..contributions import DatasetSpec
from ..errors import StorageError
from ..layout import StripeLayout
from .buffers import STRIPES
from .checksums import PieceChecksums, crc32, fold_crc32, stripe_checksum

__all__ = [
    "Backend",
    "PieceChecksums",
    "StorageError",
    "WholeStripeWriter",
    "Writer",
    "crc32",
    "fold_crc32",
    "stripe_checksum",
    "stripe_meta",
]


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
    #: (direct writes, see :mod:`orchestrator.engine.sources`): ``"pieces"`` (any piece, at
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
        "dtype": spec.dtype,
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

    @contextlib.contextmanager
    def stripe_reader(self, path: Path) -> Iterator[Callable[[str, int, int], bytes]]:
        """``read(dataset, offset, nbytes)`` for many reads of one committed target
        (:meth:`read_bytes` by default; a format whose opening costs more than a read
        opens the target once).

        Examples
        --------
        >>> with get_backend("hdf5-vds").stripe_reader(path) as read:  # doctest: +SKIP
        ...     first = read("u", 0, 4096)
        """
        yield lambda dataset, offset, nbytes: self.read_bytes(path, dataset, offset, nbytes)

    @abstractmethod
    def open(self, path: Path) -> dict[str, Any]:
        """The datasets of a committed target as array-likes (h5py / zarr objects)."""

    @abstractmethod
    def fill(self, info: dict[str, Any], spec: DatasetSpec, rows: Any) -> None:
        """Write the fill value into ``rows`` nobody contributed (allowed missing rows)."""

    def stripe_size(self, spec: DatasetSpec, requested: int) -> int:
        """The stripe size this format needs for ``spec`` (default: as requested)."""
        return requested

    def chunk_shape(self, spec: DatasetSpec) -> tuple[int, ...] | None:
        """The chunks this format's library gives ``spec`` now (its guess for ``chunks=True``);
        None where it has none (default: the chunks given)."""
        return spec.chunks if isinstance(spec.chunks, tuple) else None

    def check_spec(self, spec: DatasetSpec) -> None:
        """Refuse, naming the option, what this format cannot store as ``spec`` asks.

        The default refuses every storage option (chunks, compression, …): a
        format that honours none must not accept them and ignore them.
        """
        if spec.chunked:
            raise StorageError(
                f"dataset {spec.name!r}: format {self.name!r} stores no chunks, compression, "
                "maxshape, shards or compressors"
            )

    def write_tree(self, tmp: Path, tree: dict[str, Any]) -> None:
        """Store the stage's groups, small datasets (``values``) and attributes.

        ``tree`` holds ``groups`` (names), ``values`` (name to a value as
        :func:`orchestrator.typedjson.encode` gives it), ``empty`` (specs of
        datasets of no rows, created as asked) and ``attrs`` (``""``, a group or
        a dataset to ``{name: encoded value}``). Called after the
        datasets are written and before :meth:`finish`; the default refuses
        anything but an empty tree.
        """
        if any(tree.get(k) for k in ("groups", "values", "attrs", "empty")):
            raise StorageError(f"format {self.name!r} stores no groups, attributes or values")

    def check_tree(self, tree: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Refuse, before any row is written, groups, values or attributes :meth:`write_tree`
        would fail on (default: nothing to check)."""

    def discard(self, tmp: Path) -> None:  # noqa: B027 - optional hook, nothing by default
        """Remove what a failed stage left beside its temporary output ``tmp`` (not ``tmp``)."""

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
