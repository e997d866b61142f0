"""Chunked and compressed datasets in one HDF5 file, written by several I/O nodes (issue 15):
unfiltered whole-row chunks in place, the others encoded and spooled.

The oracle is h5py writing the same array with the same options in one process: every
chunk our I/O nodes encode and the committing process stores must hold the same bytes
(``read_direct_chunk``: same filters, same filter mask), whatever the chunk shape, the
stripe size, the number of I/O nodes and the order and cut of the pieces.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from orchestrator.plugins.hdf5 import HDF5Backend
from orchestrator.plugins.hdf5_tree import h5_kwargs, resolved_chunks

from orchestrator.contributions import DatasetSpec
from orchestrator.errors import StorageError
from orchestrator.layout import StripeLayout


@st.composite
def cases(draw):
    rows = draw(st.integers(1, 60))
    width = draw(st.integers(1, 4))
    chunk = (draw(st.integers(1, 16)), draw(st.integers(1, width + 2)))
    options = draw(
        st.sampled_from(
            [
                {"compression": "gzip"},
                {"compression": "lzf", "shuffle": True},
                {"fletcher32": True},
                {"compression": "gzip", "compression_opts": 9, "shuffle": True},
                {"maxshape": (None, width)},
                {},
            ]
        )
    )
    if chunk[1] > width and "maxshape" not in options:
        chunk = (chunk[0], width)
    n_ionodes = draw(st.integers(1, 3))
    stripe = draw(st.integers(1, 2000))
    seed = draw(st.integers(0, 2**31))
    return rows, width, chunk, options, n_ionodes, stripe, seed


def _lzf_decompress(src: bytes) -> bytes:
    """LZF's format, decoded (liblzf's ``lzf_d.c``): a literal run or a back reference."""
    out = bytearray()
    i = 0
    while i < len(src):
        ctrl = src[i]
        i += 1
        if ctrl < 32:  # ctrl + 1 literal bytes
            out += src[i : i + ctrl + 1]
            i += ctrl + 1
            continue
        length = ctrl >> 5
        if length == 7:
            length += src[i]
            i += 1
        ref = len(out) - ((ctrl & 0x1F) << 8) - src[i] - 1
        i += 1
        for _ in range(length + 2):  # may overlap what it is copying
            out.append(out[ref])
            ref += 1
    return bytes(out)


def _chunks(ds) -> dict[tuple[int, ...], tuple[int, bytes]]:
    """Every stored chunk: its filter mask and bytes. LZF's are decoded first: liblzf's
    compressor does not clear its hash table, so two runs of h5py itself may encode one
    chunk differently (seen in CI); its decoded bytes are what must be the same."""
    dcpl = ds.id.get_create_plist()
    lzf = [k for k in range(dcpl.get_nfilters()) if dcpl.get_filter(k)[0] == h5py.h5z.FILTER_LZF]
    out = {}
    for i in range(ds.id.get_num_chunks()):
        info = ds.id.get_chunk_info(i)
        mask, blob = ds.id.read_direct_chunk(info.chunk_offset)
        if lzf and not mask & (1 << lzf[0]):  # a chunk LZF could not shrink is stored as is
            blob = _lzf_decompress(blob)
        out[tuple(info.chunk_offset)] = (mask, blob)
    return out


def test_the_lzf_decoder_undoes_h5pys_lzf(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    data = rng.integers(0, 9, size=(300, 3)).astype("<i4")  # repeats: back references
    with h5py.File(tmp_path / "z.h5", "w") as f:
        ds = f.create_dataset("u", data=data, chunks=(100, 3), compression="lzf")
        for k in range(3):
            mask, blob = ds.id.read_direct_chunk((100 * k, 0))
            assert mask == 0 and len(blob) < data[:100].nbytes  # really compressed
            assert _lzf_decompress(blob) == data[100 * k : 100 * (k + 1)].tobytes()


@settings(max_examples=150, deadline=None)
@given(cases())
def test_every_chunk_is_the_one_h5py_writes(tmp_path_factory, case):
    rows, width, chunk, options, n_ionodes, stripe, seed = case
    tmp: Path = tmp_path_factory.mktemp("spool") / "out.h5"
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 50, size=(rows, width)).astype("<i4")  # compressible
    spec = DatasetSpec("g/u", data.shape, "<i4", chunks=chunk, fill_value=-1, **options)
    backend = HDF5Backend()
    try:
        backend.check_spec(spec)
    except StorageError:  # refused as h5py refuses it: chunks beyond an axis that cannot grow
        with (
            h5py.File(tmp, "w", driver="core", backing_store=False) as f,
            pytest.raises(ValueError),
        ):
            f.create_dataset("u", data=data, **h5_kwargs(spec))
        event("refused, as by h5py")
        return

    lay = StripeLayout(n_ionodes, backend.stripe_size(spec, stripe))
    info = backend.create(tmp, [spec], [lay])
    event("written in place" if info.get("tables") else "encoded and spooled")
    raw = data.reshape(-1).view(np.uint8)
    writers = [backend.writer(info, k, False) for k in range(n_ionodes)]
    pieces = []
    for j in range(lay.stripes(spec.nbytes)):  # each stripe cut at random points
        a, b = j * lay.stripe_bytes, min((j + 1) * lay.stripe_bytes, raw.size)
        cuts = sorted({a, b, *rng.integers(a, b, size=3).tolist()})
        pieces += [(j % n_ionodes, x, y) for x, y in itertools.pairwise(cuts)]
    for i in rng.permutation(len(pieces)):
        k, x, y = pieces[i]
        writers[k].put("g/u", x, memoryview(raw[x:y].tobytes()))
    for w in writers:
        w.flush()
        w.release()
    backend.finish(tmp, {"datasets": {}})
    ref = tmp.with_name("ref.h5")
    with h5py.File(ref, "w") as f:
        f.create_dataset("g/u", data=data, **h5_kwargs(spec, resolved_chunks(spec)))
    with h5py.File(tmp, "r") as ours, h5py.File(ref, "r") as want:
        np.testing.assert_array_equal(ours["g/u"][...], data)
        assert ours["g/u"].chunks == want["g/u"].chunks
        assert ours["g/u"].compression == want["g/u"].compression
        assert _chunks(ours["g/u"]) == _chunks(want["g/u"])
    assert not list(tmp.parent.glob("*.chunks-*"))  # the spools are gone
