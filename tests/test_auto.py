"""auto: runs the fast candidates and keeps the best scheduling time + makespan."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from strategies import transfer_columns

import orchestrator as orc

UNIT = orc.CostModel(1.0, 1.0)


def _dense(n, seed=0):
    rng = np.random.default_rng(seed)
    c, s = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return orc.TransferSet(c.ravel(), s.ravel(), (rng.uniform(0.1, 1, n * n) * 2**22).astype(int))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cols=transfer_columns())
def test_keeps_the_best_candidate_and_is_never_worse_than_ecf(cols):
    ts = orc.TransferSet(*cols)
    plan = orc.schedule(ts, "auto", cost=UNIT)
    plan.validate()
    cands = plan.options["candidates"]
    assert plan.chosen_policy in cands
    # ECF runs, unless MWM went first (equal sizes) and met the bound
    assert "ecf" in cands or plan.makespan == pytest.approx(plan.lower_bound)
    totals = {p: c["makespan"] + c["scheduling_seconds"] for p, c in cands.items()}
    assert totals[plan.chosen_policy] == min(totals.values())
    assert plan.makespan == pytest.approx(cands[plan.chosen_policy]["makespan"])
    # auto's own scheduling time includes every candidate it ran (ecf-ls's includes its start)
    assert plan.scheduling_seconds >= max(c["scheduling_seconds"] for c in cands.values())
    # a candidate not run was skipped for a reason: the bound is met, or it cannot pay
    assert set(cands) | set(plan.options["skipped"]) == {"ecf", "mwm", "ecf-ls", "split-opt"}
    for reason in plan.options["skipped"].values():
        assert "lower bound" in reason or "cannot gain" in reason
    if "mwm" in plan.options["skipped"] and "lower bound" in plan.options["skipped"]["mwm"]:
        assert plan.makespan == pytest.approx(plan.lower_bound)


def test_dense_sets_reach_the_bound_when_splitting_is_allowed():
    ts = _dense(12)  # ecf-ls stays ~2% above the bound here
    plan = orc.schedule(ts, "auto", cost=UNIT, min_piece=1)
    assert plan.chosen_policy == "split-opt" and plan.n_pieces > 0
    assert plan.makespan == pytest.approx(plan.lower_bound, rel=1e-9)
    whole = orc.schedule(ts, "auto", cost=UNIT, split=False)
    assert whole.n_pieces == 0 and "split-opt" not in whole.options["candidates"]
    assert whole.makespan <= orc.schedule(ts, "ecf", cost=UNIT).makespan


def test_equal_sizes_try_matchings_first():
    c, s = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
    ts = orc.TransferSet(c.ravel(), s.ravel(), np.full(144, 2**20))
    plan = orc.schedule(ts, "auto", cost=UNIT)
    assert plan.chosen_policy == "mwm" and plan.makespan == pytest.approx(plan.lower_bound)
    assert set(plan.options["candidates"]) == {"mwm"}  # the bound is met: nothing else runs
    assert "lower bound" in plan.options["skipped"]["ecf"]
    assert orc.schedule(ts, "ecf", cost=UNIT).ratio > 1.3  # ECF would not have been enough
    # 20 x 10: matchings miss the bound too, so ECF and the rest still run
    c, s = np.meshgrid(np.arange(20), np.arange(10), indexing="ij")
    ts = orc.TransferSet(c.ravel(), s.ravel(), np.full(200, 2**20))
    plan = orc.schedule(ts, "auto", cost=UNIT)
    assert {"mwm", "ecf"} <= set(plan.options["candidates"])
    assert plan.makespan == pytest.approx(plan.lower_bound)  # split-opt reaches it


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"split": "yes"}, "split must be True or False, got 'yes'"),
        ({"time_limit": -2}, "time_limit must be a number > 0, got -2"),
        ({"min_piece": 0}, "min_piece must be an integer >= 1, got 0"),
        ({"start": "ecf"}, r"policy 'auto' has no option\(s\) \['start'\]"),
    ],
)
def test_bad_options_name_the_field(options, message):
    with pytest.raises(orc.PolicyError, match=message):
        orc.schedule(_dense(3), "auto", **options)
