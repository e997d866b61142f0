"""Stripe pieces handed between processes of one host through shared memory, and Zarr
shards encoded by us: both checked against the obvious thing (the bytes themselves,
zarr-python's own files)."""

import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from orchestrator.plugins.zarr import shard_encoder

from orchestrator.engine import staging
from orchestrator.engine.staging import open_staging, read_staged, remove_staging, stage_pieces


@st.composite
def _stripes(draw):
    """Stripes cut into pieces, each piece given to one of a few stagers (or kept)."""
    out = []
    for d in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, 5000))
        for base in range(0, draw(st.integers(1, 3)) * size, size):
            cuts = (
                sorted(set(draw(st.lists(st.integers(1, size - 1), max_size=6))))
                if size > 1
                else []
            )
            edges = [0, *cuts, size]
            for a, b in itertools.pairwise(edges):
                out.append((d, base, base + a, b - a, draw(st.integers(-1, 2))))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_stripes(), st.integers(0, 2**32 - 1))
def test_staged_pieces_read_back_into_their_stripes_exactly(pieces, seed):
    """Every piece staged (by stager 0..2, in any order) reads back at its place in its
    stripe; pieces kept by the assembler (-1) are never read; each stripe's file is gone
    once read."""
    rng = np.random.default_rng(seed)
    data = {p[:3]: rng.integers(0, 256, p[3], dtype=np.uint8) for p in pieces}
    with tempfile.TemporaryDirectory() as d:
        st_ = os.stat(d)
        ident = (st_.st_dev, st_.st_ino)
        for stager in range(3):
            mine = [p for p in pieces if p[4] == stager]
            rng.shuffle(mine)
            batch = [
                (dd, base, off, memoryview(data[(dd, base, off)])) for dd, base, off, _, _ in mine
            ]
            assert stage_pieces(d, ident, batch)
        staged = {}
        for dd, base, off, n, who in pieces:
            if who >= 0:
                staged.setdefault((dd, base), []).append((off, n))
        for (dd, base), ranges in staged.items():
            bufs = [(off, memoryview(bytearray(n))) for off, n in ranges]
            read_staged(d, ident, dd, base, bufs)
            for off, buf in bufs:
                assert bytes(buf) == data[(dd, base, off)].tobytes()
        assert os.listdir(d) == []


def test_a_directory_this_process_does_not_see_stages_nothing(tmp_path):
    """Another host's directory of the same name (another identity): nothing written,
    the caller sends the bytes instead; a removed directory gets no file either."""
    d = tmp_path / "s"
    d.mkdir()
    st_ = d.stat()
    assert not stage_pieces(str(d), (st_.st_dev, st_.st_ino + 1), [(0, 0, 0, memoryview(b"x"))])
    assert list(d.iterdir()) == []
    remove_staging(str(d))
    assert not stage_pieces(str(d), (st_.st_dev, st_.st_ino), [(0, 0, 0, memoryview(b"x"))])
    assert not d.exists()


def test_a_full_shared_memory_sends_the_bytes_instead(tmp_path):
    """/dev/shm full (a container's 64 MiB): the stager says so, and the caller sends the
    bytes through Dask; a real tmpfs of 64 KiB is filled here."""
    d = tmp_path / "shm"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        st_ = d.stat()
        ident = (st_.st_dev, st_.st_ino)
        assert stage_pieces(str(d), ident, [(0, 0, 0, memoryview(bytes(16 << 10)))])
        assert not stage_pieces(str(d), ident, [(0, 1 << 20, 1 << 20, memoryview(bytes(1 << 20)))])
    finally:
        subprocess.run(["umount", str(d)], check=True)


def test_the_assembler_refuses_a_folder_other_than_the_one_staged_into(tmp_path):
    """Workers of one address with separate /dev/shm: the same path is another folder for
    the assembler; it says so (and how to avoid it) rather than read the wrong bytes."""
    from orchestrator.errors import StorageError

    d = tmp_path / "s"
    d.mkdir()
    st_ = d.stat()
    assert stage_pieces(str(d), (st_.st_dev, st_.st_ino), [(0, 0, 0, memoryview(b"ab"))])
    with pytest.raises(StorageError, match="IORCH_STAGING=0"):
        read_staged(str(d), (st_.st_dev, st_.st_ino + 1), 0, 0, [(0, memoryview(bytearray(2)))])
    remove_staging(str(d))
    with pytest.raises(StorageError, match="gone"):
        read_staged(str(d), (st_.st_dev, st_.st_ino), 0, 0, [(0, memoryview(bytearray(2)))])


