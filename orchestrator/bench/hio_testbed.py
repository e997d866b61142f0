"""``iorch bench hio --testbed``: the HIO paper's concurrent-applications sweep for real,
on an emulated cluster (:mod:`orchestrator.testbed`), beside what the simulator
predicts for the same requests.

Each application restarts the same checkpoint through :func:`~orchestrator.read_stage`
(its tasks on the compute hosts, so every piece crosses a shaped link) with its file
cut into ``aggregators`` domains; each domain is one request on every I/O node. The
I/O nodes emulate the profile's disk (:func:`orchestrator.engine.readserver.inject`:
a request lasts at least its bytes ÷ the disk rate, one at a time per node), each
request reaches its node after an independent random delay (the arrival assumption
of the paper's eq. 4), and the nodes start serving once every request of every
application has arrived (the simulator's start: all pending at time 0).

An application's realized time runs from that start to the moment its last task
holds its rows. The simulator is given the same requests, the same arrival order on
each node, each request's bytes at the disk rate plus a per-request cost, and each
aggregator's shuffle (eq. 1 with the links measured on the testbed) plus a tail —
the per-request cost and the tail measured by one application restarting alone
(:func:`calibrate`), not fitted to the sweep.

Times are those of one kernel's clock: the nodes' (when the gate opened, each
request's start and end) and the driver's (when it learns a task is done; the
notification's few milliseconds are part of the calibrated tail). On a real
cluster the clocks would differ; the testbed's hosts share the machine's.

Examples
--------
>>> rows = run(apps=(2,), seeds=1)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import is_int
from ..errors import ClusterError, InputError
from .hio import WINDOW

__all__ = ["Calibration", "calibrate", "plot", "predict", "run", "run_point", "summarize"]

POLICIES = ("nio", "sio", "hio")
#: each request waits up to this long before reaching its node (independent orders)
JITTER = 0.3
#: where HIO serves in SIO's order, the realized gap between them that is noise
TIE = 0.02


@dataclass(frozen=True)
class Calibration:
    """What one application restarting alone shows: the disk rate emulated, the cost of
    a request beyond its bytes, the time from an application's last request (plus its
    modelled shuffle) to its last task holding its rows, and the measured links."""

    disk: float
    per_request: float
    tail: float
    b_intra: float
    b_inter: float
    gamma: float


def _requests(n_rows: int, tasks: int, halo: int) -> list[dict[str, range]]:
    b = np.linspace(0, n_rows, tasks + 1).astype(int)
    return [
        {"u": range(max(0, int(lo) - halo), min(n_rows, int(hi) + halo))}
        for lo, hi in itertools.pairwise(b.tolist())
    ]


def _shuffles(
    res: Any, hosts: dict[str, str], ionodes: list[str], links: Any
) -> dict[tuple[int, int], float]:
    """Each request's shuffle by eq. 1, by (node, domain), from its plan and where its
    tasks are."""
    from ..reads import shuffle_cost

    out = {}
    for a in res.plan.aggregators:
        if not a.stripes:
            continue
        io = ionodes[a.node]
        # a task on the aggregator's own worker: nothing moves
        sends = {t: b for t, b in a.sends(res.plan.meta).items() if res.workers[t] != io}
        out[(a.node, a.domain)] = shuffle_cost(
            list(sends.values()),
            [hosts[res.workers[t]] == hosts[io] for t in sends],
            links.b_intra,
            links.b_inter,
            links.gamma,
        )
    return out


def _hosts(cluster: Any) -> dict[str, str]:
    """Host of each worker address."""
    from ..engine.readstage import _host

    client = cluster.client
    workers = client.sync(client.scheduler.identity, n_workers=-1).get("workers", {})
    return {w: _host(w) for w in workers}


def run_point(
    cluster: Any,
    checkpoint: Path,
    n_rows: int,
    n_apps: int,
    policy: str,
    disk: float,
    seed: int,
    tasks: int = 4,
    aggregators: int = 2,
    halo: int = 256,
    cost: Any = "cluster2004",
) -> dict[str, Any]:
    """``n_apps`` applications restarting at once under ``policy`` on I/O nodes that
    read at ``disk`` bytes/s: each one's realized time, and every request as served
    (with its shuffle by eq. 1) for :func:`predict`.

    Examples
    --------
    >>> raw = run_point(cl, ck, n, 4, "sio", 2e6, seed=0)  # doctest: +SKIP
    >>> len(raw["realized"])  # doctest: +SKIP
    4
    """
    from distributed import as_completed

    from ..cost import get_cost_model
    from ..engine import readserver
    from ..engine.readstage import measure_links, read_stage

    client = cluster.client
    reqs = _requests(n_rows, tasks, halo)
    computes = list(cluster.compute)
    rng = np.random.default_rng(seed)
    links = measure_links(cluster)
    client.run(
        readserver.inject, hold=True, rate=disk, jitter=JITTER, seed=seed, workers=cluster.ionodes
    )
    try:
        results = []
        for i in range(n_apps):
            shift = int(rng.integers(len(computes)))
            where = [computes[(t + shift) % len(computes)] for t in range(tasks)]
            results.append(
                read_stage(
                    checkpoint,
                    reqs,
                    policy=policy,
                    cluster=cluster,
                    workers=where,
                    application=f"app{i}",
                    window=WINDOW,
                    aggregators=aggregators,
                    cost=cost,
                    shuffle="dask",
                    wait=False,
                )
            )
        expected = sum(len([a for a in r.plan.aggregators if a.stripes]) for r in results)
        deadline = time.time() + 60 + 10 * JITTER
        while sum(client.run(readserver.queued, workers=cluster.ionodes).values()) < expected:
            if time.time() > deadline:
                raise ClusterError("the requests never all reached their I/O nodes")
            time.sleep(0.02)
        opened = client.run(readserver.open_gate, workers=cluster.ionodes)
        t0 = min(opened.values())
        app_of = {f.key: i for i, r in enumerate(results) for f in r.futures}
        end = np.zeros(n_apps)
        for f in as_completed([f for r in results for f in r.futures]):
            end[app_of[f.key]] = max(end[app_of[f.key]], time.time())
        for r in results:
            r.wait()
    finally:
        client.run(readserver.inject, workers=cluster.ionodes)
    hosts = _hosts(cluster)
    requests = []
    for i, r in enumerate(results):
        sh = _shuffles(r, hosts, list(cluster.ionodes), links)
        for sv in r.served:
            requests.append(
                {
                    "app": i,
                    "node": sv["node"],
                    "bytes": sv["bytes"],
                    "arrival": sv["arrival"],
                    "position": sv["position"],
                    "start": sv["start"] - t0,
                    "end": sv["end"] - t0,
                    "shuffle": sh[(sv["node"], sv["domain"])],
                }
            )
        for f in r.futures:
            f.release()
    return {
        "apps": n_apps,
        "policy": policy,
        "seed": seed,
        "n_nodes": cluster.n_ionodes,
        "disk": disk,
        "estimate_disk": float(get_cost_model(cost).disk_bandwidth),
        "realized": (end - t0).tolist(),
        "requests": requests,
    }


def _readset(raw: dict[str, Any], cal: Calibration | None) -> tuple[Any, list[list[int]]]:
    """The simulator's view of a run (each request its own aggregator, as on the nodes)
    and the order each node served. Timed by the calibration, or (``cal=None``) by the
    estimates the nodes ordered by: bytes at the cost model's disk rate, eq. 1."""
    from ..reads import ReadSet

    reqs = raw["requests"]
    n_nodes = raw["n_nodes"]
    nodes = np.asarray([q["node"] for q in reqs], dtype=np.int64)
    arr = np.asarray([q["arrival"] for q in reqs], dtype=np.int64)
    pos = np.asarray([q["position"] for q in reqs], dtype=np.int64)
    rank = np.empty(len(reqs), dtype=np.int64)
    order = []
    for k in range(n_nodes):  # each node's arrivals, as positions in its queue
        mine = np.flatnonzero(nodes == k)
        rank[mine[np.argsort(arr[mine], kind="stable")]] = np.arange(mine.size)
        order.append(mine[np.argsort(pos[mine], kind="stable")].tolist())
    rs = ReadSet(
        node=nodes.tolist(),
        agg=list(range(len(reqs))),
        read=[
            q["bytes"] / raw["estimate_disk"]
            if cal is None
            else q["bytes"] / raw["disk"] + cal.per_request
            for q in reqs
        ],
        agg_app=[q["app"] for q in reqs],
        shuffle=[q["shuffle"] + (0.0 if cal is None else cal.tail) for q in reqs],
        arrival=rank.tolist(),
        n_nodes=n_nodes,
    )
    return rs, order


