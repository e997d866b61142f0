"""The ``iorch`` command line: one module per command group, registered in :mod:`.commands`.

- :mod:`.scheduling` — ``policies``, ``schedule``, ``workload``, ``cost``;
- :mod:`.bench` — ``bench schedulers|optimal|idg|stage``;
- :mod:`.writebench` — ``write-bench``;
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

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, NoReturn

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
#: signals sent again and not yet seen by a handler (the main thread runs Python's handler
#: only at its next bytecode): still received, for whoever asks meanwhile
_in_flight: set[int] = set()
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
        _in_flight.add(signum)
    os.kill(os.getpid(), signum)


def _note(signum: int) -> None:
    """A handler has the signal: it counts as received from now on."""
    _received.append(signum)
    with _held_lock:
        _in_flight.discard(signum)


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


def _swallowed(unraisable: Any) -> None:
    """``sys.unraisablehook``: an interrupt raised where Python cannot propagate it arrives again.

    A handler's exception raised inside a ``__del__``, a weakref callback or a
    ctypes callback is printed as "Exception ignored ..." and dropped: the
    signal was lost and the command went on (CI: a SIGTERM inside a WeakSet's
    callback, the run then completed with 0 and a traceback). Delivered again
    shortly, the signal unwinds the command from its own code.
    """
    signum = None
    if unraisable.exc_type is KeyboardInterrupt:
        signum = signal.SIGINT
    elif unraisable.exc_type is SystemExit:
        code = getattr(unraisable.exc_value, "code", None)
        signum = signal.SIGTERM if code == 128 + signal.SIGTERM else None
    main = threading.current_thread() is threading.main_thread()
    if signum is not None and signum in _received and main:
        _received.reverse()  # the last one of that signal: the one that was dropped
        _received.remove(signum)
        _received.reverse()
        if signum == signal.SIGTERM:  # _terminate ignores a second one: this is not one
            signal.signal(signal.SIGTERM, _terminate)
        with _held_lock:
            if signum in _resending:
                return
            _resending.add(signum)
        later = threading.Timer(_COMPILER_RETRY, _resend, (signum,))
        later.daemon = True
        later.start()
        return
    sys.__unraisablehook__(unraisable)


def _interrupt(signum: int, frame: Any) -> None:
    if _deferred(signum, frame):
        return
    _note(signum)
    signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as before


def _terminate(signum: int, frame: Any) -> None:
    # scancel and batch systems stop jobs with SIGTERM: unwind like Ctrl-C, so
    # a stage being written removes its temporary output instead of leaving it;
    # a second SIGTERM (scancel twice, then the time limit) must not cut that short
    if _deferred(signum, frame):
        return
    _note(signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _end_interrupted(signum: int) -> NoReturn:
    name = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    with contextlib.suppress(OSError, ValueError):  # stderr a closed pipe: say nothing
        print(
            f"iorch: {name}; the stage in progress, if any, was not committed and its "
            "temporary output was removed; checkpoints committed before are intact",
            file=sys.stderr,
        )
    _leave(128 + signum, interrupted=True)


def _leave(code: int, interrupted: bool = False) -> NoReturn:
    """End the process with ``os._exit``, never in the interpreter's teardown.

    Everything the command started is stopped by the time it returns (the
    cluster's ``with`` closed it, a stage's cleanup ran). What the teardown
    adds is harm only: it disables Python's signal handlers first and then
    spends a second freeing Numba, llvmlite and SciPy, so a SIGTERM in that
    second killed a finished run (-15 instead of 0 or 143; CI, test_signals),
    and it crashed now and then with SIGSEGV in a library thread still alive
    after an interrupt.

    multiprocessing's semaphores are released first in every case (skipped,
    its tracker warned of "leaked semaphore objects" after our last line, CI).
    A command that ended on its own then runs the exit hooks (logging's,
    tempfile's, Dask's); an interrupted one does not: they race what is still
    stopping (multiprocessing's joins the workers Dask's threads are reaping,
    and Dask logs "exit status was already read"; Dask's closes a cluster
    interrupted while starting once more, waiting up to 10 s). A signal while
    the hooks run ends the process at once. Non-daemon threads are not waited
    for: the commands start none that outlive them.
    """

    _flush()  # before anything can end the process at once: a script printed to a file

    def late(signum: int, frame: Any) -> None:
        if code == 0:
            with contextlib.suppress(OSError):
                os.write(
                    2, b"iorch: signal received while shutting down; the command had completed\n"
                )
        os._exit(code or 128 + signum)

    _handle_both(late)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        # as its own exit hook does first: unlink the named semaphores (and tell its
        # tracker), so that neither a late signal nor an interrupt leaves them behind
        getattr(mp_util, "_run_finalizers", lambda minpriority: None)(0)
    if not interrupted:
        atexit._run_exitfuncs()
    _flush()
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with the stream closed (iorch ... >&-)
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (iorch ... | head): nothing to flush to
            pass


def _exit_code(stop: SystemExit) -> int:
    """The status ``sys.exit(stop.code)`` would give, printing a message as Python does."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


