"""A testbed: hosts in network namespaces, a Dask scheduler and one worker on each.

Host 0 (``head``) runs the scheduler; hosts 1..n_io run the I/O workers
(``io-K``, resources ``io=1, io-K=1``); the others run compute workers
(``compute-K``). Each worker is a plain ``dask worker`` process (no nanny:
half the processes on 2 cores) listening only on its host's address, so
:func:`orchestrator.engine.cluster.connect` finds the I/O nodes as on a
real cluster. The driver (this process) reaches the bridge through an
unshaped gateway, as a login node would; connections are TLS with a
certificate made for the testbed alone — the gateway makes the hosts
reachable from the machine's root namespace, and a Dask worker runs the
code it is sent.

Examples
--------
>>> from orchestrator import testbed
>>> with testbed.up("cluster2004", n_io=2, n_compute=4) as tb:  # doctest: +SKIP
...     with tb.connect() as cl:
...         cl.n_ionodes
2
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.cluster import IOCluster, connect, ionode_name, ionode_resources
from ..errors import TestbedError
from . import netns, registry
from . import slurm as tbslurm
from .profiles import Profile, get_profile

__all__ = ["Host", "Testbed", "attach", "down", "status", "up"]

#: the subnets testbeds take: 10.213.<slot>.0/24, one per live testbed
BASE = ipaddress.ip_network("10.213.0.0/16")
PORT = 8786
#: the processes this process started, by testbed: waited for once stopped (a Popen never
#: waited for warns "still running" when collected)
_CHILDREN: dict[str, list[subprocess.Popen[bytes]]] = {}


@dataclass(frozen=True)
class Host:
    """One emulated machine: its name, role (``head``, ``io``, ``compute``) and address."""

    name: str
    role: str
    ns: str
    address: str


@dataclass
class Testbed:
    """A running testbed (see :func:`up`); use as a context manager to remove it on exit."""

    __test__ = False  # not a pytest class, whatever its name

    tid: str
    profile: Profile
    hosts: list[Host]
    scheduler_address: str
    delay_applied: bool
    #: the ``SLURM_CONF`` of the testbed's Slurm (None: started without)
    slurm_conf: Path | None = None
    _owner: bool = field(default=True, repr=False)

    @property
    def ionode_hosts(self) -> list[Host]:
        """The I/O hosts, I/O node 0 first."""
        return [h for h in self.hosts if h.role == "io"]

    @property
    def compute_hosts(self) -> list[Host]:
        """The compute hosts."""
        return [h for h in self.hosts if h.role == "compute"]

    def connect(self) -> IOCluster:
        """A client of this testbed's cluster, its I/O workers found by name.

        Examples
        --------
        >>> tb.connect().n_ionodes  # doctest: +SKIP
        4
        """
        return connect(self.scheduler_address)

    def host_of(self, address: str) -> Host:
        """The host a worker address (``tls://10.213.0.3:40211``) belongs to.

        Examples
        --------
        >>> tb.host_of(cl.ionodes[0]).role  # doctest: +SKIP
        'io'
        """
        ip = address.split("://")[-1].rsplit(":", 1)[0]
        for h in self.hosts:
            if h.address == ip:
                return h
        raise TestbedError(f"no host of testbed {self.tid} has address {ip!r}")

    def down(self) -> None:
        """Stop every process and remove every namespace, link and file of this testbed."""
        down(self.tid)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owner:
            self.down()


def _subnet(slot: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network((int(BASE.network_address) + (slot << 8), 24))


def _free_slot() -> int:
    taken = {st.get("slot") for st in registry.records()}
    used = netns.used_networks()
    for slot in range(256):
        net = _subnet(slot)
        if slot not in taken and not any(net.overlaps(u) for u in used):
            return slot
    raise TestbedError(f"no free /24 left in {BASE} for another testbed")


def _hosts(tid: str, profile: Profile, net: ipaddress.IPv4Network) -> list[Host]:
    roles = ["head"] + ["io"] * profile.n_io + ["compute"] * profile.n_compute
    hosts, n = [], {"head": 0, "io": 0, "compute": 0}
    for k, role in enumerate(roles):
        name = "head" if role == "head" else f"{role}-{n[role]}"
        n[role] += 1
        hosts.append(Host(name, role, netns.ns_name(tid, f"h{k}"), str(net[k + 1])))
    return hosts


def _links(
    profile: Profile, role: str
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(upload, download) of a host: an I/O host's download is capped at its disk's rate."""
    link = profile.io if role == "io" else profile.compute
    up_ = (link.rate, link.latency, link.jitter)
    down_ = (profile.io_ingress if role == "io" else link.rate, link.latency, link.jitter)
    return up_, down_


def _spawn(
    state: dict[str, Any],
    host: Host | None,
    name: str,
    cmd: list[str],
    env: dict[str, str],
    user: str | None = None,
    keep_sys: bool = False,
) -> None:
    """Start ``cmd`` inside ``host`` (None: this machine's namespace) as ``user``, logging
    to the record's folder, and record it (PID and start time) before anything else."""
    logs = registry.state_dir() / state["id"] / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if host is None:
        argv = cmd
    elif keep_sys:
        # ip netns exec mounts a sysfs of the namespace on /sys, hiding /sys/fs/cgroup,
        # without which slurmd does not start: enter the network namespace alone, in a
        # private mount namespace that puts the host's names on /etc/hosts (the same PID
        # throughout: unshare, sh and nsenter each exec the next)
        script = (
            'mount --bind "$1" /etc/hosts && n=$2 && shift 2 && exec nsenter --net="$n" -- "$@"'
        )
        hosts = Path("/etc/netns") / host.ns / "hosts"
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
        argv += [str(hosts), f"/run/netns/{host.ns}", *cmd]
    else:
        argv = ["ip", "netns", "exec", host.ns, *cmd]
    with open(logs / f"{name}.log", "ab") as log:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            user=user,
            group=user,
            start_new_session=True,  # Ctrl-C at the driver's terminal is the driver's
        )
    _CHILDREN.setdefault(state["id"], []).append(p)
    ident = registry.process_identity(p.pid)
    if ident is None:
        raise TestbedError(
            f"{name} on {host.name if host else 'this machine'} ended at once: {_tail(state, name)}"
        )
    state["processes"][name] = ident
    registry.save(state)


