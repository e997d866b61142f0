"""Self-tests of the pure-Python oracles (orchestrator.testing.oracles): hand-worked examples
and invariants."""

import heapq
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import durations_instance, transfer_columns

from orchestrator.testing.oracles import (
    SplitMix64,
    ecf,
    fcfs,
    first_ios,
    first_ios_sequences,
    hash_ios,
    hash_ios_sequences,
    hdf,
    list_schedule,
    lower_bound,
    makespan,
    max_matching_weight,
    ms_ecf,
    ms_ml,
    mwm_check,
    pair_weights,
    rand,
    random_ios,
    random_ios_sequences,
    split_pieces,
)

# The bidding paper's Fig. 2: C1: T1=30 -> S1, T2=10 -> S2; C2: T3=10 -> S2, T4=20 -> S3.
FIG2 = ([0, 0, 1, 1], [0, 1, 1, 2], [30.0, 10.0, 10.0, 20.0])

# 2 clients x 2 I/O nodes, every client has one unit on every node
SQUARE = ([0, 0, 1, 1], [0, 1, 0, 1], [1.0, 1.0, 1.0, 1.0])


# ---------------------------------------------------------------- splitmix64


def test_splitmix64_known_outputs():
    rng = SplitMix64(0)
    assert rng.next() == 0xE220A8397B1DCDAF
    assert rng.next() == 0x6E789E6AA1B965F4


def test_splitmix64_below_formula_and_range():
    a, b = SplitMix64(12345), SplitMix64(12345)
    for n in (1, 2, 3, 7, 1000, 2**31):
        x = a.below(n)
        assert x == ((b.next() >> 32) * n) >> 32
        assert 0 <= x < n
    assert SplitMix64(5).below(1) == 0
    with pytest.raises(ValueError):
        SplitMix64(0).below(0)


def test_splitmix64_wraps_modulo_2_64():
    rng = SplitMix64(2**64 - 1)
    assert 0 <= rng.next() < 2**64
    assert rng.state == (2**64 - 1 + 0x9E3779B97F4A7C15) % 2**64


# ---------------------------------------------------------------- basics


def test_split_pieces():
    parent, offset, piece_bytes = split_pieces([10, 4, 1, 8], 4)
    assert parent == [0, 0, 0, 1, 2, 3, 3]
    assert offset == [0, 4, 8, 0, 0, 0, 4]
    assert piece_bytes == [4, 4, 2, 4, 1, 4, 4]


def test_list_schedule_indexed_by_unit():
    start, end = list_schedule([3, 2, 1, 0], *FIG2)
    # 3: c1,s2 0-20; 2: c1,s1 20-30; 1: c0,s1 30-40; 0: c0,s0 40-70
    assert start == [40.0, 30.0, 20.0, 0.0]
    assert end == [70.0, 40.0, 30.0, 20.0]
    with pytest.raises(AssertionError):
        list_schedule([0, 1, 2], *FIG2)


def test_lower_bound():
    assert lower_bound(*FIG2) == 40.0  # client 0: 30 + 10
    assert lower_bound([0, 1, 2], [0, 0, 0], [1.0, 2.0, 3.0]) == 6.0  # one I/O node


# ---------------------------------------------------------------- Fig. 2 by hand


def test_ecf_fig2():
    # completions 30,10,10,20 -> unit 1 (10, lowest index); then 40,20,20 -> unit 2;
    # then 40,40 -> unit 0; then unit 3 at 40.
    order, rounds, messages = ecf(*FIG2)
    assert order == [1, 2, 0, 3]
    assert (rounds, messages) == (0, 0)
    assert makespan(order, *FIG2) == 40.0 == lower_bound(*FIG2)


def test_fcfs_fig2():
    order, rounds, messages = fcfs(*FIG2)
    assert order == [0, 2, 1, 3]
    assert (rounds, messages) == (2, 0)
    assert makespan(order, *FIG2) == 40.0


