"""Pieces of a stripe handed between processes of one host through shared memory.

A format written a stripe at a time (a Zarr shard) needs every byte of a
stripe in the one process that encodes it, and a stripe's rows come from
many clients, held by several worker processes. Moved through Dask, each
of those bytes is serialized, framed, encrypted (TLS) and copied on both
ends: measured on 2 cores, 3.4 CPU seconds per GiB between two workers,
more than zarr-python takes to encode and store it (0.4-2 s). Processes of
one host share memory, so there the other sources *stage* their pieces: each
writes its ranges with positioned writes into the stripe's file in a
directory of ``/dev/shm`` (memory, never the disk), at the range's place in
the stripe, and the assembler reads them from there into the stripe's
buffer, then removes the file. The Dask task graph stays as it was (the
assembler's task depends on the stagers'), only the payload is a marker.

The directory belongs to one I/O node of one stage
(``iorch-stage-<uid>-<pid namespace>-<pid>-<token>-<node>``, mode 0700):
that I/O node creates it and removes it when it ends, whatever the
outcome; a source creates files only inside the directory it opened (so a
file is never made after the directory was removed), and a directory left
by a killed worker is removed when a stage is stopped and by the next
stage on this host (:func:`sweep`; only directories of its own user and
pid namespace, whose owners it can see). Both ends check they see the same
directory. Where ``/dev/shm`` is missing or not writable, where it is full
(a container's 64 MiB), or with ``IORCH_STAGING=0``, the pieces move
through Dask as before. The memory it holds is bounded like the I/O node's
window (two groups of stripes under way, half the window each) and
is not seen by Dask's memory monitor.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import StorageError

__all__ = [
    "STAGING_ENV",
    "open_staging",
    "read_staged",
    "remove_staging",
    "stage_pieces",
    "staging_root",
    "sweep",
    "sweep_dead",
]

#: set to 0 to move every piece of a stripe through Dask
STAGING_ENV = "IORCH_STAGING"
#: where staging directories go: memory shared by the processes of a host
ROOT = Path("/dev/shm")
_PREFIX = "iorch-stage-"
#: errors of a full or limited /dev/shm: the bytes go through Dask instead
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOMEM}
#: names of the staging directories this process made and has not removed (two stages
#: may run at once on one worker: a sweep must not take the other's)
_open: set[str] = set()
_LOCK = threading.Lock()


def staging_root() -> Path | None:
    """The shared-memory folder of this host, or None where staging is off or impossible.

    Examples
    --------
    >>> staging_root() in (None, Path("/dev/shm"))
    True
    """
    if os.environ.get(STAGING_ENV, "1").strip().lower() in ("0", "no", "off", "false"):
        return None
    if ROOT.is_dir() and os.access(ROOT, os.W_OK | os.X_OK):
        return ROOT
    return None


def _namespace() -> str:
    """This process's pid namespace (containers sharing /dev/shm may reuse pids)."""
    try:
        return os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    except OSError:
        return "0"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def sweep(root: Path, keep: Iterable[str] = ()) -> list[str]:
    """Remove this user's staging directories left by processes that are gone.

    A worker killed in the middle of a stage (SIGKILL, out of memory) leaves
    its directory, memory nobody else frees; ``keep`` names the ones still
    in use by this process. Only directories made in this process's pid
    namespace are judged (elsewhere a pid means another process). Returns
    the names removed.

    Examples
    --------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / f"iorch-stage-{os.getuid()}-{_namespace()}-999999999-t-0").mkdir()
    >>> sweep(root)
    ['iorch-stage-...-999999999-t-0']
    """
    removed = []
    mine = f"{_PREFIX}{os.getuid()}-{_namespace()}-"
    keep = set(keep)  # a copy: the caller's set may change meanwhile
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if not entry.name.startswith(mine) or entry.name in keep:
                continue
            pid = entry.name[len(mine) :].split("-", 1)[0]
            if not pid.isdigit():
                continue
            if int(pid) == os.getpid() or not _alive(int(pid)):
                remove_staging(entry.path, forget=False)
                removed.append(entry.name)
    return removed


def sweep_dead() -> None:
    """:func:`sweep` of this host's shared memory, keeping this process's directories.

    Examples
    --------
    >>> sweep_dead()
    """
    root = staging_root()
    if root is not None:
        with _LOCK:  # held: a directory this process opens meanwhile is its own, kept
            sweep(root, keep=_open)


