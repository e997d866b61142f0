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
>>> st = os.lstat(top)
>>> items = list_item(dir_item(top, st.st_ino), part, tally, dev=st.st_dev)
>>> [os.path.basename(d[1]) for d in items]
['sub']
>>> tally.entries, part.kinds  # its file, then the folder itself (written last)
(2, [1, 0])
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

__all__ = ["Tally", "dir_item", "entry_item", "inject", "list_for_master", "list_item"]


#: faults the tests inject for real (set in a worker with :func:`inject`): a folder in
#: ``vanish`` is removed just before it is listed, one in ``deny`` cannot be opened
#: (EACCES) — as root, the tests cannot make a folder unreadable any other way
_FAULTS: dict[str, set[str]] = {}


_SWAPS: dict[str, tuple[str, str]] = {}


def inject(
    vanish: set[str] | None = None,
    deny: set[str] | None = None,
    swap: dict[str, tuple[str, str]] | None = None,
) -> None:
    """Set (or with no arguments, clear) the faults of this process's listings. ``swap``
    maps a folder to ``(folder on its path, target)``: just before the folder is opened,
    that folder is moved aside and a link to ``target`` put in its place — a real swap,
    as a hostile user racing the walk makes one.

    Examples
    --------
    >>> inject(deny={"/nowhere"}); inject()
    """
    _FAULTS.clear()
    _SWAPS.clear()
    if vanish:
        _FAULTS["vanish"] = set(vanish)
    if deny:
        _FAULTS["deny"] = set(deny)
    if swap:
        _SWAPS.update(swap)
        _FAULTS["swap"] = set(swap)


def _inject(path: str) -> None:
    if path in _FAULTS.get("swap", ()):
        folder, target = _SWAPS[path]
        os.rename(folder, folder + ".moved")
        os.symlink(target, folder)
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
    replaced: int = 0
    results: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _gone(err: OSError) -> bool:
    return err.errno in (errno.ENOENT, errno.ENOTDIR)


def dir_item(path: str, ino: int) -> tuple[str, str, int]:
    """A folder to walk, with the inode it had when its parent was listed."""
    return ("d", path, int(ino))


