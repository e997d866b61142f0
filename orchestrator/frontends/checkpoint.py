"""Committed checkpoints: what a stage returns, and how a restart finds and opens one.

A checkpoint is complete or absent (the commit is one rename after the
manifest is written), but a directory may also hold files that are not
ours, or a checkpoint damaged after the fact; :func:`latest_checkpoint`
skips both, :func:`open_checkpoint` refuses them.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.backends import checkpoint_path, read_checked_manifest
from ..errors import CheckpointError

__all__ = ["Checkpoint", "CheckpointError", "latest_checkpoint", "open_checkpoint"]


@dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint: where it is and its manifest (datasets, checksums, plan).

    Examples
    --------
    >>> ck = Checkpoint(Path("ckpt/step3.h5"), {"datasets": {"u": {}}}, step=3)
    >>> ck.datasets, ck.step
    (['u'], 3)
    """

    path: Path
    manifest: dict[str, Any] = field(repr=False)
    step: Any = None

    @property
    def datasets(self) -> list[str]:
        """Names of the datasets it holds."""
        return sorted(self.manifest.get("datasets", {}))

    def load(self, verify: bool = False) -> dict[str, np.ndarray]:
        """All datasets as NumPy arrays (see :func:`open_checkpoint`).

        Examples
        --------
        >>> latest_checkpoint("ckpt/step*.h5").load()["u"].shape  # doctest: +SKIP
        (1000, 3)
        """
        out: dict[str, np.ndarray] = open_checkpoint(self.path, verify=verify)
        return out


def _manifest(path: Path) -> dict[str, Any]:
    return read_checked_manifest(path)


def open_checkpoint(path: str | os.PathLike[str], verify: bool = True, lazy: bool = False) -> Any:
    """Open a committed checkpoint for a restart.

    Parameters
    ----------
    path : path
        An HDF5 file or Zarr directory written by a stage.
    verify : bool
        Recompute every stripe checksum against the manifest first (reads the
        whole checkpoint once); a mismatch raises :class:`CheckpointError`.
    lazy : bool
        ``False``: a dict of NumPy arrays (files closed). ``True``: a context
        manager yielding the h5py / zarr arrays, for checkpoints larger than
        memory.

    Examples
    --------
    >>> data = open_checkpoint("ckpt/step3.h5")  # doctest: +SKIP
    >>> data["u"].shape  # doctest: +SKIP
    (1000, 3)
    >>> with open_checkpoint("ckpt/step3.h5", lazy=True) as data:  # doctest: +SKIP
    ...     first = data["u"][:10]
    """
    # engine.stage loads the planner (Numba, SciPy) and distributed: not on compute workers
    from ..engine.verify import open_datasets
    from ..engine.verify import verify as check  # likewise

    path = checkpoint_path(path)
    if not isinstance(verify, bool) or not isinstance(lazy, bool):
        raise CheckpointError(f"verify and lazy must be True or False, got {verify!r}, {lazy!r}")
    if not path.exists():
        raise CheckpointError(f"{path} does not exist")
    _manifest(path)  # refuses what is not a checkpoint of ours, naming why
    if verify:
        bad = check(path)
        if bad:
            raise CheckpointError(
                f"{path}: {len(bad)} stripe(s) do not match the manifest: {bad[0]}"
            )
    if lazy:
        return open_datasets(path)
    with open_datasets(path) as data:
        # rows, small datasets (scalars, text) and those nobody wrote: every dataset stored
        return {name: np.asarray(data[name][...]) for name in data}


def _natural_key(path: str) -> tuple[Any, ...]:
    """``step10`` after ``step9``: numbers in the name compare as numbers."""
    parts = re.split(r"(\d+)", Path(path).name)
    return tuple(int(p) if p.isdigit() else p for p in parts)


def latest_checkpoint(
    pattern: str | os.PathLike[str],
    verify: bool = False,
    skipped: list[tuple[Path, str]] | None = None,
) -> Checkpoint | None:
    """The newest complete checkpoint matching a glob ``pattern``, or ``None``.

    "Newest" is the largest number in the name (``step12`` after ``step9``),
    then the modification time. Temporary names of stages in progress,
    foreign files, dangling links, damaged manifests and (with ``verify``)
    checkpoints whose stripes no longer match their manifest are skipped:
    a restart takes the newest good one. Pass a list as ``skipped`` to learn
    which candidates were passed over, and why.

    Examples
    --------
    >>> latest_checkpoint("/nonexistent/step*.h5") is None
    True
    """

    def mtime(p: str) -> float:
        try:
            return os.path.getmtime(p)
        except OSError:  # a dangling link: it sorts, and is skipped below
            return 0.0

    if not isinstance(pattern, str | os.PathLike) or not os.fspath(pattern).strip():
        raise CheckpointError(f"pattern must be a non-empty path pattern, got {pattern!r}")
    if not isinstance(verify, bool):
        raise CheckpointError(f"verify must be True or False, got {verify!r}")
    if skipped is not None and not isinstance(skipped, list):
        raise CheckpointError(f"skipped must be a list (to fill) or None, got {skipped!r}")
    candidates = [p for p in glob.glob(os.fspath(pattern)) if not Path(p).name.startswith(".")]
    candidates.sort(key=lambda p: (_natural_key(p), mtime(p)), reverse=True)
    # engine.stage loads the planner (Numba, SciPy) and distributed: not on compute workers
    from ..engine.verify import verify as check

    for p in candidates:
        path = Path(p)
        try:
            manifest = _manifest(path)
            bad = check(path) if verify else []
        except Exception as err:  # damaged in any way h5py, zarr or we can tell: next one
            if skipped is not None:
                skipped.append((path, str(err)))
            continue
        if bad:
            if skipped is not None:
                skipped.append((path, f"{len(bad)} problem(s): {bad[0]}"))
            continue
        m = re.findall(r"\d+", path.stem)
        return Checkpoint(path, manifest, int(m[-1]) if m else None)
    return None
