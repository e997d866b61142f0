"""Checked policy options: each bad value is an error naming the option and the value.

A policy declares its options as :class:`~orchestrator.policies.PolicyOption`
values (kind, default, meaning, in :mod:`.registry`);
:func:`~orchestrator.policies.schedule`, the write options of a stage and the
``iorch`` command line all check and parse them from that one declaration, with
these functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..checks import is_int
from ..errors import PolicyError

__all__ = ["bool_option", "float_option", "int_option"]


def int_option(options: dict[str, Any], name: str, default: int, low: int = 1) -> int:
    """``options[name]`` (or ``default``) as an integer ``>= low``.

    Examples
    --------
    >>> int_option({"moves": 10}, "moves", 5000)
    10
    """
    v = options.get(name, default)
    if not is_int(v, low, 2**62):
        raise PolicyError(f"{name} must be an integer >= {low}, got {v!r}")
    return int(v)


def float_option(options: dict[str, Any], name: str, default: float) -> float:
    """``options[name]`` (or ``default``) as a finite number ``> 0``.

    Examples
    --------
    >>> float_option({}, "time_limit", 1.0)
    1.0
    """
    v = options.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise PolicyError(f"{name} must be a number > 0, got {v!r}")
    if not (np.isfinite(v) and v > 0):
        raise PolicyError(f"{name} must be a number > 0, got {v!r}")
    return float(v)


def bool_option(options: dict[str, Any], name: str, default: bool) -> bool:
    """``options[name]`` (or ``default``), which must be a boolean.

    Examples
    --------
    >>> bool_option({"split": False}, "split", True)
    False
    """
    v = options.get(name, default)
    if not isinstance(v, bool | np.bool_):
        raise PolicyError(f"{name} must be True or False, got {v!r}")
    return bool(v)
