"""Slurm host lists (``node[01-04,07]``) and per-node CPU counts, as Slurm writes them."""

from __future__ import annotations

import re
from itertools import product

from orchestrator.errors import SlurmError

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_HOSTCHARS = re.compile(r"[A-Za-z0-9._-]*")


def expand_hostlist(spec: str) -> list[str]:
    """Expand a Slurm host list (``node[01-03,7],login1``) into host names.

    The same expansion as ``scontrol show hostnames`` (checked against it in
    the tests): items separated by commas or white space, each with any
    number of bracketed range lists (``rack[1-2]-n[1-3]`` is their product,
    last bracket fastest) and no text after the last one; a range keeps the
    zero padding of its lower bound. Host names may hold ASCII letters,
    digits, ``.``, ``_`` and ``-`` only — nothing else can reach a batch
    script through a node list.

    Raises
    ------
    SlurmError
        Unbalanced brackets, an empty item, a bad range, text after a
        bracket or another character; the message names the host list and
        the part.

    Examples
    --------
    >>> expand_hostlist("node[01-03,7],login1")
    ['node01', 'node02', 'node03', 'node7', 'login1']
    >>> expand_hostlist("r[1-2]-n[1-2]")
    ['r1-n1', 'r1-n2', 'r2-n1', 'r2-n2']
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SlurmError(f"node list {spec!r}: empty")
    items, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise SlurmError(f"node list {spec!r}: nested '[' at position {i}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"node list {spec!r}: ']' without '[' at position {i}")
        elif ch in ", \t" and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    if depth:
        raise SlurmError(f"node list {spec!r}: '[' is never closed")
    items.append(spec[start:])
    hosts: list[str] = []
    for item in items:
        if not item:
            continue  # Slurm skips empty items (",," and runs of white space)
        parts = re.split(r"\[([^\]]*)\]", item)  # text, ranges, text, ranges, ..., text
        if len(parts) > 1 and parts[-1]:
            raise SlurmError(f"node list {spec!r}: text {parts[-1]!r} after ']' in {item!r}")
        choices: list[list[str]] = []
        for j, part in enumerate(parts):
            if j % 2 == 0 and not _HOSTCHARS.fullmatch(part):
                raise SlurmError(
                    f"node list {spec!r}: {part!r} holds a character other than letters, "
                    "digits, '.', '_' and '-'"
                )
            choices.append(_ranges(spec, part) if j % 2 else [part])
        hosts.extend("".join(p) for p in product(*choices))
    if not hosts:
        raise SlurmError(f"node list {spec!r}: empty")
    return hosts


def _ranges(spec: str, body: str) -> list[str]:
    out: list[str] = []
    for r in body.split(","):
        m = _RANGE.fullmatch(r)
        if m is None:
            raise SlurmError(f"node list {spec!r}: bad range {r!r} in [{body}]")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise SlurmError(f"node list {spec!r}: range {r!r} runs backwards")
        if int(hi) - int(lo) > 1_000_000:
            raise SlurmError(f"node list {spec!r}: range {r!r} has over a million hosts")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def cpus_per_node(spec: str, n: int) -> list[int]:
    """``SLURM_JOB_CPUS_PER_NODE`` (``"36(x2),12"``) as one count per node of ``n``.

    Examples
    --------
    >>> cpus_per_node("36(x2),12", 3)
    [36, 36, 12]
    """
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m is None:
            raise SlurmError(f"SLURM_JOB_CPUS_PER_NODE={spec!r}: cannot parse {part!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(out) != n:
        raise SlurmError(f"SLURM_JOB_CPUS_PER_NODE={spec!r} gives {len(out)} counts for {n} nodes")
    return out
