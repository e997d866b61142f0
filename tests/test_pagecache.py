"""What an I/O node does for stripes its tasks check themselves: finding out whether a
file's bytes are in memory, and reading them in, on real files (evicted with
``POSIX_FADV_DONTNEED``, then brought back)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from orchestrator.engine.pagecache import bring_in, cached, resident


def _file(tmp_path: Path, nbytes: int = 4 << 20) -> Path:
    path = tmp_path / "data.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes())
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())  # clean pages: DONTNEED can drop them
    return path


def _evict(fd: int) -> None:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


@pytest.mark.parametrize("via", ["cachestat", "mincore"])
def test_evicted_bytes_are_seen_missing_and_brought_back(tmp_path, via) -> None:
    path = _file(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    try:
        view = np.frombuffer(m, dtype=np.uint8)
        part = view[1 << 20 : 3 << 20]
        _evict(fd)
        if cached(fd, 1 << 20, 2 << 20) is None and via == "cachestat":
            pytest.skip("this kernel has no cachestat")
        if cached(fd, 1 << 20, 2 << 20) or resident(part):
            pytest.skip("this file system keeps the pages (DONTNEED ignored)")
        if via == "cachestat":
            bring_in(part, fd, 1 << 20)
            assert cached(fd, 1 << 20, 2 << 20)
        else:
            bring_in(part)
        assert resident(part)
        assert part.tobytes() == path.read_bytes()[1 << 20 : 3 << 20]
        del view, part
    finally:
        m.close()
        os.close(fd)


def test_bytes_past_the_end_of_the_file_fail_instead_of_killing_the_process(tmp_path) -> None:
    path = _file(tmp_path)
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    try:
        view = np.frombuffer(m, dtype=np.uint8)
        os.ftruncate(fd, 1 << 20)  # shorter than the mapping now
        _evict(fd)
        with pytest.raises(OSError):
            bring_in(view[2 << 20 : 3 << 20])  # SIGBUS, had it been touched
        del view
    finally:
        m.close()
        os.close(fd)


def test_empty_spans_and_anonymous_memory() -> None:
    a = np.ones(1 << 16, dtype=np.uint8)
    assert resident(a) and resident(a[:0])
    bring_in(a[:0])
    bring_in(a)  # resident already: nothing to do, and no error
    assert resident(a)
