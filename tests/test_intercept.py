"""Stage decorators, capture proxies and checkpoints, on real clusters and real files."""

import os
import pickle

import cloudpickle
import h5py
import numpy as np
import pytest
import stage_funcs

import orchestrator as orc
from orchestrator.contributions import ContributionError
from orchestrator.engine.cluster import local_cluster
from orchestrator.frontends.intercept import set_default_cluster
from orchestrator.typedjson import decode


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(n_ionodes=2, n_compute=2) as cl:
        set_default_cluster(cl)
        yield cl
        set_default_cluster(None)


def test_decorator_bare_and_with_options_keeps_the_function():
    @orc.output_stage
    def dump(step, rank, x=1):
        """Docs."""
        return [rank], [x]

    assert dump.__name__ == "dump" and dump.__doc__ == "Docs."
    assert dump.options.target == "{name}-step{step}.h5" and dump.client_param == "rank"
    assert str(dump.options.path(4, dump.name)) == "dump-step4.h5"
    with pytest.raises(TypeError, match="no parameter telling which client calls"):
        orc.output_stage(lambda step, x: None)
    with pytest.raises(TypeError, match="no parameter 'iteration' for the step key"):
        orc.output_stage(step="iteration")(lambda step, rank: None)
    with pytest.raises(ContributionError, match="clients must be an integer >= 1, got 0"):
        orc.output_stage(clients=0)(lambda step, rank: None)


def test_write_options_come_as_one_object_or_as_changes_and_are_checked_at_once(cluster, tmp_path):
    from orchestrator.engine.options import WriteOptions
    from orchestrator.errors import PolicyError

    shared = WriteOptions(format="zarr", window=32 << 20, seed=3)

    @orc.output_stage(
        target=str(tmp_path / "w-{step}.zarr"),
        clients=1,
        cluster=cluster,
        options=shared,
        overwrite=True,
    )
    def save(step, rank):
        return np.arange(4), np.full(4, float(step))

    write = save.options.write
    assert (write.format, write.window, write.seed, write.overwrite) == ("zarr", 32 << 20, 3, True)
    assert shared.overwrite is False  # the shared object is not changed
    ck = save(2, 0).result()
    assert np.array_equal(orc.open_checkpoint(ck.path)["save"], np.full(4, 2.0))
    with pytest.raises(PolicyError, match="has no option 'polcy'"):  # a typo: not accepted
        orc.output_stage(polcy="ecf")(lambda step, rank: None)
    with pytest.raises(ContributionError, match="options must be a WriteOptions, got dict"):
        orc.output_stage(options={"format": "zarr"})(lambda step, rank: None)


def test_stages_pickle_without_their_cluster(cluster):
    stage = stage_funcs.make_save("x-{step}.h5", 2, os.getpid())
    stage2 = orc.output_stage(cluster=cluster, clients=2, step=None)(stage_funcs.capture_part)
    for dumps, loads in ((cloudpickle.dumps, pickle.loads),):
        back = loads(dumps(stage))
        assert back.options == stage.options and back.__name__ == "save"
        back2 = loads(dumps(stage2))
        assert back2.options.cluster is None and stage2.options.cluster is cluster


def test_plain_python_steps_commit_on_the_last_call(cluster, tmp_path):
    @orc.output_stage(target=str(tmp_path / "p-{step}.h5"), clients=3)
    def save(step, rank):
        rows = np.arange(rank * 10, min(30, rank * 10 + 12))  # 2 replicated rows
        return rows, rows[:, None] * np.ones((1, 2)) + step

    futures = [save(5, r) for r in range(2)]
    assert not any(f.done() for f in futures)  # two of three calls: nothing written yet
    futures.append(save(5, 2))
    cks = [f.result() for f in futures]
    assert {c.path for c in cks} == {tmp_path / "p-5.h5"} and cks[0].step == 5
    u = orc.open_checkpoint(cks[0].path)["save"]
    assert np.array_equal(u, np.arange(30)[:, None] * np.ones((1, 2)) + 5)
    with pytest.raises(ContributionError, match="client 1 contributed twice"):
        save(6, 1), save(6, 1)


def test_commit_without_a_client_count_and_bad_results(cluster, tmp_path):
    @orc.output_stage(target=str(tmp_path / "c.h5"), step=None)
    def save(rank):
        return {"a": (range(rank * 4, rank * 4 + 4), np.full(4, rank, np.int16))}

    save(0), save(1)
    ck = save.commit()
    assert orc.open_checkpoint(ck.path)["a"].tolist() == [0] * 4 + [1] * 4

    @orc.output_stage(target=str(tmp_path / "bad.h5"), clients=1)
    def bad(step, rank):
        return np.zeros(3)

    with pytest.raises(ContributionError, match="returned ndarray; return \\(rows, values\\)"):
        bad(0, 0)


def held_by_steps(cluster, fragment):
    """Keys the scheduler still holds for steps whose name contains ``fragment``."""

    def count(dask_scheduler=None):
        return sum(
            len(cs.wants_what)
            for name, cs in dask_scheduler.clients.items()
            if name.startswith("iorch-step:") and fragment in name
        )

    return cluster.client.run_on_scheduler(count)