def _tail(state: dict[str, Any], name: str, n: int = 600) -> str:
    try:
        text = (registry.state_dir() / state["id"] / "logs" / f"{name}.log").read_text()
    except OSError:
        return "(no log)"
    return text[-n:].strip() or "(empty log)"


def up(
    profile: str | Profile = "cluster2004",
    n_io: int | None = None,
    n_compute: int | None = None,
    *,
    detached: bool = False,
    timeout: float = 120.0,
    memory_limit: int = 1 << 30,
    worker_args: Sequence[str] = (),
    dask: bool = True,
    slurm: bool = False,
) -> Testbed:
    """Build a testbed: sweep stale ones, make the hosts and links, start Dask on them.

    Parameters
    ----------
    profile : str or Profile
        A name from :data:`~orchestrator.testbed.profiles.PROFILES`.
    n_io, n_compute : int, optional
        Host counts (default: the profile's).
    detached : bool
        Outlive this process (``iorch testbed up``): removed only by :func:`down`.
        Otherwise a testbed whose maker dies is removed by the next :func:`up`.
    timeout : float
        Seconds to wait for every worker to join.
    memory_limit : int
        Bytes each worker may hold.
    worker_args : sequence of str
        More arguments of every ``dask worker`` (e.g. ``["--nthreads", "2"]``).
    dask : bool
        Start the Dask scheduler and workers (off for a testbed whose Slurm jobs start
        their own).
    slurm : bool
        Start Slurm across the hosts (:mod:`~orchestrator.testbed.slurm`): ``slurmctld`` on
        ``head``, a ``slurmd`` per other host, partition ``testbed``;
        :attr:`Testbed.slurm_conf` is its ``SLURM_CONF``.

    Raises
    ------
    TestbedUnavailable
        Not root, no ``ip``/``tc``, or namespaces refused (the reason says which).
    TestbedError
        A command failed or a worker did not join; everything made is removed.

    Examples
    --------
    >>> tb = up("modern", n_io=2, n_compute=2)  # doctest: +SKIP
    >>> [h.name for h in tb.hosts]  # doctest: +SKIP
    ['head', 'io-0', 'io-1', 'compute-0', 'compute-1']
    """
    from ..engine.security import new_security, publish_credentials

    prof = get_profile(profile).sized(n_io, n_compute)
    netns.require()
    registry.sweep()
    tid = secrets.token_hex(3)
    with registry.locked():  # two ups at once must not take the same subnet
        slot = _free_slot()
        net = _subnet(slot)
        hosts = _hosts(tid, prof, net)
        address = f"tls://{hosts[0].address}:{PORT}"
        registry.save(_record(tid, slot, prof, address, hosts))
    state = registry.load(tid)
    if state is None:
        raise TestbedError(f"the record of testbed {tid} vanished as it was written")
    # a failure or Ctrl-C while building: everything made so far is removed (a second
    # Ctrl-C during that removal leaves the rest to the next up's sweep)
    try:
        state["namespaces"].append(netns.add_switch(tid))
        registry.save(state)
        for k, h in enumerate(hosts):
            state["namespaces"].append(h.ns)
            registry.save(state)
            netns.add_host(tid, k, h.address, net.prefixlen, *_links(prof, h.role))
        state["links"].append(netns.gateway_name(tid))
        registry.save(state)
        netns.add_gateway(tid, str(net[254]), net.prefixlen)
        # names resolve per host (ip netns exec mounts /etc/netns/<ns>/hosts on /etc/hosts)
        for ns, text in tbslurm.hosts_files(hosts).items():
            d = Path("/etc/netns") / ns
            state["etc"].append(str(d))
            registry.save(state)
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text(text)
        if slurm:
            conf = tbslurm.start(state, hosts, _spawn)
            state["slurm_conf"] = str(conf)
            registry.save(state)
        if dask:
            sec = new_security()
            crt, key = publish_credentials(address, sec)
            state["credentials"] = [str(crt), str(key)]
            registry.save(state)
            _start_dask(state, hosts, address, str(crt), str(key), memory_limit, list(worker_args))
            _wait(state, address, sec, len(hosts) - 1, timeout)
    except BaseException:
        registry.teardown(state, grace=1.0)
        _withdraw(state)
        raise
    if detached:
        state["owner"] = None
        registry.save(state)
    return Testbed(
        tid,
        prof,
        hosts,
        address if dask else "",
        netns.can_delay(),
        Path(state["slurm_conf"]) if slurm else None,
        _owner=not detached,
    )


