"""The ``iorch`` command line: one module per command group, registered in :mod:`.commands`.

- :mod:`.scheduling` — ``policies``, ``schedule``, ``workload``, ``cost``;
- :mod:`.bench` — ``bench schedulers|optimal|idg|stage`` and ``write-bench``;
- :mod:`.run` — ``run bips3d`` (the main job) and ``verify``;
- :mod:`.slurm` — ``slurm script|submit|status`` and the cluster options;
- :mod:`._common` — the consoles, shared options and the one error handler.

This package itself imports nothing heavy: each worker process of the
embedded cluster re-imports the ``iorch`` script when it starts
(multiprocessing's spawn), and through it this package. With the commands
imported here, every worker loaded Numba, llvmlite and SciPy it never uses
(measured: 159 MiB resident per idle worker).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

# the signals this process received, first first: whatever error a command ends
# with after one (a library interrupted halfway may raise its own, as Numba's
# cache does when Ctrl-C lands inside a compilation: "no compiled object yet"),
# the command was interrupted, and says so as Ctrl-C would
_received: list[int] = []


# how long a signal that landed inside the compiler waits before it is delivered again,
# and how long it may keep waiting (a compilation that never returns must not make
# Ctrl-C or scancel's SIGTERM a no-op)
_COMPILER_RETRY = 0.05
_COMPILER_PATIENCE = 10.0
# signal -> when it was first held back; signals whose redelivery is under way
_held: dict[int, float] = {}
_resending: set[int] = set()
_held_lock = threading.Lock()


def _inside_compiler(frame: Any) -> bool:
    """Whether ``frame`` or a caller of it is Numba's or llvmlite's code."""
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name.split(".", 1)[0] in ("numba", "llvmlite"):
            return True
        frame = frame.f_back
    return False


def _resend(signum: int) -> None:
    with _held_lock:
        _resending.discard(signum)
    os.kill(os.getpid(), signum)


def _deferred(signum: int, frame: Any) -> bool:
    # An exception raised while Numba compiles a kernel (the first run on a
    # fresh cache) does not unwind the command: inside llvmlite's ctypes
    # callbacks Python prints it as "Exception ignored ... Traceback" and goes
    # on; elsewhere Numba is left halfway ("no compiled object yet"). Deliver
    # the signal again once the compiler has returned (a kernel compiles in
    # under a few seconds), so the command unwinds from its own code. Repeats
    # of a held signal (Ctrl-C pressed again) become the one delivery
    now = time.monotonic()
    with _held_lock:
        first = _held.setdefault(signum, now)
        if not _inside_compiler(frame) or now - first > _COMPILER_PATIENCE:
            _held.pop(signum, None)
            return False
        if signum in _resending:
            return True
        _resending.add(signum)
    later = threading.Timer(_COMPILER_RETRY, _resend, (signum,))
    later.daemon = True
    later.start()
    return True


def _interrupt(signum: int, frame: Any) -> None:
    if _deferred(signum, frame):
        return
    _received.append(signum)
    signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as before


def _terminate(signum: int, frame: Any) -> None:
    # scancel and batch systems stop jobs with SIGTERM: unwind like Ctrl-C, so
    # a stage being written removes its temporary output instead of leaving it;
    # a second SIGTERM (scancel twice, then the time limit) must not cut that short
    if _deferred(signum, frame):
        return
    _received.append(signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _end_interrupted(signum: int) -> None:
    name = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    print(
        f"iorch: {name}; the stage in progress, if any, was not committed and its "
        "temporary output was removed; checkpoints committed before are intact",
        file=sys.stderr,
    )
    # everything the command started is stopped by now (the cluster's `with`
    # has closed it, the stage's cleanup has run); what is left is the
    # interpreter's own finalization, which now and then crashed with SIGSEGV
    # in a library thread still alive after the interrupt (1 of 12 signal points
    # of tests/faults/test_signals.py), turning a clean 130 into -11. Skip it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signum)


def main() -> None:
    """Entry point of the ``iorch`` console script (``iorch --help`` lists the commands)."""
    signal.signal(signal.SIGTERM, _terminate)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not if ignored (nohup, &)
        signal.signal(signal.SIGINT, _interrupt)
    from ..kernels import refresh_cache  # here, once, before any worker loads a kernel

    refresh_cache()
    # the commands (Numba, SciPy) stay out of spawned workers, which re-import this package
    from .commands import app

    try:
        app()
    except SystemExit as stop:
        # Ctrl-C (130) and SIGTERM (143) end quietly in typer: say what became of the work
        if stop.code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            _end_interrupted(int(stop.code) - 128)
        if _received and stop.code not in (0, None):
            _end_interrupted(_received[0])
        raise
    except BaseException:
        if _received:
            _end_interrupted(_received[0])
        raise


def __getattr__(name: str) -> Any:
    if name == "app":  # ``orchestrator.cli.app``, loaded on first use
        from .commands import app  # the commands load Numba and SciPy: only on demand

        return app
    raise AttributeError(f"module 'orchestrator.cli' has no attribute {name!r}")


if __name__ == "__main__":
    main()
