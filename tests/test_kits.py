"""Every built-in policy and format through the conformance kits of ``orchestrator.testing``,
and a toy policy and format added the way a third party would: one module, one test class."""

import numpy as np
import pytest
from hypothesis import given

import orchestrator as orc
from orchestrator.engine.storage import (
    backend_names,
    format_of,
    register_backend,
    unregister_backend,
)
from orchestrator.policies import (
    Policy,
    get_policy,
    policies,
    register_policy,
    unregister_policy,
)
from orchestrator.testing import BackendTests, PolicyTests, brute_force_optimum, transfer_sets

# ------------------------------------------------------------------ policies
_OPTIONS = {
    "exact": {"time_limit": 2.0},
    "ecf-ls": {"time_limit": 0.05},
    "auto": {"time_limit": 0.05},
}


def _kit(name):
    return type(
        f"TestPolicy_{name.replace('-', '_')}",
        (PolicyTests,),
        {"policy": name, "options": _OPTIONS.get(name, {})},
    )


try:
    import ortools  # noqa: F401 - the exact policy needs it

    _HAVE_ORTOOLS = True
except ImportError:
    _HAVE_ORTOOLS = False

for _name in policies():
    if _name == "exact" and not _HAVE_ORTOOLS:
        continue
    globals()[f"TestPolicy_{_name.replace('-', '_')}"] = _kit(_name)


def _in_reverse(c, s, d, nc, ns, seed):
    """A toy policy: transfers in reverse index order."""
    return np.arange(c.size - 1, -1, -1, dtype=np.int64), 0, 0


TOY = Policy(
    name="toy-reverse",
    summary="Transfers in reverse index order.",
    origin="tests/test_kits.py",
    kind="centralized",
    run=_in_reverse,
)


class TestToyPolicy(PolicyTests):
    """A policy added from outside, checked by the kit like any other (registered for this
    class only: other tests list every registered policy)."""

    policy = "toy-reverse"

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _registered(cls):
        register_policy(TOY, replace=True)
        yield
        unregister_policy("toy-reverse")

    def optimum(self, ts):
        return brute_force_optimum(ts, self.cost) if len(ts) <= 6 else None


def test_a_bad_policy_is_refused_at_registration():
    with pytest.raises(orc.PolicyError, match="kind"):
        register_policy(Policy(name="bad", summary="", origin="", kind="psychic", run=_in_reverse))
    with pytest.raises(orc.PolicyError, match="exactly one of run and build"):
        register_policy(Policy(name="bad", summary="", origin="", kind="centralized"))
    with pytest.raises(orc.PolicyError, match="registered already"):
        register_policy(get_policy("ecf"))
    with pytest.raises(orc.PolicyError, match="unknown candidates"):
        register_policy(
            Policy(
                name="bad",
                summary="",
                origin="",
                kind="centralized",
                run=_in_reverse,
                candidates=("no-such",),
            )
        )
    assert "bad" not in policies()


def test_brute_force_optimum_is_what_the_exact_policy_finds():
    pytest.importorskip("ortools")
    ts = orc.TransferSet([0, 0, 1, 1, 2], [0, 1, 0, 1, 1], [3, 1, 2, 2, 4])
    plan = orc.schedule(ts, "exact", cost=PolicyTests.cost)
    assert plan.makespan == brute_force_optimum(ts, PolicyTests.cost)


# ------------------------------------------------------------------ formats
class TestHDF5(BackendTests):
    format = "hdf5"


class TestHDF5Subfiles(BackendTests):
    format = "hdf5-vds"


class TestHDF5Chunked(BackendTests):
    format = "hdf5-chunked"


class TestZarr(BackendTests):
    format = "zarr"


def test_a_format_registered_from_outside_is_written_and_recognised(tmp_path):
    """A third party's format: here HDF5's backend under another name (its manifest names
    it, so the target is recognised as the new format)."""
    from plugins.hdf5 import HDF5Backend

    class Renamed(HDF5Backend):
        name = "hdf5-renamed"

    register_backend("hdf5-renamed", Renamed)
    try:
        assert "hdf5-renamed" in backend_names()
        spec = orc.DatasetSpec("u", (100, 2), "float64")
        con = orc.Contribution(0, np.arange(100), np.ones((100, 2)))
        with orc.local_cluster(n_ionodes=1, n_compute=0) as cl:
            res = orc.write_stage(
                tmp_path / "x.h5", {"u": (spec, [con])}, format="hdf5-renamed", cluster=cl
            )
        assert format_of(res.path) == "hdf5-renamed"
        assert orc.verify(res.path) == []
    finally:
        unregister_backend("hdf5-renamed")
    with pytest.raises(orc.StorageError, match="unknown format"):
        orc.write_stage(tmp_path / "y.h5", {}, format="hdf5-renamed")


def test_format_of_refuses_what_no_format_recognises(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(orc.StorageError, match="not a checkpoint in any known format"):
        format_of(tmp_path / "notes.txt")
    (tmp_path / "folder").mkdir()
    with pytest.raises(orc.StorageError, match="not a checkpoint"):
        orc.verify(tmp_path / "folder")


@given(transfer_sets(max_clients=2, max_ionodes=2, max_transfers=3))
def test_transfer_sets_stay_within_their_bounds(ts):
    assert 1 <= len(ts) <= 3 and ts.n_clients <= 2 and ts.n_ionodes <= 2
    assert (ts.nbytes >= 1).all() and (ts.client < ts.n_clients).all()


def test_format_of_survives_hostile_targets_and_broken_plugins(tmp_path):
    """A FIFO is refused without opening it (opening would block); a manifest that is not a
    mapping, or names a format whose shape the target does not have, does not decide; a
    format whose module cannot be imported is passed over."""
    import json
    import os

    import h5py

    from plugins.hdf5 import MANIFEST_ATTR

    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)
    with pytest.raises(orc.StorageError, match="neither a file nor a folder"):
        format_of(fifo)
    odd = tmp_path / "odd.h5"
    for manifest in ([1, 2], {"format": "zarr"}):
        with h5py.File(odd, "w") as f:
            f.attrs[MANIFEST_ATTR] = json.dumps(manifest)
        assert format_of(odd) == "hdf5"
    register_backend("broken", "no_such_module_anywhere:Backend")
    try:
        assert format_of(odd) == "hdf5"
    finally:
        unregister_backend("broken")


def test_a_format_registered_by_module_path_reaches_workers_as_its_class():
    from orchestrator.engine.storage import backend_ref
    from plugins.hdf5 import HDF5Backend

    assert backend_ref("hdf5") == "hdf5"  # every process finds the built-ins by name
    register_backend("hdf5-by-path", "orchestrator.plugins.hdf5:HDF5Backend")
    try:
        assert backend_ref("hdf5-by-path").__name__ == HDF5Backend.__name__
    finally:
        unregister_backend("hdf5-by-path")
    register_backend("hdf5", "orchestrator.plugins.hdf5:HDF5SubfileBackend", replace=True)
    try:  # a built-in name replaced here must not be sent as the name
        assert backend_ref("hdf5").__name__ == "HDF5SubfileBackend"
    finally:
        register_backend("hdf5", "orchestrator.plugins.hdf5:HDF5Backend", replace=True)
    assert backend_ref("hdf5") == "hdf5"
