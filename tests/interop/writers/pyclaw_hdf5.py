# ruff: noqa
# Source: clawpack/pyclaw -- src/pyclaw/fileio/hdf5.py @ 8410140e3a2330a9b65728e8acd31d9cc2751f41
# Licence: BSD-3-Clause (Copyright (c) 1994-2018, Clawpack Developers)
# Copied: write (function text unchanged)
# Around it: the module globals it uses (h5py, use_h5py, ...) are set as in pyclaw; the
# Solution/State/Patch/Dimension objects are SimpleNamespaces; write() opens its own
# file, so run() binds this module's `h5py` to the harness shim.
"""pyclaw's HDF5 frame writer: one group per patch with many attributes (floats, ints, strings,
a list of bytes) and ``q``/``aux`` datasets created with the user's options, here ``lzf``
compression, ``shuffle``, ``fletcher32`` and ``chunks=True``.
"""

import logging
import os
from types import SimpleNamespace

import h5py
import numpy as np

from ..harness import h5py_opens

KIND = "h5py"

logger = logging.getLogger("pyclaw.fileio")
use_h5py = True  # as pyclaw sets them after its imports
use_PyTables = False


# fmt: off
# ---- copied unchanged from clawpack/pyclaw: src/pyclaw/fileio/hdf5.py @ 8410140e3a23 ----
def write(solution,frame,path,file_prefix='claw',write_aux=False,
                options={},write_p=False):
    r"""
    Write out a Solution to a HDF5 file.
    
    :Input:
     - *solution* - (:class:`~pyclaw.solution.Solution`) Pyclaw solution 
       object to input into
     - *frame* - (int) Frame number
     - *path* - (string) Root path
     - *file_prefix* - (string) Prefix for the file name.  ``default = 'claw'``
     - *write_aux* - (bool) Boolean controlling whether the associated 
       auxiliary array should be written out.  ``default = False``     
     - *options* - (dict) Optional argument dictionary, see 
       `HDF5 Option Table`_
    
    .. _`HDF5 Option Table`:
    
    +-----------------+------------------------------------------------------+
    | Key             | Value                                                |
    +=================+======================================================+
    | compression     | (None, string ["gzip" | "lzf" | "szip"] or int 0-9)  |
    |                 | Enable dataset compression. DEFLATE, LZF and (where  |
    |                 | available) SZIP are supported. An integer is         |
    |                 | interpreted as a GZIP level for backwards            |
    |                 | compatibility.                                       |
    +-----------------+------------------------------------------------------+
    |compression_opts | (None, or special value) Setting for compression     |
    |                 | filter; legal values for each filter type are:       |
    |                 |                                                      |
    |                 | - *gzip* - (int) 0-9                                 |
    |                 | - *lzf* - None allowed                               |
    |                 | - *szip* - (tuple) 2-tuple ('ec'|'nn', even integer  |
    |                 |     0-32)                                            |
    |                 |                                                      |
    |                 | See the filters module for a detailed description of |
    |                 | each of these filters.                               |
    +-----------------+------------------------------------------------------+
    | chunks          | (None, True or shape tuple) Store the dataset in     |
    |                 | chunked format. Automatically selected if any of the |
    |                 | other keyword options are given. If you don't provide|
    |                 | a shape tuple, the library will guess one for you.   |
    +-----------------+------------------------------------------------------+
    | shuffle         | (True/False) Enable/disable data shuffling, which can|
    |                 | improve compression performance. Automatically       |
    |                 | enabled when compression is used.                    |
    +-----------------+------------------------------------------------------+
    | fletcher32      | (True/False) Enable Fletcher32 error detection; may  |
    |                 | be used with or without compression.                 |
    +-----------------+------------------------------------------------------+
    """
    option_defaults = {'compression':None,'compression_opts':None,
                       'chunks':None,'shuffle':False,'fletcher32':False}
    for (k,v) in option_defaults.items():
        options[k] = options.get(k,v)
    
    filename = os.path.join(path,'%s%s.hdf' % 
                                (file_prefix,str(frame).zfill(4)))
    
    if use_h5py:
        with h5py.File(filename,'w') as f:
        
            # For each patch, write out attributes
            for state in solution.states:
                patch = state.patch
                # Create group for this patch
                subgroup = f.create_group('patch%s' % patch.patch_index)

                # General patch properties
                subgroup.attrs['t'] = state.t
                subgroup.attrs['num_eqn'] = state.num_eqn
                subgroup.attrs['num_aux'] = state.num_aux
                for attr in ['num_ghost','patch_index','level']:
                    if hasattr(patch,attr):
                        if getattr(patch,attr) is not None:
                            subgroup.attrs[attr] = getattr(patch,attr)

                # Add the dimension names as a attribute
                subgroup.attrs['dimensions'] = [name.encode('utf-8') 
                            for name in patch.get_dim_attribute('name')]
                # Dimension properties
                for dim in patch.dimensions:
                    for attr in ['num_cells','lower','delta','upper',
                                 'units']:
                        if hasattr(dim,attr):
                            if getattr(dim,attr) is not None:
                                attr_name = '%s.%s' % (dim.name,attr)
                                subgroup.attrs[attr_name] = getattr(dim,attr)

                if write_p:
                    q = state.p
                else:
                    q = state.q
                subgroup.create_dataset('q',data=q,**options)
                if write_aux and state.num_aux > 0:
                    subgroup.create_dataset('aux',data=state.aux,**options)
        
    elif use_PyTables:
        # f = tables.openFile(filename, mode = "w", title = options['title'])
        logging.critical("PyTables has not been implemented yet.")
        raise IOError("PyTables has not been implemented yet.")
    else:
        err_msg = "No hdf5 python modules available."
        logging.critical(err_msg)
        raise Exception(err_msg)
# ---- end of copied code ----


# fmt: on


def _patch(index, level, nx, ny):
    dims = [
        SimpleNamespace(name="x", num_cells=nx, lower=0.0, delta=1.0 / nx, upper=1.0, units="m"),
        SimpleNamespace(name="y", num_cells=ny, lower=-1.0, delta=2.0 / ny, upper=1.0, units=None),
    ]
    return SimpleNamespace(
        patch_index=index,
        level=level,
        num_ghost=2,
        dimensions=dims,
        get_dim_attribute=lambda attr: [getattr(d, attr) for d in dims],
    )


def run(target):
    """Frame 3 of a two-patch solution (3 equations, 2 aux fields)."""
    rng = np.random.default_rng(5)
    states = []
    for index, (level, nx, ny) in enumerate([(1, 6, 4), (2, 12, 8)], start=1):
        states.append(
            SimpleNamespace(
                patch=_patch(index, level, nx, ny),
                t=0.25 * index,
                num_eqn=3,
                num_aux=2,
                q=rng.normal(size=(3, nx, ny)),
                p=None,
                aux=rng.random((2, nx, ny)).astype(np.float32),
            )
        )
    solution = SimpleNamespace(states=states)
    options = {"compression": "lzf", "shuffle": True, "fletcher32": True, "chunks": True}
    with h5py_opens(target, globals()):
        write(solution, 3, "_output", write_aux=True, options=options)