def test_a_stager_holding_a_removed_directory_cannot_create_files_in_it(tmp_path):
    """The directory removed between a stager opening it and creating a file: ENOENT, and
    nothing reappears (what makes the I/O node's removal final)."""
    d = tmp_path / "s"
    d.mkdir()
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_staging(str(d))
        with pytest.raises(FileNotFoundError):
            os.open("0-0", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dfd)
    finally:
        os.close(dfd)
    assert not d.exists()


def test_sweep_removes_folders_of_dead_processes_only(tmp_path, monkeypatch):
    """A folder of a process that is gone is removed; a live process's, another user's,
    one made in another pid namespace, this process's open ones and other names are
    kept."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    uid, ns = os.getuid(), staging._namespace()
    names = {
        "dead": f"iorch-stage-{uid}-{ns}-{dead_pid}-tok-0",
        "parent": f"iorch-stage-{uid}-{ns}-{os.getppid()}-tok-1",
        "other": f"iorch-stage-{uid + 1}-{ns}-{dead_pid}-tok-0",
        # another pid namespace (a container sharing /dev/shm): its pids mean nothing here
        "elsewhere": f"iorch-stage-{uid}-1{ns}-{dead_pid}-tok-0",
        "unrelated": "something-else",
    }
    for n in names.values():
        (tmp_path / n).mkdir()
        (tmp_path / n / "0-0").write_bytes(b"x")
    assert staging.sweep(tmp_path) == [names["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        names[k] for k in ("parent", "other", "elsewhere", "unrelated")
    )
    # this process's folders: kept while open, removed once it no longer holds them
    monkeypatch.setattr(staging, "ROOT", tmp_path)
    a = open_staging("t1", 0)
    b = open_staging("t2", 0)
    assert a is not None and b is not None
    assert Path(a[0]).is_dir() and Path(b[0]).is_dir()
    remove_staging(b[0])
    assert not Path(b[0]).exists() and Path(a[0]).is_dir()
    staging._open.discard(Path(a[0]).name)  # as if its removal had failed
    open_staging("t3", 0)
    assert not Path(a[0]).exists()


def test_staging_off_or_impossible(tmp_path, monkeypatch):
    """IORCH_STAGING=0, or no writable shared-memory folder: no staging (Dask moves the
    bytes)."""
    monkeypatch.setenv(staging.STAGING_ENV, "0")
    assert open_staging("t", 0) is None
    monkeypatch.delenv(staging.STAGING_ENV)
    monkeypatch.setattr(staging, "ROOT", tmp_path / "missing")
    assert open_staging("t", 0) is None


_DTYPES = ["<f8", "<f4", ">f4", ">i8", "<i4", "<i2", "|i1", "|u1", "<u8", "<c16", "|b1"]


@st.composite
def _arrays(draw):
    ndim = draw(st.integers(1, 3))
    shape = (
        draw(st.integers(1, 60)),
        *draw(st.lists(st.integers(1, 4), min_size=ndim - 1, max_size=ndim - 1)),
    )
    dtype = draw(st.sampled_from(_DTYPES))
    rows_per_shard = draw(st.integers(1, 70))
    compressors = draw(st.sampled_from(["default", None, (0, False), (3, True), (-1, False)]))
    return shape, dtype, rows_per_shard, compressors


def _zarr_files(root):
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(Path(root).rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_arrays(), st.integers(0, 2**32 - 1))
def test_shards_we_encode_are_zarr_pythons_bytes(case, seed):
    """Shard by shard, the files our encoder writes are byte for byte those zarr-python
    writes for the same rows (the last shard padded with the fill value), for every dtype,
    1-3 dimensions, no compressor or zstd at several levels with or without its checksum;
    and zarr-python reads them back."""
    _compare_with_zarr_python(*case, seed)


@pytest.mark.parametrize("comp", [None, "default"])
def test_large_shards_written_direct_are_zarr_pythons_bytes(comp):
    """Shards of a few MiB go to disk with their whole pages direct (O_DIRECT) and their
    last partial page through the cache: still zarr-python's bytes, file by file."""
    from orchestrator.engine.directio import DIRECT_MIN, PositionedFile

    with tempfile.NamedTemporaryFile() as probe:
        f = PositionedFile(probe.name)
        direct = f.direct
        f.close()
    if not direct:
        pytest.skip(f"{tempfile.gettempdir()} takes no O_DIRECT: the path under test is not run")
    shape, rps = (1100, 160, 3), 500  # 1.9 MiB shards, the last one padded
    assert rps * 160 * 3 * 8 > DIRECT_MIN
    _compare_with_zarr_python(shape, "<f8", rps, comp, 11)


