"""The walk's index: each walker streams the rows it lists to its own Parquet file.

No process ever holds the whole list of entries: a walker keeps at most
``batch`` rows in memory and appends them to ``part-<rank>.parquet`` under the
index folder; the index is the set of these files, read as one dataset with
pyarrow (:func:`read_index`) or pandas.

One row per entry, written by the walker that listed it (a directory's row by
the walker that walked into it): ``path``, ``kind`` (``dir``, ``file``,
``link`` — never followed —, ``other``: sockets, FIFOs, devices), ``walker``,
and with ``stat``: ``size``, ``mtime``, ``mode`` and ``nlink`` (a file with
``nlink`` > 1 is a hard link: reported, listed once per name, as ``find``
does). ``result`` is what the operation said of the entry (``verify``: the
damage found), ``error`` why an entry could not be listed (unreadable,
vanished during the walk, a name that is not UTF-8).

Examples
--------
>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> part = IndexPart(os.path.join(folder, "part-0.parquet"), rank=0, stat=False)
>>> part.add("/data/a.h5", FILE)
>>> part.close()
1
>>> read_index(folder).column("path").to_pylist()
['/data/a.h5']
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DIR", "FILE", "KINDS", "LINK", "OTHER", "IndexPart", "read_index"]

#: entry kinds, stored as a dictionary column (codes are the positions here)
KINDS = ("dir", "file", "link", "other")
DIR, FILE, LINK, OTHER = range(4)

#: rows a walker keeps before appending them to its file (~100 bytes each)
BATCH = 65536


def _schema(stat: bool, results: bool) -> Any:
    import pyarrow as pa

    fields = [
        pa.field("path", pa.string()),
        pa.field("kind", pa.dictionary(pa.int8(), pa.string())),
        pa.field("walker", pa.int32()),
        pa.field("ino", pa.int64()),  # a folder's inode (files: null; with stat: st_ino)
    ]
    if stat:
        fields += [
            pa.field("size", pa.int64()),
            pa.field("mtime", pa.float64()),
            pa.field("mode", pa.int32()),
            pa.field("nlink", pa.int32()),
        ]
    if results:
        fields.append(pa.field("result", pa.string()))
    fields.append(pa.field("error", pa.string()))
    return pa.schema(fields)


class IndexPart:
    """One walker's part of the index, appended to its Parquet file in batches.

    Parameters
    ----------
    path : str
        The Parquet file (created at the first flush, or at :meth:`close` if
        the walker listed nothing, so that every walker leaves a part).
    rank : int
        The walker's rank (the ``walker`` column).
    stat : bool
        Whether rows carry ``size``, ``mtime``, ``mode`` and ``nlink``.
    results : bool
        Whether rows carry a ``result`` (an operation's verdict).
    batch : int
        Rows kept in memory before they are appended.

    Examples
    --------
    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "p.parquet")
    >>> part = IndexPart(f, rank=3, stat=True)
    >>> part.add("/x", DIR, size=4096, mtime=0.0, mode=0o40755, nlink=2)
    >>> part.close()
    1
    """

    def __init__(
        self, path: str, rank: int, stat: bool, results: bool = False, batch: int = BATCH
    ) -> None:
        self.path, self.rank, self.stat, self.results = path, rank, stat, results
        self.batch = batch
        self.schema = _schema(stat, results)
        self.rows = 0
        self._writer: Any = None
        self._clear()

    def _clear(self) -> None:
        self.paths: list[str] = []
        self.kinds: list[int] = []
        self.sizes: list[int | None] = []
        self.mtimes: list[float | None] = []
        self.modes: list[int | None] = []
        self.nlinks: list[int | None] = []
        self.verdicts: dict[int, str] = {}  # row within the batch -> result
        self.inodes: dict[int, int] = {}  # row within the batch -> a folder's inode
        self.errors: dict[int, str] = {}  # row within the batch -> error

    def add(
        self,
        path: str,
        kind: int,
        *,
        size: int | None = None,
        mtime: float | None = None,
        mode: int | None = None,
        nlink: int | None = None,
        result: str | None = None,
        error: str | None = None,
        ino: int | None = None,
    ) -> None:
        """One row (the walker's hot loop appends to the column lists directly)."""
        if ino is not None:
            self.inodes[len(self.paths)] = ino
        if error is not None:
            self.errors[len(self.paths)] = error
        if result is not None:
            self.verdicts[len(self.paths)] = result
        self.paths.append(path)
        self.kinds.append(kind)
        if self.stat:
            self.sizes.append(size)
            self.mtimes.append(mtime)
            self.modes.append(mode)
            self.nlinks.append(nlink)
        if len(self.paths) >= self.batch:
            self.flush()

    def full(self) -> bool:
        """Whether the batch should be appended now."""
        return len(self.paths) >= self.batch

    def flush(self) -> None:
        """Append the rows kept so far to the file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = len(self.paths)
        if n == 0 and self._writer is not None:
            return
        errors = dict(self.errors)
        paths = _utf8(self.paths, errors)
        kinds = pa.DictionaryArray.from_arrays(
            pa.array(self.kinds, pa.int8()), pa.array(KINDS, pa.string())
        )
        columns: list[Any] = [
            paths,
            kinds,
            pa.array(np.full(n, self.rank, np.int32)),
            _sparse(self.inodes, n, pa.int64()),
        ]
        if self.stat:
            columns += [
                pa.array(self.sizes, pa.int64()),
                pa.array(self.mtimes, pa.float64()),
                pa.array(self.modes, pa.int32()),
                pa.array(self.nlinks, pa.int32()),
            ]
        if self.results:
            columns.append(_sparse(self.verdicts, n))
        columns.append(_sparse(errors, n))
        table = pa.Table.from_arrays(columns, schema=self.schema)
        if self._writer is None:
            # no dictionary for paths (all distinct): trying one cost 0.3 s per million rows,
            # a quarter of a walker's time, for a larger file
            repeated = [f.name for f in self.schema if f.name not in ("path", "size", "mtime")]
            self._writer = pq.ParquetWriter(
                self.path, self.schema, compression="zstd", use_dictionary=repeated
            )
        self._writer.write_table(table)
        self.rows += n
        self._clear()

    def close(self) -> int:
        """Append what is left, close the file; returns the rows written in all."""
        self.flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.rows


def _sparse(values: dict[int, Any], n: int, kind: Any = None) -> Any:
    import pyarrow as pa

    kind = pa.string() if kind is None else kind
    if not values:
        return pa.nulls(n, kind)
    column: list[Any] = [None] * n
    for i, v in values.items():
        column[i] = v
    if kind == pa.string():  # verdicts and errors may quote a name that is not UTF-8
        column = [_escaped(v) if v is not None else None for v in column]
    return pa.array(column, kind)


def _escaped(text: str) -> str:
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _utf8(paths: list[str], errors: dict[int, str]) -> Any:
    """The paths as an Arrow string column; a name that is not UTF-8 (Linux allows any
    bytes) is kept with ``\\x`` escapes and its row says so in ``error``."""
    import pyarrow as pa

    try:
        return pa.array(paths, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        pass
    fixed = []
    for i, p in enumerate(paths):
        try:
            p.encode()
        except UnicodeEncodeError:
            p = os.fsencode(p).decode("utf-8", "backslashreplace")
            errors.setdefault(i, "the name is not UTF-8; shown with \\x escapes")
        fixed.append(p)
    return pa.array(fixed, pa.string())


def read_index(folder: str | os.PathLike[str]) -> Any:
    """The whole index of a walk as one :class:`pyarrow.Table` (every walker's part).

    For an index larger than memory, open it as a dataset instead:
    ``pyarrow.dataset.dataset(folder, format="parquet")``.

    Examples
    --------
    >>> import tempfile
    >>> read_index(tempfile.mkdtemp()).num_rows
    0
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = sorted(Path(folder).glob("part-*.parquet"))
    if not parts:
        return pa.table({"path": pa.array([], pa.string())})
    return pa.concat_tables([pq.read_table(p) for p in parts], promote_options="default")
