"""What counts as a whole number in user input: one predicate for every front door.

A shape, a client id, a window, a seed: each arrives from a user as any
Python value. ``int()`` would truncate ``10.7`` and ``True`` is an ``int``
to Python, so every check of an integer input goes through :func:`is_int`.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import numpy as np

__all__ = ["is_int"]


def is_int(value: Any, low: int | None = None, high: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is an integer (Python or NumPy, never a bool) in ``[low, high)``.

    Either bound may be omitted.

    Examples
    --------
    >>> is_int(3, 1, 10), is_int(np.int8(-1)), is_int(-1, 0)
    (True, True, False)
    >>> is_int(True), is_int(2.0), is_int("3"), is_int(2**63, 0, 2**63)
    (False, False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return False
    return bool((low is None or value >= low) and (high is None or value < high))
