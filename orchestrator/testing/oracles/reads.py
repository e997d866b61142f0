"""Slow, obvious oracles of the read policies (NIO, SIO, HIO) and of the read simulator,
written from docs/semantics.rst ("Concurrent collective reads") alone.

Plain Python lists, one request at a time; the Numba kernels of
:mod:`orchestrator.kernels.reads` must agree with them exactly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["acceptable_delay", "order", "relative_delay", "simulate", "windows"]


def acceptable_delay(app: list[int], shuffle: list[float]) -> list[float]:
    """AD of each aggregator: its application's largest shuffle minus its own (eq. 3)."""
    worst: dict[int, float] = {}
    for a, s in zip(app, shuffle, strict=True):
        worst[a] = max(worst.get(a, s), s)
    return [worst[a] - s for a, s in zip(app, shuffle, strict=True)]


def relative_delay(app: list[int], ad: list[float]) -> list[int]:
    """RAD: each aggregator's rank by AD ascending among its application's aggregators
    (ties: lower aggregator id first)."""
    out = [0] * len(app)
    for a in set(app):
        mine = sorted((g for g in range(len(app)) if app[g] == a), key=lambda g: (ad[g], g))
        for rank, g in enumerate(mine):
            out[g] = rank
    return out


def windows(
    queue: list[int], app_of: list[int], access_of: list[int], width: int, strict: bool
) -> list[list[int]]:
    """A node's queue (requests in arrival order) cut into windows: at most ``width``
    requests, never two collective accesses of one application (``strict``: never two
    requests of one application); a request that would break the rule starts a new
    window."""
    out: list[list[int]] = []
    cur: list[int] = []
    seen: dict[int, int] = {}
    for r in queue:
        a = app_of[r]
        if len(cur) == width or (a in seen and (strict or seen[a] != access_of[r])):
            out.append(cur)
            cur, seen = [], {}
        cur.append(r)
        seen[a] = access_of[r]
    if cur:
        out.append(cur)
    return out


def order(
    rs: dict[str, Any],
    policy: str,
    width: int = 10,
    threshold: float = 0.2,
    strict: bool = False,
    interleave: bool = False,
) -> list[list[int]]:
    """Each node's service order (request ids) under ``policy``.

    ``rs``: ``node``, ``agg``, ``read``, ``arrival`` per request; ``agg_app``,
    ``access``, ``shuffle`` per aggregator; ``n_nodes``.
    """
    n_req = len(rs["node"])
    app_of = [rs["agg_app"][rs["agg"][r]] for r in range(n_req)]
    access_of = [rs["access"][rs["agg"][r]] for r in range(n_req)]
    ad_agg = acceptable_delay(rs["agg_app"], rs["shuffle"])
    rad_agg = relative_delay(rs["agg_app"], ad_agg)
    out = []
    for k in range(rs["n_nodes"]):
        queue = sorted(
            (r for r in range(n_req) if rs["node"][r] == k), key=lambda r: (rs["arrival"][r], r)
        )
        if policy == "nio":
            out.append(queue)
            continue
        served: list[int] = []
        for win in windows(queue, app_of, access_of, width, strict):
            if policy == "sio":
                served += sorted(win, key=lambda r: (app_of[r], rs["arrival"][r], r))
                continue
            shuffle = sum(rs["shuffle"][rs["agg"][r]] for r in win)
            read = sum(rs["read"][r] for r in win)
            if (read > 0 and shuffle / read > threshold) or (read == 0 and shuffle > 0):
                if interleave:  # every application's slowest (RAD 0) first, then the next
                    w = sorted(
                        win,
                        key=lambda r: (rad_agg[rs["agg"][r]], app_of[r], rs["arrival"][r], r),
                    )
                else:  # application by application, each one's slowest aggregator first
                    w = sorted(
                        win,
                        key=lambda r: (app_of[r], rad_agg[rs["agg"][r]], rs["arrival"][r], r),
                    )
            else:
                w = sorted(win, key=lambda r: (app_of[r], rs["arrival"][r], r))
            ad = [ad_agg[rs["agg"][r]] for r in w]
            # tuning: a request moves behind its successor while its AD exceeds the
            # successor's read; the one moved back waits that read, the other gains its own
            j = 0
            while j < len(w) - 1:
                nxt = w[j + 1]
                if ad[j] > rs["read"][nxt]:
                    moved = w[j]
                    ad[j], ad[j + 1] = ad[j + 1] + rs["read"][moved], ad[j] - rs["read"][nxt]
                    w[j], w[j + 1] = nxt, moved
                j += 1
            served += w
        out.append(served)
    return out


def simulate(rs: dict[str, Any], orders: list[list[int]]) -> dict[str, Any]:
    """Serve each node's order back to back from time 0; an aggregator's read ends with
    its last request, it finishes a shuffle later; an application ends with its last
    aggregator. Returns per request ``end``, per aggregator ``finish``, per application
    ``time``, and their ``mean``."""
    n_req = len(rs["node"])
    end = [0.0] * n_req
    for k, seq in enumerate(orders):
        t = 0.0
        for r in seq:
            if rs["node"][r] != k:
                raise ValueError(f"request {r} is not on node {k}")
            t += rs["read"][r]
            end[r] = t
    n_agg = len(rs["agg_app"])
    read_end = [0.0] * n_agg
    for r in range(n_req):
        g = rs["agg"][r]
        read_end[g] = max(read_end[g], end[r])
    finish = [read_end[g] + rs["shuffle"][g] for g in range(n_agg)]
    time: dict[int, float] = {}
    for g in range(n_agg):
        a = rs["agg_app"][g]
        time[a] = max(time.get(a, 0.0), finish[g])
    apps = sorted(time)
    return {
        "end": end,
        "finish": finish,
        "time": [time[a] for a in apps],
        "mean": sum(time.values()) / len(time) if time else 0.0,
    }
