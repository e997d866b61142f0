"""Every error io-orchestrator raises on purpose, under one base.

:class:`OrchestratorError` is the base; an error about a value the user gave
also derives from :class:`ValueError` (:class:`InputError`), and errors of
the outside world keep the builtin class they had (``RuntimeError``), the
way zarr-python's ``zarr.errors`` does. So ``except OrchestratorError``
catches everything the library means to raise, and code that caught
``ValueError`` before still does.

The ``iorch`` command reports an :class:`OrchestratorError` in one line and
exits with 2; anything else is a bug: its traceback is shown and the exit
code is 1.

Each module that raises one of these re-exports it under its old name
(``orchestrator.policies.PolicyError`` is this module's ``PolicyError``).
"""

from __future__ import annotations

__all__ = [
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
]


class OrchestratorError(Exception):
    """Base of every error io-orchestrator raises on purpose.

    Examples
    --------
    >>> from orchestrator.errors import OrchestratorError, PolicyError
    >>> issubclass(PolicyError, OrchestratorError) and issubclass(PolicyError, ValueError)
    True
    """


class InputError(OrchestratorError, ValueError):
    """A value the user gave is invalid; the message names the field and the value."""


class ContributionError(InputError):
    """Contributions are inconsistent (rows out of range, missing, duplicated, bad shapes)."""


class CaptureError(ContributionError):
    """A captured writer did something a checkpoint cannot take (or is not supported yet)."""


class CaptureUnsupported(CaptureError, AttributeError):
    """An h5py or zarr-python method or attribute a capture does not have, by name.

    Also an ``AttributeError``, so ``hasattr`` and ``getattr(obj, name, default)``
    in the user's code keep working.
    """


class CaptureKeyError(CaptureError, KeyError):
    """A capture has no member of that name; a ``KeyError``, as h5py and zarr-python raise."""

    def __str__(self) -> str:  # KeyError's own shows the message quoted
        return str(self.args[0]) if self.args else ""


class SignatureError(InputError, TypeError):
    """A decorated function or a front end's call does not fit the stage (no step or
    client parameter, no client count); a ``TypeError`` as Python's own call errors are."""


class PolicyError(InputError):
    """An unknown policy, or an invalid policy option."""


class CostModelError(InputError):
    """A cost-model field has an invalid value, or a preset name is unknown."""


class PlanError(InputError):
    """A plan violates an invariant (raised by :meth:`~orchestrator.plan.Plan.validate`).

    A user's error when the plan came from the user; a bug when a policy built it (the
    tests check every policy's plans).
    """


class LayoutError(InputError):
    """An invalid stripe layout (stripe size, I/O node count)."""


class TransferSetError(InputError):
    """A TransferSet was given invalid columns; the message names the column and index.

    ``index`` is the offending row (``None`` when the error is not about one row).
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ReplicaError(InputError):
    """Replica sets or assignments are inconsistent."""


class SlurmError(InputError):
    """A Slurm option, host list or allocation is invalid, or Slurm refused a request."""


class SlurmUnreachable(SlurmError):
    """Slurm's commands are missing here, or cannot reach a controller."""


class MeshFormatError(InputError):
    """A mesh or partition file cannot be read."""


class StorageError(OrchestratorError, RuntimeError):
    """A target could not be created, written, committed or verified."""


class CheckpointError(StorageError):
    """A checkpoint cannot be opened or read back."""


class ClusterError(OrchestratorError, RuntimeError):
    """No usable cluster: no I/O workers found, a worker missing, a bad address."""


class TestbedError(OrchestratorError, RuntimeError):
    """The emulated cluster could not be built, reached or removed (the command and its error)."""


class TestbedUnavailable(TestbedError):
    """This machine cannot host a testbed (not root, no ``ip``/``tc``, namespaces refused)."""


class StageError(OrchestratorError, RuntimeError):
    """A stage could not complete; its temporary output has been removed."""


class StageAborted(StageError):
    """The stage was aborted while an I/O worker was writing it (told to stop, or closing)."""


class ExactUnavailable(OrchestratorError, ImportError):
    """The ``exact`` policy needs OR-Tools (the optional extra ``[exact]``)."""


class DumpError(OrchestratorError, RuntimeError):
    """A workflow's dump failed its own checks (a dumped file differs from what was written)."""


class WalkError(OrchestratorError, RuntimeError):
    """A distributed walk could not complete (a walker's worker died, the walk was stopped)."""


class WalkStopped(WalkError):
    """A walker was told to stop by its walk's driver (a peer's worker died, Ctrl-C)."""
