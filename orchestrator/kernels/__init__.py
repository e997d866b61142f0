"""Numba kernels: plain arrays in, plain arrays out, one module per family.

Every kernel is ``@njit(cache=True)`` and takes units as columns
``client, ionode, d`` (int64, int64, float64) plus counts; it returns the
order (int64 permutation of unit ids) and, for round-based policies, the
number of rounds and messages. Exact semantics: ``docs/semantics.rst``.
"""