def main() -> NoReturn:
    """Entry point of the ``iorch`` console script (``iorch --help`` lists the commands)."""
    signal.signal(signal.SIGTERM, _terminate)
    sys.unraisablehook = _swallowed
    # multiprocessing's resource tracker (started by the cluster's nannies, with this
    # process's -W options) unlinks what a process left behind when it ends, and warns
    # of each on our stderr after our last line: after a killed or interrupted run,
    # while workers were still creating queues, "leaked semaphore objects" (CI). It
    # cleans them up all the same; the warning is noise to a user of the command
    sys.warnoptions.append("ignore::UserWarning:multiprocessing.resource_tracker")
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not if ignored (nohup, &)
        signal.signal(signal.SIGINT, _interrupt)
    from ..kernels import refresh_cache  # here, once, before any worker loads a kernel

    refresh_cache()
    # the commands (Numba, SciPy) stay out of spawned workers, which re-import this package
    from .commands import app

    try:
        app()
    except SystemExit as stop:
        _record_only()
        # Ctrl-C (130) and SIGTERM (143) end quietly in typer: say what became of the work
        if stop.code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            _end_interrupted(int(stop.code) - 128)
        if _signalled() and stop.code not in (0, None):
            _end_interrupted(_signalled()[0])
        _leave(_completed_despite_a_signal() if _signalled() else _exit_code(stop))
    except BaseException:
        _record_only()
        if _signalled():
            _end_interrupted(_signalled()[0])
        # a bug: its traceback (typer's), then the same ending as every other command
        sys.excepthook(*sys.exc_info())
        _leave(1)
    # an app that returns instead of raising SystemExit(0)
    _record_only()
    _leave(_completed_despite_a_signal() if _signalled() else 0)


def _record_only() -> None:
    # from here on the command is over: a signal is noted, not raised (raised inside an
    # except clause it would escape main with a traceback), and _leave answers for it
    def note(signum: int, frame: Any) -> None:
        _note(signum)

    _handle_both(note)


def _handle_both(handler: Any) -> None:
    # an ignored signal stays ignored (nohup, a background job's SIGINT)
    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) not in (signal.SIG_IGN, None):
            signal.signal(s, handler)


def _signalled() -> list[int]:
    """The signals received, those still being delivered again included."""
    with _held_lock:
        return _received + sorted(_resending | _in_flight)


def _completed_despite_a_signal() -> int:
    # a signal arrived and the command still completed: its exception was lost where a
    # library turned it into its own and carried on (seen once: a SIGTERM inside
    # matplotlib's import of its 3D axes, which it reports as a warning), or its
    # delivery again had not come yet. The work is done and committed; the exit status
    # still says the signal came
    signum = _signalled()[0]
    name = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    print(f"iorch: {name} as it ended; the command had completed", file=sys.stderr)
    return 128 + signum


def __getattr__(name: str) -> Any:
    if name == "app":  # ``orchestrator.cli.app``, loaded on first use
        from .commands import app  # the commands load Numba and SciPy: only on demand

        return app
    raise AttributeError(f"module 'orchestrator.cli' has no attribute {name!r}")


if __name__ == "__main__":
    main()
