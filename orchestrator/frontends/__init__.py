"""Front ends: how a workflow's write stages reach the engine.

- :mod:`~orchestrator.frontends.intercept`: ``output_stage``, a decorator on a
  task function whose calls (Dask tasks, Parsl apps, plain calls) contribute to
  one checkpoint;
- :mod:`~orchestrator.frontends.capturing`: ``capture``, an h5py/zarr-like
  file object that collects a task's writes as contributions;
- :mod:`~orchestrator.frontends.checkpoint`: committed checkpoints found,
  verified and opened again.

The public names are re-exported by :mod:`orchestrator`.
"""
