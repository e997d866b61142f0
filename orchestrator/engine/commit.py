"""Commit: a complete temporary output takes the target's name in one atomic step.

Without ``overwrite`` the rename refuses to replace anything (two stages on
one target: exactly one commits). With ``overwrite`` the new output is
renamed *over* the old one — for a file ``rename(2)`` replaces it
atomically, for a directory (Zarr, HDF5 subfiles) ``renameat2(2)`` with
``RENAME_EXCHANGE`` swaps the two — and the old one is deleted only after the
new one holds the name. The old target is never deleted first.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

from ..files import fsync_path, remove_path
from ..storage import StorageError

__all__ = ["commit"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``; False where the system does not offer it."""
    if not sys.platform.startswith("linux"):
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

    Raises :class:`~orchestrator.storage.StorageError` if ``target`` exists
    and ``overwrite`` is false (also when another stage committed it
    meanwhile), or if it is of another kind (a file against a directory).

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
        elif not tmp.is_dir():
            # atomic over the old file; freeing the old one's blocks happens inside this
            # call (a while for a large file on a disk mounted with `discard`), as with
            # h5py's mode "w" truncating it
            os.replace(tmp, target)
        elif _renameat2(tmp, target, _RENAME_EXCHANGE):
            remove_path(tmp)  # the old target, now under the temporary name
        else:  # no exchange: move the old one aside first, never delete it before
            aside = target.parent / f".{target.name}.old-{os.getpid()}"
            os.rename(target, aside)
            os.rename(tmp, target)
            remove_path(aside)
    except FileExistsError:
        raise StorageError(f"{target} exists; pass overwrite=True to replace it") from None
    except OSError as err:
        if err.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise StorageError(f"{target} exists; pass overwrite=True to replace it") from None
        raise
    fsync_path(target.parent)
