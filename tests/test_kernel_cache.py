"""Numba's cache follows a changed helper in another kernel module, without import-time work."""

import subprocess
import sys
import textwrap


def _run(pkg_parent):
    code = "import kpkg.caller as c; print(c.f())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=pkg_parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def test_a_changed_helper_in_another_module_is_picked_up(tmp_path):
    from orchestrator.kernels import refresh_cache

    pkg = tmp_path / "kpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    helper = "from numba import njit\n\n@njit(cache=True)\ndef h():\n    return {}\n"
    (pkg / "helper.py").write_text(helper.format(1))
    (pkg / "caller.py").write_text(
        textwrap.dedent("""
        from numba import njit
        from .helper import h

        @njit(cache=True)
        def f():
            return h()
    """)
    )
    assert refresh_cache(pkg) is True  # first stamp
    assert _run(tmp_path) == "1"
    assert _run(tmp_path) == "1"  # from the cache now
    (pkg / "helper.py").write_text(helper.format(2))
    # Numba alone keeps the caller's cached machine code, with the old helper inlined
    assert _run(tmp_path) == "1"
    assert refresh_cache(pkg) is True
    assert _run(tmp_path) == "2"
    assert refresh_cache(pkg) is False  # nothing changed since
