"""Conformance kits: tests every policy and every storage backend must pass, to subclass.

Like zarr-python's ``zarr.testing.store.StoreTests``: a built-in policy or
format subclasses a kit in its test module, and so can a third party's.
Needs ``pytest`` and ``hypothesis`` (the ``dev`` extra).

:class:`PolicyTests` checks, on random TransferSets: the plan is valid
(:meth:`~orchestrator.plan.Plan.validate`: a permutation of units that tile
every transfer, durations from the cost model, no endpoint doing two things
at once), the same seed gives the same plan, the makespan is never below
the lower bound, and never below an exact optimum where one is given
(:meth:`PolicyTests.optimum`); unknown options are refused by name.

:class:`BackendTests` writes random stages through a backend's writers,
commits them, and checks every byte through the backend's own reader and
its ``open``, the stripe checksums, the manifest, and that the committed
target is recognised as this format (:func:`~orchestrator.engine.backends.format_of`).

Examples
--------
>>> from orchestrator.testing import PolicyTests
>>> class TestEcf(PolicyTests):  # in a test module
...     policy = "ecf"
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..contributions import DatasetSpec
from ..cost import CostModel
from ..engine.backends import MANIFEST_VERSION, backend_names, format_of, get_backend
from ..engine.commit import commit
from ..errors import PolicyError
from ..layout import StripeLayout
from ..plan import Plan
from ..policies import KINDS, get_policy, schedule
from ..transfers import TransferSet

__all__ = ["BackendTests", "PolicyTests", "brute_force_optimum", "transfer_sets"]

_KIT = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def transfer_sets(
    draw: Any, max_clients: int = 6, max_ionodes: int = 4, max_transfers: int = 24
) -> TransferSet:
    """Random TransferSets: any shape, sizes from one byte to a few hundred KiB.

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(transfer_sets())
    ... def test_any(ts):
    ...     assert len(ts) >= 1
    """
    nc = draw(st.integers(1, max_clients))
    ns = draw(st.integers(1, max_ionodes))
    n = draw(st.integers(1, max_transfers))
    client = draw(st.lists(st.integers(0, nc - 1), min_size=n, max_size=n))
    ionode = draw(st.lists(st.integers(0, ns - 1), min_size=n, max_size=n))
    size = draw(
        st.lists(st.one_of(st.integers(1, 4096), st.integers(1, 300_000)), min_size=n, max_size=n)
    )
    return TransferSet(client, ionode, size)


class PolicyTests:
    """Tests every registered policy must pass. Subclass and set ``policy`` (and ``options``).

    Durations equal bytes under the kit's cost model (one byte per second,
    no latency), so makespans are exact integers and comparable with an
    optimum computed by hand.

    Examples
    --------
    >>> class TestUar(PolicyTests):  # doctest: +SKIP
    ...     policy = "uar"
    ...     options = {"block_size": 4096}
    """

    policy: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}
    cost: ClassVar[CostModel] = CostModel(network_bandwidth=1.0, disk_bandwidth=1.0)

    def plan(self, ts: TransferSet, seed: int = 0) -> Plan:
        """This policy's plan of ``ts`` under the kit's cost model."""
        return schedule(ts, self.policy, cost=self.cost, seed=seed, **self.options)

    def optimum(self, ts: TransferSet) -> float | None:
        """The best makespan this policy may reach on ``ts``, if known (None: not checked).

        The default is the lower bound; a subclass may return an exact
        optimum for small sets (e.g. by brute force over orders).
        """
        return None

    def test_is_registered_with_its_capabilities(self) -> None:
        p = get_policy(self.policy)
        assert p.kind in KINDS
        assert (p.run is None) != (p.build is None)
        for name in self.options:
            assert name in p.parameters, f"{self.policy} does not declare option {name!r}"

    @_KIT
    @given(transfer_sets())
    def test_plan_is_valid(self, ts: TransferSet) -> None:
        plan = self.plan(ts)
        plan.validate()
        assert plan.policy == self.policy
        assert plan.kind == get_policy(self.policy).kind

    @_KIT
    @given(transfer_sets(), st.integers(0, 2**63 - 1))
    def test_same_seed_same_plan(self, ts: TransferSet, seed: int) -> None:
        if not get_policy(self.policy).deterministic:
            return  # declared: the same seed may give another plan
        a, b = self.plan(ts, seed), self.plan(ts, seed)
        assert a.order.tolist() == b.order.tolist()
        assert a.makespan == b.makespan

    @_KIT
    @given(transfer_sets())
    def test_never_below_the_lower_bound(self, ts: TransferSet) -> None:
        plan = self.plan(ts)
        assert plan.makespan >= plan.lower_bound * (1 - 1e-9)
        best = self.optimum(ts)
        if best is not None:
            assert plan.makespan >= best * (1 - 1e-9)

    def test_unknown_option_is_refused_by_name(self) -> None:
        ts = TransferSet([0], [0], [10])
        with pytest.raises(PolicyError, match="no_such_option"):
            schedule(ts, self.policy, cost=self.cost, no_such_option=1, **self.options)

    def test_a_bad_seed_is_refused(self) -> None:
        with pytest.raises(PolicyError, match="seed"):
            schedule(
                TransferSet([0], [0], [10]), self.policy, cost=self.cost, seed=-1, **self.options
            )


def brute_force_optimum(ts: TransferSet, cost: CostModel) -> float:
    """The best non-preemptive makespan of whole transfers over every order (tiny sets only).

    Every order's list schedule: an optimal schedule can be shifted left
    until each unit starts when its client and I/O node are both free, and
    that is the list schedule of its units in start-time order.

    Examples
    --------
    >>> brute_force_optimum(TransferSet([0, 0, 1], [0, 1, 0], [3, 1, 2]), CostModel(1.0, 1.0))
    5.0
    """
    d = cost.duration(ts.nbytes)
    best = float("inf")
    for order in itertools.permutations(range(len(ts))):
        free_c: dict[int, float] = {}
        free_s: dict[int, float] = {}
        end = 0.0
        for u in order:
            c, s = int(ts.client[u]), int(ts.ionode[u])
            t = max(free_c.get(c, 0.0), free_s.get(s, 0.0)) + float(d[u])
            free_c[c] = free_s[s] = t
            end = max(end, t)
        best = min(best, end)
    return best


class BackendTests:
    """Tests every storage backend must pass. Subclass and set ``format``.

    Each test writes a random stage through the backend's writers (one per
    I/O node, pieces in random order, as the engine sends them), flushes,
    finishes and commits it into pytest's ``tmp_path``, then reads it back.

    Examples
    --------
    >>> class TestZarr(BackendTests):  # doctest: +SKIP
    ...     format = "zarr"
    """

    format: ClassVar[str]
    #: dtypes the backend must store exactly
    dtypes: ClassVar[tuple[str, ...]] = ("float64", "int32", "uint8")

    def write(
        self,
        target: Path,
        specs: list[Any],
        values: list[np.ndarray],
        n_ionodes: int,
        stripe_bytes: int,
        seed: int,
    ) -> dict[str, Any]:
        """Write ``values`` of ``specs`` into ``target`` through the backend; the manifest."""
        backend = get_backend(self.format)
        rng = np.random.default_rng(seed)
        tmp = target.with_name(target.name + ".tmp")
        layouts = [StripeLayout(n_ionodes, backend.stripe_size(s, stripe_bytes)) for s in specs]
        info = backend.create(tmp, specs, layouts)
        sums: dict[str, str] = {}
        for k in range(n_ionodes):
            writer = backend.writer(info, k, False)
            pieces = []
            for spec, lay, val in zip(specs, layouts, values, strict=True):
                raw = memoryview(np.ascontiguousarray(val).reshape(-1).view(np.uint8).data)
                for off in range(0, spec.nbytes, lay.stripe_bytes):
                    if lay.ionode_of_byte(off) != k:
                        continue
                    end = min(off + lay.stripe_bytes, spec.nbytes)
                    cuts = sorted({off, end, *rng.integers(off, end, 3).tolist()})
                    # pieces of whole rows: no writer is asked to split a row
                    cuts = sorted(
                        {off + (c - off) // spec.row_bytes * spec.row_bytes for c in cuts} | {end}
                    )
                    pieces += [(spec.name, a, raw[a:b]) for a, b in itertools.pairwise(cuts)]
            for i in rng.permutation(len(pieces)):
                writer.put(*pieces[i])
            writer.end_batch()
            writer.flush()
            sums |= {f"{name}:{off}": v for (name, off), v in writer.checksums().items()}
            writer.release()
        manifest = {
            "version": MANIFEST_VERSION,
            "format": self.format,
            "datasets": {
                spec.name: {
                    "shape": list(spec.shape),
                    "dtype": spec.dtype.str,
                    "stripe_bytes": lay.stripe_bytes,
                    "n_ionodes": n_ionodes,
                    "checksums": {
                        k.rsplit(":", 1)[1]: v
                        for k, v in sums.items()
                        if k.rsplit(":", 1)[0] == spec.name
                    },
                }
                for spec, lay in zip(specs, layouts, strict=True)
            },
        }
        backend.finish(tmp, manifest)
        commit(tmp, target, overwrite=False)
        return manifest

    def suffix(self) -> str:
        """The target's file name ending for this format."""
        return get_backend(self.format).suffix

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def test_every_byte_reads_back(self, tmp_path_factory: Any, data: Any) -> None:
        n_ionodes = data.draw(st.integers(1, 4))
        specs, values = [], []
        for i in range(data.draw(st.integers(1, 2))):
            dtype = data.draw(st.sampled_from(self.dtypes))
            rows = data.draw(st.integers(1, 3000))
            width = data.draw(st.integers(1, 5))
            specs.append(DatasetSpec(f"d{i}", (rows, width), dtype))
            values.append(np.arange(rows * width).reshape(rows, width).astype(dtype))
        stripe = data.draw(st.sampled_from([4096, 16384, 1 << 20]))
        target = tmp_path_factory.mktemp(self.format) / f"ckpt{self.suffix()}"
        manifest = self.write(
            target, specs, values, n_ionodes, stripe, data.draw(st.integers(0, 99))
        )
        # engine.stage loads distributed, which the policy kit does not need
        from ..engine.verify import open_datasets, verify

        backend = get_backend(self.format)
        assert format_of(target) == self.format
        assert backend.read_manifest(target)["datasets"] == manifest["datasets"]
        assert verify(target) == []
        for spec, val in zip(specs, values, strict=True):
            raw = np.ascontiguousarray(val).reshape(-1).view(np.uint8).tobytes()
            assert backend.read_bytes(target, spec.name, 0, spec.nbytes) == raw
        with open_datasets(target) as opened:
            for spec, val in zip(specs, values, strict=True):
                np.testing.assert_array_equal(np.asarray(opened[spec.name][...]), val)

    def test_is_registered_and_recognises_only_its_own(self, tmp_path: Path) -> None:
        assert self.format in backend_names()
        backend = get_backend(self.format)
        assert backend.name == self.format
        other = tmp_path / "not-a-checkpoint.txt"
        other.write_text("plain text")
        assert not backend.guess_can_open(other)
