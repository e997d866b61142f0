"""What the measurements run on the workers: synthetic data, timed writes, memory.

Dask sends a task's function by reference, so a worker imports the module
that defines it. These live apart from :mod:`~orchestrator.engine.measure`
(which imports the stage, the planner and through it Numba and SciPy) so
that a worker running one of them loads only NumPy and the engine's file
helpers (measured: an idle worker 64 MiB resident; 159 MiB once the
planner is imported).
"""

from __future__ import annotations

import numpy as np

from ..contributions import Contribution
from .directio import PositionedFile

__all__ = ["block", "contribution", "peak_rss", "write_pieces"]


def contribution(client: int, rows: np.ndarray, width: int) -> Contribution:
    """The synthetic contribution of ``client``: every element of row ``r`` is ``r``.

    Examples
    --------
    >>> contribution(2, np.array([5, 7]), 3).values.tolist()
    [[5.0, 5.0, 5.0], [7.0, 7.0, 7.0]]
    """
    return Contribution(client, rows, np.repeat(rows.astype(np.float64)[:, None], width, axis=1))


def block(i: int, rows: int, n_rows: int, width: int) -> np.ndarray:
    """Block ``i`` (``rows`` rows) of the synthetic dataset of ``n_rows`` rows.

    Examples
    --------
    >>> block(1, 2, 3, 2).tolist()
    [[2.0, 2.0]]
    """
    r = np.arange(i * rows, min(n_rows, (i + 1) * rows), dtype=np.float64)
    return np.repeat(r[:, None], width, axis=1)


def write_pieces(path: str, pos: np.ndarray, size: np.ndarray) -> None:
    """Write ``size[k]`` bytes at ``pos[k]`` of ``path`` (positioned, ``O_DIRECT``), then fsync.

    Examples
    --------
    >>> write_pieces("/tmp/p.bin", np.array([0]), np.array([4096]))  # doctest: +SKIP
    """
    longest = int(size.max()) if size.size else 0
    # values as a stage's: floats, and buffers that start anywhere in a page
    values = np.arange(longest // 8 + 8, dtype=np.float64).view(np.uint8)
    f = PositionedFile(path)
    try:
        for k, (p, n) in enumerate(zip(pos.tolist(), size.tolist(), strict=True)):
            f.write(p, memoryview(values[k % 8 : k % 8 + n].data))
        f.fsync()
    finally:
        f.close()


def peak_rss() -> int:
    """Peak resident memory (bytes) of this process's own address space (Linux ``VmHWM``).

    Not ``getrusage``'s ``ru_maxrss``: that survives ``exec``, so a worker
    process spawned by a large parent reports the parent's size at the fork
    (measured: every worker of ``iorch write-bench`` "peaked" at 183 MiB,
    the CLI's size, while its own address space never passed 90 MiB).
    Falls back to ``ru_maxrss`` where ``/proc`` has no ``VmHWM``.

    Examples
    --------
    >>> peak_rss() > 0
    True
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux
