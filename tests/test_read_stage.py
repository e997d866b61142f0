"""Restart reads: the pure plan against a byte-level oracle on random instances, the copy
kernels, and ``read_stage`` on a real cluster reading real HDF5 and Zarr checkpoints
(every format, every policy, both shuffles, damaged stripes, concurrent restarts, the
I/O node's service order, bad input, shared memory left behind)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from readtasks import empty_request

from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine import readserver
from orchestrator.engine.cluster import local_cluster
from orchestrator.engine.readplan import copied_whole, plan_reads, split_at, to_runs
from orchestrator.engine.readstage import read_stage
from orchestrator.engine.stage import write_stage
from orchestrator.engine.verify import verify
from orchestrator.errors import CheckpointError, InputError, OrchestratorError
from orchestrator.kernels.runs import copy_runs, gather_runs, scatter_runs

FORMATS = ["hdf5", "hdf5-vds", "hdf5-chunked", "zarr"]


# ---------------------------------------------------------------- the pure plan


@st.composite
def read_cases(draw: st.DrawFn):
    n = draw(st.integers(1, 120))
    row = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    dtype = draw(st.sampled_from(["u1", "<i4", "<f8", "S3"]))
    itemsize = np.dtype(dtype).itemsize * int(np.prod(row, dtype=np.int64))
    sb = draw(st.integers(1, 4 * max(1, itemsize) + 40))
    meta = {
        "u": {
            "shape": [n, *row],
            "dtype": np.dtype(dtype).str,
            "stripe_bytes": sb,
            "n_ionodes": draw(st.integers(1, 5)),
            "checksums": {},
        }
    }
    tasks = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["rows", "range", "slice", "empty"]))
        if kind == "rows":
            rows = draw(st.lists(st.integers(0, n - 1), max_size=40))  # replicas, any order
        elif kind == "range":
            lo = draw(st.integers(0, n))
            rows = range(lo, draw(st.integers(lo, n)))
        elif kind == "slice":
            rows = slice(draw(st.integers(0, n)), None, draw(st.sampled_from([1, 2, 3])))
        else:
            rows = []
        tasks.append({"u": rows})
    return meta, tasks, draw(st.integers(1, 4)), draw(st.none() | st.integers(1, 7))


def _wanted(rows, n: int) -> np.ndarray:
    if isinstance(rows, slice):
        return np.arange(n)[rows]
    return np.asarray(list(rows), dtype=np.int64)


@settings(max_examples=1500, deadline=None)
@given(read_cases())
def test_the_plan_delivers_every_requested_byte_once_from_its_own_node(case) -> None:
    meta, tasks, n_nodes, aggregators = case
    m = meta["u"]
    nbytes = int(np.prod(m["shape"])) * np.dtype(m["dtype"]).itemsize
    row_bytes = nbytes // m["shape"][0]
    truth = np.random.default_rng(1).integers(0, 256, nbytes, dtype=np.uint8)
    plan = plan_reads(meta, tasks, n_nodes, aggregators)
    sb = m["stripe_bytes"]
    keys = [(a.domain, a.node) for a in plan.aggregators]
    assert keys == sorted(set(keys))  # one request per domain and node, in that order
    if aggregators is not None:
        assert len({a.domain for a in plan.aggregators}) <= aggregators
    # domains are ranges: a later domain never holds an earlier stripe
    last = -1
    for d in sorted({a.domain for a in plan.aggregators}):
        mine = np.concatenate([a.stripes["u"] for a in plan.aggregators if a.domain == d])
        assert mine.min() > last
        last = int(mine.max())
    for a in plan.aggregators:
        touched = set()
        for per in a.pieces.values():
            for _, src, length in per["u"].tolist():
                assert length > 0
                stripe = src // sb
                assert (src + length - 1) // sb == stripe  # within one stripe
                assert (stripe % m["n_ionodes"]) % n_nodes == a.node  # held by its node
                touched.add(stripe)
        assert set(a.stripes.get("u", np.empty(0)).tolist()) == touched
    for t, req in enumerate(tasks):
        rows = _wanted(req["u"], m["shape"][0])
        assert plan.lengths[t] == {"u": rows.size}
        want = truth.reshape(m["shape"][0], row_bytes)[rows].ravel() if rows.size else b""
        got = np.zeros(rows.size * row_bytes, dtype=np.uint8)
        cover = np.zeros(rows.size * row_bytes, dtype=np.int64)
        for a in plan.aggregators:
            for dst, src, length in a.pieces.get(t, {}).get("u", np.empty((0, 3))).tolist():
                got[dst : dst + length] = truth[src : src + length]
                cover[dst : dst + length] += 1
        assert (cover == 1).all()
        assert got.tobytes() == bytes(want)


def _copied_whole_oracle(stripes, runs, sb, nbytes, max_runs) -> list[bool]:
    """Byte by byte: each task copying from a stripe copies each of its bytes once, in
    at most ``max_runs`` runs."""
    out = []
    for s in stripes.tolist():
        lo, hi = s * sb, min((s + 1) * sb, nbytes)
        ok = True
        for per in runs:
            mine = [(src, n) for _, src, n in per.tolist() if lo <= src < hi]
            if not mine:
                continue
            count = np.zeros(hi - lo, dtype=np.int64)
            for src, n in mine:
                count[src - lo : src - lo + n] += 1
            ok &= bool((count == 1).all()) and len(mine) <= max_runs
        out.append(ok)
    return out


@settings(max_examples=1500, deadline=None)
@given(read_cases(), st.integers(1, 4))
def test_a_stripe_is_left_to_its_tasks_only_where_each_copies_it_whole(case, max_runs) -> None:
    meta, tasks, n_nodes, aggregators = case
    plan = plan_reads(meta, tasks, n_nodes, aggregators)
    m = plan.meta["u"]
    for a in plan.aggregators:
        stripes = a.stripes.get("u", np.empty(0, np.int64))
        runs = [per["u"] for per in a.pieces.values() if "u" in per]
        got = copied_whole(stripes, runs, m.stripe_bytes, m.nbytes, max_runs).tolist()
        assert got == _copied_whole_oracle(stripes, runs, m.stripe_bytes, m.nbytes, max_runs)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=30), st.integers(1, 9))
def test_runs_and_their_splits(rows, unit) -> None:
    r = np.asarray(rows, dtype=np.int64)
    runs = to_runs(r)
    assert _expand(runs).tolist() == r.tolist()
    cut = split_at(runs, unit)
    assert _expand(cut).tolist() == r.tolist()
    for _, start, length in cut.tolist():
        assert start // unit == (start + length - 1) // unit


def _expand(runs: np.ndarray) -> np.ndarray:
    out = np.empty(int(runs[:, 2].sum()) if runs.size else 0, dtype=np.int64)
    for pos, start, length in runs.tolist():
        out[pos : pos + length] = np.arange(start, start + length)
    return out


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_copy_kernels_are_slices(data) -> None:
    buf = np.arange(200, dtype=np.uint8)
    k = data.draw(st.integers(0, 8))
    length = np.array([data.draw(st.integers(0, 20)) for _ in range(k)], dtype=np.int64)
    src = np.array([data.draw(st.integers(0, 180)) for _ in range(k)], dtype=np.int64)
    dst = np.cumsum(length) - length  # disjoint places in the output
    got = gather_runs(buf, src, length)
    want = b"".join(buf[s : s + n].tobytes() for s, n in zip(src, length, strict=True))
    assert got.tobytes() == want
    out = np.zeros(int(length.sum()), dtype=np.uint8)
    scatter_runs(out, dst, length, got)
    assert out.tobytes() == want
    out2 = np.zeros_like(out)
    copy_runs(out2, dst, buf, src, length)
    assert out2.tobytes() == want
    # the engine's copies: a slice per run or the kernels, by the runs' sizes — both
    from orchestrator.engine import copies

    for bar in (0, 1 << 30):  # every run a slice; every run to the kernels
        copies.SLICE_BYTES, copies.SLICE_RUNS = bar, 0 if bar else 1 << 30
        try:
            assert copies.gather(buf, src, length).tobytes() == want
            out3 = np.zeros_like(out)
            copies.scatter(out3, dst, length, got)
            assert out3.tobytes() == want
            out4 = np.zeros_like(out)
            copies.copy(out4, dst, buf, src, length)
            assert out4.tobytes() == want
        finally:
            copies.SLICE_BYTES, copies.SLICE_RUNS = 4096, 64


def test_bad_requests_are_named() -> None:
    meta = {
        "u": {"shape": [10, 2], "dtype": "<f8", "stripe_bytes": 64, "n_ionodes": 2,
              "checksums": {}},
        "s": {"shape": [], "dtype": "<f8", "stripe_bytes": 64, "n_ionodes": 2, "checksums": {}},
    }  # fmt: skip
    cases = [
        ({"u": [1]}, "one {dataset: rows} mapping per task"),
        ([], "non-empty"),
        ([["u"]], r"requests\[0\] must be a mapping"),
        ([{"v": [1]}], "names dataset 'v'; the checkpoint has s, u"),
        ([{"u": [10]}], r"asks for row 10; the dataset has rows 0..9"),
        ([{"u": [-1]}], "asks for row -1"),
        ([{"u": [1.5]}], "must be row numbers"),
        ([{"u": [[1, 2]]}], "must be row numbers"),
        ([{"s": [0]}], "a scalar dataset has no rows"),
    ]
    for requests, message in cases:
        with pytest.raises(InputError, match=message):
            plan_reads(meta, requests, 2)
    with pytest.raises(InputError, match="n_nodes"):
        plan_reads(meta, [{"u": [1]}], 0)


# ---------------------------------------------------------------- the I/O node's order


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        ("nio", ["a2", "a0", "a1"]),  # arrival
        ("sio", ["a0", "a1", "a2"]),  # one application after the other
        # HIO: a0's aggregator here has 5 s of slack (its application's slowest shuffles
        # elsewhere): it waits for the others, which are their applications' slowest
        ("hio", ["a1", "a2", "a0"]),
    ],
)
def test_a_node_serves_what_it_holds_in_the_policys_order(policy, want) -> None:
    gate = threading.Event()
    readserver.inject(hold=gate)
    try:
        server = readserver._NodeServer(7)
        first = server.submit(empty_request(9, policy))  # served as it arrives
        while not server.log:
            gate.set()
            time.sleep(0.01)
        gate.clear()
        first.done.wait(120)
        reqs = {
            "a2": server.submit(empty_request(2, policy, shuffle=6.0, app_shuffle=6.0)),
            "a0": server.submit(empty_request(0, policy, shuffle=1.0, app_shuffle=6.0)),
            "a1": server.submit(empty_request(1, policy, shuffle=6.0, app_shuffle=6.0)),
        }
        gate.set()
        for r in reqs.values():
            assert r.done.wait(120)  # the first ordering may compile its kernel
        order = sorted(reqs, key=lambda k: reqs[k].position)
    finally:
        readserver.inject()
    assert order == want


def test_cross_memory_reads_refuse_a_reused_pid_and_unmapped_bytes() -> None:
    from orchestrator.engine import cma

    src = np.arange(100, dtype=np.uint8)
    out = np.zeros(10, dtype=np.uint8)
    me = cma.identity()
    cma.read(me, out, np.array([0]), np.array([src.ctypes.data + 50]), np.array([10]))
    assert out.tolist() == list(range(50, 60))
    with pytest.raises(OSError, match="PID reused"):
        cma.read((me[0], me[1] + 1), out, np.array([0]), np.array([src.ctypes.data]), np.array([4]))
    with pytest.raises(OSError, match="gone"):
        cma.read(
            (subprocess_pid(), 1), out, np.array([0]), np.array([src.ctypes.data]), np.array([4])
        )
    with pytest.raises(OSError, match="Bad address"):
        cma.read(me, out, np.array([0]), np.array([8]), np.array([4]))  # page 0: unmapped
    with pytest.raises(ValueError, match="past the end"):
        cma.read(me, out, np.array([8]), np.array([src.ctypes.data]), np.array([4]))
    # before the start of out: NumPy's unsigned iovecs would wrap it into the heap
    big = np.zeros(16, dtype=np.uint8)
    with pytest.raises(ValueError, match="starts before out"):
        cma.read(me, big[8:], np.array([-8]), np.array([src.ctypes.data]), np.array([4]))
    assert not big.any()
    # many runs: the iovecs of every call of 1,024, in order
    n = 3000
    dst, remote = np.arange(n) * 2, src.ctypes.data + np.arange(n) % 50
    many = np.zeros(2 * n, dtype=np.uint8)
    cma.read(me, many, dst, remote, np.full(n, 2))
    want = np.stack([np.arange(n) % 50, np.arange(n) % 50 + 1], axis=1).ravel()
    assert np.array_equal(many, want.astype(np.uint8))


def test_a_process_read_from_is_known_gone_once_it_exits() -> None:
    """A process read from once is then watched through a pidfd: once it exits, the next
    read refuses instead of reading whatever process gets its PID."""
    import subprocess
    import sys

    from orchestrator.engine import cma

    code = (
        "import ctypes, time; b = ctypes.create_string_buffer(b'restart', 16); "
        "print(ctypes.addressof(b), flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        at = int(child.stdout.readline())
        who = cma.identity(child.pid)
        out = np.zeros(7, dtype=np.uint8)
        for _ in range(2):  # the second read goes through the kept pidfd
            cma.read(who, out, np.array([0]), np.array([at]), np.array([7]))
            assert out.tobytes() == b"restart"
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    with pytest.raises(OSError, match="gone"):
        cma.read(who, out, np.array([0]), np.array([at]), np.array([7]))
    with pytest.raises(OSError, match="gone"):  # and stays so
        cma.read(who, out, np.array([0]), np.array([at]), np.array([7]))


def subprocess_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ---------------------------------------------------------------- on a real cluster


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=3, n_compute=2) as cl:
        yield cl


N = 3000
TRUTH_U = np.random.default_rng(0).random((N, 3))
TRUTH_ID = np.arange(N, dtype=np.int32) * 7


def _write(cluster, folder: Path, fmt: str) -> Path:
    target = folder / f"ck.{fmt}"
    parts_u = [Contribution(c, np.arange(c, N, 4), TRUTH_U[c::4]) for c in range(4)]
    parts_id = [Contribution(c, np.arange(c * 1000, (c + 1) * 1000), TRUTH_ID[c * 1000 : (c + 1) * 1000]) for c in range(3)]  # fmt: skip
    write_stage(
        target,
        {
            "u": (DatasetSpec("u", (N, 3), "float64"), parts_u),
            "id": (DatasetSpec("id", (N,), "int32"), parts_id),
        },
        format=fmt,
        cluster=cluster,
        stripe_bytes=4096,  # rows of 24 bytes cross stripe boundaries
    )
    return target


def _requests() -> list[dict]:
    rng = np.random.default_rng(3)
    blocks = np.linspace(0, N, 6).astype(int)
    reqs = [  # 5 tasks where 4 wrote: blocks with halos of 40 rows (replicas)
        {"u": range(max(0, lo - 40), min(N, hi + 40)), "id": np.arange(lo, hi)}
        for lo, hi in itertools.pairwise(blocks)
    ]
    reqs.append({"u": rng.integers(0, N, 500)})  # scattered, repeated
    reqs.append({"id": slice(None, None, -3)})  # backwards
    reqs.append({"u": []})  # nothing
    return reqs


def _check(reqs, got) -> None:
    truth = {"u": TRUTH_U, "id": TRUTH_ID}
    assert len(got) == len(reqs)
    for req, rows in zip(reqs, got, strict=True):
        assert set(rows) == set(req)
        for name, want in req.items():
            idx = np.arange(N)[want] if isinstance(want, slice) else np.asarray(list(want), int)
            assert rows[name].dtype == truth[name].dtype
            assert np.array_equal(rows[name], truth[name][idx]), name


def _nothing_held(cluster) -> bool:
    """No I/O worker keeps any restart's stripes once its tasks have their rows."""
    return sum(cluster.client.run(readserver.held, workers=cluster.ionodes).values()) == 0


