"""Parsl side of stage interception: ``output_app``, a Parsl app whose result is a contribution.

.. code-block:: python

    from orchestrator.plugins.parsl import output_app

    @output_app(target="ckpt/step{step}.h5", clients=8, scheduler=io.address)
    def save(step, rank, inputs=(), outputs=()):
        return rows, values

    futures = [save(3, r) for r in range(8)]      # futures of the committed checkpoint

The app keeps its signature (Parsl reads ``inputs``/``outputs``/``stdout``
defaults from it). Its body runs wherever Parsl puts it — a thread of this
process (``ThreadPoolExecutor``) or a worker process
(``HighThroughputExecutor``) — connects to the orchestrator's Dask scheduler
(``scheduler=`` or ``$IORCH_SCHEDULER``), stores its contribution on a Dask
compute worker and returns at once; the last app of a step writes the
checkpoint through the Dask I/O workers (:mod:`orchestrator.plugins.dask`).
The waiting for the commit happens here, in a Parsl *join app* of the
submitting process, never in a worker slot: a step of more apps than the
executor has workers cannot deadlock. Parsl is imported lazily, here only.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from orchestrator.errors import SignatureError
from orchestrator.frontends.intercept import output_stage

__all__ = ["output_app"]


class _Steps:
    """Futures of the calls of each open step, settled when the step commits or fails."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[Any, list[Future[Any]]] = {}

    def add(self, step: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self.lock:
            self.pending.setdefault(step, []).append(fut)
        return fut

    def settle(self, step: Any, inner: Future[Any]) -> None:
        err = inner.exception()
        if err is None and inner.result() is None:
            return  # not the leader: the step is not written yet
        with self.lock:
            waiting = self.pending.pop(step, [])
        for f in waiting:  # a failed call fails its whole step: it can never be written
            if err is not None:
                f.set_exception(err)
            else:
                f.set_result(inner.result())


def output_app(
    func: Callable[..., Any] | None = None,
    *,
    executors: Any = "all",
    cache: bool = False,
    **stage_options: Any,
) -> Any:
    """Decorate a function as a Parsl app whose result is an output-stage contribution.

    Parameters
    ----------
    executors, cache
        As for ``parsl.python_app`` (where the body runs).
    **stage_options
        As for :func:`orchestrator.output_stage`; ``clients`` is required and
        ``scheduler`` (or ``$IORCH_SCHEDULER``) names the orchestrator's Dask
        scheduler.

    Returns
    -------
    A Parsl join app: calling it gives an ``AppFuture`` of the committed
    :class:`~orchestrator.frontends.checkpoint.Checkpoint`.

    Examples
    --------
    >>> from orchestrator.plugins.parsl import output_app
    >>> @output_app(target="ckpt/{step}.h5", clients=2, scheduler="tcp://127.0.0.1:8786")
    ... def save(step, rank, inputs=(), outputs=()):
    ...     return [rank], [float(rank)]
    >>> import inspect
    >>> save.__name__, str(inspect.signature(save.func))
    ('save', '(step, rank, inputs=(), outputs=())')
    """
    from parsl import join_app, python_app

    if stage_options.get("clients") is None:
        raise SignatureError("output_app needs clients=N: a step is written when N apps are in")

    def wrap(f: Callable[..., Any]) -> Any:
        stage = output_stage(**stage_options, wait=False)(f)
        body = python_app(stage, executors=executors, cache=cache)
        steps = _Steps()

        @functools.wraps(f)
        def join(*args: Any, **kwargs: Any) -> Future[Any]:
            step, _ = stage.key(args, kwargs)
            done = steps.add(step)
            body(*args, **kwargs).add_done_callback(functools.partial(steps.settle, step))
            return done

        return join_app(join)

    return wrap(func) if func is not None else wrap
