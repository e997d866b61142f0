"""The registry of storage formats, and what a committed target is.

Formats register by name (built-in ones, ``register_backend``, or an
installed package's ``orchestrator.backends`` entry point) and say whether
they can open a path (:meth:`~orchestrator.engine.storage.Backend.guess_can_open`,
as xarray's backends do); :func:`format_of` finds who reads a committed
target, and :func:`read_checked_manifest` reads and checks its manifest.
The interface a format implements is :mod:`orchestrator.engine.storage`'s.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import CheckpointError, OrchestratorError, StorageError
from ..specs import dtype_from_json
from .storage import Backend

__all__ = [
    "ENTRY_POINTS",
    "MANIFEST_VERSION",
    "backend_names",
    "backend_ref",
    "check_manifest",
    "checkpoint_path",
    "format_of",
    "get_backend",
    "is_checkpoint",
    "looks_like_checkpoint",
    "read_checked_manifest",
    "register_backend",
    "unregister_backend",
]

#: the version of the manifest a stage writes into its target
MANIFEST_VERSION = 1

#: built-in formats: name -> "module:Class" (imported on first use)
_BUILTIN: dict[str, str] = {
    "hdf5": "orchestrator.plugins.hdf5:HDF5Backend",
    "hdf5-vds": "orchestrator.plugins.hdf5:HDF5SubfileBackend",
    "hdf5-chunked": "orchestrator.plugins.hdf5:HDF5ChunkedBackend",
    "zarr": "orchestrator.plugins.zarr:ZarrBackend",
}
_BACKENDS: dict[str, str | type[Backend]] = dict(_BUILTIN)
#: formats of installed packages, as every process finds them
_ENTRY: dict[str, str] = {}
#: entry point group through which installed packages add formats
ENTRY_POINTS = "orchestrator.backends"
_loaded_entry_points = False


def _entry_points() -> None:
    """Formats of installed packages (``[project.entry-points."orchestrator.backends"]``)."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        _ENTRY.setdefault(ep.name, ep.value)
        _BACKENDS.setdefault(ep.name, ep.value)


