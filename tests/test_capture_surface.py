"""``capture`` = h5py (issue 15, item 5): every name of h5py's and zarr-python's objects either
works or raises a CaptureError naming it, and writes of any shape h5py takes are recorded
as h5py would store them.

The oracle is h5py itself: the same writes go to an in-memory ``h5py.File`` (core
driver) and to a capture; the capture's recorded contribution, laid over the fill
value, must equal what h5py holds.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import orchestrator as orc
from orchestrator.errors import CaptureError, CaptureKeyError, CaptureUnsupported
from orchestrator.frontends.capturing import CapturedFile


def _public(cls) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


@pytest.mark.parametrize(
    ("kind", "names"),
    [
        ("file", _public(h5py.File)),
        ("group", _public(h5py.Group)),
        ("dataset", _public(h5py.Dataset)),
        ("attrs", _public(h5py.AttributeManager)),
        ("zarr-group", _public(zarr.Group)),
        ("zarr-array", _public(zarr.Array)),
    ],
)
def test_every_h5py_and_zarr_name_works_or_raises_a_capture_error(kind, names):
    f = CapturedFile("x.h5")
    g = f.create_group("g")
    ds = g.create_dataset("u", shape=(4, 2), dtype="f8")
    obj = {
        "file": f,
        "group": g,
        "dataset": ds,
        "attrs": ds.attrs,
        "zarr-group": g,
        "zarr-array": ds,
    }[kind]
    missing = []
    for name in names:
        try:
            getattr(obj, name)
        except CaptureError as err:
            assert isinstance(err, CaptureUnsupported | CaptureError)
            assert name in str(err), (name, str(err))
        except AttributeError:
            missing.append(name)  # a bare AttributeError: what the issue forbids
    assert not missing, f"{kind}: bare AttributeError for {missing}"


def test_hasattr_and_getattr_with_a_default_keep_working():
    f = CapturedFile("x.h5")
    assert not hasattr(f, "swmr_mode")
    assert getattr(f, "libver", "default") == "default"


def test_a_missing_member_is_a_key_error_as_in_h5py():
    f = CapturedFile("x.h5")
    with pytest.raises(KeyError):
        f["nope"]
    with pytest.raises(CaptureKeyError, match="nope"):
        f["nope"]
    assert f.get("nope") is None and "nope" not in f


def test_groups_paths_delete_visit_and_require():
    f = CapturedFile("x.h5")
    f.create_dataset("/a/b/u", shape=(3,), dtype="i4")
    g = f.require_group("a")
    assert g.require_group("b") is f["a/b"] and f["a"]["b"]["u"].name == "/a/b/u"
    assert f["a/b/u"].parent is f["a/b"]
    seen = []
    f.visit(seen.append)
    assert seen == ["a", "a/b", "a/b/u"]
    del f["a/b"]
    assert "a/b/u" not in f and list(f["a"]) == []
    with pytest.raises(CaptureError, match="exists"):
        f.create_group("a")
    f.create_dataset("t", data=1.5)
    with pytest.raises(CaptureError, match="not a group"):
        f.require_group("t")


def test_attributes_keep_numpy_dtypes_and_h5py_spellings():
    f = CapturedFile("x.h5")
    f.attrs["a"] = np.float32(1.5)
    f.attrs.create("b", [1, 2], dtype="i2")
    f.attrs.modify("c", b"bytes")
    assert f.attrs["a"].dtype == np.float32 and f.attrs["b"].dtype == np.int16
    with pytest.raises(CaptureError, match="None"):
        f.attrs["d"] = None


def test_resize_follows_h5py_rules():
    f = CapturedFile("x.h5")
    fixed = f.create_dataset("fixed", shape=(4,), dtype="f8")
    with pytest.raises(CaptureError, match="maxshape"):
        fixed.resize(8, axis=0)
    grow = f.create_dataset("grow", shape=(0, 2), maxshape=(None, 2), dtype="f8")
    assert grow.chunks is not None  # h5py's own guess, made at creation
    grow.resize(3, axis=0)
    grow[2] = [1.0, 2.0]
    with pytest.raises(CaptureError, match="maxshape"):
        grow.resize((3, 4))
    assert grow[...].tolist() == [[0, 0], [0, 0], [1, 2]]


# ------------------------------------------------------------- writes, against h5py
SHAPE = (12, 5)


@st.composite
def selections(draw):
    """A selection h5py writes: row int/slice (strided)/index array/mask, then per column
    axis an int or a slice (strided)."""
    n, m = SHAPE
    kind = draw(st.sampled_from(["int", "slice", "array", "mask"]))
    if kind == "int":
        rows = draw(st.integers(-n, n - 1))
    elif kind == "slice":
        a = draw(st.integers(0, n))
        rows = slice(a, draw(st.integers(a, n)), draw(st.integers(1, 3)))
    elif kind == "array":
        rows = sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n))))
    else:
        rows = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    col = draw(
        st.one_of(
            st.just(slice(None)),
            st.integers(-m, m - 1),
            st.builds(
                lambda a, b, s: slice(a, max(a, b), s),
                st.integers(0, m),
                st.integers(0, m),
                st.integers(1, 2),
            ),
        )
    )
    return rows, col


@settings(max_examples=300, deadline=None)
@given(st.lists(selections(), min_size=1, max_size=6), st.integers(0, 2**31))
def test_recorded_writes_equal_what_h5py_stores(writes, seed):
    rng = np.random.default_rng(seed)
    ref_file = h5py.File(f"ref-{seed}", "w", driver="core", backing_store=False)
    ref = ref_file.create_dataset("u", shape=SHAPE, dtype="f8", fillvalue=-1.0)
    f = CapturedFile("x.h5")
    ours = f.create_dataset("u", shape=SHAPE, dtype="f8", fillvalue=-1.0)
    for rows, col in writes:
        target = np.empty(SHAPE)[rows, col]
        if target.size == 0:
            continue
        value = rng.integers(0, 100, size=np.shape(target)).astype("f8")
        ref[rows, col] = value
        ours[rows, col] = value
    want = ref[...]
    ref_file.close()
    # what a read inside the capture gives, and what the stage will be handed
    np.testing.assert_array_equal(ours[...], want)
    got = np.full(SHAPE, -1.0)
    con = ours.contribution(0)
    if con is not None:
        got[con.rows] = con.values
    np.testing.assert_array_equal(got, want)


def test_index_arrays_on_other_axes_are_refused_by_name():
    f = CapturedFile("x.h5")
    u = f.create_dataset("u", shape=SHAPE, dtype="f8")
    with pytest.raises(CaptureError, match="index arrays on axis 1"):
        u[:, [0, 2]] = 1.0


@pytest.mark.parametrize("fmt", ["hdf5", "zarr"])
def test_a_committed_capture_holds_column_and_strided_writes(tmp_path, fmt):
    target = tmp_path / ("c.h5" if fmt == "hdf5" else "c.zarr")
    want = np.full((20, 3), 9.0)
    with orc.capture(target, format=fmt) as f:
        u = f.create_dataset("g/u", shape=(20, 3), dtype="f8", fillvalue=9.0)
        u[::3, 1] = np.arange(7.0)
        u[5] = [1.0, 2.0, 3.0]
        f["g"].attrs["note"] = np.int8(4)
    want[::3, 1] = np.arange(7.0)
    want[5] = [1.0, 2.0, 3.0]
    arrays = orc.open_checkpoint(target)
    np.testing.assert_array_equal(np.asarray(arrays["g/u"][...]), want)


# ------------------------------------------------- what the hostile probe of issue 15 found
def test_text_keeps_its_bytes_and_encoding_and_other_object_dtypes_are_refused(tmp_path):
    target = tmp_path / "t.h5"
    with orc.capture(target) as f:
        t = f.create_dataset("t", (2,), dtype=h5py.string_dtype("ascii"))
        t[0] = b"ab"  # was stored as the text "b'ab'"
        t[1] = b"\xff"
        f.create_dataset("u", data="hello")
        with pytest.raises(CaptureError, match="variable-length arrays"):
            f.create_dataset("v", (1,), dtype=h5py.vlen_dtype("i4"))
    with h5py.File(target, "r") as h:
        assert h["t"][...].tolist() == [b"ab", b"\xff"]
        assert h5py.check_string_dtype(h["t"].dtype).encoding == "ascii"
        assert h["u"][()] == b"hello" and h["u"].shape == ()


@pytest.mark.parametrize("fmt", ["hdf5", "zarr"])
def test_shrinking_then_growing_discards_the_rows_cut_off(tmp_path, fmt):
    target = tmp_path / ("s.h5" if fmt == "hdf5" else "s.zarr")
    with orc.capture(target, format=fmt) as f:
        u = f.create_dataset("u", shape=(5,), dtype="i4", maxshape=None if fmt == "zarr" else (10,))
        u[...] = [1, 2, 3, 4, 5]
        u.resize((2,))
        u.resize((5,))
        assert u[...].tolist() == [1, 2, 0, 0, 0]
    assert orc.open_checkpoint(target)["u"].tolist() == [1, 2, 0, 0, 0]


def test_writes_after_the_capture_ended_are_refused_and_caller_attrs_merge(tmp_path):
    with orc.capture(tmp_path / "c.h5", attrs={"": {"b": 2}}) as f:
        u = f.create_dataset("u", data=np.arange(3.0))
        f.attrs["a"] = 1
    with pytest.raises(CaptureError, match="has ended"):
        u[0] = 5.0
    with pytest.raises(CaptureError, match="has ended"):
        f.create_dataset("late", data=[1])
    with h5py.File(tmp_path / "c.h5", "r") as h:
        assert h.attrs["a"] == 1 and h.attrs["b"] == 2


def test_zarr_spellings_h5py_accepts_are_accepted(tmp_path):
    with orc.capture(tmp_path / "z.zarr", format="zarr") as f:
        f.create_array("s", shape=(), dtype="f4")[()] = 1.5  # a scalar, no chunks asked
        a = f.create_array("a", shape=(10,), dtype="i4", chunks=5)
        a[...] = np.ones(10)  # float ones into ints: every value kept exactly
    got = orc.open_checkpoint(tmp_path / "z.zarr")
    assert got["a"].tolist() == [1] * 10 and float(got["s"]) == 1.5
