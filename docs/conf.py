"""Sphinx configuration for io-orchestrator (built with -W: warnings are errors)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

project = "io-orchestrator"
author = "io-orchestrator developers"
copyright = "2026, io-orchestrator developers"
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "numpydoc",
]
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
autodoc_typehints = "none"
nitpicky = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
intersphinx_mapping: dict[str, tuple[str, None]] = {}


def _pictures(app):  # type: ignore[no-untyped-def]
    """Draw every policy's Gantt chart with the library itself, before reading sources."""
    from make_pictures import draw_all

    draw_all(HERE / "_generated")


def setup(app):  # type: ignore[no-untyped-def]
    app.connect("builder-inited", _pictures)
