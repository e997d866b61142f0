# ruff: noqa
# Source: zwicker-group/py-modelrunner -- modelrunner/storage/backend/_zarr3.py @ 8459d5ff1bbb202c51d8c76cfde46b84cf629f2b
# Licence: MIT (Copyright (c) 2021 David Zwicker)
# Copied: ZarrStorage._get_parent, __getitem__, _create_group, _write_attr, _write_array,
#         _create_dynamic_array, _extend_dynamic_array, _write_object (unchanged)
# Around it: a stand-in class without StorageBase; self._root is the target group.
"""py-modelrunner's zarr-python 3 storage backend: groups created on demand, JSON string
attributes, arrays from data (float, int, structured/record), dynamic arrays started with
``Group.zeros(shape=(0, ...))`` and grown with ``Array.append``, and an object stored as a
one-element string array.
"""

import base64
import json
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import zarr
from numpy.typing import ArrayLike, DTypeLike

KIND = "zarr"


# fmt: off
class ZarrStorage:
    """Stand-in for modelrunner.storage.backend._zarr3.ZarrStorage (run() sets _root)."""

    # ---- copied unchanged from zwicker-group/py-modelrunner: modelrunner/storage/backend/_zarr3.py @ 8459d5ff1bbb ----
    def _get_parent(self, loc: Sequence[str]) -> tuple[zarr.Group, str]:
        """Get the parent group for a particular location.

        Args:
            loc (list of str):
                The location in the storage where the group will be created

        Returns:
            (group, str):
                A tuple consisting of the parent group and the name of the current item
        """
        try:
            path, name = loc[:-1], loc[-1]
        except IndexError as err:
            raise KeyError(f"Location `/{'/'.join(loc)}` has no parent") from err

        parent = self._root
        for part in path:
            try:
                parent = parent[part]
            except KeyError:
                parent = parent.create_group(part, overwrite=False)

        return parent, name

    def __getitem__(self, loc: Sequence[str]) -> Any:
        if len(loc) == 0:
            return self._root
        else:
            parent, name = self._get_parent(loc)
            return parent[name]

    def _create_group(self, loc: Sequence[str]) -> None:
        parent, name = self._get_parent(loc)
        parent.create_group(name)

    def _write_attr(self, loc: Sequence[str], name: str, value: str) -> None:
        self[loc].attrs[name] = value

    def _write_array(self, loc: Sequence[str], arr: np.ndarray) -> None:
        parent, name = self._get_parent(loc)

        if name in parent:
            # update an existing array assuming it has the same shape. The credentials
            # for this operation need to be checked by the caller!
            parent[name][...] = arr

        else:
            # create a new array element
            if arr.dtype == object:
                el = parent.create_array(name, data=arr, overwrite=True)
            else:
                el = parent.create_array(name, data=arr, overwrite=True)

            if isinstance(arr, np.recarray):
                el.attrs["__recarray__"] = True

    def _create_dynamic_array(
        self,
        loc: Sequence[str],
        shape: tuple[int, ...],
        dtype: DTypeLike,
        record_array: bool = False,
    ) -> None:
        parent, name = self._get_parent(loc)
        try:
            element = parent.zeros(
                name=name, shape=(0,) + shape, chunks=(1,) + shape, dtype=dtype
            )
        except zarr.errors.ContainsArrayError as err:
            raise RuntimeError(f"Array `/{'/'.join(loc)}` already exists") from err
        else:
            if record_array:
                element.attrs["__recarray__"] = True

    def _extend_dynamic_array(self, loc: Sequence[str], data: ArrayLike) -> None:
        arr_obj = self[loc]
        arr_obj.append([data])

    def _write_object(self, loc: Sequence[str], obj: Any) -> None:
        # Try JSON serialization first
        try:
            obj_enc = json.dumps(obj)
        except (TypeError, ValueError):
            # Fall back to pickle for non-JSON-serializable objects
            pickled = pickle.dumps(obj)
            obj_enc = "__pickle__:" + base64.b64encode(pickled).decode("ascii")

        data = np.array([obj_enc])
        parent, name = self._get_parent(loc)
        parent.create_array(name, data=data, overwrite=True)
    # ---- end of copied code ----


# fmt: on


def run(target):
    """What storing a model result with a trajectory does, by way of StorageBase."""
    rng = np.random.default_rng(41)
    storage = ZarrStorage()
    storage._root = target
    storage._write_attr([], "format_version", json.dumps(3))
    storage._create_group(["info"])
    storage._write_attr(["info"], "model", json.dumps({"name": "kuramoto", "n": 4}))
    storage._write_object(["info", "parameters"], {"coupling": 0.5, "noise": [0.1, 0.2]})
    storage._write_array(["result", "phases"], rng.random((4, 5)))
    storage._write_array(["result", "labels"], np.arange(6, dtype=np.int32))
    table = np.rec.fromarrays([np.arange(3), np.linspace(0.0, 1.0, 3)], names="step,energy")
    storage._write_array(["result", "table"], table)
    storage._create_dynamic_array(["trajectory", "state"], shape=(3,), dtype=float)
    storage._create_dynamic_array(["trajectory", "time"], shape=(), dtype=float)
    for i in range(4):
        storage._extend_dynamic_array(["trajectory", "state"], rng.random(3))
        storage._extend_dynamic_array(["trajectory", "time"], 0.5 * i)