def _record(tid: str, slot: int, prof: Profile, address: str, hosts: list[Host]) -> dict[str, Any]:
    """A testbed's first record: written before anything is made, so a run killed from
    then on leaves a record to sweep."""
    return {
        "id": tid,
        "slot": slot,
        "profile": prof.name,
        "n_io": prof.n_io,
        "n_compute": prof.n_compute,
        "owner": registry.process_identity(os.getpid()),
        "scheduler": address,
        "namespaces": [],
        "links": [],
        "processes": {},
        "credentials": [],
        "etc": [],
        "hosts": [h.__dict__ for h in hosts],
        "created": time.time(),
    }


def _start_dask(
    state: dict[str, Any],
    hosts: list[Host],
    address: str,
    crt: str,
    key: str,
    memory: int,
    extra: list[str],
) -> None:
    env = dict(os.environ)
    env["DASK_LOGGING__DISTRIBUTED"] = "warning"
    # the workers find this checkout's package as the driver does
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    tls = ["--tls-ca-file", crt, "--tls-cert", crt, "--tls-key", key]
    py = [sys.executable, "-m"]
    head = hosts[0]
    sched = [*py, "distributed.cli.dask_scheduler", "--protocol", "tls", "--host", head.address]
    sched += ["--port", str(PORT), "--no-dashboard", "--no-show", *tls]
    _spawn(state, head, "scheduler", sched, env)
    work = registry.state_dir() / state["id"] / "work"
    for h in hosts[1:]:
        k = int(h.name.rsplit("-", 1)[1])
        name = ionode_name(k) if h.role == "io" else f"compute-{k}"
        cmd = [*py, "distributed.cli.dask_worker", address, "--name", name, "--nthreads", "1"]
        cmd += ["--host", h.address, "--no-dashboard", "--dashboard-address", f"{h.address}:0"]
        cmd += ["--no-nanny", "--death-timeout", "60", "--memory-limit", str(memory)]
        cmd += ["--local-directory", str(work / name), *tls, *extra]
        if h.role == "io":
            cmd += ["--resources", " ".join(f"{r}={n}" for r, n in ionode_resources(k).items())]
        _spawn(state, h, name, cmd, env)