def _compare_with_zarr_python(shape, dtype, rps, comp, seed):
    import zarr.codecs as zc

    rng = np.random.default_rng(seed)
    values = (rng.random(shape) * 200 - 100).astype(dtype)
    fill = None if seed % 5 == 0 else np.array(7).astype(dtype).item()  # None: zarr's 0
    chunks = (rps, *shape[1:])
    kw = {}
    if comp is None:
        kw["compressors"] = None
    elif comp != "default":
        kw["compressors"] = zc.ZstdCodec(level=comp[0], checksum=comp[1])
    with tempfile.TemporaryDirectory() as d:
        theirs = zarr.create_array(
            f"{d}/theirs",
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            shards=chunks,
            fill_value=fill,
            **kw,
        ).with_config({"write_empty_chunks": True})
        ours = zarr.create_array(
            f"{d}/ours",
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            shards=chunks,
            fill_value=fill,
            **kw,
        )
        encode = shard_encoder(ours.metadata.to_dict())
        assert encode is not None
        from orchestrator.plugins.zarr import ZarrWriter

        meta = {"u": {"rows_per_stripe": rps, "fill_value": fill}}
        w = ZarrWriter.__new__(ZarrWriter)
        w.meta, w.path, w.arrays, w.encoders = meta, d, {"u": ours}, {"u": encode}
        os.rename(f"{d}/ours", f"{d}/u")
        for k in range(-(-shape[0] // rps)):
            rows = values[k * rps : (k + 1) * rps]
            theirs[k * rps : (k + 1) * rps] = rows
            w.store("u", k, np.ascontiguousarray(rows))
        assert _zarr_files(f"{d}/u") == _zarr_files(f"{d}/theirs")
        back = zarr.open_array(f"{d}/u", mode="r")[...]
        assert np.array_equal(back, values)


def test_layouts_we_do_not_encode_are_left_to_zarr_python(tmp_path):
    """Several inner chunks per shard, another compressor, no sharding: no encoder (zarr-python
    stores those shards), and a store of such an array still reads back exactly."""
    import zarr.codecs as zc

    cases = [
        dict(chunks=(2, 2), shards=(4, 2)),
        dict(chunks=(4, 2), shards=(4, 2), compressors=zc.GzipCodec()),
        dict(chunks=(4, 2)),
    ]
    for i, kw in enumerate(cases):
        a = zarr.create_array(tmp_path / f"a{i}", shape=(8, 2), dtype="<f8", **kw)
        assert shard_encoder(a.metadata.to_dict()) is None
    assert shard_encoder({"codecs": "nonsense"}) is None
    # through the writer: an array with gzip shards is stored by zarr-python, exactly
    group = zarr.open_group(tmp_path / "c.zarr", mode="w")
    group.create_array(
        "u",
        shape=(8, 2),
        dtype="<f8",
        chunks=(4, 2),
        shards=(4, 2),
        compressors=zc.GzipCodec(),
        fill_value=-1.0,
    )
    from orchestrator.plugins.zarr import ZarrWriter

    meta = {"u": {"rows_per_stripe": 4, "fill_value": -1.0}}
    w = ZarrWriter({"path": str(tmp_path / "c.zarr"), "datasets": meta})
    rows = np.arange(8.0).reshape(4, 2)
    w.store("u", 1, rows)
    assert w.encoders["u"] is None
    back = zarr.open_array(tmp_path / "c.zarr", path="u")[:]
    assert np.array_equal(back, np.r_[np.full((4, 2), -1.0), rows])
