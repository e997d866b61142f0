"""The links of a testbed: network namespaces, one bridge, veth pairs shaped with ``tc``.

The only module that runs ``ip`` and ``tc``. Every name it makes starts with
:data:`PREFIX` and the testbed's id, so a sweep finds what a killed run left.

Layout of testbed ``ID`` (``S`` its switch namespace, ``Hk`` host ``k``'s)::

    root namespace: iorchID (veth) --+
                                     |  (the driver's way in: the gateway address)
    S: bridge br0 ---- gw -----------+
                  ---- pK ======== eth0 in Hk   (egress of eth0: host k's upload,
                                                 egress of pK: its download)

Shaping is ``tbf`` (rate, a burst of at least 64 KiB — a veth hands ``tc``
GSO segments of up to 64 KiB —, 50 ms of queue). Delay and jitter need
``netem``; a kernel without ``sch_netem`` (this machine's, see FACTS.md) gets
rate shaping only, and :func:`can_delay` says so.

Examples
--------
>>> from orchestrator.testbed import netns
>>> netns.ns_name("a1b2c3", "h3")
'iorch-a1b2c3-h3'
"""

from __future__ import annotations

import functools
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence

from ..errors import TestbedError, TestbedUnavailable

__all__ = [
    "PREFIX",
    "add_gateway",
    "add_host",
    "add_switch",
    "available",
    "can_delay",
    "delete_link",
    "delete_ns",
    "gateway_name",
    "list_links",
    "list_ns",
    "ns_name",
    "ns_pids",
]

#: every namespace of a testbed is ``iorch-<id>-<role>``; its root link ``iorch<id>``
PREFIX = "iorch-"
#: the smallest token bucket: a veth hands tc GSO segments of up to 64 KiB
MIN_BURST = 64 << 10
#: the queue a shaped link holds before dropping, in seconds at its rate
QUEUE_SECONDS = 0.3


def ns_name(tid: str, role: str) -> str:
    """The namespace of ``role`` (``sw``, ``h0`` …) in testbed ``tid``."""
    return f"{PREFIX}{tid}-{role}"


def gateway_name(tid: str) -> str:
    """The root namespace's end of the gateway veth (at most 15 characters)."""
    return f"iorch{tid}"


def _run(cmd: Sequence[str], check: bool = True, timeout: float = 30.0) -> str:
    try:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise TestbedUnavailable(f"{cmd[0]!r} is not installed (Debian package iproute2)") from None
    except subprocess.TimeoutExpired:
        raise TestbedError(f"{' '.join(cmd)} did not return within {timeout} s") from None
    if check and r.returncode != 0:
        raise TestbedError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


@functools.lru_cache(maxsize=1)
def available() -> str | None:
    """Why this machine cannot host a testbed, or None when it can.

    Namespaces need root (``CAP_NET_ADMIN``), ``ip`` and ``tc``; the answer
    comes from making and removing a namespace for real.

    Examples
    --------
    >>> available() is None or isinstance(available(), str)
    True
    """
    if os.geteuid() != 0:
        return "a testbed needs root (network namespaces, tc); this process is not root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool!r} is not installed (Debian package iproute2)"
    probe = f"{PREFIX}probe-{os.getpid()}"
    try:
        _run(["ip", "netns", "add", probe])
    except TestbedError as err:
        return f"network namespaces cannot be made here: {err}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


def require() -> None:
    """Raise :class:`TestbedUnavailable` with the reason when :func:`available` fails."""
    why = available()
    if why is not None:
        raise TestbedUnavailable(why)


