"""Stage decorators: a function whose result is a contribution to a checkpoint.

.. code-block:: python

    import orchestrator as orc

    @orc.output_stage(target="ckpt/step{step}.h5", clients=8)
    def save(step, rank, u):
        rows = np.arange(rank * 1000, (rank + 1) * 1000 + 10)   # 10 halo rows
        return rows, u                                         # or {"u": (rows, u), ...}

Every call of ``save`` with the same ``step`` contributes to one write stage.
When the ``clients``-th call of a step arrives the orchestrator gathers the
contributions, resolves replicas, plans, dispatches to the I/O workers and
commits; each call gives a future of the committed
:class:`~orchestrator.frontends.checkpoint.Checkpoint`:

- plain Python (a loop, a notebook): the call returns a
  :class:`concurrent.futures.Future`; the last call of a step runs the stage
  on the embedded local cluster (or ``cluster=``);
- inside a Dask task (``client.submit(save, ...)``, ``client.map``,
  ``dask.delayed``): the task's own future resolves to the checkpoint, and
  the values never leave the workers (see :mod:`orchestrator.plugins.dask`);
- anywhere that can reach the scheduler (``scheduler=`` or
  ``$IORCH_SCHEDULER``), e.g. a Parsl worker: as inside a Dask task, see
  :func:`orchestrator.plugins.parsl.output_app`.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import defaults
from ..checks import is_int
from ..contributions import Contribution, ContributionError, DatasetSpec
from ..engine.backends import get_backend
from ..engine.cluster import local_cluster
from ..engine.options import WriteOptions
from ..errors import SignatureError
from ..plugins import dask as dask_plugin
from .checkpoint import Checkpoint

__all__ = ["OutputStage", "StageOptions", "output_stage", "set_default_cluster"]

CLIENT_PARAMS = ("client", "rank", "part", "partition", "task")
SCHEDULER_ENV = "IORCH_SCHEDULER"


@dataclass(frozen=True)
class StageOptions:
    """Where and how a decorated stage writes (see :func:`output_stage`)."""

    target: str
    clients: int | None = None
    #: how each step is written (format, policy, layout, overwrite, …)
    write: WriteOptions = field(default_factory=WriteOptions)
    step: str | None = "step"
    client: str | None = None
    shapes: Mapping[str, tuple[int, ...]] | None = None
    scheduler: str | None = None
    cluster: Any = field(default=None, compare=False)
    dtypes: Mapping[str, Any] | None = None
    #: whole specs by dataset (storage options, dimension names), as a capture records them
    specs: Mapping[str, DatasetSpec] | None = None
    wait: bool = True

    def path(self, step: Any, name: str) -> Path:
        """The target of one step.

        Examples
        --------
        >>> StageOptions(target="ckpt/{name}-{step:03d}.h5").path(7, "save")
        PosixPath('ckpt/save-007.h5')
        """
        return render_target(self.target, step=step, name=name)


def render_target(template: str, **values: Any) -> Path:
    """``template`` with its fields filled in, confined to the folder the template names.

    Only plain fields of ``values`` may appear (``{step}``, ``{step:03d}``,
    ``{step!r}``), never attributes or items (``{step.__class__}``), and a
    value may not render as a path separator, NUL, ``.`` or ``..``: whatever
    a step key holds, the target stays where the template puts it.

    Examples
    --------
    >>> render_target("ckpt/{name}-{step:03d}.h5", step=7, name="save")
    PosixPath('ckpt/save-007.h5')
    >>> render_target("ckpt/{step}.h5", step="../../etc/x", name="save")
    Traceback (most recent call last):
    ...
    orchestrator.errors.ContributionError: target 'ckpt/{step}.h5': step '../../etc/x' ...
    """
    import string

    def bad(why: str) -> ContributionError:
        return ContributionError(f"target {template!r}: {why}")

    if not isinstance(template, str | os.PathLike):
        raise bad("must be a path or a string")
    template = os.fspath(template)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise bad(f"cannot be parsed ({err})") from None
    rendered = []
    for literal, key, spec, conversion in parsed:
        rendered.append(literal)
        if key is None:
            continue
        if key not in values:
            raise bad(
                f"field {{{key}}}: only the plain fields "
                + ", ".join(f"{{{k}}}" for k in values)
                + " may be used"
            )
        value = values[key]
        if value is None:
            raise bad(f"{key} is None; give it a value (a number or a name)")
        try:
            convert: dict[str, Callable[[Any], str]] = {"r": repr, "s": str, "a": ascii}
            shown = convert[conversion](value) if conversion else value
            text = format(shown, spec or "")
        except (ValueError, TypeError, KeyError) as err:
            raise bad(f"{key} {value!r} cannot be formatted with {spec!r} ({err})") from None
        if "/" in text or os.sep in text:
            raise bad(f"{key} {value!r} renders as {text!r}, which holds a path separator")
        if "\0" in text:
            raise bad(f"{key} {value!r} renders as {text!r}, which holds a NUL")
        if not text.isprintable():  # a newline in a file name breaks every listing
            raise bad(f"{key} {value!r} renders as {text!r}, which holds a control character")
        rendered.append(text)
    path = "".join(rendered)
    # a field cannot add a separator (above), so the two split alike; a component that a
    # field made "." or ".." would leave the template's folder
    for mine, made in zip(template.split("/"), path.split("/"), strict=True):
        keys = [k for _, k, _, _ in string.Formatter().parse(mine) if k is not None]
        if keys and made in ("", ".", ".."):
            # '' too: "ck/{step}" with step "" named the template's own folder as the target
            shown = ", ".join(f"{k} {values[k]!r}" for k in keys)
            raise bad(f"{shown} makes the name {made!r}, which is not a name inside its folder")
    return Path(path)


# ------------------------------------------------------------------ results -> contributions
def _as_contributions(result: Any, client: int, name: str) -> dict[str, Contribution]:
    """``(rows, values)`` or ``{dataset: (rows, values)}`` → contributions of ``client``."""
    if isinstance(result, Mapping):
        items = list(result.items())
    elif isinstance(result, tuple) and len(result) == 2:
        items = [(name, result)]
    else:
        raise ContributionError(
            f"stage {name!r} returned {type(result).__name__}; return (rows, values) or a "
            "mapping {dataset: (rows, values)}"
        )
    out = {}
    for ds, pair in items:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ContributionError(
                f"stage {name!r}, dataset {ds!r}: expected (rows, values), got "
                f"{type(pair).__name__}"
            )
        rows, values = pair
        if isinstance(rows, slice):
            rows = range(rows.start or 0, rows.stop, rows.step or 1)
        if isinstance(rows, range):
            rows = np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)
        out[str(ds)] = Contribution(client, rows, np.asarray(values))
    return out


def infer_spec(
    name: str, parts: list[tuple[int, tuple[int, ...], Any, int]], shape: tuple[int, ...] | None
) -> DatasetSpec:
    """A dataset's spec from its contributions' ``(n_rows held, value shape, dtype, max row)``.

    Examples
    --------
    >>> spec = infer_spec("u", [(2, (2, 3), "<f8", 4), (1, (1, 3), "<f4", 1)], None)
    >>> spec.shape, spec.dtype
    ((5, 3), dtype('float64'))
    """
    row_shapes = {tuple(p[1][1:]) for p in parts}
    if len(row_shapes) > 1:
        raise ContributionError(
            f"dataset {name!r}: contributions disagree on the row shape: {sorted(row_shapes)}"
        )
    dtype = np.result_type(*[np.dtype(p[2]) for p in parts])
    n_rows = 1 + max(p[3] for p in parts)
    full = tuple(shape) if shape is not None else (n_rows, *row_shapes.pop())
    return DatasetSpec(name, full, dtype)


def _summary(con: Contribution) -> tuple[int, tuple[int, ...], Any, int]:
    return (
        con.rows.size,
        tuple(con.values.shape),
        con.values.dtype,
        int(con.rows[-1]) if con.rows.size else -1,
    )


def _run(
    opts: StageOptions,
    name: str,
    step: Any,
    cluster: Any,
    contributions: Mapping[str, list[Any]],
) -> Checkpoint:
    """Write one step: infer the specs, then :func:`~orchestrator.engine.stage.write_stage`."""
    # engine.stage loads the planner (Numba, SciPy) and distributed: not on compute workers
    from ..engine.stage import describe, is_future, write_stage

    # one round of small tasks for every remote contribution of every dataset: its rows
    # give the shape here and are handed on, so write_stage does not ask again
    futures = [c for cs in contributions.values() for c in cs if is_future(c)]
    described = iter(describe(cluster, futures, held=True) if futures else [])
    datasets = {}
    for ds, contribs in contributions.items():
        held = [next(described) if is_future(c) else c for c in contribs]
        summaries = [
            (c.rows.size, c.shape, c.dtype, int(c.rows[-1]) if c.rows.size else -1)
            if not isinstance(c, Contribution)
            else _summary(c)
            for c in held
        ]
        spec = infer_spec(ds, summaries, (opts.shapes or {}).get(ds))
        if opts.dtypes and ds in opts.dtypes:
            spec = DatasetSpec(ds, spec.shape, opts.dtypes[ds])
        if opts.specs and ds in opts.specs:
            spec = opts.specs[ds]
        datasets[ds] = (spec, held)
    for ds, spec in (opts.specs or {}).items():  # created, and written by no client
        datasets.setdefault(ds, (spec, []))
    target = opts.path(step, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    res = write_stage(target, datasets, opts.write, cluster=cluster)
    return Checkpoint(res.path, res.manifest, step)


# ------------------------------------------------------------------ plain Python
_DEFAULT: dict[str, Any] = {}
_DEFAULT_LOCK = threading.Lock()


def set_default_cluster(cluster: Any) -> None:
    """Use ``cluster`` (an :class:`~orchestrator.engine.cluster.IOCluster`) for plain-Python stages.

    Without it the first stage starts an embedded local cluster, stopped at exit.

    Examples
    --------
    >>> set_default_cluster(None)  # back to the embedded default
    """
    from ..engine.cluster import IOCluster

    if cluster is not None and not isinstance(cluster, IOCluster):  # "x" was accepted
        raise ContributionError(f"cluster must be an IOCluster or None, got {cluster!r}")
    with _DEFAULT_LOCK:
        _DEFAULT["cluster"] = cluster


def _default_cluster(n_ionodes: int) -> Any:
    with _DEFAULT_LOCK:
        if _DEFAULT.get("cluster") is None:
            cl = local_cluster(n_ionodes=n_ionodes, n_compute=defaults.N_COMPUTE)
            _DEFAULT["cluster"] = cl
            atexit.register(cl.close)
        return _DEFAULT["cluster"]


class _LocalSteps:
    """Contributions of the open steps of one stage in this process, and their futures."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[Any, tuple[dict[int, dict[str, Contribution]], list[Future[Any]]]] = {}

    def add(self, step: Any, client: int, cons: dict[str, Contribution]) -> tuple[Future[Any], int]:
        with self.lock:
            held, futures = self.open.setdefault(step, ({}, []))
            if client in held:
                raise ContributionError(f"step {step!r}: client {client} contributed twice")
            held[client] = cons
            fut: Future[Any] = Future()
            futures.append(fut)
            return fut, len(held)

    def take(self, step: Any) -> tuple[dict[int, dict[str, Contribution]], list[Future[Any]]]:
        with self.lock:
            if step not in self.open:
                raise ContributionError(f"step {step!r} has no contributions to commit")
            return self.open.pop(step)


