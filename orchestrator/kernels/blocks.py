"""Cutting transfers into fixed-size pieces for the block-splitting policies."""

import numpy as np
from numba import njit


@njit(cache=True)
def split_pieces(nbytes, block_size):
    """Pieces of ``block_size`` bytes in (transfer, offset) order: (parent, offset, piece_bytes)."""
    n = nbytes.size
    total = 0
    for i in range(n):
        total += (nbytes[i] - 1) // block_size + 1  # ceil without overflow
    parent = np.empty(total, dtype=np.int64)
    offset = np.empty(total, dtype=np.int64)
    size = np.empty(total, dtype=np.int64)
    k = 0
    for i in range(n):
        off = 0
        while off < nbytes[i]:
            parent[k] = i
            offset[k] = off
            size[k] = min(block_size, nbytes[i] - off)
            off += block_size
            k += 1
    return parent, offset, size
