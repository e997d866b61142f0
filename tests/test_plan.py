"""Plan: timing derived from the order, validation that catches broken plans, output."""

import csv
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import transfer_columns

import orchestrator as orc
from orchestrator.plots import close, gantt
from orchestrator.testing.oracles import hash_ios

UNIT = orc.CostModel(1.0, 1.0)
FIG2 = orc.TransferSet([0, 0, 1, 1], [0, 1, 1, 2], [30, 10, 10, 20])


def test_timing_sequences_and_summary():
    plan = orc.schedule(FIG2, "ecf", cost=UNIT)
    # order T2, T3, T1, T4: T3 waits for I/O node 1, T4 for client 1
    assert plan.start.tolist() == [10.0, 0.0, 10.0, 20.0]
    assert plan.end.tolist() == [40.0, 10.0, 20.0, 40.0]
    assert plan.client_sequence(0).tolist() == [1, 0]
    assert plan.ionode_sequence(1).tolist() == [1, 2]
    assert (plan.makespan, plan.lower_bound, plan.ratio) == (40.0, 40.0, 1.0)
    assert plan.idle_fraction().tolist() == pytest.approx([0.25, 0.5, 0.5])
    assert plan.summary()["units"] == 4


@pytest.mark.parametrize("policy", sorted(orc.policies()))
@settings(max_examples=60, deadline=None)
@given(cols=transfer_columns(max_bytes=3000), seed=st.integers(0, 2**32))
def test_every_policy_gives_a_valid_plan_no_better_than_the_bound(policy, cols, seed):
    plan = orc.schedule(
        orc.TransferSet(*cols),
        policy,
        cost=UNIT,
        seed=seed,
        **({"block_size": 512} if orc.policies()[policy].default_block_size else {}),
    )
    plan.validate()
    assert plan.makespan >= plan.lower_bound * (1 - 1e-12)
    # per-client and per-I/O-node sequences partition the units
    per_client = np.concatenate([plan.client_sequence(c) for c in range(plan.transfers.n_clients)])
    assert sorted(per_client.tolist()) == list(range(plan.n_units))


def _broken(plan, **changes):
    return dataclasses.replace(plan, **changes)


def test_validate_catches_a_missing_unit():
    plan = orc.schedule(FIG2, "ecf", cost=UNIT)
    with pytest.raises(orc.PlanError, match="not a permutation"):
        _broken(plan, order=plan.order[:-1]).validate()
    with pytest.raises(orc.PlanError, match="not a permutation"):
        _broken(plan, order=np.array([0, 0, 1, 2])).validate()


def test_validate_catches_pieces_that_do_not_tile_a_transfer():
    plan = orc.schedule(FIG2, "uar", cost=UNIT, block_size=7)
    u = plan.units
    bad_offset = u.offset.copy()
    bad_offset[1] += 1  # piece 1 of transfer 0 now overlaps piece 2 and leaves a gap
    with pytest.raises(orc.PlanError, match="transfer 0: pieces overlap or leave a gap"):
        _broken(plan, units=dataclasses.replace(u, offset=bad_offset)).validate()
    short = u.nbytes.copy()
    short[0] -= 1
    with pytest.raises(orc.PlanError, match="transfer 0: pieces cover 29 of 30 bytes"):
        _broken(plan, units=dataclasses.replace(u, nbytes=short)).validate()


def test_validate_catches_units_that_disagree_with_their_transfer():
    plan = orc.schedule(FIG2, "ecf", cost=UNIT)
    wrong = plan.units.client.copy()
    wrong[3] = 0  # transfer 3 belongs to client 1
    with pytest.raises(orc.PlanError, match="unit 3: client 0 but its transfer 3 has 1"):
        _broken(plan, units=dataclasses.replace(plan.units, client=wrong)).validate()
    first = orc.schedule(FIG2, "uar", cost=UNIT, block_size=7)
    shifted = first.units.offset + 1  # every piece one byte late: tiles [1, n + 1)
    with pytest.raises(
        orc.PlanError, match="transfer 0: its first piece does not start at offset 0"
    ):
        _broken(first, units=dataclasses.replace(first.units, offset=shifted)).validate()


def test_validate_checks_durations_against_the_cost_model():
    plan = orc.schedule(FIG2, "ecf", cost=UNIT)
    fast = plan.units.durations.copy()
    fast[0] = 0.1
    with pytest.raises(orc.PlanError, match=r"unit 0: duration 0.1 s, the cost model says 30.0 s"):
        _broken(plan, units=dataclasses.replace(plan.units, durations=fast)).validate()


