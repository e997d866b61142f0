"""Cross-memory attach: one process copies bytes straight out of another's memory on the
same host (``process_vm_readv``), as MPI libraries move intra-node messages.

A restart's aggregator verifies its stripes where they lie (the checkpoint mapped
read-only, or its own buffer) and keeps them; each task on the same host copies its
rows out in one system call per 1,024 runs — one copy, as a task reading the file
itself would make, and no socket. Where the dataset is mapped and a task's runs
are long on average (:data:`PREAD_RUN`), it reads them through the I/O worker's
own open descriptor of the checkpoint instead (:func:`borrow`, ``pidfd_getfd``),
one ``preadv`` per run: the bytes the node brought into memory, with no page
tables of the node's mapping to fill or tear down. Every read names the
process by PID *and* start time, checked before and after (through a pidfd kept per
process), so a PID reused by another process is never read.
"""

from __future__ import annotations

import ctypes
import errno
import numbers
import os
import select
from typing import Any

import numpy as np

__all__ = [
    "IOV_MAX",
    "PREAD_RUN",
    "borrow",
    "borrowed",
    "identity",
    "inject",
    "read",
    "through_descriptor",
]

IOV_MAX = 1024


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


# read() builds its iovecs as rows of two uint64: the struct must be exactly that
assert ctypes.sizeof(_Iovec) == 16 and ctypes.alignment(_Iovec) == 8


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        lib = ctypes.CDLL(None, use_errno=True)
        fn = lib.process_vm_readv
        fn.restype = ctypes.c_ssize_t
        fn.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(_Iovec),
            ctypes.c_ulong,
            ctypes.POINTER(_Iovec),
            ctypes.c_ulong,
            ctypes.c_ulong,
        ]
        _LIBC = fn
    return _LIBC


def identity(pid: int | None = None) -> tuple[int, int]:
    """``(pid, start time)`` of a process (default: this one), from ``/proc``.

    Examples
    --------
    >>> identity()[0] == os.getpid()
    True
    """
    pid = os.getpid() if pid is None else pid
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    # the command may hold spaces and parentheses: the fields follow the last ")"
    fields = stat[stat.rindex(b")") + 2 :].split()
    return pid, int(fields[19])


def read(
    who: tuple[int, int], out: np.ndarray, dst: np.ndarray, remote: np.ndarray, length: np.ndarray
) -> None:
    """Copy ``length[i]`` bytes from address ``remote[i]`` of process ``who`` (pid, start
    time) to ``out[dst[i]:]``, for every run.

    Raises
    ------
    OSError
        The process is gone (or another holds its PID), refuses (permissions), or a
        run is not mapped there.

    Examples
    --------
    >>> src = np.arange(8, dtype=np.uint8)
    >>> out = np.zeros(4, dtype=np.uint8)
    >>> read(identity(), out, np.array([0]), np.array([src.ctypes.data + 2]), np.array([4]))
    >>> out.tolist()
    [2, 3, 4, 5]
    """
    if out.dtype != np.uint8 or not out.flags.c_contiguous:
        raise ValueError("out must be a contiguous uint8 array")
    if length.size and int((dst + length).max()) > out.size:
        raise ValueError("a run ends past the end of out")
    if length.size and (int(dst.min()) < 0 or int(length.min()) < 0):
        raise ValueError("a run starts before out or has a negative length")
    fn = _libc()
    pid = int(who[0])
    _same(who)
    # the iovecs built by NumPy, not a Python loop: a mesh part is thousands of runs
    local = np.empty((length.size, 2), dtype=np.uint64)
    local[:, 0] = out.ctypes.data + np.asarray(dst, dtype=np.uint64)
    local[:, 1] = length
    far = np.empty_like(local)
    far[:, 0] = remote
    far[:, 1] = length
    iovecs = ctypes.POINTER(_Iovec)
    for lo in range(0, length.size, IOV_MAX):
        hi = min(length.size, lo + IOV_MAX)
        want = int(local[lo:hi, 1].sum())
        got = fn(
            pid,
            local[lo:hi].ctypes.data_as(iovecs),
            hi - lo,
            far[lo:hi].ctypes.data_as(iovecs),
            hi - lo,
            0,
        )
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"process_vm_readv from pid {pid}: {os.strerror(err)}")
        if got != want:
            raise OSError(f"process_vm_readv from pid {pid}: {got} of {want} bytes")
    _same(who)  # the process we read is still the one that offered the bytes


def _same(who: tuple[int, int]) -> None:
    """Raise unless the process ``who`` names (PID and start time) is alive — so its PID
    is not another's. Through a pidfd kept per process (a poll, where reading ``/proc``
    at every flag read of a restart cost its tasks more than their checks)."""
    who = (int(who[0]), int(who[1]))
    fd = _PIDFDS.get(who)
    if fd is None:
        try:
            fd = os.pidfd_open(who[0])
        except (OSError, AttributeError):  # no pidfds here (Linux < 5.3): /proc each time
            fd = None
        try:
            _same_by_proc(who)  # the pidfd names the process that offered the bytes
        except OSError:
            if fd is not None:
                os.close(fd)
            raise
        if fd is None:
            return
        if _PIDFDS.setdefault(who, fd) != fd:  # another thread was first
            os.close(fd)
            fd = _PIDFDS[who]
    if select.select([fd], [], [], 0)[0]:  # readable: the process has exited
        if _PIDFDS.pop(who, None) is not None:
            os.close(fd)
        raise OSError(f"process {who[0]} is gone")


