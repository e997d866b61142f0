"""A testbed's network file system for real: the I/O hosts serve a folder over SFTP,
each compute worker reads it through its own mount, from its own network namespace;
nothing of it outlives the context or the testbed. And the restart benchmark on it.

Skips where this machine cannot build a testbed or lacks the programs
(``.ci/setup-netfs`` installs them); fails instead on CI (``IORCH_REQUIRE_TESTBED=1``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from orchestrator import errors, testbed
from orchestrator.testbed import netfs, netns, registry

REQUIRE_ENV = "IORCH_REQUIRE_TESTBED"
WHY = testbed.available() or netfs.available()

pytestmark = pytest.mark.skipif(
    WHY is not None and os.environ.get(REQUIRE_ENV) != "1", reason=str(WHY)
)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder others may read (served as nobody; pytest's own tmp folders are 0700)."""
    if WHY is not None:
        pytest.fail(f"{REQUIRE_ENV}=1 but {WHY}")
    d = Path(tempfile.mkdtemp(prefix="iorch-netfs-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _write(path: str) -> str:
    try:
        with open(path, "wb") as fh:
            fh.write(b"x")
    except OSError as err:
        return type(err).__name__
    return "written"


def _net_ns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def test_each_compute_worker_reads_the_export_through_its_own_mount(shared: Path) -> None:
    data = np.random.default_rng(1).bytes(3 << 20)
    (shared / "ck.bin").write_bytes(data)
    with testbed.up("cluster2004", n_io=2, n_compute=2) as tb, tb.connect() as cl:
        with netfs.exported(tb, cl, shared) as where:
            assert set(where) == set(cl.compute)
            pids = cl.client.run(os.getpid, workers=list(cl.compute))
            for w, point in where.items():
                # the worker's mount, not this namespace's: the folder is empty here
                assert not os.path.ismount(point) and not any(point.iterdir())
                assert netfs.sshfs_mounts(pids[w]) == [str(point)]
                assert netfs.sshfs_mounts(os.getpid()) == []
                got = cl.client.submit(_read, str(point / "ck.bin"), workers=[w]).result()
                assert got == data
                # served read-only
                wrote = cl.client.submit(_write, str(point / "new"), workers=[w]).result()
                assert wrote != "written" and not (shared / "new").exists()
            state = registry.load(tb.tid)
            assert state is not None
            mounts = {n: i for n, i in state["processes"].items() if n.startswith("sshfs-")}
            servers = {n: i for n, i in state["processes"].items() if n.startswith("sftp-")}
            assert len(mounts) == 2 and len(servers) == 2
            # one export at a time
            with pytest.raises(errors.TestbedError, match="already exports"):
                with netfs.exported(tb, cl, shared):
                    pass
            # each mount's traffic leaves from its worker's host: its network namespace
            assert {_net_ns(i[0]) for i in mounts.values()} == {_net_ns(p) for p in pids.values()}
            # the servers' sessions run as nobody, on the I/O hosts
            sessions = [
                p
                for h in tb.ionode_hosts
                for p in netns.ns_pids(h.ns)
                if Path(f"/proc/{p}/comm").read_text().strip() == "sftp-server"
            ]
            assert len(sessions) == 2
            nobody = pwd.getpwnam("nobody").pw_uid
            assert all(os.stat(f"/proc/{p}").st_uid == nobody for p in sessions)
        # gone with the context: the processes, the mounts, their folders
        assert not any(registry.alive(i) for i in [*mounts.values(), *servers.values()])
        state = registry.load(tb.tid)
        assert state is not None and not any(n.startswith("sshfs-") for n in state["processes"])
        assert not (registry.state_dir() / tb.tid / "netfs").exists()
        assert all(netfs.sshfs_mounts(p) == [] for p in pids.values())  # the workers live on
        assert all(registry.process_identity(p) for p in pids.values())
        left = [p for h in tb.ionode_hosts for p in netns.ns_pids(h.ns)]
        assert not [p for p in left if Path(f"/proc/{p}/comm").read_text().strip() == "sftp-server"]
        assert "exported" not in state
        # and a new export after it works
        with netfs.exported(tb, cl, shared) as again:
            w = next(iter(again))
            assert cl.client.submit(_read, str(again[w] / "ck.bin"), workers=[w]).result() == data


def test_an_export_others_cannot_read_is_refused_by_name(shared: Path) -> None:
    private = shared / "private"
    private.mkdir(mode=0o700)
    with testbed.up("cluster2004", n_io=1, n_compute=1) as tb, tb.connect() as cl:
        with pytest.raises(errors.TestbedError, match=f"{private} does not let other users in"):
            with netfs.exported(tb, cl, private):
                pass
        with pytest.raises(errors.TestbedError, match="is not a folder"):
            with netfs.exported(tb, cl, shared / "none"):
                pass
        state = registry.load(tb.tid)
        assert state is not None and not any("sftp" in n for n in state["processes"])


def test_a_testbed_brought_down_under_an_export_takes_it_along(shared: Path) -> None:
    (shared / "a").write_bytes(b"abc")
    tb = testbed.up("cluster2004", n_io=1, n_compute=1)
    try:
        cl = tb.connect()
        with netfs.exported(tb, cl, shared):
            state = registry.load(tb.tid)
            assert state is not None
            ours = [i for n, i in state["processes"].items() if n.startswith(("sshfs", "sftp"))]
            tb.down()  # the context's exit then finds nothing left to stop
        with contextlib.suppress(Exception):  # its scheduler is gone
            cl.close()
        assert len(ours) == 2 and not any(registry.alive(i) for i in ours)
        assert registry.load(tb.tid) is None
    finally:
        if registry.load(tb.tid) is not None:
            tb.down()


def test_the_restart_benchmark_on_a_testbed_reads_through_the_network(shared: Path) -> None:
    """h5py's tasks open the checkpoint through their mounts, read_stage through the
    remote I/O workers; every contender's rows are checked against h5py's."""
    from orchestrator.bench.restart import run

    out = run(shared, gib=0.005, tasks=4, repeat=1, testbed="cluster2004", layout="mesh")
    assert set(out["median"]) == {"h5py", "h5py + CRC-32 of its rows", "read_stage"}
    assert out["testbed"]["profile"] == "cluster2004"
    assert "sshfs" in out["testbed"]["network_fs"]
    # what h5py's tasks opened lies on the network file system, as their workers see it
    assert out["h5py_file_system"] == ["fuse.sshfs"]
    assert {"scheduler", "file system"} <= set(out["cpu"]["h5py"])
    assert json.dumps(out)  # the results file is JSON
    assert registry.load(out["testbed"]["id"]) is None  # brought down, nothing left
