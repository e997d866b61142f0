"""ecf-ls: critical-path local search, never worse than its start, against a pure-Python check."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import durations_instance, transfer_columns

import orchestrator as orc
from orchestrator.kernels import localsearch
from orchestrator.testing.oracles import ecf, improving_moves, list_schedule

MANY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNIT = orc.CostModel(1.0, 1.0)


@MANY
@given(durations_instance(max_units=14), st.sampled_from([1, 3, 64]))
def test_kernel_stops_at_a_local_optimum_never_worse_than_ecf(inst, window):
    c, s, d = inst
    start = ecf(c, s, d)[0]
    ca, sa, da = np.array(c), np.array(s), np.array(d, dtype=np.float64)
    order, evals, accepted = localsearch.improve(
        np.array(start), ca, sa, da, max(c) + 1, max(s) + 1, 10**6, window
    )
    assert sorted(order.tolist()) == list(range(len(d)))
    before = max(list_schedule(start, c, s, d)[1])
    after = max(list_schedule(order.tolist(), c, s, d)[1])
    assert after <= before
    assert accepted <= evals
    # no move of the neighbourhood improves the result any more
    assert improving_moves(order.tolist(), c, s, d, window) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cols=transfer_columns(), start=st.sampled_from(["ecf", "mwm", "ms-ecf", "fcfs"]))
def test_policy_is_never_worse_than_its_start(cols, start):
    ts = orc.TransferSet(*cols)
    first = orc.schedule(ts, start, cost=UNIT)
    plan = orc.schedule(ts, "ecf-ls", cost=UNIT, start=start)
    plan.validate()
    assert plan.makespan <= first.makespan
    assert plan.options["evaluated_moves"] <= 5000


def test_budget_of_moves_is_respected_and_dense_sets_improve():
    rng = np.random.default_rng(0)
    c, s = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    ts = orc.TransferSet(c.ravel(), s.ravel(), (rng.uniform(0.1, 1, 256) * 2**22).astype(np.int64))
    ecf_plan = orc.schedule(ts, "ecf")
    one = orc.schedule(ts, "ecf-ls", moves=1)
    assert one.options["evaluated_moves"] == 1 and one.makespan <= ecf_plan.makespan
    full = orc.schedule(ts, "ecf-ls", time_limit=60.0)
    assert full.makespan < ecf_plan.makespan


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"moves": 0}, "moves must be an integer >= 1, got 0"),
        ({"window": -1}, "window must be an integer >= 1, got -1"),
        ({"time_limit": 0}, "time_limit must be a number > 0, got 0"),
        ({"time_limit": float("nan")}, "time_limit must be a number > 0, got nan"),
        ({"start": "uar"}, "start must be a policy on whole transfers"),
        ({"start": "ecf-ls"}, "start must be a policy on whole transfers"),
        ({"start": "nope"}, r"start must be a policy on whole transfers .* got 'nope'"),
    ],
)
def test_bad_options_name_the_field(options, message):
    with pytest.raises(orc.PolicyError, match=message):
        orc.schedule(orc.TransferSet([0], [0], [5]), "ecf-ls", **options)
