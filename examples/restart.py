"""Restart a workflow from its last complete checkpoint after it was killed.

A toy time-stepping simulation checkpoints every step. Start it, kill it at
any moment (the tests use SIGKILL), start it again: it resumes from the newest
complete checkpoint — a checkpoint is complete or absent, never half-written —
and ends with exactly the state of an uninterrupted run.

    python restart.py --steps 30
"""

import argparse
import time

import numpy as np

import orchestrator as orc

N, RANKS = 20_000, 4


def advance(u, step):
    return np.roll(u, 1) * 0.99 + np.sin(step + np.arange(u.size) * 1e-3)


@orc.output_stage(target="checkpoints/sim-step{step}.h5", clients=RANKS, n_ionodes=2)
def checkpoint(step, rank, u):
    lo, hi = rank * N // RANKS, (rank + 1) * N // RANKS
    return np.arange(lo, hi), u[lo:hi]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds per step (to kill it)")
    args = ap.parse_args()
    last = orc.latest_checkpoint("checkpoints/sim-step*.h5", verify=True)
    if last is None:
        start, u = 0, np.zeros(N)
    else:
        start, u = last.step + 1, orc.open_checkpoint(last.path)["checkpoint"]
        print(f"resuming after step {last.step} from {last.path}", flush=True)
    for step in range(start, args.steps):
        u = advance(u, step)
        [checkpoint(step, r, u) for r in range(RANKS)][-1].result()
        print(f"step {step} checkpointed", flush=True)
        time.sleep(args.pause)
    print(f"ok: final state checksum {float(np.abs(u).sum()):.6f}")
