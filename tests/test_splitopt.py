"""split-opt: the decomposition kernel and whole plans against the oracles in
orchestrator.testing.oracles."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import transfer_columns

import orchestrator as orc
from orchestrator.kernels import decompose
from orchestrator.policies.splitopt import split_opt_units
from orchestrator.testing.oracles import (
    check_decomposition,
    check_pieces,
    list_schedule,
    preemptive_bound,
)

MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNIT = orc.CostModel(1.0, 1.0)  # duration == bytes, no latency, no piece overhead


@st.composite
def matrices(draw):
    """Sparse non-negative integer matrices as edge lists (rows, cols, weights, n)."""
    n = draw(st.integers(1, 6))
    cells = draw(
        st.lists(
            st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(1, 20)),
            min_size=1,
            max_size=n * n,
            unique_by=lambda x: (x[0], x[1]),
        )
    )
    r, c, w = (np.array(x, dtype=np.int64) for x in zip(*cells, strict=True))
    return r, c, w, n


@MANY
@given(matrices())
def test_decomposition_is_a_sequence_of_perfect_matchings(m):
    r, c, w, n = m
    row, col, wt, lim = decompose.regularize(r, c, w, n)
    assert lim == max(np.bincount(r, w, n).max(), np.bincount(c, w, n).max())
    assert wt.size - w.size <= 2 * n - 1  # north-west corner padding
    edge, t0, t1, phases = decompose.bvn(row, col, wt, n, lim, w.size)
    assert check_decomposition(row, col, wt, lim, edge, t0, t1) <= phases <= wt.size


@MANY
@given(cols=transfer_columns(max_bytes=5000), idle=st.integers(0, 2))
def test_zero_overhead_plans_meet_the_lower_bound(cols, idle):
    ts = orc.TransferSet(*cols, n_ionodes=max(cols[1]) + 1 + idle)
    units, order, stats = split_opt_units(ts, UNIT, min_piece=1)
    check_pieces(*cols, units.parent, units.offset, units.nbytes)
    plan = orc.Plan(ts, units, order, UNIT, "split-opt")
    plan.validate()
    d = units.durations.tolist()
    makespan = max(list_schedule(order, units.client, units.ionode, d)[1])
    assert makespan == pytest.approx(preemptive_bound(*cols), rel=1e-9)
    assert plan.makespan == pytest.approx(plan.lower_bound, rel=1e-9)
    assert stats["overrun_bytes"] == 0 and stats["rounds"] == 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cols=transfer_columns(max_bytes=5000),
    latency=st.sampled_from([0.0, 1.0, 37.0]),
    overhead=st.sampled_from([0.0, 3.0]),
    min_piece=st.sampled_from([1, 64, 1000]),
    align=st.sampled_from([1, 16]),
)
def test_no_piece_outlasts_its_slot_and_options_hold(cols, latency, overhead, min_piece, align):
    cm = orc.CostModel(1.0, 1.0, network_latency=latency, piece_overhead=overhead)
    ts = orc.TransferSet(*cols)
    units, order, stats = split_opt_units(ts, cm, min_piece=min_piece, align=align)
    check_pieces(*cols, units.parent, units.offset, units.nbytes)
    plan = orc.Plan(ts, units, order, cm, "split-opt")
    plan.validate()
    if stats["overrun_bytes"] == 0:  # every unit ran within its slot of the padded matrix
        assert plan.makespan <= stats["bound"] * (1 + 1e-12) + plan.n_units
    last = np.zeros(len(ts), dtype=np.int64)  # offset of each transfer's last piece
    np.maximum.at(last, units.parent, units.offset)
    inner = units.offset < last[units.parent]
    assert (units.nbytes[inner] >= min_piece).all()
    assert (units.offset % align == 0).all()
    # a transfer that is one piece pays no piece overhead
    assert units.split.tolist() == (np.bincount(units.parent)[units.parent] > 1).tolist()


def test_dense_all_to_all_beats_ecf_and_pays_overhead_only_on_cuts():
    rng = np.random.default_rng(3)
    c, s = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
    sizes = (rng.uniform(0.1, 1.0, c.size) * 4 * 2**20).astype(np.int64)
    ts = orc.TransferSet(c.ravel(), s.ravel(), sizes)
    plan = orc.schedule(ts, "split-opt", cost="cluster2004")
    plan.validate()
    ecf = orc.schedule(ts, "ecf", cost="cluster2004")
    assert plan.n_pieces > 0 and "fallback" not in plan.options
    assert plan.makespan < ecf.makespan
    assert plan.ratio < 1.01
    overhead = plan.durations - orc.get_cost_model("cluster2004").duration(plan.nbytes)
    assert np.allclose(overhead[plan.split], 20e-6) and np.allclose(overhead[~plan.split], 0.0)
    # pieces in plan order name their transfer and byte range
    parent, offset, nbytes = plan.pieces
    check_pieces(ts.client, ts.ionode, ts.nbytes, parent, offset, nbytes)


def test_falls_back_to_whole_transfers_when_cuts_do_not_pay():
    # one client: every plan is a chain, cutting only adds latency
    ts = orc.TransferSet([0, 0, 0], [0, 1, 2], [10, 20, 30])
    cm = orc.CostModel(1.0, 1.0, network_latency=5.0, piece_overhead=1.0)
    plan = orc.schedule(ts, "split-opt", cost=cm)
    assert plan.n_pieces == 0 and plan.makespan == plan.lower_bound


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_piece": 0}, "min_piece must be an integer >= 1, got 0"),
        ({"min_piece": -5}, "min_piece must be an integer >= 1, got -5"),
        ({"min_piece": 2.5}, "min_piece must be an integer >= 1, got 2.5"),
        ({"align": 0}, "align must be an integer >= 1, got 0"),
        ({"block_size": 4}, r"policy 'split-opt' has no option\(s\) \['block_size'\]"),
    ],
)
def test_bad_options_name_the_field(options, message):
    with pytest.raises(orc.PolicyError, match=message):
        orc.schedule(orc.TransferSet([0], [0], [5]), "split-opt", **options)
