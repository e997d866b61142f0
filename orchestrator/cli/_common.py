"""What every ``iorch`` command group shares: the consoles and the one error handler."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..cost import CostModel, get_cost_model
from ..engine.backends import backend_names
from ..errors import CostModelError, OrchestratorError, PolicyError
from ..files import check_input_file
from ..transfers import TransferSet

__all__ = [
    "FORMATS",
    "USER_ERRORS",
    "console",
    "cost_model",
    "err",
    "fail",
    "handled",
    "load_transfers",
    "options",
    "progress",
]

# tables are wide; in logs and pipes (no terminal to measure) do not squeeze them to 80 columns
console = Console(width=None if sys.stdout.isatty() else 200)  # logs: write-bench has 13 columns
err = Console(stderr=True)

# what the user can fix: our errors (bad values, refused targets, failed stages) and the
# files they named; anything else is a bug and keeps its traceback (exit code 1)
USER_ERRORS = (OrchestratorError, OSError)


def fail(msg: str) -> typer.Exit:
    """Print ``msg`` as the command's one error line; the returned ``Exit`` (code 2) ends it.

    Examples
    --------
    >>> raise fail("--size: '3 apples' is not a size")  # doctest: +SKIP
    """
    err.print(f"[bold red]error:[/] {msg}")
    return typer.Exit(code=2)


def handled(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with the one error handler of every ``iorch`` command.

    What the user can fix (:data:`USER_ERRORS`) becomes one line and exit
    code 2; anything else is a bug and keeps its traceback (exit code 1).
    Typer reads the wrapped function's signature (``functools.wraps``).

    Examples
    --------
    >>> app.command("verify")(handled(verify_cmd))  # doctest: +SKIP
    """

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as e:
            raise fail(str(e)) from None

    return run


#: the --format help: every registered format, entry points of installed packages included
FORMATS = f"One of: {', '.join(backend_names())}."


def cost_model(spec: str | None) -> CostModel:
    """A preset name, or a path to a JSON file written by ``CostModel.to_json``."""
    if spec is not None and spec.endswith(".json"):
        check_input_file(spec, "--cost", CostModelError)
        return CostModel.from_json(Path(spec).read_text())
    return get_cost_model(spec)


def load_transfers(path: Path) -> TransferSet:
    if path.suffix == ".npz":
        return TransferSet.load_npz(path)
    return TransferSet.from_csv(path)


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )


def options(items: list[str], policy: str) -> dict[str, object]:
    """``KEY=VALUE`` strings as options of ``policy``, each parsed as the kind it declares."""
    # here, not at the top: the policies load Numba, which commands without a plan skip
    from ..policies import get_policy

    p = get_policy(policy)
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PolicyError(f"--option must look like KEY=VALUE, got {item!r}")
        if key in out:
            raise PolicyError(f"--option {key} is given twice")
        out[key] = p.option(key).parse(text, p.name)
    return out
