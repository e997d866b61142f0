"""Who may reach a cluster we start (issue 14, item 8): only holders of its own certificate.

Real clusters, real connection attempts from other processes: one without
credentials, one with another cluster's certificate, one of the same user
that finds the published credentials.
"""

import os
import socket
import stat
import subprocess
import sys

import numpy as np
import pytest

from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.cluster import connect, local_cluster
from orchestrator.engine.security import (
    credentials_dir,
    credentials_files,
    load_credentials,
    new_security,
    publish_credentials,
    withdraw_credentials,
)
from orchestrator.engine.stage import write_stage
from orchestrator.engine.verify import verify
from orchestrator.errors import ClusterError


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        yield cl


def _attempt(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_embedded_cluster_speaks_tls_and_writes_a_stage(cluster, tmp_path):
    assert cluster.address.startswith("tls://")
    assert all(a.startswith("tls://") for a in cluster.ionodes + cluster.compute)
    spec = DatasetSpec("u", (64, 3), "f8")
    cons = [
        Contribution(c, np.arange(c * 32, (c + 1) * 32), np.full((32, 3), float(c)))
        for c in range(2)
    ]
    res = write_stage(tmp_path / "a.h5", {"u": (spec, cons)}, cluster=cluster)
    assert verify(res.path) == []


def test_a_client_without_the_certificate_is_refused(cluster):
    # plain TCP to the TLS port, then TLS with a certificate of another cluster
    tcp = cluster.address.replace("tls://", "tcp://")
    plain = _attempt(f"from distributed import Client; Client({tcp!r}, timeout=5)")
    assert plain.returncode != 0
    stranger = _attempt(
        "from distributed import Client\n"
        "from orchestrator.engine.security import new_security\n"
        f"Client({cluster.address!r}, timeout=5, security=new_security())\n"
    )
    assert stranger.returncode != 0
    assert "certificate" in stranger.stderr.lower()
    # and the cluster still works for its owner
    assert cluster.client.submit(sum, [1, 2], pure=False).result() == 3


def test_connect_without_credentials_is_a_clear_refusal(cluster, tmp_path, monkeypatch):
    """connect() to a TLS cluster with no credentials published was Dask's TypeError about
    an ssl_context (hostile probe)."""
    empty = tmp_path / "creds"
    empty.mkdir(mode=0o700)
    monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(empty))
    with pytest.raises(ClusterError, match="speaks TLS and this user has no credentials"):
        connect(cluster.address)


def test_this_users_other_processes_find_the_credentials_by_address(cluster):
    # a Parsl worker contributing to a stage does exactly this
    code = (
        "from orchestrator.plugins.dask import scheduler_client\n"
        f"c = scheduler_client({cluster.address!r})\n"
        "print(c.submit(pow, 2, 10, pure=False).result())\n"
    )
    out = _attempt(code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1024"
    other = connect(address=cluster.address)
    try:
        assert other.ionodes == cluster.ionodes
    finally:
        other.close()


def test_credentials_are_private_and_removed_at_close(tmp_path, monkeypatch):
    monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(tmp_path / "creds"))
    with local_cluster(n_ionodes=1, n_compute=0) as cl:
        crt, key = credentials_files(cl.address)
        assert crt.parent == tmp_path / "creds"
        assert stat.S_IMODE(os.stat(crt.parent).st_mode) == 0o700
        for f in (crt, key):
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
        assert "PRIVATE KEY" in key.read_text()
        sec = load_credentials({"address": cl.address})  # Dask's security-loader form
        assert sec is not None and sec.require_encryption
    assert not crt.exists() and not key.exists()


def test_security_false_is_plain_tcp_and_publishes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(tmp_path / "creds"))
    with local_cluster(n_ionodes=1, n_compute=0, security=False) as cl:
        assert cl.address.startswith("tcp://")
        assert cl.security is None
        assert load_credentials(cl.address) is None
    assert not (tmp_path / "creds").exists() or not any((tmp_path / "creds").iterdir())


def test_a_credentials_folder_others_can_enter_or_a_symlink_is_refused(tmp_path, monkeypatch):
    where = tmp_path / "creds"
    monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(where))
    sec = new_security()
    publish_credentials("tls://127.0.0.1:1", sec)
    assert load_credentials("tls://127.0.0.1:1").tls_client_cert == sec.tls_client_cert
    os.chmod(where, 0o755)
    with pytest.raises(ClusterError, match="mode 755"):
        load_credentials("tls://127.0.0.1:1")
    with pytest.raises(ClusterError, match="mode 755"):
        publish_credentials("tls://127.0.0.1:2", sec)
    os.chmod(where, 0o700)
    withdraw_credentials("tls://127.0.0.1:1")
    assert load_credentials("tls://127.0.0.1:1") is None
    # a symlink planted where the folder should be
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(link))
    with pytest.raises(ClusterError, match="symlink"):
        publish_credentials("tls://127.0.0.1:3", sec)
    assert not any(real.iterdir())
    if os.getuid() == 0:  # only root can give the folder away
        os.chown(where, 12345, -1)
        monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(where))
        with pytest.raises(ClusterError, match="uid 12345"):
            publish_credentials("tls://127.0.0.1:4", sec)


def test_a_planted_credentials_file_is_replaced_not_followed(tmp_path, monkeypatch):
    where = tmp_path / "creds"
    monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(where))
    credentials_dir(create=True)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    crt, _ = credentials_files("tls://127.0.0.1:5")
    crt.symlink_to(victim)
    publish_credentials("tls://127.0.0.1:5", new_security())
    assert victim.read_text() == "keep"
    assert not crt.is_symlink() and "CERTIFICATE" in crt.read_text()


def test_a_home_where_nothing_can_be_written_leaves_the_cluster_usable_here(
    tmp_path, monkeypatch, caplog
):
    # a container or batch job without a usable home: this process holds the
    # certificate, so its stages still run; other processes cannot join, and the
    # warning says so
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.delenv("IORCH_CREDENTIALS_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(blocker / "home"))
    with pytest.raises(ClusterError, match="IORCH_CREDENTIALS_DIR"):
        publish_credentials("tls://10.0.0.5:1", new_security())
    assert load_credentials("tls://10.0.0.5:1") is None
    with caplog.at_level("WARNING", logger="orchestrator.engine.cluster"):
        with local_cluster(n_ionodes=1, n_compute=0) as cl:
            assert cl.address.startswith("tls://")
            assert cl.client.submit(pow, 3, 2, pure=False).result() == 9
    assert "only this process can use the cluster" in caplog.text


def test_two_hosts_sharing_a_home_never_share_a_loopback_name(tmp_path, monkeypatch):
    monkeypatch.setenv("IORCH_CREDENTIALS_DIR", str(tmp_path / "creds"))
    crt, _ = credentials_files("tls://127.0.0.1:40123")
    assert socket.gethostname() in crt.name
    mine, theirs = new_security(), new_security()
    publish_credentials("tls://10.0.0.5:7", mine)
    publish_credentials("tls://10.0.0.5:7", theirs)  # another cluster took the name since
    withdraw_credentials("tls://10.0.0.5:7", mine)  # closing the first must not remove it
    assert load_credentials("tls://10.0.0.5:7").tls_client_cert == theirs.tls_client_cert
    withdraw_credentials("tls://10.0.0.5:7", theirs)
    assert load_credentials("tls://10.0.0.5:7") is None
