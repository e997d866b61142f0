"""Stripe buffers reused between stripes: a reused buffer never lets one stripe's bytes
into another."""

import numpy as np

from orchestrator.contributions import DatasetSpec
from orchestrator.engine.buffers import STRIPES
from orchestrator.engine.storage import WholeStripeWriter, stripe_meta
from orchestrator.layout import StripeLayout


class _Mem(WholeStripeWriter):
    def __init__(self, meta):
        super().__init__(meta)
        self.stored = {}

    def store(self, name, k, rows):
        self.stored[k] = rows.copy()


def test_a_reused_stripe_buffer_holds_the_fill_value_where_no_piece_is():
    """Stripe 0 complete (all 5s), then stripes 1 and 2 with rows missing, assembled in
    the buffer stripe 0 gave back: their missing rows read the fill value, never 5."""
    spec = DatasetSpec("u", (12, 2), "<i4", fill_value=-7)
    meta = {"u": stripe_meta(spec, StripeLayout(1, 4 * spec.row_bytes))}
    STRIPES.clear()
    w = _Mem(meta)
    rb = spec.row_bytes
    w.put("u", 0, memoryview(np.full((2, 2), 5, "<i4").tobytes()))
    w.put("u", 2 * rb, memoryview(np.full((2, 2), 5, "<i4").tobytes()))  # stripe 0 complete
    assert STRIPES._held == 4 * rb  # its buffer came back
    w.put("u", 4 * rb, memoryview(np.full((1, 2), 1, "<i4").tobytes()))  # stripe 1: row 4
    w.put("u", 11 * rb, memoryview(np.full((1, 2), 2, "<i4").tobytes()))  # stripe 2: row 11
    w.flush()  # incomplete stripes stored padded
    assert w.stored[0].tolist() == [[5, 5]] * 4
    assert w.stored[1].tolist() == [[1, 1]] + [[-7, -7]] * 3
    assert w.stored[2].tolist() == [[-7, -7]] * 3 + [[2, 2]]


def test_the_pool_keeps_a_bounded_number_of_bytes():
    from orchestrator.engine.buffers import BufferPool

    pool = BufferPool(keep_bytes=10)
    bufs = [pool.take(4) for _ in range(4)]
    for b in bufs:
        pool.give(b)
    assert pool._held == 8  # two kept, two let go
    assert {id(pool.take(4)), id(pool.take(4))} <= {id(b) for b in bufs}
    assert pool._held == 0
