"""The prefetch window of one I/O worker: events in, instructions out.

An I/O worker writes its batches strictly in order, and fetches the next
ones while it writes, as long as the bytes it holds (fetching, fetched, or
being written, plus what its writer still buffers of written batches) stay
within its window. A batch larger than the window is fetched alone.
:class:`Window` is the pure state machine of that loop, modelled on
``distributed.worker_state_machine.WorkerState``: the effects (submitting
cut tasks, gathering, writing) are the caller's, which reports back with
:meth:`Window.fetched` and :meth:`Window.written`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Fetch", "Window", "Write"]


@dataclass(frozen=True)
class Fetch:
    """Start moving batch ``batch`` to this I/O worker."""

    batch: int


@dataclass(frozen=True)
class Write:
    """Write batch ``batch`` (its data has arrived)."""

    batch: int


Instruction = Fetch | Write


class Window:
    """Which batch to fetch and to write next, within ``window`` bytes held.

    Examples
    --------
    >>> w = Window([4, 4, 4], window=8)
    >>> w.start()
    [Fetch(batch=0), Fetch(batch=1)]
    >>> w.fetched(1)
    []
    >>> w.fetched(0)
    [Write(batch=0)]
    >>> w.written(0)
    [Fetch(batch=2), Write(batch=1)]
    >>> w.held, w.done
    (8, False)
    """

    def __init__(self, sizes: Sequence[int], window: int) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 byte, got {window}")
        self.sizes = [int(x) for x in sizes]
        self.window = int(window)
        self.held = 0
        self.outside = 0  # bytes the writer still buffers of batches written
        self.next_fetch = 0
        self.next_write = 0
        self.writing = False
        self.arrived: set[int] = set()

    @property
    def done(self) -> bool:
        """Every batch written."""
        return self.next_write == len(self.sizes)

    def start(self) -> list[Instruction]:
        """The first fetches."""
        return self._fill()

    def fetched(self, batch: int) -> list[Instruction]:
        """Batch ``batch`` has arrived."""
        if not (self.next_write <= batch < self.next_fetch) or batch in self.arrived:
            raise ValueError(f"batch {batch} was not being fetched")
        self.arrived.add(batch)
        return self._next_write()

    def written(self, batch: int, outside: int = 0) -> list[Instruction]:
        """Batch ``batch`` is written; its memory is free but for ``outside`` bytes.

        ``outside``: what the writer buffers now of all batches written
        (stripes waiting for their other pieces); it counts against the window.
        """
        if outside < 0:
            raise ValueError(f"outside must be >= 0 bytes, got {outside}")
        if not self.writing or batch != self.next_write:
            raise ValueError(f"batch {batch} was not being written")
        self.writing = False
        self.arrived.discard(batch)
        self.held -= self.sizes[batch]
        self.next_write += 1
        self.outside = int(outside)
        return self._fill() + self._next_write()

    def _fill(self) -> list[Instruction]:
        out: list[Instruction] = []
        while self.next_fetch < len(self.sizes):
            size = self.sizes[self.next_fetch]
            # nothing fetched at all: fetch anyway, or a window full of buffered
            # stripes would wait forever for the pieces that complete them
            if self.held and self.held + self.outside + size > self.window:
                break
            out.append(Fetch(self.next_fetch))
            self.held += size
            self.next_fetch += 1
        return out

    def _next_write(self) -> list[Instruction]:
        if not self.writing and self.next_write in self.arrived:
            self.writing = True
            return [Write(self.next_write)]
        return []
