"""A network file system on a testbed: the I/O hosts serve a folder, each compute
worker sees it through a mount whose traffic crosses its host's shaped link.

What a user's tasks read through when their checkpoint sits on remote I/O nodes
and each task opens the file itself (``h5py.File`` on an NFS or Lustre path): here
SFTP, because it needs no kernel module. Each I/O host runs ``socat``, as
``nobody``, listening on its own testbed address, starting OpenSSH's
``sftp-server`` in read-only mode for each connection (no SSH, so no cipher's CPU
in the way); each compute worker gets an ``sshfs`` mount in its own mount
namespace, made from its own network namespace (``nsenter`` into the worker's
PID), of one I/O host's export — compute host ``j`` reads from I/O host
``j mod n_io``, so the I/O hosts' links carry equal shares, as the stripes of
:func:`~orchestrator.read_stage`'s layout do. ``sshfs`` is a slow network file
system beside a kernel NFS or Lustre client (one SFTP session per host, a round
trip per read request); that is the bias to keep in mind when reading what it
measures.

**What it exposes.** ``sftp-server`` has no root folder of its own: a session
may read any file ``nobody`` may read (world-readable ones), not only the
export, and nothing more (read-only, unprivileged). It accepts connections from
the testbed's subnet only, which this machine's own processes reach through the
testbed's gateway — so while an export lasts, local processes may read, over
it, what they may already read on disk. Nothing outside this machine reaches the
subnet unless the machine routes it.

Every process is recorded in the testbed's record, so :func:`~.bed.down` stops it
like the testbed's own; a mount lives in its worker's mount namespace and goes
with it. One export at a time per testbed.

Examples
--------
>>> with up("cluster2004", n_io=2, n_compute=2) as tb, tb.connect() as cl:  # doctest: +SKIP
...     with exported(tb, cl, "out/ck") as where:
...         where[cl.compute[0]]
PosixPath('/run/iorch-testbed/3fa9c1/netfs/compute-0-2117')
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import TestbedError, TestbedUnavailable
from . import registry

__all__ = [
    "PORT",
    "SFTP_SERVER",
    "available",
    "check_exportable",
    "exported",
    "mounts",
    "sshfs_mounts",
]

#: where each I/O host's SFTP server listens (on its testbed address)
PORT = 8022
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


def available() -> str | None:
    """Why a network file system cannot be made here (None: it can): the programs it
    needs (``socat``, ``sshfs``, ``nsenter``, OpenSSH's ``sftp-server``) and
    ``/dev/fuse``.

    Examples
    --------
    >>> available() is None or "install" in available()
    True
    """
    missing = [p for p in ("socat", "sshfs", "nsenter") if shutil.which(p) is None]
    if not os.access(SFTP_SERVER, os.X_OK):
        missing.append(SFTP_SERVER)
    if missing:
        return (
            f"a testbed's network file system needs {', '.join(missing)}: install the "
            "Debian packages socat, sshfs and openssh-sftp-server"
        )
    if not os.path.exists("/dev/fuse"):
        return "a testbed's network file system needs /dev/fuse (FUSE)"
    return None


def check_exportable(folder: str | os.PathLike[str]) -> None:
    """Raise unless ``folder`` can be exported: a folder, and served as ``nobody``, so
    every folder above it must let others in and it must be readable — or every read
    would fail far from here.

    Raises
    ------
    TestbedError
        Naming the folder that stops it.

    Examples
    --------
    >>> check_exportable("/tmp")
    """
    folder = Path(folder).absolute()
    if not folder.is_dir():
        raise TestbedError(f"{folder} is not a folder to export")
    for d in [folder, *folder.parents]:
        mode = d.stat().st_mode
        if not mode & 0o001:
            raise TestbedError(
                f"{d} does not let other users in (mode {oct(mode & 0o777)}): the network "
                f"file system serves {folder} as nobody; export a folder others can reach"
            )
    if not folder.stat().st_mode & 0o004:
        raise TestbedError(f"{folder} is not readable by other users (served as nobody)")


@contextlib.contextmanager
def exported(tb: Any, cluster: Any, folder: str | os.PathLike[str]) -> Iterator[dict[str, Path]]:
    """Serve ``folder`` from every I/O host of testbed ``tb`` and mount it in every
    compute worker of ``cluster`` (its client); yield, per compute worker address, the
    path under which that worker sees the folder. On exit the mounts and servers stop.

    Raises
    ------
    TestbedUnavailable
        A program it needs is missing (:func:`available` says which).
    TestbedError
        A server or mount did not come up (its log's tail says why), or the folder is
        not readable by ``nobody``.

    Examples
    --------
    >>> with exported(tb, cl, "out/ck") as where:  # doctest: +SKIP
    ...     h5py.File(where[worker] / "ck.h5")
    """
    from .bed import _spawn  # the testbed's own way to start and record a process

    why = available()
    if why:
        raise TestbedUnavailable(why)
    folder = Path(folder).absolute()
    check_exportable(folder)
    with registry.locked():
        state = registry.load(tb.tid)
        if state is None:
            raise TestbedError(f"testbed {tb.tid} has no record: is it up?")
        if state.get("exported"):
            raise TestbedError(
                f"testbed {tb.tid} already exports {state['exported']}: one export at a time"
            )
        state["exported"] = str(folder)
        registry.save(state)
    names: list[str] = []
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    mounts = registry.state_dir() / tb.tid / "netfs"
    subnet = ipaddress.ip_interface(f"{tb.hosts[0].address}/24").network
    n_compute = max(1, len(tb.compute_hosts))
    try:
        for k, h in enumerate(tb.ionode_hosts):
            names.append(f"sftp-{k}")
            # unprivileged from the start (the port needs none), the testbed's subnet only,
            # a session per compute host at most
            listen = (
                f"TCP-LISTEN:{PORT},bind={h.address},reuseaddr,fork,"
                f"range={subnet},max-children={n_compute}"
            )
            drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
            _spawn(state, h, names[-1], [*drop, "socat", listen, f"EXEC:{SFTP_SERVER} -R"], env)
        _wait_listening(tb, state, names)
        got = cluster.client.run(os.getpid, workers=list(cluster.compute))
        where: dict[str, Path] = {}
        servers = tb.ionode_hosts
        order = {h.name: j for j, h in enumerate(tb.compute_hosts)}
        owners: dict[str, list[int]] = {}
        for w in sorted(got, key=lambda a: (order.get(tb.host_of(a).name, 0), a)):
            host = tb.host_of(w)
            server = servers[order.get(host.name, 0) % len(servers)]
            ident = registry.process_identity(got[w])
            if ident is None:
                raise TestbedError(f"worker {w} ended before its mount was made")
            point = mounts / f"{host.name}-{got[w]}"
            point.mkdir(parents=True, exist_ok=True)
            names.append(f"sshfs-{host.name}-{got[w]}")
            cmd = ["nsenter", f"--target={got[w]}", "--mount", "--net", "sshfs", "-f"]
            cmd += ["-o", f"directport={PORT},ro", f"{server.address}:{folder}", str(point)]
            # not inside the host's namespaces: nsenter enters the worker's own
            _spawn(state, None, names[-1], cmd, env)
            if not registry.alive(ident):  # its PID could be another process's by now
                raise TestbedError(f"worker {w} ended while its mount was made")
            where[w] = point
            owners[w] = ident
        _wait_mounted(where, owners, state, names)
        yield where
    finally:
        _stop(tb.tid, names)
        with registry.locked():
            state = registry.load(tb.tid)
            if state is not None:
                state.pop("exported", None)
                registry.save(state)
        for point in mounts.glob("*") if mounts.is_dir() else []:
            with contextlib.suppress(OSError):
                point.rmdir()  # empty here (each mount is a worker's), never recursed into
        with contextlib.suppress(OSError):
            mounts.rmdir()


def _until(
    pending: Callable[[], list[Any]], state: dict[str, Any], names: list[str], what: str
) -> None:
    """Poll ``pending()`` until it is empty; a process of ``names`` that ended says why,
    and after 30 s ``what`` with what is still pending is the error."""
    from .bed import _check_running

    deadline = time.monotonic() + 30.0
    while left := pending():
        _check_running({**state, "processes": {n: state["processes"][n] for n in names}})
        if time.monotonic() > deadline:
            raise TestbedError(f"{what}: {left}")
        time.sleep(0.05)


def _wait_listening(tb: Any, state: dict[str, Any], names: list[str]) -> None:
    """Until every I/O host's server accepts (a mount made before fails at once)."""
    from .netns import listening

    spaces = [h.ns for h in tb.ionode_hosts]
    _until(
        lambda: [ns for ns in spaces if not listening(ns, PORT)],
        state,
        names,
        "the file servers did not listen in",
    )


def mounts(pid: int) -> list[tuple[str, str]]:
    """``(mount point, file system type)`` of every mount process ``pid`` sees (its
    mount namespace's table, read from here: a stalled mount cannot block it).

    Examples
    --------
    >>> any(point == "/" for point, _ in mounts(os.getpid()))
    True
    """
    try:
        with open(f"/proc/{pid}/mountinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        pre, _, post = line.partition(" - ")
        out.append((pre.split()[4].replace("\\040", " "), post.split(" ", 1)[0]))
    return out


def sshfs_mounts(pid: int) -> list[str]:
    """The ``sshfs`` mount points process ``pid`` sees (:func:`mounts`).

    Examples
    --------
    >>> sshfs_mounts(os.getpid())
    []
    """
    return [point for point, kind in mounts(pid) if kind == "fuse.sshfs"]


def _wait_mounted(
    where: dict[str, Path],
    owners: dict[str, list[int]],
    state: dict[str, Any],
    names: list[str],
) -> None:
    """Until every worker sees its mount (a process that ended says why)."""

    def pending() -> list[str]:
        for w in where:
            if not registry.alive(owners[w]):
                raise TestbedError(f"worker {w} ended while its mount was made")
        return sorted(w for w, p in where.items() if str(p) not in sshfs_mounts(owners[w][0]))

    _until(pending, state, names, "the network file system did not mount on")


def _stop(tid: str, names: list[str]) -> None:
    """Stop these processes of testbed ``tid`` (by PID and start time) and forget them."""
    state = registry.load(tid)
    if state is None:  # the testbed is down: its processes went with it
        return
    registry.stop([state["processes"][n] for n in names if n in state["processes"]], grace=3.0)
    with registry.locked():
        state = registry.load(tid)
        if state is None:  # brought down meanwhile: nothing to record
            return
        for n in names:
            state["processes"].pop(n, None)
        registry.save(state)
