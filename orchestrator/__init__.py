"""io-orchestrator: schedule and execute the output stages of scientific workflows.

The scheduling core: describe a stage's data movement as a
:class:`TransferSet`, pick a :class:`CostModel`, and :func:`schedule` it with a
policy into a :class:`Plan`; :func:`simulate` evaluates a policy. For
partitioned meshes, :func:`replica_sets` and :func:`assign` choose one writer
per replicated row (Interval Data Grouping), :func:`interval_stats` measures
the result. Workflows meet the framework through :func:`output_stage` (a
decorator for plain functions, Dask tasks and Parsl apps), :func:`capture`
(h5py/zarr-style writes recorded) and :func:`open_checkpoint` /
:func:`latest_checkpoint` (restart).

Examples
--------
>>> import orchestrator as orc
>>> ts = orc.TransferSet(client=[0, 0, 1, 1], ionode=[0, 1, 1, 2], nbytes=[30, 10, 10, 20])
>>> orc.schedule(ts, "ecf", cost=orc.CostModel(1.0, 1.0)).makespan
40.0
"""

import importlib
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contributions import Contribution, DatasetSpec
    from .cost import PRESETS, CostModel, get_cost_model
    from .engine.backends import backend_names, register_backend, unregister_backend
    from .engine.cluster import IOCluster, connect, local_cluster
    from .engine.readstage import ReadResult, read_stage
    from .engine.stage import StageResult, WriteOptions, write_stage
    from .engine.storage import Backend
    from .engine.verify import open_datasets, verify
    from .errors import (
        CaptureError,
        CaptureKeyError,
        CaptureUnsupported,
        CheckpointError,
        ClusterError,
        ContributionError,
        CostModelError,
        DumpError,
        ExactUnavailable,
        InputError,
        LayoutError,
        MeshFormatError,
        OrchestratorError,
        PlanError,
        PolicyError,
        ReplicaError,
        SignatureError,
        SlurmError,
        SlurmUnreachable,
        StageAborted,
        StageError,
        StorageError,
        TestbedError,
        TestbedUnavailable,
        TransferSetError,
        WalkError,
        WalkStopped,
    )
    from .frontends.capturing import capture
    from .frontends.checkpoint import Checkpoint, latest_checkpoint, open_checkpoint
    from .frontends.intercept import OutputStage, output_stage, set_default_cluster
    from .frontends.restart import InputStage, input_stage
    from .plan import Plan, Units, lower_bound
    from .policies import Policy, policies, register_policy, schedule, unregister_policy
    from .reads import ReadSet, ReadSimulation, order_reads, shuffle_cost, simulate_reads
    from .replicas import IntervalStats, ReplicaSets, assign, interval_stats, replica_sets
    from .simulate import Simulation, simulate
    from .transfers import TransferSet
    from .treewalk import WalkResult, read_index, walk

# The public names load on first use (PEP 562): a worker process that only
# unpickles an engine task (an I/O worker writing its batches) then imports
# what that task needs, not the scheduling kernels, Numba and SciPy (about
# 50 MB of resident memory per worker).
_LAZY = {
    "frontends.capturing": ("capture",),
    "frontends.checkpoint": ("Checkpoint", "latest_checkpoint", "open_checkpoint"),
    "engine.cluster": ("IOCluster", "connect", "local_cluster"),
    "contributions": ("Contribution", "DatasetSpec"),
    "cost": ("PRESETS", "CostModel", "get_cost_model"),
    "errors": (
        "CaptureError",
        "CaptureKeyError",
        "CaptureUnsupported",
        "CheckpointError",
        "ClusterError",
        "ContributionError",
        "CostModelError",
        "DumpError",
        "ExactUnavailable",
        "InputError",
        "LayoutError",
        "MeshFormatError",
        "OrchestratorError",
        "PlanError",
        "PolicyError",
        "ReplicaError",
        "SignatureError",
        "SlurmError",
        "SlurmUnreachable",
        "StageAborted",
        "StageError",
        "StorageError",
        "TestbedError",
        "TestbedUnavailable",
        "TransferSetError",
        "WalkError",
        "WalkStopped",
    ),
    "frontends.intercept": ("OutputStage", "output_stage", "set_default_cluster"),
    "frontends.restart": ("InputStage", "input_stage"),
    "engine.readstage": ("ReadResult", "read_stage"),
    "plan": ("Plan", "Units", "lower_bound"),
    "policies": ("Policy", "policies", "register_policy", "schedule", "unregister_policy"),
    "engine.storage": ("Backend",),
    "engine.backends": ("backend_names", "register_backend", "unregister_backend"),
    "replicas": ("IntervalStats", "ReplicaSets", "assign", "interval_stats", "replica_sets"),
    "simulate": ("Simulation", "simulate"),
    "reads": ("ReadSet", "ReadSimulation", "order_reads", "shuffle_cost", "simulate_reads"),
    "engine.stage": ("StageResult", "WriteOptions", "write_stage"),
    "engine.verify": ("open_datasets", "verify"),
    "transfers": ("TransferSet",),
    "treewalk": ("WalkResult", "read_index", "walk"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


class _Package(types.ModuleType):
    """``orchestrator.policies`` and ``orchestrator.simulate`` are functions, named like
    their modules: importing a submodule must not rebind the package attribute to it
    (the import system sets it; eagerly imported, the function used to win)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _WHERE and isinstance(value, types.ModuleType):
            return  # the module stays in sys.modules; the name keeps meaning the function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


logging.getLogger("orchestrator").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "Backend",
    "CaptureError",
    "CaptureKeyError",
    "CaptureUnsupported",
    "Checkpoint",
    "CheckpointError",
    "ClusterError",
    "Contribution",
    "ContributionError",
    "CostModel",
    "CostModelError",
    "DatasetSpec",
    "DumpError",
    "ExactUnavailable",
    "IOCluster",
    "InputError",
    "InputStage",
    "IntervalStats",
    "LayoutError",
    "MeshFormatError",
    "OrchestratorError",
    "OutputStage",
    "Plan",
    "PlanError",
    "Policy",
    "PolicyError",
    "ReadResult",
    "ReadSet",
    "ReadSimulation",
    "ReplicaError",
    "ReplicaSets",
    "SignatureError",
    "Simulation",
    "SlurmError",
    "SlurmUnreachable",
    "StageAborted",
    "StageError",
    "StageResult",
    "StorageError",
    "TestbedError",
    "TestbedUnavailable",
    "TransferSet",
    "TransferSetError",
    "Units",
    "WalkError",
    "WalkResult",
    "WalkStopped",
    "WriteOptions",
    "__version__",
    "assign",
    "backend_names",
    "capture",
    "connect",
    "get_cost_model",
    "input_stage",
    "interval_stats",
    "latest_checkpoint",
    "local_cluster",
    "lower_bound",
    "open_checkpoint",
    "open_datasets",
    "order_reads",
    "output_stage",
    "policies",
    "read_index",
    "read_stage",
    "register_backend",
    "register_policy",
    "replica_sets",
    "schedule",
    "set_default_cluster",
    "shuffle_cost",
    "simulate",
    "simulate_reads",
    "unregister_backend",
    "unregister_policy",
    "verify",
    "walk",
    "write_stage",
]
