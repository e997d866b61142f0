# ruff: noqa
# Source: zwicker-group/py-pde -- pde/storage/file.py @ 8f7ce2c931b398232861f57d0e0f619d4dd542a0
#         zwicker-group/py-pde -- pde/tools/misc.py @ 21fbcdfea31836d45a697350627aadbccbdbba5c
# Licence: MIT (Copyright (c) 2020 David Zwicker)
# Copied: FileStorage._create_hdf_dataset, FileStorage._append_data; hdf_write_attributes
# Around it: a stand-in class carries the FileStorage state that _open('writing') sets
# (self._file is the target); run() follows start_writing/append/end_writing.
"""py-pde's FileStorage writing a time series: ``times`` and ``data`` created empty with
``maxshape=(None, ...)``, ``chunks=(1, ...)`` and gzip, grown by ``resize`` and written one
row at a time, then JSON-encoded root attributes.
"""

import json
from typing import Any, Dict, Optional, Tuple

import numpy as np

KIND = "h5py"


# fmt: off
class FileStorage:
    """Stand-in for pde.storage.file.FileStorage (run() sets its writing state)."""

    # ---- copied unchanged from zwicker-group/py-pde: pde/storage/file.py @ 8f7ce2c931b3 ----
    def _create_hdf_dataset(
        self, name: str, shape: Tuple[int, ...] = tuple(), dtype=np.double
    ):
        """create a hdf5 dataset with the given name and data_shape

        Args:
            name (str): Identifier of the hdf5 dataset
            shape (tuple): Data shape of the dataset
            dtype: The data type of the dataset
        """
        if self.compression:
            kwargs = {"chunks": (1,) + shape, "compression": "gzip"}
        else:
            kwargs = {}

        if self._max_length:
            shape = (self._max_length,) + shape
            return self._file.create_dataset(name, shape=shape, dtype=dtype, **kwargs)
        else:
            return self._file.create_dataset(
                name,
                shape=(0,) + shape,
                dtype=dtype,
                maxshape=(None,) + shape,
                **kwargs,
            )

    def _append_data(self, data: np.ndarray, time: float) -> None:
        """append a new data set

        Args:
            data (:class:`numpy.ndarray`): The actual data
            time (float): The time point associated with the data
        """
        if self.keep_opened:
            if not self._is_writing or self._data_length is None:
                raise RuntimeError(
                    "Writing not initialized. Call "
                    f"`{self.__class__.__name__}.start_writing`"
                )

        else:
            # need to reopen the file
            self._open("appending")

        # write the new data
        if self._data_length >= len(self._data):
            self._data.resize((self._data_length + 1,) + self.data_shape)
        self._data[self._data_length] = data

        # write the new time
        if time is None:
            if len(self._times) == 0:
                time = 0
            else:
                time = self._times[self._data_length - 1] + 1
        if self._data_length >= len(self._times):
            self._times.resize((self._data_length + 1,))
        self._times[self._data_length] = time

        self._data_length += 1
        self.info["data_length"] = self._data_length

        if not self.keep_opened:
            self.close()
    # ---- end of copied code ----

# ---- copied unchanged from zwicker-group/py-pde: pde/tools/misc.py @ 21fbcdfea318 ----
def hdf_write_attributes(hdf_path,
                         attributes: Dict[str, Any] = None,
                         raise_serialization_error: bool = False) -> None:
    """ write (JSON-serialized) attributes to a hdf file
    
    Args:
        hdf_path:
            Path to a group or dataset in an open HDF file
        attributes (dict):
            Dictionary with values written as attributes
        raise_serialization_error (bool):
            Flag indicating whether serialization errors are raised or silently
            ignored
    """ 
    if attributes is None:
        return
        
    for key, value in attributes.items():
        try:
            value_serialized = json.dumps(value)
        except TypeError:
            if raise_serialization_error:
                raise
        else:
            hdf_path.attrs[key] = value_serialized
# ---- end of copied code ----


# fmt: on


def run(target):
    """Five snapshots of a 4x6 scalar field, then the storage info as attributes."""
    rng = np.random.default_rng(3)
    storage = FileStorage()
    storage.compression = True
    storage.keep_opened = True
    storage._max_length = None
    storage._is_writing = True
    storage.data_shape = (4, 6)
    storage.info = {
        "field_attributes": {"class": "ScalarField", "label": "c"},
        "solver": "ExplicitSolver",
        "dt": 0.01,
    }
    storage._file = target  # what _open("writing") sets: the open h5py.File
    storage._times = storage._create_hdf_dataset("times")
    storage._data = storage._create_hdf_dataset("data", storage.data_shape)
    storage._data_length = 0
    for i in range(5):
        storage._append_data(rng.random(storage.data_shape), 0.1 * i)
    hdf_write_attributes(storage._file, storage.info)  # what end_writing does
