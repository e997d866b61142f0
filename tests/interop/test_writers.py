"""Public checkpoint writers, run against h5py / zarr-python and against ``capture``.

``test_reference_*`` runs each writer of :mod:`.writers` against a real ``h5py.File``
(or ``zarr.open_group``) and checks that it succeeds and writes the same thing twice.

``test_capture_matches`` runs the same writer inside ``orchestrator.capture(path)`` and
requires the committed checkpoint to describe exactly as the reference file does
(:func:`.compare.diff` with its default ``ignore``: the orchestrator's manifest attribute
and netCDF dimension helpers).  It reports every difference, first ones first.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import h5py
import pytest
import zarr

import orchestrator

from . import writers
from .compare import MANIFEST_ATTR, describe_h5, describe_zarr, diff

WRITERS = writers.names()

# The copied writers were written against older h5py / zarr-python; two of them make the
# current ones warn (and the project turns warnings into errors).  Only these two:
pytestmark = [
    # clodius: create_dataset(name, shape, compression="gzip") without a dtype (h5py 3.16)
    pytest.mark.filterwarnings(
        "ignore:Creating a dataset without passing data or dtype is deprecated"
        ":h5py.h5py_warnings.H5pyDeprecationWarning"
    ),
    # py-modelrunner: fixed-length unicode and structured arrays in Zarr format 3
    pytest.mark.filterwarnings(
        "ignore:The data type .* does not have a Zarr V3 specification"
        ":zarr.errors.UnstableSpecificationWarning"
    ),
]
FORMATS = {"h5py": "hdf5", "zarr": "zarr"}  # a writer's KIND -> capture(format=...)
SUFFIX = {"h5py": ".h5", "zarr": ".zarr"}


def write_reference(module: Any, path: Path) -> dict[str, Any]:
    """Run ``module`` against a real h5py file / zarr group at ``path``; its description."""
    if module.KIND == "h5py":
        with h5py.File(path, "w") as f:
            module.run(f)
        return describe_h5(path)
    module.run(zarr.open_group(path, mode="w"))
    return describe_zarr(path)


def write_captured(module: Any, path: Path) -> dict[str, Any]:
    """Run ``module`` inside ``orchestrator.capture(path)``; the committed checkpoint's description."""
    with orchestrator.capture(path, format=FORMATS[module.KIND]) as f:
        module.run(f)
    return describe_h5(path) if module.KIND == "h5py" else describe_zarr(path)


def test_reference_inventory() -> None:
    """At least ten writers, from at least six repositories, two of them zarr-python;
    each names its source (``# Source: owner/name -- path @ commit``) in its header."""
    kinds = [writers.load(n).KIND for n in WRITERS]
    assert len(WRITERS) >= 10, WRITERS
    assert kinds.count("zarr") >= 2, dict(zip(WRITERS, kinds, strict=True))
    repos = set()
    for name in WRITERS:
        header = Path(writers.load(name).__file__).read_text().splitlines()[:3]
        found = [re.match(r"# Source: (\S+/\S+) -- \S+ @ [0-9a-f]{40}$", line) for line in header]
        assert any(found), f"{name}: no '# Source:' line in its header"
        repos |= {m.group(1) for m in found if m}
    assert len(repos) >= 6, repos


def test_reference_diff_sees_differences(tmp_path: Path) -> None:
    """compare.diff is not blind: values, attribute dtypes, layout and scales all show;
    the manifest attribute and netCDF dimension helpers are ignored by default."""
    import numpy as np

    def write(path: Path, variant: bool) -> dict[str, Any]:
        with h5py.File(path, "w") as f:
            x = f.create_dataset("x", data=np.arange(4.0))
            x.make_scale("x")
            nc = f.create_dataset("n", data=np.zeros(4))
            nc.make_scale("This is a netCDF dimension but not a netCDF variable.         4")
            u = f.create_dataset("g/u", data=np.arange(4.0) * (2 if variant else 1), chunks=True)
            u.dims[0].attach_scale(x)
            u.dims[0].attach_scale(nc)
            u.attrs["step"] = np.int32(3) if variant else np.int64(3)
            if variant:
                f.attrs["io_orchestrator_manifest"] = "{}"
                f.create_dataset("m", data=np.zeros(4)).make_scale(
                    "This is a netCDF dimension but not a netCDF variable.         4"
                )
        return describe_h5(path)

    a, b = write(tmp_path / "a.h5", False), write(tmp_path / "b.h5", True)
    assert diff(a, a) == []
    problems = diff(a, b)
    assert any("/g/u: values differ at [1]" in p for p in problems), problems
    assert any("attribute 'step' dtype '<i8'" in p for p in problems), problems
    assert not any("manifest" in p or p.startswith("/m:") for p in problems), problems
    assert len(problems) == 2, problems
    assert len(diff(a, b, ignore=())) > 2


@pytest.mark.parametrize("name", WRITERS)
def test_reference_run(name: str, tmp_path: Path) -> None:
    """The writer runs against h5py / zarr-python, writes something, and deterministically."""
    module = writers.load(name)
    suffix = SUFFIX[module.KIND]
    first = write_reference(module, tmp_path / f"ref{suffix}")
    assert first["datasets"], f"{name} wrote no dataset"
    again = write_reference(module, tmp_path / f"again{suffix}")
    assert diff(first, again, ignore=(), labels=("run 1", "run 2")) == []


@pytest.mark.parametrize("name", WRITERS)
def test_capture_matches(name: str, tmp_path: Path) -> None:
    """The writer inside ``orchestrator.capture`` commits what it writes with h5py / zarr."""
    module = writers.load(name)
    suffix = SUFFIX[module.KIND]
    ref = write_reference(module, tmp_path / f"ref{suffix}")
    ours = write_captured(module, tmp_path / f"ours{suffix}")
    # only our manifest attribute is ignored: a capture adds no dimension scales of its own
    problems = diff(ref, ours, ignore=(MANIFEST_ATTR,), labels=(module.KIND, "capture"))
    assert not problems, f"{len(problems)} difference(s):\n" + "\n".join(problems[:60])
