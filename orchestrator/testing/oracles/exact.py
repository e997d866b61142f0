"""Brute force: the best non-preemptive makespan over every order (tiny sets only)."""

import itertools

from .common import list_schedule, normalise


def best_makespan(client, ionode, d) -> float:
    """Minimum list-schedule makespan over all permutations.

    Every non-preemptive schedule is dominated by the list schedule of its
    start order, so this is the optimum.
    """
    client, ionode, d = normalise(client, ionode, d)
    best = float("inf")
    for order in itertools.permutations(range(len(d))):
        best = min(best, max(list_schedule(list(order), client, ionode, d)[1]))
    return best
