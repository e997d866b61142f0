"""Checks of the split-opt decomposition and of plans over variable-size pieces.

Plain Python over lists; each function raises AssertionError naming what is wrong.
"""

import itertools

from .common import as_floats, as_ints


def check_decomposition(row, col, w, lim, edge, t0, t1) -> int:
    """The pieces ``(edge, t0, t1)`` decompose the regular matrix ``(row, col, w)``.

    Every edge runs for exactly its weight in disjoint pieces within
    ``[0, lim)``, and between any two consecutive breakpoints the running
    edges form a perfect matching of the rows and columns. Returns the
    number of distinct matchings (phases).
    """
    row, col, w, edge, t0, t1 = (as_ints(x) for x in (row, col, w, edge, t0, t1))
    n = max(row + col) + 1
    for r in range(n):
        assert sum(w[e] for e in range(len(w)) if row[e] == r) == lim, f"row {r} not regular"
    for c in range(n):
        assert sum(w[e] for e in range(len(w)) if col[e] == c) == lim, f"column {c} not regular"
    runs: dict[int, list[tuple[int, int]]] = {}
    for e, a, b in zip(edge, t0, t1, strict=True):
        assert 0 <= a < b <= lim, f"edge {e}: piece [{a}, {b}) outside [0, {lim})"
        runs.setdefault(e, []).append((a, b))
    for e in range(len(w)):
        got = sorted(runs.get(e, []))
        assert sum(b - a for a, b in got) == w[e], f"edge {e} runs {got}, weight {w[e]}"
        for (_, b), (a2, _) in itertools.pairwise(got):
            assert b <= a2, f"edge {e}: pieces overlap {got}"
    cuts = sorted({0, lim, *t0, *t1})
    phases = 0
    previous = None
    for a, b in itertools.pairwise(cuts):
        active = [e for e in range(len(edge)) if t0[e] <= a and b <= t1[e]]
        rows = sorted(row[edge[k]] for k in active)
        cols = sorted(col[edge[k]] for k in active)
        assert rows == list(range(n)), f"[{a}, {b}): rows {rows} are not a perfect matching"
        assert cols == list(range(n)), f"[{a}, {b}): columns {cols} are not a perfect matching"
        now = sorted(edge[k] for k in active)
        phases += now != previous
        previous = now
    return phases


def check_pieces(client, ionode, nbytes, parent, offset, size) -> None:
    """Pieces of every transfer are disjoint and cover it exactly; pair sums match."""
    client, ionode, nbytes = as_ints(client), as_ints(ionode), as_ints(nbytes)
    parent, offset, size = as_ints(parent), as_ints(offset), as_ints(size)
    spans: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(nbytes))}
    for p, o, s in zip(parent, offset, size, strict=True):
        assert s > 0, f"transfer {p}: empty piece at offset {o}"
        spans[p].append((o, o + s))
    for i, got in spans.items():
        got.sort()
        pos = 0
        for a, b in got:
            assert a == pos, f"transfer {i}: pieces {got} leave a gap or overlap at {pos}"
            pos = b
        assert pos == nbytes[i], f"transfer {i}: pieces cover {pos} of {nbytes[i]} bytes"
    want: dict[tuple[int, int], int] = {}
    got_pair: dict[tuple[int, int], int] = {}
    for i in range(len(nbytes)):
        key = (client[i], ionode[i])
        want[key] = want.get(key, 0) + nbytes[i]
    for p, s in zip(parent, size, strict=True):
        key = (client[p], ionode[p])
        got_pair[key] = got_pair.get(key, 0) + s
    assert got_pair == want, "bytes per (client, I/O node) pair differ from the matrix"


def preemptive_bound(client, ionode, d) -> float:
    """``max(max client load, max I/O-node load)`` of durations ``d`` (any order)."""
    client, ionode, d = as_ints(client), as_ints(ionode), as_floats(d)
    load: dict[tuple[str, int], float] = {}
    for c, s, x in zip(client, ionode, d, strict=True):
        load[("c", c)] = load.get(("c", c), 0.0) + x
        load[("s", s)] = load.get(("s", s), 0.0) + x
    return max(load.values())
