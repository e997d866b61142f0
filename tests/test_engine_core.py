"""The engine's pure core, without a cluster: programs, the prefetch window, checksums, commit.

Each is checked against a slow, obvious oracle on many random instances.
"""

import itertools
import os
import zlib

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from orchestrator.contributions import DatasetSpec
from orchestrator.engine.commit import commit
from orchestrator.engine.dispatch import Staged, fill_pieces, program_of
from orchestrator.engine.program import stripe_groups
from orchestrator.engine.storage import PieceChecksums, StorageError
from orchestrator.engine.window import Fetch, Window, Write
from orchestrator.kernels import crc
from orchestrator.layout import StripeLayout, derive_transfers
from orchestrator.policies import schedule
from orchestrator.transfers import TransferSet

# ------------------------------------------------------------------ CRC folding


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_fold_equals_crc32_of_the_concatenation(parts):
    crcs = np.array([zlib.crc32(p) for p in parts], dtype=np.uint32)
    lens = np.array([len(p) for p in parts], dtype=np.int64)
    assert int(crc.fold(crcs, lens)) == zlib.crc32(b"".join(parts))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.data())
def test_piece_checksums_in_any_order_equal_the_stripe_checksum(blob, data):
    sb = data.draw(st.integers(1, 700))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(blob) - 1)), max_size=12)))
    bounds = [0, *[c for c in cuts if c < len(blob)], len(blob)]
    pieces = []
    for a, b in itertools.pairwise(bounds):
        while a < b:  # pieces never cross a stripe, as the layout guarantees
            e = min(b, (a // sb + 1) * sb)
            pieces.append((a, e))
            a = e
    order = data.draw(st.permutations(pieces))
    sums = PieceChecksums({"u": sb})
    for a, b in order:
        sums.add("u", a, blob[a:b])
    want = {("u", k): f"{zlib.crc32(blob[k : k + sb]):08x}" for k in range(0, len(blob), sb)}
    assert sums.result() == want


def test_piece_checksums_refuse_gaps_and_stripe_crossings():
    sums = PieceChecksums({"u": 8})
    sums.add("u", 0, b"abcd")
    sums.add("u", 5, b"fgh")
    with pytest.raises(StorageError, match="gap or an overlap at byte 4"):
        sums.result()
    with pytest.raises(StorageError, match="crosses a stripe"):
        PieceChecksums({"u": 8}).add("u", 6, b"xyz")


def test_fill_pieces_checksum_the_fill_bytes():
    spec = DatasetSpec("u", (10, 3), "int16", fill_value=-2)
    missing = np.array([1, 2, 3, 7])
    pieces = fill_pieces(0, spec, 10, missing)
    row = np.full(3, -2, dtype="int16").tobytes()
    for d, off, n, c in pieces:
        assert d == 0 and (off // 10) == ((off + n - 1) // 10)  # inside one stripe
        assert c == zlib.crc32((row * 20)[off % 6 : off % 6 + n])
    covered = sorted(b for _, off, n, _ in pieces for b in range(off, off + n))
    assert covered == [b for r in missing for b in range(6 * r, 6 * r + 6)]


# ------------------------------------------------------------------ the window


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=0, max_size=20), st.integers(1, 120), st.randoms())
def test_window_writes_in_order_within_its_bytes(sizes, window, rnd):
    """Batches are written in order, each fetched once; what is fetched ahead, with what
    the writer still buffers, stays within the window (one batch alone may exceed it), and
    the loop always progresses."""
    w = Window(sizes, window)
    fetching: list[int] = []
    writing: list[int] = []
    fetched_once, written = set(), []
    todo = w.start()
    steps = 0
    while not w.done:
        steps += 1
        assert steps < 10 * len(sizes) + 10, "no progress"
        new = [ins.batch for ins in todo if isinstance(ins, Fetch)]
        if new:  # a fetch keeps what is held, with what the writer buffers, in the window,
            # unless nothing else is fetched or waiting to be written (no deadlock)
            assert w.held + w.outside <= window or (len(new) == 1 and w.held == sizes[new[0]])
        for ins in todo:
            if isinstance(ins, Fetch):
                assert ins.batch not in fetched_once
                fetched_once.add(ins.batch)
                fetching.append(ins.batch)
            else:
                writing.append(ins.batch)
        # the bytes held never exceed the window, unless one batch alone does
        assert w.held == sum(sizes[b] for b in fetching) + sum(sizes[b] for b in w.arrived)
        assert w.held <= max(window, max(sizes))
        assert len(writing) <= 1
        if writing and (not fetching or rnd.random() < 0.5):
            b = writing.pop()
            written.append(b)
            # the writer still buffers some bytes of the batches written (whole stripes
            # waiting for their other pieces): any amount, even more than the window
            todo = w.written(b, rnd.randrange(0, 2 * window) if rnd.random() < 0.7 else 0)
        else:
            b = fetching.pop(rnd.randrange(len(fetching)))  # arrivals in any order
            todo = w.fetched(b)
    assert written == list(range(len(sizes)))
    assert w.held == 0


def test_window_rejects_events_out_of_turn():
    w = Window([4, 4], 4)
    assert w.start() == [Fetch(0)]
    with pytest.raises(ValueError, match="was not being fetched"):
        w.fetched(1)
    assert w.fetched(0) == [Write(0)]
    with pytest.raises(ValueError, match="was not being written"):
        w.written(1)
    with pytest.raises(ValueError, match="window must be >= 1"):
        Window([1], 0)


# ------------------------------------------------------------------ programs


@st.composite
def stages(draw):
    n_clients = draw(st.integers(1, 5))
    n_io = draw(st.integers(1, 4))
    specs, parts, first, base = [], [], [], 0
    for d in range(draw(st.integers(1, 2))):
        rows = draw(st.integers(1, 60))
        width = draw(st.integers(1, 3))
        spec = DatasetSpec(f"d{d}", (rows, width), draw(st.sampled_from(["int8", "float64"])))
        writer = np.array(
            draw(st.lists(st.integers(-1, n_clients - 1), min_size=rows, max_size=rows)),
            dtype=np.int64,
        )
        writer[0] = max(writer[0], 0)
        stripe = draw(st.integers(1, max(1, spec.nbytes)))
        strategy = draw(st.sampled_from(["contiguous", "list", "two-phase"]))
        part = derive_transfers(spec, writer, StripeLayout(n_io, stripe), strategy, n_clients)
        specs.append(spec)
        parts.append(part)
        first.append(base)
        base += len(part.transfers)
    staged = Staged(specs, parts, first)
    ts = TransferSet(
        np.concatenate([p.transfers.client for p in parts]),
        np.concatenate([p.transfers.ionode for p in parts]),
        np.concatenate([p.transfers.nbytes for p in parts]),
        n_clients=n_clients,
        n_ionodes=n_io,
    )
    policy = draw(st.sampled_from(["ecf", "ms-ecf", "hdf", "uar", "hash-ios", "split-opt"]))
    opts = {"block_size": draw(st.integers(1, 64))} if policy in ("hdf", "uar") else {}
    plan = schedule(ts, policy, cost="modern", seed=draw(st.integers(0, 5)), **opts)
    n_sources = draw(st.integers(1, 3))
    source = np.array(
        draw(
            st.lists(
                st.integers(0, n_sources - 1),
                min_size=len(specs) * n_clients,
                max_size=len(specs) * n_clients,
            )
        ),
        dtype=np.int64,
    ).reshape(len(specs), n_clients)
    batch = draw(st.integers(1, 200))
    first_batch = draw(st.integers(1, 200))
    return staged, plan, n_io, source, batch, first_batch, draw(st.none() | st.integers(0, 300))


@settings(max_examples=300, deadline=None)
@given(stages())
def test_program_executes_each_ionode_in_plan_order_every_byte_once(case):
    staged, plan, n_io, source, batch, first_batch, close = case
    prog = program_of(staged, plan, n_io, source, batch, first_batch, close)
    # oracle: expand the plan into bytes, the slow way
    want: dict[int, list[tuple[int, int, int]]] = {s: [] for s in range(n_io)}
    transfer_bytes = {}
    for d, (part, base) in enumerate(zip(staged.parts, staged.first_transfer, strict=True)):
        for p in range(part.n_pieces):
            t = base + int(part.piece_transfer[p])
            o, n = int(part.piece_offset[p]), int(part.piece_nbytes[p])
            transfer_bytes.setdefault(t, []).extend(
                (d, b, int(part.piece_client[p])) for b in range(o, o + n)
            )
    for t in transfer_bytes:
        transfer_bytes[t].sort()
    for u in plan.order.tolist():
        t, o, n = int(plan.parent[u]), int(plan.offset[u]), int(plan.nbytes[u])
        want[int(plan.ionode[u])].extend(transfer_bytes[t][o : o + n])
    seen_bytes = set()
    for s, node in enumerate(prog.nodes):
        got = []
        units = []
        for k, b in enumerate(node.batches):
            assert b.index == k and b.ionode == s
            assert 0 < b.nbytes <= max(batch, 1)  # batches are bounded
            if close is not None:
                # a batch closes at the first unit boundary once it holds ``close`` bytes
                # (0: at every one, so a batch is one unit, one cut, ranked by its start)
                u = b.ranges.unit
                inner = np.flatnonzero(u[1:] != u[:-1]) + 1
                before = np.cumsum(b.ranges.nbytes)[inner - 1]
                assert np.all(before < max(close, 1)), (close, before)
                if close == 0:
                    assert len(b.cuts) == 1
                    assert b.planned_start == plan.start[int(u[0])]
            for i in range(len(b.ranges)):
                d, c, o, n = (
                    int(b.ranges.dataset[i]),
                    int(b.ranges.client[i]),
                    int(b.ranges.offset[i]),
                    int(b.ranges.nbytes[i]),
                )
                cut = b.cuts[b.cut[i]]
                assert cut.source == source[d, c]  # cut where the contribution lives
                j = int(b.slot[i])
                assert (int(cut.ranges.dataset[j]), int(cut.ranges.offset[j])) == (d, o)
                assert int(b.pos[i]) == int(cut.ranges.nbytes[:j].sum())
                got.extend((d, x, c) for x in range(o, o + n))
                units.append(int(b.ranges.unit[i]))
        assert got == want[s]  # plan order, every byte of the node exactly once
        seq = [u for u in plan.order.tolist() if plan.ionode[u] == s and plan.nbytes[u] > 0]
        dedup = [u for k, u in enumerate(units) if k == 0 or units[k - 1] != u]
        assert dedup == seq
        seen_bytes |= {(d, x) for d, x, _ in got}
    total = sum(spec.nbytes for spec in staged.specs)
    written = sum(int(p.piece_nbytes.sum()) for p in staged.parts)
    assert len(seen_bytes) == written <= total
    # cuts are ranked by planned start over all I/O nodes
    starts = [
        (b.planned_start, prog.priority[s][b.index])
        for s, n in enumerate(prog.nodes)
        for b in n.batches
    ]
    ranks = [r for _, r in sorted(starts)]
    assert sorted(ranks) == list(range(len(ranks)))
    assert [t for t, _ in sorted(starts, key=lambda x: x[1])] == sorted(t for t, _ in starts)


@settings(max_examples=300, deadline=None)
@given(stages(), st.integers(1, 400))
def test_stripe_groups_store_each_stripe_once_when_the_plan_completes_it(case, limit):
    staged, plan, n_io, source, batch, first_batch, close = case
    prog = program_of(staged, plan, n_io, source, batch, first_batch, close)
    sb = [p.layout.stripe_bytes for p in staged.parts]
    for node in prog.nodes:
        groups = stripe_groups(node, sb, limit)
        # oracle: walk the node's ranges in plan order, the slow way
        last, held, rows = {}, {}, []
        for b in node.batches:
            for i in range(len(b.ranges)):
                d, c, o, n, u = (
                    int(getattr(b.ranges, f)[i])
                    for f in ("dataset", "client", "offset", "nbytes", "unit")
                )
                key = (d, o // sb[d] * sb[d])
                src = b.cuts[b.cut[i]].source
                last[key] = (len(rows), b.index)
                held.setdefault(key, {}).setdefault(src, 0)
                held[key][src] += n
                rows.append((d, c, o, n, u, src))
        want = sorted(last, key=lambda k: last[k][0])
        got = [(d, o) for g in groups for d, o, _ in g.stripes]
        assert got == want  # each stripe once, in the order the plan completes it
        size = {(d, o): n for d, o, n in node.stripes}
        seen = []
        for g in groups:
            assert {last[(d, o)][1] for d, o, _ in g.stripes} == {g.batch}
            assert g.nbytes <= limit or len(g.stripes) == 1
            assert all(n == size[(d, o)] for d, o, n in g.stripes)
            for j, (d, o, _) in enumerate(g.stripes):
                counts = held[(d, o)]
                best = max(counts.values())
                assert g.assembler[j] == min(s for s, v in counts.items() if v == best)
            keys = [(int(g.stripe[i]), int(g.ranges.offset[i])) for i in range(len(g.ranges))]
            assert keys == sorted(keys)  # stripe order, then file order
            for i in range(len(g.ranges)):
                d, o = g.stripes[int(g.stripe[i])][:2]
                assert int(g.ranges.dataset[i]) == d and o <= int(g.ranges.offset[i]) < o + sb[d]
                fields = ("dataset", "client", "offset", "nbytes", "unit")
                seen.append((*(int(getattr(g.ranges, f)[i]) for f in fields), int(g.source[i])))
    assert sorted(seen) == sorted(rows)  # every range of the node exactly once


# ------------------------------------------------------------------ commit


def test_commit_never_replaces_without_overwrite(tmp_path):
    (tmp_path / "a").write_text("new")
    (tmp_path / "t").write_text("old")
    with pytest.raises(StorageError, match="exists"):
        commit(tmp_path / "a", tmp_path / "t", overwrite=False)
    assert (tmp_path / "t").read_text() == "old" and (tmp_path / "a").exists()


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_commit_renames_over_the_old_target(tmp_path, kind):
    def make(p, text):
        if kind == "dir":
            p.mkdir()
            (p / "zarr.json").write_text(text)
        else:
            p.write_text(text)

    def read(p):
        return (p / "zarr.json").read_text() if kind == "dir" else p.read_text()

    make(tmp_path / "new", "2")
    make(tmp_path / "t", "1")
    commit(tmp_path / "new", tmp_path / "t", overwrite=True)
    assert read(tmp_path / "t") == "2"
    assert sorted(os.listdir(tmp_path)) == ["t"]  # the old one is gone, nothing left beside
    make(tmp_path / "n2", "3")
    commit(tmp_path / "n2", tmp_path / "fresh", overwrite=False)
    assert read(tmp_path / "fresh") == "3"


def test_commit_refuses_to_replace_a_directory_by_a_file(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "mine.txt").write_text("keep")
    (tmp_path / "new.h5").write_text("x")
    with pytest.raises(StorageError, match="is a directory"):
        commit(tmp_path / "new.h5", tmp_path / "results", overwrite=True)
    assert (tmp_path / "results" / "mine.txt").read_text() == "keep"


# ------------------------------------------------------------------ direct I/O


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_positioned_file_writes_every_piece_exactly(tmp_path_factory, data):
    """Pieces of any size, position, buffer alignment and order, some sharing pages, written
    half through O_DIRECT and half through the cache: the file equals the oracle's bytes."""
    from orchestrator.engine.directio import PAGE, PositionedFile

    path = tmp_path_factory.mktemp("pf") / "f.bin"
    size = data.draw(st.integers(1, 24 * PAGE))
    cuts = sorted(data.draw(st.sets(st.integers(1, size - 1), max_size=10))) if size > 1 else []
    bounds = [0, *cuts, size]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    truth = rng.integers(0, 256, size, dtype=np.uint8)
    path.write_bytes(b"")
    direct = data.draw(st.booleans())
    # direct writes gathered a few pages at a time, so runs fill the buffer several times
    f = PositionedFile(path, direct=direct, chunk=data.draw(st.sampled_from([PAGE, 3 * PAGE])))
    pieces = range(len(bounds) - 1)
    # neighbouring pieces written as one run (writev), runs in any order
    ends = sorted(
        data.draw(st.sets(st.integers(1, len(pieces)), max_size=len(pieces))) | {len(pieces)}
    )
    runs = [list(pieces[a:b]) for a, b in itertools.pairwise([0, *ends])]
    for run in data.draw(st.permutations(runs)):
        views = []
        for i in run:
            a, b = bounds[i], bounds[i + 1]
            skew = data.draw(st.integers(0, 7))  # the caller's buffer starts anywhere
            buf = np.empty(b - a + skew, np.uint8)[skew:]
            buf[:] = truth[a:b]
            views.append(memoryview(buf))
        if len(views) == 1:
            f.write(bounds[run[0]], views[0])
        else:
            f.writev(bounds[run[0]], views)
    f.fsync()
    f.close()
    assert path.read_bytes() == truth.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 9)), max_size=30))
