"""The shim that lets writers which open their own file run against any target.

Some of the copied writers call ``h5py.File(path, "w")`` themselves (with ``import h5py``
at module level, as in their repositories).  Their ``run(target)`` binds the writer
module's global name ``h5py`` to :class:`H5pyShim` for the duration of the call:

* ``h5py.File(...)`` returns a :class:`Opened` wrapper around ``target`` (a real
  ``h5py.File`` for the reference run, the object yielded by ``orchestrator.capture``
  for ours): ``with``, ``close()`` and ``flush()`` are no-ops, everything else is
  forwarded to ``target``, so the file is closed (or committed) by the test, not the
  writer, and the path the writer computed is ignored;
* every other attribute (``h5py.string_dtype``, ``h5py.special_dtype``, ...) is the real
  ``h5py`` one.

Nothing else about the writers changes: their bodies are byte-for-byte the public code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import h5py


class Opened:
    """What the shim's ``h5py.File(...)`` returns: ``target``, except that it never closes."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __enter__(self) -> Any:
        return self._target

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        """The test closes (or commits) the target, not the writer."""

    def flush(self) -> None:
        """Nothing to flush before the test closes the target."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __getitem__(self, key: Any) -> Any:
        return self._target[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._target[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._target[key]

    def __contains__(self, key: object) -> bool:
        return key in self._target

    def __iter__(self) -> Iterator[Any]:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)

    def __bool__(self) -> bool:
        return True


class H5pyShim:
    """Stands for the ``h5py`` module inside one writer module while ``run`` calls it."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.opened: list[tuple[Any, ...]] = []  # the (path, mode, ...) the writer asked for

    def File(self, *args: Any, **kwargs: Any) -> Opened:  # h5py's spelling
        self.opened.append(args)
        return Opened(self._target)

    def __getattr__(self, name: str) -> Any:
        return getattr(h5py, name)


@contextlib.contextmanager
def h5py_opens(target: Any, module_globals: MutableMapping[str, Any]) -> Iterator[H5pyShim]:
    """Bind ``h5py`` in ``module_globals`` to a shim whose ``File`` returns ``target``."""
    saved = module_globals["h5py"]
    shim = H5pyShim(target)
    module_globals["h5py"] = shim
    try:
        yield shim
    finally:
        module_globals["h5py"] = saved
