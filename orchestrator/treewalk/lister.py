"""What a walker does with one item: list a directory into its index part.

A directory's own row is written by the walker that walks into it; its
entries' rows by the same walker, except its subdirectories, which are
returned to be queued (and get their rows where they are walked). Nothing is
followed: a symbolic link is a ``link`` row, a hard link a ``file`` row with
``nlink`` > 1 (with ``stat``), and only real directories are walked into.

What goes wrong is a row's ``error``, never an exception: a directory that
cannot be read (permissions) is reported and skipped, an entry that vanished
between the listing and its ``stat`` — or a directory between being queued and
being walked — is reported as vanished and the walk goes on.

Examples
--------
>>> import os, tempfile
>>> from orchestrator.treewalk.index import IndexPart
>>> top = tempfile.mkdtemp()
>>> os.mkdir(os.path.join(top, "sub")); open(os.path.join(top, "a"), "w").close()
>>> part = IndexPart(os.path.join(tempfile.mkdtemp(), "p.parquet"), 0, stat=False)
>>> tally = Tally()
>>> [os.path.basename(d) for d in list_item(top, part, tally)]
['sub']
>>> tally.entries, part.kinds  # the folder itself and its file
(2, [0, 1])
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from .index import DIR, FILE, LINK, OTHER

if TYPE_CHECKING:
    from .index import IndexPart
    from .operations import Operation

__all__ = ["Tally", "entry_item", "inject", "list_for_master", "list_item"]


#: faults the tests inject for real (set in a worker with :func:`inject`): a folder in
#: ``vanish`` is removed just before it is listed, one in ``deny`` cannot be opened
#: (EACCES) — as root, the tests cannot make a folder unreadable any other way
_FAULTS: dict[str, set[str]] = {}


def inject(vanish: set[str] | None = None, deny: set[str] | None = None) -> None:
    """Set (or with no arguments, clear) the faults of this process's listings.

    Examples
    --------
    >>> inject(deny={"/nowhere"}); inject()
    """
    _FAULTS.clear()
    if vanish:
        _FAULTS["vanish"] = set(vanish)
    if deny:
        _FAULTS["deny"] = set(deny)


def _inject(path: str) -> None:
    if path in _FAULTS.get("vanish", ()):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    if path in _FAULTS.get("deny", ()):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


@dataclass
class Tally:
    """What one walker met: entries listed (rows), directories walked into, and the
    entries reported rather than followed or read."""

    entries: int = 0
    directories: int = 0
    links: int = 0
    hard_links: int = 0
    unreadable: int = 0
    vanished: int = 0
    results: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _gone(err: OSError) -> bool:
    return err.errno in (errno.ENOENT, errno.ENOTDIR)


def list_item(path: str, part: IndexPart, tally: Tally, op: Operation | None = None) -> list[Any]:
    """List the directory ``path`` into ``part``: its own row and one per entry.

    Returns the items to queue: its subdirectories (not links), minus those the
    operation keeps the walk out of, plus any items the operation adds (chunks of
    a large file to copy).
    """
    if op is not None and op.hooked:
        return _list_for(op, path, part, tally)
    stat_rows = part.stat
    tally.entries += 1
    try:
        if _FAULTS:
            _inject(path)
        own = os.lstat(path) if stat_rows else None
        it = os.scandir(path)
    except OSError as err:
        part.add(path, DIR, error=_why(err, tally))
        return []
    tally.directories += 1
    _row(part, path, DIR, own)
    dirs: list[str] = []
    paths, kinds = part.paths, part.kinds  # the hot loop appends to the columns itself
    n = 0
    with it:
        for e in _entries(it, path, part, tally):
            try:
                if e.is_dir(follow_symlinks=False):
                    dirs.append(e.path)
                    continue
                kind = _kind(e, tally)
                if stat_rows:
                    s = e.stat(follow_symlinks=False)
            except OSError as err:  # gone before its lstat
                part.add(e.path, OTHER, error=_why(err, tally))
                n += 1
                continue
            n += 1
            if stat_rows:
                _row(part, e.path, kind, s)
                if kind == FILE and s.st_nlink > 1:
                    tally.hard_links += 1
            else:
                paths.append(e.path)
                kinds.append(kind)
    tally.entries += n
    return dirs


def list_for_master(path: str, part: IndexPart, tally: Tally) -> list[Any]:
    """CP's listing (Algorithm 1): the folder's own row here, and every entry returned
    to the master as an item — a subfolder as its path, anything else as ``(path,
    kind)``, whose row is written by the walker the master hands it to
    (:func:`entry_item`)."""
    tally.entries += 1
    try:
        if _FAULTS:
            _inject(path)
        own = os.lstat(path) if part.stat else None
        it = os.scandir(path)
    except OSError as err:
        part.add(path, DIR, error=_why(err, tally))
        return []
    tally.directories += 1
    _row(part, path, DIR, own)
    out: list[Any] = []
    with it:
        for e in _entries(it, path, part, tally):
            try:
                if e.is_dir(follow_symlinks=False):
                    out.append(e.path)
                    continue
                out.append((e.path, _kind(e, tally)))
            except OSError as err:
                part.add(e.path, OTHER, error=_why(err, tally))
                tally.entries += 1
    return out


def entry_item(item: tuple[str, int], part: IndexPart, tally: Tally) -> None:
    """CP: one entry that is not a folder, handed out by the master: its row."""
    path, kind = item
    tally.entries += 1
    if not part.stat:
        part.add(path, int(kind))
        return
    try:
        s = os.lstat(path)
    except OSError as err:
        part.add(path, int(kind), error=_why(err, tally))
        return
    _row(part, path, int(kind), s)


def _entries(it: Any, path: str, part: IndexPart, tally: Tally) -> Any:
    """The entries of an open listing; a folder that vanishes mid-listing ends it."""
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except OSError as err:
            part.add(path, DIR, error=_why(err, tally))
            tally.entries += 1
            return


def _kind(e: os.DirEntry[str], tally: Tally) -> int:
    if e.is_file(follow_symlinks=False):
        return FILE
    if e.is_symlink():
        tally.links += 1
        return LINK
    return OTHER


def _list_for(op: Operation, path: str, part: IndexPart, tally: Tally) -> list[Any]:
    """The listing of an operation that looks at entries (verify, copy, delete): the
    entries are gathered first, the operation says what it did with them, and the rows
    carry its verdicts. Operations do real I/O per entry; this path need not be lean."""
    tally.entries += 1
    try:
        if _FAULTS:
            _inject(path)
        own = os.lstat(path)
        it = os.scandir(path)
    except OSError as err:
        part.add(path, DIR, error=_why(err, tally))
        return []
    tally.directories += 1
    dirs: list[str] = []
    entries: list[tuple[str, int, os.stat_result | None]] = []
    with it:
        for e in _entries(it, path, part, tally):
            try:
                if e.is_dir(follow_symlinks=False):
                    dirs.append(e.path)
                    continue
                kind = _kind(e, tally)
                s = e.stat(follow_symlinks=False) if op.stat else None
            except OSError as err:
                part.add(e.path, OTHER, error=_why(err, tally))
                tally.entries += 1
                continue
            entries.append((e.path, kind, s))
    visit = op.directory(path, own, dirs, entries)
    _row(part, path, DIR, own, visit.results.get(path))
    for p in dirs:
        if p in visit.pruned:  # not walked into: its row is written here
            try:
                s = os.lstat(p) if part.stat else None
            except OSError as err:
                part.add(p, DIR, error=_why(err, tally))
                continue
            _row(part, p, DIR, s, visit.results.get(p))
            tally.entries += 1
    for p, kind, s in entries:
        _row(part, p, kind, s, visit.results.get(p))
        if kind == FILE and s is not None and s.st_nlink > 1:
            tally.hard_links += 1
    tally.entries += len(entries)
    tally.results += len(visit.results)
    return [d for d in dirs if d not in visit.pruned] + list(visit.items)


def _row(
    part: IndexPart, path: str, kind: int, s: os.stat_result | None, result: str | None = None
) -> None:
    if part.stat and s is not None:
        part.add(
            path,
            kind,
            size=s.st_size,
            mtime=s.st_mtime,
            mode=s.st_mode,
            nlink=s.st_nlink,
            result=result,
        )
    else:
        part.add(path, kind, result=result)


def _why(err: OSError, tally: Tally) -> str:
    if _gone(err):
        tally.vanished += 1
        return "vanished during the walk"
    if err.errno in (errno.EACCES, errno.EPERM):
        tally.unreadable += 1
        return f"unreadable: {err.strerror}"
    tally.unreadable += 1
    return f"cannot be read: {err.strerror or err}"