def test_contiguous_runs_group_exactly_the_neighbours(spec):
    """Oracle: walk the pieces in position order; a piece starts a new run unless it begins
    where the previous one ended."""
    from orchestrator.engine.directio import contiguous_runs

    pos, at = [], 0
    for gap, n in spec:  # non-overlapping pieces, shuffled below
        at += gap
        pos.append((at, n))
        at += n
    perm = np.random.default_rng(len(spec)).permutation(len(pos))
    position = [pos[i][0] for i in perm]
    size = [pos[i][1] for i in perm]
    runs = contiguous_runs(position, size)
    flat = [int(i) for r in runs for i in r]
    assert sorted(flat) == list(range(len(pos)))
    assert [position[i] for i in flat] == sorted(position)
    for r in runs:
        for x, y in itertools.pairwise(r):
            assert position[y] == position[x] + size[x]
    for r, s in itertools.pairwise(runs):
        assert position[s[0]] != position[r[-1]] + size[r[-1]]


def test_positioned_file_sends_whole_pages_directly_and_falls_back_to_the_cache(tmp_path):
    from orchestrator.engine.directio import DIRECT_MIN, PAGE, PositionedFile

    path = tmp_path / "f.bin"
    path.write_bytes(b"")
    f = PositionedFile(path)
    assert f.direct  # ext4 under the tests takes O_DIRECT
    blob = np.arange(DIRECT_MIN + 3 * PAGE, dtype=np.uint8)
    f.write(PAGE - 5, memoryview(blob))
    f.close()
    assert path.read_bytes()[PAGE - 5 :] == blob.tobytes()
    os.environ["IORCH_DIRECT_IO"] = "0"
    try:
        assert not PositionedFile(path).direct
    finally:
        del os.environ["IORCH_DIRECT_IO"]


