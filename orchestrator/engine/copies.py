"""Copying byte runs between buffers: what a restart's aggregator cuts out of its
stripes for a task, and what the task puts back in place.

A run of a few kilobytes or more is one ``memcpy`` (a NumPy slice): about 10 GB/s
here, where a Numba loop copies at 1-3 GB/s. Many small runs (rows scattered one
by one) go to the Numba kernels (:mod:`orchestrator.kernels.runs`), where the
interpreter's cost per run would dominate.
"""

from __future__ import annotations

import numpy as np

__all__ = ["copy", "gather", "scatter"]

#: runs at least this long on average are copied one slice each
SLICE_BYTES = 4096
#: ... and so are this few runs, whatever their length
SLICE_RUNS = 64


def _slices(length: np.ndarray) -> bool:
    k = int(length.size)
    return k <= SLICE_RUNS or int(length.sum()) >= k * SLICE_BYTES


def gather(buf: np.ndarray, src: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The bytes ``buf[src[i] : src[i] + length[i]]`` of every run, one after the other.

    Examples
    --------
    >>> gather(np.arange(10, dtype=np.uint8), np.array([6, 1]), np.array([2, 3])).tolist()
    [6, 7, 1, 2, 3]
    """
    if not _slices(length):
        from ..kernels.runs import gather_runs

        return gather_runs(buf, src, length)
    out = np.empty(int(length.sum()), dtype=np.uint8)
    o = 0
    for s, n in zip(src.tolist(), length.tolist(), strict=True):
        out[o : o + n] = buf[s : s + n]
        o += n
    return out


def scatter(out: np.ndarray, dst: np.ndarray, length: np.ndarray, data: np.ndarray) -> None:
    """Put ``data`` (runs one after the other) at ``out[dst[i] : dst[i] + length[i]]``.

    Examples
    --------
    >>> out = np.zeros(6, dtype=np.uint8)
    >>> scatter(out, np.array([4, 0]), np.array([2, 3]), np.arange(1, 6, dtype=np.uint8))
    >>> out.tolist()
    [3, 4, 5, 0, 1, 2]
    """
    if not _slices(length):
        from ..kernels.runs import scatter_runs

        scatter_runs(out, dst, length, data)
        return
    o = 0
    for d, n in zip(dst.tolist(), length.tolist(), strict=True):
        out[d : d + n] = data[o : o + n]
        o += n


def copy(
    out: np.ndarray, dst: np.ndarray, buf: np.ndarray, src: np.ndarray, length: np.ndarray
) -> None:
    """``out[dst[i] : dst[i] + length[i]] = buf[src[i] : src[i] + length[i]]`` for every run.

    Examples
    --------
    >>> out = np.zeros(4, dtype=np.uint8)
    >>> copy(out, np.array([0, 2]), np.arange(10, dtype=np.uint8), np.array([8, 3]),
    ...      np.array([2, 2]))
    >>> out.tolist()
    [8, 9, 3, 4]
    """
    if not _slices(length):
        from ..kernels.runs import copy_runs

        copy_runs(out, dst, buf, src, length)
        return
    for d, s, n in zip(dst.tolist(), src.tolist(), length.tolist(), strict=True):
        out[d : d + n] = buf[s : s + n]
