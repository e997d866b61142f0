"""Restart a step under another decomposition, through the I/O workers.

Eight tasks wrote step 3 (each a block of rows). Twelve tasks restart from it: each
needs its block plus 8 halo rows of each neighbour. ``input_stage`` hands every task
its rows — read once by the aggregators on the I/O workers, checked against the
checkpoint's manifest, and moved to the worker that runs the task — so no task opens
the file. Two restarts running at once are ordered on every I/O node by the read
policy (HIO here).
"""

import numpy as np

import orchestrator as orc

N, WRITERS, READERS, HALO = 120_000, 8, 12, 8


@orc.output_stage(target="checkpoints/step{step}.h5", clients=WRITERS)
def save(step, rank):
    rows = np.arange(rank * N // WRITERS, (rank + 1) * N // WRITERS)
    return {"u": (rows, np.sin(rows * 1e-3)), "id": (rows, rows.astype(np.int64))}


def rows_of(task):
    lo, hi = task * N // READERS, (task + 1) * N // READERS
    return {"u": range(max(0, lo - HALO), min(N, hi + HALO)), "id": range(lo, hi)}


@orc.input_stage(checkpoint="checkpoints/step{step}.h5", rows=rows_of)
def resume(data, task):
    lo = task * N // READERS
    assert data["id"][0] == lo  # its own rows, in order
    return task, data["u"].shape[0], float(data["u"].sum())


if __name__ == "__main__":
    with orc.local_cluster(n_ionodes=2, n_compute=2) as cluster:
        orc.set_default_cluster(cluster)
        for rank in range(WRITERS):
            done = save(3, rank)
        print("wrote", done.result().path)
        results = resume.restart(tasks=READERS, step=3, cluster=cluster)
        for task, n, total in results:
            rows = np.asarray(rows_of(task)["u"])
            assert n == rows.size and np.isclose(total, np.sin(rows * 1e-3).sum())
        # two applications restarting at once: every I/O node orders their requests
        a = orc.read_stage(
            "checkpoints/step3.h5",
            [rows_of(t) for t in range(6)],
            cluster=cluster,
            application="ocean",
            wait=False,
        )
        b = orc.read_stage(
            "checkpoints/step3.h5",
            [rows_of(t) for t in range(6, 12)],
            cluster=cluster,
            application="atmosphere",
            wait=False,
        )
        for res in (a.wait(), b.wait()):
            print(
                f"{res.application[1]}: {res.bytes_read:,} bytes read in {res.seconds:.2f} s, "
                f"{res.bytes_shuffled:,} shuffled"
            )
        orc.set_default_cluster(None)
    print(f"ok: {READERS} tasks restarted from {WRITERS} writers' checkpoint, halos included")