def test_ms_ml_fig2():
    # r1: c0 -> u0 (S1), c1 -> u3 (S3), both accepted; loads 10, 10.
    # r2: both propose on S2; equal load -> lowest unit index, u1. r3: u2.
    order, rounds, messages = ms_ml(*FIG2)
    assert order == [0, 3, 1, 2]
    assert rounds == 3
    assert messages == 2 * (2 + 2 + 1)
    assert makespan(order, *FIG2) == 50.0


def test_ms_ml_prefers_larger_load():
    # both clients propose to I/O node 0; client 1 has the larger load
    client, ionode, d = [0, 1, 1], [0, 0, 1], [5.0, 3.0, 3.0]
    order, rounds, _ = ms_ml(client, ionode, d)
    # r1: c0 -> u0 (load 5), c1 -> u1 (load 6) -> u1 wins.
    # r2: c0 -> u0 (5), c1 -> u2 on node 1: both accepted.
    assert order == [1, 0, 2]
    assert rounds == 2


def test_ms_ecf_fig2():
    # r1: c0 -> u1, c1 -> u2, both on S2 with completion 10: lowest index u1.
    # r2: c0 -> u0 (10+30), c1 -> u2 (10+10): both accepted. r3: u3 at 20..40.
    order, rounds, messages = ms_ecf(*FIG2)
    assert order == [1, 0, 2, 3]
    assert rounds == 3
    assert messages == 10
    assert makespan(order, *FIG2) == 40.0


# ---------------------------------------------------------------- mwm checker


def test_mwm_check_fig2():
    # pair weights: (0,0)=30 (0,1)=10 (1,1)=10 (1,2)=20; best matching 30+20
    mwm_check(*FIG2, [[0, 3], [1], [2]])
    mwm_check(*FIG2, [[0, 3], [2], [1]])
    with pytest.raises(AssertionError, match="maximum matching weight"):
        mwm_check(*FIG2, [[0], [3], [1], [2]])
    with pytest.raises(AssertionError, match="I/O node twice"):
        mwm_check(*FIG2, [[0, 3], [1, 2]])
    with pytest.raises(AssertionError, match="never scheduled"):
        mwm_check(*FIG2, [[0, 3], [1]])
    with pytest.raises(AssertionError, match="again"):
        mwm_check(*FIG2, [[0, 3], [1], [2], [2]])
    with pytest.raises(AssertionError, match="increasing"):
        mwm_check(*FIG2, [[3, 0], [1], [2]])


def test_mwm_check_representatives():
    # three units of the same pair: d 2, 3, 3 -> representative is unit 1, then 2, then 0
    client, ionode, d = [0, 0, 0], [0, 0, 0], [2.0, 3.0, 3.0]
    mwm_check(client, ionode, d, [[1], [2], [0]])
    with pytest.raises(AssertionError, match="representative"):
        mwm_check(client, ionode, d, [[2], [1], [0]])
    with pytest.raises(AssertionError, match="representative"):
        mwm_check(client, ionode, d, [[0], [1], [2]])
    assert pair_weights({0, 1, 2}, client, ionode, d) == {(0, 0): (3.0, 1)}


def _greedy_valid_mwm_steps(client, ionode, d):
    """A valid mwm run built by brute force (for testing the checker on random inputs)."""
    pending = set(range(len(d)))
    steps = []
    while pending:
        pairs = pair_weights(pending, client, ionode, d)
        items = sorted(pairs.items())
        best, best_w = None, -1.0
        for r in range(1, len(items) + 1):
            for subset in itertools.combinations(items, r):
                cs = {c for (c, _), _ in subset}
                ss = {s for (_, s), _ in subset}
                w = sum(wt for _, (wt, _) in subset)
                if len(cs) == r and len(ss) == r and w > best_w:
                    best, best_w = subset, w
        step = sorted(rep for _, (_, rep) in best)
        steps.append(step)
        pending -= set(step)
    return steps


@settings(max_examples=60, deadline=None)
@given(durations_instance(max_clients=3, max_ionodes=3, max_units=7))
def test_mwm_check_accepts_brute_force_runs(inst):
    mwm_check(*inst, _greedy_valid_mwm_steps(*inst))


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.integers(0, 3), st.integers(0, 3)),
        st.one_of(st.sampled_from([1.0, 2.0, 3.0]), st.floats(0.01, 100.0)),
        min_size=1,
        max_size=10,
    )
)
def test_matching_weight_brute_force_agrees_with_networkx(edges):
    brute = max_matching_weight(edges, method="brute")
    nx_weight = max_matching_weight(edges, method="networkx")
    assert math.isclose(brute, nx_weight, rel_tol=1e-9)


