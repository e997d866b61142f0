"""Defaults every front end shares — the library, the decorator, ``capture``, the CLI — set once.

Examples
--------
>>> from orchestrator import defaults
>>> defaults.POLICY, defaults.FORMAT
('ms-ecf', 'hdf5')
"""

from __future__ import annotations

__all__ = ["ASSIGNMENT", "FORMAT", "N_COMPUTE", "N_IONODES", "POLICY", "STRATEGY", "STRIPE_BYTES"]

#: the scheduling policy when none is named (at the lower bound on the papers' workloads,
#: and cheap to plan; ``iorch bench schedulers`` shows both)
POLICY = "ms-ecf"
#: the output format
FORMAT = "hdf5"
#: the stripe (and Zarr shard) size of a stage, in bytes
STRIPE_BYTES = 4 << 20
#: how the rows of a stage are laid out over the stripes (see ``orchestrator.layout``)
STRATEGY = "contiguous"
#: who writes a replicated row: its owner (the first holder) — see :mod:`~orchestrator.assignment`
ASSIGNMENT = "owner"
#: I/O workers and compute workers of an embedded (local) cluster
N_IONODES = 4
N_COMPUTE = 2
