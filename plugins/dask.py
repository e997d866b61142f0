"""Dask side of stage interception: contributions stay on the worker that computed them.

When a decorated stage function runs inside a Dask task (``Client.submit``,
``Client.map``, ``dask.delayed``) — or in any process that can reach the
orchestrator's scheduler, such as a Parsl worker — its contribution is stored
on a Dask worker, and the call hands its key to the step in one round trip to
the scheduler, which counts the call in and holds the key under the step's name
(as a published dataset is held). The last call becomes the leader: it runs the
write stage with the held futures (so pieces go worker → I/O worker, never
through any client process), then hands the committed checkpoint to the others
in one more round trip: the waiting calls wait on the scheduler for the step's
outcome, and all of them get it when it is delivered (a queue put per waiting
call took 25-40 ms for 15 calls, the waiting calls returning one by one).
Calls secede from their worker's thread pool as soon as their function has
returned, so the next task starts at once and the waiting calls never block
the cut tasks the leader needs.

Only this module knows Dask's coordination primitives; it imports ``distributed`` lazily.
"""

from __future__ import annotations

import contextlib
import pickle
import threading
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.engine.cluster import IOCluster, discover_workers, scheduler_address
from orchestrator.engine.security import load_credentials
from orchestrator.errors import ClusterError, ContributionError, StageError

from .steps import _arrival, _deliver, _failure, _outcome, _release

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

    ``address`` is ``tcp://host:port``, ``tls://host:port`` or a path to a
    scheduler file; a ``tls://`` scheduler started by this user's orchestrator
    is reached with the credentials it published
    (:func:`~orchestrator.engine.security.load_credentials`).

    Examples
    --------
    >>> scheduler_client(io.address).id  # doctest: +SKIP
    'Client-...'
    """
    from distributed import Client

    with _CLIENTS_LOCK:
        cl = _CLIENTS.get(address)
        if cl is None or cl.status not in ("running", "connecting"):
            where = address
            if not address.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
                where = scheduler_address(address)
            cl = Client(where, set_as_default=False, security=load_credentials(where))
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
    from distributed import Future, get_client, get_worker, rejoin, secede

    in_task = in_dask_task()
    if in_task:
        client = get_client()
        here = get_worker().address
        # from here on this call only waits on the scheduler: the worker's thread goes to
        # the next task (and to the leader's cut tasks) at once
        secede()
    elif scheduler:
        client = scheduler_client(scheduler)
        ionodes, compute = discover_workers(client)
        pool = compute or ionodes
        here = pool[client_id % len(pool)]
    else:
        raise ClusterError("not in a Dask task and no scheduler address given")
    try:
        names = sorted(contributions)
        # inside a task this stores the values on this worker and tells the scheduler
        scattered = client.scatter([contributions[n] for n in names], workers=[here], hash=False)
        mine = {n: f.key for n, f in zip(names, scattered, strict=True)}
        # one atomic step on the scheduler: the step holds the keys and counts this call in
        # (or tells of a failure)
        what, got, gen = client.run_on_scheduler(
            _arrival(
                base,
                client_id,
                n_clients,
                mine,
                caller=client.id,
                task=_task_key(),
                worker=_worker_ident(),
                waits=wait,
            )
        )
        if what == "failed":
            raise StageError(f"{base}: the step cannot be written: {got}")
        if what == "twice":
            raise ContributionError(f"{base}: client {client_id} contributed twice to this step")
        if what == "rerun":
            raise StageError(
                f"{base}: client {client_id}'s call was run again (its worker died) after "
                f"round {got} of the step had been led; that round's outcome went to its "
                "other calls"
            )
        if what == "wait":
            if not wait:
                return None
            payload = client.run_on_scheduler(_outcome(base, gen, timeout))
            if payload is None:
                raise StageError(f"{base}: no outcome of the step within {timeout} s")
            if isinstance(payload, str):  # told by the scheduler: the leader is gone
                raise StageError(f"{base}: the step cannot be written: {payload}")
            result = pickle.loads(payload)
            if isinstance(result, BaseException):
                raise result
            return result
        keys = [k for held in got.values() for k in held.values()]
        waiting = n_clients - 1 if wait else 0
        try:
            # futures of this client for the held keys: the scheduler knows them in memory
            futures: dict[str, list[Any]] = {
                n: [Future(got[c][n], client) for c in sorted(got)] for n in names
            }
            ionodes, compute = discover_workers(client)
            result = run_stage(IOCluster(client, ionodes, compute), futures)
        except BaseException as err:  # every waiting call must learn of the failure
            with contextlib.suppress(Exception):  # (never hiding the failure itself)
                _deliver_to(
                    client, base, gen, RuntimeError(f"{base}: the stage failed: {err}"), waiting
                )
            raise
        else:
            _deliver_to(client, base, gen, result, waiting)
        finally:  # the waiting calls go first; then the step lets go of the contributions
            client.run_on_scheduler(_release(base, keys, gen))
        return result
    finally:
        if in_task:
            rejoin()


def _deliver_to(client: Any, base: str, gen: int, outcome: Any, waiting: int) -> None:
    """Hand ``outcome`` (a checkpoint or an error) to the ``waiting`` calls of the step's
    round ``gen``, in one round trip; pickled here, so the scheduler need not import us."""
    if not waiting:
        return
    try:
        payload = pickle.dumps(outcome)
    except Exception as err:  # the waiting calls must not wait for what cannot travel
        payload = pickle.dumps(StageError(f"{base}: the step's outcome cannot be sent: {err}"))
    client.run_on_scheduler(_deliver(base, gen, waiting), payload)


def _task_key() -> Any:
    """The Dask key of the task this call runs in (``None`` outside a task): a task that
    Dask runs again after its worker died comes back with the same key."""
    try:
        from distributed import get_worker

        return get_worker().get_current_task()
    except (ImportError, ValueError):
        return None


def _worker_ident() -> tuple[str, str] | None:
    """``(address, instance id)`` of the worker this call runs on (``None`` outside one):
    the instance id is new at every start, so a restart at the same address is another."""
    try:
        from distributed import get_worker

        w = get_worker()
    except (ImportError, ValueError):
        return None
    return (w.address, w.id)


def fail(base: str, client_id: int, error: BaseException, scheduler: str | None = None) -> None:
    """A call of step ``base`` failed before contributing: fail the whole step now.

    The calls already waiting get the error instead of waiting for a leader
    that will never come; later calls of the step fail at once; what was
    published for the step is withdrawn.

    Examples
    --------
    >>> fail("iorch:save:ckpt/3.h5", 2, ValueError("bad input"))  # doctest: +SKIP
    """
    from distributed import get_client

    in_task = in_dask_task()
    if in_task:
        client = get_client()
    elif scheduler:
        client = scheduler_client(scheduler)
    else:
        return
    why = f"client {client_id} failed: {type(error).__name__}: {error}"
    waiting, gen = client.run_on_scheduler(_failure(base, why))
    # (calls made with wait=False are counted too: the error nobody takes stays in the
    # failed step's entry on the scheduler, which is kept anyway to fail later calls)
    _deliver_to(
        client, base, gen, StageError(f"{base}: the step cannot be written: {why}"), waiting
    )
