"""Generated trees to walk: the shapes the benchmarks and tests use.

Every tree has exactly ``entries`` entries counting its root, so rates compare
across shapes. Files are empty unless ``file_bytes`` is given.

``balanced``
    groups of 100 folders of 999 files (a run folder of checkpoint steps);
``deep``
    chains 100 folders deep, 99 files at each level;
``wide``
    one folder holding every subfolder, 99 files each;
``skewed``
    four fifths of the entries in one branch, the rest in 200 small folders;
``small-files``
    folders of 100 files of ``file_bytes`` (1 KiB by default) each.

Examples
--------
>>> import tempfile, os
>>> top = os.path.join(tempfile.mkdtemp(), "t")
>>> make_tree(top, "deep", 1000)
1000
"""

from __future__ import annotations

import os

from ..errors import InputError

__all__ = ["SHAPES", "make_tree"]

SHAPES = ("balanced", "deep", "wide", "skewed", "small-files")


class _Maker:
    def __init__(self, entries: int, file_bytes: int) -> None:
        self.left = entries
        self.data = b"\0" * file_bytes

    def folder(self, path: str) -> bool:
        if self.left <= 0:
            return False
        os.mkdir(path)
        self.left -= 1
        return True

    def files(self, folder: str, n: int) -> None:
        for i in range(min(n, self.left)):
            fd = os.open(
                os.path.join(folder, f"f{i:04d}"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644
            )
            if self.data:
                os.write(fd, self.data)
            os.close(fd)
            self.left -= 1


def _balanced(m: _Maker, root: str, per: int = 999) -> None:
    g = 0
    while m.left > 0:
        group = os.path.join(root, f"g{g:04d}")
        if not m.folder(group):
            return
        for d in range(100):
            sub = os.path.join(group, f"d{d:03d}")
            if not m.folder(sub):
                return
            m.files(sub, per)
        g += 1


def make_tree(root: str, shape: str, entries: int, file_bytes: int = 0) -> int:
    """Make the tree ``shape`` of ``entries`` entries at ``root`` (which must not exist);
    returns the entries made.

    Examples
    --------
    >>> import tempfile, os
    >>> make_tree(os.path.join(tempfile.mkdtemp(), "t"), "skewed", 5000)
    5000
    """
    if shape not in SHAPES:
        raise InputError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    if not isinstance(entries, int) or entries < 1:
        raise InputError(f"entries must be a whole number >= 1, got {entries!r}")
    if shape == "small-files" and not file_bytes:
        file_bytes = 1024
    m = _Maker(entries, file_bytes)
    m.folder(root)
    if shape == "balanced" or shape == "small-files":
        _balanced(m, root, 999 if shape == "balanced" else 100)
    elif shape == "deep":
        c = 0
        while m.left > 0:
            at = os.path.join(root, f"c{c:04d}")
            for level in range(100):
                if not m.folder(at):
                    break
                m.files(at, 99)
                at = os.path.join(at, f"l{level:03d}")
            c += 1
    elif shape == "wide":
        d = 0
        while m.left > 0:
            sub = os.path.join(root, f"d{d:06d}")
            m.folder(sub)
            m.files(sub, 99)
            d += 1
    else:  # skewed
        heavy = os.path.join(root, "heavy")
        m.folder(heavy)
        light_share = m.left // 5
        keep = m.left - light_share
        m.left = keep  # the heavy branch first, then the light folders get the rest
        _balanced(m, heavy)
        m.left = light_share
        per = max(1, light_share // 200 - 1)
        d = 0
        while m.left > 0:
            sub = os.path.join(root, f"light{d:03d}")
            m.folder(sub)
            m.files(sub, per)
            d += 1
    return entries - m.left if m.left > 0 else entries
