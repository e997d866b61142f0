"""Contributions, assignment and layout: checked byte by byte against brute force."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.assignment import assign_holdings
from orchestrator.contributions import Contribution, ContributionError, DatasetSpec, gather
from orchestrator.kernels.holdings import first_holders, holders_of
from orchestrator.layout import LayoutError, StripeLayout, derive_transfers


@st.composite
def stage_case(draw):
    n_rows = draw(st.integers(1, 40))
    width = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(["int8", "float32", "float64"]))
    writer = np.array(draw(st.lists(st.integers(-1, 4), min_size=n_rows, max_size=n_rows)))
    spec = DatasetSpec("u", (n_rows, width), dtype)
    layout = StripeLayout(draw(st.integers(1, 4)), draw(st.integers(1, 3 * spec.row_bytes + 5)))
    return spec, writer, layout


@settings(max_examples=400, deadline=None)
@given(stage_case(), st.sampled_from(["contiguous", "list", "two-phase"]))
def test_pieces_cover_every_written_byte_once_and_are_maximal(case, strategy):
    spec, writer, layout = case
    if (writer < 0).all():
        return
    st_ = derive_transfers(spec, writer, layout, strategy)
    rb = spec.row_bytes
    byte_writer = np.repeat(writer, rb)
    byte_ionode = (np.arange(spec.nbytes) // layout.stripe_bytes) % layout.n_ionodes
    owner = np.full(spec.nbytes, -1)
    for p in range(st_.n_pieces):
        a, b = st_.piece_offset[p], st_.piece_offset[p] + st_.piece_nbytes[p]
        assert (owner[a:b] == -1).all(), "pieces overlap"
        owner[a:b] = p
        assert (byte_writer[a:b] == st_.piece_client[p]).all()
        assert (byte_ionode[a:b] == st_.piece_ionode[p]).all()
    assert ((owner >= 0) == (byte_writer >= 0)).all(), "a written byte is not covered"
    # maximal: neighbouring bytes with the same writer and I/O node share a piece
    same = (byte_writer[1:] == byte_writer[:-1]) & (byte_ionode[1:] == byte_ionode[:-1])
    same &= byte_writer[1:] >= 0
    assert (owner[1:][same] == owner[:-1][same]).all()
    ts = st_.transfers
    assert ts.total_bytes == int((byte_writer >= 0).sum())
    t = st_.piece_transfer
    assert (ts.client[t] == st_.piece_client).all() and (ts.ionode[t] == st_.piece_ionode).all()
    if strategy == "contiguous":
        assert len(ts) == st_.n_pieces
    else:  # one transfer per (client, I/O node) pair
        assert len(ts) == len({(c, s) for c, s in zip(ts.client, ts.ionode, strict=True)})


@settings(max_examples=1000, deadline=None)
@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.dictionaries(
                st.integers(0, 9), st.sets(st.integers(0, n - 1), max_size=n), max_size=6
            ),
        )
    )
)
def test_holders_kernels_match_a_sort(case):
    n_rows, held = case
    clients = sorted(held)
    rows = [np.array(sorted(held[c]), dtype=np.int64) for c in clients]
    starts = np.concatenate(([0], np.cumsum([r.size for r in rows]))).astype(np.int64)
    flat = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    ptr, holders, bad = holders_of(flat, starts, np.array(clients, dtype=np.int64), n_rows)
    assert bad == -1
    # the oracle: every (row, client) pair, sorted
    pairs = sorted((r, c) for c in clients for r in held[c])
    assert holders.tolist() == [c for _, c in pairs]
    assert ptr.tolist() == [sum(1 for r, _ in pairs if r < k) for k in range(n_rows + 1)]
    lowest = [min((c for c in clients if r in held[c]), default=-1) for r in range(n_rows)]
    assert first_holders(ptr, holders).tolist() == lowest


@pytest.mark.parametrize("value, message", [(10**9, "outside"), (-1, "outside"), (2, "order")])
def test_rows_changed_after_the_contribution_was_made_are_named(value, message):
    """A Contribution keeps the caller's sorted rows: changed in place later, they reach
    the kernel unchecked unless it checks them (it wrote outside its arrays: a segfault)."""
    rows = np.arange(10)
    con = Contribution(3, rows, np.zeros(10))
    con.rows[4] = value
    with pytest.raises(ContributionError, match=f"client 3: row {value} .*{message}"):
        gather(DatasetSpec("u", (20,), "f8"), [Contribution(0, [11, 12], np.zeros(2)), con])


def test_gather_finds_replicas_and_owner_assignment():
    spec = DatasetSpec("x", (5, 2), "float64")
    a = Contribution(2, [0, 1, 2], np.arange(6.0).reshape(3, 2))
    b = Contribution(0, [2, 3, 4], np.array([[4.0, 5.0], [6, 7], [8, 9]]))
    h = gather(spec, [a, b], unique=True)
    assert h.count.tolist() == [1, 1, 2, 1, 1] and h.replicated_fraction == pytest.approx(0.2)
    assert assign_holdings(h).tolist() == [2, 2, 0, 0, 0]
    assert assign_holdings(h, [2, 2, 2, 0, 0]).tolist() == [2, 2, 2, 0, 0]


@pytest.mark.parametrize(
    ("contributions", "kwargs", "message"),
    [
        (
            [Contribution(0, [0, 5], np.zeros((2, 2)))],
            {},
            "client 0: row 5 is outside dataset 'x' of 5 rows",
        ),
        ([Contribution(0, [0, 0], np.zeros((2, 2)))], {}, "client 0: row 0 appears twice"),
        ([Contribution(0, [0, 1], np.zeros((2, 3)))], {}, "have shape (2, 3), expected (2, 2)"),
        (
            [Contribution(0, [0, 1], np.zeros((2, 2), complex))],
            {},
            "dtype complex128 cannot be stored",
        ),
        (
            [Contribution(0, [0, 1], np.zeros((2, 2)))],
            {},
            "3 row(s) have no contribution, first row 2",
        ),
        (
            [
                Contribution(0, [0, 1, 2, 3, 4], np.zeros((5, 2))),
                Contribution(1, [4], np.ones((1, 2))),
            ],
            {"unique": True},
            "row 4 is given by clients 0 and 1 with different values",
        ),
        (
            [Contribution(0, [0], np.zeros((1, 2))), Contribution(0, [1], np.zeros((1, 2)))],
            {},
            "client 0 contributes twice",
        ),
    ],
)
def test_bad_contributions_are_named(contributions, kwargs, message):
    with pytest.raises(ContributionError, match=__import__("re").escape(message)):
        gather(DatasetSpec("x", (5, 2), "float64"), contributions, **kwargs)


def test_missing_rows_allowed_and_writer_array_checked():
    spec = DatasetSpec("x", (3,), "int32")
    h = gather(spec, [Contribution(1, [0, 2], np.array([1, 2]))], allow_missing=True)
    assert h.missing.tolist() == [1] and assign_holdings(h).tolist() == [1, -1, 1]
    with pytest.raises(
        ContributionError,
        match=r"row 0 is assigned to client 0, which does not hold it \(holders: \[1\]\)",
    ):
        assign_holdings(h, [0, -1, 1])
    with pytest.raises(ContributionError, match="unknown assignment method 'idg'"):
        assign_holdings(h, "idg")
    with pytest.raises(LayoutError, match="stripe_bytes must be an integer >= 1, got 0"):
        StripeLayout(2, 0)
    with pytest.raises(LayoutError, match="unknown strategy 'collective'"):
        derive_transfers(spec, np.array([1, -1, 1]), StripeLayout(1, 4), "collective")
