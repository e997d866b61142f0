"""Compare every scheduling policy on the bidding paper's workload.

Run: .venv/bin/python examples/compare_policies.py
"""

import orchestrator as orc
from orchestrator.workload import bidding_workload

# 256 clients, 32 I/O nodes of which 30 % are busy, 10 % of transfers are 32 MiB.
transfers = bidding_workload(n_ionodes=32, busy_ratio=0.3, large_ratio=0.1, seed=0)
print(transfers)

for name in orc.policies():
    sim = orc.simulate(transfers, name, cost="cluster2004", seed=0)
    print(
        f"{name:11s} {sim.throughput / 1e6:8.2f} MB/s   makespan/bound {sim.ratio:6.3f}   "
        f"scheduling {sim.scheduling_seconds:8.3f} s   rounds {sim.rounds}"
    )
