"""A checkpoint stage in a Parsl workflow, written through the orchestrator's Dask I/O workers.

`output_app` replaces `python_app`: same signature, and the app's future gives
the committed checkpoint. Run with `--htex` for a HighThroughputExecutor
(worker processes) instead of threads.
"""

import os
import sys

import numpy as np
import parsl
from orchestrator.plugins.parsl import output_app
from parsl.config import Config
from parsl.executors import HighThroughputExecutor, ThreadPoolExecutor
from parsl.providers import LocalProvider

import orchestrator as orc

N, APPS = 50_000, 6


def parsl_config(htex: bool) -> Config:
    if not htex:
        return Config(executors=[ThreadPoolExecutor(max_threads=4)], run_dir="checkpoints/runinfo")
    bin_dir = os.path.dirname(sys.executable)  # Parsl's workers need the venv on PATH
    provider = LocalProvider(
        init_blocks=1, max_blocks=1, worker_init=f"export PATH={bin_dir}:$PATH"
    )
    htex_ = HighThroughputExecutor(address="127.0.0.1", max_workers_per_node=2, provider=provider)
    return Config(executors=[htex_], run_dir="checkpoints/runinfo")


if __name__ == "__main__":
    os.environ["PATH"] = f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"
    with orc.local_cluster(n_ionodes=2, n_compute=2) as io:

        @output_app(target="checkpoints/parsl-step{step}.h5", clients=APPS, scheduler=io.address)
        def save(step, rank, n=N, apps=APPS, inputs=(), outputs=()):
            import numpy as np  # runs in a Parsl worker: imports and globals are its own

            rows = np.arange(rank * n // apps, min(n, (rank + 1) * n // apps + 4))
            return rows, rows * 0.5 + step

        with parsl.load(parsl_config("--htex" in sys.argv)):
            futures = [save(7, rank) for rank in range(APPS)]
            ck = futures[0].result()
            print(f"committed {ck.path}")
    u = orc.open_checkpoint(ck.path)["save"]
    assert np.array_equal(u, np.arange(N) * 0.5 + 7)
    print("ok: Parsl apps wrote", len(u), "rows through the Dask I/O workers")
