"""Hypothesis strategies for transfer sets and unit instances.

``transfer_columns`` draws ``(client, ionode, nbytes)``; ``durations_instance``
draws ``(client, ionode, d)`` with float durations and many exact ties.
"""

import hypothesis.strategies as st

# sizes around common block sizes (4 KiB, 32 KiB, 64 KiB): exact multiples and +-1
_BOUNDARY_SIZES = (1, 2, 4095, 4096, 4097, 32767, 32768, 32769, 65535, 65536, 65537, 131072)


def _sizes(max_bytes: int) -> st.SearchStrategy[int]:
    boundary = [b for b in _BOUNDARY_SIZES if b <= max_bytes]
    return st.one_of(st.integers(1, max_bytes), st.sampled_from(boundary))


@st.composite
def _ids(draw, n: int, max_clients: int, max_ionodes: int, shape: str):
    """Client and I/O node columns of length ``n`` for a given shape."""
    n_clients = draw(st.integers(1, max_clients))
    n_ionodes = draw(st.integers(1, max_ionodes))
    if shape == "one_client":
        n_clients = 1
    elif shape == "one_ionode":
        n_ionodes = 1
    if shape == "duplicate_pairs":
        # few distinct (client, ionode) pairs, each used many times
        pairs = draw(
            st.lists(
                st.tuples(st.integers(0, n_clients - 1), st.integers(0, n_ionodes - 1)),
                min_size=1,
                max_size=3,
                unique=True,
            )
        )
        chosen = draw(st.lists(st.sampled_from(pairs), min_size=n, max_size=n))
        return [c for c, _ in chosen], [s for _, s in chosen]
    client = draw(st.lists(st.integers(0, n_clients - 1), min_size=n, max_size=n))
    ionode = draw(st.lists(st.integers(0, n_ionodes - 1), min_size=n, max_size=n))
    return client, ionode


_SHAPES = ("general", "one_client", "one_ionode", "equal_sizes", "huge_among_small")
_ALL_SHAPES = (*_SHAPES, "duplicate_pairs")


@st.composite
def _transfer_columns_shaped(draw, shape, max_clients, max_ionodes, max_transfers, max_bytes):
    n = draw(st.integers(1, max_transfers))
    client, ionode = draw(_ids(n, max_clients, max_ionodes, shape))
    if shape == "equal_sizes":
        size = draw(_sizes(max_bytes))
        nbytes = [size] * n
    elif shape == "huge_among_small":
        small_max = max(1, max_bytes // 1000)
        nbytes = draw(st.lists(st.integers(1, small_max), min_size=n, max_size=n))
        nbytes[draw(st.integers(0, n - 1))] = max_bytes
    else:
        nbytes = draw(st.lists(_sizes(max_bytes), min_size=n, max_size=n))
    return client, ionode, nbytes


def transfer_columns(
    max_clients: int = 6, max_ionodes: int = 5, max_transfers: int = 25, max_bytes: int = 10**6
) -> st.SearchStrategy[tuple[list[int], list[int], list[int]]]:
    """``(client, ionode, nbytes)`` lists of equal length ``>= 1``.

    Ids are in ``range(max_clients)`` / ``range(max_ionodes)`` (not every id is
    necessarily used), ``1 <= nbytes <= max_bytes``. Shapes: general random, one
    client, one I/O node, all sizes equal, one huge transfer among small ones,
    many duplicate (client, ionode) pairs.
    """
    return st.one_of(
        [
            _transfer_columns_shaped(shape, max_clients, max_ionodes, max_transfers, max_bytes)
            for shape in _ALL_SHAPES
        ]
    )


# duration sets: tiny tie-prone sets first, since tie-breaking is where bugs hide
_TIE_SETS = ((1.0,), (1.0, 2.0), (1.0, 2.0, 3.0), (0.5, 1.0, 1.5), (0.1, 0.2, 0.3))


@st.composite
def durations_instance(
    draw, max_clients: int = 6, max_ionodes: int = 5, max_units: int = 25
) -> tuple[list[int], list[int], list[float]]:
    """``(client, ionode, d)`` with ``d > 0`` floats, length ``>= 1``.

    Durations come from a small set (exact ties in ``d`` and in completion
    times), small integers, or general floats; the id shapes are those of
    :func:`transfer_columns`.
    """
    n = draw(st.integers(1, max_units))
    shape = draw(st.sampled_from(_ALL_SHAPES))
    client, ionode = draw(_ids(n, max_clients, max_ionodes, shape))
    kind = draw(st.sampled_from(("tie_set", "tie_set", "small_ints", "floats", "huge_among")))
    if kind == "tie_set":
        values = draw(st.sampled_from(_TIE_SETS))
        d = draw(st.lists(st.sampled_from(values), min_size=n, max_size=n))
    elif kind == "small_ints":
        d = [float(x) for x in draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))]
    elif kind == "floats":
        d = draw(
            st.lists(
                st.floats(1e-3, 1e3, allow_nan=False, allow_infinity=False),
                min_size=n,
                max_size=n,
            )
        )
    else:  # one huge duration among tied small ones
        d = draw(st.lists(st.sampled_from((1.0, 2.0)), min_size=n, max_size=n))
        d[draw(st.integers(0, n - 1))] = 1000.0
    return client, ionode, d