def test_preallocate_reserves_the_ranges_blocks_and_keeps_the_size(tmp_path):
    from orchestrator.engine.directio import PAGE, preallocate

    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    assert os.stat(path).st_blocks * 512 < 64 * PAGE
    assert preallocate(path, [(16 * PAGE, 64 * PAGE), (0, 0)])  # ext4 under the tests
    st = os.stat(path)
    assert st.st_size == 100  # the format's end of file is not moved
    assert st.st_blocks * 512 >= 64 * PAGE
    assert path.read_bytes() == b"x" * 100
    with pytest.raises(OSError, match="reserving"):  # the file system's refusal is raised
        preallocate(path, [(0, 1 << 62)])  # (EFBIG here; a full disk's ENOSPC alike)
    assert not preallocate(path, [(0, 0)])  # nothing to reserve: nothing reserved


def test_an_hdf5_stage_file_has_its_datasets_blocks_before_any_write(tmp_path):
    """Direct writes into holes stall behind other I/O nodes' fsyncs: create reserves them."""
    from orchestrator.contributions import DatasetSpec
    from orchestrator.engine.backends import get_backend
    from orchestrator.layout import StripeLayout

    specs = [DatasetSpec("u", (1 << 16, 4), "float64"), DatasetSpec("v", (1000,), "int32")]
    info = get_backend("hdf5").create(tmp_path / "o.h5", specs, [StripeLayout(2, 1 << 20)] * 2)
    assert os.stat(tmp_path / "o.h5").st_blocks * 512 >= sum(s.nbytes for s in specs)
    assert set(info["offsets"]) == {"u", "v"}
    root = get_backend("hdf5-vds").create(tmp_path / "o.vds", specs, [StripeLayout(2, 1 << 20)] * 2)
    for sub in root["subfiles"]:
        assert os.stat(sub).st_blocks * 512 >= sum(s.nbytes for s in specs) // 2


