"""Numba kernels: plain arrays in, plain arrays out, one module per family.

Every kernel is ``@njit(cache=True)`` and takes units as columns
``client, ionode, d`` (int64, int64, float64) plus counts; it returns the
order (int64 permutation of unit ids) and, for round-based policies, the
number of rounds and messages. Exact semantics: ``docs/semantics.rst``.
"""

import hashlib
from pathlib import Path


def _drop_stale_caches() -> None:
    """Delete Numba's cached machine code when any kernel source changed.

    Numba keys a cached function on its own file only, so a kernel that
    calls a helper from another module (the heap, the generator) would keep
    running the helper's old code after that module changes. One digest
    over all kernel sources closes that gap.
    """
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for src in sorted(here.glob("*.py")):
        digest.update(src.name.encode())
        digest.update(src.read_bytes())
    cache = here / "__pycache__"
    stamp = cache / "kernels.sha256"
    try:
        if stamp.exists() and stamp.read_text() == digest.hexdigest():
            return
        for f in cache.glob("*.nb[ic]"):
            f.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:  # read-only install: Numba then compiles in memory
        pass


_drop_stale_caches()
