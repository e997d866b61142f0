"""The execution engine on a real embedded Dask cluster, writing real HDF5 and Zarr.

One conformance suite runs against every storage backend.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.cost import CostModel
from orchestrator.engine.backends import get_backend
from orchestrator.engine.cluster import local_cluster
from orchestrator.engine.stage import StageError, write_stage
from orchestrator.engine.storage import StorageError
from orchestrator.engine.verify import verify
from orchestrator.errors import InputError, OrchestratorError

FORMATS = ["hdf5", "hdf5-vds", "hdf5-chunked", "zarr"]


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=3, n_compute=2) as cl:
        yield cl


def _case(seed=0, n=3000, clients=5, interleaved=False):
    rng = np.random.default_rng(seed)
    spec = DatasetSpec("u", (n, 2), "float64")
    truth = rng.random((n, 2))
    parts, per = [], n // clients + 1
    for c in range(clients):
        own = np.arange(c * per, min(n, (c + 1) * per + 20))  # halo rows replicate the next block
        extra = rng.integers(0, n, 30)
        rows = np.unique(np.concatenate([own, extra]))
        parts.append(Contribution(c, rows, truth[rows]))
    ids = DatasetSpec("ids", (n,), "int32")
    if interleaved:  # every row a different writer: the worst case for contiguity
        id_rows = [np.arange(c, n, clients) for c in range(clients)]
    else:
        id_rows = [np.arange(c * per, min(n, (c + 1) * per)) for c in range(clients)]
    id_parts = [Contribution(c, r, r.astype(np.int16)) for c, r in enumerate(id_rows)]
    return {"u": (spec, parts), "ids": (ids, id_parts)}, truth


def _read(fmt, path):
    return {k: np.asarray(v[...]) for k, v in get_backend(fmt).open(path).items()}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("policy", "strategy", "interleaved"),
    [
        ("ms-ecf", "contiguous", False),
        ("ecf", "list", True),
        ("hdf", "two-phase", True),
        ("hash-ios", "contiguous", False),
    ],
)
def test_stage_writes_exact_data_and_verifies(
    cluster, tmp_path, fmt, policy, strategy, interleaved
):
    datasets, truth = _case(interleaved=interleaved)
    target = tmp_path / f"ckpt.{fmt}"
    res = write_stage(
        target,
        datasets,
        format=fmt,
        policy=policy,
        cluster=cluster,
        stripe_bytes=2048,
        strategy=strategy,
        unique=True,
        direct=True,
    )
    data = _read(fmt, target)
    assert np.array_equal(data["u"], truth)
    assert np.array_equal(data["ids"], np.arange(3000, dtype=np.int32))  # int16 values cast
    assert verify(target) == []
    m = res.manifest
    assert m["policy"] == policy and m["strategy"] == strategy and m["format"] == fmt
    assert set(m["datasets"]) == {"u", "ids"}
    assert m["plan"]["units"] == res.plan.n_units == res.trace.unit.size
    assert sorted(res.trace.unit.tolist()) == list(range(res.plan.n_units))
    assert res.trace.nbytes.sum() == res.plan.transfers.total_bytes == 3000 * 16 + 3000 * 4
    # every write ran on the I/O worker of its I/O node, or (direct writes: pieces into a
    # plain file, never aggregated; whole Zarr shards) on the worker holding the data
    direct_ok = fmt in ("hdf5", "hdf5-vds", "zarr") and strategy != "two-phase"
    for s, w in zip(res.trace.ionode.tolist(), res.trace.worker, strict=True):
        assert w == cluster.ionodes[s] or (direct_ok and w in cluster.compute)
    if direct_ok and fmt != "zarr":  # no Zarr shard is held whole by one worker here
        assert set(res.trace.worker) & set(cluster.compute)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary output left"


@pytest.mark.parametrize("direct", [False, True], ids=["sent", "direct"])
def test_realized_chart_shows_the_stage_s_whole_write_time(cluster, tmp_path, direct):
    """The realized Gantt chart's makespan is the trace's (what the demo's table reports
    as write s), not the span of the writes alone: each node's fetches and waits are
    drawn in grey from its start to its fsync, drawn in black. Before, the chart showed the
    writes only and its makespan was half the table's."""
    from orchestrator.plots import close, realized_gantt

    datasets, _ = _case(seed=2)
    res = write_stage(
        tmp_path / "o.h5",
        datasets,
        policy="ecf",
        cluster=cluster,
        stripe_bytes=1024,
        window=4096,
        direct=direct,
    )
    tr = res.trace
    fig = realized_gantt(
        res.plan,
        *tr.writes(),
        began=tr.began,
        flush_start=tr.flush_start,
        flush_end=tr.flush_end,
    )
    try:
        ax = fig.axes[1]
        assert ax.get_title().startswith(f"ecf realized: makespan {tr.makespan:.4g} s")
        assert ax.get_xlim()[1] >= float(tr.flush_end.max())
        grey = [c for c in ax.collections if np.allclose(c.get_facecolor()[0][:3], 0.85)]
        assert len(grey) == cluster.n_ionodes
        for s, bars in enumerate(grey):
            ((x0, y0), (x1, _)) = bars.get_paths()[0].get_extents().get_points()
            go = min(tr.began[s], tr.writes()[2][tr.writes()[1] == s].min(initial=np.inf))
            assert x0 == pytest.approx(go) and x1 == pytest.approx(tr.flush_start[s])
            assert y0 == pytest.approx(s - 0.4)
        with pytest.raises(InputError, match="began must hold one time per I/O node"):
            realized_gantt(res.plan, *tr.writes(), began=tr.began[:1])
    finally:
        close(fig)