def _wait(state: dict[str, Any], address: str, sec: Any, n: int, timeout: float) -> None:
    from distributed import Client

    deadline = time.monotonic() + timeout
    client = None
    try:
        while client is None:
            _check_running(state)
            try:
                client = Client(address, security=sec, timeout=5)
            except OSError:
                if time.monotonic() > deadline:
                    raise TestbedError(
                        f"the scheduler at {address} did not answer within {timeout} s: "
                        f"{_tail(state, 'scheduler')}"
                    ) from None
        while True:
            _check_running(state)
            have = len(client.scheduler_info(n_workers=-1)["workers"])
            if have >= n:
                return
            if time.monotonic() > deadline:
                raise TestbedError(f"only {have} of {n} workers joined within {timeout} s")
            time.sleep(0.2)
    finally:
        if client is not None:
            client.close()


def _check_running(state: dict[str, Any]) -> None:
    for name, ident in state["processes"].items():
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(ident[0], os.WNOHANG)
        if not registry.alive(ident):
            raise TestbedError(f"{name} of testbed {state['id']} ended: {_tail(state, name)}")


def _withdraw(state: dict[str, Any]) -> None:
    """Remove the testbed's credentials and reap the processes this process started."""
    for p in _CHILDREN.pop(str(state["id"]), []):
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
    for f in state.get("credentials", []):
        with contextlib.suppress(OSError):
            Path(f).unlink()


def attach(tid: str | None = None) -> Testbed:
    """The testbed ``tid`` (or the only live one) as a :class:`Testbed` that ``with``
    does not remove.

    Examples
    --------
    >>> attach().scheduler_address  # doctest: +SKIP
    'tls://10.213.0.1:8786'
    """
    live = [st for st in registry.records() if not registry.stale(st)]
    if tid is None:
        if len(live) != 1:
            raise TestbedError(
                f"{len(live)} live testbeds "
                f"({', '.join(s['id'] for s in live) or 'none'}): name one"
            )
        st = live[0]
    else:
        found = [s for s in live if s["id"] == tid]
        if not found:
            raise TestbedError(f"no live testbed {tid!r}; `iorch testbed status` lists them")
        st = found[0]
    prof = get_profile(st["profile"]).sized(st["n_io"], st["n_compute"])
    hosts = [Host(**h) for h in st["hosts"]]
    conf = Path(st["slurm_conf"]) if st.get("slurm_conf") else None
    return Testbed(st["id"], prof, hosts, st["scheduler"], netns.can_delay(), conf, _owner=False)


def down(tid: str | None = None) -> list[str]:
    """Remove testbed ``tid``, or (None) every testbed of this machine; return their ids.

    Examples
    --------
    >>> down("3fa9c1")  # doctest: +SKIP
    ['3fa9c1']
    """
    gone = []
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        for st in registry.records():
            if tid is None or st["id"] == tid:
                registry.teardown(st)
                _withdraw(st)
                gone.append(str(st["id"]))
        if tid is not None and not gone:
            raise TestbedError(f"no testbed {tid!r}; `iorch testbed status` lists them")
        gone += registry.sweep() if tid is None else []
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return sorted(set(gone))


def status() -> list[dict[str, Any]]:
    """One row per recorded testbed: id, profile, hosts, scheduler, live/stale/detached,
    processes running.

    Examples
    --------
    >>> isinstance(status(), list)
    True
    """
    rows = []
    for st in registry.records():
        procs = st.get("processes", {})
        rows.append(
            {
                "id": st["id"],
                "profile": st.get("profile"),
                "hosts": len(st.get("hosts", [])),
                "scheduler": st.get("scheduler"),
                "state": "stale"
                if registry.stale(st)
                else ("detached" if st.get("owner") is None else "owned"),
                "running": sum(registry.alive(i) for i in procs.values()),
                "processes": len(procs),
            }
        )
    return rows
