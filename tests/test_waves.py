"""A stage written in waves (:class:`~orchestrator.engine.waves.WaveStage`) against the same
stage written at once (:func:`~orchestrator.engine.stage.write_stage`), on a real cluster.

Random datasets, contributions with replicated (halo) rows, gaps, some contributions held
by a compute worker, split into random waves: the committed file reads back the same, it
verifies, and every stripe's checksum equals the one-stage write's.
"""

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import orchestrator as orc
from orchestrator.contributions import Contribution, ContributionError, DatasetSpec
from orchestrator.engine.cluster import local_cluster
from orchestrator.engine.stage import write_stage
from orchestrator.engine.verify import verify
from orchestrator.engine.waves import WaveStage
from orchestrator.errors import StageError

FORMATS = ["hdf5", "zarr", "hdf5-vds", "hdf5-chunked"]


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=3, n_compute=2) as cl:
        yield cl


@st.composite
def stages(draw):
    n = draw(st.integers(1, 400))
    width = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(["f8", "i4", "u2"]))
    n_clients = draw(st.integers(1, 6))
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=n_clients - 1, max_size=n_clients - 1)))
    bounds = [0, *cuts, n]
    halo = draw(st.integers(0, 4))
    gaps = draw(st.booleans())
    parts = []
    for c in range(n_clients):
        lo, hi = max(0, bounds[c] - halo), min(n, bounds[c + 1] + halo)
        rows = np.arange(lo, hi)
        if gaps and rows.size > 2:
            rows = rows[draw(st.integers(1, 3)) :]  # rows nobody may give
        if rows.size == 0:
            continue
        values = np.repeat((rows % 1000)[:, None], width, axis=1).astype(dtype)
        parts.append(Contribution(c, rows, values))
    waves = [draw(st.integers(0, 3)) for _ in parts]  # which wave gives each
    remote = [draw(st.booleans()) for _ in parts]
    fmt = draw(st.sampled_from(FORMATS))
    stripe = draw(st.sampled_from([64, 256, 1000, 4096]))
    return DatasetSpec("u", (n, width), dtype), parts, waves, remote, fmt, stripe


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(stage=stages())
def test_waves_write_what_one_stage_writes(cluster, tmp_path_factory, stage):
    spec, parts, waves, remote, fmt, stripe = stage
    d = tmp_path_factory.mktemp("waves")
    given_rows = np.zeros(spec.shape[0], bool)
    for p in parts:
        given_rows[p.rows] = True
    missing = not given_rows.all()
    held = [
        cluster.client.scatter(p, workers=[cluster.compute[i % 2]], hash=False) if r else p
        for i, (p, r) in enumerate(zip(parts, remote, strict=True))
    ]
    opts = {"format": fmt, "stripe_bytes": stripe, "allow_missing": True}
    one = d / "one"
    st_ = WaveStage(d / "waves", [spec], cluster=cluster, **opts)
    written = 0
    for w in range(4):
        written += st_.write({"u": [h for h, k in zip(held, waves, strict=True) if k == w]})
    if not parts:  # nothing given: no stage, as write_stage refuses an empty one
        with pytest.raises(ContributionError, match="no contribution was given"):
            st_.commit()
        return
    res = write_stage(one, {"u": (spec, held)}, cluster=cluster, **opts)
    out = st_.commit()
    expected = np.zeros(spec.shape, spec.dtype)
    for p in parts:
        expected[p.rows] = p.values
    got = orc.open_checkpoint(out.path)["u"]
    assert np.array_equal(got, expected)
    assert verify(out.path) == []
    if res is not None:
        assert (
            out.manifest["datasets"]["u"]["checksums"] == res.manifest["datasets"]["u"]["checksums"]
        )
    if not missing and parts:
        assert written > 0 or spec.nbytes <= 0  # complete stripes were written before the commit


def test_a_wave_writes_only_complete_stripes_and_the_commit_the_rest(cluster, tmp_path):
    spec = DatasetSpec("u", (100, 2), "f8")  # 16-byte rows, 10 rows per 160-byte stripe
    rows = np.arange(100)
    part = lambda c, lo, hi: Contribution(c, rows[lo:hi], np.full((hi - lo, 2), float(c)))  # noqa: E731
    with WaveStage(tmp_path / "w.h5", [spec], cluster=cluster, stripe_bytes=160) as st_:
        assert st_.write({"u": [part(0, 0, 25)]}) == 2  # stripes of rows 0-9 and 10-19
        assert st_.write({"u": [part(1, 25, 95)]}) == 7  # 20-29 (with client 0's) .. 80-89
        assert st_.write({"u": [part(2, 95, 100)]}) == 1
    got = orc.open_checkpoint(tmp_path / "w.h5")["u"][:, 0]
    assert np.array_equal(got, np.repeat([0.0, 1.0, 2.0], [25, 70, 5]))
    assert st_.result is not None and st_.result.manifest["plan"]["waves"] == 3


def test_missing_rows_and_bad_contributions_fail_and_leave_nothing(cluster, tmp_path):
    spec = DatasetSpec("u", (50,), "f8")
    st_ = WaveStage(tmp_path / "m.h5", [spec], cluster=cluster, stripe_bytes=80)
    st_.write({"u": [Contribution(0, np.arange(20), np.zeros(20))]})
    with pytest.raises(ContributionError, match="30 rows have no contribution"):
        st_.commit()
    assert not list(tmp_path.iterdir())
    st_ = WaveStage(tmp_path / "m.h5", [spec], cluster=cluster)
    with pytest.raises(ContributionError, match="not in this stage's specs"):
        st_.write({"v": [Contribution(0, np.arange(2), np.zeros(2))]})
    st_ = WaveStage(tmp_path / "m.h5", [spec], cluster=cluster)
    st_.write({"u": [Contribution(0, np.arange(2), np.zeros(2))]})
    with pytest.raises(ContributionError, match="client 0 contributes twice"):
        st_.write({"u": [Contribution(0, np.arange(2, 4), np.zeros(2))]})
    with pytest.raises((ContributionError, StageError)):
        WaveStage(tmp_path / "m.h5", [spec], cluster=cluster).write(
            {"u": [Contribution(0, np.arange(48, 52), np.zeros(4))]}
        )
    assert not list(tmp_path.iterdir())
