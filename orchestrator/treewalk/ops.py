"""The operations ``iorch walk --op`` runs over a checkpoint tree: verify, checksum,
copy and delete (each an :class:`~orchestrator.treewalk.operations.Operation`).

Each runs on the walker that lists a folder, on that folder's entries, so the
work spreads as the walk does. A checkpoint that is a folder (Zarr, HDF5 with
subfiles) is one item: the walk does not go inside it.

Examples
--------
>>> Verify().name, Checksum().name
('verify', 'checksum')
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from typing import Any

from ..errors import InputError, OrchestratorError
from .index import FILE, LINK
from .operations import Entry, Operation, Visit

__all__ = ["Checksum", "Copy", "Delete", "Verify"]

#: verdicts kept in a walker's summary (the index has them all)
KEEP = 1000


def open_regular(name: str, dir_fd: int | None = None) -> int:
    """Open a regular file for reading, never a link (``O_NOFOLLOW``) and never blocking
    on a FIFO swapped in since the listing (``O_NONBLOCK``, then ``fstat``)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file (replaced during the walk)", name)
    os.set_blocking(fd, True)
    return fd


def _through(path: str, dir_fd: int | None) -> str:
    """``path`` read through its open folder (``/proc/self/fd/N/name``): a folder on the
    path swapped for a link since the listing cannot lead the read elsewhere."""
    if dir_fd is None or not os.path.isdir(f"/proc/self/fd/{dir_fd}"):
        return path
    return f"/proc/self/fd/{dir_fd}/{os.path.basename(path)}"


def _under(path: str, root: str) -> bool:
    """``path`` strictly inside ``root`` (``/`` included)."""
    return path != root and path.startswith(root.rstrip("/") + "/")


def _candidate(path: str) -> bool:
    from ..engine.backends import looks_like_checkpoint

    return looks_like_checkpoint(path)


class Verify(Operation):
    """Check every checkpoint under the tree against its manifest, as ``iorch verify``
    does one: ``ok``, or ``damaged: <the first mismatch>``.

    Examples
    --------
    >>> Verify().verdict("/no/such.h5")
    'damaged: /no/such.h5 does not exist'
    """

    hooked = True
    results = True

    def __init__(self) -> None:
        super().__init__(stat=False)
        self.checked = 0
        self.damaged: list[str] = []

    @property
    def name(self) -> str:
        """``verify``."""
        return "verify"

    def verdict(self, path: str, dir_fd: int | None = None) -> str:
        """``ok`` or what is wrong with the checkpoint at ``path`` (read through its open
        folder ``dir_fd`` when given)."""
        from ..engine.verify import verify

        self.checked += 1
        where = _through(path, dir_fd)
        try:
            bad = [b.replace(where, path) for b in verify(where)]
        except OrchestratorError as err:
            bad = [str(err).replace(where, path)]
        if not bad:
            return "ok"
        if len(self.damaged) < KEEP:
            self.damaged.append(path)
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return f"damaged: {bad[0]}{more}"

    def directory(
        self, path: str, own: Any, dirs: list[str], entries: list[Entry], dir_fd: int | None = None
    ) -> Visit:
        """Verify the checkpoints among the entries; stay out of checkpoint folders."""
        out = Visit()
        if _candidate(path):  # only the walk's root can get here being one
            out.results[path] = self.verdict(path)
            out.pruned = set(dirs)
            return out
        for d in dirs:
            if _candidate(_through(d, dir_fd)) or _candidate(d):
                out.pruned.add(d)
                out.results[d] = self.verdict(d, dir_fd)
        for p, kind, _ in entries:
            if kind == FILE and (_candidate(_through(p, dir_fd)) or _candidate(p)):
                out.results[p] = self.verdict(p, dir_fd)
        return out

    def summary(self) -> dict[str, Any]:
        """Checkpoints checked and (up to 1,000 of) the damaged ones."""
        return {"checked": self.checked, "damaged": self.damaged}


