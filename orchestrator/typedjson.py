"""NumPy values through JSON with their dtype kept: attributes and small datasets in the manifest.

A JSON number has no width: an ``np.float32`` attribute came back float64 and
an ``int16`` array int64. A NumPy value is written as ``{"__numpy__": dtype,
"shape": [...], "value": [...]}`` and read back as the same dtype; plain
Python values (what h5py and zarr store as their own default types) pass
through unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["decode", "encode"]

_KEY = "__numpy__"
_BYTES = "__bytes__"


def encode(value: Any) -> Any:
    """``value`` as JSON-able data that :func:`decode` turns back into the same value and dtype.

    Examples
    --------
    >>> encode(np.float32(0.5))
    {'__numpy__': '<f4', 'shape': [], 'value': [0.5]}
    >>> encode([1, 2])
    [1, 2]
    """
    if isinstance(value, np.str_):
        return str(value)
    if isinstance(value, bytes) and not isinstance(value, np.generic):  # h5py: ASCII text
        return {_BYTES: value.decode("latin-1")}
    if isinstance(value, list | tuple) and value and all(type(v) is bytes for v in value):
        return {_BYTES: [v.decode("latin-1") for v in value]}
    if not isinstance(value, np.generic | np.ndarray):
        return value
    arr = np.asarray(value)
    flat = arr.reshape(-1)
    if arr.dtype.kind == "c":
        items: list[Any] = [[float(v.real), float(v.imag)] for v in flat.tolist()]
    elif arr.dtype.kind == "S":
        items = [v.decode("latin-1") for v in flat.tolist()]
    else:
        items = flat.tolist()
    return {_KEY: arr.dtype.str, "shape": list(arr.shape), "value": items}


def decode(value: Any) -> Any:
    """The value :func:`encode` was given (NumPy scalars and arrays with their dtype).

    Examples
    --------
    >>> decode(encode(np.array([1, 2], dtype=np.int16))).dtype
    dtype('int16')
    """
    if isinstance(value, dict) and _BYTES in value:
        text = value[_BYTES]
        if isinstance(text, list):
            return [t.encode("latin-1") for t in text]
        return text.encode("latin-1")
    if not (isinstance(value, dict) and _KEY in value):
        return value
    dt = np.dtype(value[_KEY])
    items = value["value"]
    if dt.kind == "c":
        items = [complex(re, im) for re, im in items]
    elif dt.kind == "S":
        items = [v.encode("latin-1") for v in items]
    arr = np.array(items, dtype=dt).reshape(value["shape"])
    return arr[()] if arr.ndim == 0 else arr
