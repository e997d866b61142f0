"""``iorch bench hio``: the HIO paper's four experiments in the simulator — concurrent
applications, request size, storage nodes, aggregators — with NIO, SIO and HIO
beside each other and beside the paper's numbers.

The workload (:func:`workload`) follows the paper's setup: each application has
50 processes packed on 12-core hosts and ``k`` aggregators spread evenly over
its ranks; an aggregator reads a file domain of ``request`` bytes striped in
64 KiB stripes over the storage nodes (one request per node it touches, the
node's share of its stripes at the node's disk rate, plus a per-request cost)
and sends each process of its group its share (eq. 1 with the hosts known:
intra-host at ``b_intra``, inter-host at ``b_inter``, plus ``gamma``). Requests
reach each node in an independent random order (the assumption of the paper's
eq. 4). The rates are those of the paper's testbed: 7,200-rpm disks
(100 MB/s), Gigabit Ethernet between hosts (117 MB/s).

Each node orders every request it holds (one window per node, ``WINDOW``): with
the paper's "e.g. 10" requests per window and the 36-288 requests a node holds
here, no policy could reorder enough to show the gains the paper measured for SIO
against NIO (checked: within 4 % of each other at width 10). HIO is run both ways
the garbled Algorithm 1 can be read (:doc:`/semantics`): ``hio`` application by
application, ``hio-mix`` interleaving the applications by RAD.

Examples
--------
>>> rows = run(seeds=1, quick=True)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..reads import ReadSet, shuffle_cost, simulate_reads

__all__ = ["PAPER", "POLICIES", "SWEEPS", "plot", "run", "workload"]

MB = 1 << 20
#: one window per node: the node orders all it holds
WINDOW = 1 << 30
#: the contenders: name -> (policy, interleave)
POLICIES = {
    "nio": ("nio", False),
    "sio": ("sio", False),
    "hio": ("hio", False),
    "hio-mix": ("hio", True),
}
#: the paper's sweeps: name -> (x label, values, fixed parameters); x is the varied one
SWEEPS: dict[str, tuple[str, list[int], dict[str, int]]] = {
    "applications": (
        "concurrent applications",
        [6, 12, 24, 48],
        {"n_nodes": 6, "n_aggs": 6, "request": 16 * MB},
    ),
    "request": (
        "request size (bytes)",
        [64 << 10, 1 * MB, 5 * MB, 10 * MB],
        {"n_apps": 6, "n_nodes": 6, "n_aggs": 6},
    ),
    "nodes": ("storage nodes", [2, 4, 6, 8, 16], {"n_apps": 6, "request": 15 * MB}),
    "aggregators": (
        "aggregators per application",
        [5, 10, 15],
        {"n_apps": 6, "n_nodes": 6, "request": 16 * MB},
    ),
}
_X = {"applications": "n_apps", "request": "request", "nodes": "n_nodes", "aggregators": "n_aggs"}
#: what the paper reports (sec. 8.2)
PAPER = {
    "applications": "HIO up to -34.1 % against NIO and -15.2 % against SIO",
    "request": "shuffle share 0.7 % to 5.6 %; HIO's gain 6.8 % to 18.3 %",
    "nodes": "NIO does not scale; HIO scales better than SIO",
    "aggregators": "NIO grows linearly; HIO below SIO",
}


def workload(
    n_apps: int,
    n_nodes: int,
    n_aggs: int,
    request: int,
    seed: int = 0,
    procs: int = 50,
    cores: int = 12,
    stripe: int = 64 << 10,
    disk: float = 100e6,
    per_request: float = 1e-3,
    b_intra: float = 2e9,
    b_inter: float = 117e6,
    gamma: float = 50e-6,
) -> ReadSet:
    """The paper's collective reads as a :class:`~orchestrator.reads.ReadSet` (see the
    module).

    Examples
    --------
    >>> rs = workload(n_apps=2, n_nodes=3, n_aggs=2, request=1 << 20)
    >>> rs.n_apps, rs.n_nodes, int(rs.node.size)
    (2, 3, 12)
    """
    rng = np.random.default_rng(seed)
    node: list[int] = []
    agg: list[int] = []
    read: list[float] = []
    agg_app: list[int] = []
    shuffle: list[float] = []
    for a in range(n_apps):
        host = (a * procs + np.arange(procs)) // cores  # ranks packed on hosts
        bounds = np.linspace(0, procs, n_aggs + 1).astype(int)
        for j in range(n_aggs):
            g = len(agg_app)
            agg_app.append(a)
            group = np.arange(bounds[j], bounds[j + 1])
            me = group[0]  # the aggregator is its group's first rank
            share = request / max(1, group.size)
            others = group[1:]
            shuffle.append(
                shuffle_cost(
                    [share] * others.size,
                    (host[others] == host[me]).tolist(),
                    b_intra,
                    b_inter,
                    gamma,
                )
            )
            first = (a * n_aggs + j) * -(-request // stripe)  # the domain's first stripe
            n_stripes = -(-request // stripe)
            per_node = np.bincount((first + np.arange(n_stripes)) % n_nodes, minlength=n_nodes)
            for k in np.flatnonzero(per_node):
                node.append(int(k))
                agg.append(g)
                nbytes = min(int(per_node[k]) * stripe, request)
                read.append(nbytes / disk + per_request)
    arrival = np.empty(len(node), dtype=np.int64)
    nd = np.asarray(node)
    for q in range(n_nodes):  # each node's queue: an independent random order
        mine = np.flatnonzero(nd == q)
        arrival[mine] = rng.permutation(mine.size)
    return ReadSet(node, agg, read, agg_app, shuffle, arrival=arrival, n_nodes=n_nodes)


def run(
    seeds: int = 5, quick: bool = False, note: Callable[[str], None] = lambda m: None
) -> list[dict[str, Any]]:
    """Every sweep point, every policy, ``seeds`` random arrivals each: mean execution
    times (averaged over the seeds), the reductions, the shuffle share, and whether
    HIO <= SIO <= NIO held on every seed.

    Examples
    --------
    >>> rows = run(seeds=1, quick=True)
    >>> sorted({r["sweep"] for r in rows})
    ['aggregators', 'applications', 'nodes', 'request']
    >>> all(r["ordered"] for r in rows)
    True
    """
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise InputError(f"seeds must be a whole number >= 1, got {seeds!r}")
    rows = []
    for name, (_, xs, fixed) in SWEEPS.items():
        for x in xs[:2] if quick else xs:
            params = {**fixed, _X[name]: x}
            if name == "nodes":
                params["n_aggs"] = x  # as many aggregators as storage nodes, as the paper
            times: dict[str, list[float]] = {p: [] for p in POLICIES}
            share = []
            for seed in range(seeds):
                rs = workload(seed=seed, **params)
                for label, (policy, mix) in POLICIES.items():
                    sim = simulate_reads(rs, policy, window=WINDOW, interleave=mix)
                    times[label].append(sim.mean)
                share.append(float(rs.shuffle.sum() / (rs.shuffle.sum() + rs.read.sum())))
            mean = {p: float(np.mean(v)) for p, v in times.items()}
            rows.append(
                {
                    "sweep": name,
                    "x": x,
                    **mean,
                    "hio_vs_nio": mean["hio"] / mean["nio"] - 1,
                    "hio_vs_sio": mean["hio"] / mean["sio"] - 1,
                    "sio_vs_nio": mean["sio"] / mean["nio"] - 1,
                    "mix_vs_sio": mean["hio-mix"] / mean["sio"] - 1,
                    "shuffle_share": float(np.mean(share)),
                    "ordered": all(
                        h <= s + 1e-12 and s <= n + 1e-12
                        for h, s, n in zip(times["hio"], times["sio"], times["nio"], strict=True)
                    ),
                }
            )
            note(f"{name} {x}")
    return rows


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    """The four sweeps, each policy's average execution time divided by NIO's, like the
    paper's Figs. 8-11; written to ``out/hio-sweeps.png``.

    Examples
    --------
    >>> plot(run(seeds=1, quick=True), Path("out/bench-hio"))  # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), sharey=True)
    for ax, (name, (label, _, _)) in zip(axes, SWEEPS.items(), strict=True):
        mine = [r for r in rows if r["sweep"] == name]
        xs = [r["x"] / MB if name == "request" else r["x"] for r in mine]
        for p, style in zip(POLICIES, ("o-", "s-", "^-", "v:"), strict=True):
            ax.plot(xs, [r[p] / r["nio"] for r in mine], style, label=p)
        if name == "request":
            ax.set_xscale("log")
            label = "request size (MiB)"
        ax.set_xlabel(label)
        ax.set_title(PAPER[name], fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("average execution time ÷ NIO")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = out / "hio-sweeps.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def example(m: int = 4, seed: int = 2) -> ReadSet:
    """The paper's best case for HIO (eq. 6), the picture's workload: ``m`` applications,
    each with one aggregator per node reading 1 s there; application ``a``'s aggregator
    on node ``a`` shuffles ``3 m`` s, the others nothing; random arrivals.

    Examples
    --------
    >>> round(simulate_reads(example(), "sio", window=WINDOW).mean, 6)
    14.5
    >>> round(simulate_reads(example(), "hio", window=WINDOW, interleave=True).mean, 6)
    13.0
    """
    rng = np.random.default_rng(seed)
    node: list[int] = []
    agg: list[int] = []
    agg_app: list[int] = []
    shuffle: list[float] = []
    for a in range(m):
        for k in range(m):
            node.append(k)
            agg.append(len(agg_app))
            agg_app.append(a)
            shuffle.append(3.0 * m if a == k else 0.0)
    arr = np.zeros(m * m, dtype=np.int64)
    for k in range(m):
        arr[np.arange(m) * m + k] = rng.permutation(m)
    return ReadSet(node, agg, [1.0] * (m * m), agg_app, shuffle, arrival=arr, n_nodes=m)


def service_picture(
    rs: ReadSet,
    out: Path,
    window: int = WINDOW,
    policies: Sequence[str] = tuple(POLICIES),
    name: str = "hio-service.png",
) -> Path:
    """Each I/O node's service order under each of ``policies`` (names of
    :data:`POLICIES`), one bar per request coloured by application; written to
    ``out/name``.

    Examples
    --------
    >>> service_picture(example(), Path("out/bench-hio"))  # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    colours = plt.get_cmap("tab10")
    for p in policies:
        if p not in POLICIES:
            raise InputError(f"policies: {p!r} is not one of {', '.join(POLICIES)}")
    fig, axes = plt.subplots(
        len(policies), 1, figsize=(10, 1.2 + 0.9 * len(policies) * rs.n_nodes / 2), sharex=True
    )
    axes = np.atleast_1d(axes)
    for ax, label in zip(axes, policies, strict=True):
        policy, mix = POLICIES[label]
        sim = simulate_reads(rs, policy, window=window, interleave=mix)
        for k, order in enumerate(sim.order):
            t = 0.0
            for r in order:
                a = int(rs.agg_app[rs.agg[r]])
                slow = rs.shuffle[rs.agg[r]] > 0  # hatched: this aggregator shuffles
                ax.barh(
                    k,
                    rs.read[r],
                    left=t,
                    color=colours(a % 10),
                    edgecolor="white",
                    hatch="//" if slow else None,
                )
                t += rs.read[r]
        ax.set_yticks(range(rs.n_nodes), [f"io-{k}" for k in range(rs.n_nodes)])
        ax.set_title(f"{label}: average execution time {sim.mean:.3g} s", fontsize=9)
    axes[-1].set_xlabel("seconds (colour: application; hatched: its aggregator shuffles)")
    fig.tight_layout()
    path = out / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
