"""A direct write still running when its stage stops leaves nothing behind (issue 14, item 6).

The compute workers' direct writes are held in the engine's own hook
(``engine.worker.cut_hook``) while an I/O worker is killed: the stage fails
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
    from orchestrator.engine import worker

    def hook(at):
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:  # killed by an earlier write
            pass
        time.sleep(seconds)

    worker.cut_hook = hook


def _release():
    from orchestrator.engine import worker

    worker.cut_hook = None


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_a_direct_write_waking_after_the_stage_stopped_writes_nothing(tmp_path, fmt):
    n, clients = 1 << 16, 4
    spec = DatasetSpec("u", (n, 16), "f8")
    per = n // clients
    parts = [
        Contribution(c, np.arange(c * per, (c + 1) * per), np.full((per, 16), float(c)))
        for c in range(clients)
    ]
    with local_cluster(n_ionodes=2, n_compute=2) as cl:
        pid = cl.worker_pids()[cl.ionodes[1]]
        cl.client.run(_hold, 3.0, pid, workers=cl.compute)
        with pytest.raises(StageError, match="died"):
            orc.write_stage(
                tmp_path / f"s.{fmt}",
                {"u": (spec, parts)},
                format=fmt,
                cluster=cl,
                direct=True,
                stripe_bytes=1 << 16,
            )
        time.sleep(4.0)  # every held write has woken up and finished by now
        assert list(tmp_path.iterdir()) == []
        cl.client.run(_release, workers=cl.compute)
