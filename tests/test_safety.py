"""Nothing lost, nothing let in: what a stage may replace, name, follow or render.

Each test here failed before its fix (issue 14, items 4, 5, 7 and 9).
"""

import json
import os
import re

import numpy as np
import pytest

import orchestrator as orc
from orchestrator.contributions import Contribution, ContributionError, DatasetSpec
from orchestrator.engine.cluster import local_cluster
from orchestrator.engine.measure import raw_write_bandwidth
from orchestrator.errors import InputError, StorageError
from orchestrator.files import atomic_path
from orchestrator.frontends.intercept import StageOptions

FORMATS = ["hdf5", "hdf5-vds", "zarr"]
SUFFIX = {"hdf5": ".h5", "hdf5-vds": ".h5", "zarr": ".zarr"}


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=2, n_compute=2) as cl:
        orc.set_default_cluster(cl)
        yield cl
        orc.set_default_cluster(None)


def _one(name="u", n=10):
    spec = DatasetSpec(name, (n,), "float64")
    return {name: (spec, [Contribution(0, np.arange(n), np.arange(n, dtype=float))])}


# ---------------------------------------------------------------- 4: overwrite replaces checkpoints only
@pytest.mark.parametrize("fmt", FORMATS)
def test_overwrite_never_replaces_what_is_not_a_checkpoint(cluster, tmp_path, fmt):
    folder = tmp_path / f"results{SUFFIX[fmt]}"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    plain = tmp_path / f"plain{SUFFIX[fmt]}"
    plain.write_text("not a checkpoint")
    for target in (folder, plain):
        with pytest.raises(StorageError, match="is not a checkpoint") as err:
            orc.write_stage(target, _one(), format=fmt, cluster=cluster, overwrite=True)
        assert str(target) in str(err.value)
    assert (folder / "notes.txt").read_text() == "mine"
    assert plain.read_text() == "not a checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([folder.name, plain.name])


@pytest.mark.parametrize("shape", ["master.h5", "zarr.json"])
def test_overwrite_never_replaces_a_folder_that_only_looks_like_a_checkpoint(
    cluster, tmp_path, shape
):
    """A folder of the user's files holding a ``master.h5`` or a ``zarr.json`` (even an
    HDF5 file or Zarr metadata of someone else's) was replaced (hostile probe)."""
    import h5py

    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "thesis.tex").write_text("mine")
    if shape == "master.h5":
        with h5py.File(folder / shape, "w") as f:
            f["x"] = np.arange(3)
        fmt = "hdf5-vds"
    else:
        (folder / shape).write_text('{"zarr_format": 3, "node_type": "group"}')
        fmt = "zarr"
    with pytest.raises(StorageError, match="is not a checkpoint"):
        orc.write_stage(folder, _one(), format=fmt, cluster=cluster, overwrite=True)
    assert (folder / "thesis.tex").read_text() == "mine"


@pytest.mark.parametrize("fmt", FORMATS)
def test_overwrite_replaces_a_checkpoint_of_the_same_or_another_format(cluster, tmp_path, fmt):
    target = tmp_path / f"ck{SUFFIX[fmt]}"
    orc.write_stage(target, _one(), format=fmt, cluster=cluster)
    orc.write_stage(target, _one("v"), format=fmt, cluster=cluster, overwrite=True)
    assert list(orc.open_checkpoint(target)) == ["v"] and orc.verify(target) == []


# ---------------------------------------------------------------- 5: names that commit must verify
@pytest.mark.parametrize("fmt", FORMATS)
def test_dataset_names_with_a_colon_commit_and_verify(cluster, tmp_path, fmt):
    target = tmp_path / f"c{SUFFIX[fmt]}"
    datasets = {**_one("a"), **_one("a:b", 12)}
    orc.write_stage(target, datasets, format=fmt, cluster=cluster, stripe_bytes=16)
    assert orc.verify(target) == []
    got = orc.open_checkpoint(target)
    assert got["a:b"].tolist() == list(range(12)) and got["a"].tolist() == list(range(10))


