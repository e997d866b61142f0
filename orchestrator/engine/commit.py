"""Commit: a complete temporary output takes the target's name in one atomic step.

Without ``overwrite`` the rename refuses to replace anything (two stages on
one target: exactly one commits). With ``overwrite`` the new output is
renamed *over* the old one — for a file ``rename(2)`` replaces it
atomically, for a directory (Zarr, HDF5 subfiles) ``renameat2(2)`` with
``RENAME_EXCHANGE`` swaps the two — and the old one is deleted only after the
new one holds the name. The old target is never deleted first: at every step
the target is the old complete output or the new one, never neither.

Each step calls :data:`fault_hook` (tests inject I/O errors and signals there,
the way SQLite's crash tests inject a fault at every write and sync).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ..files import fsync_path, remove_path
from .storage import StorageError

__all__ = ["COMMIT_STEPS", "commit", "fault_hook"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2

#: the steps of a commit, in order, as :data:`fault_hook` sees them
COMMIT_STEPS = ("start", "aside", "renamed", "removed", "synced")

#: called with each step's name; a test sets it to raise there (``None``: no faults)
fault_hook: Callable[[str], None] | None = None
#: whether to use ``renameat2`` where the system has it (tests turn it off to run the
#: fallback that moves the old target aside)
use_renameat2 = True


def _step(name: str) -> None:
    if fault_hook is not None:
        fault_hook(name)


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``; False where the system does not offer it."""
    if not use_renameat2 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):  # kernel or file system without renameat2
        return False
    raise OSError(err, os.strerror(err), str(dst))


def commit(tmp: Path, target: Path, overwrite: bool) -> None:
    """Give ``tmp`` the name ``target`` atomically; fsync the directory.

    Raises :class:`~orchestrator.engine.storage.StorageError` if ``target`` exists
    and ``overwrite`` is false (also when another stage committed it
    meanwhile), or if it is of another kind (a file against a directory).
    If a step fails, what was renamed is put back where it can be: the
    target keeps the old output, or already holds the new one.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "new").write_text("2"); _ = (d / "old").write_text("1")
    >>> commit(d / "new", d / "old", overwrite=True); (d / "old").read_text()
    '2'
    >>> _ = (d / "again").write_text("3")
    >>> commit(d / "again", d / "old", overwrite=False)
    Traceback (most recent call last):
    ...
    orchestrator.errors.StorageError: ... exists; pass overwrite=True to replace it
    """
    _step("start")
    exists = os.path.lexists(target)
    if exists and not overwrite:
        raise StorageError(f"{target} exists; pass overwrite=True to replace it")
    if exists and target.is_dir() != tmp.is_dir():
        kind = "a directory" if target.is_dir() else "a file"
        raise StorageError(f"{target} is {kind}; a checkpoint of another kind cannot replace it")
    try:
        if not exists:
            if not _renameat2(tmp, target, _RENAME_NOREPLACE):
                if tmp.is_dir():
                    os.rename(tmp, target)  # fails on a non-empty directory of that name
                else:
                    os.link(tmp, target)  # fails if the name exists: no silent replace
                    os.unlink(tmp)
            _step("renamed")
        elif not tmp.is_dir():
            # atomic over the old file; freeing the old one's blocks happens inside this
            # call (a while for a large file on a disk mounted with `discard`), as with
            # h5py's mode "w" truncating it
            os.replace(tmp, target)
            _step("renamed")
        elif _renameat2(tmp, target, _RENAME_EXCHANGE):
            try:
                _step("renamed")
            finally:  # the old target, now under the temporary name, goes whatever happens
                remove_path(tmp)
            _step("removed")
        else:  # no exchange: move the old one aside first, never delete it before
            aside = target.parent / f".{target.name}.old-{os.getpid()}"
            os.rename(target, aside)
            try:
                _step("aside")
                os.rename(tmp, target)
            except BaseException:  # the old one takes its name back: never neither
                os.rename(aside, target)
                raise
            try:
                _step("renamed")
            finally:  # the new one holds the name: the old one goes whatever happens
                remove_path(aside)
            _step("removed")
    except FileExistsError:
        raise StorageError(f"{target} exists; pass overwrite=True to replace it") from None
    except OSError as err:
        if err.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise StorageError(f"{target} exists; pass overwrite=True to replace it") from None
        raise
    fsync_path(target.parent)
    _step("synced")
