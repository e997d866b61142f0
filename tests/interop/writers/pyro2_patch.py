# ruff: noqa
# Source: python-hydro/pyro2 -- pyro/mesh/patch.py @ 3d890b8636a930b561788914fa5d1ed9b9261a23
# Licence: BSD-3-Clause (Copyright (c) 2013-18, pyro development team)
# Copied: CellCenterData2d.write_data (method text unchanged)
# Around it: a stand-in class carries the grid, variables, boundary conditions and aux
# data a CellCenterData2d has; get_var_by_index(n).v() returns the interior of variable n.
"""pyro2's cell-centred patch output: ``aux``/``grid``/``state`` groups, scalar attributes
(float, int, str) and one group per variable holding a 2-D ``data`` dataset.
"""

from types import SimpleNamespace

import numpy as np

KIND = "h5py"


# fmt: off
class CellCenterData2d:
    """Stand-in for pyro.mesh.patch.CellCenterData2d (run() sets its attributes)."""

    # ---- copied unchanged from python-hydro/pyro2: pyro/mesh/patch.py @ 3d890b8636a9 ----
    def write_data(self, f):
        """
        write the data out to an hdf5 file -- here, f is an h5py
        File pbject

        """

        # auxillary data
        gaux = f.create_group("aux")
        for k, v in self.aux.items():
            gaux.attrs[k] = v

        # grid information
        ggrid = f.create_group("grid")
        ggrid.attrs["nx"] = self.grid.nx
        ggrid.attrs["ny"] = self.grid.ny
        ggrid.attrs["ng"] = self.grid.ng

        ggrid.attrs["xmin"] = self.grid.xmin
        ggrid.attrs["xmax"] = self.grid.xmax
        ggrid.attrs["ymin"] = self.grid.ymin
        ggrid.attrs["ymax"] = self.grid.ymax

        # data
        gstate = f.create_group("state")

        for n in range(self.nvar):
            gvar = gstate.create_group(self.names[n])
            gvar.create_dataset("data",
                                data=self.get_var_by_index(n).v())
            gvar.attrs["xlb"] = self.BCs[self.names[n]].xlb
            gvar.attrs["xrb"] = self.BCs[self.names[n]].xrb
            gvar.attrs["ylb"] = self.BCs[self.names[n]].ylb
            gvar.attrs["yrb"] = self.BCs[self.names[n]].yrb
    # ---- end of copied code ----


# fmt: on


def run(target):
    """A 8x6 grid (2 ghost cells) with the four compressible-solver variables."""
    rng = np.random.default_rng(11)
    grid = SimpleNamespace(nx=8, ny=6, ng=2, xmin=0.0, xmax=1.0, ymin=0.0, ymax=0.75)
    names = ["density", "x-momentum", "y-momentum", "energy"]
    ng = grid.ng
    state = rng.random((grid.nx + 2 * ng, grid.ny + 2 * ng, len(names)))
    data = CellCenterData2d()
    data.grid = grid
    data.names = names
    data.nvar = len(names)
    data.aux = {"gamma": 1.4, "grav": -1.0}
    data.BCs = {
        n: SimpleNamespace(
            xlb="periodic",
            xrb="periodic",
            ylb="reflect-odd" if n == "y-momentum" else "reflect-even",
            yrb="outflow",
        )
        for n in names
    }
    data.get_var_by_index = lambda n: SimpleNamespace(
        v=lambda: state[ng:-ng, ng:-ng, n]  # ArrayIndexer.v(): the valid region
    )
    data.write_data(target)
