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
    with pytest.raises(InputError, match=field):
        cf.contiguous_stage(**args)


def test_bad_heuristic_and_block_are_named() -> None:
    stg = cf.contiguous_stage(2, 2, 4096, 1024, 1024)
    with pytest.raises(InputError, match=r"heuristic.*'fifo'"):
        cf.piece_sends(stg, 1024, "fifo")
    with pytest.raises(InputError, match=r"block.*1000"):
        cf.piece_sends(stg, 1000, "first")
