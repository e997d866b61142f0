# ruff: noqa
# Source: dfm/emcee -- src/emcee/backends/hdf.py @ 142797c90e8319fd70d943a8080c167100452ad2
# Licence: MIT (Copyright (c) 2010-2019 Daniel Foreman-Mackey & contributors)
# Copied: HDFBackend.open, .reset, .grow, .save_step (method text unchanged)
# Around it: a stand-in class holds the state HDFBackend.__init__ sets; emcee's Backend
# validation helpers (_check, _check_blobs) are no-ops; `__version__` is a constant;
# open() calls h5py.File, so run() binds this module's `h5py` to the harness shim.
"""emcee's HDF5 backend writing an MCMC chain: a group with attributes (str, int, bool, uint32
arrays), gzip datasets created empty with maxshape and grown with resize, per-step row
writes, a compound ``blobs`` dataset and ``accepted[:] += ...``.
"""

from types import SimpleNamespace

import h5py
import numpy as np

from ..harness import h5py_opens

KIND = "h5py"

__version__ = "3.1.4"  # stand-in for emcee's `from .. import __version__`


# fmt: off
class HDFBackend:
    """Stand-in for emcee.backends.hdf.HDFBackend (run() sets what __init__ sets)."""

    def _check_blobs(self, blobs):  # emcee's Backend validation: not exercised here
        pass

    def _check(self, state, accepted):  # emcee's Backend validation: not exercised here
        pass

    # ---- copied unchanged from dfm/emcee: src/emcee/backends/hdf.py @ 142797c90e83 ----
    def open(self, mode="r"):
        if self.read_only and mode != "r":
            raise RuntimeError(
                "The backend has been loaded in read-only "
                "mode. Set `read_only = False` to make "
                "changes."
            )
        f = h5py.File(self.filename, mode)
        if not self.dtype_set and self.name in f:
            g = f[self.name]
            if "chain" in g:
                self.dtype = g["chain"].dtype
                self.dtype_set = True
        return f

    def reset(self, nwalkers, ndim):
        """Clear the state of the chain and empty the backend

        Args:
            nwakers (int): The size of the ensemble
            ndim (int): The number of dimensions

        """
        with self.open("a") as f:
            if self.name in f:
                del f[self.name]

            g = f.create_group(self.name)
            g.attrs["version"] = __version__
            g.attrs["nwalkers"] = nwalkers
            g.attrs["ndim"] = ndim
            g.attrs["has_blobs"] = False
            g.attrs["iteration"] = 0
            g.create_dataset(
                "accepted",
                data=np.zeros(nwalkers),
                compression=self.compression,
                compression_opts=self.compression_opts,
            )
            g.create_dataset(
                "chain",
                (0, nwalkers, ndim),
                maxshape=(None, nwalkers, ndim),
                dtype=self.dtype,
                compression=self.compression,
                compression_opts=self.compression_opts,
            )
            g.create_dataset(
                "log_prob",
                (0, nwalkers),
                maxshape=(None, nwalkers),
                dtype=self.dtype,
                compression=self.compression,
                compression_opts=self.compression_opts,
            )

    def grow(self, ngrow, blobs):
        """Expand the storage space by some number of samples

        Args:
            ngrow (int): The number of steps to grow the chain.
            blobs: The current array of blobs. This is used to compute the
                dtype for the blobs array.

        """
        self._check_blobs(blobs)

        with self.open("a") as f:
            g = f[self.name]
            ntot = g.attrs["iteration"] + ngrow
            g["chain"].resize(ntot, axis=0)
            g["log_prob"].resize(ntot, axis=0)
            if blobs is not None:
                has_blobs = g.attrs["has_blobs"]
                if not has_blobs:
                    nwalkers = g.attrs["nwalkers"]
                    dt = np.dtype((blobs.dtype, blobs.shape[1:]))
                    g.create_dataset(
                        "blobs",
                        (ntot, nwalkers),
                        maxshape=(None, nwalkers),
                        dtype=dt,
                        compression=self.compression,
                        compression_opts=self.compression_opts,
                    )
                else:
                    g["blobs"].resize(ntot, axis=0)
                    if g["blobs"].dtype.shape != blobs.shape[1:]:
                        raise ValueError(
                            "Existing blobs have shape {} but new blobs "
                            "requested with shape {}"
                            .format(g["blobs"].dtype.shape, blobs.shape[1:]))
                g.attrs["has_blobs"] = True

    def save_step(self, state, accepted):
        """Save a step to the backend

        Args:
            state (State): The :class:`State` of the ensemble.
            accepted (ndarray): An array of boolean flags indicating whether
                or not the proposal for each walker was accepted.

        """
        self._check(state, accepted)

        with self.open("a") as f:
            g = f[self.name]
            iteration = g.attrs["iteration"]

            g["chain"][iteration, :, :] = state.coords
            g["log_prob"][iteration, :] = state.log_prob
            if state.blobs is not None:
                g["blobs"][iteration, :] = state.blobs
            g["accepted"][:] += accepted

            for i, v in enumerate(state.random_state):
                g.attrs["random_state_{0}".format(i)] = v

            g.attrs["iteration"] = iteration + 1
    # ---- end of copied code ----


# fmt: on


def run(target):
    """reset, grow by 4 steps with compound blobs, then 4 save_step calls."""
    rng = np.random.default_rng(20240501)
    backend = HDFBackend()
    backend.filename = "chain.h5"  # ignored: the shim's h5py.File returns target
    backend.name = "mcmc"
    backend.read_only = False
    backend.compression = "gzip"
    backend.compression_opts = 4
    backend.dtype_set = False
    backend.dtype = np.float64
    nwalkers, ndim, nsteps = 6, 3, 4
    blob_dtype = np.dtype([("log_prior", np.float64), ("mean", np.float64)])
    random_state = np.random.RandomState(42).get_state()
    with h5py_opens(target, globals()):
        backend.reset(nwalkers, ndim)
        backend.grow(nsteps, np.zeros(nwalkers, dtype=blob_dtype))
        for _ in range(nsteps):
            coords = rng.normal(size=(nwalkers, ndim))
            blobs = np.zeros(nwalkers, dtype=blob_dtype)
            blobs["log_prior"] = -0.5 * (coords**2).sum(axis=1)
            blobs["mean"] = coords.mean(axis=1)
            state = SimpleNamespace(
                coords=coords,
                log_prob=blobs["log_prior"] - 1.0,
                blobs=blobs,
                random_state=random_state,
            )
            backend.save_step(state, rng.random(nwalkers) < 0.5)
