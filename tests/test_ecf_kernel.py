"""The array-slot ECF kernel against the linked-list kernel it replaced.

ECF is a function of its input (each step takes the pending unit of
smallest ``(max(client free, I/O-node free) + d, id)``), so the rewrite must
return the very same permutation: checked on thousands of random instances
rich in ties (equal sizes, sizes whose sums round alike, zero durations),
with one client, one I/O node, and the (d, id) radix sort on its own.
"""

import numpy as np
from ecf_reference import ecf as ecf_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import durations_instance

from orchestrator.kernels import greedy
from orchestrator.testing.oracles import ecf as ecf_oracle

MANY = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# completions that round alike: 0.1 + 0.2 == 0.30000000000000004 != 0.3
_TIE_PRONE = (0.1, 0.2, 0.3, 0.30000000000000004, 1e-17, 1.0, 2.0, 0.0)


@st.composite
def _instance(draw):
    n = draw(st.integers(1, 120))
    shape = draw(st.sampled_from(("general", "one_client", "one_ionode", "one_pair", "wide")))
    nc = 1 if shape in ("one_client", "one_pair") else draw(st.integers(1, 9))
    ns = 1 if shape in ("one_ionode", "one_pair") else draw(st.integers(1, 9))
    if shape == "wide":  # many idle nodes: ids spread, counts larger than used
        nc, ns = nc + draw(st.integers(0, 40)), ns + draw(st.integers(0, 40))
    client = draw(st.lists(st.integers(0, nc - 1), min_size=n, max_size=n))
    ionode = draw(st.lists(st.integers(0, ns - 1), min_size=n, max_size=n))
    kind = draw(st.sampled_from(("equal", "tie_prone", "small_ints", "floats")))
    if kind == "equal":
        d = [draw(st.sampled_from((1.0, 0.5, 3.0)))] * n
    elif kind == "tie_prone":
        d = draw(st.lists(st.sampled_from(_TIE_PRONE), min_size=n, max_size=n))
    elif kind == "small_ints":
        d = [float(x) for x in draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))]
    else:
        d = draw(
            st.lists(
                st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False),
                min_size=n,
                max_size=n,
            )
        )
    return (
        np.array(client, np.int64),
        np.array(ionode, np.int64),
        np.array(d, np.float64),
        nc,
        ns,
    )


@MANY
@given(_instance())
def test_ecf_kernel_equals_the_kernel_it_replaced(inst):
    c, s, d, nc, ns = inst
    assert greedy.ecf(c, s, d, nc, ns).tolist() == ecf_reference(c, s, d, nc, ns).tolist()


@MANY
@given(durations_instance(max_units=40))
def test_ecf_kernel_equals_the_old_kernel_and_the_oracle(inst):
    c, s, d = (np.array(a) for a in inst)
    c, s, d = c.astype(np.int64), s.astype(np.int64), d.astype(np.float64)
    nc, ns = int(c.max()) + 1, int(s.max()) + 1
    new = greedy.ecf(c, s, d, nc, ns).tolist()
    assert new == ecf_reference(c, s, d, nc, ns).tolist()
    assert new == ecf_oracle(c, s, d)[0]


def test_ecf_kernel_equals_the_old_kernel_on_larger_sets():
    rng = np.random.default_rng(7)
    for n, nc, ns, sizes in (
        (20_000, 64, 16, "random"),
        (20_000, 16, 64, "random"),
        (20_000, 32, 32, "equal"),
        (20_000, 1, 50, "few"),
        (20_000, 50, 1, "few"),
        (5_000, 3000, 3000, "random"),
    ):
        c = rng.integers(0, nc, n)
        s = rng.integers(0, ns, n)
        if sizes == "random":
            d = rng.integers(1, 1 << 20, n) / 1e8 + 1e-4
        elif sizes == "equal":
            d = np.full(n, 0.25)
        else:
            d = rng.choice([0.1, 0.2, 0.3, 0.30000000000000004], n)
        got = greedy.ecf(c, s, d, nc, ns)
        assert np.array_equal(got, ecf_reference(c, s, d, nc, ns)), (n, nc, ns, sizes)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from((0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 5e-324, -5e-324)),
            st.floats(allow_nan=False),
        ),
        min_size=1,
        max_size=200,
    )
)
def test_radix_order_is_the_stable_merge_sort(values):
    d = np.array(values, np.float64)
    assert greedy._argsort_d(d).tolist() == np.argsort(d, kind="stable").tolist()


def test_radix_order_with_nan_falls_back_to_the_merge_sort():
    d = np.array([2.0, np.nan, 1.0, 0.0, np.nan, -0.0])
    assert greedy._argsort_d(d).tolist() == np.argsort(d, kind="stable").tolist()
