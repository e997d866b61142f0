"""A checkpoint stage in a plain Python loop (no Dask or Parsl code): try it in a notebook.

Four "ranks" each own a block of a 1-d field and also hold a few halo rows of
their neighbour; every step they contribute what they hold, and the fourth
call of a step writes the checkpoint (replicated halo rows are written once).
"""

import numpy as np

import orchestrator as orc

N, RANKS = 10_000, 4


@orc.output_stage(target="checkpoints/plain-step{step}.h5", clients=RANKS, n_ionodes=2)
def save(step, rank, field):
    lo, hi = rank * N // RANKS, min(N, (rank + 1) * N // RANKS + 8)  # 8 halo rows
    return np.arange(lo, hi), field[lo:hi]


if __name__ == "__main__":  # the embedded cluster starts worker processes
    field = np.zeros(N)
    for step in range(3):
        field += np.sin(np.arange(N) * 0.001 * (step + 1))  # "compute"
        futures = [save(step, rank, field) for rank in range(RANKS)]
        ck = futures[-1].result()  # every future gives the same committed checkpoint
        print(f"step {step}: {ck.path} ({', '.join(ck.datasets)})")
    back = orc.open_checkpoint(orc.latest_checkpoint("checkpoints/plain-step*.h5").path)
    assert np.array_equal(back["save"], field)
    print("ok: the latest checkpoint holds the field")
