"""Checked policy options: each bad value is an error naming the option and the value."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import PolicyError
from .registry import policies

__all__ = ["bool_option", "float_option", "int_option", "start_option"]


def int_option(options: dict[str, Any], name: str, default: int, low: int = 1) -> int:
    """``options[name]`` (or ``default``) as an integer ``>= low``.

    Examples
    --------
    >>> int_option({"moves": 10}, "moves", 5000)
    10
    """
    v = options.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or not low <= v < 2**62:
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


def start_option(options: dict[str, Any], default: str, own: str) -> str:
    """``options["start"]`` (or ``default``): a policy on whole transfers to start from.

    Examples
    --------
    >>> start_option({"start": "mwm"}, "ecf", "ecf-ls")
    'mwm'
    """
    v = options.get("start", default)
    known = policies()
    p = known.get(v) if isinstance(v, str) else None
    if p is None or p.default_block_size is not None or p.build is not None:
        ok = sorted(q.name for q in known.values() if q.run and q.default_block_size is None)
        raise PolicyError(f"start must be a policy on whole transfers {ok}, got {v!r} ({own})")
    return v