class Checksum(Operation):
    """The CRC-32 of every file (zlib's values, hex) as its ``result``.

    Examples
    --------
    >>> import tempfile
    >>> f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"abc"); f.close()
    >>> Checksum().crc(f.name)
    '352441c2'
    """

    hooked = True
    results = True

    def __init__(self, block: int = 8 << 20) -> None:
        super().__init__(stat=True)
        self.block = block
        self.nbytes = 0

    @property
    def name(self) -> str:
        """``checksum``."""
        return "checksum"

    def crc(self, path: str, dir_fd: int | None = None) -> str:
        """The file's CRC-32, read in blocks (``path`` relative to ``dir_fd`` if given)."""
        from ..engine.checksums import crc32

        name = os.path.basename(path) if dir_fd is not None else path
        fd = open_regular(name, dir_fd)
        value = 0
        with open(fd, "rb", buffering=0) as f:
            while chunk := f.read(self.block):
                value = crc32(chunk, value)
                self.nbytes += len(chunk)
        return f"{value & 0xFFFFFFFF:08x}"

    def directory(
        self, path: str, own: Any, dirs: list[str], entries: list[Entry], dir_fd: int | None = None
    ) -> Visit:
        """Checksum each regular file (a file gone meanwhile says so)."""
        out = Visit()
        for p, kind, _ in entries:
            if kind == FILE:
                try:
                    out.results[p] = self.crc(p, dir_fd)
                except OSError as err:
                    out.results[p] = f"unreadable: {err.strerror or err}"
        return out

    def summary(self) -> dict[str, Any]:
        """Bytes read."""
        return {"bytes": self.nbytes}


def _ours(path: str) -> bool:
    """A checkpoint a stage of ours wrote: its manifest reads and checks. What merely
    looks like one (any HDF5 file, a netCDF-4 file, a folder holding a master.h5) is the
    user's, and never deleted."""
    from ..engine.backends import read_checked_manifest

    if not _candidate(path):
        return False
    try:
        read_checked_manifest(path)
    except Exception:  # damaged or not ours: h5py, zarr and json each raise their own
        return False
    return True


class Delete(Operation):
    """Prune checkpoints: those older than ``older_than`` seconds and not among the
    ``keep_latest`` newest of their folder, and stages' unfinished outputs (``.<name>.tmp-
    <hex>``, left by a crash) older than ``older_than``. A checkpoint is one whose
    manifest reads as ours (a damaged one is kept, for ``verify`` to report). Nothing
    else is ever deleted: not a user's file, not a link's target, nothing outside
    ``root``; deletions are made by name in the open folder, so a folder swapped for a
    link during the walk cannot lead them elsewhere.

    ``apply=False`` (the default) is a dry run: each candidate's ``result`` says
    ``would delete``.

    Examples
    --------
    >>> Delete("/runs", keep_latest=2).name
    'delete'
    >>> Delete("/runs")
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: delete needs older_than or keep_latest (or both)
    """

    hooked = True
    results = True

    def __init__(
        self,
        root: str,
        older_than: float | None = None,
        keep_latest: int | None = None,
        apply: bool = False,
        now: float | None = None,
    ) -> None:
        super().__init__(stat=True)
        if older_than is None and keep_latest is None:
            raise InputError("delete needs older_than or keep_latest (or both)")
        if older_than is not None and (
            not isinstance(older_than, (int, float)) or not older_than >= 0
        ):
            raise InputError(f"older_than must be seconds >= 0, got {older_than!r}")
        if keep_latest is not None and (
            not isinstance(keep_latest, int) or isinstance(keep_latest, bool) or keep_latest < 0
        ):
            raise InputError(f"keep_latest must be a whole number >= 0, got {keep_latest!r}")
        self.root = os.path.realpath(root)  # as the walk resolves its root
        self.older_than, self.keep_latest, self.apply = older_than, keep_latest, apply
        self.now = time.time() if now is None else now
        self.deleted = 0
        self.nbytes = 0

    @property
    def name(self) -> str:
        """``delete``."""
        return "delete"

    def _old(self, mtime: float) -> bool:
        return self.older_than is not None and self.now - mtime > self.older_than

    def directory(
        self, path: str, own: Any, dirs: list[str], entries: list[Entry], dir_fd: int | None = None
    ) -> Visit:
        """Decide for this folder's checkpoints and leftovers; delete them if applying."""
        from ..engine.backends import TEMPORARY

        out = Visit()
        found: list[tuple[float, str, bool]] = []  # mtime, path, is a folder
        for d in dirs:
            name = os.path.basename(d)
            if TEMPORARY.match(name) or _ours(_through(d, dir_fd)):
                out.pruned.add(d)  # a checkpoint is an item: never walked into
                try:
                    st = os.lstat(name, dir_fd=dir_fd) if dir_fd is not None else os.lstat(d)
                except OSError:
                    continue
                found.append((st.st_mtime, d, True))
        for p, kind, s in entries:
            if (
                kind == FILE
                and s is not None
                and (TEMPORARY.match(os.path.basename(p)) or _ours(_through(p, dir_fd)))
            ):
                found.append((s.st_mtime, p, False))
        checkpoints = sorted(
            (f for f in found if not TEMPORARY.match(os.path.basename(f[1]))), reverse=True
        )
        kept = (
            set() if self.keep_latest is None else {f[1] for f in checkpoints[: self.keep_latest]}
        )
        for mtime, p, folder in found:
            leftover = bool(TEMPORARY.match(os.path.basename(p)))
            if leftover:
                doomed = self._old(mtime)
            else:
                doomed = p not in kept and (self.older_than is None or self._old(mtime))
            if doomed:
                out.results[p] = self._remove(p, folder, dir_fd)
            elif not leftover:
                out.results[p] = "kept"
        return out

    def _remove(self, path: str, folder: bool, dir_fd: int | None) -> str:
        real = os.path.abspath(path)
        if not _under(real, self.root):  # belt and braces: listings come from root
            return "refused: outside the tree"
        if not self.apply:
            return "would delete"
        # by name in the open folder: a path could lead elsewhere if a folder on it was
        # swapped for a link since it was listed (shutil.rmtree with dir_fd resists that)
        name, where = (os.path.basename(real), dir_fd) if dir_fd is not None else (real, None)
        try:
            if folder:
                shutil.rmtree(name, dir_fd=where)
            else:
                self.nbytes += os.lstat(name, dir_fd=where).st_size
                os.unlink(name, dir_fd=where)
        except OSError as err:
            return f"not deleted: {err.strerror or err}"
        self.deleted += 1
        return "deleted"

    def summary(self) -> dict[str, Any]:
        """Targets deleted, and the bytes of the files among them."""
        return {"deleted": self.deleted, "bytes": self.nbytes}


