"""Every built-in policy and format through the conformance kits of ``orchestrator.testing``,
and a toy policy and format added the way a third party would: one module, one test class."""

import json
import os

import numpy as np
import pytest
from hypothesis import given

import orchestrator as orc
from orchestrator.engine.backends import (
    backend_names,
    format_of,
    register_backend,
    unregister_backend,
)
from orchestrator.engine.storage import Backend, Writer
from orchestrator.files import fsync_tree
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


# ------------------------------------------------------------------ a toy format, from scratch
# What a third party writes to add a format: one Backend (create, writer, finish, read
# back), its Writer, one register_backend call. Nothing else in the package changes: the
# stage, the commit, verify, format_of and open_datasets find it through the registry.


class _RawWriter(Writer):
    """Positioned writes into one raw file per dataset; checksums from the bytes written."""

    def __init__(self, info):
        from orchestrator.engine.storage import PieceChecksums

        self.fds = {n: os.open(f, os.O_WRONLY) for n, f in info["files"].items()}
        self.sums = PieceChecksums(info["stripe_bytes"])

    def put(self, dataset, offset, data):
        os.pwrite(self.fds[dataset], data, offset)
        self.sums.add(dataset, offset, data)

    def add_checksum(self, dataset, offset, nbytes, crc):
        self.sums.add_crc(dataset, offset, nbytes, crc)

    def flush(self):
        for fd in self.fds.values():
            os.fsync(fd)

    def checksums(self):
        return self.sums.result()

    def release(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


class ToyRaw(Backend):
    """A folder of raw row-major files, ``<dataset>.bin``, described by ``raw.json``."""

    name = "toy-raw"
    suffix = ".raw"

    def create(self, tmp, specs, layouts):
        tmp.mkdir()
        meta = {s.name: {"shape": list(s.shape), "dtype": s.dtype.str} for s in specs}
        files = {}
        for spec in specs:
            files[spec.name] = str(tmp / f"{spec.name}.bin")
            with open(files[spec.name], "wb") as f:
                f.truncate(spec.nbytes)
        (tmp / "raw.json").write_text(json.dumps({"datasets": meta}))
        stripes = {s.name: lay.stripe_bytes for s, lay in zip(specs, layouts, strict=True)}
        return {"path": str(tmp), "files": files, "stripe_bytes": stripes}

    def writer(self, info, ionode, aggregate):
        return _RawWriter(info)

    def fill(self, info, spec, rows):
        with open(info["files"][spec.name], "r+b") as f:
            for r in np.asarray(rows).tolist():
                f.seek(r * spec.row_bytes)
                f.write(np.full(spec.row_shape, spec.fill_value, spec.dtype).tobytes())

    def finish(self, tmp, manifest):
        raw = json.loads((tmp / "raw.json").read_text())
        (tmp / "raw.json").write_text(json.dumps({**raw, "manifest": manifest}))
        fsync_tree(tmp)

    def read_manifest(self, path):
        try:
            return json.loads((path / "raw.json").read_text())["manifest"]
        except (OSError, ValueError, KeyError) as err:
            raise orc.StorageError(f"{path}: not a toy-raw checkpoint ({err})") from None

    def read_bytes(self, path, dataset, offset, nbytes):
        with open(path / f"{dataset}.bin", "rb") as f:
            return os.pread(f.fileno(), nbytes, offset)

    def open(self, path):
        meta = json.loads((path / "raw.json").read_text())["datasets"]
        return {
            n: np.memmap(path / f"{n}.bin", dtype=m["dtype"], mode="r", shape=tuple(m["shape"]))
            for n, m in meta.items()
        }

    def guess_can_open(self, path):
        return path.is_dir() and (path / "raw.json").is_file()


@pytest.fixture
def toy_raw():
    register_backend("toy-raw", ToyRaw)
    yield "toy-raw"
    unregister_backend("toy-raw")


class TestToyRaw(BackendTests):
    """The toy format passes the same kit as the built-in ones."""

    format = "toy-raw"

    @pytest.fixture(autouse=True)
    def _registered(self, toy_raw):
        return toy_raw


def test_a_toy_format_runs_a_real_stage(toy_raw, tmp_path):
    """A stage on the cluster through the toy format: rows from several clients, some
    replicated, some never written (fill value); verify and the format's reader agree."""
    spec = orc.DatasetSpec("u", (500, 3), "int32", fill_value=-1)
    rows = np.arange(500)
    want = np.repeat(rows[:, None], 3, axis=1).astype(np.int32)
    want[450:] = -1
    parts = [orc.Contribution(c, rows[c:450:3], want[c:450:3]) for c in range(3)]
    parts.append(orc.Contribution(3, rows[:20], want[:20]))  # replicated rows
    with orc.local_cluster(n_ionodes=2, n_compute=1) as cl:
        res = orc.write_stage(
            tmp_path / "x.raw",
            {"u": (spec, parts)},
            format=toy_raw,
            cluster=cl,
            stripe_bytes=1200,
            unique=True,
            allow_missing=True,
        )
    assert format_of(res.path) == "toy-raw"
    assert orc.verify(res.path) == []
    np.testing.assert_array_equal(ToyRaw().open(res.path)["u"], want)


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
    from orchestrator.engine.backends import backend_ref
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
