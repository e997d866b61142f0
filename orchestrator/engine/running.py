"""Which stages this worker process is writing, and stopping them.

A stage is known by its token (the temporary output's name). Every writer
loop (:func:`~orchestrator.engine.worker.run_ionode`) and every source writing into
the output (:mod:`.sources`) is counted while it runs; :func:`abort` marks a
token stopped, and each of them checks (:func:`_check`) before it writes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import StageAborted as Aborted
from ..files import remove_path
from .staging import remove_staging, sweep_dead

__all__ = ["Aborted", "abort", "busy"]

#: tokens of stages told to stop (per worker process)
_ABORTED: set[str] = set()
#: (token, I/O node) of writer loops running in this process
_ACTIVE: set[tuple[str, int]] = set()
_LOCK = threading.Lock()


def abort(token: str) -> int:
    """On every worker: tell the stage's writer loops to stop; return how many are running.

    Runs in the worker's event loop (``Client.run``), so it never blocks.

    Examples
    --------
    >>> abort("ckpt.h5.tmp-0123")
    0
    """
    # a stage stops when an I/O worker died: its shared-memory folder is left behind
    threading.Thread(target=sweep_dead, name="iorch-sweep", daemon=True).start()
    with _LOCK:
        _ABORTED.add(token)
        return sum(1 for t, _ in _ACTIVE if t == token)


def busy(token: str) -> int:
    """On every worker: how many writer loops of the stage still run (0 once all stopped).

    Examples
    --------
    >>> busy("ckpt.h5.tmp-0123")
    0
    """
    with _LOCK:
        return sum(1 for t, _ in _ACTIVE if t == token)


def _stopped(token: str) -> bool:
    """Whether the stage of ``token`` was stopped (:func:`abort`) in this process."""
    with _LOCK:
        return token in _ABORTED


def _check(token: str, worker: Any = None) -> None:
    if token in _ABORTED:
        raise Aborted(f"stage {token} aborted")
    # a worker told to close (scancel, SIGTERM) stops writing before its process goes
    if worker is not None and getattr(worker.status, "name", "running") not in (
        "running",
        "paused",
    ):
        raise Aborted(f"stage {token}: the worker is closing")


@contextlib.contextmanager
def _direct_writer(info: dict[str, Any], staging: str | None = None) -> Iterator[None]:
    """A source writing into the stage's output for the block: counted by :func:`busy`
    (``stop()`` waits for it too), and if the stage was stopped meanwhile, whatever it
    may have recreated of the output (and of the ``staging`` directory) is removed when
    it ends."""
    token = info["token"]
    me = (token, -1 - threading.get_ident())
    with _LOCK:
        _ACTIVE.add(me)
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE.discard(me)
            stopped = token in _ABORTED
        if stopped:  # a Zarr writer makes folders: nothing of the stage may outlive it
            remove_path(info["path"])
            if staging is not None:
                remove_staging(staging)