def register_backend(name: str, backend: str | type[Backend], replace: bool = False) -> None:
    """Make format ``name`` available: a :class:`Backend` subclass or ``"module:Class"``.

    Installed packages can do the same without code, through the entry
    point group ``orchestrator.backends``.

    Examples
    --------
    >>> register_backend("hdf5-again", "orchestrator.plugins.hdf5:HDF5Backend")
    >>> "hdf5-again" in backend_names()
    True
    >>> unregister_backend("hdf5-again")
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise StorageError(f"a format's name must be a non-empty string without ':', got {name!r}")
    if not (isinstance(backend, str) and ":" in backend) and not (
        isinstance(backend, type) and issubclass(backend, Backend)
    ):
        raise StorageError(
            f"format {name!r}: need a Backend subclass or 'module:Class', got {backend!r}"
        )
    _entry_points()
    if name in _BACKENDS and not replace:
        raise StorageError(f"a format named {name!r} is registered already")
    _BACKENDS[name] = backend


def unregister_backend(name: str) -> None:
    """Forget format ``name`` (for tests and plugins that replace one).

    Examples
    --------
    >>> unregister_backend("no-such-format")
    """
    _BACKENDS.pop(name, None)


def backend_names() -> list[str]:
    """Every format that can be written, built-in ones first.

    Examples
    --------
    >>> backend_names()[:4]
    ['hdf5', 'hdf5-vds', 'hdf5-chunked', 'zarr']
    """
    _entry_points()
    return list(_BACKENDS)


def backend_ref(name: str) -> str | type[Backend]:
    """What to send another process for it to find format ``name``: the name itself when
    that process finds it as this one does (built in, or an installed entry point), else
    the registered class (pickled by Dask: a class registered at run time is known only
    to the process that registered it).

    Examples
    --------
    >>> backend_ref("hdf5")
    'hdf5'
    """
    _entry_points()
    where = _BACKENDS.get(name)
    if where is None or where in (_BUILTIN.get(name), _ENTRY.get(name)):
        return name  # every process finds it under this name
    if isinstance(where, str):  # registered here as "module:Class": send the class
        module, cls = where.split(":")
        found: type[Backend] = getattr(importlib.import_module(module), cls)
        return found
    return where


def get_backend(name: str | type[Backend]) -> Backend:
    """The backend registered as ``name`` (see :func:`backend_names`), imported lazily.

    ``name`` may also be a :class:`Backend` subclass (from :func:`backend_ref`).

    Examples
    --------
    >>> get_backend("hdf5").name
    'hdf5'
    """
    if isinstance(name, type) and issubclass(name, Backend):
        return name()
    _entry_points()
    try:
        where = _BACKENDS[name]
    except (KeyError, TypeError):
        raise StorageError(f"unknown format {name!r}; choose one of {list(_BACKENDS)}") from None
    if isinstance(where, str):
        module, cls = where.split(":")
        where = getattr(importlib.import_module(module), cls)
    backend: Backend = where()
    return backend


def _guesser(name: str) -> Backend | None:
    """The backend called ``name``, or None when it cannot be loaded (a broken plugin)."""
    try:
        return get_backend(name)
    except Exception:  # a third party's import error must not hide ours
        return None


def _guess(backend: Backend, path: Path) -> bool:
    try:
        return bool(backend.guess_can_open(path))
    except Exception:  # a third party's guess that fails is a no
        return False


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """``manifest`` if its datasets are well formed, else :class:`CheckpointError` naming
    the field and its value.

    Checked: a ``version`` this code reads, a ``format`` it knows, and
    ``datasets`` mapping at least one name to a ``shape`` (whole numbers,
    at least one row), a ``dtype`` NumPy knows, a ``stripe_bytes`` of at least
    one byte and ``checksums`` mapping byte offsets (whole numbers, on stripe
    starts, inside the dataset) to 8 hex digits. What the checksums say of the
    bytes is :func:`~orchestrator.engine.verify.verify`'s job.

    Examples
    --------
    >>> m = {"version": 1, "format": "hdf5",
    ...      "datasets": {"u": {"shape": [4], "dtype": "<f8", "stripe_bytes": 16,
    ...                         "checksums": {"0": "0badcafe", "16": "00000000"}}}}
    >>> check_manifest(m, "ck.h5") is m
    True
    >>> check_manifest({**m, "datasets": {"u": {**m["datasets"]["u"], "stripe_bytes": 0}}}, "ck.h5")
    Traceback (most recent call last):
    ...
    orchestrator.errors.CheckpointError: ck.h5: manifest field datasets.u.stripe_bytes is 0; ...
    """
    import numpy as np

    def bad(field: str, value: Any, want: str) -> CheckpointError:
        return CheckpointError(f"{where}: manifest field {field} is {value!r}; expected {want}")

    def whole(x: Any) -> TypeGuard[int]:
        return isinstance(x, int) and not isinstance(x, bool)

    if not isinstance(manifest, dict):
        raise CheckpointError(
            f"{where}: the manifest is a {type(manifest).__name__}, not a mapping"
        )
    version = manifest.get("version")
    if not whole(version) or not 1 <= version <= MANIFEST_VERSION:
        raise bad("version", version, f"1..{MANIFEST_VERSION} (a newer io-orchestrator wrote it?)")
    fmt = manifest.get("format")
    if not isinstance(fmt, str) or fmt not in _BACKENDS:
        raise bad("format", fmt, f"one of {list(_BACKENDS)}")
    datasets = manifest.get("datasets")
    # a checkpoint of only small datasets, empty ones, groups or attributes has no rows
    other = any(manifest.get(k) for k in ("values", "empty", "groups", "attrs"))
    if not isinstance(datasets, dict) or not (datasets or other):
        raise bad("datasets", datasets, "a mapping of at least one dataset")
    for name, ds in datasets.items():
        at = f"datasets.{name}"
        if not isinstance(ds, dict):
            raise bad(at, ds, "a mapping")
        shape = ds.get("shape")
        if not isinstance(shape, list) or not shape or not all(whole(x) and x >= 0 for x in shape):
            raise bad(f"{at}.shape", shape, "a list of whole numbers >= 0")
        if shape[0] < 1:
            raise bad(f"{at}.shape", shape, "at least one row")
        try:
            dtype = dtype_from_json(ds.get("dtype"))
        except (TypeError, ValueError):
            raise bad(f"{at}.dtype", ds.get("dtype"), "a NumPy dtype") from None
        if dtype.hasobject or ds.get("dtype") is None:
            raise bad(f"{at}.dtype", ds.get("dtype"), "a NumPy dtype of plain values")
        n_ionodes = ds.get("n_ionodes", 1)
        if not whole(n_ionodes) or n_ionodes < 1:
            raise bad(f"{at}.n_ionodes", n_ionodes, "a whole number >= 1")
        stripe = ds.get("stripe_bytes")
        if not whole(stripe) or stripe < 1:
            raise bad(f"{at}.stripe_bytes", stripe, "a whole number of bytes >= 1")
        checksums = ds.get("checksums")
        if not isinstance(checksums, dict):
            raise bad(f"{at}.checksums", checksums, "a mapping of byte offsets to checksums")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        for off, crc in checksums.items():
            if (
                not (isinstance(off, str) and off.isdigit())
                or int(off) % stripe
                or (int(off) >= max(nbytes, 1))
            ):
                raise bad(f"{at}.checksums", off, f"stripe offsets (multiples of {stripe})")
            if (
                not isinstance(crc, str)
                or len(crc) != 8
                or not all(c in "0123456789abcdef" for c in crc)
            ):
                raise bad(f"{at}.checksums[{off}]", crc, "8 hex digits")
    return manifest


def checkpoint_path(path: Any) -> Path:
    """``path`` as a Path, or a CheckpointError: ``""`` would be the current folder.

    Examples
    --------
    >>> checkpoint_path("ck.h5")
    PosixPath('ck.h5')
    >>> checkpoint_path("")
    Traceback (most recent call last):
    ...
    orchestrator.errors.CheckpointError: a checkpoint path must be a non-empty path, got ''
    """
    from ..files import check_path

    return check_path(path, "a checkpoint path", CheckpointError)


def read_checked_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the committed target at ``path``, checked (:func:`check_manifest`).

    Whatever is wrong — not ours, truncated, unreadable, a malformed manifest —
    is a :class:`CheckpointError` that says so.

    Examples
    --------
    >>> read_checked_manifest("no/such.h5")
    Traceback (most recent call last):
    ...
    orchestrator.errors.CheckpointError: no/such.h5 does not exist
    """
    path = checkpoint_path(path)
    try:
        manifest = get_backend(format_of(path)).read_manifest(path)
    except CheckpointError:
        raise
    except StorageError as err:
        raise CheckpointError(str(err)) from None
    except Exception as err:  # a damaged file: h5py, zarr and json each raise their own
        raise CheckpointError(
            f"{path}: unreadable manifest ({type(err).__name__}: {err})"
        ) from None
    return check_manifest(manifest, str(path))


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether some registered format recognises ``path`` as one of its targets.

    Only such a target may be replaced by a stage with ``overwrite=True``: a
    folder of the user's files, or any file no format claims, never is. A
    folder counts only if it holds a manifest of ours.

    Examples
    --------
    >>> import tempfile
    >>> is_checkpoint(tempfile.mkdtemp())
    False
    """
    path = Path(path)
    if path.is_symlink() or not (path.is_file() or path.is_dir()):
        return False
    for name in backend_names():
        backend = _guesser(name)
        if backend is None or not _guess(backend, path):
            continue
        if path.is_file():  # an HDF5 file is replaced as h5py's mode "w" would replace it
            return True
        # a folder only with our manifest: the shape alone (a master.h5, a zarr.json) let a
        # folder of the user's files that happened to hold one be replaced (hostile probe)
        try:
            manifest = backend.read_manifest(path)
        except Exception:  # damaged or not ours: h5py, zarr and json each raise theirs
            continue
        if isinstance(manifest, dict) and isinstance(manifest.get("datasets"), dict):
            return True
    return False


#: names a stage gives its output while writing it (``.<name>.tmp-<12 hex>``, see stage.py)
TEMPORARY = re.compile(r"^\..+\.tmp-[0-9a-f]{12}$")
#: suffixes of checkpoints, for a target too damaged for any format to recognise
SUFFIXES = (".h5", ".hdf5", ".zarr")


def looks_like_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a checkpoint to check: its shape is one some format recognises
    (cheap: no manifest is read), or its name ends like one (``.h5``, ``.zarr``) —
    damage may have taken what the format recognises. A stage's unfinished output is not
    one (see :data:`TEMPORARY`).

    Examples
    --------
    >>> looks_like_checkpoint("runs/7/ckpt.h5")
    True
    >>> looks_like_checkpoint("runs/7/notes.txt")
    False
    """
    path = Path(path)
    if TEMPORARY.match(path.name):
        return False
    if path.name.endswith(SUFFIXES):
        return True
    if path.is_symlink():
        return False
    return any((b := _guesser(name)) is not None and _guess(b, path) for name in backend_names())