def test_dask_tasks_keep_values_on_the_workers(cluster, tmp_path):
    save = stage_funcs.make_save(str(tmp_path / "d-{step}.zarr"), 4, os.getpid())
    futures = cluster.client.map(save, [2] * 4, range(4), pure=False)
    cks = cluster.client.gather(futures)  # Checkpoints only: Trap values never came here
    assert {c.path for c in cks} == {tmp_path / "d-2.zarr"}
    with pytest.raises(RuntimeError, match="reached the client process"):
        pickle.loads(pickle.dumps(stage_funcs.trapped(np.ones(2), os.getpid())))  # the trap works
    u = orc.open_checkpoint(tmp_path / "d-2.zarr")["u"]
    assert np.array_equal(u, np.arange(400) * 2.0 + 2)
    assert not held_by_steps(cluster, "d-2.zarr")  # the step let go of the contributions


def outcomes_kept(cluster, fragment):
    """Outcomes the scheduler still keeps for steps whose name contains ``fragment``."""

    def count(dask_scheduler=None):
        return sum(
            len(entry.get("out", {}))
            for name, entry in dask_scheduler.task_metadata.items()
            if isinstance(name, str) and fragment in name and isinstance(entry, dict)
        )

    return cluster.client.run_on_scheduler(count)


def test_every_call_gets_its_own_rounds_checkpoint_and_nothing_is_kept(cluster, tmp_path):
    """Two steps of one target, one after the other: each round's calls get that round's
    checkpoint (handed to all of them at once), and the scheduler keeps no outcome."""
    save = stage_funcs.make_fixed_target_save(str(tmp_path / "same.h5"), 5)
    for step in (7, 8):
        cks = cluster.client.gather(cluster.client.map(save, [step] * 5, range(5), pure=False))
        assert [c.step for c in cks] == [step] * 5
        assert orc.open_checkpoint(tmp_path / "same.h5")["u"].tolist() == [float(step)] * 50
        assert outcomes_kept(cluster, "same.h5") == 0


def test_an_open_step_holds_its_contributions_until_written(cluster, tmp_path):
    save = stage_funcs.make_nowait_save(str(tmp_path / "h-{step}.h5"), 3)
    early = cluster.client.map(save, [0, 0], [0, 1], pure=False)
    assert cluster.client.gather(early) == [None, None]  # returned, their values stay held
    assert held_by_steps(cluster, "h-0.h5") == 2
    ck = cluster.client.submit(save, 0, 2, pure=False).result()  # the last call leads
    assert orc.open_checkpoint(ck.path)["u"].tolist() == [0.0] * 10 + [1.0] * 10 + [2.0] * 10
    assert held_by_steps(cluster, "h-0.h5") == 0


def test_dask_delayed_stage(cluster, tmp_path):
    import dask

    save = stage_funcs.make_save(str(tmp_path / "dl-{step}.h5"), 2, os.getpid())
    parts = [dask.delayed(save)(1, r) for r in range(2)]
    cks = dask.compute(*parts, scheduler=cluster.client.get)
    assert cks[0].path == tmp_path / "dl-1.h5"
    assert np.array_equal(orc.open_checkpoint(cks[0].path)["u"], np.arange(200) * 2.0 + 1)


def test_captures_from_several_dask_tasks_form_one_stage(cluster, tmp_path):
    target = str(tmp_path / "cap.h5")
    futures = cluster.client.map(
        stage_funcs.capture_part, [target] * 3, range(3), [3] * 3, pure=False
    )
    cks = cluster.client.gather(futures)
    assert all(c.path == tmp_path / "cap.h5" for c in cks)
    with h5py.File(target) as f:
        assert np.array_equal(f["u"][:, 0], np.repeat([1.0, 2.0, 3.0], 40))
        assert f.attrs["clients"] == 3


@pytest.mark.parametrize("fmt", ["hdf5", "zarr"])
def test_capture_selections_and_errors(cluster, tmp_path, fmt):
    target = tmp_path / f"c.{'zarr' if fmt == 'zarr' else 'h5'}"
    with orc.capture(target, format=fmt) as f:
        u = f.create_array("u", shape=(10, 2), dtype="f4")
        u[...] = 1
        u[2:4] = [[5, 5], [6, 6]]
        u[-1] = 9
        u[np.array([0, 7])] = 3
        u[np.arange(10) == 5] = 4
        u[2] = 8  # rewritten: the last write wins
        f.attrs["note"] = np.float32(0.5)
    want = np.array([3, 1, 8, 6, 1, 4, 1, 3, 1, 9], np.float32)
    got = orc.open_checkpoint(target)["u"]
    assert np.array_equal(got[:, 0], want) and got.dtype == np.float32
    note = decode(f.checkpoint.manifest["attrs"][""]["note"])  # its dtype kept (issue 15)
    assert note == 0.5 and note.dtype == np.float32
    cases = [
        (lambda v: v[:, [0, 2]], "v[:, <int64 array of 2>] = ...: index arrays on axis 1"),
        (lambda v: v[12], "row 12 is outside 0..9"),
        (lambda v: v.__setitem__(slice(0, 2), np.ones((3, 3))), "value of shape (3, 3)"),
    ]
    for op, msg in cases:
        with pytest.raises(orc.CaptureError, match=None) as err:
            with orc.capture(tmp_path / "y.h5") as g:
                v = g.create_dataset("v", shape=(10, 3))
                op(v) if "value" in msg else op.__call__(_Setter(v))
        assert msg in str(err.value)
    assert not (tmp_path / "x.h5").exists() and not (tmp_path / "y.h5").exists()


