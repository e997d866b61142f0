"""The distributed walk of checkpoint trees (Lafon et al.): walkers that steal work from
each other with no master, and Dijkstra's token ring to know when they are done.

- :mod:`~orchestrator.treewalk.protocol`: the walkers' state machine, free of transport;
- :mod:`~orchestrator.treewalk.lister`: what a walker does with one folder;
- :mod:`~orchestrator.treewalk.index`: each walker's Parquet part of the index;
- :mod:`~orchestrator.treewalk.runtime`: the walkers as Dask tasks, messages worker to worker;
- :mod:`~orchestrator.treewalk.operations`: what a walk does besides indexing;
- :mod:`~orchestrator.treewalk.api`: :func:`walk`, the entry point.
"""

from .api import ALGORITHMS, WalkResult, walk
from .index import KINDS, read_index
from .operations import Callback, Operation, Visit
from .protocol import SPLITS, VICTIMS, Message, Walker

__all__ = [
    "ALGORITHMS",
    "KINDS",
    "SPLITS",
    "VICTIMS",
    "Callback",
    "Message",
    "Operation",
    "Visit",
    "WalkResult",
    "Walker",
    "read_index",
    "walk",
]
