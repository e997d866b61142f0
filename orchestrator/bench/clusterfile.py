"""The Clusterfile paper's write heuristics, pushed for real on the testbed.

Isaila et al. (sec. 6, 7.1): every compute node writes its own contiguous
region of one file striped round-robin over the I/O nodes, sending it in
*schedule blocks* of ``b`` bytes, one block at a time, in an order it picks
by itself — *first-IOS* (file offset order: when each client's share is a
multiple of a stripe round, every client starts at the same I/O node),
*random-IOS* (a random I/O node that still has blocks of it) or
*hash-IOS* (client ``i`` at step ``j`` sends to node ``(i + j) mod n``). Their
Fig. 2: first-IOS loses more the larger ``b`` (the convoy at the first I/O
node lasts a whole block per client), hash-IOS stays best.

Here the clients push their blocks through :func:`~.push.push_seconds` against
FCFS I/O nodes; the simulator's prediction is the same sequences served FCFS
(:func:`~.push.sequence_plan`) under the calibrated model, and the engine
writes the same stage with an ECF plan for reference.

Examples
--------
>>> st = contiguous_stage(n_clients=2, n_ionodes=2, per_client=4096, row_bytes=1024,
...                       stripe_bytes=1024)
>>> [s for s, _ in piece_sends(st, 1024, "first")[1]]  # client 1 starts at node 0 too
[0, 1, 0, 1]
>>> [s for s, _ in piece_sends(st, 1024, "hash")[1]]
[1, 0, 1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import is_int
from ..contributions import DatasetSpec
from ..cost import CostModel
from ..engine.cluster import IOCluster
from ..errors import InputError
from ..layout import StripeLayout, derive_transfers
from ..plan import Plan
from ..transfers import TransferSet
from .calibration import Calibration, run_point
from .push import push_seconds, sequence_plan
from .transferstage import TransferStage, place

__all__ = ["HEURISTICS", "clusterfile_rows", "contiguous_stage", "piece_sends", "pieces_plan"]

#: the paper's three heuristics, in its order
HEURISTICS = ("first", "random", "hash")


def contiguous_stage(
    n_clients: int, n_ionodes: int, per_client: int, row_bytes: int, stripe_bytes: int
) -> TransferStage:
    """Client ``c`` writes rows ``[c k, (c + 1) k)`` of one dataset (``k`` rows of
    ``row_bytes``: ``per_client`` bytes), striped round-robin over ``n_ionodes``.

    Examples
    --------
    >>> st = contiguous_stage(2, 4, 8192, 1024, 2048)
    >>> [r.tolist() for r in st.rows], st.transfers.n_ionodes
    ([[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15]], 4)
    """
    for name, v in (("n_clients", n_clients), ("n_ionodes", n_ionodes)):
        if not is_int(v, 1, 1 << 20):
            raise InputError(f"{name} must be a whole number >= 1, got {v!r}")
    if not is_int(row_bytes, 8, 1 << 30) or row_bytes % 8:
        raise InputError(f"row_bytes must be a positive multiple of 8, got {row_bytes!r}")
    if not is_int(stripe_bytes, 1, 1 << 40) or stripe_bytes % row_bytes:
        raise InputError(
            f"stripe_bytes must be a multiple of row_bytes={row_bytes}, got {stripe_bytes!r}"
        )
    if not is_int(per_client, 1, 1 << 40) or per_client % row_bytes:
        raise InputError(
            f"per_client must be a multiple of row_bytes={row_bytes}, got {per_client!r}"
        )
    k = per_client // row_bytes
    spec = DatasetSpec("contiguous", (n_clients * k, row_bytes // 8), "float64")
    rows = [np.arange(c * k, (c + 1) * k, dtype=np.int64) for c in range(n_clients)]
    writer = np.repeat(np.arange(n_clients, dtype=np.int64), k)
    derived = derive_transfers(
        spec, writer, StripeLayout(n_ionodes, stripe_bytes), "list", n_clients=n_clients
    ).transfers
    return TransferStage(spec, rows, stripe_bytes, derived)


def piece_sends(
    st: TransferStage, block: int, heuristic: str, seed: int = 0
) -> list[list[tuple[int, npt.NDArray[np.int64]]]]:
    """Each client's schedule blocks in the order ``heuristic`` sends them.

    A block is up to ``block`` bytes of the rows a client holds on one I/O node,
    in file order. ``first``: blocks by file offset; ``random``: a uniformly
    random I/O node among those with blocks left (seeded per client);
    ``hash``: client ``c`` cycles over the nodes from ``c mod n``, skipping
    exhausted ones.

    Examples
    --------
    >>> st = contiguous_stage(1, 2, 4096, 1024, 1024)
    >>> [(s, r.tolist()) for s, r in piece_sends(st, 2048, "first")[0]]
    [(0, [0, 2]), (1, [1, 3])]
    """
    if heuristic not in HEURISTICS:
        raise InputError(f"heuristic must be one of {', '.join(HEURISTICS)}, got {heuristic!r}")
    rb = st.spec.row_bytes
    if not is_int(block, rb, 1 << 40) or block % rb:
        raise InputError(f"block must be a positive multiple of row_bytes={rb}, got {block!r}")
    if not is_int(seed, 0, 1 << 63):
        raise InputError(f"seed must be a whole number >= 0, got {seed!r}")
    per_stripe = st.stripe_bytes // rb
    n = st.transfers.n_ionodes
    out = []
    for c, rows in enumerate(st.rows):
        node = (rows // per_stripe) % n
        queues = {
            s: np.array_split(sel, range(block // rb, sel.size, block // rb))
            for s in range(n)
            if (sel := rows[node == s]).size
        }
        if heuristic == "first":
            blocks = [(s, b) for s, q in queues.items() for b in q]
            out.append(sorted(blocks, key=lambda sb: int(sb[1][0])))
            continue
        rng = np.random.default_rng([seed, c])
        mine: list[tuple[int, npt.NDArray[np.int64]]] = []
        at = {s: 0 for s in queues}
        step = c
        while at:
            live = sorted(at)
            if heuristic == "random":
                s = live[int(rng.integers(len(live)))]
            else:  # the next node at or after c + j (mod n) that still has blocks
                s = min(live, key=lambda x: (x - step) % n)
                step = s + 1
            mine.append((s, queues[s][at[s]]))
            at[s] += 1
            if at[s] == len(queues[s]):
                del at[s]
        out.append(mine)
    return out


def pieces_plan(
    st: TransferStage, sends: Sequence[Sequence[tuple[int, Any]]], cost: CostModel
) -> Plan:
    """The simulator's run of ``sends``: each block a unit, each client's in its order,
    FCFS I/O nodes, under ``cost``.

    Examples
    --------
    >>> st = contiguous_stage(2, 2, 2048, 1024, 1024)
    >>> pieces_plan(st, piece_sends(st, 1024, "first"), CostModel(1024.0, 1024.0)).makespan
    3.0
    """
    rb = st.spec.row_bytes
    if not any(len(m) for m in sends):
        raise InputError("sends must hold at least one block, got none")
    c, s, b = zip(
        *((ci, si, rows.size * rb) for ci, mine in enumerate(sends) for si, rows in mine),
        strict=True,
    )
    ts = TransferSet(list(c), list(s), list(b), len(st.rows), st.transfers.n_ionodes)
    return sequence_plan(ts, cost)


def clusterfile_rows(
    cluster: IOCluster,
    directory: Path,
    calibration: Calibration,
    blocks: Sequence[int] = (16 << 10, 64 << 10, 256 << 10),
    per_client: int = 2 << 20,
    n_clients: int | None = None,
    repeat: int = 3,
    row_bytes: int = 1024,
    stripe_bytes: int = 64 << 10,
    advance: Any = lambda msg: None,
) -> list[dict[str, Any]]:
    """The paper's synthetic write benchmark at testbed scale: ``n_clients`` (default: as
    many as I/O nodes, the paper's 8 : 8) each write ``per_client`` bytes; for every
    schedule block and heuristic the realized seconds (median of ``repeat``) beside the
    simulated, and the engine's ECF plan of the same stage.

    ``calibration`` is the testbed's :class:`~.calibration.Calibration`; the pushes are
    simulated under :meth:`~.calibration.Calibration.pushes`. Each repeat runs every
    heuristic and the engine once, one after the other (drift spreads over all), and
    random-IOS draws anew (seed = repeat): its row is the median over the draws, its
    simulated time their mean.

    Examples
    --------
    >>> rows = clusterfile_rows(cluster, tmp, calibration)  # doctest: +SKIP
    >>> {r["heuristic"] for r in rows}  # doctest: +SKIP
    {'first', 'random', 'hash', 'ecf (engine)'}
    """
    n_io = cluster.n_ionodes
    if n_clients is not None and not is_int(n_clients, 1, 1 << 20):
        raise InputError(f"n_clients must be a whole number >= 1, got {n_clients!r}")
    n_c = n_io if n_clients is None else n_clients
    if n_c > len(cluster.compute):
        raise InputError(
            f"n_clients={n_c} needs as many compute hosts, the testbed has {len(cluster.compute)}"
        )
    if not is_int(repeat, 1, 1000):
        raise InputError(f"repeat must be a whole number in [1, 1000), got {repeat!r}")
    st = contiguous_stage(n_c, n_io, per_client, row_bytes, stripe_bytes)
    for b in blocks:  # refused before anything runs
        piece_sends(st, b, "first")
    pushes = calibration.pushes()
    base = {"n_clients": n_c, "n_ionodes": n_io, "nbytes": st.nbytes}
    got: dict[tuple[int, str], list[float]] = {}
    sims: dict[tuple[int, str], list[float]] = {}
    pieces: dict[tuple[int, str], int] = {}
    eng: list[dict[str, Any]] = []
    parts = place(cluster, st)
    try:
        run_point(cluster, st, parts, ["ecf"], None, directory)  # warm-up
        push_seconds(cluster, st, parts, directory, piece_sends(st, blocks[0], "hash"))
        for r in range(repeat):
            eng += run_point(cluster, st, parts, ["ecf"], calibration, directory)
            for b in blocks:
                for h in HEURISTICS:
                    sends = piece_sends(st, b, h, seed=r)
                    pieces[(b, h)] = sum(len(m) for m in sends)
                    sims.setdefault((b, h), []).append(
                        pushes.predict(pieces_plan(st, sends, pushes.model))
                    )
                    got.setdefault((b, h), []).append(
                        push_seconds(cluster, st, parts, directory, sends)
                    )
            advance(f"clusterfile, repeat {r + 1} of {repeat}")
    finally:
        for p in parts:
            p.release()
    rows = []
    for (b, h), v in got.items():
        med = sorted(v)[(len(v) - 1) // 2]
        sim = float(np.mean(sims[(b, h)]))
        rows.append(
            {
                **base,
                "block": b,
                "heuristic": h,
                "pieces": pieces[(b, h)],
                "realized": med,
                "all_realized": v,
                "simulated": sim,
                "realized_over_simulated": med / sim,
            }
        )
    e = sorted(eng, key=lambda r: r["realized"])[(len(eng) - 1) // 2]
    rows.append({**base, "block": 0, "heuristic": "ecf (engine)", **e})
    return rows
