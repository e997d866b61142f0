"""The restart decorator: the matching side of :func:`~orchestrator.output_stage`.

.. code-block:: python

    import orchestrator as orc

    def rows_of(task):                     # any decomposition, halo rows included
        lo, hi = task * 1000, (task + 1) * 1000
        return {"u": range(max(0, lo - 10), hi + 10)}

    @orc.input_stage(checkpoint="ckpt/step{step}.h5", rows=rows_of)
    def resume(data, task):
        return data["u"].sum()             # data: {dataset: this task's rows}

    futures = resume.restart(tasks=16, step=3, cluster=cl)

Each task's rows are read by the aggregators on the I/O workers
(:func:`~orchestrator.engine.readstage.read_stage`) and handed to the task on the
worker that runs it: no task opens the checkpoint. Several restarts started at
once are ordered on every I/O node by the read policy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError
from .checkpoint import Checkpoint

__all__ = ["InputStage", "input_stage"]


class InputStage:
    """A function restarted from a checkpoint, task by task (see :func:`input_stage`)."""

    def __init__(
        self,
        func: Callable[..., Any],
        checkpoint: str | Path | Checkpoint,
        rows: Callable[[int], Mapping[str, Any]],
        policy: str,
        application: str | None,
    ) -> None:
        self.func = func
        self.checkpoint = checkpoint
        self.rows = rows
        self.policy = policy
        self.application = application or getattr(func, "__name__", "restart")
        functools.update_wrapper(self, func)

    def path(self, step: Any = None) -> Path:
        """The checkpoint of ``step`` (the template's ``{step}`` filled in).

        Examples
        --------
        >>> input_stage("ck/step{step}.h5", rows=lambda t: {})(print).path(3)
        PosixPath('ck/step3.h5')
        """
        if isinstance(self.checkpoint, Checkpoint):
            return self.checkpoint.path
        text = str(self.checkpoint)
        if "{step}" in text:
            if step is None:
                raise InputError(f"checkpoint {text!r} names a step: give restart(step=...)")
            return Path(text.replace("{step}", str(step)))
        return Path(text)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def restart(
        self,
        tasks: int,
        step: Any = None,
        *,
        cluster: Any = None,
        wait: bool = True,
        **kwargs: Any,
    ) -> list[Any]:
        """Run the function once per task on its rows of the checkpoint.

        Parameters
        ----------
        tasks : int
            How many tasks restart (task ``t`` gets ``rows(t)``).
        step : optional
            Fills ``{step}`` in the checkpoint's name.
        cluster : IOCluster, optional
            Where to run; default: an embedded cluster for this call, the results
            gathered here before it stops.
        wait : bool
            With a cluster: wait for the results (default) or return the Dask futures.
        **kwargs
            Passed to every call of the function.

        Returns
        -------
        list
            The function's results per task (or their Dask futures with
            ``wait=False``).

        Examples
        --------
        >>> resume.restart(tasks=16, step=3, cluster=cl)  # doctest: +SKIP
        [...]
        """
        from ..engine.readstage import read_stage

        if not isinstance(tasks, int) or isinstance(tasks, bool) or tasks < 1:
            raise InputError(f"tasks must be a whole number >= 1, got {tasks!r}")
        if not isinstance(wait, bool):
            raise InputError(f"wait must be True or False, got {wait!r}")
        requests = []
        for t in range(tasks):
            try:
                req = self.rows(t)
            except Exception as err:
                raise InputError(f"rows({t}) raised {type(err).__name__}: {err}") from err
            if not isinstance(req, Mapping):
                raise InputError(
                    f"rows({t}) must return a mapping {{dataset: rows}}, got {type(req).__name__}"
                )
            requests.append(req)
        if cluster is None:
            from ..engine.cluster import local_cluster

            with local_cluster() as own:
                return self.restart(tasks, step, cluster=own, wait=True, **kwargs)
        res = read_stage(
            self.path(step),
            requests,
            policy=self.policy,
            cluster=cluster,
            application=self.application,
            wait=False,
        )
        res.wait()  # every stripe checked before any task runs: a damaged one raises here
        client = cluster.client
        # the function's own keywords, never Dask's (key=, workers=, retries= ...)
        func = functools.partial(self.func, **kwargs)
        futures = [
            client.submit(func, rows, t, workers=[res.workers[t]], pure=False)
            for t, rows in enumerate(res.futures)
        ]
        if not wait:
            return futures
        return client.gather(futures)


def input_stage(
    checkpoint: str | Path | Checkpoint,
    rows: Callable[[int], Mapping[str, Any]],
    *,
    policy: str = "hio",
    application: str | None = None,
) -> Callable[[Callable[..., Any]], InputStage]:
    """Decorate ``f(data, task, **kwargs)`` to restart from a checkpoint: each task gets
    ``data``, its rows of every dataset ``rows(task)`` names, through the I/O workers.

    Parameters
    ----------
    checkpoint : path, template or Checkpoint
        ``"ckpt/step{step}.h5"`` (filled by ``restart(step=...)``), a path, or what an
        output stage committed.
    rows : callable
        ``rows(task) -> {dataset: rows}``: row numbers in any order (replicas
        allowed), a ``range`` or a ``slice``.
    policy : {"hio", "sio", "nio"}
        How the I/O nodes order this restart among others running at once.
    application : str, optional
        The restart's name on the I/O nodes (default: the function's).

    Examples
    --------
    >>> @input_stage("ckpt/step{step}.h5", rows=lambda t: {"u": range(t * 10, t * 10 + 12)})
    ... def resume(data, task):
    ...     return data["u"].shape
    >>> resume.path(2)
    PosixPath('ckpt/step2.h5')
    """
    if not callable(rows):
        raise InputError(f"rows must be a function of the task, got {rows!r}")
    if policy not in ("hio", "sio", "nio"):
        raise InputError(f"policy must be one of nio, sio, hio, got {policy!r}")
    if not isinstance(checkpoint, (str, Path, Checkpoint)):
        raise InputError(f"checkpoint must be a path or a Checkpoint, got {checkpoint!r}")

    def wrap(f: Callable[..., Any]) -> InputStage:
        return InputStage(f, checkpoint, rows, policy, application)

    return wrap
