# ruff: noqa
# Source: hpc4cmb/flacarray -- src/flacarray/zarr.py @ 85d8c67bc1d429060f45791c38de48899204e971
#         hpc4cmb/flacarray -- src/flacarray/io_common.py @ 85d8c67bc1d429060f45791c38de48899204e971
# Licence: BSD-2-Clause (Copyright (c) 2024, Theodore Kisner)
# Copied: WriterZarr, write_compressed (zarr.py); receive_write_compressed (io_common.py);
#         zarr_names (zarr_load_v0.py, in the sibling module ./zarr_load_v0.py)
# Around it: function_timer is a pass-through decorator, flacarray_version a constant;
# this is a package so that write_compressed's `from .zarr_load_v0 import ...` works;
# the FLAC-compressed streams are random bytes (the writer only stores them).
"""flacarray's Zarr writer: ``create_array`` (it picks it over ``create_dataset`` when the
group has it) for int64/float64/uint8 arrays, group and array attributes, and slab writes
``dset[fslc] = buf[dslc]`` with tuples of slices, for a (2, 3) grid of streams.
"""

import numpy as np

try:
    import zarr

    have_zarr = True
except ImportError:
    have_zarr = False

KIND = "zarr"

flacarray_version = "0.3.3"  # stand-in for `from . import __version__ as flacarray_version`


def function_timer(f):
    """flacarray.utils.function_timer without the timing."""
    return f


# fmt: off
# ---- copied unchanged from hpc4cmb/flacarray: src/flacarray/io_common.py @ 85d8c67bc1d4 ----
@function_timer
def receive_write_compressed(
    writer, global_leading_shape, global_process_nbytes, mpi_comm=None, mpi_dist=None
):
    if mpi_comm is None:
        nproc = 1
        rank = 0
    else:
        nproc = mpi_comm.size
        rank = mpi_comm.rank

    # Compute the byte offset of each process's data
    comp_doff = list()
    coff = 0
    for proc in range(nproc):
        comp_doff.append(coff)
        coff += global_process_nbytes[proc]

    for proc in range(nproc):
        # Set up communication tags for the buffers we will send / receive
        tag_nbuf = 5
        tag_comp = tag_nbuf * proc + 0
        tag_starts = tag_nbuf * proc + 1
        tag_nbytes = tag_nbuf * proc + 2
        tag_stream_offsets = tag_nbuf * proc + 3
        tag_stream_gains = tag_nbuf * proc + 4
        if rank == 0:
            # The rank zero process will receive data from the other processes
            # and write it into the global datasets.  For each dataset we build
            # the "slab" (tuple of slices) that we will write from the array
            # in memory and to the HDF5 dataset.
            #
            # The range of the leading dimension on this process.
            recv_range = mpi_dist[proc]
            recv_leading_shape = (
                recv_range[1] - recv_range[0],
            ) + global_leading_shape[1:]

            # The next 4 datasets all have the same slab definitions
            dslc = tuple([slice(0, x) for x in recv_leading_shape])
            fslc = (
                slice(recv_range[0], recv_range[0] + recv_leading_shape[0]),
            ) + tuple([slice(0, x) for x in recv_leading_shape[1:]])

            # Stream starts
            if proc == 0:
                recv = writer.starts.astype(np.int64)
            else:
                recv = np.empty(recv_leading_shape, dtype=np.int64)
                mpi_comm.Recv(recv, source=proc, tag=tag_starts)
            writer.save_starts(recv, mpi_comm, dslc, fslc)
            del recv

            # Stream nbytes
            if proc == 0:
                recv = writer.nbytes.astype(np.int64)
            else:
                recv = np.empty(recv_leading_shape, dtype=np.int64)
                mpi_comm.Recv(recv, source=proc, tag=tag_nbytes)
            writer.save_nbytes(recv, mpi_comm, dslc, fslc)
            del recv

            # Offsets and gains for type conversions
            if writer.have_offsets:
                if proc == 0:
                    recv = writer.offsets
                else:
                    recv = np.empty(recv_leading_shape, dtype=writer.offsets.dtype)
                    mpi_comm.Recv(recv, source=proc, tag=tag_stream_offsets)
                writer.save_offsets(recv, mpi_comm, dslc, fslc)
                del recv
            if writer.have_gains:
                if proc == 0:
                    recv = writer.gains
                else:
                    recv = np.empty(recv_leading_shape, dtype=writer.gains.dtype)
                    mpi_comm.Recv(recv, source=proc, tag=tag_stream_gains)
                writer.save_gains(recv, mpi_comm, dslc, fslc)
                del recv

            # Compressed bytes
            if proc == 0:
                recv = writer.compressed
            else:
                recv = np.empty(global_process_nbytes[proc], dtype=np.uint8)
                mpi_comm.Recv(recv, source=proc, tag=tag_comp)
            dslc = (slice(0, global_process_nbytes[proc]),)
            fslc = (
                slice(
                    comp_doff[proc],
                    comp_doff[proc] + global_process_nbytes[proc],
                ),
            )
            writer.save_compressed(recv, mpi_comm, dslc, fslc)
            del recv
        elif proc == rank:
            # We are sending.
            mpi_comm.Send(writer.starts.astype(np.int64), dest=0, tag=tag_starts)
            mpi_comm.Send(writer.nbytes, dest=0, tag=tag_nbytes)
            if writer.offsets is not None:
                mpi_comm.Send(writer.offsets, dest=0, tag=tag_stream_offsets)
            if writer.gains is not None:
                mpi_comm.Send(writer.gains, dest=0, tag=tag_stream_gains)
            mpi_comm.Send(writer.compressed, dest=0, tag=tag_comp)
