"""A stage on a Dask cluster the user started, with no worker declaring an I/O node
(issue 15: "on a plain LocalCluster a decorated stage fails with 'no I/O workers'")."""

import json

import h5py
import numpy as np
import pytest
from distributed import Client, LocalCluster

import orchestrator as orc
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.engine.cluster import discover_workers, ionode_rule
from plugins.hdf5 import MANIFEST_ATTR


def _plain(**kw):
    return LocalCluster(
        n_workers=4, threads_per_worker=1, host="127.0.0.1", dashboard_address=None, **kw
    )


def _datasets():
    spec = DatasetSpec("u", (64, 2), "f8")
    parts = [Contribution(k, np.arange(k, 64, 4), np.full((16, 2), k, float)) for k in range(4)]
    return {"u": (spec, parts)}


def test_a_plain_local_cluster_gets_io_nodes_said_in_the_manifest(tmp_path, caplog):
    with _plain() as lc, Client(lc) as user:
        # refresh() never chooses: a cluster whose I/O workers are restarting must wait
        with pytest.raises(orc.ClusterError, match="no I/O workers"):
            discover_workers(user, choose=False)
        cl = orc.connect(lc.scheduler_address)
        try:
            assert len(cl.ionodes) == 2 and len(cl.compute) == 2
            assert ionode_rule(cl.client) == "the first 2 of 4 workers by address"
            assert "no worker declares an I/O node" in caplog.text
            orc.write_stage(tmp_path / "x.h5", _datasets(), cluster=cl)
            assert orc.verify(tmp_path / "x.h5") == []
            with h5py.File(tmp_path / "x.h5") as f:
                manifest = json.loads(f.attrs[MANIFEST_ATTR])
                assert f["u"][:, 0].tolist() == [k % 4 for k in range(64)]
            assert manifest["ionodes"] == {"chosen": ionode_rule(cl.client), "n": 2}

            # a decorated stage called from the user's own tasks on that cluster
            @orc.output_stage(target=str(tmp_path / "ck-{step}.h5"), clients=4)
            def dump(step, rank):
                return np.arange(rank, 64, 4), np.full((16, 2), rank, float)

            done = user.gather(user.map(dump, [7] * 4, range(4)))
            assert len(done) == 4 and orc.verify(tmp_path / "ck-7.h5") == []
        finally:
            cl.close()


@pytest.mark.parametrize("resources", [{"io": 1}])
def test_workers_with_resource_io_are_the_io_nodes(tmp_path, resources):
    with _plain(resources=resources) as lc:
        cl = orc.connect(lc.scheduler_address)
        try:
            assert len(cl.ionodes) == 4 and cl.compute == []
            assert ionode_rule(cl.client) == "the workers with resource io"
            orc.write_stage(tmp_path / "x.zarr", _datasets(), format="zarr", cluster=cl)
            assert orc.verify(tmp_path / "x.zarr") == []
        finally:
            cl.close()
