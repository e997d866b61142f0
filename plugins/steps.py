"""The scheduler side of a step: the functions its calls run on the Dask scheduler.

Each is made by a function here and runs with ``Client.run_on_scheduler``
(:mod:`orchestrator.plugins.dask` calls them): a plain function runs on the
scheduler's event loop, so each reads and updates the step's entry of the
scheduler's metadata store (``task_metadata[base]``) atomically, in one round
trip, without a lock. They are nested functions, so they travel by value: the
scheduler need not import this package.

A step's entry: ``round`` (steps of this name led before), ``held`` and
``calls`` (the open round's calls: their keys, and their task, task state,
worker and whether they wait), ``led`` (the last led round's calls, to know
a call Dask runs again), ``leaders`` (a led round's leader and keys, until it
is done), ``out`` and ``extra`` (each round's outcome and its readers),
``failed`` (a call failed: the step cannot be written).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CLIENT_GRACE", "LED_KEPT"]


def _holder(base: str) -> str:
    """The scheduler-side name that keeps a step's contributions alive until it is written."""
    return f"iorch-step:{base}"


#: calls of led rounds remembered per step name (their task, to know Dask's re-run of one):
#: a bound for a step name used for many rounds
LED_KEPT = 10_000

#: seconds a leader's client (outside a worker) may stay disconnected before its step's
#: waiting calls give up on it: Dask clients reconnect after a short network outage
CLIENT_GRACE = 10.0


def _helpers() -> dict[str, Callable[..., Any]]:
    """Scheduler-side helpers shared by the step's functions. Nested functions: they
    travel by value with the functions that use them (the scheduler need not import us).

    A round's outcome box: ``event``, ``payload``, ``expected`` (readers), ``taken`` and
    ``gone`` (readers that took it or timed out); ``extra[gen]`` counts readers added
    before the outcome is known.
    """

    def box_of(step: dict[str, Any], gen: int) -> dict[str, Any]:
        import asyncio

        outs = step.setdefault("out", {})
        return outs.setdefault(gen, {"event": asyncio.Event(), "taken": 0, "gone": 0})

    def add_reader(step: dict[str, Any], gen: int) -> None:
        # one more call takes round gen's outcome: a call run again after its worker died
        # (its first run's wait still runs here and takes the outcome too)
        box = step.get("out", {}).get(gen)
        if box is not None and "expected" in box:
            box["expected"] += 1
        else:
            extra = step.setdefault("extra", {})
            extra[gen] = extra.get(gen, 0) + 1

    def settle(step: dict[str, Any], gen: int, box: dict[str, Any]) -> None:
        if "expected" in box and box["taken"] + box["gone"] >= box["expected"]:
            if step.get("out", {}).get(gen) is box:  # (not a box opened since)
                del step["out"][gen]

    def end_round(step: dict[str, Any], gen: int, payload: Any, readers: float) -> None:
        box = box_of(step, gen)
        if "expected" in box:  # the round's first outcome stands (two calls that failed)
            return
        box["payload"] = payload
        box["expected"] = readers + step.get("extra", {}).pop(gen, 0)
        box["event"].set()
        settle(step, gen, box)

    def let_go(dask_scheduler: Any, holder: str, keys: list[Any]) -> None:
        if keys and holder in dask_scheduler.clients:
            dask_scheduler.client_releases_keys(keys=keys, client=holder)

    def worker_alive(dask_scheduler: Any, ident: tuple[str, str]) -> bool:
        ws = dask_scheduler.workers.get(ident[0])
        return ws is not None and ws.server_id == ident[1]

    return {
        "box_of": box_of,
        "add_reader": add_reader,
        "settle": settle,
        "end_round": end_round,
        "let_go": let_go,
        "worker_alive": worker_alive,
    }


