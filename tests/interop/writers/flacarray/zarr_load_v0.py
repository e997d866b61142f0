# ruff: noqa
# Source: hpc4cmb/flacarray -- src/flacarray/zarr_load_v0.py @ 85d8c67bc1d429060f45791c38de48899204e971
# Licence: BSD-2-Clause (Copyright (c) 2024, Theodore Kisner)
# Copied: zarr_names (unchanged); the loader functions of that module are not needed here.
"""The names write_compressed imports with ``from .zarr_load_v0 import zarr_names``."""

# fmt: off
# ---- copied unchanged from hpc4cmb/flacarray: src/flacarray/zarr_load_v0.py @ 85d8c67bc1d4 ----
"""The dataset and attribute names."""
zarr_names = {
    "compressed": "compressed",
    "stream_starts": "stream_starts",
    "stream_bytes": "stream_bytes",
    "stream_size": "stream_size",
    "stream_offsets": "stream_offsets",
    "stream_gains": "stream_gains",
}
# ---- end of copied code ----
# fmt: on
