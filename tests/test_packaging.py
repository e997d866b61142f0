"""The wheel ships every package of the source tree (an editable install hides a missing one)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _declared():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return conf["packages"], conf["package-dir"]


def test_every_package_folder_is_declared_and_every_declared_package_exists():
    packages, where = _declared()
    folders = {}
    for name, rel in where.items():
        assert (ROOT / rel / "__init__.py").is_file(), (name, rel)
        folders[(ROOT / rel).resolve()] = name
    assert set(packages) == set(where), set(packages) ^ set(where)
    # every folder with an __init__.py below a declared package is itself declared
    # (orchestrator.frontends was not: a wheel had no orchestrator.frontends at all)
    for top in ("orchestrator", "plugins", "workflows"):
        for init in (ROOT / top).rglob("__init__.py"):
            folder = init.parent.resolve()
            if "__pycache__" in folder.parts:
                continue
            assert folder in folders, f"{folder.relative_to(ROOT)} is not in pyproject's packages"


def test_the_layer_contracts_name_every_module_of_the_package():
    """A module added to ``orchestrator/`` is seen by the contracts that list sources: a
    new module missing from "nothing imports the command line" could import it unseen."""
    contracts = {
        c["name"]: c
        for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
            "contracts"
        ]
    }
    modules = {
        f"orchestrator.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "orchestrator").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    for name, exempt in (
        ("Nothing imports the command line", {"orchestrator.cli", "orchestrator.slurmcli"}),
        (
            "Only the command line imports the benchmarks",
            {"orchestrator.cli", "orchestrator.bench", "orchestrator.slurmcli"},
        ),
    ):
        listed = set(contracts[name]["source_modules"])
        assert modules - exempt <= listed, (name, sorted(modules - exempt - listed))
    kernels = set(contracts["Kernels import nothing else from the package"]["forbidden_modules"])
    assert modules - {"orchestrator.kernels"} <= kernels, sorted(modules - kernels)
