"""Deaths around a step's lead, inside Dask tasks (``output_stage`` / ``contribute``).

The waiting calls of a step must not wait out their hour when the process
leading the step dies: they fail promptly with the reason, and Dask's re-run
of a dead call fails at once instead of opening a round that never fills. A
worker that dies before the lead only loses its own calls' contributions: Dask
runs those calls again, their new contributions replace the lost ones, and the
step commits complete.
"""

import os
import signal
import time

import h5py
import numpy as np
import pytest
import stage_funcs
from distributed import wait

import orchestrator as orc
from orchestrator.engine import dispatch
from orchestrator.engine.cluster import local_cluster
from orchestrator.errors import StageError

#: a step that hangs instead of failing is a defect; far above any step's time here
WATCHDOG = 120.0


@pytest.fixture
def cluster():
    with local_cluster(n_ionodes=1, n_compute=2) as cl:
        yield cl


def _held(cl, fragment):
    """Calls counted in so far by the open round of the step whose name holds ``fragment``."""

    def count(dask_scheduler=None):
        return sum(
            len(v.get("held", {}))
            for k, v in dask_scheduler.task_metadata.items()
            if fragment in str(k) and isinstance(v, dict)
        )

    return cl.client.run_on_scheduler(count)


def _until(predicate, what):
    deadline = time.monotonic() + WATCHDOG
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def test_the_waiting_calls_fail_promptly_when_the_leader_dies(cluster):
    base = "iorch:test:leader-dies"
    first, second = cluster.compute
    waiting = cluster.client.map(
        stage_funcs.lead_and_die, [base] * 3, range(3), [4] * 3, workers=[first], pure=False
    )
    _until(lambda: _held(cluster, "leader-dies") == 3, "three calls have arrived")
    leader = cluster.client.submit(
        stage_funcs.lead_and_die,
        base,
        3,
        4,
        workers=[second],
        pure=False,
        allow_other_workers=True,
    )
    _done, not_done = wait([*waiting, leader], timeout=WATCHDOG)
    assert not not_done, "calls still waiting after the leader died"
    for f in waiting:
        err = f.exception()
        assert isinstance(err, StageError) and "leading it was lost" in str(err), err
    # Dask ran the leading call again: it fails at once, never leading a step of one call
    assert isinstance(leader.exception(), StageError), leader.exception()


def test_a_call_run_again_after_its_worker_died_replaces_its_lost_contribution(cluster, tmp_path):
    target = tmp_path / "again.h5"
    save = stage_funcs.make_fixed_target_save(str(target), 3)
    first, second = cluster.compute
    early = cluster.client.submit(save, 5, 0, workers=[first], pure=False, allow_other_workers=True)
    _until(lambda: _held(cluster, "again.h5") == 1, "the first call has arrived")
    before = dispatch._live_workers(cluster)[first]
    os.kill(cluster.worker_pids()[first], signal.SIGKILL)  # its contribution dies with it
    # (a call arriving before the scheduler saw the death would lead with the lost
    # contribution: that stage fails, cleanly, and is not what this test is about)
    _until(lambda: dispatch._live_workers(cluster).get(first) != before, "the death is seen")
    # Dask runs call 0 again elsewhere: it counts in again with a new contribution
    rest = cluster.client.map(save, [5, 5], [1, 2], workers=[second], pure=False)
    _done, not_done = wait([early, *rest], timeout=WATCHDOG)
    assert not not_done
    for f in (early, *rest):
        assert f.exception() is None, f.exception()
        assert f.result().path == target
    with h5py.File(target, "r") as h5:
        assert np.array_equal(h5["u"][:], np.full(30, 5.0))


def test_a_stage_over_a_lost_contribution_fails_instead_of_waiting_for_it(cluster, tmp_path):
    """Data scattered to a worker that died is never computed again: the stage must say
    so, not wait for it as for a contribution still being computed."""
    from orchestrator.contributions import Contribution, DatasetSpec
    from orchestrator.engine.stage import write_stage

    first, second = cluster.compute
    rows = np.arange(10)
    kept = cluster.client.scatter(Contribution(0, rows, rows * 1.0), workers=[second])
    doomed = cluster.client.scatter(Contribution(1, rows + 10, rows * 1.0), workers=[first])
    before = dispatch._live_workers(cluster)[first]
    os.kill(cluster.worker_pids()[first], signal.SIGKILL)
    _until(lambda: dispatch._live_workers(cluster).get(first) != before, "the death is seen")
    spec = DatasetSpec("u", (20,), "f8")
    with pytest.raises(StageError, match="lost before the stage could read them"):
        write_stage(tmp_path / "lost.h5", {"u": (spec, [kept, doomed])}, cluster=cluster)
    assert not (tmp_path / "lost.h5").exists()