# ---------------------------------------------------------------- decentralized by hand


def test_hash_ios_square():
    # c0 starts at node 0: u0 then u1; c1 starts at node 1: u3 then u2. No conflicts.
    assert hash_ios_sequences(*SQUARE, 2) == [[0, 1], [3, 2]]
    order, start, end = hash_ios(*SQUARE, 2)
    assert start == [0.0, 1.0, 1.0, 0.0]
    assert end == [1.0, 2.0, 2.0, 1.0]
    assert max(end) == 2.0
    assert order == [0, 3, 1, 2]


def test_first_ios_square():
    # both clients hit node 0 at time 0: c0 first, c1 waits; then they chase each other.
    order, start, end = first_ios(*SQUARE)
    assert start == [0.0, 1.0, 1.0, 2.0]
    assert max(end) == 3.0
    assert order == [0, 2, 1, 3]  # u2 arrived at t=0 (and waited), u1 at t=1


def test_hash_ios_pointer_uses_passed_n_ionodes():
    # client 2 with n_ionodes=4 starts at node 2 (which it does not use): goes to 3, then 0
    client, ionode, d = [2, 2, 2], [0, 3, 0], [1.0, 1.0, 1.0]
    assert hash_ios_sequences(client, ionode, d, 4) == [[], [], [1, 0, 2]]
    # with n_ionodes=5 it starts at node 2 again; with 6 ... still node 2; with 7, 2.
    # client 5 with n_ionodes=4 starts at node 1 -> 3 first
    client = [5, 5, 5]
    assert hash_ios_sequences(client, ionode, d, 4)[5] == [1, 0, 2]
    # client 4 with n_ionodes=4 starts at node 0
    client = [4, 4, 4]
    assert hash_ios_sequences(client, ionode, d, 4)[4] == [0, 1, 2]


def test_fifo_arrival_order_not_client_order():
    # c1 reaches node 0 at t=1 (after u1), c0 reaches it at t=2 (after u0): FIFO serves c1 first
    client, ionode, d = [0, 1, 0, 1], [1, 2, 0, 0], [2.0, 1.0, 5.0, 5.0]
    order, start, end = first_ios(client, ionode, d)
    assert start == [0.0, 0.0, 6.0, 1.0]
    assert end == [2.0, 1.0, 11.0, 6.0]
    assert order == [0, 1, 3, 2]


def test_simultaneous_arrivals_by_client_id():
    # c1 and c0 both arrive at node 0 at t=1; c0 (lower id) is served first
    client, ionode, d = [1, 0, 1, 0], [1, 2, 0, 0], [1.0, 1.0, 1.0, 1.0]
    _, start, _ = first_ios(client, ionode, d)
    assert start == [0.0, 0.0, 2.0, 1.0]


def test_decentralized_order_arrival_vs_start():
    # u2 (c1) arrives at node 0 at t=0 and waits until 3; u1 (c0) arrives at node 1 at 3
    client, ionode, d = [0, 0, 1, 1], [0, 1, 0, 2], [3.0, 1.0, 1.0, 1.0]
    order, start, _ = first_ios(client, ionode, d)
    assert start == [0.0, 3.0, 3.0, 4.0]
    assert order == [0, 2, 1, 3]  # by (arrival, client): u2 arrived at 0
    order_s, _, _ = first_ios(client, ionode, d, order_by="start")
    assert order_s == [0, 1, 2, 3]  # by (start, client)


def test_random_ios_sequence_trace():
    # one client, nodes 0 (units 0, 2) and 1 (unit 1); client 1 has unit 3 on node 0
    client, ionode, d = [0, 0, 0, 1], [0, 1, 0, 0], [1.0] * 4
    rng = SplitMix64(7)
    nodes = [0, 1]
    queues = {0: [0, 2], 1: [1]}
    expect0 = []
    while nodes:
        p = rng.below(len(nodes))
        s = nodes[p]
        expect0.append(queues[s].pop(0))
        if not queues[s]:
            nodes[p] = nodes[-1]
            nodes.pop()
    rng.below(1)  # client 1's single draw
    assert random_ios_sequences(client, ionode, d, 7) == [expect0, [3]]