@pytest.mark.parametrize("direct", [False, True], ids=["sent", "direct"])
@pytest.mark.parametrize(
    ("policy", "window"),
    [("ecf", 4096), ("hdf", 1 << 20), ("hash-ios", 2048), ("ms-ecf", 64 << 20)],
)
def test_plans_run_in_plan_order_on_each_ionode(cluster, tmp_path, policy, window, direct):
    """Ordered, block-splitting and decentralized plans: each I/O node writes its units in
    the plan's order, whatever the window (tiny windows force many fetch rounds).

    Sent: the I/O worker writes every unit itself, strictly in plan order. Direct (every
    worker on this host): the stage hands each source all its cuts at once, in batches
    that end with a unit of the plan, and each source writes them in the batches' order
    by planned start over all I/O nodes (side by side with the other sources, as the plan
    has them); every unit is written by its I/O worker or by the worker holding it."""
    datasets, truth = _case(seed=1)
    res = write_stage(
        tmp_path / "o.h5",
        datasets,
        policy=policy,
        cluster=cluster,
        stripe_bytes=1024,
        window=window,
        direct=direct,
    )
    plan, tr = res.plan, res.trace
    compute = set(cluster.compute)
    for s in range(cluster.n_ionodes):
        mine = np.flatnonzero(tr.ionode == s)
        writers = {tr.worker[i] for i in mine}
        planned = plan.ionode_sequence(s)
        assert sorted(tr.unit[mine].tolist()) == sorted(planned.tolist())
        if not direct:
            assert tr.ionode_sequence(s).tolist() == planned.tolist()
            assert np.all(np.diff(tr.start[mine]) >= 0)
            assert writers == {cluster.ionodes[s]}
            continue
        at = {int(u): i for u, i in zip(tr.unit[mine], mine, strict=True)}
        order = np.array([at[u] for u in planned.tolist()])
        first, last = tr.batch_first[order], tr.batch_last[order]
        assert np.all(np.diff(first) >= 0) and np.all(last >= first)  # batches follow the plan
        assert writers <= compute | {cluster.ionodes[s]} and writers & compute
    if direct:  # each source wrote its batches in their order over all I/O nodes
        # a batch's rank: its earliest planned start, then its I/O node, then its index
        key: dict[tuple[int, int], tuple[float, int, int]] = {}
        for i in range(tr.unit.size):
            for b in range(int(tr.batch_first[i]), int(tr.batch_last[i]) + 1):
                s, t = int(tr.ionode[i]), float(plan.start[tr.unit[i]])
                key[(s, b)] = min(key.get((s, b), (t, s, b)), (t, s, b))
        who = np.array(tr.worker, dtype=object)
        for w in set(tr.worker) & compute:
            mine = np.flatnonzero(who == w)
            mine = mine[np.argsort(tr.start[mine], kind="stable")]
            ranks = [key[(int(tr.ionode[i]), int(tr.batch_first[i]))] for i in mine]
            assert ranks == sorted(ranks), w
    assert tr.flush_end.size == cluster.n_ionodes
    assert tr.makespan >= float(tr.end.max() - tr.start.min())
    assert np.array_equal(_read("hdf5", tmp_path / "o.h5")["u"], truth)
    assert verify(tmp_path / "o.h5") == []
    assert res.manifest["realized_makespan"] == tr.makespan


