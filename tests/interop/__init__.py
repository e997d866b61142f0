"""Interop tests: public checkpoint writers run against h5py/zarr and against ``capture``."""
