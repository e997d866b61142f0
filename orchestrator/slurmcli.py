"""Moved to :mod:`orchestrator.cli.slurm`; this name stays for one release."""

from .cli.slurm import *  # noqa: F403
from .cli.slurm import script_text as _script  # noqa: F401
from .plugins.slurm import workflow_cluster  # noqa: F401
