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


#: installed name -> the folder name import-linter analyses it under (see pyproject.toml)
_ALIASES = {"orchestrator.plugins": "plugins", "orchestrator.workflows": "workflows"}


def _module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path, name=None):
    """Absolute names imported by the module at ``path`` (relative imports resolved), named
    ``name`` (default: from where it is in the tree)."""
    import ast

    name = name or _module_name(path)
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            yield stem
            yield from (f"{stem}.{a.name}" for a in node.names)


def _unaliased(name):
    for alias, folder in _ALIASES.items():
        if name == alias or name.startswith(alias + "."):
            return folder + name[len(alias) :]
    return name


def _within(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _violations(modules):
    """``(contract, module, import)`` for every import by installed name, among
    ``modules`` (``(name, path)`` pairs), that a forbidden contract forbids; and how many
    such imports there were."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
    forbidden = [c for c in contracts if c["type"] == "forbidden"]
    seen, broken = 0, []
    for source, path in modules:
        for imported in _imports(path, source):
            if not _within(imported, _ALIASES):
                continue
            seen += 1
            target = _unaliased(imported)
            for c in forbidden:
                if _within(source, c["source_modules"]) and _within(target, c["forbidden_modules"]):
                    broken.append((c["name"], source, imported))
    return broken, seen


def test_the_forbidden_contracts_hold_for_imports_by_installed_name():
    """import-linter analyses plugins/ and workflows/ under their folder names, so an
    import of ``orchestrator.plugins.x`` (or ``from ..plugins import x``) is invisible to
    it: the same forbidden contracts, checked here on those imports."""
    modules = [
        (_module_name(path), path)
        for top in ("orchestrator", "plugins", "workflows")
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    ]
    broken, seen = _violations(modules)
    assert seen, "no import by installed name found: the scan itself is broken"
    assert not broken, broken


def test_the_installed_name_scan_sees_a_forbidden_import(tmp_path):
    """The scan above, on a kernel and a policy module that import a plugin and a workflow
    by name: both break a contract."""
    path = tmp_path / "probe.py"
    path.write_text("from ..plugins import dask\nimport orchestrator.workflows.bips3d\n")
    broken, seen = _violations(
        [("orchestrator.kernels.probe", path), ("orchestrator.policies.probe", path)]
    )
    assert seen == 6
    assert {(c, m) for c, m, _ in broken} >= {
        ("Kernels import nothing else from the package", "orchestrator.kernels.probe"),
        ("The policies plan without the engine", "orchestrator.policies.probe"),
        (
            "The engine and the policies do not reach the front ends or the workflows",
            "orchestrator.policies.probe",
        ),
    }, broken
