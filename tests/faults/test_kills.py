"""SIGKILL of an I/O worker or a compute worker at seeded random points of a stage.

Ordered (``ms-ecf``), block (``uar``) and decentralized (``first-ios``)
policies, 8 kill points each. After each kill the stage has either failed
with a :class:`~orchestrator.errors.StageError` — promptly, not after a
cascade of cancellations — and left no output, or it had already committed a
complete checkpoint; nothing temporary remains, and the next stage on the
same cluster (its nannies restart the killed worker) works.
"""

import os
import signal
import threading
import time

import numpy as np
import pytest

import orchestrator as orc
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.cluster import local_cluster
from orchestrator.errors import StageError

POLICIES = {"ms-ecf": 11, "uar": 12, "first-ios": 13}  # policy -> seed of its kill points
POINTS = 8
#: a stage that hangs instead of failing is a defect; far above any stage's time here
WATCHDOG = 120.0


def _stage(seed=0, n=1 << 20, clients=6, run=128):
    rng = np.random.default_rng(seed)
    owner = np.repeat(rng.integers(0, clients, -(-n // run)), run)[:n]
    spec = DatasetSpec("u", (n, 8), "f8")
    parts = []
    for c in range(clients):
        rows = np.flatnonzero(owner == c)
        parts.append(Contribution(c, rows, np.repeat(rows[:, None] * 1.0, 8, axis=1)))
    return {"u": (spec, parts)}


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=2, n_compute=2) as cl:
        yield cl


def _settle(cl):
    """Wait until the nannies have restarted every killed worker."""
    cl.client.wait_for_workers(4, timeout=WATCHDOG)
    deadline = time.monotonic() + WATCHDOG
    while time.monotonic() < deadline:
        cl.refresh()
        if len(cl.ionodes) == 2 and len(cl.compute) == 2:
            return
        time.sleep(0.2)
    raise AssertionError("the killed worker did not come back")


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_killed_worker_fails_the_stage_cleanly_or_not_at_all(cluster, tmp_path, policy):
    rng = np.random.default_rng(POLICIES[policy])
    datasets = _stage()
    want = datasets["u"][1][0]
    # kill points fall inside the stage: spread over the time one takes here, now — a warm
    # one: the first compiles the policy's kernels on a fresh clone (its span put every kill
    # after the stages that followed, which all committed)
    for _ in range(2):
        t0 = time.monotonic()
        orc.write_stage(
            tmp_path / "first.h5",
            datasets,
            policy=policy,
            cluster=cluster,
            stripe_bytes=65536,
            overwrite=True,
        )
        span = time.monotonic() - t0
    outcomes = []
    for point in range(POINTS):
        _settle(cluster)
        kind = ["io", "compute"][point % 2]
        victim = (cluster.ionodes if kind == "io" else cluster.compute)[int(rng.integers(0, 2))]
        pid = cluster.worker_pids()[victim]
        delay = float(rng.uniform(0.05, 0.9)) * span
        target = tmp_path / f"k-{point}.h5"
        killer = threading.Timer(delay, os.kill, (pid, signal.SIGKILL))
        t0 = time.monotonic()
        killer.start()
        try:
            orc.write_stage(target, datasets, policy=policy, cluster=cluster, stripe_bytes=65536)
            outcomes.append("committed")
        except StageError as err:
            outcomes.append("failed")
            assert "died" in str(err), err
        finally:
            killer.join()
        assert time.monotonic() - t0 < WATCHDOG, f"{kind} kill at {delay:.2f} s: stage hung"
        left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
        assert left == [], f"{kind} kill at {delay:.2f} s left {left}"
        if target.exists():
            assert orc.verify(target) == []
            u = orc.open_checkpoint(target)["u"]
            assert np.array_equal(u[want.rows[:50]], want.values[:50])
    _settle(cluster)
    after = tmp_path / "after.h5"
    orc.write_stage(after, datasets, policy=policy, cluster=cluster, stripe_bytes=65536)
    assert orc.verify(after) == []
    assert "failed" in outcomes, outcomes  # the kills did land mid-stage


def test_a_worker_restarted_by_its_nanny_counts_as_dead():
    """Also when the nanny brings it back at its old address before anyone looked (Dask
    then runs the dead I/O worker's writer loop again there): the stage must fail, not
    commit while a direct write of the first run may still land in its output."""
    from orchestrator.engine import dispatch

    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        alive = dispatch._live_workers(cl)
        victim = cl.ionodes[1]
        os.kill(cl.worker_pids()[victim], signal.SIGKILL)
        cl.client.wait_for_workers(3, timeout=WATCHDOG)
        deadline = time.monotonic() + WATCHDOG

        def back():  # three workers again, none of them the killed process
            live = dispatch._live_workers(cl)
            return len(live) == 3 and live.get(victim) != alive[victim]

        while not back():
            assert time.monotonic() < deadline, "the killed worker did not come back"
            time.sleep(0.1)
        died = dispatch._died(cl, dispatch._watch(alive, set(cl.ionodes)), 0.05)
        assert died is not None and "io-1" in died, died
        assert dispatch._died(cl, dispatch._live_workers(cl), 0.05) is None
        # the race CI met: a worker removed before its "add" reached the cluster's
        # status watcher must not raise there (it used to, and then close() raised too)
        known = dict(cl._owned.scheduler_info["workers"])
        cl._owned._update_worker_status("remove", "tls://127.0.0.1:1")
        assert cl._owned.scheduler_info["workers"] == known