#: pidfds of the processes this one has read from, by (PID, start time)
_PIDFDS: dict[tuple[int, int], int] = {}


def _same_by_proc(who: tuple[int, int]) -> None:
    try:
        now = identity(int(who[0]))
    except (OSError, ValueError, IndexError) as err:
        raise OSError(f"process {who[0]} is gone") from err
    if now != tuple(who):
        raise OSError(f"process {who[0]} is not the one that offered the bytes (PID reused)")


_PIDFD_GETFD = 438  # the same number on every architecture (the generic syscall table)
_SYSCALL: Any = None
_FAULTS: dict[str, Any] = {}
_BORROWED = [0]


def borrowed() -> int:
    """How many descriptors :func:`borrow` has lent this process.

    Examples
    --------
    >>> borrowed() >= 0
    True
    """
    return _BORROWED[0]


def inject(borrow: bool = True, pread_run: int | None = None) -> None:
    """Fault hook, for tests: ``borrow=False`` makes :func:`borrow` fail in this process
    as on a kernel without ``pidfd_getfd`` (``ENOSYS``); ``pread_run`` replaces
    :data:`PREAD_RUN` (0: every task reads through a borrowed descriptor); no
    arguments, as it was.

    Examples
    --------
    >>> inject(borrow=False, pread_run=0)
    >>> inject()
    """
    from ..errors import InputError

    if not isinstance(borrow, bool):
        raise InputError(f"borrow must be True or False, got {borrow!r}")
    if pread_run is not None and (
        isinstance(pread_run, bool) or not isinstance(pread_run, numbers.Integral) or pread_run < 0
    ):
        raise InputError(f"pread_run must be a whole number >= 0, got {pread_run!r}")
    _FAULTS.clear()
    if not borrow:
        _FAULTS["no-borrow"] = True
    if pread_run is not None:
        _FAULTS["pread-run"] = int(pread_run)


#: a task whose runs average at least this many bytes reads them through the I/O
#: node's descriptor (:func:`borrow`): no page tables of the node's mapping to fill.
#: Shorter runs (a mesh part's: thousands of a few kB) cost a system call each that way,
#: and one call per 1,024 of them out of the node's mapping (:func:`read`) costs less
#: (measured, a METIS part of a mesh in 5 kB runs: 0.48 s a restart against 0.56 s).
PREAD_RUN = 64 << 10


def through_descriptor(mean_run: float) -> bool:
    """Whether runs of ``mean_run`` bytes on average are read through a borrowed
    descriptor (else copied out of the node's mapping).

    Examples
    --------
    >>> through_descriptor(4 << 20), through_descriptor(5000)
    (True, False)
    """
    return mean_run >= _FAULTS.get("pread-run", PREAD_RUN)


def borrow(who: tuple[int, int], fd: int, file: tuple[int, int]) -> int:
    """A descriptor of this process for descriptor ``fd`` of process ``who`` (pid, start
    time), which must be open on ``file`` (device, inode); the caller closes it.

    Raises
    ------
    OSError
        The process is gone, refuses (permissions; ``pidfd_getfd`` needs what
        ``process_vm_readv`` needs), the kernel has no ``pidfd_getfd`` (Linux 5.6),
        or ``fd`` is no longer that file there.

    Examples
    --------
    >>> mine = os.open(__file__, os.O_RDONLY)
    >>> st = os.fstat(mine)
    >>> theirs = borrow(identity(), mine, (st.st_dev, st.st_ino))
    >>> os.path.sameopenfile(mine, theirs)
    True
    >>> os.close(theirs); os.close(mine)
    """
    global _SYSCALL
    if _FAULTS.get("no-borrow"):
        raise OSError(errno.ENOSYS, "pidfd_getfd: refused by a test's hook")
    if _SYSCALL is None:
        fn = ctypes.CDLL(None, use_errno=True).syscall
        fn.restype = ctypes.c_long
        fn.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_uint]
        _SYSCALL = fn
    pidfd = os.pidfd_open(int(who[0]))
    try:
        _same(who)  # the pidfd names the process that offered the descriptor
        got = _SYSCALL(_PIDFD_GETFD, pidfd, int(fd), 0)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd from pid {who[0]}: {os.strerror(err)}")
    finally:
        os.close(pidfd)
    st = os.fstat(got)
    if (st.st_dev, st.st_ino) != tuple(file):
        os.close(got)
        raise OSError(f"descriptor {fd} of pid {who[0]} is no longer the checkpoint")
    _BORROWED[0] += 1
    return int(got)
