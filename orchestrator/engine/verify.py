"""Reading a committed checkpoint back: its datasets as arrays, and every stripe checked.

Writing is :mod:`orchestrator.engine.stage`'s; these two read what it
committed (with the format's own library: h5py, zarr-python) and are what
``iorch verify`` and :func:`orchestrator.open_checkpoint` use.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..specs import dtype_from_json
from .backends import checkpoint_path, format_of, get_backend, read_checked_manifest
from .checksums import stripe_checksum

__all__ = ["open_datasets", "verify"]


@contextmanager
def open_datasets(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The datasets of a committed target as h5py / zarr arrays, closed on exit.

    Examples
    --------
    >>> with open_datasets("ckpt.h5") as data:  # doctest: +SKIP
    ...     data["u"][:4]
    """
    path = Path(path)
    data = get_backend(format_of(path)).open(path)
    try:
        yield data
    finally:
        files = {id(f): f for f in (getattr(a, "file", None) for a in data.values()) if f}
        for f in files.values():
            f.close()


def verify(path: str | os.PathLike[str]) -> list[str]:
    """Recompute every stripe checksum of a committed target; return the mismatches.

    An empty list means the target is complete and intact. In an HDF5 target every
    object is opened too, and the datasets no stripe covers (dimension scales, small
    values) are read: their metadata is what a restart opens first.

    Examples
    --------
    >>> verify("ckpt.h5")  # doctest: +SKIP
    []
    >>> verify("no-such-checkpoint.h5")
    Traceback (most recent call last):
    ...
    orchestrator.errors.CheckpointError: no-such-checkpoint.h5 does not exist
    """
    path = checkpoint_path(path)  # "" would be the current folder
    manifest = read_checked_manifest(path)  # a malformed manifest is a CheckpointError
    fmt = format_of(path)
    backend = get_backend(fmt)
    bad = []
    if manifest["format"] != fmt:
        bad.append(f"the manifest says format {manifest['format']!r}; the target is {fmt!r}")
    bad += _stored_as_listed(path, manifest)
    bad += _hdf5_objects_readable(path, set(manifest["datasets"]))
    with contextlib.ExitStack() as stack:
        try:
            read = stack.enter_context(backend.stripe_reader(path))
        except Exception:  # damaged beyond opening: each stripe's read says what is wrong
            read = functools.partial(backend.read_bytes, path)
        bad += _stripes_as_listed(read, manifest)
    return bad


def _stripes_as_listed(
    read: Callable[[str, int, int], bytes], manifest: dict[str, Any]
) -> list[str]:
    """Every stripe's checksum against the manifest's, read by ``read(dataset, offset, n)``."""
    bad: list[str] = []
    for name, ds in manifest["datasets"].items():
        # sizes from the manifest alone: a DatasetSpec would apply today's rules for new
        # datasets (names, dtypes) to checkpoints written before them
        nbytes = int(np.prod(ds["shape"], dtype=np.int64)) * dtype_from_json(ds["dtype"]).itemsize
        sb = int(ds["stripe_bytes"])
        n_stripes = -(-nbytes // sb)
        if len(ds["checksums"]) != n_stripes:
            bad.append(f"{name}: manifest lists {len(ds['checksums'])} of {n_stripes} stripes")
        unreadable = 0
        for off_text, want in ds["checksums"].items():
            off = int(off_text)
            try:
                data = read(name, off, min(sb, nbytes - off))
            except Exception as err:  # gone, truncated, undecodable: h5py/zarr each raise theirs
                unreadable += 1
                if unreadable == 1:
                    bad.append(
                        f"{name}: stripe at byte {off} cannot be read ({type(err).__name__}: {err})"
                    )
                continue
            got = stripe_checksum(data)
            if got != want:
                bad.append(f"{name}: stripe at byte {off}: checksum {got}, manifest says {want}")
        if unreadable > 1:
            bad.append(f"{name}: {unreadable} stripes in all cannot be read")
    return bad


#: datasets outside the manifest's (dimension scales, small values) read whole up to this
_SMALL = 64 << 20


def _hdf5_objects_readable(path: Path, rows: set[str]) -> list[str]:
    """Every object of an HDF5 target opens, with its attributes, and every dataset no
    stripe covers reads (dimension scales, small values): damaged metadata there passed
    every stripe's checksum, and the target then failed to open for a restart."""
    import h5py

    if not path.is_file() or not h5py.is_hdf5(path):
        return []
    out: list[str] = []
    try:
        with h5py.File(path, "r") as f:
            names: list[str] = []
            f.visit(names.append)
            for name in names:
                try:
                    obj = f[name]
                    for key in obj.attrs:
                        obj.attrs[key]
                    if (
                        isinstance(obj, h5py.Dataset)
                        and name not in rows
                        and obj.size * obj.dtype.itemsize <= _SMALL
                    ):
                        obj[()]
                except Exception as err:  # h5py raises KeyError, OSError, RuntimeError ...
                    out.append(f"{name}: cannot be read ({type(err).__name__}: {err})")
    except Exception as err:  # a link table, the root group: nothing can be listed
        out.append(f"the file's objects cannot be listed ({type(err).__name__}: {err})")
    return out


def _stored_as_listed(path: Path, manifest: dict[str, Any]) -> list[str]:
    """Each listed dataset's stored shape and dtype against the manifest's: the same bytes
    under another dtype (f8 read as <i8) passed every checksum."""
    out = []
    try:
        with open_datasets(path) as data:
            for name, ds in manifest["datasets"].items():
                stored = data.get(name)
                if stored is None:
                    continue  # reported as unreadable stripes
                want = (tuple(ds["shape"]), dtype_from_json(ds["dtype"]))
                got = (tuple(stored.shape), np.dtype(stored.dtype))
                if got != want:
                    out.append(
                        f"{name}: stored as {got[1]} of shape {got[0]}; the manifest says "
                        f"{want[1]} of shape {want[0]}"
                    )
    except Exception:  # damaged beyond opening: the stripes' reads say what is wrong
        pass
    return out
