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
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from . import netns

__all__ = ["alive", "load", "process_identity", "records", "save", "state_dir", "sweep", "teardown"]


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


def save(state: dict[str, Any]) -> None:
    """Write a record atomically (a reader never sees half of one)."""
    d = state_dir() / state["id"]
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, d / "state.json")


def load(tid: str) -> dict[str, Any] | None:
    """The record of testbed ``tid``, None if there is none (or it is unreadable)."""
    try:
        data = json.loads((state_dir() / tid / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


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
            if young:  # another process is writing its first record
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


def _stop(idents: list[list[int]], grace: float) -> None:
    live = [i for i in idents if alive(i)]
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
        set(state.get("namespaces", [])) | {n for n in netns.list_ns() if _tid(n) == tid}
    )
    # a process the record missed (started by hand inside a host): stopped by its PID too
    _stop([i for ns in spaces for p in netns.ns_pids(ns) if (i := process_identity(p))], 1.0)
    for ns in spaces:
        netns.delete_ns(ns)
    for link in {*state.get("links", []), netns.gateway_name(tid)} & set(netns.list_links()):
        netns.delete_link(link)
    for d in state.get("etc", []):
        if Path(d).parent == Path("/etc/netns") and Path(d).name.startswith(netns.PREFIX):
            shutil.rmtree(d, ignore_errors=True)
    with contextlib.suppress(OSError):
        Path("/etc/netns").rmdir()  # only when empty: made by the first testbed, perhaps
    shutil.rmtree(state_dir() / tid, ignore_errors=True)
    with contextlib.suppress(OSError):
        state_dir().rmdir()  # only when empty: nothing of ours left


def _tid(ns: str) -> str | None:
    rest = ns[len(netns.PREFIX) :]
    return rest.split("-", 1)[0] if ns.startswith(netns.PREFIX) and "-" in rest else None


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
    # what is left: live testbeds, and those whose first record is being written
    base = state_dir()
    known = {d.name for d in base.iterdir()} if base.is_dir() else set()
    for ns in netns.list_ns():
        tid = _tid(ns)
        if tid == "probe":  # iorch-probe-<pid>[-netem]: a probe whose process is gone
            pid = ns.split("-")[2]
            if pid.isdigit() and process_identity(int(pid)) is not None:
                continue
        elif tid in known:
            continue
        _stop([i for p in netns.ns_pids(ns) if (i := process_identity(p))], 1.0)
        netns.delete_ns(ns)
        removed.append(str(tid))
    etc = Path("/etc/netns")
    for d in sorted(etc.glob(f"{netns.PREFIX}*")) if etc.is_dir() else []:
        if _tid(d.name) not in known:
            shutil.rmtree(d, ignore_errors=True)
    for link in netns.list_links():
        if link[len("iorch") :] not in known:
            netns.delete_link(link)
            removed.append(link[len("iorch") :])
    return sorted(set(removed))
