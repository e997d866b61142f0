"""Output files appear complete or not at all."""

from __future__ import annotations

import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import OrchestratorError

__all__ = [
    "atomic_path",
    "check_input_file",
    "check_path",
    "fsync_path",
    "fsync_tree",
    "private_file",
    "private_path",
    "remove_path",
    "signals_deferred",
    "umask",
]


def check_path(path: Any, what: str, error: type[OrchestratorError]) -> Path:
    """``path`` as a Path, or ``error``: not a path, empty (``""`` is the current folder to
    ``Path``) or holding a NUL (the C library cuts the name there).

    Examples
    --------
    >>> from orchestrator.errors import InputError
    >>> check_path("", "target", InputError)
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: target must be a non-empty path, got ''
    """
    if not isinstance(path, str | os.PathLike) or not os.fspath(path).strip():
        raise error(f"{what} must be a non-empty path, got {path!r}")
    if "\0" in os.fspath(path):
        raise error(f"{what} {os.fspath(path)!r} holds a NUL")
    return Path(path)


def check_input_file(
    path: str | os.PathLike[str],
    what: str,
    error: type[OrchestratorError],
    per_byte: float = 1.0,
) -> int:
    """Refuse an input that is not a regular file, or too large to read into memory.

    ``per_byte`` is the memory the reader needs per byte of the file. A
    device or a FIFO given as input (``--transfers /dev/zero``) was read
    until the machine ran out of memory. Returns the file's size.

    Examples
    --------
    >>> from orchestrator.errors import InputError
    >>> check_input_file("/dev/zero", "transfers", InputError)
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: transfers /dev/zero is not a regular file
    """
    from .limits import check_memory

    check_path(path, what, error)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise error(f"{what} {path!r} cannot be read: {getattr(err, 'strerror', err)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {path} is not a regular file")
    check_memory(per_byte * st.st_size, f"{what} {path} ({st.st_size:,} bytes) and its rows", error)
    return int(st.st_size)


def _check_replaceable_file(path: Path) -> None:
    """Refuse to rename an output over anything but a file or a link: a device, a FIFO or a
    folder at ``path`` would be replaced (as root, ``--out /dev/full`` replaced the
    machine's /dev/full with a CSV file)."""
    from .errors import InputError

    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):  # the link is replaced, not followed; unless it names a
            mode = os.stat(path).st_mode  # device: as root, /dev/stdout is such a link
    except FileNotFoundError:  # nothing there, or a dangling link: replaced
        return
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise InputError(f"output {path} is {kind}; it is not replaced")


#: a test's hook, called as soon as a temporary file exists (it may send this process a
#: signal there, as a Ctrl-C can land at any instruction)
created_hook: Callable[[Path], None] | None = None


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
    _check_replaceable_file(path)
    tmp: Path | None = None
    try:
        # created here, exclusively, under a name no one can guess: a symlink planted at a
        # predictable name would make the writer follow it out of the folder
        with signals_deferred():  # Ctrl-C between creating and naming it would leave it
            try:
                fd, name = tempfile.mkstemp(
                    dir=path.parent, prefix=f".{path.stem}.tmp-", suffix=path.suffix
                )
            except OSError as err:  # name the user's folder, not our temporary name in it
                raise type(err)(err.errno, err.strerror, str(path.parent)) from None
            if created_hook is not None:
                created_hook(Path(name))
            os.close(fd)
            tmp = Path(name)
        yield tmp
        os.chmod(tmp, 0o666 & ~umask())  # a new file's usual mode, not mkstemp's 0600
        _check_replaceable_file(path)  # again: it may have appeared meanwhile
        os.replace(tmp, path)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


@contextmanager
def signals_deferred(insist: bool = False) -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM for the block (main thread); the first arrives when it ends.

    For the few steps that create something and record it for cleanup: an
    interrupt between the two would leave it behind. Yields the signals held
    so far. With ``insist``, a second signal is not held: a user who presses
    Ctrl-C twice gets the interrupt at once. Elsewhere than the main thread
    (which alone runs Python's signal handlers) the block runs as is.

    Examples
    --------
    >>> with signals_deferred() as held:
    ...     held
    []
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    # Python's handlers, not the signal mask: a mask is per thread, and the kernel hands a
    # process's signal to any thread not blocking it (Dask's threads), whose C handler
    # then has the main thread run the Python one at once
    held: list[int] = []
    old: dict[int, Any] = {int(s): signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def hold(signum: int, frame: Any) -> None:
        if insist and held:  # the second one: let it through now
            signal.signal(signum, old[signum])
            signal.raise_signal(signum)
            return
        held.append(signum)

    for s, previous in old.items():
        if previous not in (signal.SIG_IGN, None):  # an ignored signal stays ignored
            signal.signal(s, hold)
    try:
        yield held
    finally:
        for s, previous in old.items():
            if previous is not None:
                signal.signal(s, previous)
        for signum in held[:1]:
            signal.raise_signal(signum)


@contextmanager
def private_path(
    directory: str | os.PathLike[str], prefix: str, suffix: str = ""
) -> Iterator[Path]:
    """A :func:`private_file` for the block, removed when it ends, whatever ends it.

    Examples
    --------
    >>> import tempfile
    >>> with private_path(tempfile.mkdtemp(), ".probe-", ".bin") as p:
    ...     p.exists()
    True
    >>> p.exists()
    False
    """
    path: Path | None = None
    try:
        with signals_deferred():  # created and named as one step (see signals_deferred)
            path = private_file(directory, prefix, suffix)
        yield path
    finally:
        if path is not None:
            path.unlink(missing_ok=True)


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
    if created_hook is not None:
        created_hook(Path(name))
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
