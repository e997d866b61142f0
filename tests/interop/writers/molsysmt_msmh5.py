# ruff: noqa
# Source: uibcdf/MolSysMT -- molsysmt/native/msmh5_file_handler.py @ 54ecd7bfc032281e2befc1d074dbf88107a397de
# Licence: MIT (Copyright (c) 2023 Liliana M. Moreno Vargas, Diego Prada Gracia and contributors)
# Copied: the msmh5_version constant and _new_msmfile (unchanged)
# Around it: `puw` (pyunitwizard) is a stand-in that returns the unit strings given;
# _new_msmfile opens its own file, so run() binds this module's `h5py` to the shim.
"""MolSysMT's new-file schema: nested groups with str/int/float/bool attributes and many empty,
resizable (``maxshape=(None, ...)``) gzip datasets, including variable-length strings
(``h5py.string_dtype()``) and zero-length (0,), (0, 3, 3), (0, 0, 3) shapes.
"""

import h5py
import numpy as np

from ..harness import h5py_opens

KIND = "h5py"


class puw:
    """Stand-in for molsysmt's pyunitwizard: units as the strings they are given."""

    @staticmethod
    def get_unit(quantity, to_form="string"):
        return str(quantity)

    @staticmethod
    def get_standard_units(dimensionality=None, form="string"):
        return "1"


# fmt: off
# ---- copied unchanged from uibcdf/MolSysMT: molsysmt/native/msmh5_file_handler.py @ 54ecd7bfc032 ----
msmh5_version = "0.2"
# ---- end of copied code ----

