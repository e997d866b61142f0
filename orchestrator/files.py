"""Output files appear complete or not at all."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "fsync_path", "fsync_tree", "remove_path"]


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    The temporary name keeps the suffix (so writers that infer a format from
    it still work). On an exception the temporary file is removed and
    ``path`` is left untouched.

    Examples
    --------
    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "plan.csv"
    >>> with atomic_path(target) as tmp:
    ...     _ = tmp.write_text("a,b\\n")
    >>> target.read_text()
    'a,b\\n'
    """
    path = Path(path)
    tmp = path.parent / f".{path.stem}.tmp-{os.getpid()}{path.suffix}"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a file or directory to stable storage.

    Examples
    --------
    >>> import tempfile
    >>> fsync_path(tempfile.mkdtemp())
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike[str]) -> None:
    """:func:`fsync_path` every file below ``path``, then the directories.

    Examples
    --------
    >>> import tempfile
    >>> fsync_tree(tempfile.mkdtemp())
    """
    for root, dirs, files in os.walk(path, topdown=False):
        for name in [*files, *dirs]:
            fsync_path(os.path.join(root, name))
    fsync_path(path)


def remove_path(path: str | os.PathLike[str]) -> None:
    """Delete a file or a directory tree (a Zarr store); a missing path is not an error.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "a.zarr"
    >>> (d / "c").mkdir(parents=True)
    >>> remove_path(d); remove_path(d); d.exists()
    False
    """
    import shutil

    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
