"""The testbed for real: namespaces, shaped links, Dask on the hosts, nothing left behind.

Tests that build a testbed skip where this machine cannot (not root, no
``ip``) and fail instead on CI (``IORCH_REQUIRE_TESTBED=1``, set by ``.ci/run``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from orchestrator import errors, testbed
from orchestrator.errors import InputError
from orchestrator.testbed import netns, registry

REQUIRE_ENV = "IORCH_REQUIRE_TESTBED"
WHY = testbed.available()


def _needs_testbed() -> None:
    if WHY is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {WHY}")
        pytest.skip(WHY)


def _leftovers(tid: str) -> list[str]:
    """Everything of testbed ``tid`` still on the machine."""
    left = [n for n in netns.list_ns() if n.startswith(netns.ns_name(tid, ""))]
    left += [n for n in netns.list_links() if n == netns.gateway_name(tid)]
    if (registry.state_dir() / tid).exists():
        left.append(str(registry.state_dir() / tid))
    return left


def _state(tid: str) -> str | None:
    """The state ``testbed.status()`` gives testbed ``tid`` (None: not recorded)."""
    return next((r["state"] for r in testbed.status() if r["id"] == tid), None)


@pytest.fixture
def state_dir() -> Path:
    """The machine's record folder (one for every process: see ``registry.STATE_DIR``)."""
    return registry.state_dir()


# --- profiles (no root needed) -------------------------------------------------------


def test_profiles_keep_the_papers_ratios() -> None:
    p = testbed.get_profile("cluster2004")
    # Myrinet 1.28 Gbit/s over an IDE disk of 32.96 Mbit/s, whatever the scale
    assert p.io.rate / p.disk == pytest.approx(1.28e9 / 32.96e6)
    assert p.cost_model().disk_bandwidth == pytest.approx(p.disk)
    m = testbed.get_profile("modern")
    assert m.n_compute / m.n_io >= 8  # few I/O nodes relative to clients
    assert p.io_ingress == p.disk and m.io_ingress == m.disk


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"n_io": 0}, "n_io"), ({"n_compute": 1.5}, "n_compute"), ({"n_io": 300}, "250")],
)
def test_bad_sizes_are_refused(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InputError, match=field):
        testbed.get_profile("modern").sized(**kw)  # type: ignore[arg-type]


def test_unknown_profile_is_named() -> None:
    with pytest.raises(InputError, match="'cluster1999'"):
        testbed.get_profile("cluster1999")
    with pytest.raises(InputError, match="rate"):
        testbed.Link(float("nan"))


def test_not_root_is_a_clear_refusal(tmp_path: Path) -> None:
    """As another user the reason is given, not a traceback of ``ip``."""
    if os.geteuid() != 0:
        assert WHY is not None and "root" in WHY
        return
    code = (
        "from orchestrator import testbed\n"
        "try:\n    testbed.up('modern')\n"
        "except testbed.bed.TestbedError as e:\n    print(type(e).__name__, e)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=120,
    )
    assert "TestbedUnavailable" in r.stdout and "root" in r.stdout, r.stdout + r.stderr


# --- a testbed for real ----------------------------------------------------------------


def test_up_connect_and_nothing_left(state_dir: Path) -> None:
    _needs_testbed()
    tb = testbed.up("cluster2004", n_io=2, n_compute=3)
    procs = registry.load(tb.tid)["processes"]  # type: ignore[index]
    creds = registry.load(tb.tid)["credentials"]  # type: ignore[index]
    try:
        assert [h.name for h in tb.hosts] == [
            "head",
            "io-0",
            "io-1",
            "compute-0",
            "compute-1",
            "compute-2",
        ]
        assert len({h.address for h in tb.hosts}) == 6
        with tb.connect() as cl:
            assert cl.n_ionodes == 2 and len(cl.compute) == 3
            # every I/O worker runs on its own I/O host, every compute worker on a compute host
            assert [tb.host_of(a).name for a in cl.ionodes] == ["io-0", "io-1"]
            assert sorted(tb.host_of(a).role for a in cl.compute) == ["compute"] * 3
            # a worker's own view: inside its namespace, its only address is its host's
            seen = cl.client.run(lambda: Path("/proc/self/net/fib_trie").read_text())
            for addr, trie in seen.items():
                assert tb.host_of(addr).address in trie
                assert "10.213." in trie
        assert _state(tb.tid) == "owned"
    finally:
        tb.down()
    assert _leftovers(tb.tid) == []
    assert not any(registry.alive(i) for i in procs.values())
    assert not any(Path(f).exists() for f in creds)
    assert not (state_dir / tb.tid).exists()


