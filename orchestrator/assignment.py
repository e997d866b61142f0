"""Assignment of contributed rows: which client writes each row when several hold a copy.

Replica sets of partitioned meshes and IDG live in :mod:`orchestrator.replicas`;
their writer arrays come here as an explicit assignment.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .contributions import ContributionError, Holdings

__all__ = ["assign_holdings"]


def assign_holdings(holdings: Holdings, method: str | Any = "owner") -> npt.NDArray[np.int64]:
    """The writing client of every row (``-1`` for rows nobody holds).

    Parameters
    ----------
    holdings : Holdings
        From :func:`orchestrator.contributions.gather`.
    method : str or array_like
        ``"owner"``: the lowest client id among the holders. An array of one
        client per row: an assignment computed elsewhere (IDG, METIS, ...),
        checked to name a holder of every row.

    Examples
    --------
    >>> import numpy as np
    >>> from orchestrator.contributions import Contribution, DatasetSpec, gather
    >>> spec = DatasetSpec("u", (3,), "f8")
    >>> a, b = Contribution(1, [0, 1], np.zeros(2)), Contribution(0, [1, 2], np.zeros(2))
    >>> h = gather(spec, [a, b])
    >>> assign_holdings(h).tolist()
    [1, 0, 0]
    >>> assign_holdings(h, [1, 1, 0]).tolist()
    [1, 1, 0]
    """
    n = holdings.spec.n_rows
    if isinstance(method, str):
        if method != "owner":
            raise ContributionError(
                f"unknown assignment method {method!r}; use 'owner' or pass a writer array"
            )
        from .kernels.holdings import first_holders  # Numba only where a stage is planned

        return first_holders(holdings.ptr, holdings.holders)  # holders are sorted
    writer = np.asarray(method)
    if writer.shape != (n,) or (writer.size and writer.dtype.kind not in "iu"):
        raise ContributionError(
            f"writer array must hold one integer per row ({n}), got shape {writer.shape} "
            f"dtype {writer.dtype}"
        )
    writer = writer.astype(np.int64)
    count = holdings.count
    row_of = np.repeat(np.arange(n), count)
    is_writer = holdings.holders == writer[row_of]
    ok = np.zeros(n, dtype=bool)
    ok[row_of[is_writer]] = True
    ok |= (count == 0) & (writer == -1)
    if not ok.all():
        r = int(np.argmax(~ok))
        held_by = holdings.holders[holdings.ptr[r] : holdings.ptr[r + 1]].tolist()
        raise ContributionError(
            f"writer array: row {r} is assigned to client {int(writer[r])}, which does not "
            f"hold it (holders: {held_by})"
        )
    return writer
