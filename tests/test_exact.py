"""exact: CP-SAT plans against brute force over all orders on tiny sets."""

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from strategies import durations_instance, transfer_columns

import orchestrator as orc
from orchestrator.policies.exact import exact_order
from orchestrator.testing.oracles import best_makespan, list_schedule
from orchestrator.workload import uniform_workload

pytest.importorskip("ortools", reason="the optional extra io-orchestrator[exact]")

UNIT = orc.CostModel(1.0, 1.0)
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FEW
@given(transfer_columns(max_clients=3, max_ionodes=3, max_transfers=6, max_bytes=50))
def test_matches_brute_force_on_tiny_sets(cols):
    ts = orc.TransferSet(*cols)
    plan = orc.schedule(ts, "exact", cost=UNIT, time_limit=20.0)
    plan.validate()
    assert plan.proven_optimal and plan.optimality_gap == 0.0
    assert plan.makespan == pytest.approx(best_makespan(*cols), rel=1e-9)


@FEW
@given(durations_instance(max_clients=3, max_ionodes=3, max_units=6))
def test_float_durations_are_scaled_without_losing_the_optimum(inst):
    c, s, d = inst
    ca, sa, da = np.array(c), np.array(s), np.array(d, dtype=np.float64)
    order, gap, proven = exact_order(ca, sa, da, max(c) + 1, max(s) + 1, np.arange(len(d)), 20.0)
    got = max(list_schedule(order.tolist(), c, s, d)[1])
    # durations are rounded to ticks of min(d) / 2e6: the order may differ, the makespan not
    assert proven and gap == 0.0 and got == pytest.approx(best_makespan(c, s, d), rel=1e-5)


def test_gap_and_time_limit_on_a_set_too_large_to_prove():
    ts = uniform_workload(300, 12, 10, seed=1)
    plan = orc.schedule(ts, "exact", time_limit=0.5)
    plan.validate()
    ecf = orc.schedule(ts, "ecf")
    assert plan.makespan <= ecf.makespan
    assert 0.0 <= plan.optimality_gap < 1.0
    assert plan.proven_optimal == (plan.optimality_gap == 0.0)


def test_missing_ortools_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    ts = orc.TransferSet([0, 0, 1, 1], [0, 1, 0, 1], [3, 1, 1, 3])
    with pytest.raises(orc.PolicyError, match=r"io-orchestrator\[exact\]"):
        orc.schedule(ts, "exact", cost=UNIT)


@pytest.mark.parametrize("limit", [0, -1.0, float("inf"), "5"])
def test_bad_time_limit_names_the_field(limit):
    with pytest.raises(orc.PolicyError, match=f"time_limit must be a number > 0, got {limit!r}"):
        orc.schedule(orc.TransferSet([0], [0], [5]), "exact", time_limit=limit)
