"""A direct write still running when its stage stops leaves nothing behind (issue 14, item 6).

The compute workers' direct writes are held in the engine's own hook
(``engine.sources.cut_hook``) while an I/O worker is killed: the stage fails
and removes its temporary output, then the held writes wake up. A Zarr writer
makes folders; none may outlive the stage.
"""

import os
import signal
import time

import numpy as np
import pytest

import orchestrator as orc
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.cluster import local_cluster
from orchestrator.errors import StageError


def _hold(seconds, victim):
    """In a compute worker: each direct write kills the I/O worker ``victim`` (once), then
    waits ``seconds`` before touching the output."""
    from orchestrator.engine import sources

    def hook(at):
        _SEEN.add(at)
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:  # killed by an earlier write
            pass
        time.sleep(seconds)

    sources.cut_hook = hook


_SEEN: set[str] = set()  # (in a compute worker) the direct tasks the hook held


def _release():
    from orchestrator.engine import sources

    sources.cut_hook = None
    return sorted(_SEEN)


def _staging_dirs(pids):
    from orchestrator.engine.staging import ROOT, _namespace

    mine = tuple(f"iorch-stage-{os.getuid()}-{_namespace()}-{p}-" for p in pids)
    return [e for e in os.listdir(ROOT) if e.startswith(mine)] if ROOT.is_dir() else []


@pytest.mark.parametrize("fmt", ["zarr", "zarr-staged", "hdf5"])
def test_a_direct_write_waking_after_the_stage_stopped_writes_nothing(tmp_path, fmt):
    """Also when the shards' rows are spread over both compute workers, so that one hands
    its rows to the other through shared memory: neither the output nor the staging
    folders outlive the stage (the killed I/O worker's own folder is swept by the next
    stage)."""
    n, clients = 1 << 16, 4
    spec = DatasetSpec("u", (n, 16), "f8")
    per = n // clients
    if fmt == "zarr-staged":  # runs of 97 rows, clients in turn: every shard spans both workers
        owner = (np.arange(n) // 97) % clients
        rows = [np.flatnonzero(owner == c) for c in range(clients)]
    else:
        rows = [np.arange(c * per, (c + 1) * per) for c in range(clients)]
    parts = [Contribution(c, r, np.full((r.size, 16), float(c))) for c, r in enumerate(rows)]
    ext = fmt.split("-")[0]
    with local_cluster(n_ionodes=2, n_compute=2) as cl:
        pid = cl.worker_pids()[cl.ionodes[1]]
        cl.client.run(_hold, 3.0, pid, workers=cl.compute)
        with pytest.raises(StageError, match="died"):
            orc.write_stage(
                tmp_path / f"s.{ext}",
                {"u": (spec, parts)},
                format=ext,
                cluster=cl,
                direct=True,
                stripe_bytes=1 << 16,
            )
        time.sleep(4.0)  # every held write has woken up and finished by now
        assert list(tmp_path.iterdir()) == []
        held = set().union(*cl.client.run(_release, workers=cl.compute).values())
        assert ("stage_cut" in held) == (fmt == "zarr-staged"), held
        cl.refresh()
        pids = [pid, *cl.worker_pids().values()]
        orc.write_stage(
            tmp_path / f"t.{ext}",
            {"u": (spec, parts)},
            format=ext,
            cluster=cl,
            direct=True,
            stripe_bytes=1 << 16,
        )
        assert orc.verify(tmp_path / f"t.{ext}") == []
        assert _staging_dirs(pids) == []


def _writer_loops_counted():
    from orchestrator.engine import running

    return len(running._ACTIVE)


def test_an_io_node_failing_to_open_its_writer_is_not_waited_for(tmp_path):
    """An I/O node whose writer cannot be opened (its output removed under it, a full or
    read-only file system) fails the stage, and stops counting as a running writer: it
    was counted for good, and every later stop of a stage waited its whole timeout on it
    (seen as 5 s between a SIGTERM and the end of ``iorch run``)."""
    from orchestrator.engine.backends import register_backend, unregister_backend
    from plugins.hdf5 import HDF5Backend

    class Unopenable(HDF5Backend):
        name = "hdf5-unopenable"

        def writer(self, info, ionode, aggregate):
            if ionode == 1:
                raise OSError(f"I/O node {ionode}: cannot open {info['path']}")
            return super().writer(info, ionode, aggregate)

    register_backend("hdf5-unopenable", Unopenable)
    try:
        spec = DatasetSpec("u", (1 << 12, 16), "f8")
        parts = [Contribution(0, np.arange(1 << 12), np.ones((1 << 12, 16)))]
        with local_cluster(n_ionodes=2, n_compute=1) as cl:
            with pytest.raises(StageError, match="cannot open"):
                orc.write_stage(
                    tmp_path / "s.h5",
                    {"u": (spec, parts)},
                    format="hdf5-unopenable",
                    cluster=cl,
                    stripe_bytes=1 << 16,
                )
            assert set(cl.client.run(_writer_loops_counted).values()) == {0}
        assert list(tmp_path.iterdir()) == []
    finally:
        unregister_backend("hdf5-unopenable")


def test_a_writer_loop_of_a_stopped_stage_ends_quietly_and_only_then(tmp_path):
    """A writer loop starting after its stage was stopped and its output removed returns
    "aborted" instead of raising (Dask logged the FileNotFoundError with its traceback into
    the terminal of an ``iorch run`` stopped by SIGINT), and so does one whose output is gone
    (the stage's cleanup ran before the stop reached its worker); a loop of a running stage
    whose output is there but cannot be opened fails with the error."""
    from orchestrator.engine.program import NodeProgram
    from orchestrator.engine.running import abort
    from orchestrator.engine.worker import run_ionode

    def info(token):
        gone = str(tmp_path / f"{token}.h5")
        return {"token": token, "path": gone, "offsets": {"u": 0}, "stripe_bytes": {"u": 64}}

    node = NodeProgram(0, (), ((0, 0, 64),))
    args = (["u"], {}, [], [], [8], ["<f8"], False, 1 << 20, [])
    with local_cluster(n_ionodes=1, n_compute=0) as cl:
        cl.client.run(abort, "stopped")
        got = cl.client.submit(run_ionode, "hdf5", info("stopped"), node, *args, pure=False)
        assert got.result() == {"ionode": 0, "aborted": True}
        gone = cl.client.submit(run_ionode, "hdf5", info("running"), node, *args, pure=False)
        assert gone.result() == {"ionode": 0, "aborted": True}
        (tmp_path / "folder.h5").mkdir()  # there, but no file to write into
        live = cl.client.submit(run_ionode, "hdf5", info("folder"), node, *args, pure=False)
        with pytest.raises(IsADirectoryError):
            live.result()
        assert set(cl.client.run(_writer_loops_counted).values()) == {0}
