"""An emulated cluster on one machine: hosts in network namespaces on a shaped bridge.

Modules: :mod:`.profiles` (the papers' clusters and a modern one, scaled),
:mod:`.netns` (namespaces, bridge, veth pairs, ``tc`` — the only module that
runs ``ip``/``tc``), :mod:`.registry` (records and the sweep of stale
testbeds), :mod:`.bed` (building one and running Dask on it).

Examples
--------
>>> from orchestrator import testbed
>>> sorted(testbed.PROFILES)
['cluster2004', 'clusterfile2006', 'modern']
"""

from .bed import Host, Testbed, attach, down, status, up
from .netns import available, can_delay
from .profiles import PROFILES, Link, Profile, get_profile
from .registry import sweep

__all__ = [
    "PROFILES",
    "Host",
    "Link",
    "Profile",
    "Testbed",
    "attach",
    "available",
    "can_delay",
    "down",
    "get_profile",
    "status",
    "sweep",
    "up",
]
