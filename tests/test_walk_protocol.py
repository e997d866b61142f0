"""The walkers' protocol under every interleaving hypothesis finds: every item processed
exactly once, termination never declared early, and always declared in the end."""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import InputError
from orchestrator.treewalk.protocol import SPLITS, Message, Walker


def random_tree(rng: random.Random, size: int, shape: str) -> dict[int, list[int]]:
    """Item 0 is the root; ``deep``: a chain, ``wide``: a star, ``skewed``: one heavy branch,
    ``random``: each item hangs under a random earlier one."""
    kids: dict[int, list[int]] = {i: [] for i in range(size)}
    for i in range(1, size):
        if shape == "deep":
            parent = i - 1
        elif shape == "wide":
            parent = 0
        elif shape == "skewed":
            parent = i - 1 if rng.random() < 0.8 else rng.randrange(i)
        else:
            parent = rng.randrange(i)
        kids[parent].append(i)
    return kids


def run(
    tree: dict[int, list[int]],
    walkers: list[Walker],
    rng: random.Random,
    speed: list[float],
    limit: int,
) -> tuple[Counter[int], int]:
    """Drive the walkers by a random schedule: deliver any message in flight (no order
    kept between messages), let a walker step (or step without asking: backing off),
    take an item or finish one it holds — each walker at its own ``speed``; a walker may
    hold several items at once, as H-DRQS's threads do. Checks at each step that no
    walker stops with work left."""
    walkers[0].put([0])
    flight: list[Message] = []
    seen: Counter[int] = Counter()
    hands: list[list[int]] = [[] for _ in walkers]
    n = len(walkers)
    for t in range(limit):
        if all(w.done for w in walkers) and not any(m.kind == "work" for m in flight):
            return seen, t
        if flight and rng.random() < 0.5:
            m = flight.pop(rng.randrange(len(flight)))
            walkers[m.dst].receive(m)
            continue
        w = rng.choices(walkers, weights=speed)[0]
        if w.done:
            assert not hands[w.rank], "stopped holding items"
            continue
        hand = hands[w.rank]
        r = rng.random()
        if hand and r < 0.3:
            item = hand.pop(rng.randrange(len(hand)))
            seen[item] += 1
            w.finish(tree[item])
        elif w.queue and r < 0.6 and len(hand) < 3:
            hand.append(w.take())
        else:
            flight += w.step(ask=rng.random() < 0.8)
        if w.done or walkers[0].done:
            # the root concluded: nothing may be left anywhere
            left = sum(len(x.queue) + len(h) for x, h in zip(walkers, hands, strict=True))
            moving = sum(len(m.items) for m in flight)
            assert left == 0 and moving == 0, f"stopped with {left} queued, {moving} in flight"
            assert sum(seen.values()) == len(tree)
    raise AssertionError(f"no termination after {limit} steps (n={n})")


@st.composite
def walks(draw: st.DrawFn) -> tuple[dict[int, list[int]], list[Walker], random.Random, list[float]]:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    size = draw(st.sampled_from([1, 2, 3, draw(st.integers(1, 120))]))
    tree = random_tree(rng, size, draw(st.sampled_from(["deep", "wide", "skewed", "random"])))
    n = draw(st.integers(1, 8))
    split = draw(st.sampled_from(SPLITS))
    if draw(st.booleans()):
        hosts = [draw(st.integers(0, 2)) for _ in range(n)]
        ws = [Walker(r, n, split, "proximity", hosts, seed) for r in range(n)]
    else:
        ws = [Walker(r, n, split, seed=seed) for r in range(n)]
    # some walkers slow at random: they get fewer turns
    speed = [draw(st.sampled_from([1.0, 0.2, 0.02])) for _ in range(n)]
    return tree, ws, rng, speed


@settings(max_examples=600, deadline=None)
@given(walks())
def test_every_item_once_and_termination_neither_early_nor_never(case) -> None:
    tree, ws, rng, speed = case
    # a smaller limit (IORCH_WALK_LIMIT) makes a hang show fast when checking mutants
    seen, _ = run(tree, ws, rng, speed, limit=int(os.environ.get("IORCH_WALK_LIMIT", "400000")))
    assert seen == Counter(range(len(tree)))  # every item, each once
    assert all(w.done for w in ws)
    assert all(not w.queue for w in ws)


def test_a_lone_walker_stops_when_its_queue_is_empty() -> None:
    w = Walker(0, 1)
    w.put(["a", "b"])
    assert w.step() == [] and not w.done  # busy: nothing to say, nobody to ask
    w.take(), w.take()
    assert w.step() == [] and not w.done  # two items in hand: their children may come
    w.finish(["c"])
    w.finish()
    assert w.step() == [] and not w.done
    w.take()
    w.finish()
    assert w.step() == [] and w.done


