"""A request an I/O node can order and serve without reading anything (no stripes):
for the tests of a node's service order and of its gate."""

from __future__ import annotations

from orchestrator.engine import readserver


def empty_request(
    app: int, policy: str, node: int = 7, shuffle: float = 0.0, app_shuffle: float = 0.0
) -> readserver.AggregatorTask:
    """Application ``app``'s request on ``node`` with these shuffle estimates."""
    return readserver.AggregatorTask(
        path="/nonexistent",
        fmt="zarr",  # nothing is opened: no stripes
        node=node,
        domain=0,
        app=(app, f"app{app}"),
        access=0,
        policy=policy,
        window=10,
        threshold=0.2,
        read_seconds=1.0,
        shuffle_seconds=shuffle,
        app_shuffle=app_shuffle,
        datasets={},
        stripes={},
        pieces={},
    )