# ---- copied unchanged from uibcdf/MolSysMT: molsysmt/native/msmh5_file_handler.py @ 54ecd7bfc032 ----
def _new_msmfile(filename, creator='MolSysMT', compression="gzip", compression_opts=4,
        int_precision='single', float_precision='single', length_unit=None,
        time_unit=None, energy_unit=None, temperature_unit=None, charge_unit=None,
        mass_unit=None):

    if int_precision=='single':
        int_type=np.int32
    elif int_precision=='double':
        int_type=np.int64

    if float_precision=='single':
        float_type=np.float32
    elif float_precision=='double':
        float_type=np.float64

    file = h5py.File(filename, "w")

    file.attrs['version'] = msmh5_version
    file.attrs['type'] = "msmh5"
    file.attrs['creator'] = creator
    file.attrs['int_precision'] = int_precision
    file.attrs['float_precision'] = float_precision

    if length_unit is None:
        file.attrs['length_unit']=puw.get_standard_units(dimensionality={'[L]':1}, form='string')
    else:
        file.attrs['length_unit']=puw.get_unit(length_unit, to_form='string')

    if time_unit is None:
        file.attrs['time_unit']=puw.get_standard_units(dimensionality={'[T]':1}, form='string')
    else:
        file.attrs['time_unit']=puw.get_unit(time_unit, to_form='string')

    if energy_unit is None:
        file.attrs['energy_unit']=puw.get_standard_units(dimensionality={'[L]':2, '[M]':1,
            '[T]':-2, '[mol]':-1}, form='string')
    else:
        file.attrs['energy_unit']=puw.get_unit(energy_unit, to_form='string')

    if temperature_unit is None:
        file.attrs['temperature_unit']=puw.get_standard_units(dimensionality={'[K]':1}, form='string')
    else:
        file.attrs['temperature_unit']=puw.get_unit(temperature_unit, to_form='string')

    if charge_unit is None:
        file.attrs['charge_unit']=puw.get_standard_units(dimensionality={'[A]':1, '[T]':1}, form='string')
    else:
        file.attrs['charge_unit']=puw.get_unit(charge_unit, to_form='string')

    if mass_unit is None:
        file.attrs['mass_unit']=puw.get_standard_units(dimensionality={'[M]':1}, form='string')
    else:
        file.attrs['mass_unit']=puw.get_unit(mass_unit, to_form='string')

    global_dataset_options = {
            'compression':compression,
            'compression_opts':compression_opts,
            }

    # Topology

    topology = file.create_group("topology")
    topology.attrs['n_atoms']=0
    topology.attrs['n_groups']=0
    topology.attrs['n_components']=0
    topology.attrs['n_molecules']=0
    topology.attrs['n_entities']=0
    topology.attrs['n_chains']=0
    topology.attrs['n_bonds']=0

    ## Atoms

    atoms = topology.create_group("atoms")

    atoms.create_dataset('id', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    atoms.create_dataset('name', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    atoms.create_dataset('type', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    atoms.create_dataset('group_index', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    atoms.create_dataset('chain_index', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)

    ## Groups

    groups = topology.create_group("groups")

    groups.create_dataset('id', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    groups.create_dataset('name', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    groups.create_dataset('type', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    groups.create_dataset('component_index', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)

    ## Components

    components = topology.create_group("components")

    components.create_dataset('id', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    components.create_dataset('name', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    components.create_dataset('type', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    components.create_dataset('molecule_index', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)

    ## Molecules

    molecules = topology.create_group("molecules")

    molecules.create_dataset('id', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    molecules.create_dataset('name', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    molecules.create_dataset('type', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    molecules.create_dataset('entity_index', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)

    ## Entities

    entities = topology.create_group("entities")

    entities.create_dataset('id', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    entities.create_dataset('name', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    entities.create_dataset('type', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)

    ## Chains

    chains = topology.create_group("chains")

    chains.create_dataset('id', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    chains.create_dataset('name', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    chains.create_dataset('type', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)


    ## Bonds

    bonds = topology.create_group("bonds")

    bonds.create_dataset('atom1_index', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    bonds.create_dataset('atom2_index', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    bonds.create_dataset('order', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)
    bonds.create_dataset('type', (0,), dtype=h5py.string_dtype(), maxshape=(None,), **global_dataset_options)


    # Structures

    structures_sd = file.create_group("structures")
    structures_sd.attrs['n_atoms'] = 0
    structures_sd.attrs['n_structures'] = 0
    structures_sd.attrs['n_structures_written'] = 0
    structures_sd.attrs['constant_time_step'] = False
    structures_sd.attrs['time_step'] = 0.0
    structures_sd.attrs['constant_id_step'] = False
    structures_sd.attrs['id_step'] = 0
    structures_sd.attrs['constant_box'] = False
    structures_sd.attrs['pbc'] = 'none' # none, cell, mic, continuous
    structures_sd.attrs['n_degrees_of_freedom'] = 0
    structures_sd.attrs['temperature_from_kinetic_energy'] = False

    structures_sd.create_dataset('id', (0,), dtype=int_type, maxshape=(None,), **global_dataset_options)
    structures_sd.create_dataset('time', (0,), dtype=float_type, maxshape=(None,), **global_dataset_options)
    structures_sd.create_dataset('box', (0,3,3), dtype=float_type, maxshape=(None,3,3), **global_dataset_options)
    structures_sd.create_dataset('coordinates', (0,0,3), dtype=float_type, maxshape=(None,None,3), **global_dataset_options)
    structures_sd.create_dataset('velocities', (0,0,3), dtype=float_type, maxshape=(None,None,3), **global_dataset_options)
    structures_sd.create_dataset('kinetic_energy', (0,), dtype=float_type, maxshape=(None,), **global_dataset_options)
    structures_sd.create_dataset('potential_energy', (0,), dtype=float_type, maxshape=(None,), **global_dataset_options)
    structures_sd.create_dataset('temperature', (0,), dtype=float_type, maxshape=(None,), **global_dataset_options)

    return file
# ---- end of copied code ----


# fmt: on


def run(target):
    """A new, empty msmh5 file with explicit units and double-precision floats."""
    with h5py_opens(target, globals()):
        _new_msmfile(
            "system.msmh5",
            creator="MolSysMT",
            compression="gzip",
            compression_opts=4,
            int_precision="single",
            float_precision="double",
            length_unit="nm",
            time_unit="ps",
            energy_unit="kJ/mol",
            temperature_unit="K",
            charge_unit="e",
            mass_unit="dalton",
        )