def _open(item: Any, dev: int, part: IndexPart, tally: Tally) -> tuple[int, os.stat_result] | None:
    """Open a queued folder without following a link, and check it is still the folder
    that was listed: a folder swapped for a link (to anywhere) since — or any folder on
    its path swapped, so that the path now leads elsewhere — has another inode or
    device. ``None`` (and a row saying why) if it cannot be walked."""
    _, path, ino = item
    tally.entries += 1
    try:
        if _FAULTS:
            _inject(path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            # the folder is a link now (O_NOFOLLOW says ELOOP, or ENOTDIR with O_DIRECTORY)
            tally.replaced += 1
            part.add(path, LINK, error="replaced by a link during the walk: not followed")
        else:
            part.add(path, DIR, error=_why(err, tally))
        return None
    own = os.fstat(fd)
    if own.st_dev != dev or own.st_ino != ino:
        os.close(fd)
        if own.st_dev != dev:
            tally.unreadable += 1
            why = "another file system: not walked"
        else:
            tally.replaced += 1
            why = "replaced during the walk (its path leads elsewhere now): not walked"
        part.add(path, DIR, error=why)
        return None
    tally.directories += 1
    return fd, own


def list_item(
    item: Any, part: IndexPart, tally: Tally, op: Operation | None = None, dev: int = 0
) -> list[Any]:
    """List a queued folder (:func:`dir_item`) into ``part``: its own row and one per
    entry. ``dev`` is the walk's file system.

    Returns the items to queue: its subfolders (not links), minus those the operation
    keeps the walk out of, plus any items the operation adds (pieces of a large file).
    """
    opened = _open(item, dev, part, tally)
    if opened is None:
        return []
    fd, own = opened
    path = item[1]
    try:
        if op is not None and op.hooked:
            return _list_for(op, path, fd, own, part, tally)
        return _list(path, fd, own, part, tally)
    finally:
        os.close(fd)


def _list(path: str, fd: int, own: os.stat_result, part: IndexPart, tally: Tally) -> list[Any]:
    stat_rows = part.stat
    base = path if path.endswith("/") else path + "/"
    dirs: list[Any] = []
    failure: list[str] = []
    paths, kinds = part.paths, part.kinds  # the hot loop appends to the columns itself
    n = 0
    with os.scandir(fd) as it:
        for e in _entries(it, failure, tally):
            p = base + e.name
            n += 1
            if not n & 4095 and part.full():  # a huge folder: its rows go out in batches
                part.flush()
                paths, kinds = part.paths, part.kinds
            try:
                if e.is_dir(follow_symlinks=False):
                    dirs.append(("d", p, e.inode()))
                    n -= 1  # its row is written where it is walked
                    continue
                kind = _kind(e, tally)
                if stat_rows:
                    s = e.stat(follow_symlinks=False)
            except OSError as err:  # gone before its lstat
                part.add(p, OTHER, error=_why(err, tally))
                paths, kinds = part.paths, part.kinds  # add() may have flushed the batch
                continue
            if stat_rows:
                _row(part, p, kind, s)
                if kind == FILE and s.st_nlink > 1:
                    tally.hard_links += 1
            else:
                paths.append(p)
                kinds.append(kind)
    _row(part, path, DIR, own, ino=own.st_ino, error=failure[0] if failure else None)
    tally.entries += n
    return dirs


def list_for_master(item: Any, part: IndexPart, tally: Tally, dev: int = 0) -> list[Any]:
    """CP's listing (Algorithm 1): the folder's own row here, and every entry returned
    to the master as an item — a subfolder as :func:`dir_item`, anything else as
    ``("e", path, kind)``, whose row is written by the walker the master hands it to
    (:func:`entry_item`)."""
    opened = _open(item, dev, part, tally)
    if opened is None:
        return []
    fd, own = opened
    path = item[1]
    base = path if path.endswith("/") else path + "/"
    failure: list[str] = []
    out: list[Any] = []
    try:
        with os.scandir(fd) as it:
            for e in _entries(it, failure, tally):
                p = base + e.name
                try:
                    if e.is_dir(follow_symlinks=False):
                        out.append(("d", p, e.inode()))
                        continue
                    out.append(("e", p, _kind(e, tally)))
                except OSError as err:
                    part.add(p, OTHER, error=_why(err, tally))
                    tally.entries += 1
    finally:
        os.close(fd)
    _row(
        part,
        path,
        DIR,
        own if part.stat else None,
        ino=own.st_ino,
        error=failure[0] if failure else None,
    )
    return out


def entry_item(item: Any, part: IndexPart, tally: Tally) -> None:
    """CP: one entry that is not a folder, handed out by the master: its row."""
    _, path, kind = item
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


def _entries(it: Any, failure: list[str], tally: Tally) -> Any:
    """The entries of an open listing; a folder that fails mid-listing ends it, and why
    goes to ``failure`` (for the folder's own row: one row per entry)."""
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except OSError as err:
            failure.append(_why(err, tally))
            return


def _kind(e: os.DirEntry[str], tally: Tally) -> int:
    if e.is_file(follow_symlinks=False):
        return FILE
    if e.is_symlink():
        tally.links += 1
        return LINK
    return OTHER


def _list_for(
    op: Operation, path: str, fd: int, own: os.stat_result, part: IndexPart, tally: Tally
) -> list[Any]:
    """The listing of an operation that looks at entries (verify, copy, delete): the
    entries are gathered first, the operation says what it did with them (relative to
    the open folder, ``dir_fd``), and the rows carry its verdicts. Operations do real
    I/O per entry; this path need not be lean."""
    base = path if path.endswith("/") else path + "/"
    dirs: list[str] = []
    inodes: dict[str, int] = {}
    failure: list[str] = []
    entries: list[tuple[str, int, os.stat_result | None]] = []
    with os.scandir(fd) as it:
        for e in _entries(it, failure, tally):
            p = base + e.name
            try:
                if e.is_dir(follow_symlinks=False):
                    dirs.append(p)
                    inodes[p] = e.inode()
                    continue
                kind = _kind(e, tally)
                s = e.stat(follow_symlinks=False) if op.stat else None
            except OSError as err:
                part.add(p, OTHER, error=_why(err, tally))
                tally.entries += 1
                continue
            entries.append((p, kind, s))
    visit = op.directory(path, own, dirs, entries, dir_fd=fd)
    _row(
        part,
        path,
        DIR,
        own,
        visit.results.get(path),
        ino=own.st_ino,
        error=failure[0] if failure else None,
    )
    for p in dirs:
        if p in visit.pruned:  # not walked into: its row is written here
            tally.entries += 1
            verdict = visit.results.get(p)
            try:
                s = os.lstat(p) if part.stat else None
            except OSError as err:
                if verdict is not None:  # the operation removed it: its verdict says so
                    part.add(p, DIR, result=verdict)
                else:
                    part.add(p, DIR, error=_why(err, tally))
                continue
            _row(part, p, DIR, s, verdict)
    for p, kind, s in entries:
        _row(part, p, kind, s, visit.results.get(p))
        if kind == FILE and s is not None and s.st_nlink > 1:
            tally.hard_links += 1
    tally.entries += len(entries)
    tally.results += len(visit.results)
    return [("d", d, inodes[d]) for d in dirs if d not in visit.pruned] + list(visit.items)


def _row(
    part: IndexPart,
    path: str,
    kind: int,
    s: os.stat_result | None,
    result: str | None = None,
    ino: int | None = None,
    error: str | None = None,
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
            ino=ino,
            error=error,
        )
    else:
        part.add(path, kind, result=result, ino=ino, error=error)


def _why(err: OSError, tally: Tally) -> str:
    if _gone(err):
        tally.vanished += 1
        return "vanished during the walk"
    if err.errno in (errno.EACCES, errno.EPERM):
        tally.unreadable += 1
        return f"unreadable: {err.strerror}"
    tally.unreadable += 1
    return f"cannot be read: {err.strerror or err}"