def _arrival(
    base: str,
    client_id: int,
    n_clients: int,
    keys: dict[str, Any],
    caller: str | None = None,
    task: Any = None,
    worker: tuple[str, str] | None = None,
    waits: bool = True,
) -> Callable[..., tuple[str, Any, int]]:
    """The scheduler-side step of a call arriving with the keys of its contributions.

    Returns ``(what, detail, round)``: ``("wait", None, r)``,
    ``("lead", {client: {dataset: key}}, r)``, ``("failed", why, r)``,
    ``("twice", None, r)`` or ``("rerun", led_round, r)``, where ``r`` is the
    round whose outcome the call takes (rounds count the steps of this name
    led before; round ``r``'s outcome is handed to its waiting calls, never to
    a later step's). Run with ``Client.run_on_scheduler``: a plain function
    runs on the scheduler's event loop, so reading and updating the step's
    entry of its metadata store is atomic, in one round trip and without a
    lock. The step holds the keys under its own name (as a published dataset
    would be held, without a round trip per dataset), so they outlive the call
    that scattered them; the leader takes the step's calls and leaves the entry
    empty for its next use. Defined inside a function so that it travels by
    value: the scheduler need not import this package.

    Dask runs a task again when the worker running it dies. Such a call — the
    same task state (``task`` key) with a new run id; not a task that calls the
    step again (same run id), nor a new submission under the same key (another
    task state) — never opens a new round:

    - before the lead its first contributions died with the worker (held
      contributions no longer in memory are dropped at every arrival, so a
      round never leads with one): it counts in anew and the step goes on. A
      dropped call that Dask will not run again (made outside a task, or its
      task gone) fails the step;
    - after the lead it takes that round's outcome while the round is still
      open, and gets ``"rerun"`` once it is over.

    The leader's worker (or, outside a worker, its Dask client ``caller``) and
    the round's keys are noted until the leader lets go of them
    (:func:`_release`): the waiting calls watch it (:func:`_outcome`).

    Examples
    --------
    >>> class Held:
    ...     state = "memory"
    >>> class Scheduler:
    ...     task_metadata = {}
    ...     tasks = {k: Held() for k in ("k0", "k1", "k2", "k3")}
    ...     workers = {}
    ...     def client_desires_keys(self, keys, client): pass
    >>> s = Scheduler()
    >>> _arrival("step", 1, 2, {"u": "k1"})(dask_scheduler=s)
    ('wait', None, 0)
    >>> _arrival("step", 0, 2, {"u": "k0"})(dask_scheduler=s)
    ('lead', {1: {'u': 'k1'}, 0: {'u': 'k0'}}, 0)
    >>> _arrival("step", 0, 2, {"u": "k2"})(dask_scheduler=s)  # the step's next round
    ('wait', None, 1)
    >>> _arrival("step", 0, 2, {"u": "k3"})(dask_scheduler=s)
    ('twice', None, 1)
    """

    holder = _holder(base)  # values in the closure: the scheduler need not import us
    h = _helpers()
    live_states = ("released", "waiting", "queued", "processing", "no-worker")

    def in_memory(dask_scheduler: Any, held_keys: dict[str, Any]) -> bool:
        for key in held_keys.values():
            ts = dask_scheduler.tasks.get(key)
            if ts is None or ts.state != "memory":
                return False
        return True

    def arrive(dask_scheduler: Any = None) -> tuple[str, Any, int]:
        import weakref

        step = dask_scheduler.task_metadata.setdefault(base, {})
        gen = int(step.get("round", 0))
        if step.get("failed"):
            return "failed", step["failed"], gen
        ts = dask_scheduler.tasks.get(task) if task is not None else None
        first = step.get("led", {}).get(task) if task is not None else None
        # a re-run is the same task state (a weak reference: never kept alive here) with a
        # new run id; a task calling the step again keeps its run id, a new submission
        # under the same key is another task state
        if (
            first is not None
            and ts is not None
            and first[1] is not None
            and first[1]() is ts
            and first[2] != ts.run_id
        ):
            led_gen = first[0]
            leader = step.get("leaders", {}).get(led_gen)
            if leader is not None and leader.get("task") == task and n_clients == 1:
                # the leader of a step of one call, run again: nobody waits for its round,
                # so it lets go of it and leads a new one, as its first run did
                del step["leaders"][led_gen]
                h["let_go"](dask_scheduler, holder, leader["keys"])
            elif leader is not None or led_gen in step.get("out", {}):
                if waits:
                    h["add_reader"](step, led_gen)
                return "wait", None, led_gen
            else:
                return "rerun", led_gen, gen
        held = dict(step.get("held", {}))
        calls = dict(step.get("calls", {}))
        for c in [c for c in held if not in_memory(dask_scheduler, held[c])]:
            h["let_go"](dask_scheduler, holder, list(held.pop(c).values()))
            rec = calls.pop(c, None)  # (task, its task state (weak), run id, waits)
            back = rec is not None and rec[0] is not None and rec[1] is not None
            if back:
                now = dask_scheduler.tasks.get(rec[0])
                back = now is not None and rec[1]() is now and now.state in live_states
            if not back:
                why = f"the contributions of client {c} were lost (their worker died)"
                step["failed"], step["held"], step["calls"] = why, {}, {}
                h["let_go"](dask_scheduler, holder, [k for x in held.values() for k in x.values()])
                h["end_round"](step, gen, why, float("inf"))  # kept: late calls find it
                return "failed", why, gen
            if rec[3]:  # its first run's wait still takes the round's outcome, and so will it
                h["add_reader"](step, gen)
        if client_id in held:
            return "twice", None, gen
        dask_scheduler.client_desires_keys(keys=list(keys.values()), client=holder)
        held[client_id] = keys
        ref = None if ts is None else weakref.ref(ts)
        calls[client_id] = (task, ref, None if ts is None else ts.run_id, waits)
        lead = len(held) == n_clients
        step["held"] = {} if lead else held
        step["calls"] = {} if lead else calls
        if lead:
            step["round"] = gen + 1
            # the led rounds' calls are remembered (the last LED_KEPT), to know a re-run
            led = step.setdefault("led", {})
            for r in calls.values():
                if r[0] is not None:
                    led.pop(r[0], None)  # (re-inserted: the oldest go first below)
                    led[r[0]] = (gen, r[1], r[2])
            while len(led) > LED_KEPT:
                del led[next(iter(led))]
            round_keys = [k for x in held.values() for k in x.values()]
            leaders = step.setdefault("leaders", {})
            leaders[gen] = {"worker": worker, "client": caller, "keys": round_keys, "task": task}
        return ("lead", held, gen) if lead else ("wait", None, gen)

    return arrive


