"""The execution engine: a pure core that turns a plan into per-I/O-node instructions
(:mod:`~orchestrator.engine.program`, :mod:`~orchestrator.engine.window`) and the
effects that run them on Dask (:mod:`~orchestrator.engine.dispatch` on the stage's
side, :mod:`~orchestrator.engine.worker` on the workers) and commit the result
(:mod:`~orchestrator.engine.commit`). A stage end to end is
:mod:`~orchestrator.engine.stage`; reading a committed one back,
:mod:`~orchestrator.engine.verify`."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dispatch import StageError
    from .options import DEFAULT_WINDOW, WriteOptions
    from .program import (
        Batch,
        Cut,
        NodeProgram,
        Program,
        StripeGroup,
        build_program,
        stripe_groups,
        unit_ranges,
    )
    from .trace import Trace
    from .window import Fetch, Window, Write

# loaded on first use: an I/O worker unpickling engine.worker.run_ionode must not
# import dispatch (and through it the plan and the scheduling kernels). The
# function dispatch stays in its module: re-exported here it would shadow it.
_WHERE = {
    "DEFAULT_WINDOW": "options",
    "WriteOptions": "options",
    "StageError": "dispatch",
    "Batch": "program",
    "Cut": "program",
    "NodeProgram": "program",
    "Program": "program",
    "StripeGroup": "program",
    "build_program": "program",
    "stripe_groups": "program",
    "unit_ranges": "program",
    "Trace": "trace",
    "Fetch": "window",
    "Window": "window",
    "Write": "window",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "DEFAULT_WINDOW",
    "Batch",
    "Cut",
    "Fetch",
    "NodeProgram",
    "Program",
    "StageError",
    "StripeGroup",
    "Trace",
    "Window",
    "Write",
    "WriteOptions",
    "build_program",
    "stripe_groups",
    "unit_ranges",
]
