"""What a policy or a storage format must pass, and the oracles the kernels are checked against.

- :mod:`.kits` — :class:`PolicyTests` and :class:`BackendTests`, conformance
  tests to subclass (needs ``pytest`` and ``hypothesis``), with
  :func:`transfer_sets` and :func:`brute_force_optimum`;
- :mod:`.oracles` — slow, obvious pure-Python versions of every scheduling
  kernel (ECF, MWM, the bidding and decentralized policies, split-opt, the
  local search, an exact optimum by enumeration), written from the papers;
  the tests compare the kernels with them, and ``iorch bench schedulers``
  times them beside the kernels.

The kits are imported on first use, so the oracles need neither pytest nor
hypothesis.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BackendTests", "PolicyTests", "brute_force_optimum", "transfer_sets"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".kits", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