def open_staging(token: str, ionode: int) -> tuple[str, tuple[int, int]] | None:
    """On an I/O worker: make this stage's staging directory; its path and identity.

    Directories this process made for earlier stages, and those of processes
    that are gone, are removed first. None where staging is off.

    Examples
    --------
    >>> where = open_staging("doc", 0)
    >>> where is None or Path(where[0]).is_dir()
    True
    >>> if where: remove_staging(where[0])
    """
    root = staging_root()
    if root is None:
        return None
    name = f"{_PREFIX}{os.getuid()}-{_namespace()}-{os.getpid()}-{token}-{ionode}"
    path = root / name
    with _LOCK:
        sweep(root, keep=_open)
        try:
            path.mkdir(mode=0o700)
            st = path.stat()
        except OSError:
            return None
        _open.add(name)
    return str(path), (st.st_dev, st.st_ino)


def remove_staging(path: str, patience: float = 5.0, forget: bool = True) -> None:
    """Remove a staging directory, and what a stager still running adds meanwhile.

    A source may create a file in it while it is being removed; the removal
    is repeated until the directory is gone (bounded by ``patience``
    seconds). A directory once removed cannot get files again
    (:func:`stage_pieces` creates them relative to the directory it opened).

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "s"; (d / "x").mkdir(parents=True)
    >>> remove_staging(str(d)); d.exists()
    False
    """
    deadline = time.monotonic() + patience
    while True:
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if forget:
        with _LOCK:
            _open.discard(os.path.basename(path))


def _stripe_file(dataset: int, base: int) -> str:
    return f"{dataset}-{base}"


def stage_pieces(
    path: str,
    identity: tuple[int, int],
    pieces: Sequence[tuple[int, int, int, memoryview]],
) -> bool:
    """On a source: write each piece at its place in its stripe's staging file.

    ``pieces`` are ``(dataset, stripe's first byte, piece's first byte,
    bytes)``. Returns False when this process does not see the staging
    directory ``identity`` names (another host, writing nothing), or when
    shared memory is full (what was written is never read, and goes with
    the directory): the caller sends the bytes instead.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp(); st = os.stat(d)
    >>> stage_pieces(d, (st.st_dev, st.st_ino), [(0, 8, 10, memoryview(b"ab"))])
    True
    >>> Path(d, "0-8").read_bytes()
    b'\\x00\\x00ab'
    """
    try:
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        st = os.fstat(dfd)
        if (st.st_dev, st.st_ino) != tuple(identity):
            return False
        fds: dict[str, int] = {}
        try:
            for d, base, off, data in pieces:
                name = _stripe_file(d, base)
                fd = fds.get(name)
                if fd is None:
                    # relative to the directory opened above: once it is removed, no file
                    # can be created in it (ENOENT), so nothing outlives the stage
                    fd = fds[name] = os.open(
                        name, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600, dir_fd=dfd
                    )
                done, at = 0, off - base
                while done < len(data):
                    done += os.pwrite(fd, data[done:], at + done)
        except OSError as err:
            if err.errno in _FULL:
                return False
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
        return True
    finally:
        os.close(dfd)


def read_staged(
    path: str,
    identity: tuple[int, int],
    dataset: int,
    base: int,
    ranges: Sequence[tuple[int, memoryview]],
) -> None:
    """On the assembler: read staged pieces of one stripe into ``ranges``, then drop the file.

    ``ranges`` are ``(piece's first byte, buffer of its length)`` (views of
    the stripe's buffer). Raises :class:`~orchestrator.errors.StorageError`
    when this process does not see the directory ``identity`` names, the one
    the sources wrote into (workers of one address with separate
    ``/dev/shm``: set ``IORCH_STAGING=0``).

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp(); st = os.stat(d); ident = (st.st_dev, st.st_ino)
    >>> _ = stage_pieces(d, ident, [(0, 8, 10, memoryview(b"ab"))])
    >>> buf = bytearray(2)
    >>> read_staged(d, ident, 0, 8, [(10, memoryview(buf))]); bytes(buf)
    b'ab'
    >>> os.listdir(d)
    []
    """
    name = _stripe_file(dataset, base)
    try:
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        raise StorageError(f"{path}: the staged pieces of a stripe are gone ({err})") from None
    try:
        st = os.fstat(dfd)
        if (st.st_dev, st.st_ino) != tuple(identity):
            raise StorageError(
                f"{path}: this worker does not see the shared-memory folder its sources "
                "wrote into (workers of one address with separate /dev/shm?); set "
                "IORCH_STAGING=0 to move the pieces through Dask"
            )
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dfd)
        try:
            for off, into in ranges:
                done, at = 0, off - base
                while done < len(into):
                    n = os.preadv(fd, [into[done:]], at + done)
                    if n <= 0:
                        raise StorageError(f"{path}/{name}: staged bytes {at + done}.. are missing")
                    done += n
        finally:
            os.close(fd)
        os.unlink(name, dir_fd=dfd)  # its memory goes back now, not when the stage ends
    finally:
        os.close(dfd)
