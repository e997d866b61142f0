"""Shared fixtures: a real single-node Slurm, started once per session when a test asks."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from localslurm import REQUIRE_ENV, LocalSlurm, SlurmUnavailable, unavailable_reason


def pytest_sessionstart(session: pytest.Session) -> None:
    """Drop stale compiled kernels once, before any test or worker loads one."""
    from orchestrator.kernels import refresh_cache

    refresh_cache()


@pytest.fixture(scope="session")
def slurm() -> Iterator[LocalSlurm]:
    """munged + slurmctld + slurmd on 127.0.0.1, one node ``localhost``, partition ``debug``.

    Skips with the reason where Slurm cannot run (not root, not installed);
    fails instead when ``IORCH_REQUIRE_SLURM=1`` (CI, through ``.ci/run``).
    """

    def unavailable(reason: str) -> None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but Slurm cannot run here: {reason}")
        pytest.skip(f"no local Slurm: {reason}")

    reason = unavailable_reason()
    if reason:
        unavailable(reason)
    # not under pytest's tmp folder: munged runs as user munge and must reach its socket
    root = Path(tempfile.mkdtemp(prefix="iorch-slurm-"))
    root.chmod(0o755)
    s = LocalSlurm(root)
    # jobs run `iorch` and the workers from this environment
    s.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{s.env['PATH']}"
    try:
        s.start()
    except BaseException as e:  # nothing started may outlive a failed start
        s.stop()
        shutil.rmtree(root, ignore_errors=True)
        if not isinstance(e, SlurmUnavailable):
            raise
        unavailable(str(e))
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(root, ignore_errors=True)
