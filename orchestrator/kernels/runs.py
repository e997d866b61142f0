"""Copying byte runs: what a restart's aggregator cuts out of its stripes for a task,
and what the task puts back in place (semantics: orchestrator.engine.readplan)."""

import numpy as np
from numba import njit


@njit(cache=True)
def gather_runs(buf, src, length):
    """The bytes ``buf[src[i] : src[i] + length[i]]`` of every run, one after the other."""
    total = 0
    for i in range(length.size):
        total += length[i]
    out = np.empty(total, dtype=np.uint8)
    o = 0
    for i in range(length.size):
        n = length[i]
        out[o : o + n] = buf[src[i] : src[i] + n]
        o += n
    return out


@njit(cache=True)
def scatter_runs(out, dst, length, data):
    """Put ``data`` (runs one after the other) at ``out[dst[i] : dst[i] + length[i]]``."""
    o = 0
    for i in range(length.size):
        n = length[i]
        out[dst[i] : dst[i] + n] = data[o : o + n]
        o += n


@njit(cache=True)
def copy_runs(out, dst, buf, src, length):
    """``out[dst[i] : dst[i] + length[i]] = buf[src[i] : src[i] + length[i]]`` for every run."""
    for i in range(length.size):
        n = length[i]
        out[dst[i] : dst[i] + n] = buf[src[i] : src[i] + n]
