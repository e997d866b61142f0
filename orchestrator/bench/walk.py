"""``iorch bench walk``: the distributed tree walk against GNU find, ``os.walk`` and a
one-process ``os.scandir`` loop on the same trees in the same run, and the algorithms
against each other (messages, bytes, balance), as in the tree-walk paper's Figs. 3-6.

Three parts:

1. **Speed**: the ``balanced`` tree of ``entries`` entries, warm in the page cache,
   listed (no ``stat``) by ``find`` (to /dev/null), ``fd`` if installed, one Python
   process, and every algorithm with ``walkers`` walkers (each writing its Parquet
   index, which ``find`` does not). Repeats interleave the contenders; medians.
2. **Messages, bytes, balance**: every tree shape, every algorithm, ``mwalkers``
   walkers (H-DRQS: each with two threads over its queue), spread over ``mwalkers / 2``
   hosts given to PA-DRQS as its hosts (on one machine the hosts are only names: it is
   the messages that differ, not their cost).
   CP is run for real up to ``cp_max`` entries; beyond, its traffic is counted from
   the index (:func:`~orchestrator.treewalk.runtime.cp_traffic`), a count the run
   checks against a real CP walk of the smaller trees.
3. **Verify**: a tree of ``checkpoints`` checkpoints written by the engine (copies of
   two it writes, HDF5 and Zarr), a tenth damaged; ``iorch walk --op verify`` against
   ``verify`` run on each checkpoint in one process: the same damaged set, and the
   times.

Examples
--------
>>> res = run("out/bench-walk", entries=100_000)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.cluster import local_cluster
from ..errors import InputError, OrchestratorError
from ..treewalk import read_index, walk
from ..treewalk.index import KINDS
from ..treewalk.ops import Verify
from ..treewalk.runtime import cp_traffic
from ..treewalk.trees import make_tree

__all__ = ["ALGORITHMS", "checkpoint_tree", "damage", "run"]

#: the contenders of parts 1 and 2 (cp only in part 2: two messages per entry)
SPEED = ("drqs", "deqs", "pa-drqs", "h-drqs", "cp-dirs")
ALGORITHMS = ("drqs", "deqs", "pa-drqs", "h-drqs", "cp-dirs", "cp")
#: the smaller shapes' size (the issue's range is 1e5-1e6)
SMALL = 100_000


def _find(root: str) -> float:
    t = time.perf_counter()
    subprocess.run(["find", root], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def _fd(root: str) -> float | None:
    exe = shutil.which("fd") or shutil.which("fdfind")
    if exe is None:
        return None
    t = time.perf_counter()
    # every entry, hidden and ignored ones too, no colour: what find lists
    subprocess.run(
        [exe, "-uu", "--color", "never", ".", root], stdout=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - t


def _scandir(root: str) -> float:
    """One process, the leanest Python listing: paths kept in a list (our walkers keep
    theirs in a Parquet file)."""
    t = time.perf_counter()
    stack, out = [root], [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                out.append(e.path)
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return time.perf_counter() - t


def _oswalk(root: str) -> float:
    t = time.perf_counter()
    n = 0
    for _, dirs, files in os.walk(root):
        n += len(dirs) + len(files)
    return time.perf_counter() - t


def _trees(folder: Path, entries: int) -> dict[str, tuple[str, int]]:
    """The trees, made once and kept (a marker file says a tree is complete)."""
    small = min(entries, SMALL)
    plan = {
        "balanced": entries,
        "skewed": entries,
        "deep": small,
        "wide": small,
        "small-files": small,
    }
    out = {}
    for shape, n in plan.items():
        root = folder / f"{shape}-{n}"
        done = folder / f".{shape}-{n}.complete"
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            make_tree(str(root), shape, n)
            done.write_text(str(n))
        out[shape] = (str(root), n)
    return out


def _walk_row(r: Any, tree: str, algorithm: str, n: int) -> dict[str, Any]:
    return {
        "tree": tree,
        "algorithm": algorithm,
        "walkers": n,
        "entries": r.entries,
        "seconds": r.seconds,
        "rate": r.entries_per_second,
        "messages": r.total_messages,
        "bytes": r.total_bytes,
        "work": r.work(),
        "imbalance": r.imbalance(),
        "matrix_bytes": r.nbytes,
        "matrix_messages": r.messages,
        "counted": False,
    }


def _speed(
    trees: dict[str, tuple[str, int]],
    walkers: int,
    repeat: int,
    index: Path,
    note: Callable[[str], None],
) -> dict[str, Any]:
    root, n = trees["balanced"]
    times: dict[str, list[float]] = {}
    with local_cluster(n_ionodes=walkers, n_compute=0) as cl:
        _find(root)  # warm the page cache (and the walkers' imports)
        walk(root, cluster=cl, algorithm="drqs", index=index / "warm")
        for rep in range(repeat):
            for name, fn in (
                ("find", _find),
                ("fd", _fd),
                ("os.scandir", _scandir),
                ("os.walk", _oswalk),
            ):
                dt = fn(root)
                if dt is not None:
                    times.setdefault(name, []).append(dt)
            for alg in SPEED:
                r = walk(root, cluster=cl, algorithm=alg, index=index / f"speed-{alg}-{rep}")
                if r.entries != n:
                    raise OrchestratorError(f"{alg} indexed {r.entries} entries of {n}")
                times.setdefault(alg, []).append(r.seconds)
                shutil.rmtree(index / f"speed-{alg}-{rep}")
            note(f"speed: repeat {rep + 1} of {repeat}")
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "tree": root,
        "entries": n,
        "walkers": walkers,
        "seconds": times,
        "rate": {k: n / v for k, v in med.items()},
        "over_find": {k: med["find"] / v for k, v in med.items()},
    }


def _traffic(
    trees: dict[str, tuple[str, int]],
    mwalkers: int,
    cp_max: int,
    index: Path,
    note: Callable[[str], None],
    testbed: str | None = None,
) -> list[dict[str, Any]]:
    if testbed is None:
        with local_cluster(n_ionodes=mwalkers, n_compute=0) as cl:
            # on one machine hosts are only names given to PA-DRQS: two walkers per host
            return _traffic_on(
                cl, trees, mwalkers, cp_max, index, note, [f"h{r // 2}" for r in range(mwalkers)]
            )
    from ..testbed import up

    # one walker per emulated host (the testbed runs one worker per host): PA-DRQS's hosts
    # are the workers' own addresses, and every message crosses two shaped links
    with up(testbed, n_io=1, n_compute=mwalkers - 1) as tb, tb.connect() as cl:
        return _traffic_on(cl, trees, mwalkers, cp_max, index, note, None)


def _traffic_on(
    cl: Any,
    trees: dict[str, tuple[str, int]],
    mwalkers: int,
    cp_max: int,
    index: Path,
    note: Callable[[str], None],
    hosts: list[str] | None,
) -> list[dict[str, Any]]:
    rows = []
    checks = []
    smallest = min(trees.values(), key=lambda t: t[1])[0]
    walk(smallest, cluster=cl, walkers=mwalkers, index=index / "warm-traffic")  # imports
    shutil.rmtree(index / "warm-traffic")
    for shape, (root, n) in trees.items():
        for alg in ALGORITHMS:
            where = index / f"{shape}-{alg}"
            if alg == "cp" and n > cp_max:
                continue
            kw: dict[str, Any] = {
                "cluster": cl,
                "algorithm": alg,
                "index": where,
                "walkers": mwalkers,
            }
            if alg == "pa-drqs" and hosts is not None:
                kw["hosts"] = hosts
            if alg == "h-drqs":
                kw["threads"] = 2
            r = walk(root, **kw)
            rows.append(_walk_row(r, shape, alg, len(r.walkers)))
            if alg == "drqs":
                t = read_index(where)
                paths = t.column("path").to_pylist()
                kinds = [KINDS.index(k) for k in t.column("kind").to_pylist()]
                inodes = t.column("ino").to_pylist()
                msgs, nbytes = cp_traffic(paths, kinds, inodes, mwalkers)
                rows.append(
                    {
                        **_walk_row(r, shape, "cp", mwalkers),
                        "messages": msgs,
                        "bytes": nbytes,
                        "counted": True,
                        "seconds": None,
                        "rate": None,
                        "work": [],
                        "imbalance": None,
                        "matrix_bytes": None,
                        "matrix_messages": None,
                    }
                )
                checks.append((shape, msgs, nbytes))
            shutil.rmtree(where)
            note(f"traffic: {shape} {alg}")
    # the count is checked against every real CP run of the same tree
    for shape, msgs, nbytes in checks:
        real = [
            x for x in rows if x["tree"] == shape and x["algorithm"] == "cp" and not x["counted"]
        ]
        for x in real:
            if (x["messages"], x["bytes"]) != (msgs, nbytes):
                raise OrchestratorError(
                    f"CP's counted traffic on {shape} ({msgs}, {nbytes}) differs from its real "
                    f"run ({x['messages']}, {x['bytes']})"
                )
    return rows


def damage(path: Path, how: str) -> None:
    """Damage a checkpoint for real: ``flip`` a data byte, ``truncate`` it (a Zarr store
    loses its group's zarr.json), or ``empty`` it.

    Examples
    --------
    >>> damage(Path("runs/0/step0001.h5"), "flip")  # doctest: +SKIP
    """
    import h5py

    if how == "flip" and path.is_file():
        with h5py.File(path, "r") as f:
            at = f["u"].id.get_offset() + 100
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0xFF]))
    elif how == "flip":
        shard = max(
            (p for p in (path / "u").rglob("*") if p.is_file() and p.name != "zarr.json"),
            key=lambda p: p.stat().st_size,
        )
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif how == "truncate" and path.is_file():
        os.truncate(path, path.stat().st_size // 2)
    elif how == "truncate":
        (path / "zarr.json").unlink()
    elif how == "empty":
        if path.is_dir():
            shutil.rmtree(path)
            path.mkdir()
        else:
            path.write_bytes(b"")
    else:
        raise InputError(f"how must be flip, truncate or empty, got {how!r}")


def checkpoint_tree(
    top: Path, templates: dict[str, Path], n: int, seed: int, share: float = 0.2
) -> tuple[list[Path], set[Path]]:
    """``n`` copies of the ``templates`` (format -> checkpoint) over nested run folders, a
    ``share`` of them damaged at random; returns every checkpoint and the damaged ones.

    Examples
    --------
    >>> paths, damaged = checkpoint_tree(Path("runs"), templates, 100, 0)  # doctest: +SKIP
    """
    rng = random.Random(seed)
    paths, damaged = [], set()
    for i in range(n):
        fmt = rng.choice(sorted(templates))
        suffix = ".h5" if fmt.startswith("hdf5") else ".zarr"
        at = top / f"run{i % 7}" / f"seg{i % 3}" / f"step{i:04d}{suffix}"
        at.parent.mkdir(parents=True, exist_ok=True)
        if templates[fmt].is_dir():
            shutil.copytree(templates[fmt], at)
        else:
            shutil.copy2(templates[fmt], at)
        paths.append(at)
        if rng.random() < share:
            damage(at, rng.choice(["flip", "truncate", "empty"]))
            damaged.add(at)
    (top / "run0" / "notes.txt").write_text("not a checkpoint")
    return paths, damaged


def _verify(folder: Path, checkpoints: int, walkers: int, index: Path) -> dict[str, Any]:
    from ..contributions import Contribution, DatasetSpec
    from ..engine.stage import write_stage
    from ..engine.verify import verify

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rows = np.arange(4096)
    datasets = {
        "u": (DatasetSpec("u", (4096, 8), "f8"), [Contribution(0, rows, np.ones((4096, 8)))])
    }
    templates = {}
    with local_cluster(n_ionodes=walkers, n_compute=1) as cl:
        for fmt, suffix in (("hdf5", ".h5"), ("zarr", ".zarr")):
            templates[fmt] = folder / f"template{suffix}"
            write_stage(templates[fmt], datasets, format=fmt, cluster=cl, stripe_bytes=8192)
        top = folder / "runs"
        paths, damaged = checkpoint_tree(top, templates, checkpoints, seed=0, share=0.1)
        t = time.perf_counter()
        single = set()
        for p in paths:  # what `iorch verify` says of each, one after another
            try:
                if verify(p):
                    single.add(p)
            except OrchestratorError:
                single.add(p)
        t_single = time.perf_counter() - t
        r = walk(top, op=Verify(), cluster=cl, algorithm="h-drqs", index=index / "verify")
    table = read_index(r.index).to_pandas()
    found = {
        Path(p)
        for p, v in zip(table["path"], table["result"], strict=True)
        if isinstance(v, str) and v.startswith("damaged")
    }
    shutil.rmtree(index / "verify")
    return {
        "checkpoints": len(paths),
        "damaged": len(damaged),
        "single_found": len(single),
        "walk_found": len(found),
        "same": found == single,
        "missed": sorted(str(p) for p in single - found),
        "single_seconds": t_single,
        "walk_seconds": r.seconds,
        "walkers": len(r.walkers),
    }


def run(
    out: str | os.PathLike[str],
    entries: int = 1_000_000,
    walkers: int = 2,
    mwalkers: int = 4,
    repeat: int = 3,
    cp_max: int = 200_000,
    checkpoints: int = 1000,
    trees: str | os.PathLike[str] | None = None,
    testbed: str | None = None,
    note: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """Run the three parts; write ``results.json`` and the figures under ``out``.

    Examples
    --------
    >>> run("out/bench-walk", entries=100_000, repeat=1)  # doctest: +SKIP

    ``testbed`` (a profile name, needs root) runs part 2 a second time on an emulated
    cluster: one walker per host, messages over shaped links.
    """
    import json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(trees) if trees is not None else out / "trees"
    folder.mkdir(parents=True, exist_ok=True)
    index = out / "index"
    shutil.rmtree(index, ignore_errors=True)
    note("making the trees (kept for the next run)")
    made = _trees(folder, entries)
    res: dict[str, Any] = {"entries": entries, "walkers": walkers, "mwalkers": mwalkers}
    res["speed"] = _speed(made, walkers, repeat, index, note)
    res["traffic"] = _traffic(made, mwalkers, cp_max, index, note)
    if testbed is not None:
        note(f"traffic on the {testbed} testbed")
        res["testbed"] = testbed
        res["traffic_testbed"] = _traffic(made, mwalkers, cp_max, index, note, testbed)
    res["verify"] = _verify(out / "checkpoints", checkpoints, walkers, index)
    note("plots")
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    plot(res, out)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return res


def plot(res: dict[str, Any], out: Path) -> None:
    """The heat maps of bytes between walkers (the paper's Fig. 5) on the balanced tree,
    and each walker's share of the work on the skewed tree (Fig. 6).

    Examples
    --------
    >>> plot(res, Path("out/bench-walk"))  # doctest: +SKIP
    """
    from matplotlib.colors import LogNorm

    from ..plots import _pyplot, close

    plt = _pyplot()
    real = [r for r in res["traffic"] if r["tree"] == "balanced" and r["matrix_bytes"]]
    cp = next(
        (r for r in res["traffic"] if r["tree"] == "balanced" and r["algorithm"] == "cp"), None
    )
    top = max(max(map(max, r["matrix_bytes"])) for r in real) if real else 1
    if cp is not None:  # CP's master sends and gets about its total over 2 (n - 1) pairs
        top = max(top, cp["bytes"] / max(1, 2 * (cp["walkers"] - 1)))
    norm = LogNorm(vmin=10, vmax=max(top, 100))  # one scale: volumes compare across panels
    fig, axes = plt.subplots(1, len(real), figsize=(3.2 * len(real), 3.3), squeeze=False)
    im = None
    for ax, r in zip(axes[0], real, strict=True):
        m = np.array(r["matrix_bytes"], dtype=float)
        im = ax.imshow(np.where(m > 0, m, np.nan), cmap="Reds", norm=norm)
        ax.set_title(f"{r['algorithm']}: {int(m.sum()):,} B", fontsize=9)
        ax.set_xticks(range(len(m)))
        ax.set_yticks(range(len(m)))
        ax.set_xlabel("to rank")
    axes[0][0].set_ylabel("from rank")
    if im is not None:
        fig.colorbar(im, ax=axes[0].tolist(), fraction=0.02, label="bytes")
    title = "bytes sent between walkers, balanced tree (one log scale)"
    if cp is not None:
        title += f"; CP{' (counted)' if cp['counted'] else ''}: {cp['bytes']:,} B"
    fig.suptitle(title)
    fig.savefig(out / "walk-heatmaps.png", dpi=110, bbox_inches="tight")
    close(fig)
    skew = [r for r in res["traffic"] if r["tree"] == "skewed" and r["work"]]
    fig, axes = plt.subplots(
        1, len(skew), figsize=(3.0 * len(skew), 2.8), squeeze=False, sharey=True
    )
    for ax, r in zip(axes[0], skew, strict=True):
        work = np.array(r["work"], dtype=float)
        share = 100 * work / work.sum()
        ax.bar(range(len(work)), share, color="tab:blue")
        ax.axhline(100 / len(work), color="k", lw=0.8, ls="--")
        ax.set_xticks(range(len(work)))
        ax.set_title(f"{r['algorithm']} (±{100 * r['imbalance']:.0f} %)", fontsize=9)
        ax.set_xlabel("walker")
    axes[0][0].set_ylabel("% of the entries")
    fig.suptitle("each walker's share of the work, skewed tree")
    fig.tight_layout()
    fig.savefig(out / "walk-balance.png", dpi=110)
    close(fig)
