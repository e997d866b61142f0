"""One error hierarchy: every error the package raises on purpose is in orchestrator.errors."""

import ast
import importlib
from pathlib import Path

import pytest

from orchestrator import errors

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_derives_from_the_base(name):
    cls = getattr(errors, name)
    assert issubclass(cls, errors.OrchestratorError)
    if issubclass(cls, errors.InputError):  # user errors are also ValueErrors
        assert issubclass(cls, ValueError)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("orchestrator.contributions", "ContributionError"),
        ("orchestrator.engine.storage", "StorageError"),
        ("orchestrator.engine.cluster", "ClusterError"),
        ("orchestrator.engine.dispatch", "StageError"),
        ("orchestrator.policies", "PolicyError"),
        ("orchestrator.frontends.capturing", "CaptureError"),
        ("orchestrator.cost", "CostModelError"),
        ("orchestrator.plan", "PlanError"),
        ("orchestrator.frontends.checkpoint", "CheckpointError"),
        ("orchestrator.layout", "LayoutError"),
        ("orchestrator.transfers", "TransferSetError"),
        ("orchestrator.replicas", "ReplicaError"),
        ("orchestrator.plugins.slurm", "SlurmError"),
        ("workflows.mesh", "MeshFormatError"),
        ("workflows.bips3d", "DumpError"),
        ("orchestrator", "PlanError"),
    ],
)
def test_old_names_are_the_same_classes(module, name):
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_no_other_module_defines_an_exception_class():
    """An error class outside errors.py would be outside the hierarchy's one place."""
    found = []
    for folder in ("orchestrator", "plugins", "workflows"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "errors.py" and path.parent.name == "orchestrator":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exception"))
                    for b in node.bases
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert found == []


def test_a_plan_error_is_a_user_error_not_an_assertion():
    assert not issubclass(errors.PlanError, AssertionError)
    assert issubclass(errors.PlanError, ValueError)


def test_the_public_api_resolves_every_name():
    import orchestrator as orc

    for name in orc.__all__:
        assert getattr(orc, name) is not None, name
    assert callable(orc.policies) and callable(orc.simulate)  # functions, not the modules
    assert orc.write_stage.__module__ == "orchestrator.engine.stage"


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_is_public_and_documented(name):
    """A user catches ``orc.StageAborted`` as any other error: every one is a top-level
    name and has its entry in the API reference."""
    import orchestrator as orc

    assert getattr(orc, name) is getattr(errors, name)
    assert f"autoexception:: orchestrator.errors.{name}\n" in (ROOT / "docs/api.rst").read_text()


def test_a_function_that_cannot_be_a_stage_is_refused_with_our_error():
    import orchestrator as orc

    def save(step, data):  # no parameter naming the client
        return data

    with pytest.raises(orc.SignatureError, match="no parameter telling which client") as err:
        orc.output_stage(save, target="x.h5", clients=2)
    assert isinstance(err.value, TypeError)  # as Python's own call errors are
