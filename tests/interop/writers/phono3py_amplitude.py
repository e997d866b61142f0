# ruff: noqa
# Source: phonopy/phono3py -- phono3py/file_IO.py @ 8ba9223a18e6294b69ed1771b5a26b4b23a6f2fb
# Licence: BSD-3-Clause (Copyright (c) 2014, Atsushi Togo)
# Copied: write_amplitude_to_hdf5 (unchanged)
# Around it: it opens its own file, so run() binds this module's `h5py` to the shim.
"""phono3py's phonon-phonon interaction dump: root-level datasets from ``data=`` (4-D float64
amplitudes, integer triplets and weights, complex128 eigenvectors).
"""

import h5py
import numpy as np

from ..harness import h5py_opens

KIND = "h5py"


# fmt: off
# ---- copied unchanged from phonopy/phono3py: phono3py/file_IO.py @ 8ba9223a18e6 ----
def write_amplitude_to_hdf5(amplitude,
                            mesh,
                            grid_point,
                            triplet=None,
                            weight=None,
                            frequency=None,
                            eigenvector=None):
    suffix = "-m%d%d%d" % tuple(mesh)
    suffix += ("-g%d" % grid_point)
    with h5py.File("amplitude" + suffix + ".hdf5", 'w') as w:
        w.create_dataset('amplitude', data=amplitude)
        if triplet is not None:
            w.create_dataset('triplet', data=triplet)
        if weight is not None:
            w.create_dataset('weight', data=weight)
        if frequency is not None:
            w.create_dataset('frequency', data=frequency)
        if eigenvector is not None:
            w.create_dataset('eigenvector', data=eigenvector)
# ---- end of copied code ----


# fmt: on


def run(target):
    """Amplitudes of 3 triplets for a 2-atom cell (6 bands) on a 4x4x4 mesh."""
    rng = np.random.default_rng(17)
    nband = 6
    eigenvector = rng.normal(size=(4, nband, nband)) + 1j * rng.normal(size=(4, nband, nband))
    with h5py_opens(target, globals()):
        write_amplitude_to_hdf5(
            rng.random((3, nband, nband, nband)),
            [4, 4, 4],
            5,
            triplet=np.array([[5, 0, 59], [5, 1, 58], [5, 17, 42]], dtype=np.uintp),
            weight=np.array([1, 6, 12], dtype=np.int64),
            frequency=rng.random((4, nband)) * 10.0,
            eigenvector=eigenvector,
        )