def test_direct_batches_end_with_units_whatever_the_window(cluster, tmp_path):
    """Direct writes hold nothing on the I/O workers: a tiny window still gives each node
    about HAND_BATCHES batches, each ending where a unit of the plan ends, while sent bytes
    stay cut by the window (a quarter of it per batch)."""
    from orchestrator.engine.dispatch import HAND_BATCHES

    datasets, truth = _case(seed=3)
    counts, cut = {}, []
    for direct in (True, False):
        res = write_stage(
            tmp_path / f"b{direct}.h5",
            datasets,
            policy="ecf",
            cluster=cluster,
            stripe_bytes=1024,
            window=4096,
            direct=direct,
        )
        tr = res.trace
        counts[direct] = [
            int(tr.batch_last[tr.ionode == s].max()) + 1 for s in range(cluster.n_ionodes)
        ]
        cut = [-(-int(tr.nbytes[tr.ionode == s].sum()) // 1024) for s in range(cluster.n_ionodes)]
        assert np.array_equal(_read("hdf5", tmp_path / f"b{direct}.h5")["u"], truth)
    assert all(HAND_BATCHES // 2 <= n <= HAND_BATCHES + 1 for n in counts[True]), counts
    assert counts[False] == cut, (counts, cut)


def test_io_worker_memory_is_bounded_by_the_window(cluster, tmp_path):
    """A stage 16x the window: each I/O worker's peak of held batch bytes stays within it."""
    n, width = 4096, 64  # 2 MiB of float64
    spec = DatasetSpec("u", (n, width), "float64")
    rows = np.arange(n)
    values = np.repeat(rows[:, None].astype(float), width, axis=1)
    parts = [Contribution(c, rows[c::4], values[c::4]) for c in range(4)]  # every row alternates
    window = 128 << 10
    res = write_stage(
        tmp_path / "m.h5",
        {"u": (spec, parts)},
        policy="ecf",
        cluster=cluster,
        stripe_bytes=64 << 10,
        strategy="list",
        window=window,
        direct=False,
    )
    peaks = res.trace.peak_held
    assert peaks.size == cluster.n_ionodes and peaks.min() > 0
    assert peaks.max() <= window
    assert res.plan.transfers.total_bytes >= 16 * window
    assert verify(tmp_path / "m.h5") == []
    # written directly by the workers holding the data, nothing reaches the I/O workers
    res = write_stage(
        tmp_path / "d.h5",
        {"u": (spec, parts)},
        policy="ecf",
        cluster=cluster,
        stripe_bytes=64 << 10,
        strategy="list",
        window=window,
    )
    assert res.trace.peak_held.max() == 0
    assert set(res.trace.worker) <= set(cluster.compute)
    assert verify(tmp_path / "d.h5") == []


@pytest.mark.parametrize("fmt", ["zarr", "hdf5-chunked"])
def test_whole_stripe_formats_spill_to_stay_within_the_window(cluster, tmp_path, fmt):
    """Zarr shards and compressed chunks are stored whole, and with every row alternating
    between clients no stripe completes before the end of the stage: the pieces waiting
    for the rest of their stripes are spilled to a scratch file, so what an I/O worker
    holds (batches fetched and pieces waiting) stays within the window, the data read
    back is exact, and no scratch file is left in the output."""
    n, width = 4096, 64  # 2 MiB of float64: 512 KiB per I/O node, 4x the window
    spec = DatasetSpec("u", (n, width), "float64")
    rows = np.arange(n)
    values = np.repeat(rows[:, None].astype(float), width, axis=1) + 0.5
    parts = [Contribution(c, rows[c::4], values[c::4]) for c in range(4)]
    window = 128 << 10
    target = tmp_path / f"s.{fmt}"
    res = write_stage(
        target,
        {"u": (spec, parts)},
        format=fmt,
        policy="hdf",  # client after client: a stripe's last piece comes with the last client
        cluster=cluster,
        stripe_bytes=64 << 10,
        window=window,
        direct=False,
    )
    peaks = res.trace.peak_held
    assert peaks.max() <= window and peaks.min() > window // 4
    assert np.array_equal(_read(fmt, target)["u"], values)
    assert verify(target) == []
    left = [p.name for p in target.rglob("*") if "spill" in p.name]
    assert not left and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_hdf5_subfiles_are_read_through_a_virtual_dataset(cluster, tmp_path):
    datasets, truth = _case(seed=4)
    target = tmp_path / "vds"
    write_stage(target, datasets, format="hdf5-vds", cluster=cluster, stripe_bytes=1000)
    assert sorted(p.name for p in target.iterdir()) == [
        "io-0.h5",
        "io-1.h5",
        "io-2.h5",
        "master.h5",
    ]
    moved = tmp_path / "moved"
    target.rename(moved)  # relative source paths: the directory can move
    with h5py.File(moved / "master.h5", "r") as f:
        assert f["u"].is_virtual and np.array_equal(f["u"][...], truth)
    with h5py.File(moved / "io-0.h5", "r") as f:  # each I/O node holds only its own stripes
        assert f["u"].shape[0] < 3000
    assert verify(moved) == []


def test_hdf5_is_a_normal_file(cluster, tmp_path):
    datasets, truth = _case(seed=2)
    target = tmp_path / "n.h5"
    write_stage(target, datasets, cluster=cluster)
    with h5py.File(target, "r") as f:
        assert f["u"].shape == (3000, 2) and f["u"].dtype == np.float64
        assert np.array_equal(f["u"][5:9], truth[5:9])


@pytest.mark.parametrize("fmt", FORMATS)
def test_existing_target_and_missing_rows(cluster, tmp_path, fmt):
    spec = DatasetSpec("v", (10,), "float32", fill_value=-1.0)
    parts = [Contribution(0, [0, 1, 2, 9], np.array([1.0, 2, 3, 4]))]
    target = tmp_path / f"m.{fmt}"
    write_stage(
        target,
        {"v": (spec, parts)},
        format=fmt,
        cluster=cluster,
        allow_missing=True,
        stripe_bytes=8,
    )
    got = _read(fmt, target)["v"]
    assert got.tolist() == [1.0, 2.0, 3.0, -1, -1, -1, -1, -1, -1, 4.0]
    assert verify(target) == []
    with pytest.raises(StorageError, match="exists; pass overwrite=True"):
        write_stage(target, {"v": (spec, parts)}, format=fmt, cluster=cluster, allow_missing=True)
    parts2 = [Contribution(0, np.arange(10), np.arange(10.0))]
    write_stage(target, {"v": (spec, parts2)}, format=fmt, cluster=cluster, overwrite=True)
    assert _read(fmt, target)["v"].tolist() == list(range(10))


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_detects_a_flipped_byte(cluster, tmp_path, fmt):
    datasets, _ = _case(seed=3)
    target = tmp_path / f"c.{fmt}"
    write_stage(target, datasets, format=fmt, cluster=cluster, stripe_bytes=4096)
    if fmt == "hdf5-chunked":  # compressed chunks: change a value, not a raw byte
        with h5py.File(target / "io-1.h5", "r+") as f:
            f["u"][3, 0] = f["u"][3, 0] + 1.0
    elif fmt.startswith("hdf5"):
        data_file = target if fmt == "hdf5" else target / "io-1.h5"  # a subfile of the VDS
        with h5py.File(data_file, "r") as f:
            pos = f["u"].id.get_offset() + 500
        with open(data_file, "r+b") as fh:
            fh.seek(pos)
            b = fh.read(1)
            fh.seek(pos)
            fh.write(bytes([b[0] ^ 0xFF]))
    else:
        import zarr

        arr = zarr.open_array(target, path="u", mode="r+")
        arr[300, 0] = arr[300, 0] + 1.0
    bad = verify(target)
    assert len(bad) == 1 and bad[0].startswith("u: stripe at byte")
    iorch = str(Path(sys.executable).with_name("iorch"))
    p = subprocess.run([iorch, "verify", str(target)], capture_output=True, text=True)
    assert p.returncode == 1 and "mismatch" in p.stderr


def test_unwritable_directory_fails_before_writing(cluster, tmp_path):
    datasets, _ = _case()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores mode bits; use a missing directory instead
            target = tmp_path / "missing" / "x.h5"
            with pytest.raises(StorageError, match="does not exist"):
                write_stage(target, datasets, cluster=cluster)
        else:
            with pytest.raises(StorageError, match="is not writable"):
                write_stage(ro / "x.h5", datasets, cluster=cluster)
    finally:
        ro.chmod(0o700)


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
    )
    if p.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here to fill a disk for real: {p.stderr.decode().strip()}"
        )
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stage_larger_than_the_free_disk_is_refused_before_writing(cluster, tiny_fs, fmt):
    datasets, _ = _case(n=20000)  # ~400 KB into a 256 KB file system
    with pytest.raises(StorageError, match=r"need 390\.6 KiB on the disk holding"):
        write_stage(
            tiny_fs / f"big.{fmt}", datasets, format=fmt, cluster=cluster, stripe_bytes=8192
        )
    assert list(tiny_fs.iterdir()) == [], "a partial or temporary output was left behind"


def _fill_disk_on_first_write(folder):
    """In a compute worker: the first direct write fills the disk holding ``folder``."""
    import shutil

    from orchestrator.engine import sources

    def hook(at):
        filler = os.path.join(folder, "filler")
        if not os.path.exists(filler):
            with open(filler, "wb") as f:
                free = shutil.disk_usage(folder).free
                try:
                    f.write(b"\0" * free)
                except OSError:  # full: what we wanted
                    pass

    sources.cut_hook = hook


def _no_hook():
    from orchestrator.engine import sources

    sources.cut_hook = None


@pytest.mark.parametrize("fmt", ["hdf5", "hdf5-vds", "zarr"])
def test_a_disk_filling_up_during_the_stage_fails_cleanly(cluster, tmp_path, fmt):
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.decode().strip()}")
    try:
        datasets, _ = _case(n=20000)  # ~400 KB: fits when the stage starts
        cluster.client.run(_fill_disk_on_first_write, str(mnt), workers=cluster.compute)
        with pytest.raises(OrchestratorError, match=r"No space left on device") as err:
            write_stage(
                mnt / f"big.{fmt}",
                datasets,
                format=fmt,
                cluster=cluster,
                stripe_bytes=8192,
                direct=True,
            )
        assert "died" not in str(err.value)  # a full disk is not a dead worker
        assert [q.name for q in mnt.iterdir()] == ["filler"], "partial output left behind"
        # the disk has room again: the next stage on the same cluster works
        cluster.client.run(_no_hook, workers=cluster.compute)
        (mnt / "filler").unlink()
        write_stage(mnt / f"ok.{fmt}", datasets, format=fmt, cluster=cluster, stripe_bytes=8192)
        assert verify(mnt / f"ok.{fmt}") == []
    finally:
        cluster.client.run(_no_hook, workers=cluster.compute)
        subprocess.run(["umount", str(mnt)], check=True)