def _check_entries(folder: Path) -> None:
    """Refuse a checkpoint folder holding anything but files and folders.

    A FIFO put in place of a subfile or a shard made ``iorch verify`` block
    in h5py's open for ever, deaf to SIGTERM; a link may lead anywhere (a
    device, another user's file). A stage never writes either.
    """
    import stat

    for root, dirs, files in os.walk(folder):  # links to folders are not walked into
        for entry in (*dirs, *files):
            p = os.path.join(root, entry)
            try:  # a link counts as what it names (git-annex and DVC keep files as links)
                mode = os.stat(p).st_mode
            except OSError as err:  # dangling, a loop, or gone meanwhile
                raise StorageError(f"{p} cannot be read ({err.strerror})") from None
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise StorageError(
                    f"{p} is neither a file nor a folder; a checkpoint holds only those"
                )


def format_of(path: str | os.PathLike[str]) -> str:
    """The format a committed target was written in.

    The first registered backend that recognises the target's shape on
    disk (:meth:`Backend.guess_can_open`) reads its manifest, which names
    the format (formats may share a shape: ``hdf5-vds`` and
    ``hdf5-chunked`` are both a folder with ``master.h5``).

    Examples
    --------
    >>> format_of("ckpt/3.zarr")  # doctest: +SKIP
    'zarr'
    """
    path = Path(path)
    if not path.exists():
        raise StorageError(f"{path} does not exist")
    if not (path.is_file() or path.is_dir()):  # a FIFO or a device: opening it may block
        raise StorageError(f"{path} is neither a file nor a folder")
    if path.is_dir():
        _check_entries(path)
    for name in backend_names():
        backend = _guesser(name)
        if backend is None or not _guess(backend, path):
            continue
        try:
            manifest = backend.read_manifest(path)
        except (OrchestratorError, OSError, ValueError, KeyError, TypeError):
            manifest = None  # damaged or not ours: verify says what is wrong with it
        named = manifest.get("format") if isinstance(manifest, dict) else None
        if isinstance(named, str) and named != name and named in _BACKENDS:
            # formats may share a shape on disk; the manifest's word counts only if that
            # format recognises the target too
            other = _guesser(named)
            if other is not None and _guess(other, path):
                return named
        return name
    raise StorageError(f"{path} is not a checkpoint in any known format {list(_BACKENDS)}")
