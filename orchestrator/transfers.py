"""The transfer model: a columnar, validated set of (client, I/O node, nbytes)."""

from __future__ import annotations

import csv
import os
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .checks import is_int
from .errors import TransferSetError
from .files import atomic_path, check_input_file
from .limits import check_memory

__all__ = ["TransferSet", "TransferSetError"]


INT64_MAX = int(np.iinfo(np.int64).max)
#: Largest client / I/O-node count: kernels keep per-node arrays.
MAX_NODES = 2**31 - 1
_INTEGER = re.compile(r"-?[0-9]+")
#: memory a plan keeps per client or I/O node (a few int64/float64 arrays in the kernels)
BYTES_PER_NODE = 128


def _bad(name: str, value: Any, i: int, what: str) -> TransferSetError:
    shown = value.item() if isinstance(value, np.generic) else value
    return TransferSetError(f"column {name!r}: value {shown!r} at index {i} {what}", index=i)


def _as_int_column(name: str, values: Any) -> npt.NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise TransferSetError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind == "O":  # Python ints beyond int64, None, mixed objects
        for i, v in enumerate(arr):
            if not is_int(v):
                raise _bad(name, v, i, "is not an integer")
            if not -INT64_MAX - 1 <= int(v) <= INT64_MAX:
                raise _bad(name, v, i, "does not fit in int64")
        return arr.astype(np.int64)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise _bad(name, arr[0], 0, f"is not an integer (column dtype {arr.dtype})")
    if arr.dtype.kind == "f":
        checks = (
            (~np.isfinite(arr), "is not finite"),
            (arr != np.floor(arr), "is not an integer"),
            (np.abs(arr) >= 2.0**63, "does not fit in int64"),
        )
        for bad, what in checks:
            if bad.any():
                i = int(np.argmax(bad))
                raise _bad(name, arr[i], i, what)
    if arr.dtype.kind == "u" and int(arr.max()) > INT64_MAX:
        i = int(np.argmax(arr > INT64_MAX))
        raise _bad(name, arr[i], i, "does not fit in int64")
    return arr.astype(np.int64)


