"""The distributed walk on a real Dask cluster (worker processes) over real trees: every
entry indexed exactly once by every algorithm, links never followed, faults reported."""

from __future__ import annotations

import os
import random
import signal
import stat
import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

import orchestrator as orc
from orchestrator.errors import InputError, WalkError
from orchestrator.treewalk import ALGORITHMS, KINDS, read_index
from orchestrator.treewalk.lister import inject
from orchestrator.treewalk.runtime import cp_traffic
from orchestrator.treewalk.trees import SHAPES
from orchestrator.treewalk.trees import make_tree as make_shape

WALKERS = 3


@pytest.fixture(scope="module")
def cluster():
    with orc.local_cluster(n_ionodes=WALKERS, n_compute=0) as cl:
        yield cl


def make_tree(top: Path, rng: random.Random, shape: str, size: int) -> None:
    """Folders and files under ``top``: ``deep`` (a chain), ``wide`` (one folder of many),
    ``skewed`` (one heavy branch), ``random``; plus links, a hard link and a FIFO."""
    dirs = [top]
    for i in range(size):
        if shape == "deep":
            parent = dirs[-1]
        elif shape == "wide":
            parent = top
        elif shape == "skewed":
            parent = dirs[-1] if rng.random() < 0.7 else rng.choice(dirs)
        else:
            parent = rng.choice(dirs)
        if (i % 2 == 0) if shape == "deep" else rng.random() < 0.3:
            d = parent / f"d{i}"
            d.mkdir()
            dirs.append(d)
        else:
            (parent / f"f{i}").write_bytes(b"x" * rng.randrange(100))


def oracle(top: Path) -> set[tuple[str, str]]:
    """Every entry under ``top`` (and ``top``) with its kind, by a plain recursive lstat."""
    out = {(str(top), "dir")}
    for name in os.listdir(top):
        p = top / name
        m = os.lstat(p).st_mode
        if stat.S_ISDIR(m):
            out |= oracle(p)
        else:
            kind = "file" if stat.S_ISREG(m) else "link" if stat.S_ISLNK(m) else "other"
            out.add((str(p), kind))
    return out


def indexed(result) -> list[tuple[str, str]]:
    t = read_index(result.index)
    return list(zip(t.column("path").to_pylist(), t.column("kind").to_pylist(), strict=True))


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("shape", ["deep", "wide", "skewed", "random"])
def test_every_entry_once_by_every_algorithm(cluster, tmp_path, algorithm, shape) -> None:
    rng = random.Random(f"{algorithm}{shape}")
    top = tmp_path / "tree"
    top.mkdir()
    make_tree(top, rng, shape, 300 if shape != "deep" else 240)
    (top / "to-root").symlink_to("/")  # followed, it would walk the whole machine
    (top / "loop").symlink_to(top)
    first = next(p for p in top.rglob("f*") if p.is_file())
    os.link(first, top / "hard")
    os.mkfifo(top / "pipe")
    r = orc.walk(top, cluster=cluster, algorithm=algorithm, index=tmp_path / "index")
    rows = indexed(r)
    assert len(rows) == len(set(rows)), "an entry indexed twice"
    assert set(rows) == oracle(top)
    assert r.entries == len(rows) and r.total("links") == 2
    assert r.total("unreadable") == 0 and r.total("vanished") == 0


def test_stat_rows_and_hard_links_reported(cluster, tmp_path) -> None:
    top = tmp_path / "t"
    (top / "a").mkdir(parents=True)
    (top / "a" / "x").write_bytes(b"12345")
    os.link(top / "a" / "x", top / "y")
    r = orc.walk(top, cluster=cluster, algorithm="drqs", stat=True, index=tmp_path / "i")
    t = read_index(r.index).to_pandas().set_index("path")
    assert t.loc[str(top / "y"), "size"] == 5 and t.loc[str(top / "y"), "nlink"] == 2
    assert stat.S_ISDIR(int(t.loc[str(top / "a"), "mode"]))
    assert r.total("hard_links") == 2  # both names of the file
    assert t.loc[str(top / "a" / "x"), "mtime"] == pytest.approx(os.lstat(top / "y").st_mtime)


@pytest.mark.parametrize("algorithm", ["drqs", "h-drqs", "cp"])
def test_trivial_trees(cluster, tmp_path, algorithm) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = orc.walk(empty, cluster=cluster, algorithm=algorithm)
    assert indexed(r) == [(str(empty), "dir")]
    one = tmp_path / "one"
    one.mkdir()
    (one / "f").write_bytes(b"")
    assert set(indexed(orc.walk(one, cluster=cluster, algorithm=algorithm))) == oracle(one)


