"""The checksums a stage records per stripe, computed while writing.

CRC-32 (zlib's values; ISA-L's implementation where installed), a stripe's
checksum as the manifest holds it, and :class:`PieceChecksums`, which folds
the CRCs of a stripe's pieces — written in any order, by any process — into
the stripe's.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from ..errors import StorageError

__all__ = ["PieceChecksums", "crc32", "fold_crc32", "stripe_checksum"]


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
