"""Damaged checkpoints: every damage is reported, none is a traceback, and a restart
finds the newest good checkpoint.

Manifests are damaged through the format's own ``finish`` (it rewrites the
manifest of a committed target), data by flipping or truncating bytes, and
datasets by deleting them with h5py / zarr.
"""

import copy
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import orchestrator as orc
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.backends import format_of, get_backend
from orchestrator.engine.cluster import local_cluster
from orchestrator.errors import CheckpointError

IORCH = str(Path(sys.executable).with_name("iorch"))
SUFFIX = {"hdf5": ".h5", "zarr": ".zarr"}


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        yield cl


def _write(cluster, target, fmt):
    rows = np.arange(256)
    datasets = {
        "u": (DatasetSpec("u", (256, 4), "f8"), [Contribution(0, rows, np.ones((256, 4)))]),
        "v": (DatasetSpec("v", (256,), "i4"), [Contribution(0, rows, rows.astype("i4"))]),
    }
    orc.write_stage(target, datasets, format=fmt, cluster=cluster, stripe_bytes=1024)


def _rewrite_manifest(path, change):
    backend = get_backend(format_of(path))
    manifest = copy.deepcopy(backend.read_manifest(path))
    change(manifest)
    backend.finish(path, manifest)


def _set(*keys, value):
    def change(m):
        node = m
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value

    return change


def _drop(*keys):
    def change(m):
        node = m
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]

    return change


def _flip_data(path):
    if path.is_file():  # a byte inside dataset u's data
        victim = path
        with h5py.File(path, "r") as f:
            at = f["u"].id.get_offset() + 100
    else:  # a byte inside one of u's chunk files
        chunks = [p for p in (path / "u").rglob("*") if p.is_file() and p.name != "zarr.json"]
        victim = max(chunks, key=lambda p: p.stat().st_size)
        at = victim.stat().st_size // 2
    with open(victim, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def _truncate(path):
    victim = (
        path
        if path.is_file()
        else max((p for p in path.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    )
    os.truncate(victim, victim.stat().st_size // 2)


def _remove_dataset(path):
    if path.is_file():
        with h5py.File(path, "r+") as f:
            del f["v"]
    else:
        import shutil

        shutil.rmtree(path / "v")


def _biggest_file(path):
    if path.is_file():
        return path
    return max((p for p in path.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _fifo(path):
    """A FIFO where a file was: opening it for reading blocks until someone writes."""
    victim = _biggest_file(path)
    victim.unlink()
    os.mkfifo(victim)


def _link_to_device(path):
    """A link to a device where a file was: reading it never ends."""
    victim = _biggest_file(path)
    victim.unlink()
    victim.symlink_to("/dev/zero")


DAMAGE = {
    "no datasets key": lambda p: _rewrite_manifest(p, _drop("datasets")),
    "datasets not a mapping": lambda p: _rewrite_manifest(p, _set("datasets", value=[1, 2])),
    "shape missing": lambda p: _rewrite_manifest(p, _drop("datasets", "u", "shape")),
    "shape of strings": lambda p: _rewrite_manifest(p, _set("datasets", "u", "shape", value="big")),
    "negative shape": lambda p: _rewrite_manifest(p, _set("datasets", "u", "shape", value=[-3, 4])),
    "bogus dtype": lambda p: _rewrite_manifest(p, _set("datasets", "u", "dtype", value="<q99")),
    "stripe_bytes 0": lambda p: _rewrite_manifest(
        p, _set("datasets", "u", "stripe_bytes", value=0)
    ),
    "stripe_bytes text": lambda p: _rewrite_manifest(
        p, _set("datasets", "u", "stripe_bytes", value="x")
    ),
    "checksums a list": lambda p: _rewrite_manifest(
        p, _set("datasets", "u", "checksums", value=[1])
    ),
    "checksum offset text": lambda p: _rewrite_manifest(
        p, _set("datasets", "u", "checksums", value={"zero": "00000000"})
    ),
    "checksums emptied": lambda p: _rewrite_manifest(
        p, _set("datasets", "u", "checksums", value={})
    ),
    "datasets emptied": lambda p: _rewrite_manifest(p, _set("datasets", value={})),
    "a listed dataset is gone": _remove_dataset,
    "a flipped byte": _flip_data,
    "truncated": _truncate,
    # each passed verify (hostile probe): the same bytes under another dtype, or a manifest
    # this code cannot vouch for
    "dtype of the same size": lambda p: _rewrite_manifest(
        p, _set("datasets", "u", "dtype", value="<i8")
    ),
    "another format": lambda p: _rewrite_manifest(
        p, _set("format", value="zarr" if p.is_file() else "hdf5")
    ),
    "no format": lambda p: _rewrite_manifest(p, _drop("format")),
    "version from the future": lambda p: _rewrite_manifest(p, _set("version", value=99)),
    "n_ionodes 0": lambda p: _rewrite_manifest(p, _set("datasets", "u", "n_ionodes", value=0)),
    # each made `iorch verify` block for ever in h5py's or zarr's open, deaf to SIGTERM
    "a file replaced by a FIFO": _fifo,
    "a file replaced by a link to /dev/zero": _link_to_device,
}


@pytest.mark.parametrize("fmt", sorted(SUFFIX))
def test_every_damage_is_reported_and_a_restart_skips_it(cluster, tmp_path, fmt):
    good = tmp_path / f"ck-1{SUFFIX[fmt]}"
    _write(cluster, good, fmt)
    (tmp_path / f"ck-99{SUFFIX[fmt]}").symlink_to(tmp_path / "gone")  # dangling, matches
    for n, (kind, damage) in enumerate(DAMAGE.items(), start=2):
        bad = tmp_path / f"ck-{n}{SUFFIX[fmt]}"
        _write(cluster, bad, fmt)
        damage(bad)
        # verify: a list of what is wrong, or one clear error; never a traceback
        try:
            problems = orc.verify(bad)
        except CheckpointError as err:
            problems = [str(err)]
        assert problems, f"{kind}: damage not found"
        with pytest.raises(CheckpointError):
            orc.open_checkpoint(bad)
        run = subprocess.run(
            [IORCH, "verify", str(bad)], capture_output=True, text=True, timeout=120
        )
        assert run.returncode in (1, 2), (kind, run.returncode, run.stdout, run.stderr)
        assert "Traceback" not in run.stdout + run.stderr, (kind, run.stderr)
    # a restart takes the newest good one and can say why it skipped the others
    skipped = []
    ck = orc.latest_checkpoint(str(tmp_path / f"ck-*{SUFFIX[fmt]}"), verify=True, skipped=skipped)
    assert ck is not None and ck.path == good
    assert len(skipped) == len(DAMAGE) + 1  # the damaged ones and the dangling link
    assert all(reason for _, reason in skipped)
    # without verify, the dangling link and unreadable manifests are still skipped quietly
    assert orc.latest_checkpoint(str(tmp_path / f"ck-*{SUFFIX[fmt]}")) is not None