def _copy_range(fd_in: int, fd_out: int, off: int, n: int) -> int:
    """Copy ``n`` bytes at ``off`` in the kernel where it can (copy_file_range: no copy
    through user space, a reflink on file systems that have them), else by reads."""
    done = 0
    try:
        while done < n:
            k = os.copy_file_range(fd_in, fd_out, n - done, off + done, off + done)
            if k == 0:  # the source shrank meanwhile
                return done
            done += k
        return done
    except OSError:  # across file systems (EXDEV) or unsupported: plain reads and writes
        pass
    while done < n:
        data = os.pread(fd_in, min(n - done, 8 << 20), off + done)
        if not data:
            break
        os.pwrite(fd_out, data, off + done)
        done += len(data)
    return done


def _safe_mode(mode: int) -> int:
    """A copied entry's permission bits, without setuid/setgid: the copy belongs to the
    copier (root, for an archive), not to the file's owner."""
    return stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID)


def _stamp(to: str, s: os.stat_result) -> None:
    """A copied file's mode (no setuid/setgid) and times, never through a link."""
    os.chmod(to, _safe_mode(s.st_mode), follow_symlinks=False)
    os.utime(to, ns=(s.st_atime_ns, s.st_mtime_ns), follow_symlinks=False)


class Copy(Operation):
    """Copy the tree to ``dest`` (an archive): folders made as they are walked, files up
    to ``chunk`` bytes copied whole by the walker that lists them, larger ones cut into
    ``chunk``-byte pieces that are queued as items any walker may steal (as ``dcp``
    does). Links are copied as links (never followed); sockets, FIFOs and devices are
    skipped and said so.

    Examples
    --------
    >>> Copy("/runs", "/runs/archive")
    Traceback (most recent call last):
    ...
    orchestrator.errors.InputError: dest '/runs/archive' is inside the tree being copied
    """

    hooked = True
    results = True

    def __init__(self, root: str, dest: str, chunk: int = 64 << 20) -> None:
        super().__init__(stat=True)
        self.root, self.dest = os.path.realpath(root), os.path.realpath(dest)
        # resolved: a DEST through a link (or under a linked parent) may lead into the tree
        if self.dest == self.root or _under(self.dest, self.root):
            raise InputError(f"dest {dest!r} is inside the tree being copied")
        if os.path.lexists(self.dest) and (not os.path.isdir(self.dest) or os.listdir(self.dest)):
            raise InputError(f"dest {dest!r} exists and is not an empty folder")
        if not isinstance(chunk, int) or chunk < 4096:
            raise InputError(f"chunk must be a whole number of bytes >= 4096, got {chunk!r}")
        self.chunk = chunk
        self.files = 0
        self.nbytes = 0
        self.pieces: list[str] = []  # files copied in pieces: their times are set at the end
        self.failed: list[str] = []  # pieces whose source could not be read
        self.modes: list[tuple[str, int]] = []  # DEST folders' final modes, set at the end
        self.problems = 0  # files not copied, or copied short

    @property
    def name(self) -> str:
        """``copy``."""
        return "copy"

    def _to(self, path: str) -> str:
        rel = os.path.relpath(path, self.root)
        return self.dest if rel == "." else os.path.join(self.dest, rel)

    def directory(
        self, path: str, own: Any, dirs: list[str], entries: list[Entry], dir_fd: int | None = None
    ) -> Visit:
        """Make the folder, copy small files, queue the pieces of large ones."""
        out = Visit()
        target = self._to(path)
        # private (0700) while the copy runs: nobody else can plant a link in DEST for a
        # later write to follow; the source's mode is set after the walk (finish)
        try:
            os.mkdir(target, 0o700)
        except FileExistsError:
            pass
        if os.path.islink(target) or not os.path.isdir(target):
            raise OSError(0, "is not a folder of ours (a link?)", target)
        os.chmod(target, 0o700, follow_symlinks=False)
        if own is not None:
            self.modes.append((target, _safe_mode(own.st_mode)))
        for p, kind, s in entries:
            to = self._to(p)
            try:
                if kind == LINK:
                    name = os.path.basename(p)
                    os.symlink(os.readlink(name, dir_fd=dir_fd) if dir_fd else os.readlink(p), to)
                elif kind != FILE or s is None:
                    out.results[p] = "skipped: not a regular file"
                elif s.st_size <= self.chunk:
                    src = open_regular(os.path.basename(p) if dir_fd is not None else p, dir_fd)
                    try:
                        out_fd = os.open(
                            to, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600
                        )
                        try:
                            done = _copy_range(src, out_fd, 0, s.st_size)
                        finally:
                            os.close(out_fd)
                    finally:
                        os.close(src)
                    _stamp(to, s)
                    self.files += 1
                    self.nbytes += done
                    if done != s.st_size:
                        out.results[p] = f"copied {done} of {s.st_size} bytes (it shrank)"
                        self.problems += 1
                else:
                    fd = os.open(to, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                    try:
                        os.ftruncate(fd, s.st_size)
                    finally:
                        os.close(fd)
                    self.files += 1
                    if len(self.pieces) < 1 << 20:
                        self.pieces.append(p)
                    out.items += [
                        ("piece", p, to, off, min(self.chunk, s.st_size - off), s.st_ino, s.st_dev)
                        for off in range(0, s.st_size, self.chunk)
                    ]
            except OSError as err:
                out.results[p] = f"not copied: {err.strerror or err}"
                self.problems += 1
        return out

    def item(self, item: Any) -> list[Any]:
        """Copy one piece of a large file (the file was made at its full size); a source
        gone meanwhile is counted (``failed``), not fatal."""
        _, src, to, off, n, ino, dev = item
        try:
            fd_in = open_regular(src)
        except OSError as err:
            self.failed.append(f"{src}: {err.strerror or err}")
            return []
        try:
            got = os.fstat(fd_in)
            if (got.st_ino, got.st_dev) != (ino, dev):  # a folder on its path was swapped
                self.failed.append(f"{src}: replaced during the walk")
                return []
            fd_out = os.open(to, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                done = _copy_range(fd_in, fd_out, off, n)
            finally:
                os.close(fd_out)
        finally:
            os.close(fd_in)
        self.nbytes += done
        if done != n:
            self.failed.append(f"{src}: {done} of {n} bytes at {off} (it shrank)")
        return []

    def summary(self) -> dict[str, Any]:
        """Files and bytes copied, and the files copied in pieces."""
        return {
            "files": self.files,
            "bytes": self.nbytes,
            "pieces": self.pieces,
            "failed": self.failed[:KEEP],
            "problems": self.problems + len(self.failed),
            "modes": self.modes,
        }

    def finish(self, summaries: list[dict[str, Any]]) -> None:
        """After the walk: the times and modes of files copied in pieces (no walker knew
        it wrote the last piece), then the folders' modes, deepest first."""
        for s in summaries:
            for p in s.get("pieces", ()):
                try:
                    _stamp(self._to(p), os.lstat(p))
                except OSError:
                    pass
        modes = [m for s in summaries for m in s.get("modes", ())]
        for target, mode in sorted(modes, key=lambda m: -m[0].count("/")):
            try:
                os.chmod(target, mode, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