def predict(raw: dict[str, Any], cal: Calibration) -> dict[str, Any]:
    """A run beside the simulator's prediction: the policy's order on the same arrivals
    and the same estimates the nodes ordered by, timed by the calibration
    (``simulated``); to tell ordering from timing, the order the nodes really served,
    timed the same way (``replayed``). ``hio_is_sio``: HIO's order is SIO's on every
    node for these requests (below HIO's threshold, with nothing for its tuning to
    move, the two are one policy).

    Examples
    --------
    >>> row = predict(raw, cal)  # doctest: +SKIP
    >>> 0.8 <= row["ratio"] <= 1.25  # doctest: +SKIP
    True
    """
    from ..reads import order_reads, simulate_reads

    rs, order = _readset(raw, cal)
    est, _ = _readset(raw, None)
    want = order_reads(est, raw["policy"], window=WINDOW)
    sim = simulate_reads(rs, order=[o.tolist() for o in want])
    replay = simulate_reads(rs, order=order)
    hio, sio = order_reads(est, "hio", window=WINDOW), order_reads(est, "sio", window=WINDOW)
    realized = np.asarray(raw["realized"])
    busy = sum(q["end"] - q["start"] for q in raw["requests"])
    worst = [
        max(q["shuffle"] for q in raw["requests"] if q["app"] == i) for i in range(raw["apps"])
    ]
    return {
        "apps": raw["apps"],
        "policy": raw["policy"],
        "seed": raw["seed"],
        "realized_mean": float(realized.mean()),
        "simulated_mean": sim.mean,
        "replayed_mean": replay.mean,
        "ratio": float(realized.mean()) / sim.mean,
        "same_order": all(list(a) == list(b) for a, b in zip(sim.order, order, strict=True)),
        "shuffle_share": float(sum(worst) / max(busy, 1e-9)),
        "hio_is_sio": all(list(a) == list(b) for a, b in zip(hio, sio, strict=True)),
    }


