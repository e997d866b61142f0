"""splitmix64: a tiny generator that kernels and Python oracles share exactly."""

import numpy as np
from numba import njit

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True)
def next_u64(state: np.ndarray) -> np.uint64:
    """Advance ``state`` (a 1-element uint64 array) and return the next output."""
    s = state[0] + _GAMMA
    state[0] = s
    z = (s ^ (s >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def below(state: np.ndarray, n: int) -> int:
    """Uniform integer in ``0 .. n-1`` (``n >= 1``) by the multiply-high method."""
    hi = next_u64(state) >> np.uint64(32)
    return int((hi * np.uint64(n)) >> np.uint64(32))


def make_state(seed: int) -> np.ndarray:
    """Generator state for ``seed`` (an int >= 0)."""
    return np.array([seed], dtype=np.uint64)
