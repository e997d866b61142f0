"""Pictures people would rather look at than read: Gantt charts and sweep plots.

matplotlib is imported lazily (inside the functions), with the
non-interactive Agg backend, so importing :mod:`orchestrator` stays cheap
and plots work on machines without a screen.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InputError
from .files import atomic_path
from .plan import Plan

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["check_figure_path", "close", "gantt", "interval_map", "realized_gantt", "sweep_plot"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _finish(fig: Figure, path: str | os.PathLike[str] | None) -> Figure:
    """Lay out ``fig`` and, if asked, save it as a PNG (written aside, then renamed)."""
    fig.tight_layout()
    if path is not None:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110)
    return fig


def check_figure_path(path: str | os.PathLike[str], what: str) -> None:
    """Refuse a figure path whose suffix Matplotlib cannot write, before any work is done.

    Examples
    --------
    >>> check_figure_path("g.png", "--gantt")
    >>> check_figure_path("g.txt", "--gantt")
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: --gantt g.txt: '.txt' is not a figure format; use one of ...
    """
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if suffix not in known:
        raise InputError(
            f"{what} {os.fspath(path)}: '.{suffix}' is not a figure format; use one of "
            f"{', '.join('.' + k for k in sorted(known))}"
        )


def close(fig: Figure) -> None:
    """Release a figure returned by the functions here (pyplot keeps them alive otherwise).

    Examples
    --------
    >>> fig = sweep_plot([1, 2], {"ecf": [3.0, 4.0]}, "x", "y", "t")
    >>> close(fig)
    """
    _pyplot().close(fig)


def gantt(
    plan: Plan,
    by: str = "ionode",
    path: str | os.PathLike[str] | None = None,
    title: str | None = None,
    max_units: int = 20000,
) -> Figure:
    """Draw a plan as a Gantt chart: one row per I/O node (or client), one bar per unit.

    Bars are coloured by the other endpoint (client when rows are I/O
    nodes), so contention and idle gaps stand out. Plans with more than
    ``max_units`` units are drawn from their first ``max_units`` units in
    start order (the title says so).

    Parameters
    ----------
    plan : Plan
    by : {"ionode", "client"}
        What the rows are.
    path : path, optional
        Where to save a PNG; the figure is returned either way.
    title : str, optional
    max_units : int

    Examples
    --------
    >>> import orchestrator as orc
    >>> from orchestrator.plots import gantt
    >>> plan = orc.schedule(orc.TransferSet([0, 0, 1, 1], [0, 1, 1, 2], [30, 10, 10, 20]), "ecf")
    >>> fig = gantt(plan)
    >>> len(fig.axes[0].collections)  # one row of bars per busy I/O node
    3
    >>> close(fig)
    """
    if by not in ("ionode", "client"):
        raise InputError(f"by must be 'ionode' or 'client', got {by!r}")
    plt = _pyplot()
    rows = plan.ionode if by == "ionode" else plan.client
    colour_key = plan.client if by == "ionode" else plan.ionode
    n_rows = plan.transfers.n_ionodes if by == "ionode" else plan.transfers.n_clients
    n_colours = plan.transfers.n_clients if by == "ionode" else plan.transfers.n_ionodes
    units = np.argsort(plan.start, kind="stable")
    clipped = units.size > max_units
    units = units[:max_units]
    cmap = plt.get_cmap("tab20" if n_colours <= 20 else "viridis")
    fig, ax = plt.subplots(figsize=(9, max(2.0, min(12.0, 0.35 * n_rows + 1.2))))
    for r in range(n_rows):
        mine = units[rows[units] == r]
        if mine.size == 0:
            continue
        spans = list(zip(plan.start[mine], plan.durations[mine], strict=True))
        shades = [
            cmap(int(k) % 20 if n_colours <= 20 else int(k) / max(1, n_colours - 1))
            for k in colour_key[mine]
        ]
        ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=shades, edgecolor="black", linewidth=0.3)
    ax.set_ylim(-0.6, n_rows - 0.4)
    ax.set_xlim(0, plan.makespan * 1.01)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("I/O node" if by == "ionode" else "client")
    if n_rows <= 32:
        ax.set_yticks(range(n_rows))
    ax.axvline(plan.lower_bound, color="red", linestyle="--", linewidth=1, label="lower bound")
    handles, _ = ax.get_legend_handles_labels()
    if n_colours <= 12:
        from matplotlib.patches import Patch

        other = "client" if by == "ionode" else "I/O node"
        handles += [Patch(color=cmap(k), label=f"{other} {k}") for k in range(n_colours)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    head = (
        title or f"{plan.policy}: makespan {plan.makespan:.4g} s = {plan.ratio:.3f} x lower bound"
    )
    if clipped:
        head += f" (first {max_units} of {plan.n_units} units)"
    ax.set_title(head, fontsize=10)
    return _finish(fig, path)


def sweep_plot(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str,
    path: str | os.PathLike[str] | None = None,
) -> Figure:
    """Line plot of one metric per policy along a sweep.

    Examples
    --------
    >>> from orchestrator.plots import sweep_plot
    >>> fig = sweep_plot([8, 16], {"ecf": [1.0, 2.0], "hdf": [0.5, 0.7]}, "I/O nodes", "MB/s", "t")
    >>> len(fig.axes[0].lines)
    2
    >>> close(fig)
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colours = plt.get_cmap("tab20").colors
    markers = "osD^vP*Xh<>p"
    for i, (name, ys) in enumerate(series.items()):
        ax.plot(
            list(x),
            list(ys),
            marker=markers[i % len(markers)],
            label=name,
            color=colours[(2 * i) % 20 + (i // 10) % 2],
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return _finish(fig, path)


def realized_gantt(
    plan: Plan,
    unit: Any,
    ionode: Any,
    start: Any,
    end: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    began: Any = None,
    flush_start: Any = None,
    flush_end: Any = None,
) -> Figure:
    """Planned (top) and realized (bottom) Gantt charts of a dispatched stage, per I/O node.

    ``unit, ionode, start, end`` are the writes of a dispatch trace
    (:meth:`orchestrator.engine.trace.Trace.writes`); bars are coloured by
    client. ``began``, ``flush_start`` and ``flush_end`` (one per I/O node,
    the trace's fields of those names) complete the realized row: grey from
    the node's start (or its first write, if a source began before the
    node's task) to its flush (fetching, or waiting for bytes), the
    writes on it, and the flush (fsync) in black. The realized title's
    makespan is then the trace's (:attr:`~orchestrator.engine.trace.Trace.makespan`),
    the figure a stage's results report. Both panels share the time axis.

    Examples
    --------
    >>> import numpy as np, orchestrator as orc
    >>> ts = orc.TransferSet([0, 1], [0, 0], [2, 3])
    >>> plan = orc.schedule(ts, "ecf", cost=orc.CostModel(1.0, 1.0))
    >>> fig = realized_gantt(plan, [0, 1], [0, 0], [0.5, 2.5], [2.0, 5.5],
    ...                      began=[0.0], flush_start=[5.5], flush_end=[6.0])
    >>> fig.axes[1].get_title()
    'ecf realized: makespan 6 s (grey: fetching or waiting, black: fsync)'
    >>> close(fig)
    """
    plt = _pyplot()
    unit, ionode = np.asarray(unit), np.asarray(ionode)
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    n_rows = plan.transfers.n_ionodes
    n_clients = plan.transfers.n_clients
    node = [
        None if a is None else np.asarray(a, dtype=float).reshape(-1)
        for a in (began, flush_start, flush_end)
    ]
    for name, a in zip(("began", "flush_start", "flush_end"), node, strict=True):
        if a is not None and a.size != n_rows:
            raise InputError(f"{name} must hold one time per I/O node ({n_rows}), got {a.size}")
    t_began, t_flush0, t_flush1 = node
    cmap = plt.get_cmap("tab20" if n_clients <= 20 else "viridis")

    def colour(c: int) -> Any:
        return cmap(c % 20 if n_clients <= 20 else c / max(1, n_clients - 1))

    fig, axes = plt.subplots(
        2, 1, sharex=True, figsize=(9, 2 * max(2.0, min(6.0, 0.35 * n_rows + 1.2)))
    )
    panels = (
        (
            "planned",
            plan.order,
            plan.ionode[plan.order],
            plan.start[plan.order],
            plan.end[plan.order],
        ),
        ("realized", unit, ionode, start, end),
    )
    for ax, (label, units, rows, s0, s1) in zip(axes, panels, strict=True):
        realized = label == "realized"
        first, last = (float(s0.min()), float(s1.max())) if len(s1) else (0.0, 0.0)
        for r in range(n_rows):
            if realized and t_began is not None:
                # the node's whole life in the stage: the gaps between its writes are its
                # fetches and waits, which the stage's write time counts. Sources handed
                # their first writes ahead may start before the node's task does
                go = min(float(t_began[r]), float(s0[rows == r].min(initial=np.inf)))
                stop = t_flush0[r] if t_flush0 is not None else s1[rows == r].max(initial=go)
                ax.broken_barh([(go, stop - go)], (r - 0.4, 0.8), facecolors="0.85")
                first = min(first, go)
            mine = rows == r
            spans = list(zip(s0[mine], (s1 - s0)[mine], strict=True))
            shades = [colour(int(plan.client[u])) for u in np.asarray(units)[mine]]
            # realized: one bar per write, often many and tiny: outlines would paint them black
            ax.broken_barh(
                spans,
                (r - 0.4, 0.8),
                facecolors=shades,
                edgecolor="black",
                linewidth=0.0 if realized else 0.3,
            )
            if realized and t_flush0 is not None and t_flush1 is not None:
                ax.broken_barh(
                    [(t_flush0[r], t_flush1[r] - t_flush0[r])], (r - 0.4, 0.8), facecolors="black"
                )
                last = max(last, float(t_flush1[r]))
        ax.set_ylim(-0.6, n_rows - 0.4)
        ax.set_ylabel("I/O node")
        if n_rows <= 32:
            ax.set_yticks(range(n_rows))
        span = last - min(0.0, first) if len(s1) else 0.0
        head = f"{plan.policy} {label}: makespan {span:.4g} s"
        if realized and t_began is not None:
            head += " (grey: fetching or waiting, black: fsync)"
        ax.set_title(head, fontsize=10)
    axes[1].set_xlabel("time (s)")
    return _finish(fig, path)


def interval_map(
    writers: Mapping[str, Any],
    n_writers: int,
    path: str | os.PathLike[str] | None = None,
    title: str = "writer of each row",
    max_columns: int = 4000,
) -> Figure:
    """One band per assignment: the writer of every row in storage order, a colour per writer.

    Long runs of one colour are long intervals (contiguous writes). Rows are
    drawn at most ``max_columns`` wide, so a band of a large mesh shows one
    writer per bin (the writer of the bin's first row) and the stated count of
    intervals comes from the full array.

    Examples
    --------
    >>> fig = interval_map({"metis": [0, 1, 0, 1], "idg": [0, 0, 1, 1]}, 2)
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['metis: 4 intervals', 'idg: 2 intervals']
    >>> close(fig)
    """
    plt = _pyplot()
    names = list(writers)
    arrays = [np.asarray(writers[m], dtype=np.int64) for m in names]
    n = max((a.size for a in arrays), default=0)
    step = max(1, -(-n // max_columns))
    image = np.stack([a[::step] for a in arrays]) if arrays else np.zeros((0, 0), np.int64)
    runs = [int(1 + np.count_nonzero(a[1:] != a[:-1])) if a.size else 0 for a in arrays]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(names) + 1.4))
    cmap = plt.get_cmap("tab20" if n_writers <= 20 else "turbo", max(n_writers, 1))
    ax.imshow(
        image,
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        vmin=-0.5,
        vmax=n_writers - 0.5,
        extent=(0, n, len(names) - 0.5, -0.5),
    )
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([f"{m}: {r:,} intervals" for m, r in zip(names, runs, strict=True)])
    ax.set_xlabel(f"row (storage order){f', one column per {step} rows' if step > 1 else ''}")
    ax.set_title(title, fontsize=10)
    return _finish(fig, path)
