"""The bidding paper's workload generator and the simulator on it."""

import numpy as np
import pytest

import orchestrator as orc
from orchestrator.workload import KiB, MiB, bidding_workload, uniform_workload


def test_busy_and_normal_ionodes_and_size_mix():
    ts = bidding_workload(n_ionodes=64, busy_ratio=0.25, large_ratio=0.3, seed=7)
    per_node = np.bincount(ts.ionode, minlength=64)
    busy = per_node >= 400
    assert busy.sum() == 16  # round(0.25 * 64) busy I/O nodes, 40-50 x 10 requests each
    assert per_node[busy].max() <= 500
    assert 5 <= per_node[~busy].mean() <= 15  # about 10 requests on a normal node
    large = ts.nbytes > MiB
    assert np.all((ts.nbytes[large] >= 0.95 * 32 * MiB) & (ts.nbytes[large] <= 1.05 * 32 * MiB))
    assert np.all((ts.nbytes[~large] >= 0.95 * 128 * KiB) & (ts.nbytes[~large] <= 1.05 * 128 * KiB))
    assert 0.25 < large.mean() < 0.35
    assert ts.n_clients == 256 and ts.client.max() < 256


def test_seeded_and_reproducible():
    a = bidding_workload(16, 0.1, 0.5, seed=3)
    b = bidding_workload(16, 0.1, 0.5, seed=3)
    c = bidding_workload(16, 0.1, 0.5, seed=4)
    assert np.array_equal(a.nbytes, b.nbytes) and not np.array_equal(a.nbytes, c.nbytes)
    u = uniform_workload(100, 4, 2, min_bytes=10, max_bytes=20, seed=1)
    assert u.nbytes.min() >= 10 and u.nbytes.max() <= 20


def test_bad_ratios_are_rejected():
    with pytest.raises(ValueError, match="busy_ratio must be within"):
        bidding_workload(8, busy_ratio=1.5)
    with pytest.raises(ValueError, match=r"n_ionodes must be an integer in \[1, 2\*\*31\), got 0"):
        bidding_workload(0)


def test_simulation_reports_and_orders_policies_as_the_paper_does():
    ts = bidding_workload(n_ionodes=32, busy_ratio=0.3, large_ratio=0.1, seed=0)
    sims = {p: orc.simulate(ts, p, seed=0) for p in ("ecf", "ms-ecf", "hdf", "fcfs")}
    for s in sims.values():
        assert s.total_seconds == s.scheduling_seconds + s.makespan
        assert s.throughput == pytest.approx(ts.total_bytes / s.total_seconds)
        assert s.ratio >= 1.0 - 1e-12
        assert s.idle_fraction.shape == (32,) and np.all(s.idle_fraction >= -1e-12)
    # busy I/O nodes dominate: ECF meets the bound; block-splitting HDF pays per block
    assert sims["ecf"].ratio == pytest.approx(1.0, abs=1e-3)
    assert sims["ms-ecf"].throughput > sims["hdf"].throughput
    assert sims["hdf"].rounds > 10 * sims["ms-ecf"].rounds
