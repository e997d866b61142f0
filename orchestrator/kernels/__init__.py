"""Numba kernels: plain arrays in, plain arrays out, one module per family.

Every kernel is ``@njit(cache=True)``. The scheduling kernels take units as
columns ``client, ionode, d`` (int64, int64, float64) plus counts and return
the order (int64 permutation of unit ids) and, for round-based policies, the
number of rounds and messages; the others (``holdings``, ``meshgraph``,
``idg``, ...) say what they take. Exact semantics: ``docs/semantics.rst``.
"""

import hashlib
from pathlib import Path

__all__ = ["refresh_cache"]


def refresh_cache(here: Path | None = None) -> bool:
    """Delete Numba's cached machine code of the kernels if any kernel source changed.

    Numba keys a cached function on its own file only, so a kernel that
    calls a helper from another module (the heap, the generator) would keep
    running the helper's old code after that module changes. One digest
    over all kernel sources closes that gap. It runs where one process
    starts the work — ``iorch`` and the test session — and never at import:
    worker processes import the kernels concurrently, and none of them
    should delete what another is loading. Returns whether it deleted.

    Examples
    --------
    >>> refresh_cache() in (True, False)  # True only if a kernel source changed
    True
    """
    here = here or Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for src in sorted(here.glob("*.py")):
        digest.update(src.name.encode())
        digest.update(src.read_bytes())
    cache = here / "__pycache__"
    stamp = cache / "kernels.sha256"
    try:
        if stamp.exists() and stamp.read_text() == digest.hexdigest():
            return False
        for f in cache.glob("*.nb[ic]"):
            f.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:  # read-only install: nothing changes there, and Numba compiles in memory
        return False
    return True
