"""CRC-32 of a byte range from the CRC-32s of its pieces, in any arrival order.

An I/O node receives the pieces of a stripe in plan order, not in byte
order, and checksums each piece as it writes it. The stripe's CRC-32 (the
value ``zlib.crc32`` gives for the whole stripe, so checkpoints written
before still verify) follows from the pieces' CRCs and lengths:
``crc(A + B) = crc(A) * x^(8 len B) mod P  xor  crc(B)`` over GF(2), the
method of zlib's ``crc32_combine`` (zlib >= 1.2.12), which Python's
``zlib`` module does not expose.
"""

import numpy as np
from numba import njit

_POLY = np.uint32(0xEDB88320)  # reflected CRC-32 polynomial


@njit(cache=True)
def _multmodp(a, b):
    """``a * b mod P`` for reflected polynomials (bit 31 is x^0)."""
    m = np.uint32(1) << np.uint32(31)
    p = np.uint32(0)
    while True:
        if a & m:
            p ^= b
            if (a & (m - np.uint32(1))) == 0:
                break
        m >>= np.uint32(1)
        if b & np.uint32(1):
            b = (b >> np.uint32(1)) ^ _POLY
        else:
            b >>= np.uint32(1)
    return p


@njit(cache=True)
def _x2n_table():
    """``x^(2^k) mod P`` for k = 0..63."""
    table = np.empty(64, dtype=np.uint32)
    p = np.uint32(1) << np.uint32(30)  # x^1
    table[0] = p
    for k in range(1, 64):
        p = _multmodp(p, p)
        table[k] = p
    return table


@njit(cache=True)
def _x8nmodp(n, table):
    """``x^(8 n) mod P``: the shift by ``n`` zero bytes."""
    p = np.uint32(1) << np.uint32(31)  # x^0
    k = 3  # 8 n = n << 3
    while n > 0:
        if n & 1:
            p = _multmodp(table[k & 63], p)
        n >>= 1
        k += 1
    return p


@njit(cache=True)
def combine(crc1, crc2, len2):
    """CRC-32 of ``A + B`` from ``crc1 = crc(A)``, ``crc2 = crc(B)`` and ``len2 = len(B)``."""
    table = _x2n_table()
    return _multmodp(_x8nmodp(np.int64(len2), table), np.uint32(crc1)) ^ np.uint32(crc2)


@njit(cache=True)
def fold(crcs, lengths):
    """CRC-32 of the concatenation of pieces given in byte order (``crcs[i]`` of ``lengths[i]``).

    Returns the CRC-32 of the empty string (0) for no pieces.
    """
    table = _x2n_table()
    acc = np.uint32(0)
    for i in range(crcs.size):
        acc = _multmodp(_x8nmodp(np.int64(lengths[i]), table), acc) ^ np.uint32(crcs[i])
    return acc