def test_links_are_shaped(state_dir: Path) -> None:
    """An I/O host takes data no faster than its disk's rate (a cap: noise only slows)."""
    _needs_testbed()
    with testbed.up("cluster2004", n_io=1, n_compute=2) as tb, tb.connect() as cl:
        c = cl.client
        nbytes = 3 << 20
        blob = c.submit(np.ones, nbytes, np.uint8, workers=[cl.compute[0]], pure=False)
        blob.result()

        def moved(target: str) -> float:
            t = time.perf_counter()
            c.submit(len, blob, workers=[target], pure=False).result()
            return nbytes / (time.perf_counter() - t)

        to_io, to_compute = moved(cl.ionodes[0]), moved(cl.compute[1])
        assert to_io <= 1.15 * tb.profile.io_ingress
        assert to_compute > to_io  # compute links are the fast ones in this profile


def test_failed_up_leaves_nothing(state_dir: Path) -> None:
    _needs_testbed()
    before = set(netns.list_ns())
    before_ids = {d.name for d in state_dir.glob("*")}
    # a worker that cannot start: its own error, from its log, names it
    with pytest.raises(
        errors.TestbedError, match=r"(?s)(io-0|compute-0) of testbed .* ended: .*no-such"
    ):
        testbed.up("modern", n_io=1, n_compute=1, worker_args=["--no-such-option"])
    assert set(netns.list_ns()) == before
    assert not netns.list_links() or all(
        registry.load(n[len("iorch") :]) for n in netns.list_links()
    )
    assert not [d for d in state_dir.glob("*") if d.name not in before_ids]


def test_sigkill_of_the_driver_is_swept_by_the_next_up(state_dir: Path) -> None:
    _needs_testbed()
    code = (
        "import sys, time\nfrom orchestrator import testbed\n"
        "tb = testbed.up('modern', n_io=1, n_compute=1)\n"
        "print(tb.tid, flush=True)\ntime.sleep(600)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout is not None
        tid = p.stdout.readline().strip()
        assert tid, "the driver did not bring its testbed up"
        procs = registry.load(tid)["processes"]  # type: ignore[index]
        creds = registry.load(tid)["credentials"]  # type: ignore[index]
        assert all(registry.alive(i) for i in procs.values())
        assert creds and all(Path(f).exists() for f in creds)
        old_key = Path(creds[1]).read_bytes()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()  # type: ignore[union-attr]
    assert _state(tid) == "stale"
    assert _leftovers(tid)  # still there: nobody removed it yet
    with testbed.up("modern", n_io=1, n_compute=1) as tb:
        assert _leftovers(tid) == []
        assert not any(registry.alive(i) for i in procs.values())
        # its private key went too (the new testbed may reuse the subnet, and so the
        # address and file name, with a key of its own)
        assert not Path(creds[1]).exists() or Path(creds[1]).read_bytes() != old_key
        ids = [r["id"] for r in testbed.status()]
        assert tb.tid in ids and tid not in ids
    assert _leftovers(tb.tid) == []
    assert not any(Path(f).exists() for f in creds)


def test_cli_up_status_run_down(state_dir: Path) -> None:
    _needs_testbed()
    iorch = [sys.executable, "-m", "orchestrator.cli"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*iorch, *args], capture_output=True, text=True, env=env, timeout=300)

    r = run("testbed", "up", "--profile", "modern", "--io", "1", "--compute", "1")
    assert r.returncode == 0, r.stderr
    address = r.stdout.strip()
    assert address.startswith("tls://10.213.")
    tid = r.stderr.split("testbed ", 1)[1].split(":", 1)[0]
    # detached: it outlives the command that made it, and the next up does not sweep it
    assert _state(tid) == "detached"
    r = run(
        "testbed",
        "run",
        "--io",
        "1",
        "--compute",
        "1",
        "--",
        "sh",
        "-c",
        'echo "$IORCH_SCHEDULER"; exit 3',
    )
    assert r.returncode == 3 and r.stdout.strip().startswith("tls://10.213."), r.stderr
    assert r.stdout.strip() != address
    assert _state(tid) == "detached" and len([x for x in testbed.status() if x["id"] == tid]) == 1
    r = run("testbed", "status")
    assert tid in r.stdout and "detached" in r.stdout
    # only this test's testbed: another run's may be up on this machine
    r = run("testbed", "down", tid)
    assert r.returncode == 0 and f"removed 1 testbed(s): {tid}" in r.stderr
    assert _state(tid) is None and _leftovers(tid) == []