@dataclass(frozen=True, eq=False)
class TransferSet:
    """Data movements of one stage: transfer ``i`` moves ``nbytes[i]`` bytes
    between client ``client[i]`` and I/O node ``ionode[i]``.

    Columns are NumPy ``int64`` arrays of equal length. Client and I/O-node ids
    are dense integers ``0 … n-1``; ``n_clients`` / ``n_ionodes`` default to
    ``max(id) + 1`` and may be given larger (idle clients or I/O nodes). The
    transfer index is its row number: it breaks ties in every deterministic
    policy and is how a :class:`~orchestrator.Plan` refers to a transfer.

    Parameters
    ----------
    client, ionode : array_like of int
        Endpoint ids, each ``>= 0``.
    nbytes : array_like of int
        Bytes moved, each ``> 0``.
    n_clients, n_ionodes : int, optional
        Number of clients / I/O nodes; must exceed every id used.

    Raises
    ------
    TransferSetError
        Naming the column and the first bad index: lengths differ, an id is
        negative or out of range, a size is not a positive finite integer, or
        the set is empty.

    Examples
    --------
    >>> from orchestrator import TransferSet
    >>> ts = TransferSet(client=[0, 0, 1], ionode=[0, 1, 1], nbytes=[30, 10, 10])
    >>> ts.n_clients, ts.n_ionodes, len(ts), ts.total_bytes
    (2, 2, 3, 50)
    >>> TransferSet(client=[0], ionode=[0], nbytes=[-5])
    Traceback (most recent call last):
    ...
    orchestrator.errors.TransferSetError: column 'nbytes': value -5 at index 0 must be > 0
    """

    client: npt.NDArray[np.int64]
    ionode: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.int64]
    n_clients: int
    n_ionodes: int

    def __init__(
        self,
        client: Any,
        ionode: Any,
        nbytes: Any,
        n_clients: int | None = None,
        n_ionodes: int | None = None,
    ) -> None:
        c = _as_int_column("client", client)
        s = _as_int_column("ionode", ionode)
        b = _as_int_column("nbytes", nbytes)
        if not (c.size == s.size == b.size):
            raise TransferSetError(
                "columns must have equal lengths, got "
                f"client={c.size}, ionode={s.size}, nbytes={b.size}"
            )
        if c.size == 0:
            raise TransferSetError("empty TransferSet: there is nothing to schedule")
        for name, col in (("client", c), ("ionode", s)):
            for bad, what in (
                (col < 0, "must be >= 0"),
                (col >= MAX_NODES, f"must be < {MAX_NODES}"),
            ):
                if bad.any():
                    i = int(np.argmax(bad))
                    raise _bad(name, col[i], i, what)
        nonpos = b <= 0
        if nonpos.any():
            i = int(np.argmax(nonpos))
            raise _bad("nbytes", b[i], i, "must be > 0")
        if float(b.sum(dtype=np.float64)) > INT64_MAX:
            raise TransferSetError("column 'nbytes': the total exceeds 2**63 - 1 bytes")
        nc = _count("n_clients", "client", c, n_clients)
        ns = _count("n_ionodes", "ionode", s, n_ionodes)
        # ids are dense: every policy keeps arrays per client and per I/O node, so one
        # huge id (a typo, a hash) would ask for memory in proportion to it
        check_memory(
            (nc + ns) * BYTES_PER_NODE,
            f"{nc:,} clients (largest client id {int(c.max())}) and {ns:,} I/O nodes "
            f"(largest I/O node id {int(s.max())})",
            TransferSetError,
        )
        for col in (c, s, b):
            col.setflags(write=False)
        object.__setattr__(self, "client", c)
        object.__setattr__(self, "ionode", s)
        object.__setattr__(self, "nbytes", b)
        object.__setattr__(self, "n_clients", nc)
        object.__setattr__(self, "n_ionodes", ns)

    def __len__(self) -> int:
        return int(self.client.size)

    def __repr__(self) -> str:
        return (
            f"TransferSet({len(self)} transfers, {self.n_clients} clients, "
            f"{self.n_ionodes} I/O nodes, {self.total_bytes} bytes)"
        )

    @property
    def total_bytes(self) -> int:
        """Sum of ``nbytes`` over all transfers."""
        return int(self.nbytes.sum())

    def bytes_matrix(self) -> npt.NDArray[np.int64]:
        """Bytes per (client, I/O node) pair as a dense ``n_clients × n_ionodes`` matrix.

        Examples
        --------
        >>> TransferSet([0, 0, 1], [0, 0, 1], [1, 2, 4]).bytes_matrix().tolist()
        [[3, 0], [0, 4]]
        """
        m = np.zeros((self.n_clients, self.n_ionodes), dtype=np.int64)
        np.add.at(m, (self.client, self.ionode), self.nbytes)
        return m

    # ----------------------------------------------------------------- loaders
    @classmethod
    def from_arrays(cls, arrays: Any, **kwargs: Any) -> TransferSet:
        """Build from a mapping (or ``.npz`` archive) with keys ``client``, ``ionode``, ``nbytes``.

        Examples
        --------
        >>> import numpy as np
        >>> TransferSet.from_arrays({"client": np.array([0]), "ionode": [2], "nbytes": [8]})
        TransferSet(1 transfers, 1 clients, 3 I/O nodes, 8 bytes)
        """
        missing = [k for k in ("client", "ionode", "nbytes") if k not in arrays]
        if missing:
            raise TransferSetError(f"missing column(s) {missing}; need client, ionode, nbytes")
        return cls(arrays["client"], arrays["ionode"], arrays["nbytes"], **kwargs)

    @classmethod
    def load_npz(cls, path: str | os.PathLike[str], **kwargs: Any) -> TransferSet:
        """Load a ``.npz`` file written by :meth:`save_npz`.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.npz"
        >>> TransferSet([0, 1], [1, 0], [5, 6]).save_npz(p)
        >>> len(TransferSet.load_npz(p))
        2
        """
        check_input_file(path, "transfers", TransferSetError, per_byte=4)
        try:
            data = np.load(path, allow_pickle=False)
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("a single array (.npy), not an archive")
            with data:
                # a compressed member may unpack to far more than the file's size
                check_memory(_npz_bytes(data), f"the arrays of {path}", TransferSetError)
                arrays = {k: data[k] for k in ("client", "ionode", "nbytes") if k in data}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:  # not an .npz of ours
            raise TransferSetError(f"{path}: not a transfers .npz file ({err})") from None
        return cls.from_arrays(arrays, **kwargs)

    def save_npz(self, path: str | os.PathLike[str]) -> None:
        """Write the three columns to ``path`` (NumPy ``.npz``); see :meth:`load_npz`."""
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, client=self.client, ionode=self.ionode, nbytes=self.nbytes)

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str], **kwargs: Any) -> TransferSet:
        """Read a CSV file with header ``client,ionode,nbytes`` (extra columns ignored).

        Errors name the file and line.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = p.write_text("client,ionode,nbytes\\n0,1,4096\\n1,0,100\\n")
        >>> TransferSet.from_csv(p).nbytes.tolist()
        [4096, 100]
        """
        # a row of ~15 characters becomes three Python ints in lists (~100 bytes)
        check_input_file(path, "transfers", TransferSetError, per_byte=10)
        path = Path(path)
        cols: dict[str, list[int]] = {"client": [], "ionode": [], "nbytes": []}
        lines: list[int] = []  # file line of each row (blank lines are skipped)
        try:
            with path.open(newline="", encoding="utf-8-sig") as fh:  # a BOM (spreadsheets)
                reader = csv.DictReader(fh)
                header = reader.fieldnames or []
                missing = [k for k in cols if k not in header]
                if missing:
                    raise TransferSetError(
                        f"{path}: header {header} lacks column(s) {missing}; "
                        "expected 'client,ionode,nbytes'"
                    )
                repeated = sorted({h for h in header if header.count(h) > 1})
                if repeated:
                    raise TransferSetError(f"{path}: header {header} repeats column(s) {repeated}")
                for row in reader:
                    lines.append(reader.line_num)
                    if None in row:  # DictReader files fields beyond the header under None
                        raise TransferSetError(
                            f"{path}, line {reader.line_num}: {len(row[None])} field(s) more than "
                            f"the header's {len(header)}: {row[None]!r}"
                        )
                    for k in cols:
                        text = (row[k] or "").strip()
                        # ASCII digits only: int() would also take '1_000' and full-width digits
                        if not _INTEGER.fullmatch(text):
                            raise TransferSetError(
                                f"{path}, line {reader.line_num}: column {k!r} value {text!r} "
                                "is not an integer"
                            )
                        cols[k].append(int(text))
        except UnicodeDecodeError as err:  # a binary file, or another encoding
            raise TransferSetError(
                f"{path}: not UTF-8 text (byte {err.start} is {err.object[err.start]:#04x})"
            ) from None
        except csv.Error as err:  # a NUL byte, a field beyond csv's limit
            raise TransferSetError(f"{path}: not a CSV file ({err})") from None
        try:
            return cls(cols["client"], cols["ionode"], cols["nbytes"], **kwargs)
        except TransferSetError as err:
            where = f"{path}, line {lines[err.index]}" if err.index is not None else f"{path}"
            raise TransferSetError(f"{where}: {err}", index=err.index) from None

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write ``client,ionode,nbytes`` rows in transfer order.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> TransferSet([0, 1], [1, 0], [7, 8]).to_csv(p)
        >>> p.read_text().splitlines()
        ['client,ionode,nbytes', '0,1,7', '1,0,8']
        """
        write_rows(
            path,
            ("client", "ionode", "nbytes"),
            zip(self.client, self.ionode, self.nbytes, strict=True),
        )


def _npz_bytes(data: Any) -> int:
    """Bytes the arrays of an open ``.npz`` archive take once loaded, from their headers."""
    fmt = np.lib.format
    total = 0
    for name in data.zip.namelist():
        with data.zip.open(name) as member:
            version = fmt.read_magic(member)
            reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = reader(member)
            total += int(np.prod(shape, dtype=object)) * dtype.itemsize
    return total


def _count(field: str, column: str, col: npt.NDArray[np.int64], given: int | None) -> int:
    needed = int(col.max()) + 1
    if given is None:
        return needed
    if not is_int(given):
        raise TransferSetError(f"{field} must be an integer, got {given!r}")
    if given > MAX_NODES:
        raise TransferSetError(f"{field}={given} is more than the supported {MAX_NODES}")
    if given < needed:
        i = int(np.argmax(col >= given))
        raise _bad(column, col[i], i, f"is out of range for {field}={given}")
    return int(given)


def write_rows(path: str | os.PathLike[str], header: Iterable[str], rows: Iterable[Any]) -> None:
    """Write a CSV file atomically (complete or absent): ``header``, then ``rows``.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> write_rows(path, ["a", "b"], [(1, 2)])
    >>> path.read_text().split()
    ['a,b', '1,2']
    """
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in rows:
            w.writerow([int(x) if isinstance(x, np.integer) else x for x in row])