# ------------------------------------------------------------------ the decorator
class OutputStage:
    """A stage function wrapped by :func:`output_stage` (picklable; ``functools.wraps`` applied)."""

    def __init__(self, func: Callable[..., Any], options: StageOptions) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.options = options
        self.signature = inspect.signature(func)
        params = self.signature.parameters
        if options.step is not None and options.step not in params:
            raise SignatureError(
                f"{func.__qualname__}: no parameter {options.step!r} for the step key; name it "
                "with output_stage(step=...) or pass step=None (one step)"
            )
        client = options.client or next((p for p in CLIENT_PARAMS if p in params), None)
        if client is None or client not in params:
            raise SignatureError(
                f"{func.__qualname__}: no parameter telling which client calls "
                f"(one of {list(CLIENT_PARAMS)}); name it with output_stage(client=...)"
            )
        self.client_param = client
        self._steps = _LocalSteps()

    # pickling: the cluster and the local bookkeeping stay in this process
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["options"] = replace(self.options, cluster=None)
        state.pop("_steps", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._steps = _LocalSteps()

    @property
    def name(self) -> str:
        """The stage's name (the function's)."""
        return str(self.func.__name__)

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, int]:
        """``(step, client)`` of a call with these arguments (the function's defaults apply).

        Examples
        --------
        >>> def save(step, rank):
        ...     return {}
        >>> output_stage(save, target="ckpt/s{step}.h5", clients=4).key((3,), {"rank": 1})
        (3, 1)
        """
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        step = bound.arguments[self.options.step] if self.options.step else 0
        client = bound.arguments[self.client_param]
        if not is_int(client, 0):
            raise ContributionError(
                f"{self.name}: {self.client_param} must be an integer >= 0, got {client!r}"
            )
        return step, int(client)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        step, client = self.key(args, kwargs)
        opts = self.options
        scheduler = opts.scheduler or os.environ.get(SCHEDULER_ENV)
        if dask_plugin.in_dask_task() or (scheduler and opts.cluster is None):
            if opts.clients is None:
                raise ContributionError(
                    f"{self.name}: on Dask or Parsl a step ends when all its calls are in; "
                    "give output_stage(clients=N)"
                )
            where = opts.path(step, self.name)
            base = f"iorch:{self.func.__module__}.{self.func.__qualname__}:{where}"
            try:
                cons = _as_contributions(self.func(*args, **kwargs), client, self.name)
            except BaseException as err:  # the step can never complete: say so to its calls
                dask_plugin.fail(base, client, err, scheduler)
                raise
            return dask_plugin.contribute(
                base,
                client,
                cons,
                opts.clients,
                lambda cl, futures: _run(opts, self.name, step, cl, futures),
                scheduler=scheduler,
                wait=opts.wait,
            )
        cons = _as_contributions(self.func(*args, **kwargs), client, self.name)
        # a snapshot, as h5py's write would be: the caller may reuse its buffers before the
        # step's last call writes them
        cons = {n: Contribution(c.client, c.rows.copy(), c.values.copy()) for n, c in cons.items()}
        fut, count = self._steps.add(step, client, cons)
        if opts.clients is not None and count >= opts.clients:
            self.commit(step)
        return fut

    def commit(self, step: Any = 0) -> Checkpoint:
        """Write a step now with the contributions it has (plain Python; without ``clients=``).

        Examples
        --------
        >>> save.commit(step=3)  # doctest: +SKIP
        Checkpoint(path=PosixPath('ckpt/step3.h5'), step=3)
        """
        held, futures = self._steps.take(step)
        by_dataset: dict[str, list[Any]] = {}
        for c in sorted(held):
            for ds, con in held[c].items():
                by_dataset.setdefault(ds, []).append(con)
        opts = self.options
        try:
            cluster = opts.cluster or _default_cluster(opts.write.n_ionodes)
            ck = _run(opts, self.name, step, cluster, by_dataset)
        except BaseException as err:
            for f in futures:
                f.set_exception(err)
            raise
        for f in futures:
            f.set_result(ck)
        return ck