def test_a_sweep_point_runs_for_real(state_dir: Path, tmp_path: Path) -> None:
    """One point of the busy sweep: the engine writes it with a policy and the unordered
    baseline writes the same rows (both checked), and the calibration predicts it."""
    from orchestrator.bench import testbed as tbb

    _needs_testbed()
    sweep = tbb.paper_sweeps(quick=True)[1]
    with testbed.up("cluster2004", n_io=2, n_compute=3) as tb, tb.connect() as cl:
        cal = tbb.Calibration(0.0, tb.profile.io_ingress, 0.0, {})
        small = tbb.TestbedSweep(
            "busy", "RB", "busy_ratio", (0.5,), {**sweep.fixed, "n_ionodes": 2}
        )
        rows = tbb.sweep_rows(cl, small, small.xs, ["ecf"], cal, tmp_path, repeat=1)
    by = {r["policy"]: r for r in rows}
    assert set(by) == {"unordered", "unordered-shared", "ecf"}
    assert by["ecf"]["n_ionodes"] == 2 and by["ecf"]["n_clients"] == 3
    assert {r["seed"] for r in rows} == {0}
    # the simulator predicts the FCFS baseline too (its one-port I/O nodes are that one's)
    assert by["unordered"]["simulated"] > 0 and "simulated" not in by["unordered-shared"]
    for r in rows:
        assert r["realized"] > 0
    # the I/O nodes take no more than their disks' rate: no plan beats the bound
    assert by["ecf"]["realized"] >= 0.8 * by["ecf"]["lower_bound"]
    assert not list(tmp_path.glob("tb-*"))


def test_clusterfile_heuristics_push_for_real(state_dir: Path, tmp_path: Path) -> None:
    """Clients push their blocks in each heuristic's order to FCFS I/O workers (every byte
    checked where it landed); the simulator's account of the same sends is beside it."""
    from orchestrator.bench import clusterfile as cf
    from orchestrator.bench import testbed as tbb

    _needs_testbed()
    with testbed.up("cluster2004", n_io=2, n_compute=2) as tb, tb.connect() as cl:
        from orchestrator.bench.push import push_overhead

        push_unit = push_overhead(cl, tmp_path, repeats=1)
        cal = tbb.Calibration(0.0, tb.profile.io_ingress, 0.0, {}, push_unit=push_unit)
        rows = cf.clusterfile_rows(cl, tmp_path, cal, blocks=(32 << 10,), per_client=256 << 10,
                                   repeat=1)  # fmt: skip
        trace: list[tuple[int, int, int, float, float]] = []
        stg = cf.contiguous_stage(2, 2, 1 << 20, 1024, 64 << 10)
        parts = tbb.place(cl, stg)
        sends = cf.piece_sends(stg, 512 << 10, "first")
        from orchestrator.bench.push import push_seconds

        push_seconds(cl, stg, parts, tmp_path, sends, trace=trace)
    by = {r["heuristic"]: r for r in rows}
    assert set(by) == {"first", "random", "hash", "ecf (engine)"}
    for h in cf.HEURISTICS:
        assert by[h]["pieces"] == 2 * 256 // 32 and by[h]["realized"] > 0
        # simulated: the same blocks served FCFS under the pushes' calibration
        stg8 = cf.contiguous_stage(2, 2, 256 << 10, 1024, 64 << 10)
        sends8 = cf.piece_sends(stg8, 32 << 10, h, seed=0)
        want = cal.pushes().predict(cf.pieces_plan(stg8, sends8, cal.pushes().model))
        assert by[h]["simulated"] == pytest.approx(want)
    # a pushed piece pays its own round trips through Dask: 16 pieces cost more than one
    assert push_unit > 0
    # first-IOS with whole per-node blocks: both clients start at I/O node 0, so one waits
    # there for the other (FCFS): its first send ends after the other's
    firsts = sorted((e, c) for c, s, _, _, e in trace if s == 0)
    assert len(trace) == 4 and {c for _, c in firsts} == {0, 1}
    starts = {c: min(a for cc, _, _, a, _ in trace if cc == c) for c in (0, 1)}
    assert max(starts.values()) < 0.5 * firsts[0][0]  # both asked at once
    # served one after the other: the second waits at least most of the first's bytes
    assert firsts[1][0] - firsts[0][0] > 0.6 * (512 << 10) / tb.profile.io_ingress
    assert not list(tmp_path.glob("tb-*"))