def test_killed_ionode_aborts_the_stage_and_leaves_nothing(tmp_path):
    datasets, _ = _case(n=20000)
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        victim = cl.ionodes[1]
        pid = cl.worker_pids()[victim]
        # keep the victim busy so the stage is surely mid-dispatch when it dies
        blocker = cl.client.submit(time.sleep, 60, resources={"io-1": 1}, pure=False)
        killer = threading.Timer(3.0, os.kill, (pid, signal.SIGKILL))
        killer.start()
        try:
            with pytest.raises(StageError, match=r"I/O worker io-1 .* died during dispatch"):
                write_stage(tmp_path / "k.h5", datasets, cluster=cl, stripe_bytes=4096)
        finally:
            killer.cancel()
            blocker.cancel()
        assert list(tmp_path.iterdir()) == []


def test_write_bench_cli_runs_policies_for_real(tmp_path):
    iorch = str(Path(sys.executable).with_name("iorch"))
    p = subprocess.run(
        [
            iorch,
            "write-bench",
            "--size",
            "4MiB",
            "--clients",
            "4",
            "--ionodes",
            "2",
            "--policy",
            "ecf",
            "--stripe",
            "256KiB",
            "--out",
            str(tmp_path / "w"),
            "--repeat",
            "1",
            "--gantt",
            str(tmp_path / "g"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    import importlib.util

    want = [
        "raw sequential write",
        "raw sequential write, O_DIRECT",
        "h5py, one process",
        "h5py, after gathering from the workers",
        "dask.array.to_zarr",
        "worker-to-worker copy",
        "ecf",
        "ecf, bytes sent to the I/O workers",
        "peak RSS",
    ]
    if importlib.util.find_spec("adios2"):  # the optional extra [bench]
        want.append("ADIOS2 BP5")
    for row in want:
        assert row in p.stdout
    assert "Traceback" not in p.stdout + p.stderr
    left = sorted(x.name for x in (tmp_path / "w").iterdir())
    assert left == ["results.csv", "results.json"], "benchmark outputs and probe files are removed"
    import json

    saved = json.loads((tmp_path / "w" / "results.json").read_text())
    assert saved["tls"] is True and "TLS between workers" in p.stdout  # secure by default
    rows = {r["name"]: r for r in saved["rows"]}
    assert rows["ecf"]["units"] > 0 and rows["ecf"]["realized_over_planned"] > 0
    sent = rows["ecf, bytes sent to the I/O workers"]
    assert sent["units"] == rows["ecf"]["units"] and sent["realized_over_planned"] > 0
    assert len(rows["ecf"]["all_seconds"]) == 1
    # every row says what the CPUs did: the stage ran in all three kinds of process
    cpu = rows["ecf"]["cpu_seconds"]
    assert set(cpu) == {"stage", "io", "compute"} and all(v > 0 for v in cpu.values())
    assert 0 < rows["ecf"]["cpu_busy"] <= 1.2 and "CPU busy" in p.stdout
    assert rows["raw sequential write"]["ratio_raw"] == pytest.approx(1.0)
    assert (tmp_path / "g" / "gantt-ecf.png").stat().st_size > 1000
    bad = subprocess.run([iorch, "write-bench", "--size", "lots"], capture_output=True, text=True)
    assert bad.returncode == 2 and "size 'lots' is not a number" in bad.stderr


def test_connect_finds_io_workers_of_a_running_cluster(cluster):
    from orchestrator.engine.cluster import ClusterError, connect

    cluster.refresh()  # an earlier test may have crashed a worker (its Nanny restarts it)
    other = connect(address=cluster.client.scheduler.address)
    try:
        assert other.ionodes == cluster.ionodes and other.compute == cluster.compute
    finally:
        other.close()
    with pytest.raises(ClusterError, match="exactly one of address and scheduler_file"):
        connect()


def test_bad_stage_input_is_named_and_writes_nothing(cluster, tmp_path):
    from orchestrator.contributions import ContributionError
    from orchestrator.layout import LayoutError
    from orchestrator.policies import PolicyError

    datasets, _ = _case()
    cases = [
        ({"format": "netcdf"}, StorageError, "unknown format 'netcdf'"),
        ({"strategy": "collective"}, LayoutError, "unknown strategy 'collective'"),
        ({"policy": "fastest"}, PolicyError, "unknown policy 'fastest'"),
        ({"assignment": "idg"}, ContributionError, "unknown assignment method 'idg'"),
    ]
    for kwargs, exc, message in cases:
        with pytest.raises(exc, match=message):
            write_stage(tmp_path / "x.h5", datasets, cluster=cluster, **kwargs)
    spec, parts = datasets["u"]
    with pytest.raises(ContributionError, match="dataset key 'v' differs from its spec name 'u'"):
        write_stage(tmp_path / "x.h5", {"v": (spec, parts)}, cluster=cluster)
    assert list(tmp_path.iterdir()) == []


def _make_part(c, n, clients):
    rows = np.arange(c, n, clients)
    return Contribution(c, rows, np.repeat(rows[:, None] * 1.0, 2, axis=1))


def test_contributions_already_on_workers_are_cut_where_they_live(cluster, tmp_path):
    # what a Dask workflow hands over: futures of contributions computed on workers
    n, clients = 2000, 4
    futs = [
        cluster.client.submit(_make_part, c, n, clients, workers=cluster.compute, pure=False)
        for c in range(clients)
    ]
    spec = DatasetSpec("u", (n, 2), "float64")
    target = tmp_path / "remote.h5"
    write_stage(target, {"u": (spec, futs)}, cluster=cluster, strategy="list")
    with h5py.File(target, "r") as f:
        assert np.array_equal(f["u"][:, 0], np.arange(n, dtype=float))
    from orchestrator.contributions import ContributionError

    with pytest.raises(ContributionError, match="unique=True compares replica values"):
        write_stage(tmp_path / "u.h5", {"u": (spec, futs)}, cluster=cluster, unique=True)


def _slow_part(c, n, clients):
    time.sleep(0.5)
    return _make_part(c, n, clients)


def test_contributions_still_computing_stay_where_they_are_computed(cluster, tmp_path):
    """A workflow writes what it just submitted: the stage waits for each contribution on
    the worker its task runs on, and leaves it there. (Described in one task before they
    existed, they were all pulled to one worker, and Dask's memory manager then dropped
    the other copies: one process wrote the whole stage.)"""
    n, clients = 1 << 14, 8
    workers = [cluster.compute[c % 2] for c in range(clients)]
    futs = [
        cluster.client.submit(_slow_part, c, n, clients, workers=[w], pure=False)
        for c, w in enumerate(workers)
    ]
    spec = DatasetSpec("u", (n, 2), "float64")
    res = write_stage(
        tmp_path / "s.h5",
        {"u": (spec, futs)},
        cluster=cluster,
        direct=True,
        stripe_bytes=4096,
        window=1 << 14,
    )
    assert verify(tmp_path / "s.h5") == []
    time.sleep(2.5)  # the memory manager's interval (2 s): a copy it would drop is gone
    who = cluster.client.who_has(futs)
    assert [sorted(who[f.key]) for f in futs] == [[w] for w in workers]
    assert set(res.trace.worker) == set(cluster.compute)  # both wrote their own rows


def test_split_opt_plan_of_variable_size_pieces_is_executed_exactly(cluster, tmp_path):
    # zero latency: cutting always pays, so the plan really is over pieces of transfers
    datasets, truth = _case(seed=2, interleaved=True)
    target = tmp_path / "split.h5"
    cm = CostModel(1.0, 1.0)
    res = write_stage(
        target,
        datasets,
        policy="split-opt",
        cluster=cluster,
        cost=cm,
        stripe_bytes=2048,
        strategy="list",
        unique=True,
        min_piece=16,
    )
    plan = res.plan
    assert plan.n_pieces > 0 and plan.n_units > len(plan.transfers)
    assert plan.block_size is None and plan.makespan == pytest.approx(plan.lower_bound)
    data = _read("hdf5", target)
    assert np.array_equal(data["u"], truth)
    assert np.array_equal(data["ids"], np.arange(3000, dtype=np.int32))
    assert verify(target) == []
    assert res.trace.nbytes.sum() == plan.transfers.total_bytes


def test_two_stages_on_one_target_exactly_one_commits(cluster, tmp_path):
    """Both pass the early existence check; the commit lets only one of them take the name."""
    datasets, truth = _case(seed=7)
    target = tmp_path / "race.h5"
    outcomes: list[object] = []

    def go():
        try:
            outcomes.append(
                write_stage(target, datasets, policy="ecf", cluster=cluster, stripe_bytes=1024)
            )
        except StorageError as err:
            outcomes.append(err)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o for o in outcomes if isinstance(o, StorageError)]
    assert len(outcomes) == 2
    # never both: the second fails at the early check or, if both passed it, at the commit
    assert len(errors) == 1 and "exists" in str(errors[0])
    assert np.array_equal(_read("hdf5", target)["u"], truth)
    assert verify(target) == []
    assert [p.name for p in tmp_path.iterdir()] == ["race.h5"], "a temporary output was left"


def _record_cut_kinds(lose_staging=False):
    """Record which direct tasks ran; with ``lose_staging``, each stager first finds the
    shared-memory folders gone (as if /dev/shm were full or another one): it must send
    its bytes through Dask instead."""
    import shutil

    from orchestrator.engine import sources, staging

    seen = []

    def hook(at):
        seen.append(at)
        if lose_staging and at == "stage_cut":
            for d in staging.ROOT.glob(f"iorch-stage-{os.getuid()}-*"):
                shutil.rmtree(d, ignore_errors=True)

    hook.__self__ = seen  # what _cut_kinds reads back
    sources.cut_hook = hook


def _cut_kinds():
    from orchestrator.engine import sources

    hook, sources.cut_hook = sources.cut_hook, None
    return sorted(set(getattr(hook, "__self__", []))) if hook is not None else []


def _setenv(name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _staging_dirs(pids):
    from orchestrator.engine.staging import ROOT, _namespace

    mine = [f"iorch-stage-{os.getuid()}-{_namespace()}-{p}-" for p in pids]
    return [e for e in os.listdir(ROOT) if any(e.startswith(m) for m in mine)]


@pytest.mark.parametrize(
    "direct,staging",
    [(True, "1"), (True, "lost"), (True, "0"), (False, "1")],
    ids=["staged", "staging-lost", "dask", "sent"],
)
def test_zarr_shards_are_assembled_where_most_of_their_rows_are(cluster, tmp_path, direct, staging):
    """Direct writes into Zarr: each shard is assembled and stored by the worker holding
    most of its rows, the others' rows handed to it through shared memory (staged) or
    moved by Dask (runs of rows alternate between clients on both compute workers, some
    rows replicated, some missing and filled); sent, the I/O workers gather every shard.
    Either way the store reads back exactly and verifies, and no staging folder is left."""
    n, width, rows_per_shard = 4096, 8, 256
    spec = DatasetSpec("u", (n, width), "float64", fill_value=-1.0)
    truth = np.random.default_rng(5).random((n, width))
    owner = (np.arange(n) // 96) % 4  # runs of 96 rows: every shard spans clients
    missing = np.arange(n) % 1000 < 5
    truth[missing] = -1.0
    parts = []
    for c in range(4):
        rows = np.flatnonzero((owner == c) & ~missing)
        rows = np.union1d(rows, np.clip(rows + 1, 0, n - 1)[:50])  # a few replicated rows
        rows = rows[~missing[rows]]
        parts.append(Contribution(c, rows, truth[rows]))
    target = tmp_path / "d.zarr"
    client = cluster.client
    client.run(_setenv, "IORCH_STAGING", "0" if staging == "0" else "1")
    client.run(_record_cut_kinds, staging == "lost")
    try:
        res = write_stage(
            target,
            {"u": (spec, parts)},
            format="zarr",
            cluster=cluster,
            stripe_bytes=rows_per_shard * width * 8,
            policy="ecf",
            direct=direct,
            allow_missing=True,
            window=8 * rows_per_shard * width * 8,
        )
    finally:
        kinds = client.run(_cut_kinds)
        client.run(_setenv, "IORCH_STAGING", None)
    assert np.array_equal(_read("zarr", target)["u"], truth)
    assert verify(target) == []
    used = set().union(*map(set, kinds.values()))
    if direct:  # the other sources' rows went through shared memory only when staging is on
        assert "store_stripes" in used and ("stage_cut" in used) == (staging != "0")
    assert not _staging_dirs(cluster.worker_pids().values())
    writers = set(res.trace.worker)
    if direct:  # every shard stored by a compute worker; two groups of half the window at most
        assert writers <= set(cluster.compute) and len(writers) == 2
        assert 0 < res.trace.peak_held.max() <= 8 * rows_per_shard * width * 8
    else:
        assert writers <= set(cluster.ionodes)


def test_direct_writes_by_default_on_one_host_whatever_the_size(cluster, tmp_path):
    """direct=None with every worker on this host: the stage hands each source its units in
    the plan's order, so even a stage of a few KiB per I/O node is written by the workers
    holding it (before, such a stage was sent: one source would have run a node's whole
    stream at once); direct=False still sends every byte to the I/O workers."""
    datasets, truth = _case(seed=2)
    small = write_stage(tmp_path / "s.h5", datasets, cluster=cluster, stripe_bytes=1024)
    assert set(small.trace.worker) <= set(cluster.compute)
    sent = write_stage(
        tmp_path / "m.h5", datasets, cluster=cluster, stripe_bytes=1024, direct=False
    )
    assert set(sent.trace.worker) <= set(cluster.ionodes)
    for out in ("s.h5", "m.h5"):
        assert np.array_equal(_read("hdf5", tmp_path / out)["u"], truth)
        assert verify(tmp_path / out) == []


def test_peak_rss_is_the_workers_own_not_its_parents_at_spawn():
    # a parent holding 512 MiB when the cluster starts: getrusage's ru_maxrss of each
    # spawned worker inherits that size (it survives exec); the worker's own peak is
    # far below it
    import resource

    from orchestrator.bench.write import ionode_peak_rss

    ballast = np.ones(512 << 20, dtype=np.uint8)
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert parent > 512 << 20
    with local_cluster(n_ionodes=1, n_compute=0) as cl:
        (peak,) = ionode_peak_rss(cl)
    del ballast
    assert 16 << 20 < peak < 300 << 20, peak


@pytest.mark.parametrize("fmt", ["hdf5", "hdf5-vds", "zarr"])
def test_one_io_node_writes_pieces_that_span_its_stripes(tmp_path, fmt):
    """With one I/O node every stripe is its own, so a writer's rows make one piece over
    many stripes; sent or written directly, each stripe is checksummed alone (this failed
    as 'piece at byte 0 (+16777216) crosses a stripe' in iorch run bips3d --ionodes 1)."""
    datasets, truth = _case(seed=5)
    with local_cluster(n_ionodes=1, n_compute=1) as one:
        for direct in (True, False):
            target = tmp_path / f"one-{direct}"
            res = write_stage(
                target, datasets, format=fmt, cluster=one, stripe_bytes=4096, direct=direct
            )
            assert verify(target) == [], (fmt, direct)
            assert np.array_equal(_read(fmt, target)["u"], truth)
            assert res.trace.nbytes.sum() == truth.nbytes + 3000 * 4  # u and ids