def output_stage(
    func: Callable[..., Any] | None = None,
    *,
    target: str | None = None,
    clients: int | None = None,
    step: str | None = "step",
    client: str | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    scheduler: str | None = None,
    cluster: Any = None,
    wait: bool = True,
    options: WriteOptions | None = None,
    **changes: Any,
) -> Any:
    """Mark a function whose result is a contribution to a checkpoint (bare or with options).

    Parameters
    ----------
    target : str
        Path template of the checkpoint, with ``{step}`` (and ``{name}``, the
        function's name). Default ``"{name}-step{step}.h5"`` (``.zarr`` for Zarr).
    clients : int
        Calls per step; the step is written when that many have arrived.
        Required on Dask and Parsl; in plain Python, without it, call
        ``stage.commit(step)``.
    options : WriteOptions, optional
        How each step is written (defaults if not given), as in
        :func:`orchestrator.engine.stage.write_stage`; one object can serve
        several stages.
    **changes
        Fields of :class:`~orchestrator.engine.options.WriteOptions` to
        change (``format="zarr"``, ``policy="ecf"``, ``overwrite=True``,
        ``window=…``, ``n_ionodes=`` — the I/O workers of the embedded
        cluster in plain Python, …); any other name is an option of the
        policy. They are checked here, when the function is decorated.
    step, client : str
        Names of the parameters holding the step key (``None``: one step) and
        the calling client's id (default: the first of ``client``, ``rank``,
        ``part``, ``partition``, ``task``).
    shapes : mapping, optional
        Full shape per dataset; by default ``(max row + 1, *row shape)``.
    scheduler : str, optional
        Dask scheduler address or scheduler file to contribute through from
        outside Dask tasks (Parsl workers); default ``$IORCH_SCHEDULER``.
    cluster : IOCluster, optional
        Cluster for plain-Python calls (default: embedded, started once).
    wait : bool
        On Dask/Parsl: whether a call waits for its step's commit (``False``:
        only the last call returns the checkpoint, the others ``None``).

    Returns
    -------
    OutputStage
        Calling it returns a future of the committed checkpoint (plain
        Python) or, inside a Dask task / Parsl app, the checkpoint itself.

    Examples
    --------
    >>> import numpy as np
    >>> @output_stage(target="out/ckpt-{step}.h5", clients=2)
    ... def save(step, rank):
    ...     return np.arange(rank * 4, rank * 4 + 4), np.full(4, float(rank))
    >>> save.__name__, save.options.clients
    ('save', 2)
    >>> futures = [save(0, r) for r in range(2)]  # doctest: +SKIP
    >>> futures[0].result().path  # doctest: +SKIP
    PosixPath('out/ckpt-0.h5')
    """

    def wrap(f: Callable[..., Any]) -> OutputStage:
        if options is not None and not isinstance(options, WriteOptions):
            raise ContributionError(f"options must be a WriteOptions, got {type(options).__name__}")
        base = options or WriteOptions()
        write = base.updated(**changes) if changes else base  # checked when made
        suffix = get_backend(write.format).suffix  # an unknown format is an error here, at once
        template = target or f"{{name}}-step{{step}}{suffix}"
        render_target(template, step=0, name="stage")  # a field it may not use fails here
        opts = StageOptions(
            target=template,
            clients=clients,
            write=write,
            step=step,
            client=client,
            shapes=shapes,
            scheduler=scheduler,
            cluster=cluster,
            wait=wait,
        )
        if clients is not None and not is_int(clients, 1, 2**63):
            raise ContributionError(f"clients must be an integer >= 1, got {clients!r}")
        if not isinstance(wait, bool):  # "no" was taken as True
            raise ContributionError(f"wait must be True or False, got {wait!r}")
        if shapes is not None and (
            not isinstance(shapes, Mapping) or not all(isinstance(k, str) for k in shapes)
        ):
            raise ContributionError(f"shapes must map dataset names to shapes, got {shapes!r}")
        if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
            raise ContributionError(f"scheduler must be an address or a file, got {scheduler!r}")
        return OutputStage(f, opts)

    return wrap(func) if func is not None else wrap
