"""How a write stage writes: one options object, defined once.

:func:`~orchestrator.engine.stage.write_stage`, the decorator
(:func:`~orchestrator.output_stage`), :func:`~orchestrator.capture` and the
BIPS3D job all take these; each used to repeat the list of parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from .. import defaults
from ..checks import is_int
from ..contributions import check_attrs
from ..cost import CostModel
from ..errors import InputError, StageError
from ..layout import STRATEGIES, LayoutError
from ..specs import check_name, check_values
from .backends import get_backend

__all__ = ["DEFAULT_WINDOW", "WriteOptions"]

#: bytes an I/O worker may hold (fetching, fetched or being written) at once
DEFAULT_WINDOW = 128 << 20


@dataclass(frozen=True)
class WriteOptions:
    """Format, policy, layout, replicas, safety and engine settings of a write stage.

    Parameters
    ----------
    format : {"hdf5", "hdf5-vds", "hdf5-chunked", "zarr"}
        Or any registered backend (:func:`~orchestrator.engine.backends.backend_names`).
    policy : str
        Scheduling policy (see :func:`orchestrator.policies`).
    strategy : {"contiguous", "list", "two-phase"}
        One transfer per contiguous piece; one per (client, I/O node) with a
        list of pieces; or list transfers that the I/O node aggregates and
        writes as contiguous runs.
    stripe_bytes : int
        Stripe size of the round-robin layout (Zarr rounds it to whole shards).
    assignment : "owner" or mapping
        Replica resolution, or a mapping giving each dataset of the stage a writer
        array (or a method name).
    unique, allow_missing : bool
        See :func:`orchestrator.contributions.gather`.
    overwrite : bool
        Replace an existing target (otherwise it is an error). The new output
        is renamed over the old one; the old one is never deleted first.
    cost : CostModel, str or None
        Cost model the policy plans with (a preset name or a calibrated model).
    seed : int
        Seed of randomized policies.
    attrs : mapping, optional
        Attributes to store, ``{"": {...}}`` for the file (root group),
        ``{group: {...}}`` or ``{dataset: {...}}``; Python or NumPy values (a NumPy
        value keeps its dtype in HDF5), also kept in the manifest.
    groups : sequence of str
        Groups to create besides those holding datasets (``"run/meta"``).
    values : mapping, optional
        Small datasets stored whole by the committing process rather than as
        rows: scalars (0-d), variable-length strings, short arrays
        (:func:`orchestrator.specs.check_values`).
    window : int
        Bytes each I/O worker may hold at once (data fetched ahead of the
        write in progress); its memory for the stage is bounded by it. When
        the sources store whole stripes themselves (Zarr on one host), it
        bounds instead the stripes under way for each I/O node, in the
        sources' memory and in shared memory: with n I/O nodes, up to n
        windows on the host.
    direct : bool or None
        Let workers on an I/O worker's host write their pieces into its file
        themselves, in the plan's order, instead of sending the bytes (on one
        machine this removes the copy between processes). False sends every
        byte to the I/O workers, as on separate machines; None (the default)
        writes directly when every worker is on the stage's host, and
        otherwise when the stage is large enough to gain (two full batches
        per I/O node, a quarter of the window each).
    n_ionodes : int
        I/O workers of the embedded cluster started when no cluster is given.
    policy_options : mapping
        Options of the policy (``block_size``, ``time_limit``, …).

    Examples
    --------
    >>> opts = WriteOptions(format="zarr", policy="hdf")
    >>> opts.updated(overwrite=True, block_size=4096).policy_options
    {'block_size': 4096}
    >>> WriteOptions(window=0)
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: window must be a positive number of bytes, got 0
    >>> WriteOptions(policy="ecf-ls").updated(moves="many")
    Traceback (most recent call last):
    ...
    orchestrator.errors.PolicyError: moves must be an integer >= 1, got 'many'
    """

    format: str = defaults.FORMAT
    policy: str = defaults.POLICY
    strategy: str = defaults.STRATEGY
    stripe_bytes: int = defaults.STRIPE_BYTES
    assignment: str | Mapping[str, Any] = defaults.ASSIGNMENT
    unique: bool = False
    allow_missing: bool = False
    overwrite: bool = False
    cost: CostModel | str | None = None
    seed: int = 0
    attrs: Mapping[str, Mapping[str, Any]] | None = None
    groups: Sequence[str] = ()
    values: Mapping[str, Any] | None = None
    window: int = DEFAULT_WINDOW
    direct: bool | None = None
    n_ionodes: int = defaults.N_IONODES
    policy_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        w = self.window
        if not is_int(w, 1):
            raise InputError(f"window must be a positive number of bytes, got {w!r}")
        for name, error in (("stripe_bytes", LayoutError), ("n_ionodes", InputError)):
            v = getattr(self, name)
            if not is_int(v, 1, 2**62):
                raise error(f"{name} must be an integer >= 1, got {v!r}")
        if self.strategy not in STRATEGIES:
            raise LayoutError(
                f"unknown strategy {self.strategy!r}; choose one of {list(STRATEGIES)}"
            )
        get_backend(self.format)  # an unknown format names itself and the known ones
        if self.direct is not None and not isinstance(self.direct, bool):
            raise InputError(f"direct must be True, False or None, got {self.direct!r}")
        for name in ("unique", "allow_missing", "overwrite"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise StageError(f"{name} must be True or False, got {getattr(self, name)!r}")
        # an unknown policy, a misspelt option (``polcy=``) or a value of the wrong kind fails
        # here, when the options are made, not later when the stage plans
        from ..policies import get_policy  # the policies load Numba: only once options are made

        get_policy(self.policy).check_options(dict(self.policy_options))
        if not isinstance(self.assignment, str | Mapping):
            raise InputError(
                "assignment must be a method name ('owner') or a mapping of dataset names to "
                f"writer arrays, got {self.assignment!r}"
            )
        if self.attrs is not None:
            check_attrs(self.attrs)
        if isinstance(self.groups, str) or not isinstance(self.groups, Sequence):
            raise InputError(f"groups must be a list of group names, got {self.groups!r}")
        object.__setattr__(self, "groups", tuple(check_name(g, "group") for g in self.groups))
        if self.values is not None:
            check_values(self.values)

    def updated(self, **changes: Any) -> WriteOptions:
        """A copy with ``changes``; names that are not fields become policy options.

        Examples
        --------
        >>> WriteOptions().updated(policy="ms-ecf").policy
        'ms-ecf'
        """
        known = {f.name for f in fields(self)}
        mine = {k: v for k, v in changes.items() if k in known}
        extra = {k: v for k, v in changes.items() if k not in known}
        if extra:
            mine["policy_options"] = {**self.policy_options, **extra}
        return replace(self, **mine)
