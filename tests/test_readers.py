"""Every format read back by readers nobody here wrote: h5py, zarr-python, xarray (h5netcdf and
open_zarr), tensorstore and h5dump (issue 15).

One checkpoint per format holds what users put in theirs: groups, dimension names,
a chunked and compressed dataset, a structured dtype, fixed-length strings, float16,
bool, complex, a scalar, variable-length text, and attributes with NumPy dtypes.
Each reader must see the values written, named dimensions and the storage asked for.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings

import h5py
import numpy as np
import pytest

from orchestrator import open_checkpoint as orc_open
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.cluster import local_cluster
from orchestrator.engine.stage import write_stage
from orchestrator.engine.verify import verify
from orchestrator.errors import ContributionError, StorageError

# zarr-python's own warning that records and byte strings have no Zarr v3 spec yet: a user's
# zarr-python code gets it too, and so do they from us
pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")

FORMATS = ["hdf5", "hdf5-vds", "hdf5-chunked", "zarr"]
N = 600
REC = np.dtype([("t", "<f8"), ("id", "<i4")])


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(15)
    rec = np.zeros(N, REC)
    rec["t"] = rng.random(N)
    rec["id"] = np.arange(N)
    return {
        "state/u": rng.random((N, 3)),
        "state/p": rng.random((N, 3)) * 100,
        "state/x": np.arange(N, dtype="f8"),
        "rec": rec,
        "tag": np.array([b"n%d" % i for i in range(N)], dtype="S6"),
        "half": rng.random(N).astype("f2"),
        "flag": rng.random(N) > 0.5,
        "z": (rng.random(N) + 1j * rng.random(N)).astype("c16"),
    }


def _specs(fmt: str) -> dict[str, DatasetSpec]:
    squeeze = {} if fmt == "zarr" else {"shuffle": True}
    return {
        "state/u": DatasetSpec("state/u", (N, 3), "f8", dims=("x", "xyz")),
        "state/p": DatasetSpec(
            "state/p",
            (N, 3),
            "f8",
            dims=("x", "xyz"),
            chunks=(50, 3),
            compression="gzip",
            **squeeze,
        ),
        "state/x": DatasetSpec("state/x", (N,), "f8", dims=("x",)),
        "rec": DatasetSpec("rec", (N,), REC),
        "tag": DatasetSpec("tag", (N,), "S6"),
        "half": DatasetSpec("half", (N,), "f2"),
        "flag": DatasetSpec("flag", (N,), "?"),
        "z": DatasetSpec("z", (N,), "c16"),
    }


ATTRS = {
    "": {"step": np.int16(3), "title": "run 15"},
    "state": {"dt": np.float32(0.5), "sizes": np.array([1, 2], dtype=np.uint8)},
    "state/u": {"units": "m/s"},
}
VALUES = {"time": np.float32(2.5), "names": ["alpha", "beta"]}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    data = _data()
    half = N // 3
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        for fmt in FORMATS:
            specs = _specs(fmt)
            datasets = {
                name: (
                    specs[name],
                    [
                        Contribution(0, np.arange(half), arr[:half]),
                        Contribution(1, np.arange(half, N), arr[half:]),
                    ],
                )
                for name, arr in data.items()
            }
            path = tmp_path_factory.mktemp(fmt) / f"ck-{fmt}"
            write_stage(
                path,
                datasets,
                cluster=cl,
                format=fmt,
                stripe_bytes=4096,
                attrs=ATTRS,
                values=VALUES,
                groups=["empty/inner"],
            )
            out[fmt] = path
    return out, data


def _h5(path, fmt):
    return path if fmt == "hdf5" else path / "master.h5"


@pytest.mark.parametrize("fmt", FORMATS)
def test_our_own_verify_passes(written, fmt):
    paths, _ = written
    assert verify(paths[fmt]) == []


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "zarr"])
def test_h5py_reads_groups_values_dtypes_attrs_and_storage(written, fmt):
    paths, data = written
    with h5py.File(_h5(paths[fmt], fmt), "r") as f:
        for name, arr in data.items():
            assert f[name].dtype == arr.dtype, name
            np.testing.assert_array_equal(f[name][...], arr, err_msg=name)
        assert "empty/inner" in f and isinstance(f["empty/inner"], h5py.Group)
        assert f.attrs["step"].dtype == np.int16 and f.attrs["step"] == 3
        assert f["state"].attrs["dt"].dtype == np.float32
        assert f["state"].attrs["sizes"].dtype == np.uint8
        assert f["state/u"].attrs["units"] == "m/s"
        assert f["time"].shape == () and f["time"].dtype == np.float32 and f["time"][()] == 2.5
        assert [s.decode() for s in f["names"][...]] == ["alpha", "beta"]
        # dimension scales as netCDF-4 makes them: the coordinate x, a helper for xyz
        assert [d[0].name for d in f["state/u"].dims] == ["/state/x", "/state/xyz"]
        assert f["state/x"].is_scale  # a coordinate variable: the scale of its dimension
        if fmt == "hdf5":  # the chunked dataset itself is as asked (in vds: its subfiles)
            p = f["state/p"]
            assert (p.chunks, p.compression, p.shuffle) == ((50, 3), "gzip", True)
            assert f["state/u"].chunks is None  # contiguous: what the engine writes fastest


def test_hdf5_vds_subfiles_hold_the_chunks_asked_for(written):
    paths, _ = written
    with h5py.File(paths["hdf5-vds"] / "io-0.h5", "r") as f:
        assert (f["state/p"].chunks, f["state/p"].compression) == ((50, 3), "gzip")


def test_zarr_python_reads_everything_with_dimension_names_and_codecs(written):
    import zarr

    paths, data = written
    g = zarr.open_group(paths["zarr"], mode="r")
    for name, arr in data.items():
        np.testing.assert_array_equal(g[name][...], arr, err_msg=name)
    assert g["state/u"].metadata.dimension_names == ("x", "xyz")
    assert g["rec"].metadata.dimension_names == ("rec_dim0",)  # the default
    p = g["state/p"]
    assert p.chunks == (50, 3) and type(p.compressors[0]).__name__ == "GzipCodec"
    assert g.attrs["step"] == 3 and g["state"].attrs["dt"] == 0.5
    assert g["time"][()] == np.float32(2.5)
    assert list(g["names"][...]) == ["alpha", "beta"]
    assert "inner" in g["empty"]
    meta = json.loads((paths["zarr"] / "zarr.json").read_text())
    assert (
        "consolidated_metadata" in meta and "state/u" in meta["consolidated_metadata"]["metadata"]
    )


def test_xarray_open_zarr_names_dimensions(written):
    xr = pytest.importorskip("xarray")
    paths, data = written
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray's notes on Zarr v3 extensions
        ds = xr.open_zarr(paths["zarr"], group="state")
        assert dict(ds.sizes) == {"x": N, "xyz": 3}
        np.testing.assert_array_equal(ds["u"].values, data["state/u"])
        np.testing.assert_array_equal(ds["x"].values, data["state/x"])
        root = xr.open_zarr(paths["zarr"])
        assert "half" in root and root["half"].dims == ("half_dim0",)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "zarr"])
def test_xarray_h5netcdf_names_dimensions(written, fmt):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    paths, data = written
    with xr.open_dataset(_h5(paths[fmt], fmt), engine="h5netcdf", group="state") as ds:
        assert dict(ds.sizes) == {"x": N, "xyz": 3}
        assert ds["u"].dims == ("x", "xyz") and ds["p"].dims == ("x", "xyz")
        np.testing.assert_array_equal(ds["p"].values, data["state/p"])
        assert "xyz" not in ds.variables or ds["xyz"].dims == ("xyz",)
    with xr.open_dataset(_h5(paths[fmt], fmt), engine="h5netcdf") as root:
        assert root["half"].dims == ("half_dim0",)
        np.testing.assert_array_equal(root["half"].values, data["half"])


def test_tensorstore_reads_the_zarr_arrays(written):
    ts = pytest.importorskip("tensorstore")
    paths, data = written
    for name in ("state/u", "state/p", "half", "flag", "z"):
        arr = ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(paths["zarr"] / name)}}
        ).result()
        np.testing.assert_array_equal(arr.read().result(), data[name], err_msg=name)


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump not installed (hdf5-tools)")
@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "zarr"])
def test_h5dump_reads_every_hdf5_format(written, fmt):
    paths, _ = written
    path = _h5(paths[fmt], fmt)
    header = subprocess.run(
        ["h5dump", "-H", str(path)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    for name in ("state", "u", "p", "rec", "tag", "names", "time"):
        assert f'"{name}"' in header
    out = subprocess.run(
        ["h5dump", "-d", "/state/x", "-s", "590", "-c", "3", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "590, 591, 592" in out.replace("(0): ", "")


# ----------------------------------------------------------------- refused, by name
@pytest.mark.parametrize(
    ("fmt", "options", "named"),
    [
        ("hdf5", {"shards": (10,)}, "shards"),
        ("hdf5", {"compressors": None}, "compressors"),
        ("hdf5", {"chunks": (50,)}, "cannot grow"),
        ("hdf5-vds", {"maxshape": (None,)}, "maxshape"),
        ("zarr", {"maxshape": (None,)}, "maxshape"),
        ("zarr", {"shuffle": True, "chunks": (10,)}, "shuffle"),
        ("zarr", {"fletcher32": True, "chunks": (10,)}, "fletcher32"),
        ("zarr", {"compression": "lzf"}, "lzf"),
    ],
)
def test_an_option_a_format_cannot_honour_is_refused_by_name(tmp_path, fmt, options, named):
    spec = DatasetSpec("u", (40,), "f8", **options)
    with pytest.raises(StorageError, match=named):
        write_stage(
            tmp_path / "x",
            {"u": (spec, [Contribution(0, np.arange(40), np.zeros(40))])},
            format=fmt,
            cluster=object(),  # refused before any cluster is used
        )
    assert not list(tmp_path.iterdir())


def test_numpy_text_is_refused_in_hdf5_by_name(tmp_path):
    spec = DatasetSpec("t", (4,), "U3")
    with pytest.raises(StorageError, match="NumPy text"):
        write_stage(
            tmp_path / "x.h5",
            {"t": (spec, [Contribution(0, np.arange(4), np.array(list("abcd")))])},
            format="hdf5",
            cluster=object(),
        )


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"chunks": (0,)}, "chunks"),
        ({"compression": "snappy"}, "compression"),
        ({"compression": "gzip", "compression_opts": 12}, "compression_opts"),
        ({"compression_opts": 4}, "compression_opts"),
        ({"shuffle": "yes"}, "shuffle"),
        ({"maxshape": (5,)}, "maxshape"),
        ({"dims": ("a", "b")}, "dims"),
        ({"dims": "a"}, "dims"),
        ({"shards": (0,)}, "shards"),
    ],
)
def test_bad_storage_options_are_refused_at_spec_time(kwargs, named):
    with pytest.raises(ContributionError, match=named):
        DatasetSpec("u", (40,), "f8", **kwargs)


def test_one_dimension_with_two_sizes_is_refused(tmp_path):
    a = DatasetSpec("a", (4,), "f8", dims=("n",))
    b = DatasetSpec("b", (5,), "f8", dims=("n",))
    with pytest.raises(ContributionError, match="dimension 'n'"):
        write_stage(
            tmp_path / "x.h5",
            {
                "a": (a, [Contribution(0, np.arange(4), np.zeros(4))]),
                "b": (b, [Contribution(0, np.arange(5), np.zeros(5))]),
            },
            cluster=object(),
        )


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_nobody_wrote_read_the_fill_value_in_chunked_datasets(tmp_path, fmt):
    spec = DatasetSpec("g/u", (100, 2), "i4", fill_value=-7, chunks=(10, 2), compression="gzip")
    rows = np.arange(0, 100, 3)
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        write_stage(
            tmp_path / "x",
            {"g/u": (spec, [Contribution(0, rows, np.ones((rows.size, 2), "i4"))])},
            cluster=cl,
            format=fmt,
            allow_missing=True,
            stripe_bytes=256,
        )
    assert verify(tmp_path / "x") == []
    want = np.full((100, 2), -7, "i4")
    want[rows] = 1
    if fmt == "zarr":
        import zarr

        got = zarr.open_group(tmp_path / "x", mode="r")["g/u"][...]
    else:
        with h5py.File(_h5(tmp_path / "x", fmt), "r") as f:
            got = f["g/u"][...]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fmt", ["hdf5", "hdf5-vds", "zarr"])
@pytest.mark.parametrize("compression", ["zstd", "blosc"])
def test_filters_of_hdf5plugin_and_zarr_codecs(tmp_path, fmt, compression):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    data = np.arange(3000, dtype="f8").reshape(1000, 3) % 7
    spec = DatasetSpec("u", data.shape, "f8", chunks=(100, 3), compression=compression)
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        write_stage(
            tmp_path / "x",
            {"u": (spec, [Contribution(0, np.arange(1000), data)])},
            cluster=cl,
            format=fmt,
            stripe_bytes=4096,
        )
    assert verify(tmp_path / "x") == []
    if fmt == "zarr":
        import zarr

        arr = zarr.open_group(tmp_path / "x", mode="r")["u"]
        assert type(arr.compressors[0]).__name__.lower().startswith(compression)
        np.testing.assert_array_equal(arr[...], data)
        return
    path = tmp_path / "x" if fmt == "hdf5" else tmp_path / "x" / "io-0.h5"
    want = {"zstd": hdf5plugin.ZSTD_ID, "blosc": hdf5plugin.BLOSC_ID}[compression]
    with h5py.File(path, "r") as f:
        assert str(want) in f["u"]._filters
    with h5py.File(_h5(tmp_path / "x", fmt), "r") as f:
        np.testing.assert_array_equal(f["u"][...], data)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"groups": ["u"]}, "inside dataset .u."),
        ({"groups": ["a//b"]}, "empty part"),
        ({"attrs": {"nowhere": {"x": 1}}}, "'nowhere'"),
        ({"values": {"u": 1.0}}, "also a dataset"),
        ({"values": {"t": object()}}, "values\\['t'\\]"),
        ({"values": {"t": {"data": ["a"], "bogus": 1}}}, "bogus"),
        ({"values": {"t": "a\x00b"}}, "NUL"),
        ({"values": {"big": np.zeros(300_000)}}, "at most"),
    ],
)
def test_bad_groups_values_and_attribute_places_are_refused(tmp_path, options, named):
    spec = DatasetSpec("u", (4,), "f8")
    with pytest.raises(ContributionError, match=named):
        write_stage(
            tmp_path / "x.h5",
            {"u": (spec, [Contribution(0, np.arange(4), np.zeros(4))])},
            cluster=object(),
            **options,
        )
    assert not list(tmp_path.iterdir())


def test_a_stage_of_only_small_values_groups_and_empty_datasets(tmp_path):
    spec = DatasetSpec("log/t", (0,), "f8", maxshape=(None,), chunks=(16,))
    res = write_stage(
        tmp_path / "x.h5",
        {"log/t": (spec, [])},
        cluster=object(),  # nothing for I/O nodes: no cluster is used
        values={"meta/name": "run 1", "meta/step": np.int32(4)},
        groups=["empty"],
        attrs={"meta": {"ok": True}},
    )
    assert res.plan is None and verify(tmp_path / "x.h5") == []
    with h5py.File(tmp_path / "x.h5", "r") as f:
        assert f["log/t"].shape == (0,) and f["log/t"].maxshape == (None,)
        assert f["meta/name"][()] == b"run 1" and f["meta/step"].dtype == np.int32
        assert "empty" in f and bool(f["meta"].attrs["ok"]) is True


def test_what_no_format_stores_as_asked_is_refused_before_any_row(tmp_path):
    with pytest.raises(ContributionError, match="sub-array"):
        DatasetSpec("u", (3,), ("f8", (3,)))
    with pytest.raises(ContributionError, match="a time"):
        DatasetSpec("u", (3,), "f8", fill_value=np.datetime64(1, "s"))
    spec = DatasetSpec("u", (4,), "f8")
    parts = [Contribution(0, np.arange(4), np.zeros(4))]
    for kwargs, error, named in [
        ({"attrs": {"u": {"DIMENSION_LIST": 1}}}, ContributionError, "DIMENSION_LIST"),
        ({"values": {"t": {"data": 1.0, "compression": "gzip"}}}, StorageError, "Scalar"),
        ({"values": {"t": np.array(["a"])}}, StorageError, "dtype"),
        ({"attrs": {"u": {"b": b"a\x00"}}}, StorageError, "NULL"),
        ({"groups": ["u/sub"]}, ContributionError, "inside dataset 'u'"),
    ]:
        with pytest.raises(error, match=named):
            write_stage(tmp_path / "x.h5", {"u": (spec, parts)}, cluster=object(), **kwargs)
    rec = DatasetSpec("r", (4,), [("a", ">i4"), ("b", "<f8")])
    with pytest.raises(StorageError, match="byte order"):
        write_stage(
            tmp_path / "x.zarr",
            {"r": (rec, [])},
            format="zarr",
            allow_missing=True,
            cluster=object(),
        )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("fmt", FORMATS)
def test_stages_without_rows_and_datasets_nobody_wrote(tmp_path, fmt):
    write_stage(tmp_path / "v", {}, format=fmt, values={"t": "", "n": 3}, cluster=object())
    got = orc_open(tmp_path / "v")
    assert got["t"].shape == () and got["n"] == 3
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        write_stage(
            tmp_path / "w",
            {
                "a": (DatasetSpec("a", (2,), "f8"), [Contribution(0, [0, 1], np.ones(2))]),
                "b": (DatasetSpec("b", (3,), "i2", fill_value=9), []),
            },
            format=fmt,
            allow_missing=True,
            cluster=cl,
        )
    got = orc_open(tmp_path / "w")
    assert sorted(got) == ["a", "b"] and got["b"].tolist() == [9, 9, 9]
