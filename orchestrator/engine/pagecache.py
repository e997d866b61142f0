"""Whether bytes of a mapped file are in memory, and bringing them in: what an I/O node
does for stripes its tasks copy and check themselves — the node still reads them
from the disk, in the read policy's order, but neither copies nor checks them.

``cachestat`` (Linux 6.5) counts a file range's pages in memory, one folio at a
time; ``mincore`` (on the mapping, page by page: about 3× slower) where the kernel
has no ``cachestat``. ``madvise(MADV_POPULATE_READ)`` (Linux 5.14) reads the
missing pages and maps them, failing instead of raising ``SIGBUS`` where the file
is shorter than the mapping.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from typing import Any

import numpy as np

__all__ = ["bring_in", "cached", "resident"]

_MADV_POPULATE_READ = 22
_CACHESTAT = 451  # the same number on every architecture (the generic syscall table)
_LIBC: Any = None
_NO_CACHESTAT = False


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recent")]


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        lib = ctypes.CDLL(None, use_errno=True)
        for fn in (lib.mincore, lib.madvise):
            fn.restype = ctypes.c_int
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.syscall.restype = ctypes.c_long
        _LIBC = lib
    return _LIBC


def _pages(view: np.ndarray) -> tuple[int, int]:
    """The page-aligned span covering a view's bytes: (address, length)."""
    page = mmap.PAGESIZE
    start = view.ctypes.data
    lo = start - start % page
    hi = start + view.nbytes
    hi += -hi % page
    return lo, hi - lo


def resident(view: np.ndarray) -> bool:
    """Whether every page under ``view`` (bytes of a mapping) is in memory.

    Examples
    --------
    >>> resident(np.ones(1 << 16, dtype=np.uint8))
    True
    """
    if view.nbytes == 0:
        return True
    addr, length = _pages(view)
    vec = np.empty(length // mmap.PAGESIZE, dtype=np.uint8)
    if _libc().mincore(addr, length, vec.ctypes.data) != 0:
        return False  # unknown: bring_in says what is wrong, if anything
    return bool((vec & 1).all())


def cached(fd: int, offset: int, length: int) -> bool | None:
    """Whether every page of bytes ``[offset, offset + length)`` of an open file is in
    memory; None where the kernel cannot say (no ``cachestat``).

    Examples
    --------
    >>> fd = os.open(__file__, os.O_RDONLY)
    >>> _ = os.read(fd, 100)
    >>> cached(fd, 0, 100) in (True, None)
    True
    >>> os.close(fd)
    """
    global _NO_CACHESTAT
    if length <= 0:
        return True
    if _NO_CACHESTAT:
        return None
    page = mmap.PAGESIZE
    lo = offset - offset % page
    span = _Range(lo, offset + length - lo)
    stat = _Stat()
    fn = _libc().syscall
    if fn(_CACHESTAT, ctypes.c_int(fd), ctypes.byref(span), ctypes.byref(stat), ctypes.c_uint(0)):
        if ctypes.get_errno() == errno.ENOSYS:
            _NO_CACHESTAT = True
        return None
    return bool(stat.cache >= -(-span.len // page))


def bring_in(view: np.ndarray, fd: int | None = None, offset: int = 0) -> None:
    """Read the pages under ``view`` (bytes of a file mapping) into memory and map them;
    return once they are there. With ``fd`` (the file, ``view`` at ``offset`` in it),
    pages already in memory are found without mapping them.

    Raises
    ------
    OSError
        ``EFAULT``: part of the span is past the file's end. Where the kernel has no
        ``MADV_POPULATE_READ`` (``EINVAL``), nothing is done: the pages come in when
        first copied.

    Examples
    --------
    >>> bring_in(np.ones(1 << 16, dtype=np.uint8))
    """
    if view.nbytes == 0:
        return
    known = None if fd is None else cached(fd, offset, view.nbytes)
    if known or (known is None and resident(view)):
        return
    addr, length = _pages(view)
    if _libc().madvise(addr, length, _MADV_POPULATE_READ) != 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # EINVAL: an older kernel
            raise OSError(err, os.strerror(err))