def calibrate(
    cluster: Any,
    checkpoint: Path,
    n_rows: int,
    disk: float,
    repeat: int = 3,
    **kwargs: Any,
) -> Calibration:
    """One application restarting alone, ``repeat`` times: the per-request cost beyond
    its bytes at ``disk`` bytes/s (from the gate's opening to each node's last end),
    then, with that cost, the tail from the simulator's time for the application to
    its realized one; medians.

    Examples
    --------
    >>> cal = calibrate(cl, ck, n, disk=2e6)  # doctest: +SKIP
    """
    from ..engine.readstage import measure_links

    if not is_int(repeat, 1, 1001):
        raise InputError(f"repeat must be a whole number >= 1, got {repeat!r}")
    links = measure_links(cluster)
    bare = Calibration(disk, 0.0, 0.0, links.b_intra, links.b_inter, links.gamma)
    raws = [
        run_point(cluster, checkpoint, n_rows, 1, "nio", disk, seed, **kwargs)
        for seed in range(repeat)
    ]
    per = []
    for raw in raws:
        for k in range(raw["n_nodes"]):
            mine = [q for q in raw["requests"] if q["node"] == k]
            if mine:  # from the gate's opening to the node's last end, beyond the bytes
                busy = max(q["end"] for q in mine) - sum(q["bytes"] for q in mine) / disk
                per.append(busy / len(mine))
    first = replace(bare, per_request=float(np.median(per)))
    tails = [raw["realized"][0] - predict(raw, first)["simulated_mean"] for raw in raws]
    return replace(first, tail=float(np.median(tails)))