def test_only_stages_beyond_the_dirty_budget_write_small_runs_direct(tmp_path, monkeypatch):
    """Small runs go through the cache while it absorbs the stage; past the kernel's
    dirty budget (throttled writeback) they go direct, if the file's blocks are reserved."""
    from orchestrator.contributions import DatasetSpec
    from orchestrator.engine.backends import get_backend
    from orchestrator.engine.directio import DIRECT_MIN, DIRECT_MIN_RESERVED, dirty_budget
    from orchestrator.layout import StripeLayout

    assert dirty_budget() > 0  # Linux: read from /proc
    for fmt, suffix in (("hdf5", "o.h5"), ("hdf5-vds", "o.vds")):
        backend = get_backend(fmt)
        spec = DatasetSpec("u", (1024, 4), "float64")
        info = backend.create(tmp_path / suffix, [spec], [StripeLayout(2, 1 << 14)])
        assert info["reserved"] and info["nbytes"] == spec.nbytes
        big = dict(info, nbytes=dirty_budget() + 1)
        for case, want in ((info, DIRECT_MIN), (big, DIRECT_MIN_RESERVED)):
            w = backend.writer(case, 0, False)
            assert w.file.direct_min == want, (fmt, case["nbytes"])
            w.release()
        w = backend.writer(dict(big, reserved=False), 0, False)  # holes: small runs cached
        assert w.file.direct_min == DIRECT_MIN
        w.release()
    import orchestrator.plugins.hdf5 as plugin

    monkeypatch.setattr(plugin, "dirty_budget", lambda: 0)  # unknown budget: the cache
    info = get_backend("hdf5").create(tmp_path / "p.h5", [spec], [StripeLayout(2, 1 << 14)])
    w = get_backend("hdf5").writer(dict(info, nbytes=1 << 40), 0, False)
    assert w.file.direct_min == DIRECT_MIN
    w.release()


