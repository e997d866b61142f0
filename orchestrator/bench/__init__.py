"""The benchmarks behind ``iorch bench …`` and ``iorch write-bench``, imported only by the CLI.

- :mod:`.schedulers` — every policy on the papers' synthetic sweeps, and the
  kernels' speed beside their pure-Python oracles (``iorch bench schedulers``);
- :mod:`.optimal` — the near-optimal policies against the lower bound and
  exact optima (``iorch bench optimal``);
- :mod:`.write` — every policy dispatched for real beside the raw disk,
  h5py, ``dask.array.to_zarr`` and ADIOS2 in the same run (``iorch write-bench``);
- :mod:`.stage` — the decorator path end to end beside tasks writing their
  own blocks under a lock (``iorch bench stage``).

What the main job measures too (sizes, the raw disk bandwidth, the
calibrated cost model) lives in :mod:`orchestrator.engine.measure`, so the main job
never imports a benchmark.
"""