# ---------------------------------------------------------------- random bidding traces


def test_rand_trace_one_client_one_node():
    client, ionode, d = [0, 0, 0], [0, 0, 0], [1.0, 1.0, 1.0]
    rng = SplitMix64(3)
    lst, expect = [0, 1, 2], []
    while lst:
        p = rng.below(len(lst))
        assert rng.below(1) == 0  # the I/O node draws even with one proposal
        expect.append(lst[p])
        lst[p] = lst[-1]
        lst.pop()
    assert rand(client, ionode, d, 3) == (expect, 3, 6)


def test_rand_trace_two_clients_one_node():
    client, ionode, d = [0, 1], [0, 0], [1.0, 1.0]
    rng = SplitMix64(11)
    assert rng.below(1) == 0 and rng.below(1) == 0  # both clients propose their only unit
    first = [0, 1][rng.below(2)]
    order, rounds, messages = rand(client, ionode, d, 11)
    assert order == [first, 1 - first]
    assert (rounds, messages) == (2, 2 * 3)


def test_hdf_highest_degree_then_lowest_client():
    # c0 has 1 unit, c1 has 2, all on node 0: r1 degree 2 > 1, c1 wins;
    # r2 degrees 1 = 1, c0 (lower id) wins; r3 c1's last unit
    client, ionode, d = [0, 1, 1], [0, 0, 0], [1.0, 1.0, 1.0]
    order, rounds, messages = hdf(client, ionode, d, 0)
    assert order[1] == 0
    assert sorted([order[0], order[2]]) == [1, 2]
    assert (rounds, messages) == (3, 2 * (2 + 2 + 1))
    # equal degree: lower client id wins
    order, _, _ = hdf([1, 0], [0, 0], [1.0, 1.0], 0)
    assert order == [1, 0]


# ---------------------------------------------------------------- invariants


def _heap_shortcut(client, ionode, d, sequences):
    """The spec's heap formulation of the decentralized simulation (cross-check only)."""
    n_ionodes = max(ionode) + 1
    ionode_free = [0.0] * n_ionodes
    nxt = [0] * len(sequences)
    heap = [(0.0, c) for c in range(len(sequences)) if sequences[c]]
    heapq.heapify(heap)
    order, start, end = [], [0.0] * len(d), [0.0] * len(d)
    while heap:
        t, c = heapq.heappop(heap)
        u = sequences[c][nxt[c]]
        nxt[c] += 1
        start[u] = max(t, ionode_free[ionode[u]])
        end[u] = start[u] + d[u]
        ionode_free[ionode[u]] = end[u]
        order.append(u)
        if nxt[c] < len(sequences[c]):
            heapq.heappush(heap, (end[u], c))
    return order, start, end


def _is_permutation(order, n):
    return isinstance(order, list) and sorted(order) == list(range(n))


@settings(max_examples=300, deadline=None)
@given(durations_instance(), st.integers(0, 2**64 - 1))
def test_all_oracles_invariants(inst, seed):
    client, ionode, d = inst
    n = len(d)
    lb = lower_bound(client, ionode, d)

    for policy in (ecf, fcfs, ms_ml, ms_ecf):
        order, rounds, messages = policy(client, ionode, d)
        assert _is_permutation(order, n), policy.__name__
        assert makespan(order, client, ionode, d) >= lb * (1 - 1e-12)
    for policy in (rand, hdf):
        order, rounds, messages = policy(client, ionode, d, seed)
        assert _is_permutation(order, n)
        assert rounds >= 1 and messages % 2 == 0 and messages >= 2 * n
        assert policy(client, ionode, d, seed) == (order, rounds, messages)  # reproducible

    n_ionodes = max(ionode) + 1
    runs = {
        "first": (first_ios_sequences(client, ionode, d), first_ios(client, ionode, d)),
        "random": (
            random_ios_sequences(client, ionode, d, seed),
            random_ios(client, ionode, d, seed),
        ),
        "hash": (
            hash_ios_sequences(client, ionode, d, n_ionodes + 1),
            hash_ios(client, ionode, d, n_ionodes + 1),
        ),
    }
    for name, (sequences, (order, start, end)) in runs.items():
        assert _is_permutation(order, n), name
        assert list_schedule(order, client, ionode, d) == (start, end), name
        assert _heap_shortcut(client, ionode, d, sequences) == (order, start, end), name
        assert max(end) >= lb * (1 - 1e-12)
        # each client's units run in its sequence order, back to back
        for seq in sequences:
            for a, b in itertools.pairwise(seq):
                assert end[a] <= start[b]


