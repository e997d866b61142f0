"""Values are stored exactly or refused: no wrap-around, no overflow to infinity.

``cast_exactly`` is checked against an oracle in Python's own numbers on many
random values, then a real stage is run through each entry point with a value
that does not fit its dataset.
"""

import math
from fractions import Fraction

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import orchestrator as orc
from orchestrator.contributions import Contribution, ContributionError, DatasetSpec, cast_exactly
from orchestrator.engine.cluster import local_cluster

INTS = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]
FLOATS = ["f2", "f4", "f8"]


def fits(value, src, dst):
    """The oracle: whether ``value`` (of dtype ``src``) is kept when stored as ``dst``."""
    src, dst = np.dtype(src), np.dtype(dst)
    if dst.kind in "iu":
        info = np.iinfo(dst)
        if src.kind == "f" and not math.isfinite(value):
            return False
        return float(value).is_integer() and info.min <= int(value) <= info.max
    if dst.kind == "f":
        if src.kind == "f" and not math.isfinite(value):
            return True  # inf and NaN stay what they are
        # round to nearest: a value overflows from max + half an ulp of the top binade up
        info = np.finfo(dst)
        limit = Fraction(float(info.max)) + Fraction(2) ** (info.maxexp - 1 - info.nmant) / 2
        return abs(Fraction(value)) < limit
    raise AssertionError(dst)


def values_of(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return st.integers(int(info.min), int(info.max))
    return st.floats(width=8 * dtype.itemsize, allow_nan=True, allow_infinity=True)


@st.composite
def cases(draw):
    src = draw(st.sampled_from(INTS + FLOATS))
    dst = draw(st.sampled_from(INTS + FLOATS))
    values = draw(st.lists(values_of(src), min_size=1, max_size=8))
    return np.array(values, dtype=src), dst


@settings(max_examples=3000, deadline=None)
@given(cases())
def test_cast_exactly_matches_the_oracle(case):
    values, dst = case
    ok = [fits(v, values.dtype, dst) for v in values.tolist()]
    if all(ok):
        out = cast_exactly(values, dst, "u")
        assert out.dtype == np.dtype(dst)
        if np.dtype(dst).kind in "iu":  # whole numbers in range: kept exactly
            assert [int(x) for x in out.tolist()] == [int(v) for v in values.tolist()]
    else:
        first = values.tolist()[ok.index(False)]
        with pytest.raises(ContributionError, match="does not fit dtype") as err:
            cast_exactly(values, dst, "dataset 'u'")
        assert str(err.value).startswith("dataset 'u': value ")
        assert repr(first) in str(err.value) or (first != first and "nan" in str(err.value))


def test_complex_into_real_keeps_no_imaginary_part():
    assert cast_exactly(np.array([1 + 0j]), "f8", "u").tolist() == [1.0]
    with pytest.raises(ContributionError, match=r"value \(1\+2j\) does not fit dtype float64"):
        cast_exactly(np.array([1 + 2j]), "f8", "u")


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=2, n_compute=2) as cl:
        orc.set_default_cluster(cl)
        yield cl
        orc.set_default_cluster(None)


@pytest.mark.parametrize(
    ("dtype", "value", "stored"),
    [("i1", 1000, "-24"), ("f2", 1e10, "inf"), ("i8", np.iinfo(np.uint64).max, "-1")],
)
def test_a_value_that_does_not_fit_fails_every_entry_point_and_writes_nothing(
    cluster, tmp_path, dtype, value, stored
):
    src = np.array([value]).dtype
    rows = np.arange(8)
    values = np.zeros(8, dtype=src)
    values[5] = value
    spec = DatasetSpec("u", (8,), dtype)
    message = f"dataset 'u', client 0, rows .*: value {value!r} .*stored as {stored}"
    with pytest.raises(ContributionError, match=message):
        orc.write_stage(
            tmp_path / "w.h5", {"u": (spec, [Contribution(0, rows, values)])}, cluster=cluster
        )
    with (
        pytest.raises(ContributionError, match="does not fit dtype"),
        orc.capture(tmp_path / "c.h5", cluster=cluster) as f,
    ):
        f.create_dataset("u", shape=(8,), dtype=dtype)[...] = values
    assert list(tmp_path.iterdir()) == []
    # what fits is stored as given
    values[5] = 7
    orc.write_stage(
        tmp_path / "ok.h5", {"u": (spec, [Contribution(0, rows, values)])}, cluster=cluster
    )
    with h5py.File(tmp_path / "ok.h5") as h:
        assert h["u"][:].tolist() == values.tolist() and h["u"].dtype == np.dtype(dtype)
