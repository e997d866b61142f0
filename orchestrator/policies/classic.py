"""The papers' policies on precomputed units: thin adapters over the Numba kernels.

Centralized (ECF, MWM, FCFS), bidding (MS/ML, MS/ECF, RAND, and UAR and HDF
on fixed-size blocks) and decentralized (first-, random- and hash-IOS on
blocks, I/O nodes serving FIFO). Each adapter turns a kernel's result into
``(order, rounds, messages)``; the kernels are checked against oracles in
the tests.
"""

from __future__ import annotations

from ..kernels import bidding, decentralized, greedy, matching
from ..kernels.rng import make_state
from .registry import Policy, PolicyOption, register_policy

__all__: list[str] = []

KiB = 1024


def _block(default: int) -> PolicyOption:
    return PolicyOption(
        "block_size", "int", default, "bytes; transfers are cut into pieces of this size"
    )


_WU = "Wu, Lin & Liu, Efficient Distributed Algorithms for Parallel I/O Scheduling"
_ISAILA = "Isaila et al., decentralized parallel I/O scheduling in Clusterfile"


def _ecf(c, s, d, nc, ns, seed):
    return greedy.ecf(c, s, d, nc, ns), 0, 0


def _fcfs(c, s, d, nc, ns, seed):
    order, phases = greedy.fcfs(c, s, nc, ns)
    return order, int(phases), 0


def _mwm(c, s, d, nc, ns, seed):
    order, steps, _ = matching.mwm(c, s, d, nc, ns)
    return order, int(steps), 0


def _ms_ml(c, s, d, nc, ns, seed):
    o, r, m = bidding.ms_ml(c, s, d, nc, ns)
    return o, int(r), int(m)


def _ms_ecf(c, s, d, nc, ns, seed):
    o, r, m = bidding.ms_ecf(c, s, d, nc, ns)
    return o, int(r), int(m)


def _rand(c, s, d, nc, ns, seed):
    o, r, m = bidding.rand(c, s, nc, ns, make_state(seed))
    return o, int(r), int(m)


def _hdf(c, s, d, nc, ns, seed):
    o, r, m = bidding.hdf(c, s, nc, ns, make_state(seed))
    return o, int(r), int(m)


def _first_ios(c, s, d, nc, ns, seed):
    seq, ptr = decentralized.first_ios_sequences(c, nc)
    return decentralized.serve_fifo(seq, ptr, s, d, nc, ns), 0, 0


def _random_ios(c, s, d, nc, ns, seed):
    seq, ptr = decentralized.random_ios_sequences(c, s, nc, ns, make_state(seed))
    return decentralized.serve_fifo(seq, ptr, s, d, nc, ns), 0, 0


def _hash_ios(c, s, d, nc, ns, seed):
    seq, ptr = decentralized.hash_ios_sequences(c, s, nc, ns)
    return decentralized.serve_fifo(seq, ptr, s, d, nc, ns), 0, 0


register_policy(
    Policy(
        name="ecf",
        summary="Earliest Completion First: always run next the transfer that can finish first.",
        origin=f"{_WU}, sec. 3.1.2",
        kind="centralized",
        run=_ecf,
    )
)

register_policy(
    Policy(
        name="mwm",
        summary="Repeated maximum-weight matching of (client, I/O node) pairs, heaviest first.",
        origin=f"{_WU}, sec. 3.1.1",
        kind="centralized",
        run=_mwm,
    )
)

register_policy(
    Policy(
        name="fcfs",
        summary="First-come first-served phases: greedy matchings in arrival (index) order.",
        origin=f"Jain et al. 1997, as summarised in {_ISAILA}, sec. 3",
        kind="centralized",
        run=_fcfs,
    )
)

register_policy(
    Policy(
        name="ms-ml",
        summary="Bidding: clients offer their largest transfer;"
        " I/O nodes take the most loaded client.",
        origin=f"{_WU}, sec. 3.2.1",
        kind="bidding",
        run=_ms_ml,
    )
)

register_policy(
    Policy(
        name="ms-ecf",
        summary="Bidding: clients offer their smallest transfer;"
        " I/O nodes take the earliest finish.",
        origin=f"{_WU}, sec. 3.2.2",
        kind="bidding",
        run=_ms_ecf,
    )
)

register_policy(
    Policy(
        name="rand",
        summary="Bidding at random on whole transfers.",
        origin=f"{_WU}, sec. 1 (RAND, Fig. 1)",
        kind="bidding",
        randomised=True,
        run=_rand,
    )
)

register_policy(
    Policy(
        name="uar",
        summary="Bidding uniformly at random on fixed-size blocks.",
        origin=f"Durand et al. 2003; {_WU}, sec. 1 (UAR); {_ISAILA}, sec. 3",
        kind="bidding",
        randomised=True,
        options=(_block(32 * KiB),),
        default_block_size=32 * KiB,
        run=_rand,
    )
)

register_policy(
    Policy(
        name="hdf",
        summary="Bidding on fixed-size blocks; I/O nodes grant the client of highest degree.",
        origin=f"Durand et al. 2003; {_WU}, sec. 4",
        kind="bidding",
        randomised=True,
        options=(_block(32 * KiB),),
        default_block_size=32 * KiB,
        run=_hdf,
    )
)

register_policy(
    Policy(
        name="first-ios",
        summary="Decentralized: clients send blocks in file-offset order; I/O nodes serve FIFO.",
        origin=f"{_ISAILA}, sec. 6",
        kind="decentralized",
        options=(_block(64 * KiB),),
        default_block_size=64 * KiB,
        run=_first_ios,
    )
)

register_policy(
    Policy(
        name="random-ios",
        summary="Decentralized: each client sends each block to a random I/O node it still owes.",
        origin=f"{_ISAILA}, sec. 6",
        kind="decentralized",
        randomised=True,
        options=(_block(64 * KiB),),
        default_block_size=64 * KiB,
        run=_random_ios,
    )
)

register_policy(
    Policy(
        name="hash-ios",
        summary="Decentralized: client i cycles over I/O nodes from i mod n, skipping "
        "exhausted ones.",
        origin=f"{_ISAILA}, sec. 6",
        kind="decentralized",
        options=(_block(64 * KiB),),
        default_block_size=64 * KiB,
        run=_hash_ios,
    )
)
