"""Dask side of stage interception: contributions stay on the worker that computed them.

When a decorated stage function runs inside a Dask task (``Client.submit``,
``Client.map``, ``dask.delayed``) — or in any process that can reach the
orchestrator's scheduler, such as a Parsl worker — its contribution is stored
on a Dask worker and *published* under a name the whole stage agrees on. The
calls of one step count themselves in one atomic step on the scheduler; the last
one becomes the leader: it runs the write stage with the published futures (so
pieces go worker → I/O worker, never through any client process), then hands
the committed checkpoint to the others through a distributed queue. Waiting
tasks secede from their worker's thread pool, so they never block the cut
tasks the leader needs.

Only this module knows Dask's coordination primitives; it is imported lazily.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.errors import ContributionError, StageError

__all__ = ["contribute", "fail", "in_dask_task", "scheduler_client"]

_CLIENTS: dict[str, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def in_dask_task() -> bool:
    """Whether this code runs inside a Dask worker's task.

    Examples
    --------
    >>> in_dask_task()
    False
    """
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def scheduler_client(address: str) -> Any:
    """One Dask client per scheduler address in this process (a Parsl worker reuses it).

    ``address`` is ``tcp://host:port`` or a path to a scheduler file.

    Examples
    --------
    >>> scheduler_client(io.address).id  # doctest: +SKIP
    'Client-...'
    """
    from distributed import Client

    with _CLIENTS_LOCK:
        cl = _CLIENTS.get(address)
        if cl is None or cl.status not in ("running", "connecting"):
            if address.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
                cl = Client(address, set_as_default=False)
            else:
                cl = Client(scheduler_file=address, set_as_default=False)
            _CLIENTS[address] = cl
        return cl


def contribute(
    base: str,
    client_id: int,
    contributions: Mapping[str, Any],
    n_clients: int,
    run_stage: Callable[[Any, dict[str, list[Any]]], Any],
    scheduler: str | None = None,
    timeout: float = 3600.0,
    wait: bool = True,
) -> Any:
    """Hand this call's contributions to the step named ``base``; return its committed result.

    Parameters
    ----------
    base : str
        The step's name, the same in every call of the step.
    client_id : int
    contributions : mapping
        Dataset name → :class:`~orchestrator.contributions.Contribution`.
    n_clients : int
        Calls that make up the step; the last one runs ``run_stage``.
    run_stage : callable
        ``run_stage(io_cluster, {dataset: [futures]})`` → the checkpoint.
    scheduler : str, optional
        Address or scheduler file, when not inside a Dask task.
    wait : bool
        Whether calls that do not lead wait for the commit and return it;
        with ``False`` they return ``None`` at once (a caller that cannot
        afford a blocked slot, such as a Parsl worker, waits elsewhere).

    Examples
    --------
    Called by :class:`~orchestrator.OutputStage` inside a Dask task:

    >>> contribute("iorch:save:ckpt/3.h5", 0, {"u": con}, 4, run)  # doctest: +SKIP
    Checkpoint(path=PosixPath('ckpt/3.h5'), step=3)
    """
    from distributed import Queue, get_client, get_worker, rejoin, secede

    from orchestrator.cluster import IOCluster, discover_workers

    in_task = in_dask_task()
    if in_task:
        client = get_client()
        here = get_worker().address
    elif scheduler:
        client = scheduler_client(scheduler)
        ionodes, compute = discover_workers(client)
        pool = compute or ionodes
        here = pool[client_id % len(pool)]
    else:
        raise RuntimeError("not in a Dask task and no scheduler address given")
    for name, con in contributions.items():
        [fut] = client.scatter([con], workers=[here], hash=False)
        # published: the scheduler keeps it alive after this call returns
        client.publish_dataset(fut, name=f"{base}:{client_id}:{name}", override=True)
    names = sorted(contributions)
    if in_task:
        secede()  # waiting must not hold a thread the leader's cut tasks need
    try:
        # one atomic step on the scheduler: count this call in (or learn of a failure)
        what, ids = client.run_on_scheduler(_arrival(base, client_id, n_clients))
        if what == "failed":
            _each(client.unpublish_dataset, [f"{base}:{client_id}:{n}" for n in names])
            raise StageError(f"{base}: the step cannot be written: {ids}")
        if what == "twice":
            raise ContributionError(f"{base}: client {client_id} contributed twice to this step")
        leader = what == "lead"
        out = Queue(f"{base}:out", client=client)
        if not leader and not wait:
            return None
        if not leader:
            result = out.get(timeout=timeout)
            if isinstance(result, BaseException):
                raise result
            return result
        keys = [f"{base}:{c}:{n}" for n in names for c in sorted(ids)]
        got = _each(client.get_dataset, keys)
        futures = {n: got[i * len(ids) : (i + 1) * len(ids)] for i, n in enumerate(names)}
        try:
            ionodes, compute = discover_workers(client)
            result = run_stage(IOCluster(client, ionodes, compute), futures)
        except BaseException as err:  # every waiting call must learn of the failure
            _each(out.put, [RuntimeError(f"{base}: the stage failed: {err}")]
                  * (n_clients - 1 if wait else 0))  # fmt: skip
            raise
        else:
            _each(out.put, [result] * (n_clients - 1 if wait else 0))
        finally:  # the waiting calls go first; then the contributions are let go
            _each(client.unpublish_dataset, keys)
        return result
    finally:
        if in_task:
            rejoin()


def _each(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``fn`` on every item at once, results in order: each call is a round trip to the
    scheduler, and the client's calls are thread-safe, so n of them take about one."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(16, len(items)), thread_name_prefix="iorch-step") as pool:
        return list(pool.map(fn, items))


def _arrival(base: str, client_id: int, n_clients: int) -> Callable[..., tuple[str, Any]]:
    """The scheduler-side step of a call arriving: ``("wait" | "lead", ids)``,
    ``("failed", why)`` or ``("twice", None)``.

    Run with ``Client.run_on_scheduler``: a plain function runs on the
    scheduler's event loop, so reading and updating the step's entry of its
    metadata store is atomic, in one round trip and without a lock. The
    leader takes the step's calls and leaves the count empty for its next
    use. Defined inside a function so that it travels by value: the
    scheduler need not import this package.

    Examples
    --------
    >>> class Scheduler:
    ...     task_metadata = {}
    >>> s = Scheduler()
    >>> _arrival("step", 1, 2)(dask_scheduler=s), _arrival("step", 0, 2)(dask_scheduler=s)
    (('wait', [1]), ('lead', [1, 0]))
    """

    def arrive(dask_scheduler: Any = None) -> tuple[str, Any]:
        step = dask_scheduler.task_metadata.setdefault(base, {})
        if step.get("failed"):
            return "failed", step["failed"]
        ids = list(step.get("clients", []))
        if client_id in ids:
            return "twice", None
        ids.append(client_id)
        lead = len(ids) == n_clients
        step["clients"] = [] if lead else ids
        return ("lead" if lead else "wait"), ids

    return arrive


def _failure(base: str, why: str) -> Callable[..., list[int]]:
    """The scheduler-side step of a failed call: mark the step failed, return who waits.

    Examples
    --------
    >>> class Scheduler:
    ...     task_metadata = {"step": {"clients": [3]}}
    >>> s = Scheduler()
    >>> _failure("step", "boom")(dask_scheduler=s), s.task_metadata
    ([3], {'step': {'clients': [], 'failed': 'boom'}})
    """

    def mark(dask_scheduler: Any = None) -> list[int]:
        step = dask_scheduler.task_metadata.setdefault(base, {})
        waiting = list(step.get("clients", []))
        step["failed"] = why
        step["clients"] = []
        return waiting

    return mark


def fail(base: str, client_id: int, error: BaseException, scheduler: str | None = None) -> None:
    """A call of step ``base`` failed before contributing: fail the whole step now.

    The calls already waiting get the error instead of waiting for a leader
    that will never come; later calls of the step fail at once; what was
    published for the step is withdrawn.

    Examples
    --------
    >>> fail("iorch:save:ckpt/3.h5", 2, ValueError("bad input"))  # doctest: +SKIP
    """
    from distributed import Queue, get_client

    in_task = in_dask_task()
    if in_task:
        client = get_client()
    elif scheduler:
        client = scheduler_client(scheduler)
    else:
        return
    why = f"client {client_id} failed: {type(error).__name__}: {error}"
    waiting = client.run_on_scheduler(_failure(base, why))
    out = Queue(f"{base}:out", client=client)
    _each(out.put, [RuntimeError(f"{base}: the step cannot be written: {why}")] * len(waiting))
    _each(client.unpublish_dataset,
          [n for n in client.list_datasets() if str(n).startswith(f"{base}:")])  # fmt: skip