# ---- end of copied code ----

# ---- copied unchanged from hpc4cmb/flacarray: src/flacarray/zarr.py @ 85d8c67bc1d4 ----
class WriterZarr:
    """Helper class for the common writer function."""

    def __init__(
        self,
        global_stream_starts,
        stream_nbytes,
        stream_comp,
        stream_offsets,
        stream_gains,
        dataset_starts,
        dataset_nbytes,
        dataset_comp,
        dataset_offsets,
        dataset_gains,
    ):
        self._starts = global_stream_starts
        self._nbytes = stream_nbytes
        self._comp = stream_comp
        self._offsets = stream_offsets
        self._gains = stream_gains
        self._dstarts = dataset_starts
        self._dnbytes = dataset_nbytes
        self._dcomp = dataset_comp
        self._doffsets = dataset_offsets
        self._dgains = dataset_gains

    @property
    def starts(self):
        return self._starts

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def compressed(self):
        return self._comp

    @property
    def offsets(self):
        return self._offsets

    @property
    def gains(self):
        return self._gains

    @property
    def have_offsets(self):
        return self._doffsets is not None

    @property
    def have_gains(self):
        return self._gains is not None

    def save(self, dset, buf, mpi_comm, dslc, fslc):
        rank = 0
        if mpi_comm is not None:
            rank = mpi_comm.rank
        if dset is None or rank != 0:
            return
        dset[fslc] = buf[dslc]

    def save_starts(self, buf, mpi_comm, dslc, fslc):
        return self.save(self._dstarts, buf, mpi_comm, dslc, fslc)

    def save_nbytes(self, buf, mpi_comm, dslc, fslc):
        return self.save(self._dnbytes, buf, mpi_comm, dslc, fslc)

    def save_offsets(self, buf, mpi_comm, dslc, fslc):
        return self.save(self._doffsets, buf, mpi_comm, dslc, fslc)

    def save_gains(self, buf, mpi_comm, dslc, fslc):
        return self.save(self._dgains, buf, mpi_comm, dslc, fslc)

    def save_compressed(self, buf, mpi_comm, dslc, fslc):
        return self.save(self._dcomp, buf, mpi_comm, dslc, fslc)