def test_slurm_across_hosts_places_io_workers_on_io_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """One slurmd per host: ``iorch slurm submit`` runs the dump across the testbed's
    nodes, its I/O workers on the I/O hosts and its compute workers on the others."""
    import json
    import re
    import shutil

    from orchestrator.testbed import slurm as tbslurm

    _needs_testbed()
    why = tbslurm.missing()
    if why is not None:
        if os.environ.get("IORCH_REQUIRE_SLURM") == "1":
            pytest.fail(f"IORCH_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)
    work = Path(tempfile.mkdtemp(prefix="iorch-tb-slurm-"))
    work.chmod(0o755)
    try:
        with testbed.up("cluster2004", n_io=2, n_compute=2, dask=False, slurm=True) as tb:
            env = dict(os.environ, SLURM_CONF=str(tb.slurm_conf))
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
            env["PYTHONPATH"] = os.pathsep.join(sys.path)
            iorch = [sys.executable, "-m", "orchestrator.cli"]
            out = work / "dump"
            args = ["slurm", "submit", "bips3d", "--nodes", "4", "--io-nodes", "io-[0-1]"]
            args += ["--ionodes", "2", "--partition", "testbed", "--time", "10", "--"]
            args += ["--nodes", "4000", "--parts", "4", "--load", "10", "--repeat", "1"]
            args += ["--assign", "metis,idg", "--out", str(out)]
            r = subprocess.run(
                [*iorch, *args], capture_output=True, text=True, env=env, cwd=work, timeout=300
            )
            assert r.returncode == 0, r.stderr
            job = r.stdout.strip()
            st_ = subprocess.run(
                [*iorch, "slurm", "status", job, "--wait"],
                capture_output=True,
                text=True,
                env=env,
                cwd=work,
                timeout=600,
            )
            log = (work / f"iorch-bips3d-{job}.out").read_text()
            assert st_.returncode == 0, f"{st_.stdout}\n{log}"
            said = " ".join(log.split())  # the console wraps long lines
            line = said[said.index("I/O workers io-0 at") :]
            io = re.findall(r"io-\d+ at (tls://[\d.]+:\d+)", line.split(";")[0])
            compute = re.findall(r"tls://[\d.]+:\d+", line.split("compute workers at")[1])
            assert [tb.host_of(a).name for a in io] == ["io-0", "io-1"]
            assert sorted(tb.host_of(a).name for a in compute) == ["compute-0", "compute-1"]
            rows = json.loads((out / "results.json").read_text())
            assert [x["method"] for x in rows] == ["metis", "idg"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert _leftovers(tb.tid) == []


def test_the_sweep_removes_only_what_a_testbed_names(state_dir: Path) -> None:
    """Namespaces and links whose names a testbed never makes are not the sweep's."""
    _needs_testbed()
    mine = ["iorch-dev", "iorch-abc-h1", "iorch-0a0b0c-extra"]
    for ns in mine:
        subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        testbed.sweep()
        assert set(mine) <= set(netns.list_ns())
    finally:
        for ns in mine:
            subprocess.run(["ip", "netns", "del", ns], check=False)


def test_cli_down_needs_an_id_or_all() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "testbed", "down"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        timeout=120,
    )
    assert r.returncode == 2 and "--all" in r.stderr and "Traceback" not in r.stderr
