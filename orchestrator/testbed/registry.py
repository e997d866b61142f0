"""Where testbeds are recorded, and the sweep that removes what a killed run left.

A testbed's record (``<STATE>/<id>/state.json``) is written *before* anything
is made and lists what it makes as it makes it: namespaces, the gateway link
and every process as (PID, start time) — a PID alone may be reused. Its
``owner`` is the process that made it; a testbed whose owner is gone (killed
by SIGKILL, say) is stale and the next :func:`sweep` removes it. A detached
testbed (``iorch testbed up``) has no owner and lives until ``down``.

Examples
--------
>>> from orchestrator.testbed import registry
>>> registry.process_identity(999_999_999) is None
True
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import netns

__all__ = [
    "alive",
    "load",
    "process_identity",
    "records",
    "save",
    "state_dir",
    "stop",
    "sweep",
    "teardown",
]


#: the one folder of testbed records on this machine: namespaces are the machine's, so every
#: process that makes or sweeps testbeds must see every record (a second folder would make
#: the other's testbeds look like orphans, and its sweep remove them)
STATE_DIR = Path("/run/iorch-testbed")
#: a record folder younger than this without its record is being made, not broken
YOUNG = 60.0


def state_dir() -> Path:
    """The folder of testbed records (:data:`STATE_DIR`)."""
    return STATE_DIR


def process_identity(pid: int) -> list[int] | None:
    """``[pid, start time]`` of a running process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":  # a zombie has finished
        return None
    return [pid, int(fields[19])]


def alive(ident: list[int] | None) -> bool:
    """Whether the process of ``ident`` (from :func:`process_identity`) still runs."""
    return ident is not None and process_identity(int(ident[0])) == list(ident)


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Hold the machine's testbed lock (``flock`` on the record folder) for a few steps."""
    import fcntl

    base = state_dir()
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)  # munged, user munge, reaches a testbed's socket through it
    fd = os.open(base, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save(state: dict[str, Any]) -> None:
    """Write a record atomically (a reader never sees half of one)."""
    import tempfile

    d = state_dir() / state["id"]
    d.mkdir(parents=True, exist_ok=True)
    # a name of its own: two processes saving at once must not write one file
    fd, tmp = tempfile.mkstemp(dir=d, prefix="state.json.")
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(state, indent=1, sort_keys=True))
    os.chmod(tmp, 0o644)
    os.replace(tmp, d / "state.json")


