"""Slow, plain-Python oracles for the policies of docs/semantics.rst.

Written independently of ``orchestrator.kernels``; the tests compare the two.
Units are given as columns ``client[u]``, ``ionode[u]`` (ints) and ``d[u]``
(float durations > 0), as lists or numpy arrays. Everything returned is a plain
Python list / int / float.
"""

from .bidding import hdf, ms_ecf, ms_ml, rand, uar
from .centralized import ecf, fcfs, max_matching_weight, mwm_check, pair_weights
from .common import list_schedule, lower_bound, makespan, split_pieces
from .decentralized import (
    first_ios,
    first_ios_sequences,
    hash_ios,
    hash_ios_sequences,
    random_ios,
    random_ios_sequences,
    simulate,
)
from .exact import best_makespan
from .localsearch import critical_path, improving_moves
from .rng import SplitMix64
from .splitopt import check_decomposition, check_pieces, preemptive_bound

__all__ = [
    "SplitMix64",
    "best_makespan",
    "check_decomposition",
    "check_pieces",
    "critical_path",
    "ecf",
    "fcfs",
    "first_ios",
    "first_ios_sequences",
    "hash_ios",
    "hash_ios_sequences",
    "hdf",
    "improving_moves",
    "list_schedule",
    "lower_bound",
    "makespan",
    "max_matching_weight",
    "ms_ecf",
    "ms_ml",
    "mwm_check",
    "pair_weights",
    "preemptive_bound",
    "rand",
    "random_ios",
    "random_ios_sequences",
    "simulate",
    "split_pieces",
    "uar",
]