def test_unreadable_and_vanishing_folders_are_reported_not_fatal(cluster, tmp_path) -> None:
    top = tmp_path / "t"
    for d in ("keep/a", "deny/b", "gone/c"):
        (top / d).mkdir(parents=True)
        (top / d / "f").write_bytes(b"1")
    want = oracle(top)
    cluster.client.run(inject, vanish={str(top / "gone")}, deny={str(top / "deny")})
    try:
        r = orc.walk(top, cluster=cluster, algorithm="h-drqs", index=tmp_path / "i")
    finally:
        cluster.client.run(inject)
    t = read_index(r.index).to_pandas().set_index("path")
    assert t.loc[str(top / "deny"), "error"].startswith("unreadable")
    assert t.loc[str(top / "gone"), "error"] == "vanished during the walk"
    assert r.total("unreadable") == 1 and r.total("vanished") == 1
    assert not (top / "gone").exists()  # it really vanished
    skipped = {p for p, _ in want if "/deny/" in p or "/gone/" in p}
    assert set(t.index) == {p for p, _ in want} - skipped


def test_files_vanishing_while_walked(cluster, tmp_path) -> None:
    """A real race: a thread deletes files while the walkers list them with stat; a file
    is a row (with or without an error), never a failure, never twice."""
    top = tmp_path / "t"
    for i in range(40):
        (top / f"d{i}").mkdir(parents=True)
        for j in range(100):
            (top / f"d{i}" / f"f{j}").write_bytes(b"")
    stop = threading.Event()

    def delete() -> None:
        for p in sorted(top.rglob("f*")):
            if stop.is_set():
                return
            p.unlink(missing_ok=True)

    th = threading.Thread(target=delete)
    th.start()
    try:
        r = orc.walk(top, cluster=cluster, algorithm="drqs", stat=True)
    finally:
        stop.set()
        th.join()
    paths = read_index(r.index).column("path").to_pylist()
    assert len(paths) == len(set(paths))
    assert str(top) in paths and all(str(top / f"d{i}") in paths for i in range(40))


def test_names_that_are_not_utf8(cluster, tmp_path) -> None:
    top = tmp_path / "t"
    top.mkdir()
    bad = os.fsencode(top) + b"/caf\xe9"  # Latin-1, not UTF-8
    os.mkdir(bad)
    open(bad + b"/\xff.bin", "wb").close()
    r = orc.walk(top, cluster=cluster, algorithm="drqs", walkers=2)
    t = read_index(r.index).to_pandas()
    assert len(t) == 3
    assert sorted(t["path"])[1] == f"{top}/caf\\xe9"
    assert (t["error"].notna()).sum() == 2  # both names under the bad folder say so


def test_callback_results_and_index_as_one_dataset(cluster, tmp_path) -> None:
    top = tmp_path / "t"
    (top / "s").mkdir(parents=True)
    for name in ("a.h5", "b.txt", "s/c.h5"):
        (top / name).write_bytes(b"")
    r = orc.walk(
        top,
        lambda p, kind: "checkpoint" if p.endswith(".h5") else None,
        cluster=cluster,
        algorithm="h-drqs",
        index=tmp_path / "i",
    )
    table = ds.dataset(r.index, format="parquet").to_table()
    got = {
        p: v for p, v in zip(table["path"].to_pylist(), table["result"].to_pylist(), strict=True)
    }
    assert got == {
        str(top): None,
        str(top / "s"): None,
        str(top / "a.h5"): "checkpoint",
        str(top / "b.txt"): None,
        str(top / "s" / "c.h5"): "checkpoint",
    }


def test_messages_go_worker_to_worker_and_are_counted(cluster, tmp_path) -> None:
    top = tmp_path / "t"
    make_tree(top, random.Random(1), "random", 2000) if top.mkdir() is None else None
    r = orc.walk(top, cluster=cluster, algorithm="drqs")
    m = r.messages
    assert all(m[i][i] == 0 for i in range(WALKERS))  # nobody writes to itself
    assert r.total_messages > 0 and r.total_bytes > 8 * r.total_messages
    assert sum(w["processed"] for w in r.walkers) == r.total("directories")
    cp = orc.walk(top, cluster=cluster, algorithm="cp")
    # CP: two messages per entry, one request and one stop per slave
    assert cp.total_messages == 2 * cp.entries + 2 * (WALKERS - 1)
    # and counted from the index (what the benchmark does on trees too big to run CP on)
    t = read_index(cp.index)
    kinds = [KINDS.index(k) for k in t.column("kind").to_pylist()]
    counted = cp_traffic(t.column("path").to_pylist(), kinds, t.column("ino").to_pylist(), WALKERS)
    assert counted == (cp.total_messages, cp.total_bytes)
    assert all(cp.messages[i][j] == 0 for i in range(1, WALKERS) for j in range(1, WALKERS))