def test_writeback_runs_beside_the_writer_and_fsync_waits_for_it(tmp_path, monkeypatch):
    """sync_file_range can wait ~0.1 s on ext4's journal: the I/O node must not."""
    import threading

    from orchestrator.engine import directio

    gate, calls = threading.Event(), []

    def stuck(fd):
        calls.append(fd)
        gate.wait(30)

    monkeypatch.setattr(directio, "start_writeback", stuck)
    path = tmp_path / "f.bin"
    path.write_bytes(b"")
    f = directio.PositionedFile(path)
    f.write(0, memoryview(b"a" * 100))
    f.start_writeback()  # returns though the writeback is stuck
    f.start_writeback()  # one at a time: a hint while one runs is dropped
    f.write(100, memoryview(b"b" * 100))  # the writer goes on meanwhile
    syncing = threading.Thread(target=f.fsync)
    syncing.start()
    syncing.join(0.3)
    assert syncing.is_alive()  # durability waits for the writeback in flight
    gate.set()
    syncing.join(30)
    assert not syncing.is_alive()
    assert len(calls) == 1
    gate.clear()
    f.start_writeback()  # stuck again: close must not close the descriptor under it
    closing = threading.Thread(target=f.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()
    gate.set()
    closing.join(30)
    assert not closing.is_alive() and len(calls) == 2
    assert not [t for t in threading.enumerate() if t.name == "iorch-writeback"]
    assert path.read_bytes() == b"a" * 100 + b"b" * 100


def test_a_direct_write_into_another_file_sends_its_bytes_instead(tmp_path):
    """write_cut on a source that opens another file than its I/O node writes nothing and
    returns the bytes; on the same file it writes them and returns their CRC-32s."""
    from orchestrator.contributions import Contribution
    from orchestrator.engine.backends import get_backend
    from orchestrator.engine.sources import write_cut

    spec = DatasetSpec("u", (6,), "int64")
    backend = get_backend("hdf5")
    info = backend.create(tmp_path / "o.h5", [spec], [StripeLayout(1, 48)])
    info["token"] = "o.h5"
    con = Contribution(0, np.arange(6), np.arange(10, 16, dtype=np.int64))
    args = (
        [con],
        np.array([0, 0]),
        np.array([0, 24]),
        np.array([24, 24]),
        [8],
        ["<i8"],
        ["u"],
        [0, 0],
    )
    before = (tmp_path / "o.h5").read_bytes()
    kind, parts = write_cut("hdf5", info, 0, (0, 0), *args)
    assert kind == "data" and b"".join(bytes(p) for p in parts) == con.values.tobytes()
    assert (tmp_path / "o.h5").read_bytes() == before
    st_ = os.stat(tmp_path / "o.h5")
    kind, crcs, start, end = write_cut("hdf5", info, 0, (st_.st_dev, st_.st_ino), *args)
    assert kind == "written" and np.all(end >= start)
    raw = con.values.tobytes()
    assert crcs.tolist() == [zlib.crc32(raw[:24]), zlib.crc32(raw[24:])]
    import h5py

    with h5py.File(tmp_path / "o.h5") as h:
        assert h["u"][:].tolist() == list(range(10, 16))


def test_a_direct_write_of_a_stopped_stage_writes_nothing_and_is_no_error(tmp_path):
    """A run of handed-out writes (write_cuts) that finds its stage stopped returns
    "aborted" for each cut, writes none of them, and removes whatever of the output it may
    have recreated (as every direct writer of a stopped stage does); raising made Dask log
    a traceback under a user's Ctrl-C."""
    from orchestrator.contributions import Contribution
    from orchestrator.engine import sources
    from orchestrator.engine.backends import get_backend
    from orchestrator.engine.running import abort
    from orchestrator.engine.sources import write_cuts

    spec = DatasetSpec("u", (6,), "int64")
    info = get_backend("hdf5").create(tmp_path / "o.h5", [spec], [StripeLayout(1, 48)])
    info["token"] = f"stopped-{tmp_path.name}"
    con = Contribution(0, np.arange(6), np.arange(10, 16, dtype=np.int64))
    st_ = os.stat(tmp_path / "o.h5")
    call = ("hdf5", info, 0, (st_.st_dev, st_.st_ino), [con], np.array([0]), np.array([0]))
    call += (np.array([48]), [8], ["<i8"], ["u"], [0])
    assert write_cuts([call])[0][0] == "written"
    con2 = Contribution(0, np.arange(6), np.arange(20, 26, dtype=np.int64))
    abort(info["token"])
    writes = []
    hook = sources.cut_hook
    sources.cut_hook = writes.append  # reached only by a write that went ahead
    try:
        got = write_cuts([(*call[:4], [con2], *call[5:]), (*call[:4], [con2], *call[5:])])
    finally:
        sources.cut_hook = hook
    assert got == [("aborted",), ("aborted",)] and writes == []
    assert not (tmp_path / "o.h5").exists()


def test_stripes_assembled_for_another_file_come_back_for_the_io_node(tmp_path):
    """store_stripes assembles a shard from its own ranges and those received from another
    source, the rows no range holds keeping the fill value. Seeing another file than its
    I/O node it stores nothing and returns the rows; on the same file it stores the shard
    and returns its checksum, which is the CRC-32 of the rows as verify reads them."""
    import zarr

    from orchestrator.contributions import Contribution
    from orchestrator.engine.backends import get_backend
    from orchestrator.engine.sources import store_stripes

    spec = DatasetSpec("u", (8, 2), "int32", fill_value=-7)
    backend = get_backend("zarr")
    info = backend.create(tmp_path / "o.zarr", [spec], [StripeLayout(1, 4 * 8)])  # 4 rows
    info["token"] = "o.zarr"
    mine = Contribution(0, np.array([0, 1, 4]), np.array([[0, 0], [1, 1], [4, 4]], np.int32))
    # rows 2 and 5 arrive from the other source, as its cut returned them; rows 3, 6, 7: none
    theirs = np.array([[2, 2], [5, 5]], dtype=np.int32).reshape(-1).view(np.uint8)
    received = [(theirs, np.array([0, 0]), np.array([16, 40]), np.array([8, 8]))]
    args = (
        [(0, 0, 32), (0, 32, 32)],
        [mine],
        np.array([0, 0]),
        np.array([0, 32]),
        np.array([16, 8]),
        np.array([0, 0]),
        [8],
        ["<i4"],
        ["u"],
        ["u"],
        received,
    )
    want = np.array([[0, 0], [1, 1], [2, 2], [-7, -7], [4, 4], [5, 5], [-7, -7], [-7, -7]])
    kind, rows = store_stripes("zarr", info, 0, (0, 0), *args)
    assert kind == "data" and sorted(rows) == [0, 1]
    assert np.array_equal(np.concatenate([rows[0], rows[1]]), want)
    shards = [p for p in (tmp_path / "o.zarr" / "u").rglob("*") if p.name != "zarr.json"]
    assert not [p for p in shards if p.is_file()]  # nothing stored
    st_ = os.stat(tmp_path / "o.zarr")
    kind, sums, start, end = store_stripes("zarr", info, 0, (st_.st_dev, st_.st_ino), *args)
    assert kind == "stored" and np.all(end >= start)
    for k in (0, 1):
        got = want[4 * k : 4 * k + 4].astype(np.int32).tobytes()
        assert sums[("u", 32 * k)] == f"{zlib.crc32(got):08x}"
    assert np.array_equal(zarr.open_array(tmp_path / "o.zarr", path="u", mode="r")[:], want)


@settings(max_examples=200, deadline=None)
@given(
    n_rows=st.integers(1, 40),
    rows_per_stripe=st.integers(1, 8),
    fill=st.integers(-5, 5),
    data=st.data(),
)
def test_whole_stripe_writer_stores_put_rows_and_the_fill_value_elsewhere(
    n_rows, rows_per_stripe, fill, data
):
    """Rows put in any order, some never: every stored stripe holds exactly the rows put
    into it and the fill value elsewhere, and only stripes something was put into are
    stored."""
    from orchestrator.engine.storage import WholeStripeWriter, stripe_meta

    spec = DatasetSpec("u", (n_rows, 2), "int32", fill_value=fill)
    stored: dict[int, np.ndarray] = {}

    class Mem(WholeStripeWriter):
        def store(self, name, k, rows):
            assert k not in stored
            stored[k] = rows.copy()

        def release(self):
            pass

    w = Mem({"u": stripe_meta(spec, StripeLayout(1, rows_per_stripe * spec.row_bytes))})
    written = data.draw(st.lists(st.booleans(), min_size=n_rows, max_size=n_rows))
    order = data.draw(st.permutations(range(n_rows)))
    want = np.full((n_rows, 2), fill, dtype=np.int32)
    for r in order:
        if written[r]:
            want[r] = [r + 100, -r - 100]
            w.put("u", r * spec.row_bytes, memoryview(want[r].tobytes()))
    w.flush()
    touched = sorted({r // rows_per_stripe for r in range(n_rows) if written[r]})
    assert sorted(stored) == touched
    for k in touched:
        lo = k * rows_per_stripe
        np.testing.assert_array_equal(stored[k], want[lo : lo + rows_per_stripe])


@settings(max_examples=300, deadline=None)
@given(
    n_rows=st.integers(1, 40),
    rows_per_stripe=st.integers(1, 8),
    width=st.integers(1, 3),
    limit_rows=st.integers(0, 12),
    data=st.data(),
)
def test_a_spilling_whole_stripe_writer_stores_the_same_stripes_and_checksums(
    tmp_path_factory, n_rows, rows_per_stripe, width, limit_rows, data
):
    """With a bound on its buffers, a whole-stripe writer spills stripes to a scratch file
    (those due last first); pieces split anywhere, even inside a row, arrive in any order, some rows
    never: every stripe is stored once, whole, holding every row put and the fill value
    elsewhere, its checksum is that of those bytes, the buffers stay within the bound plus
    one stripe, and the scratch file is gone after flush."""
    from orchestrator.engine.storage import WholeStripeWriter, stripe_checksum, stripe_meta

    fill = -7
    spec = DatasetSpec("u", (n_rows, width), "int16", fill_value=fill)
    rb, sb = spec.row_bytes, rows_per_stripe * spec.row_bytes
    stored: dict[int, np.ndarray] = {}

    class Mem(WholeStripeWriter):
        def store(self, name, k, rows):
            assert k not in stored
            stored[k] = rows.copy()

    w = Mem({"u": stripe_meta(spec, StripeLayout(1, sb))})
    w.limit = limit_rows * rb
    w.spill_path = tmp_path_factory.mktemp("spill") / "spill"
    # when stripes complete, as the engine tells it: any order, some stripes not told
    w.due = data.draw(
        st.dictionaries(st.tuples(st.just("u"), st.integers(0, n_rows)), st.integers(0, 9))
    )
    written = data.draw(st.lists(st.booleans(), min_size=n_rows, max_size=n_rows))
    want = np.full((n_rows, width), fill, dtype=np.int16)
    for r in range(n_rows):
        if written[r]:
            want[r] = np.arange(width) + 10 * r + 1
    raw = want.reshape(-1).view(np.uint8)
    pieces = []  # byte ranges of written rows, cut at random places inside the rows
    for r in range(n_rows):
        if written[r]:
            cuts = sorted(set(data.draw(st.lists(st.integers(1, rb - 1), max_size=2))))
            edges = [r * rb, *(r * rb + c for c in cuts), (r + 1) * rb]
            pieces += list(itertools.pairwise(edges))
    for i in data.draw(st.permutations(range(len(pieces)))):
        a, b = pieces[i]
        w.put("u", a, memoryview(raw[a:b].tobytes()))
        assert w.held_bytes() <= w.limit + sb
    w.flush()
    assert w.held_bytes() == 0 and not w.spill_path.exists()
    touched = sorted({r // rows_per_stripe for r in range(n_rows) if written[r]})
    assert sorted(stored) == touched
    sums = w.checksums()
    assert sorted(off // sb for _, off in sums) == touched
    for k in touched:
        lo = k * rows_per_stripe
        np.testing.assert_array_equal(stored[k], want[lo : lo + rows_per_stripe])
        assert sums[("u", k * sb)] == stripe_checksum(want[lo : lo + rows_per_stripe].tobytes())


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-(2**40), 2**40), st.integers(0, 300)), min_size=0, max_size=12),
    st.sampled_from(["int64", "int32", "uint64"]),
)
def test_compacted_rows_expand_to_exactly_the_rows(runs, dtype):
    from orchestrator.engine.cuts import compact_rows, expand_rows

    info = np.iinfo(dtype)
    parts = [np.arange(s, s + n) for s, n in runs]
    rows = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    rows = np.clip(rows, info.min, info.max).astype(dtype)  # unsorted, repeated, any
    back = expand_rows(compact_rows(rows))
    assert back.dtype == rows.dtype and np.array_equal(back, rows)


def test_the_bounce_buffer_starts_at_a_huge_page_and_is_private_to_its_thread():
    """A direct write is cut into requests of at most max_segments contiguous pieces:
    the gathered bytes sit in huge-page-aligned private memory, one buffer per thread."""
    import threading

    from orchestrator.engine.directio import BOUNCE, _address, _bounce

    mine = _bounce()
    assert len(mine) == BOUNCE and _address(mine) % (2 << 20) == 0
    assert _bounce() is mine  # reused: it stays warm
    other: list[memoryview] = []
    t = threading.Thread(target=lambda: other.append(_bounce()))
    t.start()
    t.join()
    assert _address(other[0]) != _address(mine)


def test_a_kernel_refusing_huge_pages_keeps_direct_writes(tmp_path, monkeypatch):
    """madvise fails with EINVAL where the kernel has no huge pages: that must not read
    as the device refusing direct writes (which turns them off for the file)."""
    import threading

    from orchestrator.engine import directio

    monkeypatch.setattr(directio, "_HUGE_ADVICE", 0x7FFF)  # no such advice: EINVAL
    path = tmp_path / "f.bin"
    path.write_bytes(b"")
    blob = np.arange(3 << 20, dtype=np.uint8)
    out: list[bool] = []

    def write() -> None:  # a new thread: its buffer is made under the refused advice
        f = directio.PositionedFile(path)
        f.write(0, memoryview(blob[1:]))  # misaligned: through the buffer
        out.append(f.direct)
        f.close()

    t = threading.Thread(target=write)
    t.start()
    t.join()
    assert out == [True]
    assert path.read_bytes() == blob[1:].tobytes()


def test_a_units_writes_stay_apart_in_the_trace_while_its_row_spans_them():
    """A unit whose bytes lie in two batches is written twice, with idle time between: its
    row spans both (plan order, makespan), its writes are two spans (what a chart draws)."""
    from orchestrator.engine.trace import Trace

    result = {
        "ionode": 1,
        "worker": "io-1",
        "sources": [],
        # unit 5: two ranges of one run, then one range a batch later; then unit 6
        "unit": np.array([5, 5, 5, 6]),
        "start": np.array([10.0, 10.0, 10.5, 10.6]),
        "end": np.array([10.1, 10.1, 10.6, 10.7]),
        "nbytes": np.array([4, 4, 8, 8]),
        "batch": np.array([0, 0, 1, 1]),
        "flush": (10.7, 10.8),
    }
    tr = Trace.from_results([result], n_units=7)
    assert tr.unit.tolist() == [5, 6] and tr.nbytes.tolist() == [16, 8]
    assert np.allclose(tr.start, [0.0, 0.6]) and np.allclose(tr.end, [0.6, 0.7])
    unit, ionode, start, end = tr.writes()
    assert unit.tolist() == [5, 5, 6] and ionode.tolist() == [1, 1, 1]
    assert np.allclose(start, [0.0, 0.5, 0.6]) and np.allclose(end, [0.1, 0.6, 0.7])
