"""Checkpoint writers copied from public repositories, one module (or package) each.

Every writer module has a header naming the repository, file, commit and licence it was
copied from, the copied code unchanged between ``# fmt: off`` / ``# fmt: on`` markers,
``KIND`` (``"h5py"`` or ``"zarr"``) and ``run(target)``, which builds small deterministic
inputs and calls the writer with ``target``: an open ``h5py.File``, a ``zarr.Group`` or
the object ``orchestrator.capture`` yields.
"""

import importlib
import pkgutil
from types import ModuleType


def names() -> list[str]:
    """The writer modules of this package (those defining ``KIND`` and ``run``), sorted."""
    out = []
    for info in pkgutil.iter_modules(__path__):
        module = load(info.name)
        if hasattr(module, "KIND") and callable(getattr(module, "run", None)):
            out.append(info.name)
    return sorted(out)


def load(name: str) -> ModuleType:
    """The writer module ``name`` of this package."""
    return importlib.import_module(f"{__name__}.{name}")
