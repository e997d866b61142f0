"""A TransferSet laid out as a stage: the engine's layout must derive the same transfers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import TransferSet
from orchestrator.bench import push
from orchestrator.bench import testbed as tbb
from orchestrator.bench.transferstage import transfer_stage
from orchestrator.errors import InputError


@st.composite
def transfer_sets(draw: st.DrawFn) -> tuple[TransferSet, int, int]:
    n_c = draw(st.integers(1, 6))
    n_io = draw(st.integers(1, 5))
    n = draw(st.integers(1, 25))
    c = draw(st.lists(st.integers(0, n_c - 1), min_size=n, max_size=n))
    s = draw(st.lists(st.integers(0, n_io - 1), min_size=n, max_size=n))
    b = draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n))
    row = draw(st.sampled_from([8, 64, 1024]))
    stripe = row * draw(st.integers(1, 8))
    return TransferSet(c, s, b, n_clients=n_c, n_ionodes=n_io), row, stripe


@settings(max_examples=400, deadline=None)
@given(transfer_sets())
def test_the_layout_derives_the_given_transfers(case: tuple[TransferSet, int, int]) -> None:
    ts, row, stripe = case
    stg = transfer_stage(ts, row_bytes=row, stripe_bytes=stripe)
    # the oracle: bytes per (client, I/O node) pair, each transfer rounded up to whole rows
    want: dict[tuple[int, int], int] = {}
    for c, s, b in zip(ts.client.tolist(), ts.ionode.tolist(), ts.nbytes.tolist(), strict=True):
        want[(c, s)] = want.get((c, s), 0) + -(-b // row) * row
    d = stg.transfers
    got = dict(
        zip(zip(d.client.tolist(), d.ionode.tolist(), strict=True), d.nbytes.tolist(), strict=True)
    )
    assert got == want
    # every client's rows are its own, and each row lies in a stripe of its I/O node
    every = np.concatenate(stg.rows)
    assert np.unique(every).size == every.size
    assert every.max() < stg.spec.shape[0]
    per_stripe = stripe // row
    for c, rows in enumerate(stg.rows):
        nodes = (rows // per_stripe) % ts.n_ionodes
        assert set(nodes.tolist()) == {s for (cc, s) in want if cc == c}


def test_bad_rows_are_refused() -> None:
    ts = TransferSet([0], [0], [10])
    with pytest.raises(InputError, match="row_bytes"):
        transfer_stage(ts, row_bytes=12, stripe_bytes=48)
    with pytest.raises(InputError, match="stripe_bytes"):
        transfer_stage(ts, row_bytes=16, stripe_bytes=40)


def test_calibration_predicts_overhead_plus_makespan() -> None:
    from orchestrator import schedule

    cal = tbb.Calibration(overhead=0.5, rate=100.0, per_unit=0.25, samples={})
    plan = schedule(TransferSet([0, 1], [0, 0], [100, 300]), "ecf")
    # two transfers on one I/O node, one after the other: 0.25 + 1 + 0.25 + 3
    assert cal.predict(plan) == pytest.approx(0.5 + 4.5)


def test_sweeps_scale_the_papers() -> None:
    for quick in (False, True):
        for sw in tbb.paper_sweeps(quick):
            for x in sw.xs:
                n = sw.n_clients or 16
                ts = sw.transfers(x, n)
                assert ts.n_ionodes == sw.n_ionodes(x) and ts.n_clients == n
                assert ts.nbytes.max() <= (256 << 10) * 1.05


def _fifo_oracle(sequences: list[list[tuple[int, float]]]) -> float:
    """One-port clients, FCFS I/O nodes, by hand: a client sends its next transfer when the
    last one ends; a node serves arrivals in arrival order (ties: lower client first)."""
    import heapq

    free: dict[int, float] = {}
    ready = [(0.0, c, 0) for c, seq in enumerate(sequences) if seq]
    heapq.heapify(ready)
    end = 0.0
    while ready:
        t, c, k = heapq.heappop(ready)
        node, d = sequences[c][k]
        start = max(t, free.get(node, 0.0))
        free[node] = start + d
        end = max(end, start + d)
        if k + 1 < len(sequences[c]):
            heapq.heappush(ready, (start + d, c, k + 1))
    return end


@settings(max_examples=300, deadline=None)
@given(transfer_sets())
def test_unordered_plan_is_fifo_service_of_each_clients_own_order(
    case: tuple[TransferSet, int, int],
) -> None:
    """The simulator's prediction for the testbed's unordered baseline: whole transfers, each
    client in :func:`client_sequences` order (its workload's first mention of each node),
    FCFS at the I/O nodes."""
    from orchestrator import CostModel

    ts, row, stripe = case
    stg = transfer_stage(ts, row_bytes=row, stripe_bytes=stripe)
    seqs = push.client_sequences(stg)
    d = stg.transfers
    for c, seq in enumerate(seqs):
        # every node the client writes to, once, led by the given workload's order
        assert sorted(seq) == sorted(set(d.ionode[d.client == c].tolist()))
        named = list(dict.fromkeys(ts.ionode[ts.client == c].tolist()))
        assert seq[: len(named)] == named
    cost = CostModel(1000.0, 1000.0, network_latency=0.01)
    load = {
        (int(c), int(s)): cost.duration(np.array([b]))[0]
        for c, s, b in zip(d.client, d.ionode, d.nbytes, strict=True)
    }
    want = _fifo_oracle([[(s, load[(c, s)]) for s in seq] for c, seq in enumerate(seqs)])
    got = push.unordered_plan(stg, cost)
    assert len(got.order) == len(d)  # whole transfers: nothing cut
    assert got.makespan == pytest.approx(want)
    # whole transfers pay no piece overhead, whatever the model charges for pieces
    heavy = dataclasses.replace(cost, piece_overhead=5.0)
    assert push.unordered_plan(stg, heavy).makespan == pytest.approx(want)