def _checkpoint(cluster: Any, path: Path, mb: float) -> int:
    """A checkpoint of ``mb`` MB in 16 KiB stripes (a few MB: every domain of every
    application spans every I/O node); its rows."""
    from ..contributions import Contribution, DatasetSpec
    from ..engine.stage import write_stage

    row = 16 * 8
    n = int(mb * 1e6) // row
    rng = np.random.default_rng(0)
    writers = len(cluster.compute)
    parts = []
    for c in range(writers):
        rows = np.arange(c * n // writers, (c + 1) * n // writers)
        parts.append(
            cluster.client.scatter(
                Contribution(c, rows, rng.random((rows.size, 16))),
                workers=[cluster.compute[c]],
            )
        )
    write_stage(
        path,
        {"u": (DatasetSpec("u", (n, 16), "float64"), parts)},
        cluster=cluster,
        stripe_bytes=16 << 10,
    )
    cluster.release(parts)
    return n


def run(
    apps: Sequence[int] = (2, 4, 6, 8),
    seeds: int = 3,
    profile: str = "cluster2004",
    n_io: int = 4,
    n_compute: int = 4,
    mb_per_app: float = 8.0,
    tasks: int = 4,
    aggregators: int = 2,
    compute_link: float | None = None,
    out: Path = Path("out/bench-hio-testbed"),
    note: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    """The concurrent-applications sweep on a testbed of ``n_io`` I/O hosts and
    ``n_compute`` compute hosts: per point, policy and arrival seed, realized and
    simulated average execution times (rows of :func:`predict`), with the
    calibration they share. ``compute_link`` (bytes/s) slows the compute hosts' links
    below the profile's, so that shuffles weigh (HIO's case); ``tasks`` and
    ``aggregators`` are each application's.

    Examples
    --------
    >>> res = run(apps=(2, 4), seeds=1)  # doctest: +SKIP
    >>> sorted(res)  # doctest: +SKIP
    ['calibration', 'profile', 'rows', 'summary']
    """
    from .. import testbed

    if not apps or any(not is_int(m, 1, 65) for m in apps):
        raise InputError(f"apps must be whole numbers in 1..64, got {apps!r}")
    if not is_int(seeds, 1, 101):
        raise InputError(f"seeds must be a whole number in 1..100, got {seeds!r}")
    for name, value in (("tasks", tasks), ("aggregators", aggregators)):
        if not is_int(value, 1, 65):
            raise InputError(f"{name} must be a whole number in 1..64, got {value!r}")
    sizes: dict[str, Any] = {"mb_per_app": mb_per_app, "compute_link": compute_link}
    for name, size in sizes.items():
        if size is None and name == "compute_link":
            continue
        if not isinstance(size, (int, float)) or isinstance(size, bool) or not 0 < size < 1e12:
            raise InputError(f"{name} must be a number > 0, got {size!r}")
    prof = testbed.get_profile(profile)
    if compute_link is not None:
        from ..testbed.profiles import Link

        prof = replace(prof, compute=Link(float(compute_link), prof.compute.latency))
    shape = {"tasks": tasks, "aggregators": aggregators}
    out.mkdir(parents=True, exist_ok=True)
    note("testbed up")
    with testbed.up(prof, n_io, n_compute) as tb, tb.connect() as cl:
        path = (out / "restart-ck.h5").absolute()
        if path.exists():
            import shutil

            shutil.rmtree(path) if path.is_dir() else path.unlink()
        n_rows = _checkpoint(cl, path, mb_per_app)
        cost = prof.cost_model()
        note("calibrating: one application alone")
        cal = calibrate(cl, path, n_rows, prof.disk, cost=cost, **shape)
        rows = []
        for m in apps:
            for seed in range(seeds):
                for policy in POLICIES:
                    note(f"{m} applications, {policy}, arrivals {seed}")
                    raw = run_point(
                        cl, path, n_rows, m, policy, prof.disk, seed, cost=cost, **shape
                    )
                    rows.append(predict(raw, cal) | {"raw": raw})
    return {
        "profile": prof.name,
        "compute_link": prof.compute.rate,
        **shape,
        "calibration": asdict(cal),
        "rows": rows,
        "summary": summarize(rows),
    }


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per number of applications, each policy's medians over its runs (rows of
    :func:`predict`) and whether HIO ≤ SIO ≤ NIO held for realized times.

    Where HIO served in SIO's order on every run (``hio_is_sio``: its shuffles under
    its threshold and nothing for its tuning to move), the two are one policy and
    their realized gap is noise: HIO ≤ SIO then holds within :data:`TIE`.

    Examples
    --------
    >>> rows = [{"apps": 2, "policy": p, "realized_mean": t, "simulated_mean": t,
    ...          "ratio": 1.0, "hio_is_sio": True}
    ...         for p, t in (("nio", 3.0), ("sio", 2.0), ("hio", 2.01))]
    >>> summarize(rows)[0]["ordered"]
    True
    """
    out = []
    for m in sorted({r["apps"] for r in rows}):
        mine = {p: [r for r in rows if r["apps"] == m and r["policy"] == p] for p in POLICIES}
        if any(not v for v in mine.values()):
            raise InputError(f"rows for {m} applications lack a policy of {POLICIES}")
        med = {
            p: {
                k: float(np.median([r[k] for r in mine[p]]))
                for k in ("realized_mean", "simulated_mean", "ratio")
            }
            for p in POLICIES
        }
        hio, sio, nio = (med[p]["realized_mean"] for p in ("hio", "sio", "nio"))
        same = all(r["hio_is_sio"] for r in mine["hio"])
        out.append(
            {
                "apps": m,
                **{f"{p}_{k}": v for p, d in med.items() for k, v in d.items()},
                "ordered": bool(
                    (hio <= sio or (same and hio <= sio * (1 + TIE))) and sio <= nio and hio <= nio
                ),
                "hio_is_sio": same,
                "hio_vs_nio": hio / nio - 1,
                "sio_vs_nio": sio / nio - 1,
                "hio_vs_sio": hio / sio - 1,
                "hio_vs_sio_simulated": med["hio"]["simulated_mean"] / med["sio"]["simulated_mean"]
                - 1,
            }
        )
    return out


def plot(res: dict[str, Any], out: Path) -> Path:
    """Realized average execution time per policy against the number of applications
    (points: each arrival order; lines: medians), the simulator's prediction dashed;
    written to ``out/hio-testbed.png``.

    Examples
    --------
    >>> plot(run(apps=(2, 4), seeds=1), Path("out/bench-hio"))  # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = [s["apps"] for s in res["summary"]]
    styles = {"nio": ("o-", 1.5), "sio": ("s-", 4.0), "hio": ("^-", 1.2)}  # SIO under HIO
    for p, color in zip(POLICIES, ("tab:red", "tab:blue", "tab:green"), strict=True):
        marker, width = styles[p]
        ax.plot(
            xs,
            [s[f"{p}_realized_mean"] for s in res["summary"]],
            marker,
            lw=width,
            color=color,
            alpha=0.6 if p == "sio" else 1.0,
            label=f"{p} realized",
        )
        ax.plot(
            xs,
            [s[f"{p}_simulated_mean"] for s in res["summary"]],
            "--",
            color=color,
            alpha=0.7,
            label=f"{p} simulated",
        )
        mine = [r for r in res["rows"] if r["policy"] == p]
        ax.plot(
            [r["apps"] for r in mine],
            [r["realized_mean"] for r in mine],
            ".",
            color=color,
            alpha=0.4,
        )
    ax.set_xticks(xs)
    ax.set_xlabel("concurrent applications restarting")
    ax.set_ylabel("average execution time (s)")
    cal = res["calibration"]
    ax.set_title(
        f"testbed {res['profile']}: disk {cal['disk'] / 1e6:.2f} MB/s per I/O node, "
        f"compute links {res.get('compute_link', 0) / 1e6:.0f} MB/s",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out / "hio-testbed.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