def test_a_walker_killed_mid_walk_fails_the_walk_and_nothing_hangs(tmp_path) -> None:
    top = tmp_path / "t"
    for i in range(300):
        (top / f"d{i}").mkdir(parents=True)
        for j in range(300):
            (top / f"d{i}" / f"f{j}").write_bytes(b"")
    with orc.local_cluster(n_ionodes=2, n_compute=0) as cl:
        victim = cl.ionodes[1]
        pid = cl.worker_pids()[victim]
        killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(WalkError):
            # cp: slow enough (two messages per entry) to be under way when the kill lands
            orc.walk(top, cluster=cl, algorithm="cp")
        killer.join()
        assert time.monotonic() - t0 < 60
        # the cluster still walks afterwards (the nanny brought the worker back)
        r = orc.walk(top / "d0", cluster=cl, algorithm="drqs")
        assert r.entries == 301


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"algorithm": "bfs"}, "algorithm"),
        ({"algorithm": "drqs", "threads": 4}, "threads"),
        ({"threads": 0}, "threads"),
        ({"walkers": 0}, "walkers"),
        ({"walkers": 99}, "walkers"),
        ({"algorithm": "cp", "walkers": 1}, "walkers"),
        ({"seed": -1}, "seed"),
        ({"hosts": "ab"}, "hosts"),
        ({"hosts": ["a"]}, "hosts"),
        ({"callback": 3}, "callback"),
        ({"op": "verify"}, "op"),
        ({"algorithm": "cp", "callback": print}, "cp"),
    ],
)
def test_bad_arguments_are_named(cluster, tmp_path, kwargs, field) -> None:
    with pytest.raises(InputError, match=field):
        orc.walk(tmp_path, cluster=cluster, **kwargs)


def test_bad_roots_and_a_used_index_are_refused(cluster, tmp_path) -> None:
    (tmp_path / "f").write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path)
    for root, what in [
        (tmp_path / "nowhere", "cannot be walked"),
        (tmp_path / "f", "not a folder"),
        (tmp_path / "link", "symbolic link"),
        ("", "must name a folder"),
        (3, "must name a folder"),
    ]:
        with pytest.raises(InputError, match=what):
            orc.walk(root, cluster=cluster)
    with pytest.raises(InputError, match="inside the tree"):  # it would list its own parts
        orc.walk(tmp_path, cluster=cluster, index=tmp_path / "idx")
    (tmp_path / "t").mkdir()
    r = orc.walk(tmp_path / "t", cluster=cluster, index=tmp_path / "idx")
    assert r.entries == 1
    with pytest.raises(InputError, match="already holds"):
        orc.walk(tmp_path / "t", cluster=cluster, index=tmp_path / "idx")
    with pytest.raises(InputError, match="not a folder"):
        orc.walk(tmp_path / "t", cluster=cluster, index=tmp_path / "f")


@pytest.mark.parametrize("shape", SHAPES)
def test_generated_trees_have_exactly_the_entries_asked(tmp_path, shape) -> None:
    for n in (1, 2, 99, 1001, 4567):
        top = tmp_path / f"{shape}-{n}"
        assert make_shape(str(top), shape, n) == n
        assert len(oracle(top)) == n


def test_the_walk_benchmark_runs_and_its_numbers_hold_together(tmp_path) -> None:
    """A small ``iorch bench walk``: every contender listed every entry, CP's count was
    checked against its real runs (the run raises otherwise), verify agreed."""
    import json
    import subprocess
    import sys

    iorch = str(Path(sys.executable).with_name("iorch"))
    run = subprocess.run(
        [
            iorch,
            "bench",
            "walk",
            "--entries",
            "3000",
            "--repeat",
            "1",
            "--checkpoints",
            "12",
            "--out",
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    assert set(res["speed"]["rate"]) >= {"find", "os.scandir", "h-drqs", "drqs", "cp-dirs"}
    assert res["verify"]["same"] and res["verify"]["walk_found"] == res["verify"]["damaged"]
    real = [r for r in res["traffic"] if r["algorithm"] == "cp" and not r["counted"]]
    assert len(real) == 5 and all(r["entries"] in (3000,) for r in real)
    assert (tmp_path / "b" / "walk-heatmaps.png").stat().st_size > 10_000


def test_progress_is_reported_while_a_walk_runs(cluster, tmp_path) -> None:
    top = tmp_path / "t"
    make_shape(str(top), "balanced", 1500)
    seen: list[tuple[int, float]] = []
    # cp: two Dask messages per entry, slow enough to be watched for a second or more
    r = orc.walk(top, cluster=cluster, algorithm="cp", on_progress=lambda n, s: seen.append((n, s)))
    assert seen, "no progress reported"
    counts = [n for n, _ in seen]
    # during the walk (if it lasts a second) and once at its end, with every entry
    assert counts == sorted(counts) and counts[-1] == r.entries
    assert all(s > 0 for _, s in seen)


def test_a_huge_folder_is_indexed_in_batches_and_no_row_is_lost(tmp_path) -> None:
    from orchestrator.treewalk.index import IndexPart
    from orchestrator.treewalk.lister import Tally, dir_item, list_item

    top = tmp_path / "t"
    top.mkdir()
    for i in range(9000):
        (top / f"f{i}").touch()
    part = IndexPart(str(tmp_path / "part-0.parquet"), 0, stat=False, batch=100)
    st = os.lstat(top)
    tally = Tally()
    list_item(dir_item(str(top), st.st_ino), part, tally, dev=st.st_dev)
    assert part.rows >= 8192  # flushed while the folder was being listed
    assert part.close() == tally.entries == 9001
    assert len(set(read_index(tmp_path).column("path").to_pylist())) == 9001
