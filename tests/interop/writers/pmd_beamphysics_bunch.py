# ruff: noqa
# Source: ChristopherMayes/openPMD-beamphysics -- pmd_beamphysics/writers.py @ 2a92df7a59ccb5799d97650f5b37b43f176879da
#         ChristopherMayes/openPMD-beamphysics -- pmd_beamphysics/readers.py @ 2a92df7a59ccb5799d97650f5b37b43f176879da (lines 76-92)
# Licence: Apache-2.0
# Copied: pmd_init, write_pmd_bunch, write_component_data; the component_from_alias table
# Around it: fstr is np.bytes_ (the package's fstr returns np.string_, NumPy 2 removed
# that alias); pg_units returns the package's units for the nine particle keys.
"""openPMD-beamphysics' particle-bunch writer: fixed-length byte-string root attributes, a
nested group from a path, one dataset per component from ``h5[name] = data`` with unit
attributes (float, 7-tuple, bytes), constant components as attribute-only groups.
"""

from collections import namedtuple

import numpy as np

KIND = "h5py"


def fstr(s):
    """pmd_beamphysics.tools.fstr ("a fixed string for h5 files"), with NumPy 2's name."""
    return np.bytes_(s)


pmd_unit = namedtuple("pmd_unit", "unitSymbol unitSI unitDimension")
_E_CHARGE, _C_LIGHT = 1.602176634e-19, 299792458.0
_UNITS = {
    "m": pmd_unit("m", 1, (1, 0, 0, 0, 0, 0, 0)),
    "eV/c": pmd_unit("eV/c", _E_CHARGE / _C_LIGHT, (1, 1, -1, 0, 0, 0, 0)),
    "s": pmd_unit("s", 1, (0, 0, 1, 0, 0, 0, 0)),
    "1": pmd_unit("", 1, (0, 0, 0, 0, 0, 0, 0)),
    "C": pmd_unit("C", 1, (0, 0, 1, 1, 0, 0, 0)),
}
_KEY_UNITS = {"x": "m", "y": "m", "z": "m", "px": "eV/c", "py": "eV/c", "pz": "eV/c"}
_KEY_UNITS.update({"t": "s", "status": "1", "weight": "C"})


def pg_units(key):
    """pmd_beamphysics.units.pg_units for the particle keys write_pmd_bunch asks for."""
    return _UNITS[_KEY_UNITS[key]]


# fmt: off
# ---- copied unchanged from ChristopherMayes/openPMD-beamphysics: pmd_beamphysics/readers.py @ 2a92df7a59cc ----
component_from_alias = {
   # 'x':'position/x',
   # 'y':'position/y',
   # 'z':'position/z',
   # 'px':'momentum/x',
   # 'py':'momentum/y',
   # 'pz':'momentum/z',
    't':'time',
    'weight':'weight',
    'status':'particleStatus'
}
# Aliases for particles and fields
for g, prefix in zip(['position', 'momentum', 'electricField', 'magneticField'], 
                     ['', 'p', 'E', 'B']):
    for c in ['x', 'y', 'z', 'r', 'theta']:
        alias = prefix+c
        component_from_alias[alias] = g+'/'+c      
# ---- end of copied code ----

# ---- copied unchanged from ChristopherMayes/openPMD-beamphysics: pmd_beamphysics/writers.py @ 2a92df7a59cc ----
def pmd_init(h5, basePath='/data/%T/', particlesPath='./' ):
    """
    Root attribute initialization.
    
    h5 should be the root of the file.
    """
    d = {
        'basePath':basePath,
        'dataType':'openPMD',
        'openPMD':'2.0.0',
        'openPMDextension':'BeamPhysics;SpeciesType',
        'particlesPath':particlesPath    
    }
    for k,v in d.items():
        h5.attrs[k] = fstr(v)

def write_pmd_bunch(h5, data, name=None):
    """
    Data is a dict with:
        np.array: 'x', 'px', 'y', 'py', 'z', 'pz', 't', 'status', 'weight'
        str: 'species'
        int: n_particle

    Optional data:
        np.array: 'id'
        
    See inverse routine:
        .particles.load_bunch_data
    
    """
    if name:
        g = h5.create_group(name)
    else:
        g = h5
    
    # Attributes
    g.attrs['speciesType'] = fstr( data['species'] )
    g.attrs['numParticles'] = data['n_particle']
    g.attrs['totalCharge'] = data['charge']
    g.attrs['chargeUnitSI'] = 1.0
    
    # Required Datasets
    for key in ['x', 'px', 'y', 'py', 'z', 'pz', 't', 'status', 'weight']:
        # Get full name, write data
        g2_name = component_from_alias[key]
        
        # Units
        u = pg_units(key)        
        
        # Write
        write_component_data(g, g2_name, data[key], unit=u)
    
        
    # Optional id. This does not have any units.
    if 'id' in data:
        g['id'] = data['id']

def write_component_data(h5, name, data, unit=None): 
    """
    Writes data to a dataset h5[name]
    
    If data is a constant array, a group is created with the constant value and shape
    
    If unit is given, this will be used 
    
    """
    # Check for constant component
    dat0 = data[0]
    if np.all(data == dat0):
        g = h5.create_group(name)
        g.attrs['value'] = dat0
        g.attrs['shape'] = data.shape
    else:
        h5[name] = data
        g = h5[name]
        if len(data.shape) > 1:
            g.attrs['gridDataOrder'] = fstr('C') # C order for numpy/h5py
    
    if unit:
        g.attrs['unitSI'] = unit.unitSI
        g.attrs['unitDimension'] = unit.unitDimension
        g.attrs['unitSymbol'] = fstr(unit.unitSymbol)
    
    return g         
# ---- end of copied code ----


# fmt: on


def run(target):
    """A 10-particle electron bunch under /data/3/particles, all at t = 0, all alive."""
    rng = np.random.default_rng(29)
    n = 10
    data = {
        "x": rng.normal(size=n) * 1e-3,
        "y": rng.normal(size=n) * 1e-3,
        "z": rng.normal(size=n) * 1e-6,
        "px": rng.normal(size=n) * 1e3,
        "py": rng.normal(size=n) * 1e3,
        "pz": 1e8 + rng.normal(size=n) * 1e5,
        "t": np.zeros(n),
        "status": np.ones(n, dtype=np.int64),
        "weight": rng.random(n) * 1e-13,
        "species": "electron",
        "n_particle": n,
        "charge": 5e-13,
        "id": np.arange(1, n + 1),
    }
    pmd_init(target, basePath="/data/%T/", particlesPath="particles/")
    write_pmd_bunch(target, data, name="data/3/particles/")