def test_sending_work_to_a_lower_rank_blackens_and_the_token_carries_it() -> None:
    ws = [Walker(r, 3, split="equal") for r in range(3)]
    ws[2].put(["x", "y", "z"])
    ws[2].receive(Message("request", 1, 2))
    out = ws[2].step()
    assert [(m.kind, m.dst, len(m.items)) for m in out] == [("work", 1, 1)]
    assert ws[2].black
    ws[2].take(), ws[2].take()
    ws[2].finish(), ws[2].finish()
    ws[2].receive(Message("token", 1, 2))  # white token arrives while rank 2 is idle
    out = ws[2].step()
    tok = next(m for m in out if m.kind == "token")
    assert tok.dst == 0 and tok.black and not ws[2].black
    # the root, idle, gets the black token back: it does not conclude, it starts anew
    ws[0].token_out = True
    ws[0].receive(tok)
    out = ws[0].step()
    assert not ws[0].done and [m.kind for m in out] == ["token", "request"]


def test_a_waiting_walker_holds_the_token() -> None:
    w = Walker(1, 3)
    [req] = w.step()
    assert req.kind == "request" and w.waiting
    w.receive(Message("token", 0, 1))
    assert w.step() == []  # not idle: its answer may bring work
    w.receive(Message("nowork", req.dst, 1))
    out = w.step()
    assert [m.kind for m in out] == ["token", "request"]  # idle a moment: passes it on


def test_equal_split_gives_each_asker_a_part_and_keeps_one() -> None:
    w = Walker(0, 4, split="equal")
    w.put(list(range(7)))
    for a in (1, 2, 3):
        w.receive(Message("request", a, 0))
    out = w.step()
    assert [len(m.items) for m in out] == [2, 2, 1] and len(w.queue) == 2
    w2 = Walker(0, 4, split="equal")
    w2.put([1, 2])
    for a in (1, 2, 3):
        w2.receive(Message("request", a, 0))
    assert [m.kind for m in w2.step()] == ["work", "nowork", "nowork"]
    assert len(w2.queue) == 1


def test_proximity_vector_local_first_but_the_hosts_first_rank_asks_remote() -> None:
    hosts = ["a", "a", "a", "b", "b"]
    first = Walker(0, 5, victims="proximity", hosts=hosts)
    other = Walker(1, 5, victims="proximity", hosts=hosts)
    asked = []
    for _ in range(4):
        m = first.step()[-1]
        asked.append(m.dst)
        first.receive(Message("nowork", m.dst, 0))
    assert sorted(asked) == [3, 3, 4, 4]  # only remote ranks, round robin
    dsts = []
    for _ in range(4):
        [m] = other.step()
        dsts.append(m.dst)
        other.receive(Message("nowork", m.dst, 1))
    assert dsts == [0, 2, 0, 2]  # co-located ranks, in rank order, round robin


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"rank": 3, "n": 3}, "rank"),
        ({"rank": 0, "n": 0}, "n"),
        ({"rank": 0, "n": 2, "split": "half"}, "split"),
        ({"rank": 0, "n": 2, "victims": "nearest"}, "victims"),
        ({"rank": 0, "n": 2, "victims": "proximity"}, "hosts"),
        ({"rank": 0, "n": 2, "hosts": ["a"]}, "hosts"),
    ],
)
def test_bad_arguments_are_named(kw: dict, field: str) -> None:
    with pytest.raises(InputError, match=field):
        Walker(**kw)


def test_a_random_split_keeps_at_least_one_item() -> None:
    for seed in range(50):
        w = Walker(0, 3, split="random", seed=seed)
        w.put(list(range(5)))
        w.receive(Message("request", 1, 0))
        w.receive(Message("request", 2, 0))
        out = w.step()
        given = sum(len(m.items) for m in out)
        assert 1 <= given <= 4 and len(w.queue) == 5 - given
        assert out[0].kind == "work"  # the first asker always gets a share


def test_finish_without_take_is_refused_and_backing_off_holds_the_request() -> None:
    w = Walker(1, 3)
    with pytest.raises(InputError, match="finish"):
        w.finish()
    assert w.step(ask=False) == [] and w.idle  # no request: still idle
    w.receive(Message("token", 0, 1))
    assert [m.kind for m in w.step(ask=False)] == ["token"]  # an idle walker passes it
    [req] = w.step()
    w.receive(Message("nowork", req.dst, 1))
    assert w.refused == 1
    [req] = w.step()
    w.receive(Message("work", req.dst, 1, ("a",)))
    assert w.refused == 0 and w.queue == ["a"]
