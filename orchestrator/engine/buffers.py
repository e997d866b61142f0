"""Stripe buffers reused within a worker process, instead of fresh memory for every stripe.

Dask's Nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also
turns off glibc's adaptive mmap threshold: every buffer of a few MiB is a
fresh ``mmap`` whose pages are faulted in, zeroed, and handed back at
``free``. On the virtual machines we measure on, touching fresh pages is
slow: filling an 8 MiB buffer took 2.0 ms fresh against 0.3 ms reused, and
a 1 GiB Zarr stage spent more time faulting in the stripes it assembled than
encoding them. A worker assembles one stripe at a time per thread, so a few
buffers of each stripe size, taken and given back, keep the same pages warm.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["STRIPES", "BufferPool"]


class BufferPool:
    """Byte buffers by exact size, at most ``keep_bytes`` of them held while unused.

    Examples
    --------
    >>> pool = BufferPool(keep_bytes=1 << 20)
    >>> a = pool.take(4096)
    >>> pool.give(a)
    >>> pool.take(4096) is a  # the same memory, its pages already there
    True
    >>> pool.take(4096) is a  # taken: a new one
    False
    """

    def __init__(self, keep_bytes: int = 64 << 20) -> None:
        self.keep_bytes = keep_bytes
        self._free: dict[int, list[np.ndarray]] = {}
        self._held = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A ``uint8`` buffer of ``nbytes`` (contents undefined), reused when one is free."""
        with self._lock:
            free = self._free.get(nbytes)
            if free:
                self._held -= nbytes
                return free.pop()
        return np.empty(nbytes, dtype=np.uint8)

    def give(self, buf: np.ndarray) -> None:
        """Hand back a buffer from :meth:`take` once nothing refers to its bytes any more."""
        with self._lock:
            if self._held + buf.nbytes > self.keep_bytes:
                return  # enough kept: this one goes back to the system
            self._free.setdefault(buf.nbytes, []).append(buf)
            self._held += buf.nbytes

    def clear(self) -> None:
        """Let every kept buffer go."""
        with self._lock:
            self._free.clear()
            self._held = 0


#: the stripe buffers of this process (assembled shards, see ``sources.store_stripes``)
STRIPES = BufferPool()
