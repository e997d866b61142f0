"""A checkpoint stage inside Dask tasks: the data stays on the workers.

Each task computes its block on a worker and returns the committed checkpoint;
the block goes from that worker straight to the I/O workers, never through
this process. Adopting the framework in an existing Dask script is the
decorator plus starting the cluster with I/O workers.
"""

import numpy as np

import orchestrator as orc

N, TASKS = 200_000, 8


def block(rank, step):
    lo, hi = rank * N // TASKS, (rank + 1) * N // TASKS
    rows = np.arange(lo, min(N, hi + 16))  # 16 halo rows shared with the next task
    return rows, np.cos(rows * 1e-4) * (step + 1)


@orc.output_stage(target="checkpoints/dask-step{step}.zarr", format="zarr", clients=TASKS)
def save(step, rank):
    rows, values = block(rank, step)  # computed here, on the worker
    return {"u": (rows, values), "owner": (rows, np.full(rows.size, rank, np.int32))}


if __name__ == "__main__":
    with orc.local_cluster(n_ionodes=2, n_compute=2) as cluster:
        for step in range(2):
            futures = cluster.client.map(save, [step] * TASKS, range(TASKS), pure=False)
            checkpoints = cluster.client.gather(futures)
            print(f"step {step}: {checkpoints[0].path}")
    data = orc.open_checkpoint("checkpoints/dask-step1.zarr")
    assert np.allclose(data["u"], np.cos(np.arange(N) * 1e-4) * 2)
    print("ok: every row of step 1 is correct; owners:", np.bincount(data["owner"]).tolist())
