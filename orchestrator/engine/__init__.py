"""The execution engine: a pure core that turns a plan into per-I/O-node instructions
(:mod:`~orchestrator.engine.program`, :mod:`~orchestrator.engine.window`) and the
effects that run them on Dask (:mod:`~orchestrator.engine.dispatch` on the stage's
side, :mod:`~orchestrator.engine.worker` on the workers) and commit the result
(:mod:`~orchestrator.engine.commit`)."""

# the function dispatch stays in its module: re-exported here it would shadow the module
from .dispatch import DEFAULT_WINDOW, StageError
from .program import Batch, Cut, NodeProgram, Program, build_program, unit_ranges
from .trace import Trace
from .window import Fetch, Window, Write

__all__ = [
    "DEFAULT_WINDOW",
    "Batch",
    "Cut",
    "Fetch",
    "NodeProgram",
    "Program",
    "StageError",
    "Trace",
    "Window",
    "Write",
    "build_program",
    "unit_ranges",
]
