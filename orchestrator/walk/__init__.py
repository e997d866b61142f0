"""The distributed walk of checkpoint trees (Lafon et al.): walkers that steal work from
each other with no master, and Dijkstra's token ring to know when they are done.

:mod:`orchestrator.walk.protocol` is the walkers' state machine, free of transport.
"""

from .protocol import SPLITS, VICTIMS, Message, Walker

__all__ = ["SPLITS", "VICTIMS", "Message", "Walker"]
