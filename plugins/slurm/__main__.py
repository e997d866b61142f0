"""``python -m orchestrator.plugins.slurm worker …``: a worker started by ``srun``."""

from .srun import main

main()
