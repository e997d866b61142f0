"""A real single-node Slurm for the tests: munged, slurmctld and slurmd on 127.0.0.1.

Everything lives in one temporary folder (configuration, state, spool,
logs, the munge socket); the daemons run in the foreground as children of
the test process and are stopped by PID. The Debian packages come from
``.ci/setup-slurm`` (run by ``make test``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REQUIRE_ENV = "IORCH_REQUIRE_SLURM"


class SlurmUnavailable(RuntimeError):
    """This machine cannot run a local Slurm (the reason is the message)."""


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (held open together, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def listening(pid: int) -> list[str]:
    """Local addresses of the TCP sockets process ``pid`` listens on (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # state LISTEN
                addr, port = f[1].split(":")
                if table == "tcp":
                    ip = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
                elif addr == "00000000000000000000000001000000":
                    ip = "::1"
                else:
                    ip = f"[{addr}]"
                out.append(f"{ip}:{int(port, 16)}")
    return out


def unavailable_reason() -> str | None:
    """Why a local Slurm cannot be started here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "not root: slurmd must run as root"
    # the same packages, user and key as Slurm across a testbed needs
    from orchestrator.testbed.slurm import missing

    why = missing()
    if why is not None:
        return f"{why} (make test installs it with .ci/setup-slurm)"
    # NoInAddrAny binds the daemons to what this host's name resolves to
    try:
        me = socket.gethostbyname(socket.gethostname())
    except OSError as e:
        return f"this host's name does not resolve ({e})"
    if not me.startswith("127."):
        return f"this host's name resolves to {me}, not loopback: the daemons would listen there"
    return None


class LocalSlurm:
    """Start with :meth:`start`, stop with :meth:`stop`; ``env`` is what commands need."""

    def __init__(self, root: Path, partition: str = "debug") -> None:
        self.root = root
        self.partition = partition
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def _exe(self, name: str) -> str:
        return shutil.which(name) or f"/usr/sbin/{name}"

    def _write_conf(self) -> None:
        r = self.root
        for d in ("state", "spool", "log", "run"):
            (r / d).mkdir(parents=True, exist_ok=True)
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        ports = _free_ports(2)
        cpus = os.cpu_count() or 1
        self.conf.write_text(
            f"""# written by tests/localslurm.py
ClusterName=iorch-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.socket
# bind every daemon and srun to the resolved address (127.0.0.1), not to all interfaces
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=10
MinJobAge=600
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={int(mem_mb * 0.8)} State=UNKNOWN
PartitionName={self.partition} Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""
        )

    def start(self, timeout: float = 60.0) -> None:
        """Start munged, slurmctld and slurmd; return when the node is idle."""
        reason = unavailable_reason()
        if reason:
            raise SlurmUnavailable(reason)
        self._write_conf()
        mdir = self.root / "munge"
        mdir.mkdir(exist_ok=True)
        mdir.chmod(0o755)  # munged insists the socket's folder is searchable by all
        shutil.chown(mdir, "munge", "munge")
        logs = self.root / "log"
        self._spawn(
            "munged",
            [
                self._exe("munged"),
                "-F",
                f"--socket={mdir}/munge.socket",
                f"--pid-file={mdir}/munged.pid",
                f"--log-file={mdir}/munged.log",
                f"--seed-file={mdir}/munged.seed",
            ],
            logs / "munged.out",
            user="munge",
        )
        self._wait(lambda: (mdir / "munge.socket").exists(), 10, "munged socket")
        self._spawn("slurmctld", [self._exe("slurmctld"), "-D"], logs / "slurmctld.out")
        self._spawn("slurmd", [self._exe("slurmd"), "-D", "-N", "localhost"], logs / "slurmd.out")
        self._wait(self._idle, timeout, "node localhost idle in sinfo")
        for name, p in self.procs.items():
            wide = [a for a in listening(p.pid) if not a.startswith(("127.", "::1:"))]
            if wide:
                raise SlurmUnavailable(f"{name} listens beyond loopback: {wide}")

    def _spawn(self, name: str, argv: list[str], log: Path, user: str | None = None) -> None:
        with open(log, "wb") as out:
            self.procs[name] = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                user=user,
                group=user,
                start_new_session=True,
            )

    def _wait(self, ok, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited ({p.returncode}): {self.logs()}")
            if ok():
                return
            time.sleep(0.3)
        raise SlurmUnavailable(f"no {what} after {timeout} s: {self.logs()}")

    def _idle(self) -> bool:
        r = self.run(["sinfo", "-h", "-o", "%T", "-n", "localhost"], check=False)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def run(self, argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
        """Run a Slurm command against this cluster."""
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, check=check, timeout=60, **kw
        )

    def logs(self, tail: int = 20) -> str:
        """The last lines of every daemon's log, for failure messages."""
        parts = []
        for f in sorted((self.root / "log").glob("*")):
            lines = f.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def job_pids(self) -> list[int]:
        """PIDs of processes that carry this cluster's SLURM_CONF (jobs, steps, srun)."""
        mine = f"SLURM_CONF={self.conf}".encode()
        own = {p.pid for p in self.procs.values()} | {os.getpid()}
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) in own:
                continue
            try:
                env = (d / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine not in env:
                continue
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            ctld = self.procs.get("slurmctld")
            if ctld is not None and ppid == ctld.pid:
                continue  # slurmctld's own helper (slurmscriptd), not a job
            pids.append(int(d.name))
        return pids

    def stop(self) -> None:
        """Cancel every job, stop the daemons by PID, kill leftovers of jobs."""
        try:
            if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
                self.run(["scancel", "--full", "--user", "root"], check=False)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    q = self.run(["squeue", "-h", "-o", "%i"], check=False)
                    if q.returncode != 0 or not q.stdout.strip():
                        break
                    time.sleep(0.3)
        except (subprocess.TimeoutExpired, OSError):
            pass  # the daemons go below all the same
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is None:
                continue
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for pid in self.job_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> LocalSlurm:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