def test_a_task_calling_a_step_again_or_a_step_submitted_again_is_no_rerun(cluster, tmp_path):
    """Dask's re-run of a dead call has the same task key as its first run; so have a task
    that checkpoints every step of a loop (one long task per rank), and a step submitted
    again with ``pure=True`` (the same keys once the first futures are released): those
    are new calls, and every step commits."""
    target = str(tmp_path / "latest.h5")
    save = stage_funcs.make_fixed_target_save(target, 2)
    loops = cluster.client.map(stage_funcs.rank_loop, [save] * 2, range(2), [3] * 2, pure=False)
    assert cluster.client.gather(loops) == [[0, 1, 2], [0, 1, 2]]
    for _ in range(2):
        futures = cluster.client.map(save, [7, 7], [0, 1])  # pure: the same keys each time
        assert [f.result().step for f in futures] == [7, 7]
        del futures
        _until(lambda: not _held(cluster, "latest.h5"), "the step is over")


def test_a_leaders_death_fails_its_round_only(cluster):
    """Round 0's leader dies while round 1 of the same step name already has a waiting call:
    round 0 fails (its leader's re-run too), round 1 goes on and commits."""
    base = "iorch:test:two-rounds"
    first, second = cluster.compute
    call = stage_funcs.contribute_then
    a = cluster.client.submit(call, base, 0, 2, workers=[first], pure=False)
    _until(lambda: _held(cluster, "two-rounds") == 1, "round 0's first call has arrived")
    lead = cluster.client.submit(
        call, base, 1, 2, 3.0, workers=[second], pure=False, allow_other_workers=True
    )
    _until(lambda: _held(cluster, "two-rounds") == 0, "round 0 is led")
    b = cluster.client.submit(call, base, 0, 2, workers=[first], pure=False)
    _until(lambda: _held(cluster, "two-rounds") == 1, "round 1's first call has arrived")
    _done, not_done = wait([a, lead], timeout=WATCHDOG)
    assert not not_done
    for f in (a, lead):
        assert isinstance(f.exception(), StageError), f.exception()
        assert "leading it was lost" in str(f.exception())
    assert not b.done()  # round 1 waits for its second call, untouched by round 0's failure
    c = cluster.client.submit(call, base, 1, 2, workers=[first], pure=False)
    assert cluster.client.gather([b, c]) == ["committed", "committed"]


def test_a_contribution_the_scheduler_forgot_fails_the_stage_instead_of_waiting(cluster):
    """A future made for a key after its worker died (the leader's futures are made from
    keys) stays pending forever: the stage must count it lost."""
    from distributed import Client, Future

    from orchestrator.contributions import Contribution
    from orchestrator.engine.cluster import IOCluster
    from orchestrator.engine.stage import describe

    first, _ = cluster.compute
    rows = np.arange(10)
    doomed = cluster.client.scatter(Contribution(1, rows, rows * 1.0), workers=[first])
    key = doomed.key
    before = dispatch._live_workers(cluster)[first]
    os.kill(cluster.worker_pids()[first], signal.SIGKILL)
    _until(lambda: dispatch._live_workers(cluster).get(first) != before, "the death is seen")
    # another client (as the leader's worker is) that never knew the key
    with Client(
        cluster.client.scheduler.address, security=cluster.client.security, set_as_default=False
    ) as other:
        late = Future(key, other)
        assert late.status == "pending"
        with pytest.raises(StageError, match="lost before the stage could read them"):
            describe(IOCluster(other, cluster.ionodes, cluster.compute), [late], held=True)


def test_a_stage_over_task_results_lost_with_their_worker_waits_for_dask_to_redo_them(
    cluster, tmp_path
):
    """Unlike scattered data, a task's result lost with its worker is computed again by
    Dask: the stage waits for it (its future reads "lost" meanwhile) and commits."""
    from orchestrator.contributions import DatasetSpec
    from orchestrator.engine.stage import write_stage

    first, _ = cluster.compute
    parts = [
        cluster.client.submit(
            stage_funcs.slow_contribution, r, 1.0, workers=[first], allow_other_workers=True
        )
        for r in range(2)
    ]
    cluster.client.gather(parts)
    before = dispatch._live_workers(cluster)[first]
    os.kill(cluster.worker_pids()[first], signal.SIGKILL)
    _until(lambda: dispatch._live_workers(cluster).get(first) != before, "the death is seen")
    res = write_stage(
        tmp_path / "redo.h5", {"u": (DatasetSpec("u", (20,), "f8"), parts)}, cluster=cluster
    )
    assert np.array_equal(orc.open_checkpoint(res.path)["u"], np.arange(20.0))


def test_a_step_of_one_call_whose_leader_died_is_led_again_by_its_rerun(cluster, tmp_path):
    """Nobody waits for a step of one call: Dask's re-run of it leads again and commits."""
    first, _ = cluster.compute
    call = cluster.client.submit(
        stage_funcs.lead_alone_dying_once,
        "iorch:test:alone",
        str(tmp_path / "died-once"),
        workers=[first],
        allow_other_workers=True,
        pure=False,
    )
    assert call.result(timeout=WATCHDOG) == "committed"
    assert (tmp_path / "died-once").exists()  # the first run did die
