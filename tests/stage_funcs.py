"""Stage functions importable by Dask workers (tests run them inside real tasks)."""

import os

import numpy as np

import orchestrator as orc
from orchestrator.contributions import Contribution


class Trap(np.ndarray):
    """An array that refuses to be unpickled in one process (the test's client process)."""

    def __array_finalize__(self, obj):
        self.forbidden = getattr(obj, "forbidden", None)  # kept through views and sorting

    def __reduce__(self):
        return (_rebuild, (np.asarray(self), self.forbidden))


def _rebuild(arr, forbidden):
    if os.getpid() == forbidden:
        raise RuntimeError("contribution values reached the client process")
    return arr


def trapped(values, forbidden):
    t = np.asarray(values).view(Trap)
    t.forbidden = forbidden
    return t


def make_save(target, clients, forbidden):
    @orc.output_stage(target=target, clients=clients, stripe_bytes=4096)
    def save(step, rank):
        rows = np.arange(rank * 100, (rank + 1) * 100 + 5)
        rows = rows[rows < 100 * clients]
        return {"u": (rows, trapped(rows * 2.0 + step, forbidden))}

    return save


def capture_part(target, rank, clients):
    with orc.capture(target, clients=clients, client=rank, stripe_bytes=4096) as f:
        u = f.create_dataset("u", shape=(40 * clients, 2), dtype="f8")
        u[rank * 40 : (rank + 1) * 40] = rank + 1.0
        f.attrs["clients"] = clients
    return f.checkpoint


def make_flaky(target, clients, bad_rank):
    @orc.output_stage(target=target, clients=clients)
    def flaky(step, rank):
        if rank == bad_rank:
            raise ValueError(f"rank {rank} diverged")
        return np.arange(rank * 10, rank * 10 + 10), np.zeros(10)

    return flaky


def capture_or_fail(target, rank, clients, bad_rank):
    with orc.capture(target, clients=clients, client=rank) as f:
        u = f.create_dataset("u", shape=(10 * clients, 2), dtype="f8")
        if rank == bad_rank:
            raise ValueError(f"rank {rank} diverged")
        u[rank * 10 : (rank + 1) * 10] = 1.0
    return f.checkpoint


def make_nowait_save(target, clients):
    @orc.output_stage(target=target, clients=clients, stripe_bytes=4096, wait=False)
    def save(step, rank):
        return {"u": (np.arange(rank * 10, rank * 10 + 10), np.full(10, float(rank)))}

    return save


def make_fixed_target_save(target, clients):
    @orc.output_stage(target=target, clients=clients, stripe_bytes=4096, overwrite=True)
    def save(step, rank):
        return {"u": (np.arange(rank * 10, rank * 10 + 10), np.full(10, float(step)))}

    return save


def lead_and_die(base, rank, clients):
    """A call of step ``base`` whose leading (last) call kills its own worker mid-stage."""
    from orchestrator.plugins import dask as dask_plugin

    from orchestrator.contributions import Contribution

    rows = np.arange(rank * 10, rank * 10 + 10)

    def die(cluster, futures):  # the hook contribute() runs the stage through
        os._exit(1)

    cons = {"u": Contribution(rank, rows, rows * 1.0)}
    return dask_plugin.contribute(base, rank, cons, clients, die)


def contribute_then(base, rank, clients, die_after=None):
    """A call of step ``base`` whose stage, when this call leads, returns "committed" — or,
    with ``die_after`` seconds, kills its own worker by then."""
    import time

    from orchestrator.plugins import dask as dask_plugin

    from orchestrator.contributions import Contribution

    rows = np.arange(rank * 10, rank * 10 + 10)

    def stage(cluster, futures):
        if die_after is not None:
            time.sleep(die_after)
            os._exit(1)
        return "committed"

    cons = {"u": Contribution(rank, rows, rows * 1.0)}
    return dask_plugin.contribute(base, rank, cons, clients, stage, timeout=WAIT_AT_MOST)


#: a call's longest wait for its step in these tests: far above any step's time here
WAIT_AT_MOST = 120.0


def rank_loop(save, rank, steps):
    """One long-running task per rank that checkpoints every step (as a simulation does)."""
    return [save(step, rank).step for step in range(steps)]


def slow_contribution(rank, seconds):
    """A task's contribution that takes ``seconds`` to compute."""
    import time

    time.sleep(seconds)
    rows = np.arange(rank * 10, rank * 10 + 10)
    return Contribution(rank, rows, rows * 1.0)


def lead_alone_dying_once(base, marker):
    """The one call of a step; its first run kills its worker while it leads, its re-run
    (``marker`` exists by then) returns "committed"."""
    from orchestrator.plugins import dask as dask_plugin

    rows = np.arange(10)

    def stage(cluster, futures):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return "committed"

    cons = {"u": Contribution(0, rows, rows * 1.0)}
    return dask_plugin.contribute(base, 0, cons, 1, stage, timeout=WAIT_AT_MOST)