def test_validate_rejects_orders_that_are_not_unit_ids():
    plan = orc.schedule(FIG2, "ecf", cost=UNIT)
    with pytest.raises(orc.PlanError, match=r"ids outside 0\.\.3"):
        _broken(plan, order=np.array([0, 1, 2, -1])).validate()
    with pytest.raises(orc.PlanError, match="integer unit ids"):
        _broken(plan, order=np.array([0.0, 1.0, 2.0, 3.0])).validate()


def test_validate_catches_an_endpoint_doing_two_things_at_once():
    # Timing is derived by list scheduling, so an overlap means the timing
    # kernel is wrong; stand in for that by planting overlapping times.
    plan = orc.schedule(FIG2, "ecf", cost=UNIT)
    start = plan.start.copy()
    start[0] = 5.0  # unit 0 (30 s on client 0) now overlaps unit 1 ([0, 10)) on client 0
    object.__setattr__(plan, "_times", (start, start + plan.durations))
    with pytest.raises(orc.PlanError, match="client 0 runs units 1 and 0 at once"):
        plan.validate()


def test_decentralized_plan_times_equal_the_event_driven_run():
    ts = orc.TransferSet([0, 0, 1, 1, 2], [0, 1, 0, 1, 1], [3, 1, 2, 2, 1])
    plan = orc.schedule(ts, "hash-ios", cost=UNIT, block_size=1)
    _, start, end = hash_ios(plan.client, plan.ionode, plan.durations, ts.n_ionodes)
    assert plan.start.tolist() == start and plan.end.tolist() == end


def test_scheduling_seconds_by_kind():
    cm = orc.CostModel(1.0, 1.0, round_cost=2.0, message_cost=0.5)
    bid = orc.schedule(FIG2, "ms-ml", cost=cm)
    assert bid.scheduling_seconds == bid.rounds * 2.0 + bid.messages * 0.5 == 11.0
    central = orc.schedule(FIG2, "ecf", cost=cm)
    assert central.scheduling_seconds == central.kernel_seconds > 0
    assert orc.schedule(FIG2, "first-ios", cost=cm, block_size=5).scheduling_seconds == 0.0
    assert bid.throughput == pytest.approx(70 / (11.0 + bid.makespan))


def test_csv_and_gantt_outputs(tmp_path):
    plan = orc.schedule(FIG2, "hdf", cost=UNIT, block_size=8, seed=2)
    plan.to_csv(tmp_path / "plan.csv")
    with open(tmp_path / "plan.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["transfer", "client", "ionode", "nbytes", "start", "end", "offset"]
    assert [int(r["transfer"]) * 1000 + int(r["offset"]) for r in rows] == [
        int(plan.parent[u]) * 1000 + int(plan.offset[u]) for u in plan.order
    ]
    assert max(float(r["end"]) for r in rows) == plan.makespan
    fig = gantt(plan, by="client", path=tmp_path / "g.png")
    close(fig)
    assert (tmp_path / "g.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="by must be"):
        gantt(plan, by="rank")


def test_schedule_rejects_bad_input_by_name():
    with pytest.raises(orc.PolicyError, match="unknown policy 'fastest'"):
        orc.schedule(FIG2, "fastest")
    with pytest.raises(orc.PolicyError, match=r"policy 'ecf' has no option\(s\) \['block_size'\]"):
        orc.schedule(FIG2, "ecf", block_size=4)
    with pytest.raises(orc.PolicyError, match="block_size must be a positive integer, got 0"):
        orc.schedule(FIG2, "uar", block_size=0)
    with pytest.raises(orc.PolicyError, match=r"seed must be an integer in \[0, 2\*\*64\), got -1"):
        orc.schedule(FIG2, "rand", seed=-1)
    with pytest.raises(orc.PolicyError, match="got 18446744073709551616"):
        orc.schedule(FIG2, "rand", seed=2**64)
    assert orc.schedule(FIG2, "rand", seed=2**64 - 1).n_units == 4
    with pytest.raises(
        orc.PolicyError, match="block_size must be a positive integer, got 4611686018427387904"
    ):
        orc.schedule(FIG2, "uar", block_size=2**62)
    big = orc.TransferSet([0], [0], [2**40])
    with pytest.raises(
        orc.PolicyError, match=r"cuts these 1 transfers into 1,099,511,627,776 pieces"
    ):
        orc.schedule(big, "hdf", block_size=1)
    with pytest.raises(orc.PolicyError, match="must be a TransferSet"):
        orc.schedule([(0, 0, 1)], "ecf")
    with pytest.raises(orc.CostModelError, match="unknown cost preset"):
        orc.schedule(FIG2, "ecf", cost="gigabit")
