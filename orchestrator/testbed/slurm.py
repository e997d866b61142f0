"""Slurm across a testbed: ``slurmctld`` on the head host, one ``slurmd`` per other host.

Each node is named after its host (``io-0``, ``compute-3``) and listens only
on its host's address; ``munged`` runs in the machine's own namespace (its
socket is a file, which every namespace sees). A job's steps run inside the
namespace of the ``slurmd`` that started them, so a Dask worker started by
``srun --nodelist=io-1`` runs on host ``io-1``, with that host's link.

Names resolve per host: ``ip netns exec`` bind-mounts ``/etc/netns/<ns>/hosts``
over ``/etc/hosts``, and the testbed writes there every host's name, and the
machine's own name as this host's address, so ``socket.gethostname()`` inside
a host (what a batch step binds its scheduler to) gives the host's address.

Examples
--------
>>> from orchestrator.testbed import slurm
>>> slurm.missing() is None or "not installed" in slurm.missing()
True
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from ..errors import TestbedError, TestbedUnavailable

__all__ = ["conf_path", "hosts_files", "missing", "start"]

EXES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def missing() -> str | None:
    """What this machine lacks to run Slurm on a testbed, or None.

    Examples
    --------
    >>> missing() in (None,) or isinstance(missing(), str)
    True
    """
    for exe in EXES:
        if shutil.which(exe) is None and not Path(f"/usr/sbin/{exe}").exists():
            return f"{exe} not installed (Debian packages slurmctld slurmd slurm-client munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (Debian package munge)"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key"
    return None


def conf_path(state_dir: Path) -> Path:
    """The ``slurm.conf`` of the testbed whose record folder is ``state_dir``."""
    return state_dir / "slurm" / "slurm.conf"


def hosts_files(tid_hosts: list[Any]) -> dict[str, str]:
    """``/etc/netns/<ns>/hosts`` text of every host: every host's name and address, and
    this machine's name as the host's own address."""
    names = "\n".join(f"{h.address} {h.name}" for h in tid_hosts)
    me = socket.gethostname()
    return {h.ns: f"127.0.0.1 localhost\n{h.address} {me}\n{names}\n" for h in tid_hosts}


def _conf(root: Path, hosts: list[Any], cpus: int, mem_mb: int) -> str:
    head = hosts[0]
    nodes = [h for h in hosts[1:]]
    lines = [
        "# written by orchestrator.testbed.slurm: one node per testbed host",
        "ClusterName=iorch-testbed",
        # slurmctld checks the machine's name (the same in every namespace) against this
        f"SlurmctldHost={socket.gethostname()}({head.address})",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={root}/munge/munge.socket",
        # each daemon binds its own host's address, not every interface of its namespace
        "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "KillWait=10",
        "MinJobAge=600",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
    ]
    for h in nodes:
        lines.append(
            f"NodeName={h.name} NodeAddr={h.address} NodeHostname={h.name} CPUs={cpus} "
            f"RealMemory={mem_mb} State=UNKNOWN"
        )
    names = ",".join(h.name for h in nodes)
    lines.append(f"PartitionName=testbed Nodes={names} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def start(state: dict[str, Any], hosts: list[Any], spawn: Any, timeout: float = 60.0) -> Path:
    """Write the configuration and start munged, slurmctld and the slurmds (with
    ``spawn(state, host_or_None, name, argv, env, user, keep_sys)``); return ``slurm.conf`` once
    every node is idle."""
    why = missing()
    if why is not None:
        raise TestbedUnavailable(f"Slurm on the testbed: {why}")
    from .registry import state_dir

    root = state_dir() / state["id"] / "slurm"
    for parent in [state_dir().resolve(), *state_dir().resolve().parents]:
        if not os.stat(parent).st_mode & 0o001:
            raise TestbedError(
                f"munged runs as user munge and cannot reach its socket under {state_dir()}: "
                f"{parent} is closed to other users (chmod o+x {parent})"
            )
    for d in ("state", "spool", "log", "run", "munge", *(f"spool/{h.name}" for h in hosts[1:])):
        (root / d).mkdir(parents=True, exist_ok=True)
    munge = root / "munge"
    munge.chmod(0o755)  # munged insists its socket's folder is searchable by all
    shutil.chown(munge, "munge", "munge")
    for p in (root.parent, root):
        p.chmod(0o755)
    # every host shares the machine's CPUs: each node offers them all (overcommitted)
    cpus = os.cpu_count() or 1
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    per_node = max(256, int(0.8 * mem_mb / max(1, len(hosts) - 1)))
    conf = conf_path(root.parent)
    conf.write_text(_conf(root, hosts, cpus, per_node))
    env = dict(os.environ, SLURM_CONF=str(conf))
    spawn(
        state,
        None,
        "munged",
        [
            _exe("munged"),
            "-F",
            f"--socket={munge}/munge.socket",
            f"--pid-file={munge}/munged.pid",
            f"--log-file={munge}/munged.log",
            f"--seed-file={munge}/munged.seed",
        ],
        env,
        "munge",
    )
    _wait(lambda: (munge / "munge.socket").exists(), 10, "munged's socket", root)
    spawn(state, hosts[0], "slurmctld", [_exe("slurmctld"), "-D"], env, None, True)
    for h in hosts[1:]:
        spawn(state, h, f"slurmd-{h.name}", [_exe("slurmd"), "-D", "-N", h.name], env, None, True)
    names = [h.name for h in hosts[1:]]
    _wait(lambda: _idle(env, names), timeout, f"nodes {','.join(names)} idle in sinfo", root)
    return conf


def _idle(env: dict[str, str], names: list[str]) -> bool:
    r = subprocess.run(
        [_exe("sinfo"), "-h", "-N", "-o", "%N %T"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if r.returncode != 0:
        return False
    states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
    return all(states.get(n) == "idle" for n in names)


def _wait(ok: Any, timeout: float, what: str, root: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.3)
    tails = []
    for f in [*sorted((root / "log").glob("*")), root / "munge" / "munged.log"]:
        if not f.exists():
            continue
        tails.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-8:]))
    raise TestbedError(f"no {what} after {timeout} s\n" + "\n".join(tails))