def _outcome(base: str, gen: int, timeout: float, poll: float = 0.5) -> Callable[..., Any]:
    """The scheduler-side wait of a call for its step's outcome (pickled bytes; None
    after ``timeout`` seconds). All waiting calls wake when it is delivered.

    Every ``poll`` seconds the wait looks whether the leader is still there:
    its worker instance (a leader inside a task), or its Dask client,
    disconnected for at most :data:`CLIENT_GRACE` seconds (a leader outside
    one). When it is gone, round ``gen`` fails — its held keys are let go of
    and every waiting call gets the reason (a ``str``) instead of waiting out
    ``timeout`` — and the step's later rounds are untouched.

    Examples
    --------
    >>> import asyncio
    >>> class Scheduler:
    ...     task_metadata = {}
    >>> s = Scheduler()
    >>> async def both():
    ...     waiting = asyncio.ensure_future(_outcome("step", 0, 5.0)(dask_scheduler=s))
    ...     await asyncio.sleep(0)
    ...     _deliver("step", 0, 1)(b"done", dask_scheduler=s)
    ...     return await waiting
    >>> asyncio.run(both()), s.task_metadata  # the last to take it removes it
    (b'done', {'step': {'out': {}}})
    """

    holder = _holder(base)
    h = _helpers()

    def gone(dask_scheduler: Any, leader: dict[str, Any], now: float) -> bool:
        if leader["worker"] is not None:
            return not h["worker_alive"](dask_scheduler, leader["worker"])
        if leader["client"] in dask_scheduler.clients:
            leader.pop("absent", None)
            return False
        return now - leader.setdefault("absent", now) > CLIENT_GRACE

    async def take(dask_scheduler: Any = None) -> bytes | str | None:
        import asyncio

        step = dask_scheduler.task_metadata.setdefault(base, {})
        box = h["box_of"](step, gen)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        payload: bytes | str | None = None
        while True:
            left = deadline - loop.time()
            try:
                await asyncio.wait_for(box["event"].wait(), max(0.0, min(left, poll)))
            except TimeoutError:
                leader = step.get("leaders", {}).get(gen)
                if leader is not None and gone(dask_scheduler, leader, loop.time()):
                    # nobody will deliver: the round fails, and lets go of what it held
                    del step["leaders"][gen]
                    h["let_go"](dask_scheduler, holder, leader["keys"])
                    why = "the call leading it was lost (its worker or process died)"
                    h["end_round"](step, gen, why, float("inf"))  # kept: late calls find it
                    continue
                if left > poll:
                    continue
                box["gone"] += 1  # one call fewer to hand it to
                break
            else:
                box["taken"] += 1
                payload = box["payload"]
                break
        h["settle"](step, gen, box)
        return payload

    return take