def load(tid: str) -> dict[str, Any] | None:
    """The record of testbed ``tid``, None if there is none (or it is unreadable)."""
    try:
        data = json.loads((state_dir() / tid / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _unreadable(tid: str) -> bool:
    """Whether a record exists but cannot be read now (EMFILE, EACCES): not broken, busy."""
    try:
        (state_dir() / tid / "state.json").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return False


def records() -> list[dict[str, Any]]:
    """Every testbed recorded on this machine, live or stale."""
    base = state_dir()
    if not base.is_dir():
        return []
    out = []
    for d in sorted(base.iterdir()):
        st = load(d.name)
        if st is None:
            try:
                young = time.time() - d.stat().st_mtime < YOUNG
            except OSError:  # removed meanwhile
                continue
            if young or _unreadable(d.name):  # being written, or a passing read error
                continue
            st = {"id": d.name, "owner": None, "broken": True}
        out.append(st)
    return out


def stale(state: dict[str, Any]) -> bool:
    """Whether a record's owner is gone (a detached testbed is never stale)."""
    if state.get("broken"):
        return True
    owner = state.get("owner")
    return owner is not None and not alive(owner)


def stop(idents: list[list[int]], grace: float = 3.0) -> None:
    """Stop processes by PID and start time (SIGTERM, then SIGKILL after ``grace`` s);
    one whose PID another process now holds is left alone.

    Examples
    --------
    >>> stop([])
    """
    _stop(idents, grace)


def _stop(idents: list[list[int]], grace: float) -> None:
    own = {os.getpid(), 1}
    live = [i for i in idents if i[0] not in own and alive(i)]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid, _ in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            for pid, _ in live:  # reap our own children: a zombie would look alive to kill()
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
            live = [i for i in live if alive(i)]
            if live:
                time.sleep(0.05)
        if not live:
            return


def teardown(state: dict[str, Any], grace: float = 3.0) -> None:
    """Remove everything a record lists: processes (by PID and start time), whatever
    else runs in its namespaces, the namespaces, the gateway link and the record."""
    tid = str(state["id"])
    _stop([list(p) for p in state.get("processes", {}).values()], grace)
    spaces = sorted(
        {n for n in state.get("namespaces", []) if _tid(n) == tid}
        | {n for n in netns.list_ns() if _tid(n) == tid}
    )
    spaces = [n for n in spaces if not _foreign(n)]
    # a process the record missed (started by hand inside a host): stopped by its PID too
    _stop([i for ns in spaces for p in netns.ns_pids(ns) if (i := process_identity(p))], 1.0)
    for ns in spaces:
        netns.delete_ns(ns)
    for link in {netns.gateway_name(tid)} & set(netns.list_links()):
        netns.delete_link(link)
    for d in state.get("etc", []):
        if Path(d).parent == Path("/etc/netns") and _tid(Path(d).name) == tid:
            shutil.rmtree(d, ignore_errors=True)
    with contextlib.suppress(OSError):
        Path("/etc/netns").rmdir()  # only when empty: made by the first testbed, perhaps
    _credentials(list(state.get("credentials", [])))
    shutil.rmtree(state_dir() / tid, ignore_errors=True)
    with contextlib.suppress(OSError):
        state_dir().rmdir()  # only when empty: nothing of ours left


#: what a testbed names its namespaces, /etc/netns folders and root link; nothing else is
#: ever removed by a sweep
_NS = re.compile(r"^iorch-([0-9a-f]{6})-(?:sw|h\d+)$")
_LINK = re.compile(r"^iorch([0-9a-f]{6})$")
_PROBE = re.compile(r"^iorch-probe-(?:netem-)?(\d+)$")


def _tid(ns: str) -> str | None:
    m = _NS.match(ns)
    return m.group(1) if m else None


def _foreign(ns: str) -> bool:
    """Whether namespace ``ns`` is this process's or init's own (an alias made by hand):
    its processes are the machine's, not a testbed's."""
    try:
        ino = os.stat(f"/run/netns/{ns}").st_ino
    except OSError:  # gone meanwhile: nothing to remove
        return True
    own = []
    for ref in ("/proc/self/ns/net", "/proc/1/ns/net"):  # init's may be closed to us
        with contextlib.suppress(OSError):
            own.append(os.stat(ref).st_ino)
    return ino in own


def _credentials(paths: list[str]) -> None:
    """Remove a testbed's certificate and key (only files in the credentials folder)."""
    from ..engine.security import credentials_dir

    home = credentials_dir().resolve()
    for f in paths:
        p = Path(f)
        if p.resolve().parent == home:
            with contextlib.suppress(OSError):
                p.unlink()


def sweep() -> list[str]:
    """Remove every stale testbed, and namespaces or links no record owns; return their ids.

    Namespaces of a testbed whose record is still being written (younger than
    :data:`YOUNG`) are left alone.

    Examples
    --------
    >>> sweep()  # doctest: +SKIP
    ['3fa9c1']
    """
    removed = []
    for st in records():
        if stale(st):
            teardown(st, grace=1.0)
            removed.append(str(st["id"]))
    # an object is an orphan if no record of its id exists *when it is removed*: a record
    # is always written before its testbed makes anything, so a testbed being made
    # meanwhile is never taken for one
    base = state_dir()

    def orphan(tid: str | None) -> bool:
        return tid is not None and not (base / tid).exists()

    for ns in netns.list_ns():
        m = _PROBE.match(ns)
        if m:  # a probe whose process is gone
            if process_identity(int(m.group(1))) is None:
                netns.delete_ns(ns)
            continue
        tid = _tid(ns)
        if not orphan(tid) or _foreign(ns):
            continue
        _stop([i for p in netns.ns_pids(ns) if (i := process_identity(p))], 1.0)
        if orphan(tid):
            netns.delete_ns(ns)
            removed.append(str(tid))
    etc = Path("/etc/netns")
    for d in sorted(etc.glob(f"{netns.PREFIX}*")) if etc.is_dir() else []:
        if orphan(_tid(d.name)):
            shutil.rmtree(d, ignore_errors=True)
    for link in netns.list_links():
        m = _LINK.match(link)
        if m and orphan(m.group(1)):
            netns.delete_link(link)
            removed.append(m.group(1))
    return sorted(set(removed))
