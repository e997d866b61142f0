"""``iorch walk``'s operations over real checkpoint trees written by the engine: verify
finds what ``iorch verify`` finds, delete prunes only what it should, copy archives the
tree byte for byte (large files in pieces), checksum agrees with zlib."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

import orchestrator as orc
from orchestrator.bench.walk import checkpoint_tree
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.errors import InputError, OrchestratorError
from orchestrator.treewalk import read_index
from orchestrator.treewalk.ops import Checksum, Copy, Delete, Verify

IORCH = str(Path(sys.executable).with_name("iorch"))


@pytest.fixture(scope="module")
def cluster():
    with orc.local_cluster(n_ionodes=2, n_compute=1) as cl:
        yield cl


@pytest.fixture(scope="module")
def templates(cluster, tmp_path_factory):
    """One HDF5 and one Zarr checkpoint written by the engine, copied where tests want."""
    top = tmp_path_factory.mktemp("templates")
    rows = np.arange(512)
    datasets = {
        "u": (DatasetSpec("u", (512, 4), "f8"), [Contribution(0, rows, np.ones((512, 4)))]),
    }
    out = {}
    for fmt, suffix in (("hdf5", ".h5"), ("zarr", ".zarr")):
        out[fmt] = top / f"ckpt{suffix}"
        orc.write_stage(out[fmt], datasets, format=fmt, cluster=cluster, stripe_bytes=1024)
    return out


def place(template: Path, at: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    if template.is_dir():
        shutil.copytree(template, at)
    else:
        shutil.copy2(template, at)
    return at


def single_process(paths: list[Path]) -> set[Path]:
    """What ``iorch verify`` says, one checkpoint after another."""
    bad = set()
    for p in paths:
        try:
            if orc.verify(p):
                bad.add(p)
        except OrchestratorError:
            bad.add(p)
    return bad


@pytest.mark.parametrize("algorithm", ["h-drqs", "drqs", "pa-drqs"])
def test_verify_finds_every_damaged_checkpoint_iorch_verify_finds(
    cluster, templates, tmp_path, algorithm
) -> None:
    top = tmp_path / "runs"
    paths, damaged = checkpoint_tree(top, templates, 60, seed=len(algorithm))
    want = single_process(paths)
    assert want == damaged  # the damage is real: iorch verify sees each one
    r = orc.walk(top, op=Verify(), cluster=cluster, algorithm=algorithm, walkers=3)
    t = read_index(r.index).to_pandas().set_index("path")
    verdicts = t["result"].dropna()
    assert {Path(p) for p, v in verdicts.items() if v.startswith("damaged")} == want
    assert {Path(p) for p, v in verdicts.items() if v == "ok"} == set(paths) - want
    assert sum(w["op"]["checked"] for w in r.walkers) == len(paths)
    # a Zarr checkpoint is one entry: the walk never went into it
    assert not any(".zarr/" in p for p in t.index)


def test_verify_from_the_command_line_exits_1_on_damage(cluster, templates, tmp_path) -> None:
    top = tmp_path / "runs"
    paths, damaged = checkpoint_tree(top, templates, 12, seed=3)
    assert damaged
    run = subprocess.run(
        [IORCH, "walk", str(top), "--op", "verify", "--walkers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stderr
    assert f"{len(paths)} checkpoints checked, {len(damaged)} damaged" in run.stdout
    for p in damaged:
        assert str(p) in run.stderr
    for p in damaged:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    run = subprocess.run(
        [IORCH, "walk", str(top), "--op", "verify", "--walkers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr


def test_delete_prunes_old_checkpoints_keeps_the_latest_and_nothing_else(
    cluster, templates, tmp_path
) -> None:
    top = tmp_path / "runs"
    now = time.time()
    made = {}
    for run in ("a", "b/c"):
        for k in range(5):
            fmt = "hdf5" if k % 2 else "zarr"
            p = place(templates[fmt], top / run / f"s{k}{'.h5' if fmt == 'hdf5' else '.zarr'}")
            age = (5 - k) * 86400.0  # s0 is 5 days old, s4 one day
            os.utime(p, (now - age, now - age))
            made[p] = age
    leftover = top / "a" / ".s9.h5.tmp-0123456789ab"  # a crashed stage's unfinished output
    leftover.write_bytes(b"partial")
    os.utime(leftover, (now - 3 * 86400, now - 3 * 86400))
    fresh = top / "a" / ".s10.h5.tmp-aaaaaaaaaaaa"  # a stage writing right now
    fresh.write_bytes(b"partial")
    user = top / "a" / "results.csv"
    user.write_text("keep me")
    os.utime(user, (now - 99 * 86400, now - 99 * 86400))
    outside = tmp_path / "outside.h5"
    place(templates["hdf5"], outside)
    (top / "a" / "link.h5").symlink_to(outside)
    before = sorted(top.rglob("*"))

    dry = orc.walk(
        top,
        op=Delete(str(top), older_than=2.5 * 86400, keep_latest=1, now=now),
        cluster=cluster,
        walkers=2,
    )
    assert sorted(top.rglob("*")) == before  # a dry run deletes nothing
    t = read_index(dry.index).to_pandas().set_index("path")
    doomed = {Path(p) for p, v in t["result"].dropna().items() if v == "would delete"}
    old = {p for p, age in made.items() if age > 2.5 * 86400}
    assert doomed == old | {leftover}

    orc.walk(
        top,
        op=Delete(str(top), older_than=2.5 * 86400, keep_latest=1, now=now, apply=True),
        cluster=cluster,
        walkers=2,
    )
    for p in made:
        assert p.exists() == (p not in old), p
    assert not leftover.exists() and fresh.exists() and user.exists()
    assert outside.exists() and (top / "a" / "link.h5").is_symlink()

    orc.walk(top, op=Delete(str(top), keep_latest=1, now=now, apply=True), cluster=cluster)
    left = sorted(p.name for p in top.rglob("s*") if p.parent.name in ("a", "c"))
    assert left == ["s4.zarr", "s4.zarr"]  # the newest of each folder


def test_copy_archives_the_tree_with_large_files_in_pieces(cluster, tmp_path) -> None:
    src = tmp_path / "src"
    rng = np.random.default_rng(0)
    (src / "a" / "b").mkdir(parents=True)
    big = rng.integers(0, 256, 3 * 65536 + 123, dtype=np.uint8).tobytes()
    (src / "a" / "big.bin").write_bytes(big)
    for i in range(30):
        (src / "a" / "b" / f"f{i}").write_bytes(
            rng.integers(0, 256, i * 100, dtype=np.uint8).tobytes()
        )
    (src / "link").symlink_to("a/big.bin")
    (src / "empty").mkdir()
    os.utime(src / "a" / "big.bin", (1e9, 1e9))
    dest = tmp_path / "archive"
    r = orc.walk(src, op=Copy(str(src), str(dest), chunk=65536), cluster=cluster, walkers=2)
    assert (dest / "a" / "big.bin").read_bytes() == big
    assert (dest / "a" / "big.bin").stat().st_mtime == 1e9  # set after the last piece
    for i in range(30):
        assert (dest / "a" / "b" / f"f{i}").read_bytes() == (src / "a" / "b" / f"f{i}").read_bytes()
    assert os.readlink(dest / "link") == "a/big.bin" and (dest / "empty").is_dir()
    assert stat.S_IMODE((dest / "a").stat().st_mode) == stat.S_IMODE((src / "a").stat().st_mode)
    assert sum(w["op"]["files"] for w in r.walkers) == 31
    assert sum(w["op"]["bytes"] for w in r.walkers) == len(big) + sum(i * 100 for i in range(30))
    with pytest.raises(InputError, match="inside the tree"):
        Copy(str(src), str(src / "a"))
    with pytest.raises(InputError, match="not an empty folder"):
        Copy(str(src), str(dest))


def test_checksum_agrees_with_zlib(cluster, tmp_path) -> None:
    top = tmp_path / "t"
    top.mkdir()
    for i in range(10):
        (top / f"f{i}").write_bytes(os.urandom(i * 1000))
    r = orc.walk(top, op=Checksum(block=4096), cluster=cluster)
    t = read_index(r.index).to_pandas().set_index("path")
    for i in range(10):
        want = f"{zlib.crc32((top / f'f{i}').read_bytes()):08x}"
        assert t.loc[str(top / f"f{i}"), "result"] == want


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--op", "copy"], "DEST"),
        (["--op", "delete"], "older_than or keep_latest"),
        (["--op", "delete", "--older-than", "soon"], "--older-than"),
        (["--op", "verify", "--apply"], "--op delete"),
        (["--op", "rename"], "--op"),
        (["--algorithm", "dfs"], "algorithm"),
    ],
)
def test_cli_refuses_bad_options_by_name(tmp_path, argv, message) -> None:
    run = subprocess.run(
        [IORCH, "walk", str(tmp_path), *argv], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert message in run.stderr and "Traceback" not in run.stderr


# --- what a hostile probe found (each test failed before its fix) ---


def _old_checkpoint(templates, at: Path, days: float = 10.0) -> Path:
    place(templates["hdf5"], at)
    old = time.time() - days * 86400
    os.utime(at, (old, old))
    return at


@pytest.mark.parametrize("which", ["the folder itself", "a folder on its path"])
def test_a_folder_swapped_for_a_link_mid_walk_is_not_followed(cluster, templates, tmp_path, which):
    """A hostile user swaps a queued folder (or its parent) for a link to somewhere else
    between its listing and its walk: delete --apply must not touch what the link leads
    to, and the index says what happened."""
    from orchestrator.treewalk.lister import inject

    top = tmp_path / "tree"
    outside = tmp_path / "outside"
    for d in (top / "s1" / "sub", outside / "sub"):
        d.mkdir(parents=True)
    _old_checkpoint(templates, top / "s1" / "sub" / "mine.h5")
    precious = [_old_checkpoint(templates, outside / "sub" / f"p{i}.h5") for i in range(3)]
    precious += [_old_checkpoint(templates, outside / f"q{i}.h5") for i in range(3)]
    queued = str(top / "s1" / "sub")
    swap = (
        {queued: (queued, str(outside))}
        if which == "the folder itself"
        else {queued: (str(top / "s1"), str(outside))}
    )
    cluster.client.run(inject, swap=swap)
    try:
        r = orc.walk(
            top,
            op=Delete(str(top), older_than=86400, apply=True),
            cluster=cluster,
            algorithm="drqs",
            walkers=2,
        )
    finally:
        cluster.client.run(inject)
    assert all(p.exists() for p in precious), "a file outside the tree was deleted"
    t = read_index(r.index).to_pandas().set_index("path")
    assert "replaced" in t.loc[queued, "error"]
    assert r.total("replaced") == 1


def test_copy_refuses_a_dest_that_leads_into_the_tree_and_an_op_for_another_tree(tmp_path):
    src = tmp_path / "src"
    (src / "inbox").mkdir(parents=True)
    (tmp_path / "clink").symlink_to(src / "inbox")
    with pytest.raises(InputError, match="inside the tree"):
        Copy(str(src), str(tmp_path / "clink"))
    (tmp_path / "plink").symlink_to(src)
    with pytest.raises(InputError, match="inside the tree"):
        Copy(str(src), str(tmp_path / "plink" / "archive"))
    with pytest.raises(InputError, match="op is for the tree"):
        orc.walk(
            src,
            op=Copy(str(src / "inbox"), str(tmp_path / "d")),
            cluster=object.__new__(type("C", (), {"client": None})),
        )


def test_delete_keeps_what_only_looks_like_a_checkpoint(cluster, templates, tmp_path):
    """A folder holding a master.h5 that is the user's, an HDF5 file (netCDF-4 is one)
    that no stage wrote: kept, however old."""

    top = tmp_path / "t"
    proj = top / "my_project"
    proj.mkdir(parents=True)
    (proj / "master.h5").write_text("my notes")
    (proj / "thesis.tex").write_text("chapter 1")
    with h5py.File(top / "results.nc", "w") as f:
        f["x"] = np.arange(3)
    ours = _old_checkpoint(templates, top / "old.h5")
    for p in (proj, proj / "master.h5", proj / "thesis.tex", top / "results.nc"):
        os.utime(p, (1e9, 1e9))
    orc.walk(top, op=Delete(str(top), older_than=86400, apply=True), cluster=cluster)
    assert (proj / "thesis.tex").exists() and (top / "results.nc").exists()
    assert not ours.exists()


def test_delete_apply_rows_say_deleted_not_vanished(cluster, templates, tmp_path):
    top = tmp_path / "t"
    top.mkdir()
    z = top / "old.zarr"
    shutil.copytree(templates["zarr"], z)
    os.utime(z, (1e9, 1e9))
    r = orc.walk(top, op=Delete(str(top), older_than=86400, apply=True), cluster=cluster)
    t = read_index(r.index).to_pandas().set_index("path")
    assert t.loc[str(z), "result"] == "deleted" and pd.isna(t.loc[str(z), "error"])
    assert r.total("vanished") == 0 and not z.exists()


def test_no_hang_on_a_fifo_and_no_failure_on_a_vanished_piece(tmp_path):
    from orchestrator.treewalk.ops import open_regular

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        open_regular(str(fifo))  # a blocking open would wait for a writer for ever
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(OSError):
        open_regular(str(link))
    op = Copy(str(tmp_path / "src"), str(tmp_path / "dst"), chunk=4096)
    assert op.item(("piece", str(tmp_path / "gone"), str(tmp_path / "x"), 0, 4096, 1, 1)) == []
    assert op.summary()["failed"] and "gone" in op.summary()["failed"][0]


def test_results_quoting_a_name_that_is_not_utf8(cluster, tmp_path):
    top = tmp_path / "t"
    top.mkdir()
    os.mkdir(os.fsencode(top) + b"/d\xfe.zarr")
    r = orc.walk(top, lambda p, kind: p, cluster=cluster)
    t = read_index(r.index).to_pandas()
    assert sorted(t["result"].dropna()) == sorted([str(top), f"{top}/d\\xfe.zarr"])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"algorithm": ["drqs"]}, "algorithm"),
        ({"hosts": 5}, "hosts"),
        ({"index": 123}, "index"),
        ({"index": ""}, "index"),
        ({"cluster": "x"}, "cluster"),
        ({"stat": "no"}, "stat"),
        ({"seed": 2**63}, "seed"),
    ],
)
def test_api_refuses_bad_types_by_name(tmp_path, kwargs, field):
    with pytest.raises(InputError, match=field):
        orc.walk(tmp_path, **kwargs)


def test_a_callback_that_cannot_reach_the_walkers_is_named(cluster, tmp_path):
    import threading as th

    lock = th.Lock()
    with pytest.raises(InputError, match="must pickle"):
        orc.walk(tmp_path, lambda p, k: lock, cluster=cluster)


def test_a_root_through_a_link_and_dotdot_is_what_the_kernel_says(cluster, tmp_path):
    (tmp_path / "real" / "x").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "lnk").symlink_to(tmp_path / "real" / "x")
    r = orc.walk(f"{tmp_path}/other/lnk/..", cluster=cluster, walkers=2)
    assert r.root == str(tmp_path / "real")  # as `ls other/lnk/..` shows it
    r = orc.walk(tmp_path, cluster=cluster, walkers=2, threads=256)
    assert r.entries >= 5


def test_copy_drops_setuid_and_a_default_h_drqs_walk_runs_four_threads(cluster, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    tool = src / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    os.chmod(tool, 0o4755)
    dest = tmp_path / "dest"
    r = orc.walk(src, op=Copy(str(src), str(dest)), cluster=cluster, walkers=2)
    assert stat.S_IMODE((dest / "tool").stat().st_mode) == 0o755  # the copy is the copier's
    # h-drqs (the default) runs 4 threads per walker: one index part each
    assert r.algorithm == "h-drqs"
    assert len(list(Path(r.index).glob("part-*.parquet"))) == 2 * 4
