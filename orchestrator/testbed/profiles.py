"""Testbed profiles: the papers' clusters and a modern one, scaled to what 2 cores can host.

A profile keeps the *ratios* of the cluster it stands for — link rate over an
I/O node's disk rate, I/O nodes over clients — and divides every rate by one
``scale`` so that the whole testbed moves a few tens of MB/s (Dask on 2 cores
moves a few hundred MB/s over loopback: the links, not the CPU, must be the
bottleneck). An I/O node's disk is emulated by capping its host's *ingress*
at the disk rate: the page cache takes what arrives, as fast as the link lets
it in (cgroup v1 here does not throttle buffered writes; FACTS.md).

Sources
-------
``cluster2004``
    The bidding paper (Wu, Lin, Liu): a Pentium-III cluster, Myrinet at
    1.28 Gbit/s, one IDE disk per node at 32.96 Mbit/s; 4 of 16 nodes are I/O
    servers (its Fig. 1), 256 clients in the simulations. The cost preset of the
    same name holds those rates; latencies 10 µs (network) and 1 ms (disk).
``clusterfile2006``
    The Clusterfile paper (Isaila et al.): 16 dual Pentium-III nodes, Myrinet
    with a TCP/IP throughput of 120 MB/s (ttcp), IDE disks (rate not given: the
    bidding paper's 32.96 Mbit/s, same hardware generation).
``modern``
    Today's cluster: 100 Gbit/s links, an NVMe-backed I/O node storing 3 GB/s,
    one I/O node per 8 clients.

Examples
--------
>>> from orchestrator.testbed.profiles import get_profile
>>> p = get_profile("cluster2004")
>>> round(p.io.rate / p.disk)  # the paper's link/disk ratio, kept
39
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..cost import PRESETS, CostModel
from ..errors import InputError

__all__ = ["PROFILES", "Link", "Profile", "get_profile"]

MB = 1e6


@dataclass(frozen=True)
class Link:
    """One host's link to the switch, the same both ways unless capped.

    Parameters
    ----------
    rate : float
        Bytes per second, ``> 0``.
    latency, jitter : float
        One-way delay and its spread in seconds, ``>= 0``; applied where the
        kernel has ``sch_netem``, recorded (and measured) where it has not.

    Examples
    --------
    >>> Link(25e6).rate
    25000000.0
    """

    rate: float
    latency: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, (int, float)) and math.isfinite(self.rate) and self.rate > 0):
            raise InputError(f"link rate must be a finite number of bytes/s > 0, got {self.rate!r}")
        for name in ("latency", "jitter"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 10):
                raise InputError(f"link {name} must be seconds in [0, 10), got {v!r}")


@dataclass(frozen=True)
class Profile:
    """A kind of cluster: its links, its I/O nodes' disk rate and its default size.

    Parameters
    ----------
    name : str
        Also the name of the cost preset it scales (:data:`orchestrator.cost.PRESETS`).
    compute, io : Link
        Each compute host's and each I/O host's link.
    disk : float
        Bytes per second each I/O node stores; caps its host's ingress.
    n_io, n_compute : int
        Default numbers of I/O and compute hosts.
    scale : float
        Every rate of the original cluster divided by this.

    Examples
    --------
    >>> get_profile("modern").n_io
    2
    """

    name: str
    compute: Link
    io: Link
    disk: float
    n_io: int
    n_compute: int
    scale: float

    @property
    def io_ingress(self) -> float:
        """What reaches an I/O node per second: its link or its disk, the slower."""
        return min(self.io.rate, self.disk)

    def sized(self, n_io: int | None = None, n_compute: int | None = None) -> Profile:
        """The same profile with other host counts (each ``>= 1``, at most 250 hosts).

        Examples
        --------
        >>> get_profile("cluster2004").sized(n_io=8).n_io
        8
        """
        n_io = self.n_io if n_io is None else n_io
        n_compute = self.n_compute if n_compute is None else n_compute
        for name, v in (("n_io", n_io), ("n_compute", n_compute)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"{name} must be a whole number >= 1, got {v!r}")
        if n_io + n_compute > 250:
            raise InputError(f"a testbed holds at most 250 hosts, asked {n_io} + {n_compute}")
        return replace(self, n_io=n_io, n_compute=n_compute)

    def cost_model(self) -> CostModel:
        """The cost preset of the same name at this profile's scale: what the simulator
        predicts before calibration (:func:`orchestrator.testbed.calibrate` measures it).

        Examples
        --------
        >>> cm = get_profile("cluster2004").cost_model()
        >>> round(cm.disk_bandwidth / 1e6, 2)
        2.06
        """
        base = PRESETS[self.name]
        return replace(
            base,
            name=f"{self.name}-testbed",
            network_bandwidth=self.io.rate,
            disk_bandwidth=self.disk,
        )


def _scaled(
    name: str, link: float, disk: float, latency: float, scale: float, n_io: int, n_c: int
) -> Profile:
    return Profile(
        name=name,
        compute=Link(link / scale, latency),
        io=Link(link / scale, latency),
        disk=disk / scale,
        n_io=n_io,
        n_compute=n_c,
        scale=scale,
    )


#: the profiles by name (see the module's Sources)
PROFILES: dict[str, Profile] = {
    "cluster2004": _scaled("cluster2004", 1.28e9 / 8, 32.96e6 / 8, 10e-6, 2.0, 4, 12),
    "clusterfile2006": _scaled("clusterfile2006", 120 * MB, 32.96e6 / 8, 50e-6, 2.0, 4, 12),
    "modern": _scaled("modern", 100e9 / 8, 3e9, 2e-6, 500.0, 2, 16),
}


def get_profile(name: str | Profile) -> Profile:
    """A profile by name (or the profile itself).

    Examples
    --------
    >>> get_profile("clusterfile2006").name
    'clusterfile2006'
    """
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise InputError(
            f"unknown testbed profile {name!r}; choose one of {sorted(PROFILES)}"
        ) from None
