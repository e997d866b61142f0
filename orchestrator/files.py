"""Output files appear complete or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "atomic_path",
    "fsync_path",
    "fsync_tree",
    "private_file",
    "remove_path",
    "umask",
]


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
    # created here, exclusively, under a name no one can guess: a symlink planted at a
    # predictable name would make the writer follow it out of the folder
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.tmp-", suffix=path.suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask())  # a new file's usual mode, not mkstemp's 0600
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def private_file(directory: str | os.PathLike[str], prefix: str, suffix: str = "") -> Path:
    """A new empty file in ``directory`` that this call created (``O_EXCL``, mode 0600).

    Its name is random: no symlink planted beforehand can stand in for it.

    Examples
    --------
    >>> import tempfile
    >>> p = private_file(tempfile.mkdtemp(), ".probe-", ".bin")
    >>> p.stat().st_size, oct(p.stat().st_mode & 0o777)
    (0, '0o600')
    """
    fd, name = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    os.close(fd)
    return Path(name)


def umask() -> int:
    """This process's umask, read without changing it (Linux), else by setting it back.

    Examples
    --------
    >>> 0 <= umask() <= 0o777
    True
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # not thread-safe: only where /proc says nothing
    os.umask(mask)
    return mask


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
