"""What this machine has, checked before a large allocation: an error naming the value,
never an out-of-memory kill or a full disk halfway through."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import InputError, OrchestratorError

__all__ = ["available_memory", "check_disk", "check_memory", "free_disk"]


def available_memory() -> int:
    """Bytes of memory the kernel says it can give without swapping (``MemAvailable``).

    Falls back to the physical memory where ``/proc/meminfo`` is absent.

    Examples
    --------
    >>> available_memory() > 0
    True
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def check_memory(
    nbytes: float, what: str, error: type[OrchestratorError] = InputError, share: float = 0.8
) -> None:
    """Raise ``error`` if ``what`` would need more than ``share`` of the available memory.

    Examples
    --------
    >>> check_memory(1 << 20, "a small table")
    >>> check_memory(1 << 60, "client ids up to 2**57")
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: client ids up to 2**57 need about 1,024.0 PiB of memory; ...
    """
    have = available_memory()
    if nbytes > share * have:
        raise error(
            f"{what} need about {_size(nbytes)} of memory; this machine has {_size(have)} available"
        )


def free_disk(path: str | os.PathLike[str]) -> int:
    """Bytes free for this user on the file system holding ``path`` (or its nearest parent).

    Examples
    --------
    >>> free_disk("/") > 0
    True
    """
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return int(shutil.disk_usage(p).free)


def check_disk(
    path: str | os.PathLike[str], nbytes: float, what: str, error: type[OrchestratorError]
) -> None:
    """Raise ``error`` if ``what`` (``nbytes``) cannot fit on the disk holding ``path``.

    Examples
    --------
    >>> from orchestrator.errors import StorageError
    >>> check_disk("/", 1, "one byte", StorageError)
    >>> check_disk("/", 1 << 62, "the stage's datasets", StorageError)
    Traceback (most recent call last):
    ...
    orchestrator.errors.StorageError: the stage's datasets need 4,096.0 PiB on the disk ...
    """
    free = free_disk(path)
    if nbytes > free:
        raise error(
            f"{what} need {_size(nbytes)} on the disk holding {path}; it has {_size(free)} free"
        )
