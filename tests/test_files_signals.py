"""A temporary file is never left behind by a signal that lands while it is being created.

The signal is sent to this very process the moment the file exists, before
the code that removes it has its name (from the engine's own hook,
``orchestrator.files.created_hook``), as a Ctrl-C can land at any instruction.
"""

import os
import signal
import subprocess
import sys

import pytest

_SCRIPT = """
import os, signal, sys
from pathlib import Path
import orchestrator.files as files

where = Path(sys.argv[1])
files.created_hook = lambda path: os.kill(os.getpid(), signal.SIGINT)
for make in (lambda: files.private_path(where, ".probe-", ".bin"),
             lambda: files.atomic_path(where / "out.json")):
    try:
        with make() as tmp:
            tmp.write_text("{}")
    except KeyboardInterrupt:
        pass
    else:
        raise SystemExit("the interrupt never came")
print(sorted(p.name for p in where.iterdir()))
"""


def test_an_interrupt_while_a_temporary_file_is_created_leaves_nothing(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout  # no .probe-*, no .out.tmp-*, no out.json
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signals_deferred_delivers_the_signal_when_the_block_ends(signum):
    from orchestrator.files import signals_deferred

    got = []
    old = signal.signal(signum, lambda s, f: got.append(s))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signum)
            assert got == []  # held
        assert got == [signum]  # delivered once the block ends
    finally:
        signal.signal(signum, old)
