"""What a walk does with what it lists: the operations of ``iorch walk --op``.

An :class:`Operation` is shipped to every walker (it must pickle) and sees
each directory once, on the walker that lists it, with the directory's
entries: it may act on them (verify a checkpoint, copy a file, delete an old
checkpoint), give each a verdict (the index's ``result`` column), keep the
walk out of a subdirectory (a Zarr checkpoint is one item, not a tree to
walk), and add items of its own to the queue (the chunks of a large file to
copy, which other walkers may steal).

``list`` and ``stat`` do nothing but index; they take the walker's lean path.

Examples
--------
>>> op = Callback(lambda path, kind: "big" if path.endswith(".h5") else None)
>>> v = op.directory("/d", None, [], [("/d/a.h5", 1, None), ("/d/b.txt", 1, None)])
>>> v.results
{'/d/a.h5': 'big'}
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .index import KINDS

__all__ = ["Callback", "Operation", "Visit"]

#: an entry as an operation sees it: path, kind code (index.KINDS), lstat (or None)
Entry = tuple[str, int, "os.stat_result | None"]


@dataclass
class Visit:
    """What an operation did with one directory: verdicts by path, subdirectories the
    walk stays out of, and extra items to queue."""

    results: dict[str, str] = field(default_factory=dict)
    pruned: set[str] = field(default_factory=set)
    items: list[Any] = field(default_factory=list)


class Operation:
    """Base of the walk's operations: indexing only (``list``; ``stat`` with stat=True).

    Examples
    --------
    >>> Operation().name, Operation(stat=True).name
    ('list', 'stat')
    """

    #: whether :meth:`directory` is called (False: the walker's lean listing path)
    hooked = False
    #: whether rows carry a verdict column
    results = False

    def __init__(self, stat: bool = False) -> None:
        self.stat = stat

    @property
    def name(self) -> str:
        """The operation's name in the CLI."""
        return "stat" if self.stat else "list"

    def directory(
        self,
        path: str,
        own: os.stat_result | None,
        dirs: list[str],
        entries: list[Entry],
        dir_fd: int | None = None,
    ) -> Visit:
        """Act on one directory's entries (``dirs``: its subdirectories; ``entries``:
        everything else). Runs on the walker that listed it; ``dir_fd`` is the folder,
        open: act relative to it (``unlink(name, dir_fd=...)``), never by a path that a
        link swapped in meanwhile could lead elsewhere."""
        return Visit()

    def item(self, item: Any) -> list[Any]:
        """Process an item the operation queued itself (not a directory path); returns
        the items it leads to."""
        raise NotImplementedError(f"{type(self).__name__} queues no items of its own")

    def summary(self) -> dict[str, Any]:
        """What this walker's copy of the operation did (merged by the driver)."""
        return {}

    def finish(self, summaries: list[dict[str, Any]]) -> None:
        """Run once by the driver after the walk, with every walker's :meth:`summary`."""


class Callback(Operation):
    """A user's function called once on every entry, on the walker that lists it:
    ``callback(path, kind)``, ``kind`` one of ``dir``, ``file``, ``link``, ``other``
    (a directory when it is walked into); what it returns, if not None, is the
    entry's ``result`` (as text).

    Examples
    --------
    >>> Callback(print).name
    'callback'
    """

    hooked = True
    results = True

    def __init__(self, callback: Callable[[str, str], Any], stat: bool = False) -> None:
        super().__init__(stat)
        self.callback = callback

    @property
    def name(self) -> str:
        """The operation's name."""
        return "callback"

    def directory(
        self,
        path: str,
        own: os.stat_result | None,
        dirs: list[str],
        entries: list[Entry],
        dir_fd: int | None = None,
    ) -> Visit:
        """Call the callback on each entry."""
        out = Visit()
        r = self.callback(path, "dir")
        if r is not None:
            out.results[path] = str(r)
        for p, kind, _ in entries:
            r = self.callback(p, KINDS[kind])
            if r is not None:
                out.results[p] = str(r)
        return out