@pytest.mark.parametrize(
    "name",
    # a backslash split a Zarr dataset (metadata under a/b/, chunks under a\b/), a lone
    # surrogate was a raw UnicodeEncodeError, 'zarr.json' and 5000 characters failed on the
    # temporary folder (hostile probe)
    ["a\0b", "tab\there", ".", "..", "new\nline", "a\\b", "a\udcff", "zarr.json", "x" * 256],
)
def test_dataset_names_no_format_can_hold_are_refused(name):
    with pytest.raises(ContributionError, match="dataset name") as err:
        DatasetSpec(name, (3,), "f8")
    assert repr(name) in str(err.value)


@pytest.mark.parametrize(
    ("dtype", "fill", "message"),
    # each committed and read back changed (NaN as -2**31, 2.5 as 2) or failed raw at commit
    [
        ("i4", float("nan"), "value nan does not fit dtype int32"),
        ("i4", 2.5, "value 2.5 does not fit"),
        ("i1", 1000, "value 1000 does not fit dtype int8"),
        ("f8", "abc", "fill_value 'abc' is text"),
        ("f8", [1, 2], "must be one value"),
        ("f16", 0, "dtype float128: not supported"),
        ("u8", 2**64, "is not a value of uint64"),  # was a raw OverflowError
        ("S4", b"toolong", "does not fit"),
        ([("a", "i4"), ("b", "O")], 0, "holds Python objects"),
    ],
)
def test_fill_values_and_dtypes_are_stored_as_given_or_refused(dtype, fill, message):
    with pytest.raises(ContributionError, match=message):
        DatasetSpec("u", (4,), dtype, fill_value=fill)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_exact_fill_value_reads_back(cluster, tmp_path, fmt):
    spec = DatasetSpec("u", (4,), "f4", fill_value=float("nan"))
    part = Contribution(0, np.arange(2), np.ones(2, "f4"))
    target = tmp_path / f"f{SUFFIX[fmt]}"
    orc.write_stage(target, {"u": (spec, [part])}, format=fmt, allow_missing=True)
    got = orc.open_checkpoint(target)["u"]
    assert got[:2].tolist() == [1.0, 1.0] and np.isnan(got[2:]).all()


@pytest.mark.parametrize(
    ("name", "message"),
    # a NUL was a raw ValueError that left a stray '.a' file; 300 characters an OSError
    [("a\0b.h5", "holds a NUL"), ("x" * 300 + ".h5", "longer than 237 bytes"), ("", "non-empty")],
)
def test_targets_no_file_system_takes_are_refused_before_writing(cluster, tmp_path, name, message):
    target = str(tmp_path / name) if name else name
    with pytest.raises(StorageError, match=message):
        orc.write_stage(target, _one(), cluster=cluster)
    assert list(tmp_path.iterdir()) == []


