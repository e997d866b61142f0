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