@functools.lru_cache(maxsize=1)
def can_delay() -> bool:
    """Whether ``tc`` can delay packets here (``sch_netem``), tried on a veth pair.

    Examples
    --------
    >>> can_delay() in (True, False)  # doctest: +SKIP
    True
    """
    ns = f"{PREFIX}probe-netem-{os.getpid()}"
    _run(["ip", "netns", "add", ns])
    try:
        _run(["ip", "-n", ns, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"])
        r = subprocess.run(
            ["tc", "-n", ns, "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"],
            capture_output=True,
        )
        return r.returncode == 0
    finally:
        _run(["ip", "netns", "del", ns], check=False)


def _shape(ns: str, dev: str, rate: float, latency: float, jitter: float) -> None:
    """Shape the egress of ``dev`` in ``ns`` to ``rate`` bytes/s (and delay it, with netem)."""
    bits = f"{int(rate * 8)}bit"
    if latency > 0 and can_delay():
        delay = ["delay", f"{int(latency * 1e6)}us"]
        if jitter > 0:
            delay.append(f"{int(jitter * 1e6)}us")
        limit = max(1000, int(rate * QUEUE_SECONDS / 1500))
        cmd = ["netem", *delay, "rate", bits, "limit", str(limit)]
    else:
        burst = max(MIN_BURST, int(rate / 100))
        cmd = ["tbf", "rate", bits, "burst", str(burst), "latency", f"{int(QUEUE_SECONDS * 1e3)}ms"]
    _run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", *cmd])


def add_switch(tid: str) -> str:
    """Create testbed ``tid``'s switch: a namespace holding bridge ``br0``."""
    sw = ns_name(tid, "sw")
    _run(["ip", "netns", "add", sw])
    _run(["ip", "-n", sw, "link", "set", "lo", "up"])
    _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
    _run(["ip", "-n", sw, "link", "set", "br0", "up"])
    return sw


def add_host(
    tid: str,
    k: int,
    address: str,
    prefix: int,
    up: tuple[float, float, float],
    down: tuple[float, float, float],
) -> str:
    """Create host ``k``: a namespace whose ``eth0`` reaches the bridge, shaped both ways.

    ``up`` and ``down`` are (rate bytes/s, latency s, jitter s) of what leaves
    and what reaches the host.
    """
    sw, ns, port = ns_name(tid, "sw"), ns_name(tid, f"h{k}"), f"p{k}"
    _run(["ip", "netns", "add", ns])
    _run(["ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns])
    _run(["ip", "-n", sw, "link", "set", port, "master", "br0", "up"])
    _run(["ip", "-n", ns, "addr", "add", f"{address}/{prefix}", "dev", "eth0"])
    _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    _run(["ip", "-n", ns, "link", "set", "lo", "up"])
    _shape(ns, "eth0", *up)
    _shape(sw, port, *down)
    return ns


def add_gateway(tid: str, address: str, prefix: int) -> str:
    """The root namespace's unshaped way onto the bridge (the driver is the login node)."""
    sw, gw = ns_name(tid, "sw"), gateway_name(tid)
    _run(["ip", "link", "add", gw, "type", "veth", "peer", "name", "gw", "netns", sw])
    _run(["ip", "-n", sw, "link", "set", "gw", "master", "br0", "up"])
    _run(["ip", "addr", "add", f"{address}/{prefix}", "dev", gw])
    _run(["ip", "link", "set", gw, "up"])
    return gw


def list_ns() -> list[str]:
    """The testbed namespaces on this machine (any testbed's, live or stale)."""
    out = _run(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(PREFIX)]


def list_links() -> list[str]:
    """The testbed gateway links in the root namespace."""
    out = _run(["ip", "-o", "link", "show"], check=False)
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n.startswith("iorch")]


def ns_pids(ns: str) -> list[int]:
    """PIDs of the processes inside namespace ``ns``."""
    out = _run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def listening(ns: str, port: int) -> bool:
    """Whether a process in namespace ``ns`` listens on TCP ``port`` (asked of the
    namespace's own socket table: nothing is sent)."""
    out = _run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{int(port)}"], check=False)
    return bool(out.strip())


def delete_ns(ns: str) -> None:
    """Remove namespace ``ns`` (its veth ends go with it)."""
    _run(["ip", "netns", "del", ns], check=False)


def delete_link(name: str) -> None:
    """Remove link ``name`` from the root namespace (its peer goes with it)."""
    _run(["ip", "link", "del", name], check=False)


def used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks the root namespace already routes: a testbed's subnet avoids them."""
    out = _run(["ip", "-4", "route", "show", "table", "all"], check=False)
    nets = []
    for line in out.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("default", "broadcast", "local"):
            word = line.split()[1] if word != "default" else ""
        try:
            nets.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    return [n for n in nets if isinstance(n, ipaddress.IPv4Network)]