def test_zarr_refuses_a_byte_order_it_reads_back_otherwise(cluster, tmp_path):
    """A big-endian Zarr checkpoint committed and then failed its own verify (probe)."""
    spec = DatasetSpec("u", (4,), ">i4")
    parts = [Contribution(0, np.arange(4), np.arange(4, dtype=">i4"))]
    with pytest.raises(StorageError, match="byte order"):
        orc.write_stage(tmp_path / "be.zarr", {"u": (spec, parts)}, format="zarr")
    orc.write_stage(tmp_path / "be.h5", {"u": (spec, parts)}, format="hdf5")  # HDF5 keeps it
    assert orc.verify(tmp_path / "be.h5") == []
    assert orc.open_checkpoint(tmp_path / "be.h5")["u"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("fmt", ["hdf5-vds", "hdf5-chunked"])
def test_a_master_without_a_subfile_is_refused(cluster, tmp_path, fmt):
    """h5py and h5dump read a missing subfile's stripes as the fill value, silently (issue 15)."""
    from orchestrator.errors import CheckpointError

    target = tmp_path / "ck"
    orc.write_stage(target, _one(n=64), format=fmt, stripe_bytes=64)
    (target / "io-1.h5").unlink()
    with pytest.raises(CheckpointError, match=r"io-1\.h5 missing"):
        orc.open_checkpoint(target, verify=False)
    with pytest.raises(CheckpointError, match=r"io-1\.h5 missing"):
        orc.verify(target)


# ---------------------------------------------------------------- 7: no symlink is followed
def test_output_files_never_follow_a_planted_symlink(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    pid = os.getpid()
    for planted in (f".plan.tmp-{pid}.csv", f".raw-bandwidth-{pid}.bin"):
        (out / planted).symlink_to(outside)
    with atomic_path(out / "plan.csv") as tmp:
        tmp.write_text("a,b\n")
    assert raw_write_bandwidth(out, 1 << 20) > 0
    assert raw_write_bandwidth(out, 1 << 20, direct=True) > 0
    assert outside.read_text() == "precious"
    assert (out / "plan.csv").read_text() == "a,b\n"
    # written with the permissions a new file gets, not a temporary file's 0600
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "plan.csv").stat().st_mode & 0o777 == 0o666 & ~umask
    leftovers = {p.name for p in out.iterdir()} - {"plan.csv"}
    assert leftovers == {f".plan.tmp-{pid}.csv", f".raw-bandwidth-{pid}.bin"}  # only the planted


def _iorch(*args):
    import subprocess
    import sys
    from pathlib import Path

    iorch = Path(sys.executable).with_name("iorch")
    run = subprocess.run([str(iorch), *args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


def test_benchmark_outputs_never_follow_a_planted_symlink(cluster, tmp_path):
    """write-bench's results and its piece-writing probe, bench optimal's and bench
    schedulers' tables: each followed a link planted at its name (hostile probe)."""
    from orchestrator.engine.measure import pieces_write_seconds

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    plants = {
        "wb": ["results.json", "results.csv"],
        "opt": ["optimal.csv", "optimal.json"],
        "sch": ["sweeps.csv"],
        "pieces": [f".pieces-{os.getpid()}.bin"],  # the name this process used to write
    }
    for folder, names in plants.items():
        (tmp_path / folder).mkdir()
        for name in names:
            (tmp_path / folder / name).symlink_to(outside)
    _iorch(
        *("write-bench", "--size", "4MiB", "--clients", "2", "--ionodes", "2"),
        *("--policy", "ecf", "--repeat", "1", "--no-anchors", "--out", str(tmp_path / "wb")),
    )
    _iorch("bench", "optimal", "--quick", "--exact-limit", "1", "--out", str(tmp_path / "opt"))
    _iorch("bench", "schedulers", "--quick", "--no-timings", "--out", str(tmp_path / "sch"))
    assert pieces_write_seconds(cluster, tmp_path / "pieces", [4096] * 8) > 0
    assert outside.read_text() == "precious"
    for folder, names in plants.items():
        for name in names:  # replaced by the real output, or left as planted; never followed
            p = tmp_path / folder / name
            assert not p.is_symlink() or os.readlink(p) == str(outside)
    assert json.loads((tmp_path / "wb" / "results.json").read_text())["rows"]


def test_an_output_path_holding_a_fifo_or_a_folder_is_not_replaced(tmp_path):
    """As root, ``to_csv('/dev/full')`` replaced the machine's /dev/full with a CSV file
    (hostile probe); a FIFO or a folder went the same way."""
    from orchestrator.errors import InputError

    fifo, folder = tmp_path / "fifo", tmp_path / "folder"
    os.mkfifo(fifo)
    folder.mkdir()
    for where, kind in ((fifo, "not a regular file"), (folder, "a folder")):
        with pytest.raises(InputError, match=kind):
            orc.TransferSet([0], [0], [10]).to_csv(where)
    assert fifo.is_fifo() and folder.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "folder"]


def test_a_failed_atomic_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "x.json") as tmp:
        tmp.write_text("half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- 9: templates stay in their folder
@pytest.mark.parametrize(
    ("template", "step", "message"),
    [
        ("ck/{step}.h5", "/../../escaped", "step '/../../escaped' .* a path separator"),
        ("ck/{step}/u.h5", "..", "step '..' .* not a name inside its folder"),
        ("ck/{step}", "", "step '' .* not a name inside its folder"),
        ("{step}", "", "step '' .* not a name inside its folder"),
        ("ck/{step}.h5", "a\0b", "step 'a\\\\x00b' .* NUL"),
        ("ck/{step.__class__.__name__}.h5", 3, "only the plain fields"),
        ("ck/{step[0]}.h5", "ab", "only the plain fields"),
        ("ck/{rank}.h5", 3, "only the plain fields"),
    ],
)
def test_target_templates_render_plain_fields_inside_their_folder(template, step, message):
    with pytest.raises(ContributionError, match=message):
        StageOptions(target=template).path(step, "save")


def test_target_templates_keep_format_specs_and_literal_braces():
    assert str(StageOptions(target="ck/{name}-{step:03d}.h5").path(7, "save")) == "ck/save-007.h5"
    assert str(StageOptions(target="ck/{{x}}-{step}.h5").path(1, "s")) == "ck/{x}-1.h5"
    assert str(StageOptions(target="ck/{step!r}.h5").path("a", "s")) == "ck/'a'.h5"


# ---------------------------------------------------------------- 13: inputs accepted silently before
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("client,ionode,nbytes\n0,0,1_000\n", "value '1_000' is not an integer"),
        ("client,ionode,nbytes\n0,0,\uff11\uff12\n", "is not an integer"),
        ("client,ionode,nbytes\n0,0,10,7\n", "1 field(s) more than the header's 3"),
        ("client,ionode,nbytes,nbytes\n0,0,10,7\n", "repeats column(s) ['nbytes']"),
    ],
)
def test_transfer_csv_takes_plain_integers_only(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(orc.TransferSetError) as err:
        orc.TransferSet.from_csv(path)
    assert message in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize(
    ("blob", "message"),
    # the first two were UnicodeDecodeError tracebacks (hostile probe)
    [
        (b"client,ionode,nbytes\n0,0,8\xff\n", "not UTF-8 text (byte 26 is 0xff)"),
        (b"\xc5\x01\x02", "not UTF-8 text (byte 0 is 0xc5)"),
        (b"client,ionode,nbytes\n0,0,8\x00\n", "value '8\\x00' is not an integer"),
    ],
)
def test_a_transfer_csv_that_is_not_text_is_named(tmp_path, blob, message):
    path = tmp_path / "t.csv"
    path.write_bytes(blob)
    with pytest.raises(orc.TransferSetError, match=re.escape(message)):
        orc.TransferSet.from_csv(path)


def test_a_transfer_csv_from_a_spreadsheet_with_a_bom_reads(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfclient,ionode,nbytes\n0,1,8\n")
    assert orc.TransferSet.from_csv(path).nbytes.tolist() == [8]


@pytest.mark.parametrize("shape", [(10.7, 3), (True, 3), ("10", 3), 5.0])
def test_dataset_shapes_are_whole_numbers_not_truncated(shape):
    with pytest.raises(ContributionError, match="shape"):
        DatasetSpec("u", shape, "f8")


def test_a_step_key_of_none_is_refused():
    with pytest.raises(ContributionError, match="step is None"):
        StageOptions(target="ck-{step}.h5").path(None, "save")


@pytest.mark.parametrize(
    ("datasets", "message"),
    [
        ({}, "empty stage"),
        ([1, 2], "datasets must map names to"),
        ({"u": "spec"}, "dataset 'u': expected a pair"),
        ({"u": ("spec", [])}, "the spec is a str, not a DatasetSpec"),
        ({"u": (DatasetSpec("u", (4,), "f8"), "abc")}, "contributions must be a list"),
        ({"u": (DatasetSpec("u", (4,), "f8"), [(0, [0], [1.0])])}, "item 0 is a tuple"),
        ({"u": (DatasetSpec("u", (4,), "f8"), [])}, "the stage has no contributions"),
    ],
)
def test_malformed_stage_input_is_named_before_any_cluster_starts(tmp_path, datasets, message):
    with pytest.raises(ContributionError, match=message):
        orc.write_stage(tmp_path / "x.h5", datasets)  # no cluster: it would start one
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the second hostile probe
def _refused(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_front_doors_refuse_what_the_second_probe_found():
    """Each was a raw TypeError, ValueError, AssertionError, RecursionError or a hang."""
    from orchestrator.engine.cluster import connect
    from orchestrator.errors import CaptureError, CheckpointError, ClusterError, CostModelError
    from orchestrator.frontends.capturing import CapturedFile
    from orchestrator.frontends.intercept import render_target

    for address in ("", "nonsense", "tls://127.0.0.1:99999", 5):
        _refused(lambda a=address: connect(a), ClusterError, "scheduler address")
    _refused(lambda: connect("tcp://127.0.0.1:1", security="yes"), ClusterError, "security")
    _refused(lambda: connect(scheduler_file="/dev/zero"), ClusterError, "not a regular file")
    for kw, what in (
        ({"n_ionodes": 2.5}, "n_ionodes"),
        ({"n_ionodes": 10**4}, "worker processes"),  # a million grew to 1.5 GB, then more
        ({"memory_limit": "lots"}, "memory_limit"),
        ({"threads_per_compute": 0}, "threads_per_compute"),
        ({"io_env": {"A\0": "x"}}, "io_env"),
        ({"security": "maybe"}, "security"),
    ):
        _refused(lambda kw=kw: local_cluster(**kw), ClusterError, what)
    for path in ("", None, 5, b"x"):
        _refused(lambda p=path: orc.verify(p), CheckpointError, "non-empty path")
        _refused(lambda p=path: orc.open_checkpoint(p), CheckpointError, "non-empty path")
    _refused(lambda: orc.latest_checkpoint("x*", skipped=5), CheckpointError, "skipped")
    _refused(lambda: orc.latest_checkpoint("x*", verify="yes"), CheckpointError, "verify")
    _refused(lambda: orc.TransferSet.from_csv(None), orc.TransferSetError, "non-empty path")
    f = CapturedFile("x.h5")
    for shape in ((2.7,), ("3",), True, 2.0):  # (2.7,) made two rows, silently
        _refused(lambda s=shape: f.create_dataset("u", shape=s), CaptureError, "shape")
    _refused(lambda: f.create_dataset(None, shape=(2,)), CaptureError, "name")
    _refused(lambda: f.create_dataset("u", shape=(2,), dtype="bogus"), CaptureError, "bogus")
    deep = "[" * 100_000 + "]" * 100_000
    _refused(lambda: orc.CostModel.from_json(deep), CostModelError, "not valid JSON")
    _refused(lambda: render_target("ck/{step}.h5", step="a\nb"), ContributionError, "control")
    _refused(lambda: orc.output_stage(lambda s, r: None, wait="no"), ContributionError, "wait")
    _refused(lambda: orc.set_default_cluster("x"), ContributionError, "IOCluster")
    _refused(
        lambda: orc.WriteOptions(attrs={"": {"io_orchestrator_manifest": 1}}),
        ContributionError,
        "reserved",
    )


def test_an_npz_that_is_not_ours_is_named(tmp_path):
    text, objects, single = tmp_path / "t.npz", tmp_path / "o.npz", tmp_path / "s.npz"
    text.write_text("client,ionode,nbytes\n")
    np.savez(objects, client=np.array([None]), ionode=np.array([0]), nbytes=np.array([1]))
    with open(single, "wb") as f:  # a .npy under an .npz name: a TypeError, before
        np.save(f, np.arange(3))
    for path in (text, objects, single):  # numpy's own ValueError about pickles, before
        _refused(lambda p=path: orc.TransferSet.load_npz(p), orc.TransferSetError, "not a")


def test_a_checkpoint_written_before_todays_name_rules_still_verifies(cluster, tmp_path):
    """verify rebuilt a DatasetSpec from the manifest, so a name the rules for new datasets
    now refuse (a backslash) made an intact older checkpoint unreadable (cold review)."""
    import h5py

    from orchestrator.engine.backends import get_backend

    target = tmp_path / "old.h5"
    orc.write_stage(target, _one(), cluster=cluster)
    backend = get_backend("hdf5")
    manifest = backend.read_manifest(target)
    manifest["datasets"] = {"a\\b": manifest["datasets"]["u"]}
    with h5py.File(target, "r+") as f:
        f.move("u", "a\\b")
    backend.finish(target, manifest)
    assert orc.verify(target) == []
    assert orc.open_checkpoint(target)["a\\b"].tolist() == list(range(10))


def test_a_link_naming_a_device_is_not_replaced(tmp_path):
    """A link is replaced, never followed, unless it names a device (/dev/stdout is one)."""
    from orchestrator.errors import InputError

    link = tmp_path / "out.csv"
    link.symlink_to("/dev/null")
    with pytest.raises(InputError, match="not a regular file"):
        orc.TransferSet([0], [0], [10]).to_csv(link)
    assert link.is_symlink() and os.readlink(link) == "/dev/null"


def test_dask_settings_local_cluster_takes():
    """A share of memory (0.5), bytes as a float and non-string environment values are
    Dask's own settings; the first checks refused them (cold review)."""
    from orchestrator.engine.cluster import _check_local_options

    _check_local_options(2, 2, 1, 0.5, 4e9, {"OMP_NUM_THREADS": 1}, True)


def test_raw_write_bandwidth_repeats_after_an_untimed_write(tmp_path):
    """The disk's raw rate as the median of several writes after an untimed one (a
    process's first write ran at a quarter of the others here); a bad count is named."""
    assert raw_write_bandwidth(tmp_path, 1 << 20, repeat=3) > 0
    assert list(tmp_path.iterdir()) == []  # every write's file removed
    for bad in (0, -1, True, 2.5, "3"):
        with pytest.raises(InputError, match=r"repeat must be an int >= 1, got"):
            raw_write_bandwidth(tmp_path, 1 << 20, repeat=bad)


def test_what_the_write_probe_found(tmp_path):
    """Session 27's hostile probe of the write side: a raw ValueError, a raw
    AttributeError, and a 24 kB Zarr dataset whose 4 GiB stripe killed its worker."""
    from orchestrator.contributions import Contribution, DatasetSpec
    from orchestrator.engine.backends import get_backend
    from orchestrator.engine.stage import write_stage
    from orchestrator.errors import ContributionError

    with pytest.raises(ContributionError, match="client 0: values are not an array"):
        Contribution(0, [0, 1, 2], [[1.0, 2.0], [3.0], [1.0, 2.0]])
    spec = DatasetSpec("u", (1000, 3), "f8")
    parts = [Contribution(0, np.arange(1000), np.zeros((1000, 3)))]
    with pytest.raises(InputError, match=r"options must be a WriteOptions .* got dict"):
        write_stage(tmp_path / "o.zarr", {"u": (spec, parts)}, {"format": "zarr"})  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    zarr = get_backend("zarr")
    # a stripe never holds more rows than the dataset, however large the one asked for
    for asked in (4 << 30, 1 << 40):
        assert zarr.stripe_size(spec, asked) == spec.nbytes
    assert zarr.stripe_size(spec, 240) == 240  # smaller ones as asked
    chunked = DatasetSpec("c", (1000, 3), "f8", chunks=(100, 3))
    assert zarr.stripe_size(chunked, 1 << 40) == spec.nbytes  # ten bands of 100 rows