def test_a_workers_first_node_loads_the_read_policies_aside() -> None:
    """The policies' kernels are loaded beside a worker's first node server, not when
    two requests first wait there (a second's stall of everything queued)."""
    import subprocess
    import sys

    code = (
        "import sys, time, threading\n"
        "from orchestrator.engine import readserver\n"
        "assert 'orchestrator.reads' not in sys.modules\n"
        "readserver._server(0)\n"
        "names = [t.name for t in threading.enumerate()]\n"
        "assert readserver.LOADER in names, names\n"
        "end = time.time() + 120\n"
        "while any(t.name == readserver.LOADER for t in threading.enumerate()):\n"
        "    assert time.time() < end\n"
        "    time.sleep(0.01)\n"
        "from orchestrator.kernels import reads\n"
        "loaded = [f for f in vars(reads).values() if getattr(f, 'signatures', None)]\n"
        "assert loaded, 'no ordering kernel was loaded'\n"
        "readserver._server(1)\n"
        "assert readserver.LOADER not in [t.name for t in threading.enumerate()]\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_restart_from_the_disk_gets_every_row(cluster, tmp_path) -> None:
    """Stripes not in memory are read by their node (in its order) before the tasks copy
    them: the rows are the checkpoint's, and the file is in memory afterwards."""
    from orchestrator.engine.pagecache import cached

    target = _write(cluster, tmp_path, "hdf5")
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        size = os.fstat(fd).st_size
        if cached(fd, 0, size):
            pytest.skip("the kernel kept the file in memory")
        reqs = _requests()
        for shuffle in ("auto", "dask"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            _check(reqs, read_stage(target, reqs, cluster=cluster, shuffle=shuffle).gather())
        assert _nothing_held(cluster)
    finally:
        os.close(fd)


@pytest.mark.parametrize("shuffle", ["auto", "dask"])
def test_released_rows_leave_nothing_on_any_worker(cluster, tmp_path, shuffle) -> None:
    """Once a restart's futures are released, no worker keeps its aggregators' pieces —
    whatever Python objects of the call may still be waiting for the cyclic collector
    (a restart held up past ``wait``'s poll leaves the call's frames in a cycle)."""
    import gc
    import threading

    target = _write(cluster, tmp_path, "hdf5")
    before = cluster.client.run(lambda dask_worker=None: set(dask_worker.data))
    enabled = gc.isenabled()
    gc.disable()
    try:
        for slow in (False, True):
            if slow:  # the I/O nodes held past the 2 s poll of ReadResult.wait
                cluster.client.run(readserver.inject, hold=True, workers=cluster.ionodes)
                gate = threading.Timer(
                    2.5,
                    lambda: cluster.client.run(readserver.inject, workers=cluster.ionodes),
                )
                gate.start()
            res = read_stage(target, _requests(), cluster=cluster, shuffle=shuffle)
            cluster.release(res.futures)
            del res
        deadline = time.monotonic() + 10
        while True:
            now = cluster.client.run(lambda dask_worker=None: set(dask_worker.data))
            left = {w: keys - before.get(w, set()) for w, keys in now.items()}
            if not any(left.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        if enabled:
            gc.enable()
    assert not any(left.values()), left
    assert _nothing_held(cluster)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_task_gets_its_rows_from_every_format(cluster, tmp_path, fmt) -> None:
    target = _write(cluster, tmp_path, fmt)
    reqs = _requests()
    for policy in ("hio", "sio", "nio"):
        for shuffle in ("auto", "dask"):
            res = read_stage(target, reqs, cluster=cluster, policy=policy, shuffle=shuffle)
            got = res.gather()
            _check(reqs, got)
            assert res.bytes_shuffled == sum(
                r[n].nbytes for r in got for n in r
            )  # every byte a task holds came through the shuffle, once
            keys = [(s["domain"], s["node"]) for s in res.served]
            assert sorted(keys) == sorted(set(keys))  # one request per domain and node
            cluster.release(res.futures)
    assert _nothing_held(cluster)


def test_the_rows_a_task_gets_are_its_own(cluster, tmp_path) -> None:
    """Writing to one task's rows changes neither another task's nor the checkpoint."""
    target = _write(cluster, tmp_path, "hdf5")
    reqs = [{"u": range(0, 2000)}, {"u": range(1000, 3000)}]

    def bump(rows):
        rows["u"][1000:1500] += 1.0
        return float(rows["u"][1000:1500].sum())

    res = read_stage(target, reqs, cluster=cluster, workers=[cluster.compute[0]] * 2)
    total = cluster.client.submit(bump, res.futures[0], workers=[cluster.compute[0]]).result()
    assert total == pytest.approx(TRUTH_U[1000:1500].sum() + 1500)
    other = res.futures[1].result()["u"]
    assert np.array_equal(other, TRUTH_U[1000:3000])
    again = read_stage(target, reqs[:1], cluster=cluster).gather()[0]["u"]
    assert np.array_equal(again, TRUTH_U[:2000])


def test_a_damaged_stripe_fails_the_read_naming_it(cluster, tmp_path) -> None:
    import h5py

    target = _write(cluster, tmp_path, "hdf5")
    with h5py.File(target, "r") as f:
        base = f["u"].id.get_offset()
    with open(target, "r+b") as fh:  # one byte of the third stripe of "u"
        fh.seek(base + 2 * 4096 + 17)
        b = fh.read(1)
        fh.seek(base + 2 * 4096 + 17)
        fh.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(CheckpointError, match=r"u: stripe at byte 8192 \(I/O node 2\) does not"):
        read_stage(target, [{"u": range(0, N)}], cluster=cluster)
    assert _nothing_held(cluster)
    # what does not touch the stripe still reads
    rows = read_stage(target, [{"u": range(0, 300)}], cluster=cluster).gather()
    assert np.array_equal(rows[0]["u"], TRUTH_U[:300])


def test_concurrent_restarts_are_each_complete(cluster, tmp_path) -> None:
    targets = [_write(cluster, tmp_path / str(i), "hdf5") for i in range(3) if not (tmp_path / str(i)).mkdir()]  # fmt: skip
    reqs = _requests()
    running = [
        read_stage(t, reqs, cluster=cluster, policy="sio", application=f"app{i}", wait=False)
        for i, t in enumerate(targets)
    ]
    for res in running:
        _check(reqs, res.wait().gather())
    apps = [res.application for res in running]
    assert len(set(apps)) == 3 and apps == sorted(apps)  # ordered by their start
    for node in range(3):  # every node served each of its requests once, one at a time
        mine = [s for res in running for s in res.served if s["node"] == node]
        assert (
            len({s["position"] for s in mine})
            == len(mine)
            == sum(a.node == node for res in running for a in res.plan.aggregators)
        )
        spans = sorted((s["start"], s["end"]) for s in mine)
        assert all(e1 <= s2 for (_, e1), (s2, _) in itertools.pairwise(spans))
    assert _nothing_held(cluster)


def test_bad_calls_are_named(cluster, tmp_path) -> None:
    target = _write(cluster, tmp_path, "hdf5")
    bad = [
        ({"policy": "fifo"}, InputError, "policy must be one of nio, sio, hio"),
        ({"shuffle": "mpi"}, InputError, "shuffle must be 'auto' or 'dask'"),
        ({"window": 0}, InputError, "window must be"),
        ({"access": -1}, InputError, "access must be"),
        ({"threshold": float("nan")}, InputError, "threshold must be"),
        ({"workers": ["tcp://x", "tcp://y"]}, InputError, r"one worker per task \(1\)"),
        ({"workers": ["tcp://127.0.0.1:1"]}, InputError, "not a worker of this cluster"),
        ({"application": 3}, InputError, "application must be a name"),
        ({"cluster": "tcp://127.0.0.1:1"}, InputError, "cluster must be an IOCluster"),
    ]
    for kwargs, kind, message in bad:
        with pytest.raises(kind, match=message):
            read_stage(target, [{"u": [1]}], **{"cluster": cluster, **kwargs})
    with pytest.raises(CheckpointError, match="does not exist"):
        read_stage(tmp_path / "nothing.h5", [{"u": [1]}], cluster=cluster)
    plain = tmp_path / "plain.h5"
    import h5py

    with h5py.File(plain, "w") as f:
        f["u"] = np.zeros(3)
    with pytest.raises(CheckpointError):
        read_stage(plain, [{"u": [1]}], cluster=cluster)
    with pytest.raises(InputError, match="names dataset 'w'"):
        read_stage(target, [{"w": [1]}], cluster=cluster)


def test_without_a_cluster_the_rows_come_back_here(tmp_path, cluster) -> None:
    target = _write(cluster, tmp_path, "zarr")
    res = read_stage(target, [{"id": range(10, 20)}])
    assert res.futures == [] and res.data is not None
    assert np.array_equal(res.data[0]["id"], TRUTH_ID[10:20])


def _resume(data, task, scale=1.0):
    from distributed import get_worker

    return task, {k: v * scale for k, v in data.items()}, get_worker().address


def test_a_restarted_step_runs_each_task_on_its_rows(cluster, tmp_path) -> None:
    import orchestrator as orc

    _write(cluster, tmp_path, "hdf5")

    def rows_of(task):
        lo, hi = task * 600, (task + 1) * 600
        return {"u": range(max(0, lo - 25), min(N, hi + 25)), "id": [hi - 1, lo]}

    resume = orc.input_stage(str(tmp_path / "ck.{step}"), rows=rows_of)(_resume)
    out = resume.restart(tasks=5, step="hdf5", cluster=cluster, scale=2.0)
    assert [t for t, _, _ in out] == list(range(5))
    for t, data, where in out:
        want = rows_of(t)
        assert np.array_equal(data["u"], 2.0 * TRUTH_U[np.asarray(list(want["u"]))])
        assert np.array_equal(data["id"], 2.0 * TRUTH_ID[want["id"]])
        assert where == cluster.compute_worker(t)  # ran where its rows were put
    assert _nothing_held(cluster)
    with pytest.raises(InputError, match="names a step"):
        resume.restart(tasks=2, cluster=cluster)
    with pytest.raises(InputError, match="tasks must be"):
        resume.restart(tasks=0, cluster=cluster)
    bad = orc.input_stage(tmp_path / "ck.hdf5", rows=lambda t: [1, 2])(_resume)
    with pytest.raises(InputError, match=r"rows\(0\) must return a mapping"):
        bad.restart(tasks=1, cluster=cluster)
    with pytest.raises(InputError, match="policy must be"):
        orc.input_stage("x", rows=rows_of, policy="lifo")


def _mark(data, task, folder):
    Path(folder, f"ran-{task}").write_text("x")
    return task


def test_a_damaged_checkpoint_runs_no_restarted_task(cluster, tmp_path) -> None:
    """Tasks copy checked stripes while the rest are read; one damaged stripe fails the
    restart, and no task's function runs — not even those whose rows were intact."""
    import h5py

    import orchestrator as orc

    target = _write(cluster, tmp_path, "hdf5")
    with h5py.File(target, "r") as f:
        base = f["u"].id.get_offset()
    with open(target, "r+b") as fh:  # the last stripe of "u"
        fh.seek(base + N * 24 - 5)
        fh.write(b"\x00\x01\x02")
    resume = orc.input_stage(target, rows=lambda t: {"u": range(t * 500, (t + 1) * 500)})(_mark)
    with pytest.raises(CheckpointError, match="does not match the manifest"):
        resume.restart(tasks=6, cluster=cluster, folder=str(tmp_path))
    assert not list(tmp_path.glob("ran-*"))
    assert _nothing_held(cluster)
    # read_stage says which stripe; a task needing it says so too
    res = read_stage(
        target, [{"u": range(0, 100)}, {"u": range(2900, 3000)}], cluster=cluster, wait=False
    )
    with pytest.raises(CheckpointError, match=r"u: stripe at byte 69632"):
        res.wait()
    assert res.futures[0].status == "finished"  # its stripe was checked: its rows are right
    assert np.array_equal(res.futures[0].result()["u"], TRUTH_U[:100])
    # the task copies that stripe whole: it checks its own copy
    with pytest.raises(
        CheckpointError, match=r"u: stripe at byte 69632 \(I/O node \d\) .* as copied"
    ):
        res.futures[1].result()
    # two tasks each copy part of it: the I/O node checks it, and the tasks say so
    halves = [{"u": range(2890, 2950)}, {"u": range(2950, 3000)}]
    res = read_stage(target, halves, cluster=cluster, wait=False)
    with pytest.raises(
        CheckpointError, match=r"u: stripe at byte 69632 \(I/O node \d\) does not"
    ) as got:
        res.wait()
    assert "as copied" not in str(got.value)  # the node's word, not a task's
    for f in res.futures:
        with pytest.raises(CheckpointError, match=r"u: the stripe at byte 69632 does not match"):
            f.result()


def test_the_restart_benchmark_runs_every_contender(tmp_path) -> None:
    import json
    import subprocess
    import sys

    iorch = str(Path(sys.executable).with_name("iorch"))
    args = ["bench", "restart", "--gib", "0.02", "--tasks", "4", "--halo", "10"]
    res = subprocess.run(
        [iorch, *args, "--repeat", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads((tmp_path / "results.json").read_text())
    bound = "h5py + CRC-32 of its rows"
    assert set(out["median"]) == {"h5py", bound, "read_stage", "read_stage (dask)"}
    assert all(v > 0 for v in out["ratio"].values()) and out["ratio"]["h5py"] == 1.0
    assert out["of_checked_bound"][bound] == 1.0
    ratios = out["of_checked_bound"]["read_stage"], out["ratio"]["read_stage"]
    assert ratios[0] == pytest.approx(ratios[1] * out["median"][bound] / out["median"]["h5py"])
    assert "h5py ÷ this" in res.stdout and "checked bound ÷ this" in res.stdout
    # each run's CPU, by role: the I/O workers work only for read_stage's contenders
    assert set(out["cpu"]) == set(out["median"]) and "CPU seconds per run" in res.stdout
    for roles in out["cpu"].values():
        assert set(roles) == {"compute", "io", "driver"} and all(v >= 0 for v in roles.values())
    # 10 ms ticks: 20 MB read by h5py may cost a compute worker no tick; the Dask path's
    # copies always do
    assert out["cpu"]["read_stage (dask)"]["compute"] > 0
    assert out["cpu"]["read_stage (dask)"]["io"] > out["cpu"]["h5py"]["io"]  # every byte


def test_the_restart_benchmark_cuts_a_mesh_into_scattered_rows(cluster, tmp_path) -> None:
    """The mesh layout: each task a METIS part of a generated device mesh and one layer of
    its neighbours — scattered, replicated rows — read by every contender, checked
    against h5py's read of the same rows (a wrong row fails the run)."""
    from orchestrator.bench.restart import ROW, mesh_rows, run

    out = run(tmp_path, gib=0.005, tasks=3, repeat=1, cluster=cluster, layout="mesh")
    assert out["layout"] == "mesh" and out["halo"] is None
    assert set(out["median"]) >= {"h5py", "read_stage"}
    nodes = int(0.005 * (1 << 30)) // (ROW * 8)
    wants = mesh_rows(3, nodes)
    assert out["bytes"] == sum(w.size for w in wants) * ROW * 8
    # the parts' rows: ascending, every node in some part, neighbours shared
    assert all(np.all(np.diff(w) > 0) for w in wants)
    assert np.unique(np.concatenate(wants)).size >= nodes * 0.9
    assert sum(w.size for w in wants) > np.unique(np.concatenate(wants)).size  # halos
    runs = [np.count_nonzero(np.diff(w) != 1) + 1 for w in wants]
    assert min(runs) > 10  # scattered, not a block per task
    with pytest.raises(InputError, match="layout must be one of blocks, mesh, got 'tiles'"):
        run(tmp_path, gib=0.005, tasks=3, repeat=1, cluster=cluster, layout="tiles")
    with pytest.raises(InputError, match="too few for 16 parts"):
        run(tmp_path, gib=1e-6, tasks=16, repeat=1, cluster=cluster, layout="mesh")
    with pytest.raises(InputError, match="pass cluster or testbed"):
        run(tmp_path, gib=0.005, cluster=cluster, testbed="cluster2004")


def test_cpu_seconds_count_every_thread_of_a_process() -> None:
    """The restart benchmark's CPU accounting sees work done in any thread, one that
    has ended too (Dask's pool starts and ends threads as tasks wait on disks)."""
    import threading

    from orchestrator.bench.restart import _cpu_seconds

    def burn() -> None:
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass

    me = {"here": [os.getpid()], "gone": [2**22 + 12345]}  # no such process: nothing
    before = _cpu_seconds(me)
    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    after = _cpu_seconds(me)
    assert after["gone"] == before["gone"] == 0
    assert after["here"] - before["here"] >= 0.25  # 10 ms ticks


def test_a_lost_io_worker_fails_the_restart_instead_of_hanging(tmp_path) -> None:
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        target = _write(cl, tmp_path, "hdf5")
        cl.client.run(readserver.inject, delay=30.0, workers=[cl.ionodes[1]])  # a slow disk
        res = read_stage(target, [{"u": range(0, N)}], cluster=cl, wait=False)
        time.sleep(1.0)
        t0 = time.monotonic()
        cl.client.submit(os._exit, 1, workers=[cl.ionodes[1]], pure=False)  # it dies
        with pytest.raises(OrchestratorError, match=r"I/O worker .* was lost during restart"):
            res.wait()
        assert time.monotonic() - t0 < 25  # not the slow disk's 30 s: the loss was seen


def _kw(data, task, key="mine"):
    return task, key


def test_what_the_probe_found(cluster, tmp_path) -> None:
    """Each was a hang, a raw traceback or wrong data (issue 18's hostile probe)."""
    import h5py

    import orchestrator as orc

    target = _write(cluster, tmp_path, "hdf5")
    with pytest.raises(InputError, match="access must be"):
        read_stage(target, [{"u": [1]}], cluster=cluster, access=2**64)
    with pytest.raises(InputError, match="asks for row 999999999999999"):
        read_stage(target, [{"u": range(0, 10**15)}], cluster=cluster)
    with pytest.raises(InputError, match="step not 0"):
        read_stage(target, [{"u": slice(0, 5, 0)}], cluster=cluster)
    with pytest.raises(InputError, match="workers must be a list"):
        read_stage(target, [{"u": [1]}], cluster=cluster, workers=(w for w in "x"))
    with pytest.raises(InputError, match="threshold"):
        read_stage(target, [{"u": [1]}], cluster=cluster, threshold=True)
    with pytest.raises(InputError, match="wait must be"):
        read_stage(target, [{"u": [1]}], cluster=cluster, wait="no")
    with pytest.raises(InputError, match="masked"):
        read_stage(target, [{"u": np.ma.masked_array([1, 2], mask=[0, 1])}], cluster=cluster)
    # the function's keywords are its own, not Dask's
    resume = orc.input_stage(target, rows=lambda t: {"id": [t]})(_kw)
    assert resume.restart(tasks=2, cluster=cluster, key="x") == [(0, "x"), (1, "x")]
    boom = orc.input_stage(target, rows=lambda t: {}[t])(_kw)
    with pytest.raises(InputError, match=r"rows\(0\) raised KeyError"):
        boom.restart(tasks=2, cluster=cluster)
    # a relative path, read after the driver changed folder
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = read_stage("ck.hdf5", [{"id": [5]}], cluster=cluster, wait=False)
        os.chdir("/")
        assert res.gather()[0]["id"].tolist() == [35]
    finally:
        os.chdir(here)
    # gone between the plan and the read
    res = read_stage(target, [{"id": [5]}], cluster=cluster, wait=False, policy="nio")
    # structured rows keep their fields
    rec = np.zeros(10, dtype=[("a", "<i4"), ("b", "<f8")])
    rec["a"] = np.arange(10)
    st = tmp_path / "rec.h5"
    write_stage(st, {"r": (DatasetSpec("r", (10,), rec.dtype), [Contribution(0, np.arange(10), rec)])}, cluster=cluster)  # fmt: skip
    got = read_stage(st, [{"r": [3, 4]}], cluster=cluster).gather()[0]["r"]
    assert got.dtype == rec.dtype and got["a"].tolist() == [3, 4]
    res.wait()
    gone = tmp_path / "gone.h5"
    write_stage(gone, {"r": (DatasetSpec("r", (10,), rec.dtype), [Contribution(0, np.arange(10), rec)])}, cluster=cluster)  # fmt: skip
    cluster.client.run(readserver.inject, delay=1.0, workers=cluster.ionodes)
    try:
        res = read_stage(gone, [{"r": [1]}], cluster=cluster, wait=False)
        gone.unlink()
        with pytest.raises(CheckpointError, match="cannot be opened on I/O node"):
            res.wait()
    finally:
        cluster.client.run(readserver.inject, workers=cluster.ionodes)
    assert h5py is not None


def test_what_the_second_probe_found(cluster, tmp_path) -> None:
    """Each was a raw traceback or a silently accepted value (session 27's hostile probe)."""
    import h5py

    import orchestrator as orc

    target = _write(cluster, tmp_path, "hdf5")
    # len() of a range is a C integer
    with pytest.raises(InputError, match=f"asks for row {2**63 - 1}"):
        read_stage(target, [{"u": range(0, 2**63)}], cluster=cluster)
    got = read_stage(target, [{"u": range(2**70, 0)}, {"u": [2]}], cluster=cluster).gather()
    assert got[0]["u"].shape[0] == 0 and got[1]["u"].shape[0] == 1
    with pytest.raises(InputError, match="threshold must be a number >= 0"):
        read_stage(target, [{"u": [1]}], cluster=cluster, threshold=10**400)
    for key in ("policy", "shuffle"):
        with pytest.raises(InputError, match=f"{key} must be"):
            read_stage(target, [{"u": [1]}], cluster=cluster, **{key: np.array(["a", "b"])})
    # 8 bytes of view, 80 GB of row numbers
    many = np.broadcast_to(np.int64(0), (10**10,))
    with pytest.raises(InputError, match="10,000,000,000 row numbers need about"):
        read_stage(target, [{"u": many}], cluster=cluster)
    resume = orc.input_stage(target, rows=lambda t: {"id": [t]})(_kw)
    with pytest.raises(InputError, match="wait must be True or False"):
        resume.restart(tasks=1, cluster=cluster, wait="no")
    # rows released before they were waited for
    res = read_stage(target, [{"u": [1]}], cluster=cluster, wait=False)
    cluster.release(res.futures)
    with pytest.raises(CheckpointError, match="released or cancelled before they were"):
        res.wait()
    # damaged HDF5 metadata no stripe covers: a dimension scale's object header, found by
    # the I/O nodes (a raw KeyError before) and now by verify (which passed it)
    bad = tmp_path / "header.h5"
    bad.write_bytes(target.read_bytes())
    with h5py.File(bad, "r") as f:
        header = h5py.h5o.get_info(f["u_dim0"].id).addr
    with open(bad, "r+b") as fh:
        fh.seek(header + 8)  # past the header's version and message count
        fh.write(b"\xff" * 8)
    for shuffle in ("auto", "dask"):
        with pytest.raises(CheckpointError, match="its HDF5 metadata is damaged"):
            read_stage(bad, [{"u": [1]}], cluster=cluster, shuffle=shuffle)
    found = verify(bad)
    assert found and all("cannot be" in m for m in found), found
    assert verify(target) == []


def _damage(target: Path, at: int) -> None:
    import h5py

    with h5py.File(target, "r") as f:
        base = f["u"].id.get_offset()
    with open(target, "r+b") as fh:  # in place, as no stage ever writes
        fh.seek(base + at)
        fh.write(b"\xff" * 8)


def test_a_checkpoint_changed_under_a_restart_fails_it(cluster, tmp_path) -> None:
    """Rows sent through Dask are cut straight out of the mapped file after their stripes'
    checks; a byte changed in the file meanwhile is caught by checking those stripes
    again before the restart ends."""
    from distributed import wait

    target = _write(cluster, tmp_path, "hdf5")
    res = read_stage(target, [{"u": range(0, N)}], cluster=cluster, wait=False, shuffle="dask")
    wait(res.futures)  # every task has its rows; the restart is not over
    _damage(target, 100)
    with pytest.raises(CheckpointError, match="changed during the restart"):
        res.wait()
    assert _nothing_held(cluster)


@pytest.mark.parametrize("borrow", [True, False], ids=["node-descriptor", "node-mapping"])
def test_tasks_copying_from_their_host_check_what_they_copied(cluster, tmp_path, borrow) -> None:
    """A task copying whole stripes — through the I/O worker's descriptor, or out of its
    mapping where the kernel cannot lend descriptors — checks its copy: a byte changed
    in the file before the copy fails it, one changed after cannot reach its rows."""

    from orchestrator.engine import cma
    from orchestrator.engine.readstage import cma_works

    if not cma_works(cluster):
        pytest.skip("tasks cannot copy straight out of an I/O worker here")
    # these rows are few and short: pread_run=0 sends them through the descriptor
    cluster.client.run(cma.inject, borrow=borrow, pread_run=0, workers=cluster.compute)
    before = sum(cluster.client.run(cma.borrowed, workers=cluster.compute).values())
    try:
        _changed_before_or_after_the_copy(cluster, tmp_path)
    finally:
        cluster.client.run(cma.inject, workers=cluster.compute)
    lent = sum(cluster.client.run(cma.borrowed, workers=cluster.compute).values()) - before
    assert (lent > 0) == borrow


def test_short_runs_are_copied_out_of_the_nodes_mapping(cluster, tmp_path) -> None:
    """Tasks whose runs are long read them through the I/O worker's descriptor; tasks
    whose runs are short (a mesh part's) copy them out of its mapping, 1,024 a call —
    the same rows either way."""
    from orchestrator.engine import cma
    from orchestrator.engine.readstage import cma_works

    if not cma_works(cluster):
        pytest.skip("tasks cannot copy straight out of an I/O worker here")
    target = _write(cluster, tmp_path, "hdf5")
    scattered = np.flatnonzero(np.random.default_rng(3).random(N) < 0.3)  # runs of ~1 row
    cases = [(range(0, N), True), (scattered, False), (np.arange(N)[::-1], False)]
    cluster.client.run(cma.inject, pread_run=1000, workers=cluster.compute)
    try:
        for rows, borrows in cases:
            before = sum(cluster.client.run(cma.borrowed, workers=cluster.compute).values())
            got = read_stage(target, [{"u": rows}], cluster=cluster).gather()[0]["u"]
            assert np.array_equal(got, TRUTH_U[np.asarray(rows)])
            lent = sum(cluster.client.run(cma.borrowed, workers=cluster.compute).values())
            assert (lent > before) == borrows, (rows, lent, before)
    finally:
        cluster.client.run(cma.inject, workers=cluster.compute)
    for bad in (-1, True, 2.5):
        with pytest.raises(InputError, match=f"pread_run must be a whole number >= 0, got {bad}"):
            cma.inject(pread_run=bad)
    cma.inject(pread_run=np.int64(7))  # NumPy's integers are whole numbers too
    assert cma.through_descriptor(7) and not cma.through_descriptor(6)
    cma.inject()


def _changed_before_or_after_the_copy(cluster, tmp_path: Path) -> None:
    from distributed import wait

    target = _write(cluster, tmp_path, "hdf5")
    reqs = [{"u": range(0, N)}]
    res = read_stage(target, reqs, cluster=cluster, wait=False)
    wait(res.futures)
    _damage(target, 100)  # after the copies: the rows were checked as copied
    assert np.array_equal(res.wait().gather()[0]["u"], TRUTH_U)
    assert _nothing_held(cluster)
    (tmp_path / "fresh").mkdir()
    target = _write(cluster, tmp_path / "fresh", "hdf5")
    cluster.client.run(readserver.inject, hold=True, workers=cluster.ionodes)
    try:  # changed after the restart was planned, before its bytes were copied
        res = read_stage(target, reqs, cluster=cluster, wait=False)
        time.sleep(0.3)
        _damage(target, 300)
    finally:
        cluster.client.run(readserver.inject, workers=cluster.ionodes)
    with pytest.raises(CheckpointError, match=r"u: stripe at byte 0 \(I/O node \d\) .* as copied"):
        res.wait()
    assert _nothing_held(cluster)
    # a stripe cut between two tasks is checked by its node, in place: once the tasks
    # have copied it, it is checked again
    (tmp_path / "cut").mkdir()
    target = _write(cluster, tmp_path / "cut", "hdf5")
    halves = [{"u": range(0, 200)}, {"u": range(200, 400)}]  # row 200: byte 4800
    res = read_stage(target, halves, cluster=cluster, wait=False)
    wait(res.futures)
    _damage(target, 5000)
    with pytest.raises(CheckpointError, match=r"changed during the restart.*stripe at byte 4096"):
        res.wait()
    assert _nothing_held(cluster)


def _answer() -> int:
    return 42


def test_a_restart_waiting_on_its_disk_leaves_the_compute_workers_thread_to_others(
    tmp_path: Path,
) -> None:
    from orchestrator.engine.readstage import cma_works

    with local_cluster(n_ionodes=1, n_compute=1, threads_per_compute=1) as cl:
        if not cma_works(cl):
            pytest.skip("tasks cannot copy straight out of an I/O worker here")
        target = _write(cl, tmp_path, "hdf5")
        cl.client.run(readserver.inject, hold=True, workers=cl.ionodes)
        try:
            res = read_stage(target, _requests()[:2], cluster=cl, wait=False)
            time.sleep(0.5)  # the restart's tasks are polling their stripes' flags
            other = cl.client.submit(_answer, workers=cl.compute, pure=False)
            assert other.result(timeout=60) == 42  # ran on the worker's one thread meanwhile
            assert not any(f.done() for f in res.futures)  # the disk is still held
        finally:
            cl.client.run(readserver.inject, workers=cl.ionodes)
        for want, got in zip(_requests()[:2], res.gather(), strict=True):
            assert np.array_equal(got["u"], TRUTH_U[np.asarray(want["u"])])
            assert np.array_equal(got["id"], TRUTH_ID[np.asarray(want["id"])])


def test_a_checkpoint_cut_short_under_a_restart_fails_it_and_keeps_the_workers(
    cluster, tmp_path
) -> None:
    """A file truncated after the restart was queued: its node, bringing the mapped
    stripes in, gets EFAULT instead of SIGBUS; the restart fails with the stripe named,
    and every worker lives on to read the next checkpoint."""
    import os as _os

    target = _write(cluster, tmp_path, "hdf5")
    pids = cluster.client.run(_os.getpid)
    cluster.client.run(readserver.inject, hold=True, workers=cluster.ionodes)
    try:
        res = read_stage(target, [{"u": range(0, N)}], cluster=cluster, wait=False)
        time.sleep(0.3)
        with open(target, "r+b") as fh:
            fh.truncate(8192)  # the datasets' bytes are gone
    finally:
        cluster.client.run(readserver.inject, workers=cluster.ionodes)
    with pytest.raises(
        CheckpointError, match=r"stripe at byte \d+ .*cannot be read|cannot be opened"
    ):
        res.wait()
    assert cluster.client.run(_os.getpid) == pids  # nobody died
    assert _nothing_held(cluster)
    (tmp_path / "next").mkdir()
    again = _write(cluster, tmp_path / "next", "hdf5")
    got = read_stage(again, [{"u": range(0, N)}], cluster=cluster).gather()[0]["u"]
    assert np.array_equal(got, TRUTH_U)


def test_a_failed_restart_leaves_nothing_queued_or_kept(cluster, tmp_path) -> None:
    """A restart failing on one node while the others are busy: their queued requests are
    taken out, not read later for nobody, and nothing of the restart stays open."""
    target = _write(cluster, tmp_path, "hdf5")
    _damage(target, 300)  # stripe 0, on node 0, which the one task copies first
    busy = cluster.ionodes[1:]
    cluster.client.run(readserver.inject, hold=True, workers=busy)
    try:
        res = read_stage(target, [{"u": range(0, N)}], cluster=cluster, wait=False)
        with pytest.raises(CheckpointError, match="stripe at byte 0"):
            res.wait()
        assert sum(cluster.client.run(readserver.queued, workers=busy).values()) == 0
        assert _nothing_held(cluster)
    finally:
        cluster.client.run(readserver.inject, workers=busy)
    time.sleep(0.5)  # the disks are free: nothing of the failed restart is read now
    assert _nothing_held(cluster)
    served = cluster.client.run(readserver.served, 1, workers=busy)
    assert not [s for log in served.values() for s in log if tuple(s[0]) == res.application]


def test_a_restart_whose_io_worker_is_lost_before_it_ends_fails(tmp_path) -> None:
    """Every task has its rows, but an I/O worker dies before the restart's end could
    check its stripes again there: the restart fails, naming it, rather than vouching
    for rows nobody checked twice."""
    from distributed import wait

    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        target = _write(cl, tmp_path, "hdf5")
        res = read_stage(
            target, [{"u": range(0, 200)}, {"u": range(200, 400)}], cluster=cl, wait=False
        )
        wait(res.futures)
        lost = cl.ionodes[1]
        cl.client.submit(os._exit, 1, workers=[lost], pure=False)
        deadline = time.monotonic() + 30
        while lost in cl.client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(OrchestratorError, match=r"could not be ended on I/O worker|was lost"):
            res.wait()


def test_a_closed_cluster_is_named_by_both_stages(tmp_path) -> None:
    """A cluster whose ``with`` block has ended: Dask's client is gone (raw AttributeError
    from deep inside, before)."""
    from orchestrator.errors import ClusterError

    with local_cluster(n_ionodes=1, n_compute=1) as cl:
        target = _write(cl, tmp_path, "hdf5")
    spec = DatasetSpec("u", (4,), "f8")
    for call in (
        lambda: read_stage(target, [{"u": [1]}], cluster=cl),
        lambda: write_stage(
            tmp_path / "w.h5",
            {"u": (spec, [Contribution(0, np.arange(4), np.zeros(4))])},
            cluster=cl,
        ),
    ):
        with pytest.raises(ClusterError, match="this cluster's client is closed"):
            call()
    assert not (tmp_path / "w.h5").exists()
