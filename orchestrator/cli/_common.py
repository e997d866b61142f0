"""What every ``iorch`` command group shares: the consoles and the one error handler."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from ..errors import OrchestratorError

__all__ = ["USER_ERRORS", "console", "err", "fail"]

# tables are wide; in logs and pipes (no terminal to measure) do not squeeze them to 80 columns
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

# what the user can fix: our errors (bad values, refused targets, failed stages) and the
# files they named; anything else is a bug and keeps its traceback (exit code 1)
USER_ERRORS = (OrchestratorError, OSError)


def fail(msg: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {msg}")
    return typer.Exit(code=2)