def _deliver(base: str, gen: int, waiting: int) -> Callable[..., None]:
    """The scheduler-side hand-over of round ``gen``'s outcome (pickled, the function's
    argument, so the scheduler's log of run functions does not keep it) to ``waiting`` calls
    (and to calls run again after their worker died, counted in by :func:`_arrival`).

    Examples
    --------
    >>> class Scheduler:
    ...     task_metadata = {}
    >>> s = Scheduler()
    >>> _deliver("step", 0, 0)(b"done", dask_scheduler=s)  # nobody waits: nothing is kept
    >>> s.task_metadata
    {'step': {'out': {}}}
    """

    h = _helpers()

    def deliver(payload: bytes, dask_scheduler: Any = None) -> None:
        step = dask_scheduler.task_metadata.setdefault(base, {})
        h["end_round"](step, gen, payload, waiting)

    return deliver


def _release(base: str, keys: list[Any], gen: int = 0) -> Callable[..., None]:
    """The scheduler-side step that lets go of round ``gen``'s held contributions (the
    leader is done: the waiting calls stop watching it).

    Examples
    --------
    >>> class Scheduler:
    ...     clients = {}
    ...     task_metadata = {"step": {"leaders": {0: {"keys": ["k0"]}}}}
    >>> s = Scheduler()
    >>> _release("step", ["k0"])(dask_scheduler=s)  # nothing held: nothing to do
    >>> s.task_metadata
    {'step': {'leaders': {}}}
    """

    holder = _holder(base)
    h = _helpers()

    def release(dask_scheduler: Any = None) -> None:
        step = dask_scheduler.task_metadata.get(base, {})
        step.get("leaders", {}).pop(gen, None)
        h["let_go"](dask_scheduler, holder, keys)

    return release


def _failure(base: str, why: str) -> Callable[..., tuple[int, int]]:
    """The scheduler-side step of a failed call: mark the step failed, let go of what it
    holds, return how many calls wait and the round they wait in.

    Examples
    --------
    >>> class Scheduler:
    ...     task_metadata = {"step": {"held": {3: {"u": "k3"}}}}
    ...     clients = {}
    >>> s = Scheduler()
    >>> _failure("step", "boom")(dask_scheduler=s), s.task_metadata
    ((1, 0), {'step': {'held': {}, 'failed': 'boom'}})
    """

    holder = _holder(base)
    h = _helpers()

    def mark(dask_scheduler: Any = None) -> tuple[int, int]:
        step = dask_scheduler.task_metadata.setdefault(base, {})
        held = step.get("held", {})
        h["let_go"](dask_scheduler, holder, [k for ks in held.values() for k in ks.values()])
        step["failed"] = why
        step["held"] = {}
        return len(held), int(step.get("round", 0))

    return mark