class _Setter:
    """Turns ``s[key]`` into a write of 1.0 (the lambdas above name keys by indexing)."""

    def __init__(self, ds):
        self.ds = ds

    def __getitem__(self, key):
        self.ds[key] = 1.0


def test_checkpoints_latest_skips_foreign_and_damaged_ones(cluster, tmp_path):
    @orc.output_stage(target=str(tmp_path / "s{step}.h5"), clients=1)
    def save(step, rank):
        return np.arange(50), np.full(50, float(step))

    for step in (1, 2, 9, 10):
        save(step, 0).result()
    (tmp_path / "s11.h5").write_bytes(b"not hdf5")  # a foreign file
    assert orc.latest_checkpoint(tmp_path / "s*.h5").step == 10  # 10 after 9, s11 skipped
    with h5py.File(tmp_path / "s10.h5", "r+") as f:  # damage step 10 after its commit
        f["save"][3] = -1.0
    assert orc.latest_checkpoint(tmp_path / "s*.h5", verify=True).step == 9
    with pytest.raises(orc.CheckpointError, match="do not match the manifest"):
        orc.open_checkpoint(tmp_path / "s10.h5")
    with pytest.raises(orc.CheckpointError, match="not a checkpoint"):
        orc.open_checkpoint(tmp_path / "s11.h5")
    with orc.open_checkpoint(tmp_path / "s2.h5", lazy=True) as data:
        assert data["save"][:3].tolist() == [2.0, 2.0, 2.0]


def test_iorch_bench_stage_runs_both_ways(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    iorch = str(Path(sys.executable).with_name("iorch"))
    p = subprocess.run(
        [
            iorch,
            "bench",
            "stage",
            "--sizes",
            "4MiB",
            "--tasks",
            "4",
            "--ionodes",
            "2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("4 MiB") == 2 and "baseline+fsync ÷ orch." in p.stdout
    assert not [q for q in tmp_path.iterdir() if not q.name.startswith(".raw")]


def test_a_failing_dask_task_fails_its_whole_step_instead_of_hanging(cluster, tmp_path):
    from distributed import wait

    flaky = stage_funcs.make_flaky(str(tmp_path / "f-{step}.h5"), 4, bad_rank=2)
    futures = cluster.client.map(flaky, [0] * 4, range(4), pure=False)
    wait(futures, timeout=120)  # all finish (none waits for a leader that will never come)
    errors = [str(f.exception()) for f in futures]
    assert "rank 2 diverged" in errors[2]
    assert all(
        "the step cannot be written: client 2 failed: ValueError" in e
        for i, e in enumerate(errors)
        if i != 2
    )
    assert not (tmp_path / "f-0.h5").exists()
    assert not held_by_steps(cluster, "f-0.h5")


def test_a_failing_capture_fails_the_captures_of_its_target(cluster, tmp_path):
    from distributed import wait

    target = str(tmp_path / "cf.h5")
    futures = cluster.client.map(
        stage_funcs.capture_or_fail, [target] * 3, range(3), [3] * 3, [1] * 3, pure=False
    )
    wait(futures, timeout=120)
    errors = [str(f.exception()) for f in futures]
    assert "rank 1 diverged" in errors[1]
    assert "client 1 failed" in errors[0] and "client 1 failed" in errors[2]
    assert not (tmp_path / "cf.h5").exists()


def test_a_rounds_first_outcome_reaches_every_waiting_call_whatever_the_order():
    """Scheduler-side hand-over, on a stand-in scheduler: calls that start waiting before
    or after the outcome arrives all get it; a second outcome of the round (a second call
    that failed) changes nothing; the entry is gone once every call took it."""
    import asyncio

    from orchestrator.plugins.dask import _deliver, _outcome

    class Scheduler:
        def __init__(self):
            self.task_metadata = {}

    s = Scheduler()

    async def run():
        early = [asyncio.ensure_future(_outcome("st", 3, 5.0)(dask_scheduler=s)) for _ in range(2)]
        await asyncio.sleep(0)
        _deliver("st", 3, 3)(b"first", dask_scheduler=s)
        _deliver("st", 3, 0)(b"second", dask_scheduler=s)  # nobody left for it: ignored
        late = await _outcome("st", 3, 5.0)(dask_scheduler=s)
        return [await e for e in early] + [late]

    assert asyncio.run(run()) == [b"first"] * 3
    assert s.task_metadata["st"]["out"] == {}

    async def too_late():  # no outcome comes: the call gets None after its timeout
        return await _outcome("st", 4, 0.05)(dask_scheduler=s)

    assert asyncio.run(too_late()) is None