@settings(max_examples=200, deadline=None)
@given(durations_instance())
def test_ecf_is_greedy_earliest_completion(inst):
    client, ionode, d = inst
    order, _, _ = ecf(client, ionode, d)
    _, end = list_schedule(order, client, ionode, d)
    # each chosen unit's completion is minimal among units not yet chosen, at that moment
    cf, sf = {}, {}
    for k, u in enumerate(order):
        best = min(
            (max(cf.get(client[v], 0.0), sf.get(ionode[v], 0.0)) + d[v], v) for v in order[k:]
        )
        assert best == (end[u], u)
        cf[client[u]] = sf[ionode[u]] = end[u]


@settings(max_examples=200, deadline=None)
@given(durations_instance())
def test_fcfs_is_first_fit_edge_colouring(inst):
    client, ionode, d = inst
    order, phases, _ = fcfs(client, ionode, d)
    # first-fit colouring in index order: colour = smallest not used by earlier units
    # sharing the client or the I/O node
    colour = []
    for u in range(len(d)):
        used = {colour[v] for v in range(u) if client[v] == client[u] or ionode[v] == ionode[u]}
        colour.append(min(set(range(len(d) + 1)) - used))
    expected = sorted(range(len(d)), key=lambda u: (colour[u], u))
    assert order == expected
    assert phases == max(colour) + 1


@settings(max_examples=200, deadline=None)
@given(durations_instance())
def test_bidding_rounds_are_matchings(inst):
    client, ionode, d = inst
    for policy in (ms_ml, ms_ecf):
        _, rounds, messages = policy(client, ionode, d)
        # lower bounds on rounds: the most loaded client/node needs that many rounds
        per_client = max(client.count(c) for c in set(client))
        per_node = max(ionode.count(s) for s in set(ionode))
        assert rounds >= max(per_client, per_node)
        assert 2 * len(d) <= messages <= 2 * rounds * len(set(client))


@settings(max_examples=100, deadline=None)
@given(transfer_columns(), st.sampled_from([1, 4096, 32768, 65536]))
def test_strategy_and_pieces(cols, block):
    client, ionode, nbytes = cols
    assert len(client) == len(ionode) == len(nbytes) >= 1
    assert all(0 <= c < 6 for c in client) and all(0 <= s < 5 for s in ionode)
    assert all(1 <= b <= 10**6 for b in nbytes)
    if block == 1:
        nbytes = [min(b, 50) for b in nbytes]
    parent, offset, piece_bytes = split_pieces(nbytes, block)
    assert parent == sorted(parent)
    for i, n in enumerate(nbytes):
        mine = [k for k, p in enumerate(parent) if p == i]
        assert len(mine) == -(-n // block)
        assert sum(piece_bytes[k] for k in mine) == n
        assert [offset[k] for k in mine] == [j * block for j in range(len(mine))]


def test_numpy_inputs_give_plain_outputs():
    np = pytest.importorskip("numpy")
    client, ionode, d = (np.asarray(x) for x in FIG2)
    order, rounds, _ = ecf(client, ionode, d)
    assert order == [1, 2, 0, 3] and type(order[0]) is int and type(rounds) is int
    _, start, _ = hash_ios(client, ionode, d, np.int64(3))
    assert type(start[0]) is float
    assert type(lower_bound(client, ionode, d)) is float
