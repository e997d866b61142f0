"""Every policy against its pure-Python oracle on thousands of random instances."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import durations_instance, transfer_columns

import orchestrator as orc
from orchestrator.kernels import bidding, decentralized, greedy, matching
from orchestrator.kernels.rng import make_state
from orchestrator.testing.oracles import (
    ecf,
    fcfs,
    first_ios,
    hash_ios,
    hdf,
    list_schedule,
    lower_bound,
    ms_ecf,
    ms_ml,
    mwm_check,
    rand,
    random_ios,
    split_pieces,
)

MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNIT = orc.CostModel(network_bandwidth=1.0, disk_bandwidth=1.0)  # duration == bytes


def _ts(cols):
    return orc.TransferSet(*cols)


def _arrays(inst):
    c, s, d = inst
    c, s, d = np.array(c, np.int64), np.array(s, np.int64), np.array(d, np.float64)
    return c, s, d, int(c.max()) + 1, int(s.max()) + 1


# --------------------------------------------------------------- raw kernels
@MANY
@given(durations_instance())
def test_ecf_kernel_matches_oracle(inst):
    c, s, d, nc, ns = _arrays(inst)
    assert greedy.ecf(c, s, d, nc, ns).tolist() == ecf(c, s, d)[0]


@MANY
@given(durations_instance())
def test_fcfs_kernel_matches_literal_phases(inst):
    c, s, d, nc, ns = _arrays(inst)
    order, phases = greedy.fcfs(c, s, nc, ns)
    o_order, o_rounds, _ = fcfs(c, s, d)
    assert (order.tolist(), int(phases)) == (o_order, o_rounds)


@MANY
@given(durations_instance())
def test_mwm_every_step_is_a_maximum_weight_matching(inst):
    c, s, d, nc, ns = _arrays(inst)
    order, steps, sizes = matching.mwm(c, s, d, nc, ns)
    assert steps == sizes.size and sizes.sum() == d.size
    mwm_check(c, s, d, [x.tolist() for x in np.split(order, np.cumsum(sizes)[:-1])])


@MANY
@given(durations_instance())
def test_ms_ml_and_ms_ecf_kernels_match_oracles(inst):
    c, s, d, nc, ns = _arrays(inst)
    for kernel, oracle in ((bidding.ms_ml, ms_ml), (bidding.ms_ecf, ms_ecf)):
        order, rounds, messages = kernel(c, s, d, nc, ns)
        assert (order.tolist(), rounds, messages) == oracle(c, s, d)


@MANY
@given(durations_instance(), st.integers(0, 2**63 - 1))
def test_random_bidding_kernels_match_oracles(inst, seed):
    c, s, d, nc, ns = _arrays(inst)
    for kernel, oracle in ((bidding.rand, rand), (bidding.hdf, hdf)):
        order, rounds, messages = kernel(c, s, nc, ns, make_state(seed))
        assert (order.tolist(), rounds, messages) == oracle(c, s, d, seed)


@MANY
@given(durations_instance(), st.integers(0, 2**63 - 1), st.integers(0, 3))
def test_decentralized_kernels_match_event_simulation(inst, seed, extra_nodes):
    c, s, d, nc, ns = _arrays(inst)
    ns += extra_nodes  # idle I/O nodes shift hash-IOS starting points
    cases = [
        (decentralized.first_ios_sequences(c, nc), first_ios(c, s, d)),
        (
            decentralized.random_ios_sequences(c, s, nc, ns, make_state(seed)),
            random_ios(c, s, d, seed),
        ),
        (decentralized.hash_ios_sequences(c, s, nc, ns), hash_ios(c, s, d, ns)),
    ]
    for (seq, ptr), (o_order, o_start, o_end) in cases:
        order = decentralized.serve_fifo(seq, ptr, s, d, nc, ns)
        assert order.tolist() == o_order
        # the event-driven times are exactly the list schedule of the pop order
        start, end = list_schedule(order.tolist(), c, s, d)
        assert start == o_start and end == o_end


# ---------------------------------------------------------- through schedule()
WHOLE = ["ecf", "fcfs", "mwm", "ms-ml", "ms-ecf", "rand"]
BLOCKS = ["uar", "hdf", "first-ios", "random-ios", "hash-ios"]


def _oracle_order(policy, plan):
    c, s, d = plan.client, plan.ionode, plan.durations
    return {
        "ecf": lambda: ecf(c, s, d)[0],
        "fcfs": lambda: fcfs(c, s, d)[0],
        "ms-ml": lambda: ms_ml(c, s, d)[0],
        "ms-ecf": lambda: ms_ecf(c, s, d)[0],
        "rand": lambda: rand(c, s, d, plan.seed)[0],
        "uar": lambda: rand(c, s, d, plan.seed)[0],
        "hdf": lambda: hdf(c, s, d, plan.seed)[0],
        "first-ios": lambda: first_ios(c, s, d)[0],
        "random-ios": lambda: random_ios(c, s, d, plan.seed)[0],
        "hash-ios": lambda: hash_ios(c, s, d, plan.transfers.n_ionodes)[0],
    }[policy]()


@pytest.mark.parametrize("policy", [p for p in WHOLE if p != "mwm"])
@MANY
@given(
    cols=transfer_columns(),
    seed=st.integers(0, 10**9),
    idle=st.tuples(st.integers(0, 3), st.integers(0, 3)),
)
def test_schedule_whole_transfers_matches_oracle(policy, cols, seed, idle):
    # idle clients / I/O nodes (counts above max id + 1) must change nothing
    ts = orc.TransferSet(
        *cols, n_clients=max(cols[0]) + 1 + idle[0], n_ionodes=max(cols[1]) + 1 + idle[1]
    )
    plan = orc.schedule(ts, policy, cost=UNIT, seed=seed)
    plan.validate()
    assert plan.order.tolist() == _oracle_order(policy, plan)
    assert plan.makespan == pytest.approx(max(list_schedule(plan.order, *cols)[1]))
    assert plan.lower_bound == pytest.approx(lower_bound(*cols))
    assert plan.makespan >= plan.lower_bound * (1 - 1e-12)


@pytest.mark.parametrize("policy", BLOCKS)
@settings(max_examples=250, deadline=None)
@given(cols=transfer_columns(max_bytes=5000), seed=st.integers(0, 10**9), data=st.data())
def test_schedule_block_policies_match_oracle(policy, cols, seed, data):
    block = data.draw(st.integers(max(1, max(cols[2]) // 6), max(cols[2]) + 1), label="block")
    idle = data.draw(st.integers(0, 3), label="idle I/O nodes")
    cost = orc.CostModel(1.0, 1.0, network_latency=0.25, piece_overhead=0.5)
    ts = orc.TransferSet(*cols, n_ionodes=max(cols[1]) + 1 + idle)
    plan = orc.schedule(ts, policy, cost=cost, seed=seed, block_size=block)
    plan.validate()
    parent, offset, size = split_pieces(cols[2], block)
    assert (plan.parent.tolist(), plan.offset.tolist(), plan.nbytes.tolist()) == (
        parent,
        offset,
        size,
    )
    assert plan.durations.tolist() == [b + 0.75 for b in size]
    assert plan.order.tolist() == _oracle_order(policy, plan)


@pytest.mark.parametrize("policy", sorted(orc.policies()))
def test_same_seed_same_plan_and_degenerate_sets(policy):
    ts = orc.TransferSet([0, 0, 0], [0, 0, 0], [7, 7, 7])  # one client, one I/O node, equal sizes
    a = orc.schedule(ts, policy, cost=UNIT, seed=3)
    b = orc.schedule(ts, policy, cost=UNIT, seed=3)
    assert a.order.tolist() == b.order.tolist()
    a.validate()
    # a single link is a chain: nothing beats the sum of the durations, nothing adds idle time
    assert a.makespan == pytest.approx(a.durations.sum())
    huge = orc.TransferSet([0, 1, 2], [0, 1, 0], [10**9, 1, 1])
    plan = orc.schedule(huge, policy, cost="modern", seed=1)
    plan.validate()
    assert plan.makespan >= plan.lower_bound


def test_bidding_paper_figure_2():
    # Wu, Lin & Liu Fig. 2: T1=30 C1->S1, T2=10 C1->S2, T3=10 C2->S2, T4=20 C2->S3.
    ts = orc.TransferSet([0, 0, 1, 1], [0, 1, 1, 2], [30, 10, 10, 20])
    assert orc.schedule(ts, "ecf", cost=UNIT).makespan == 40.0  # the paper's Fig. 2(c)
    fc = orc.schedule(ts, "fcfs", cost=UNIT)  # phase 1 takes T1, T3 (T2 clashes on C1)
    assert (fc.order.tolist(), fc.rounds, fc.makespan) == ([0, 2, 1, 3], 2, 40.0)
    ml = orc.schedule(ts, "ms-ml", cost=UNIT)
    assert (ml.makespan, ml.rounds, ml.messages) == (50.0, 3, 10)
    assert orc.schedule(ts, "ms-ecf", cost=UNIT).makespan == 40.0


def test_clusterfile_figure_1_hash_beats_first():
    # Isaila et al. Fig. 1: two compute nodes each write one block to each of two I/O servers.
    ts = orc.TransferSet([0, 0, 1, 1], [0, 1, 0, 1], [1, 1, 1, 1])
    kw = {"cost": UNIT, "block_size": 1}
    assert orc.schedule(ts, "first-ios", **kw).makespan == 3.0  # "Schedule 1"
    assert orc.schedule(ts, "hash-ios", **kw).makespan == 2.0  # "Schedule 2"


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_decentralized_sequences_on_sparse_wide_sets_match_oracles(n, seed, data):
    # thousands of clients and I/O nodes but few transfers: the kernels switch
    # from a dense (client, I/O node) counting sort to per-client sorting here
    c = np.array(data.draw(st.lists(st.integers(0, 2999), min_size=n, max_size=n)), np.int64)
    s = np.array(data.draw(st.lists(st.integers(0, 1999), min_size=n, max_size=n)), np.int64)
    d = np.array(data.draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=n, max_size=n)))
    nc, ns = 3000, 2000
    assert nc * ns > 4 * n + (1 << 20)
    for (seq, ptr), (o_order, _, _) in (
        (
            decentralized.random_ios_sequences(c, s, nc, ns, make_state(seed)),
            random_ios(c, s, d, seed),
        ),
        (decentralized.hash_ios_sequences(c, s, nc, ns), hash_ios(c, s, d, ns)),
    ):
        assert decentralized.serve_fifo(seq, ptr, s, d, nc, ns).tolist() == o_order


_TEXTS = (
    st.text(max_size=12)
    | st.integers(-5, 10**7).map(str)
    | st.floats(allow_nan=True, allow_infinity=True).map(str)
    | st.sampled_from(["true", "False", "ecf", "mwm", "split-opt", " 7 ", "1e3", "0x10"])
)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_every_declared_option_parses_to_its_kind_or_names_itself(data):
    """A command line's text for any option of any policy: a value of the declared kind
    that the policy then takes, or a PolicyError naming the option — nothing else."""
    p = data.draw(st.sampled_from([q for q in orc.policies().values() if q.options]))
    opt = data.draw(st.sampled_from(p.options))
    # what a user types for a good value comes back as that value
    good = {
        "int": st.integers(opt.low, 10**9),
        "float": st.floats(1e-6, 1e6),
        "bool": st.booleans(),
        "policy": st.sampled_from(["ecf", "mwm"]),
    }[opt.kind]
    valid = data.draw(good)
    assert opt.parse(str(valid), p.name) == valid
    text = data.draw(_TEXTS)
    try:
        value = opt.parse(text, p.name)
    except orc.PolicyError as err:
        assert opt.name in str(err) or "start" in str(err)
        return
    kinds = {"int": int, "float": float, "bool": bool, "policy": str}
    assert type(value) is kinds[opt.kind]
    if opt.kind == "int":
        assert value >= opt.low and not isinstance(value, bool)
    if opt.kind == "float":
        assert np.isfinite(value) and value > 0
    if opt.kind == "policy":
        assert value in orc.policies()
    assert p.check_options({opt.name: value}) == {opt.name: value}


def test_write_options_refuse_a_misspelt_or_mistyped_policy_option_when_made():
    from orchestrator.engine.options import WriteOptions

    with pytest.raises(orc.PolicyError, match="policy 'ecf' has no option 'polcy'"):
        WriteOptions().updated(polcy="ecf")
    with pytest.raises(orc.PolicyError, match="time_limit must be a number > 0, got 'soon'"):
        WriteOptions(policy="exact").updated(time_limit="soon")
    assert WriteOptions(policy="exact").updated(time_limit=2).policy_options == {"time_limit": 2}
