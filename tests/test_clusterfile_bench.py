"""The Clusterfile paper's heuristics as clients push them: the blocks each client sends,
their orders, and the simulator's account of the run, against slow obvious oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import CostModel
from orchestrator.bench import clusterfile as cf
from orchestrator.errors import InputError
from orchestrator.testing.oracles import first_ios


@st.composite
def cases(draw: st.DrawFn) -> tuple[cf.TransferStage, int, str, int]:
    row = draw(st.sampled_from([8, 64, 512]))
    stripe = row * draw(st.integers(1, 4))
    n_c = draw(st.integers(1, 5))
    n_io = draw(st.integers(1, 5))
    per_client = row * draw(st.integers(1, 40))
    block = row * draw(st.integers(1, 12))
    stg = cf.contiguous_stage(n_c, n_io, per_client, row, stripe)
    return stg, block, draw(st.sampled_from(cf.HEURISTICS)), draw(st.integers(0, 3))


def sends_equal(a: list, b: list) -> bool:
    return [[(s, r.tolist()) for s, r in m] for m in a] == [
        [(s, r.tolist()) for s, r in m] for m in b
    ]


@settings(max_examples=400, deadline=None)
@given(cases())
def test_blocks_partition_each_clients_rows_in_the_heuristics_order(
    case: tuple[cf.TransferStage, int, str, int],
) -> None:
    stg, block, h, seed = case
    per_stripe = stg.stripe_bytes // stg.spec.row_bytes
    n = stg.transfers.n_ionodes
    sends = cf.piece_sends(stg, block, h, seed)
    assert sends_equal(sends, cf.piece_sends(stg, block, h, seed))  # deterministic
    for c, mine in enumerate(sends):
        got = np.concatenate([r for _, r in mine]) if mine else np.zeros(0, np.int64)
        assert sorted(got.tolist()) == stg.rows[c].tolist()  # every row once
        for s, r in mine:
            assert 0 < r.size * stg.spec.row_bytes <= block
            assert ((r // per_stripe) % n == s).all()  # a block stays on its node
        # per node, blocks go in file order and only the last may be short
        for s in {s for s, _ in mine}:
            mine_s = [r for t, r in mine if t == s]
            assert all(a[-1] < b[0] for a, b in itertools.pairwise(mine_s))
            assert all(r.size * stg.spec.row_bytes == block for r in mine_s[:-1])
        nodes = [s for s, _ in mine]
        if h == "first":
            firsts = [int(r[0]) for _, r in mine]
            assert firsts == sorted(firsts)
        elif h == "hash":
            # by hand: step j goes to the first node at or after the last one + 1 (from c)
            left = {s: nodes.count(s) for s in set(nodes)}
            want, step = [], c
            while left:
                s = next((step + k) % n for k in range(n) if (step + k) % n in left)
                want.append(s)
                left[s] -= 1
                if not left[s]:
                    del left[s]
                step = s + 1
            assert nodes == want


@settings(max_examples=200, deadline=None)
@given(cases())
def test_the_simulated_run_is_fcfs_service_of_the_blocks(
    case: tuple[cf.TransferStage, int, str, int],
) -> None:
    stg, block, h, seed = case
    sends = cf.piece_sends(stg, block, h, seed)
    cost = CostModel(4096.0, 4096.0, network_latency=0.003)
    rb = stg.spec.row_bytes

    def d(r: np.ndarray) -> float:
        return float(cost.duration(np.array([r.size * rb]))[0])

    # the units client by client, each client's in its sending order: the oracle's first-IOS
    # serves each client's units in id order against FCFS nodes
    units = [(c, s, d(r)) for c, mine in enumerate(sends) for s, r in mine]
    _, _, end = first_ios(*(list(col) for col in zip(*units, strict=True)))
    want = max(end)
    assert cf.pieces_plan(stg, sends, cost).makespan == pytest.approx(want)


def test_random_is_seeded_and_differs_by_seed() -> None:
    stg = cf.contiguous_stage(4, 4, 64 * 1024, 1024, 1024)
    a = [[s for s, _ in m] for m in cf.piece_sends(stg, 1024, "random", 0)]
    assert a == [[s for s, _ in m] for m in cf.piece_sends(stg, 1024, "random", 0)]
    assert a != [[s for s, _ in m] for m in cf.piece_sends(stg, 1024, "random", 1)]


def test_first_ios_convoys_and_hash_ios_does_not() -> None:
    """The paper's effect in the simulator: with whole per-node blocks every client starts
    at node 0 under first-IOS and they pipeline behind each other; hash-IOS is at the bound."""
    n = 8
    stg = cf.contiguous_stage(n, n, n * 4096, 1024, 4096)  # 4 KiB per client per node
    cost = CostModel(4096.0, 4096.0)  # a block: 1 s
    first = cf.pieces_plan(stg, cf.piece_sends(stg, 4096, "first"), cost).makespan
    hashed = cf.pieces_plan(stg, cf.piece_sends(stg, 4096, "hash"), cost).makespan
    assert hashed == n  # every node busy from 0 to n
    assert first == 2 * n - 1  # the last client starts at n - 1 and needs n more


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"row_bytes": 12}, "row_bytes"),
        ({"per_client": 1000}, "per_client"),
        ({"stripe_bytes": 1000}, "stripe_bytes"),
    ],
)
def test_bad_stage_arguments_are_named(kw: dict[str, int], field: str) -> None:
    args = {"n_clients": 2, "n_ionodes": 2, "per_client": 4096, "row_bytes": 1024}
    args |= {"stripe_bytes": 1024, **kw}
    with pytest.raises(InputError, match=f"^{field} must be"):
        cf.contiguous_stage(**args)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.sampled_from([1, 2, 4]))
def test_the_papers_orders_on_a_whole_number_of_stripe_rounds(
    n_c: int, n_io: int, rounds: int, per_stripe: int
) -> None:
    """Each client's share a whole number of stripe rounds, blocks of a stripe or less:
    hash-IOS sends block j to node (c + j) mod n (the paper's rule, no skipping needed), and
    first-IOS sends in file order, every client starting at node 0."""
    row, stripe = 64, 64 * 4
    block = stripe // per_stripe
    stg = cf.contiguous_stage(n_c, n_io, rounds * n_io * stripe, row, stripe)
    total = rounds * n_io * per_stripe  # blocks per client
    for c, mine in enumerate(cf.piece_sends(stg, block, "hash")):
        # every node gets the same number of blocks, so the cycle never has to skip
        assert [s for s, _ in mine] == [(c + j) % n_io for j in range(total)]
    for mine in cf.piece_sends(stg, block, "first"):
        assert [s for s, _ in mine] == [j // per_stripe % n_io for j in range(total)]


def test_bad_heuristic_and_block_are_named() -> None:
    stg = cf.contiguous_stage(2, 2, 4096, 1024, 1024)
    with pytest.raises(InputError, match=r"heuristic.*'fifo'"):
        cf.piece_sends(stg, 1024, "fifo")
    with pytest.raises(InputError, match=r"block.*1000"):
        cf.piece_sends(stg, 1000, "first")
    with pytest.raises(InputError, match=r"block.*1024\.0"):
        cf.piece_sends(stg, 1024.0, "first")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"seed.*-1"):
        cf.piece_sends(stg, 1024, "random", seed=-1)
    with pytest.raises(InputError, match="sends"):
        cf.pieces_plan(stg, [[], []], CostModel(1.0, 1.0))