@function_timer
def write_compressed(
    zgrp,
    leading_shape,
    global_leading_shape,
    stream_size,
    stream_starts,
    global_stream_starts,
    stream_nbytes,
    stream_offsets,
    stream_gains,
    compressed,
    local_nbytes,
    global_nbytes,
    global_process_nbytes,
    mpi_comm,
    mpi_dist,
):
    """Write compressed data to a Zarr group.

    The various input parameters are computed either during construction of a
    FlacArray, or during the `write_array` convenience function.

    We make the assumption that the Group may already have attributes associated
    with the calling code, and we do not want to modify or introduce conflicts with
    those.  We will make several datasets inside this group, and we will place most
    of our attributes on the dataset associated with the starting byte offsets.  We
    intentionally write the "flacarray_format_version" attribute to the top level
    group so that we can parse that and call the correct version of the read function.

    Args:
        zgrp (zarr.Group):  The Group to use.
        leading_shape (tuple):  Shape of the local leading dimensions.
        global_leading_shape (tuple):  Global shape of the local leading dimensions.
        stream_size (int):  The length of each stream.
        stream_starts (array):  The local starting byte offsets for each stream.
        global_stream_starts (array):  The global starting byte offsets for each stream.
        stream_nbytes (array):  The local number of bytes for each stream.
        stream_offsets (array):  The offsets used in int32 conversion.
        stream_gains (array):  The gains used in int32 conversion.
        compressed (array):  The compressed bytes.
        local_nbytes (int):  The total number of local compressed bytes.
        global_nbytes (int):  The total global compressed bytes.
        global_process_nbytes (list):  The number of compressed bytes on each process.
        mpi_comm (MPI.Comm):  The MPI communicator.
        mpi_dist (list):  The range of the leading dimension on each process.

    Returns:
        None

    """
    if not have_zarr:
        raise RuntimeError("zarr is not importable, cannot write to a zarr.Group")

    # Writer is currently using version 0
    from .zarr_load_v0 import zarr_names as znames

    comm = mpi_comm
    if comm is None:
        rank = 0
    else:
        rank = comm.rank

    dstarts = None
    dbytes = None
    dcomp = None
    dsoff = None
    dsgain = None

    if rank == 0:
        # This process is participating.  Write the format version string
        # to the top-level group.
        zgrp.attrs["flacarray_format_version"] = 0
        zgrp.attrs["flacarray_software_version"] = flacarray_version

        # Create the datasets.  We create the start bytes and auxiliary datasets first
        # and attach any metadata keys to the start bytes dataset (which is always
        # guaranteed to exist).  We also create a dataset storing the number of bytes
        # in each stream.  Although this can technically be computed using the total
        # number of compressed bytes and the stream starting bytes, it greatly
        # improves the convenience of loading data back in.

        # Zarr 3.0 requires shapes to be tuples of int
        z_global_leading_shape = tuple([int(x) for x in global_leading_shape])
        z_global_nbytes = (int(global_nbytes),)

        if hasattr(zgrp, "create_array"):
            # Zarr-3
            create_func = zgrp.create_array
        else:
            # Zarr-2
            create_func = zgrp.create_dataset

        # The starting bytes of each stream
        dstarts = create_func(
            znames["stream_starts"],
            shape=z_global_leading_shape,
            dtype=np.int64,
        )
        dstarts.attrs[znames["stream_size"]] = stream_size

        # The number of bytes in each stream
        dbytes = create_func(
            znames["stream_bytes"],
            shape=z_global_leading_shape,
            dtype=np.int64,
        )

        # The stream offsets and gains are optional, depending on the original
        # array type.
        if stream_offsets is not None:
            dsoff = create_func(
                znames["stream_offsets"],
                shape=z_global_leading_shape,
                dtype=stream_offsets.dtype,
            )
        else:
            dsoff = None
        if stream_gains is not None:
            dsgain = create_func(
                znames["stream_gains"],
                shape=z_global_leading_shape,
                dtype=stream_gains.dtype,
            )
        else:
            dsgain = None

        # Always have compressed bytes
        dcomp = create_func(
            znames["compressed"],
            shape=z_global_nbytes,
            dtype=np.uint8,
        )

    # Use the common writing function
    writer = WriterZarr(
        global_stream_starts,
        stream_nbytes,
        compressed,
        stream_offsets,
        stream_gains,
        dstarts,
        dbytes,
        dcomp,
        dsoff,
        dsgain,
    )
    receive_write_compressed(
        writer,
        global_leading_shape,
        global_process_nbytes,
        mpi_comm=mpi_comm,
        mpi_dist=mpi_dist,
    )
# ---- end of copied code ----


# fmt: on


def run(target):
    """Six streams of 50 samples in a (2, 3) leading shape, one process."""
    rng = np.random.default_rng(43)
    leading = (2, 3)
    nbytes = rng.integers(10, 30, size=leading).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).reshape(leading).astype(np.int64)
    compressed = rng.integers(0, 256, size=int(nbytes.sum()), dtype=np.uint8)
    write_compressed(
        target,
        leading,
        leading,
        50,
        starts,
        starts,
        nbytes,
        rng.normal(size=leading),
        rng.random(leading) + 0.5,
        compressed,
        compressed.nbytes,
        compressed.nbytes,
        [compressed.nbytes],
        None,
        [(0, leading[0])],
    )
