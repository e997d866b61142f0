"""Bad input, generated: every public entry point answers with an error of ours naming what
is wrong — never a raw traceback, a hang, or a bad value silently accepted (issue 14).

Each test draws a valid input, breaks one field of it with a value that is wrong for that
field, and calls the entry point. Every call is classified as issue 14 counts them:

- ``clear``: an error of the project's hierarchy whose message names the field or the value;
- ``unclear``: an error of ours that names neither;
- ``traceback``: any other exception;
- ``accepted``: no error at all;
- ``hang``: (commands only) no answer within the time limit.

The tests fail on anything but ``clear``; :func:`test_report` (last in the file) prints the
counts of the run and writes them to ``out/bad-inputs.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import orchestrator as orc
from orchestrator.contributions import Contribution, DatasetSpec
from orchestrator.errors import OrchestratorError

COUNTS: dict[str, Counter[str]] = {}
OUT = Path(__file__).resolve().parent.parent / "out" / "bad-inputs.json"
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def classify(entry: str, call: Callable[[], Any], *names: Any) -> str:
    """Run ``call``; count and return its outcome (see the module docstring)."""
    try:
        call()
    except OrchestratorError as err:
        text = str(err)
        named = any(str(n) in text or repr(n) in text for n in names)
        kind = "clear" if named else "unclear"
        detail = text
    except Exception as err:  # what this suite looks for
        kind, detail = "traceback", f"{type(err).__name__}: {err}"
    else:
        kind, detail = "accepted", ""
    COUNTS.setdefault(entry, Counter())[kind] += 1
    assert kind == "clear", f"{entry}: {kind} ({detail[:300]})"
    return kind


# values wrong for any integer id or count: each paired with what the message must name
NOT_COUNTS = [-1, 1.5, "3", True, float("nan"), 2**63, [1], "", b"1", 1 + 2j]
NOT_SIZES = [-1, 1.5, "8", None, True, float("inf"), 2**63, (), {"a": 1}]


# ---------------------------------------------------------------- the model
@SETTINGS
@given(
    field=st.sampled_from(["client", "ionode", "nbytes"]),
    bad=st.sampled_from([[-1], [0.5], ["a"], [None], [2**63], [float("nan")], [[0]], "x", 7]),
    n=st.integers(1, 5),
)
def test_transfer_set_columns(field, bad, n):
    cols: dict[str, Any] = {"client": [0] * n, "ionode": [0] * n, "nbytes": [8] * n}
    cols[field] = bad
    classify("TransferSet", lambda: orc.TransferSet(**cols), field)


@SETTINGS
@given(field=st.sampled_from(["n_clients", "n_ionodes"]), bad=st.sampled_from([*NOT_COUNTS, 0]))
def test_transfer_set_counts(field, bad):
    kwargs = {field: bad}
    classify(
        "TransferSet",
        lambda: orc.TransferSet(client=[0], ionode=[0], nbytes=[8], **kwargs),
        field,
    )


@SETTINGS
@given(
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(1, 99)), max_size=5),
    at=st.integers(0, 20),
    token=st.sampled_from(["-1", "1.5", "x", "\uff11", "1_000", "", "nan", "1e3", "0x10", "+"]),
)
def test_transfer_csv(tmp_path_factory, rows, at, token):
    lines = ["client,ionode,nbytes"] + [f"{c},{s},{b}" for c, s, b in rows] + ["0,0,1"]
    cells = [line.split(",") for line in lines]
    r = 1 + at % (len(cells) - 1)
    cells[r][at % 3] = token
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_text("\n".join(",".join(c) for c in cells) + "\n")
    classify("TransferSet.from_csv", lambda: orc.TransferSet.from_csv(path), token, f"line {r + 1}")


@SETTINGS
@given(
    what=st.sampled_from(["policy", "cost", "seed"]),
    bad=st.sampled_from(["", "ECF", "ecf ", "no-such", -1, 1.5, None, 2**64, "\x00", [1]]),
)
def test_schedule(what, bad):
    ts = orc.TransferSet(client=[0, 1], ionode=[0, 1], nbytes=[8, 8])
    kwargs: dict[str, Any] = {what: bad}
    if what == "policy" and not isinstance(bad, str):
        return  # a policy name is text; other values are covered as costs and seeds
    if what == "cost" and bad is None:
        return  # None is the default cost model
    if what == "seed" and bad in ("", "ECF", "ecf ", "no-such", "\x00"):
        kwargs["seed"] = bad
    classify("schedule", lambda: orc.schedule(ts, **kwargs), what, bad)


# ---------------------------------------------------------------- datasets and contributions
@SETTINGS
@given(
    field=st.sampled_from(["name", "shape", "dtype"]),
    data=st.data(),
)
def test_dataset_spec(field, data):
    bad = {
        "name": st.sampled_from(
            ["", ".", "..", "__x", "a\x00b", "a\nb", "a//b", "a/../b", 3, None]
        ),
        "shape": st.sampled_from([(-1,), (1.5,), ("a",), (), (None,), 5, (2**63,), "10"]),
        "dtype": st.sampled_from(["float99", "no-type", object, None, "O", 3]),
    }[field]
    value = data.draw(bad)
    args: dict[str, Any] = {"name": "u", "shape": (4,), "dtype": "float64"}
    args[field] = value
    classify(
        "DatasetSpec",
        lambda: DatasetSpec(args["name"], args["shape"], args["dtype"]),
        field,
        value,
    )


@SETTINGS
@given(
    field=st.sampled_from(
        ["dims", "chunks", "compression", "compression_opts", "maxshape", "shuffle", "shards"]
    ),
    data=st.data(),
)
def test_dataset_spec_storage_options(field, data):
    bad = {
        "dims": [("a",), "ab", ("a", "b", "c"), ("a", ""), ("a", 3), ("a", "x/y"), ("a", "a\x00")],
        "chunks": [(0, 3), (4,), "auto", (1.5, 3), (-1, 3), 4],
        "compression": ["snappy", 10, -1, "GZIP", b"gzip"],
        "compression_opts": [4, "high", 1.5],
        "maxshape": [(2, 3), (None,), "big", (None, -1), (1.5, 3)],
        "shuffle": ["yes", 1, None],
        "shards": [(0, 3), "x", (4,)],
    }[field]
    value = data.draw(st.sampled_from(bad))
    kwargs = {field: value}
    if field == "compression_opts" and value == 4:
        kwargs["compression"] = None  # a level without a compression
    classify("DatasetSpec", lambda: DatasetSpec("u", (4, 3), "f8", **kwargs), field)


@SETTINGS
@given(
    field=st.sampled_from(["client", "rows", "values"]),
    data=st.data(),
)
def test_contribution(field, data):
    bad = {
        "client": st.sampled_from([-1, 1.5, "0", None, 2**63, float("nan")]),
        "rows": st.sampled_from([[-1, 0], [0.5, 1], ["a", "b"], [[0], [1]], [2**64 - 1, 0], None]),
        "values": st.sampled_from([np.zeros(3), np.zeros((1,)), "ab", None, np.zeros(0)]),
    }[field]
    value = data.draw(bad)
    args: dict[str, Any] = {"client": 0, "rows": [0, 1], "values": np.zeros(2)}
    args[field] = value
    classify(
        "Contribution",
        lambda: Contribution(args["client"], args["rows"], args["values"]),
        field,
        "rows",
        "values",
    )


@SETTINGS
@given(
    what=st.sampled_from(["beyond", "width", "dtype", "negative_client"]),
    n=st.integers(2, 50),
)
def test_write_stage_contributions_that_do_not_fit(cluster, tmp_path_factory, what, n):
    spec = DatasetSpec("u", (n, 2), "float64")
    rows, values, client = np.arange(n), np.zeros((n, 2)), 0
    if what == "beyond":
        rows = np.arange(1, n + 1)
    elif what == "width":
        values = np.zeros((n, 3))
    elif what == "dtype":
        values = np.array([["a", "b"]] * n)
    con = (
        Contribution(client, rows, values)
        if what != "negative_client"
        else Contribution.__new__(Contribution)
    )
    if what == "negative_client":
        classify("Contribution", lambda: Contribution(-1, rows, values), "client")
        return
    target = tmp_path_factory.mktemp("stage") / "ck.h5"
    classify(
        "write_stage",
        lambda: orc.write_stage(target, {"u": (spec, [con])}, cluster=cluster),
        "u",
        "row",
        "shape",
        "dtype",
    )
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir()] == []


_N = 8
# every field of WriteOptions, with values wrong for it (and what the message must name)
BAD_OPTIONS: dict[str, list[Any]] = {
    "format": ["parquet", 3, None],
    "policy": ["no-such", 3, None],
    "strategy": ["nope", None],
    "stripe_bytes": NOT_SIZES,
    "assignment": [
        "nope",
        3,
        {"u": np.full(_N, 5)},  # a writer that holds no row
        {"u": np.zeros(_N - 1, int)},
        {"u": np.full(_N, -1)},
        {"u": np.zeros(_N)},
        {"u": np.zeros(_N, int), "zz": np.zeros(_N, int)},  # no such dataset
        {},  # no entry for 'u'
    ],
    "unique": ["yes", None, 2],
    "allow_missing": ["yes", 2],
    "overwrite": ["yes", 2],
    "cost": ["nope", 3, {"a": 1}],
    "seed": [-1, 1.5, "x", 2**70],
    "attrs": [
        "x",
        {"zz": {"a": 1}},
        {"u": 5},
        {"": {"k": object()}},
        {"": {"": 1}},
        {"": {"a\0b": 1}},
        {"": {"k": "a\0b"}},
        {"": {"k": "\udcff"}},
        {"": {"\udcff": 1}},
        {"": {"k": 2**70}},
        {"": {"k": [1, "a"]}},
        {"": {"k": [[1, 2], [3]]}},
        {"": {"k": {"n": 1}}},
        {"": {"k": None}},
        {"": {3: 1}},
    ],
    "window": [0, -1, 1.5, "x", None],
    "direct": ["yes", 1],
    "n_ionodes": [0, 1.5, "2"],
}


@SETTINGS
@given(data=st.data())
def test_write_options(cluster, tmp_path_factory, data):
    """Every option of a stage, each given a value wrong for it: refused before writing."""
    field = data.draw(st.sampled_from(sorted(BAD_OPTIONS)))
    bad = data.draw(st.sampled_from(BAD_OPTIONS[field]))
    spec = DatasetSpec("u", (_N, 2), "float64")
    parts = [Contribution(c, np.arange(c * 4, c * 4 + 4), np.ones((4, 2))) for c in range(2)]
    target = tmp_path_factory.mktemp("stage") / "ck.h5"
    classify(
        "write_stage",
        lambda: orc.write_stage(target, {"u": (spec, parts)}, cluster=cluster, **{field: bad}),
        field,
        "writer array",
    )
    assert [p.name for p in target.parent.iterdir()] == []


def test_a_window_too_small_for_the_stage(cluster, tmp_path):
    """A window of one byte cut a 1 MiB stage into a million one-byte round trips: never
    ended. Refused, with the window that would do."""
    n = 1 << 12
    spec = DatasetSpec("u", (n, 32), "float64")
    parts = [Contribution(c, np.arange(c, n, 2), np.ones((n // 2, 32))) for c in range(2)]
    classify(
        "write_stage",
        lambda: orc.write_stage(
            tmp_path / "ck.h5", {"u": (spec, parts)}, cluster=cluster, window=1, direct=False
        ),
        "window=1",
    )
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def cluster():
    from orchestrator.engine.cluster import local_cluster

    with local_cluster(n_ionodes=2, n_compute=1) as cl:
        yield cl


# ---------------------------------------------------------------- front ends
@SETTINGS
@given(
    field=st.sampled_from(["clients", "format", "policy", "target", "stripe_bytes", "strategy"]),
    data=st.data(),
)
def test_output_stage(field, data):
    bad = {
        "clients": st.sampled_from([0, -1, 1.5, "4", 2**63]),
        "format": st.sampled_from(["", "hdf6", "HDF5", 5, None]),
        "policy": st.sampled_from(["", "no-such", 5]),
        "target": st.sampled_from(["ck-{step.real}.h5", "{__class__}.h5", "{0}.h5", "{x", 5]),
        "strategy": st.sampled_from(["", "two_phase", "Contiguous", 3]),
        "stripe_bytes": st.sampled_from([0, -1, 1.5, "8MiB", None]),
    }[field]
    value = data.draw(bad)
    kwargs: dict[str, Any] = {"target": "ck-{step}.h5", "clients": 2}
    kwargs[field] = value

    def make() -> Any:
        return orc.output_stage(**kwargs)(lambda step, client: {})

    classify("output_stage", make, field, value)


@SETTINGS
@given(
    field=st.sampled_from(["mode", "format", "clients", "client"]),
    data=st.data(),
)
def test_capture(tmp_path_factory, field, data):
    bad = {
        "mode": st.sampled_from(["r", "a", "x+", "", 5]),
        "format": st.sampled_from(["hdf6", "", 5]),
        "clients": st.sampled_from([0, -1, 1.5, None]),
        "client": st.sampled_from([-1, 1.5, "0", 2]),
    }[field]
    value = data.draw(bad)
    target = tmp_path_factory.mktemp("cap") / "ck.h5"
    kwargs: dict[str, Any] = {"clients": 2, "client": 0, "mode": "w"}
    kwargs[field] = value

    def open_it() -> None:
        with orc.capture(target, **kwargs):
            pass

    classify("capture", open_it, field, value)


# ---------------------------------------------------------------- readers
@SETTINGS
@given(
    lines=st.lists(
        st.one_of(
            st.lists(st.integers(-3, 9), max_size=4).map(lambda xs: " ".join(map(str, xs))),
            st.sampled_from(["x", "1.5", "\uff11", "99999999999999999999999", "%c", "1 x"]),
        ),
        min_size=1,
        max_size=6,
    )
)
@example(lines=["1 0", "99999999999999999999999"])  # beyond 64 bits: was an OverflowError
def test_metis_graph(tmp_path_factory, lines):
    from workflows.mesh import read_metis_graph

    path = tmp_path_factory.mktemp("metis") / "g.graph"
    path.write_text("\n".join(lines) + "\n")
    try:
        indptr, indices = read_metis_graph(path)
    except OrchestratorError as err:
        COUNTS.setdefault("read_metis_graph", Counter())["clear"] += 1
        assert str(path) in str(err)
        return
    except Exception as err:
        COUNTS.setdefault("read_metis_graph", Counter())["traceback"] += 1
        raise AssertionError(f"read_metis_graph: traceback {type(err).__name__}: {err}") from err
    # a file that reads is a consistent graph: ids in range, every edge both ways
    COUNTS.setdefault("read_metis_graph", Counter())["valid"] += 1
    n = indptr.size - 1
    assert indices.size == 0 or (0 <= indices.min() and indices.max() < n)
    edges = {(a, int(b)) for a in range(n) for b in indices[indptr[a] : indptr[a + 1]]}
    assert all((b, a) in edges for a, b in edges)


@SETTINGS
@given(
    ids=st.lists(
        st.sampled_from(["0", "1", "-1", "x", "1.5", "", "99999999999999999999999", "5000"]),
        min_size=1,
        max_size=6,
    ),
    n=st.integers(1, 6),
)
def test_metis_partition(tmp_path_factory, ids, n):
    from workflows.mesh import read_metis_partition

    path = tmp_path_factory.mktemp("metis") / "g.graph.part.4"
    path.write_text("\n".join(ids) + "\n")
    try:
        parts = read_metis_partition(path, n)
    except OrchestratorError as err:
        COUNTS.setdefault("read_metis_partition", Counter())["clear"] += 1
        assert str(path) in str(err)
        return
    except Exception as err:
        COUNTS.setdefault("read_metis_partition", Counter())["traceback"] += 1
        raise AssertionError(f"traceback {type(err).__name__}: {err}") from err
    COUNTS.setdefault("read_metis_partition", Counter())["valid"] += 1
    assert parts.size == n and (parts >= 0).all() and parts.dtype.kind == "i"


@SETTINGS
@given(
    kind=st.sampled_from(["missing", "file", "dir", "zarr-json", "empty-h5", "link"]),
    blob=st.binary(max_size=64),
    reader=st.sampled_from(["open_checkpoint", "verify", "latest_checkpoint"]),
)
def test_checkpoint_readers(tmp_path_factory, kind, blob, reader):
    base = tmp_path_factory.mktemp("ck")
    path = base / ("ck-1.zarr" if kind in ("dir", "zarr-json") else "ck-1.h5")
    if kind == "file":
        path.write_bytes(blob)
    elif kind == "empty-h5":
        path.write_bytes(b"")
    elif kind == "dir":
        path.mkdir()
    elif kind == "zarr-json":
        path.mkdir()
        (path / "zarr.json").write_bytes(blob)
    elif kind == "link":
        path.symlink_to(base / "nowhere.h5")
    if reader == "latest_checkpoint":
        skipped: list[Any] = []
        got = orc.latest_checkpoint(str(base / "ck-*"), verify=True, skipped=skipped)
        COUNTS.setdefault("latest_checkpoint", Counter())[
            "clear" if got is None else "accepted"
        ] += 1
        assert got is None and (kind == "missing" or skipped)
        return
    fn = {"open_checkpoint": orc.open_checkpoint, "verify": orc.verify}[reader]
    classify(reader, lambda: fn(path), str(path), path.name)


# ---------------------------------------------------------------- the command line
COMMANDS = [
    (["schedule", "--transfers", "{bad_csv}"], "line"),
    (["schedule", "--transfers", "{missing}"], "missing"),
    (["schedule", "--transfers", "{good_csv}", "--policy", "no-such"], "no-such"),
    (["schedule", "--transfers", "{good_csv}", "--seed", "-3"], "seed"),
    (["schedule", "--transfers", "{good_csv}", "--cost", "fast"], "fast"),
    (["verify", "{junk}"], "junk"),
    (["verify", "{missing}"], "missing"),
    (["write-bench", "--size", "1e15", "--out", "{dir}"], "1e15"),
    (["write-bench", "--size", "lots", "--out", "{dir}"], "lots"),
    (["write-bench", "--stripe", "0", "--out", "{dir}"], "stripe"),
    (["write-bench", "--size", "1.2.3", "--out", "{dir}"], "1.2.3"),
    (["write-bench", "--size", "1e999", "--out", "{dir}"], "1e999"),
    (["write-bench", "--policy", "no-such", "--out", "{dir}"], "no-such"),
    (
        ["schedule", "--transfers", "{good_csv}", "--policy", "ecf-ls", "--option", "moves=x"],
        "moves",
    ),
    (["slurm", "script", "bips3d", "--time", "99999999999999999999"], "time"),
    (["slurm", "script", "bips3d", "--time", "1:2:3:4:5"], "time"),
    (["run", "bips3d", "--load", "-1", "--out", "{dir}"], "load"),
    (["run", "bips3d", "--mesh", "{junk}", "--out", "{dir}"], "junk"),
    (["run", "bips3d", "--stripe", "lots", "--out", "{dir}"], "lots"),
    (["run", "bips3d", "--policy", "no-such", "--out", "{dir}"], "no-such"),
    (["schedule", "--transfers", "{good_csv}", "--gantt", "{missing}/x.png"], "missing"),
    (
        [
            "bench",
            "schedulers",
            "--large",
            "99999999999999",
            "--quick",
            "--no-sweeps",
            "--out",
            "{dir}",
        ],
        "--large",
    ),
    (["bench", "schedulers", "--cost", "no-such", "--quick", "--out", "{dir}"], "no-such"),
    (["bench", "optimal", "--cost", "no-such", "--quick", "--out", "{dir}"], "no-such"),
    (["bench", "idg", "--mesh", "{junk}", "--quick", "--out", "{dir}"], "junk"),
    (["bench", "idg", "--kernel-nodes", "99999999999999", "--quick", "--out", "{dir}"], "n_nodes"),
    (["bench", "stage", "--tasks", "0", "--out", "{dir}"], "--tasks"),
    (["bench", "stage", "--tasks", "16,x", "--out", "{dir}"], "'x'"),
    (["bench", "stage", "--sizes", "1e15", "--out", "{dir}"], "1e15"),
    (["bench", "stage", "--formats", "parquet", "--out", "{dir}"], "parquet"),
    (["bench", "stage", "--policy", "no-such", "--out", "{dir}"], "no-such"),
    (["workload", "bidding", "--out", "{dir}.csv", "--seed", "-1"], "seed"),
    (["workload", "bidding", "--out", "{dir}.csv", "--busy", "1.5"], "busy_ratio"),
    (["workload", "bidding", "--out", "{dir}.csv", "--ionodes", "99999999999"], "n_ionodes"),
    (["cost", "no-such"], "no-such"),
    (["slurm", "status", "1;rm"], "1;rm"),
    (["slurm", "script", "no-such"], "no-such"),
    (["write-bench", "--format", "parquet", "--out", "{dir}"], "parquet"),
    (["write-bench", "--window", "lots", "--out", "{dir}"], "lots"),
    (["slurm", "script", "bips3d", "--time", "1:99:99"], "minutes 99"),
    (["run", "bips3d", "--seed", "-1", "--out", "{dir}"], "--seed"),
    (["write-bench", "--ionodes", "10000", "--out", "{dir}"], "worker processes"),
    (["schedule", "--transfers", "{good_csv}", "--out", "{fifo}"], "not a regular file"),
    (["workload", "bidding", "--out", "{fifo}"], "not a regular file"),
    (["slurm", "script", "bips3d", "--time", "0-24:00:00"], "hours 24"),
    (["write-bench", "--size", "1.5", "--out", "{dir}"], "whole number of bytes"),
    (["write-bench", "--memory", "1", "--out", "{dir}"], "--memory 1"),
    (["verify", ""], "empty"),
    (["schedule", "--transfers", "{good_csv}", "--gantt", "{dir}.txt"], "txt"),
    # a device or a FIFO given as input was read until the machine ran out of memory
    (["schedule", "--transfers", "/dev/zero"], "/dev/zero"),
    (["schedule", "--transfers", "{fifo}"], "not a regular file"),
    (["schedule", "--transfers", "{good_csv}", "--cost", "{fifo}.json"], "does not exist"),
    (["bench", "idg", "--mesh", "{fifo}", "--quick", "--out", "{dir}"], "not a regular file"),
    (["run", "bips3d", "--mesh", "{fifo}.vtu", "--out", "{dir}"], "not a regular file"),
    # a window of a few bytes made one round trip per byte: a 1 MiB stage never ended
    (
        [
            *("write-bench", "--window", "1", "--size", "1MiB", "--repeat", "1"),
            *("--policy", "ecf", "--no-anchors", "--out", "{dir}"),
        ],
        "window=1",
    ),
]


@pytest.mark.parametrize(
    ("argv", "needle"), COMMANDS, ids=[f"{i}-{c[0][0]}" for i, c in enumerate(COMMANDS)]
)
def test_command(tmp_path, argv, needle):
    (tmp_path / "bad.csv").write_text("client,ionode,nbytes\n0,0,x\n")
    (tmp_path / "good.csv").write_text("client,ionode,nbytes\n0,0,8\n1,1,8\n")
    (tmp_path / "junk").write_bytes(b"\x89HDF junk")
    names = {
        "bad_csv": tmp_path / "bad.csv",
        "good_csv": tmp_path / "good.csv",
        "missing": tmp_path / "missing",
        "junk": tmp_path / "junk",
        "dir": tmp_path / "out",
        "fifo": tmp_path / "fifo",
    }
    os.mkfifo(tmp_path / "fifo")
    os.mkfifo(tmp_path / "fifo.vtu")
    args = [a.format(**names) for a in argv]
    iorch = Path(sys.executable).parent / "iorch"
    entry = f"iorch {argv[0]}"
    try:
        p = subprocess.run(
            [str(iorch), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ | {"COLUMNS": "200"},
        )
    except subprocess.TimeoutExpired:
        COUNTS.setdefault(entry, Counter())["hang"] += 1
        raise AssertionError(f"{entry}: no answer within 120 s") from None
    if "Traceback" in p.stderr or "Traceback" in p.stdout:
        kind = "traceback"
    elif p.returncode == 0:
        kind = "accepted"
    elif p.returncode == 2 and needle in p.stderr:
        kind = "clear"
    else:
        kind = "unclear"
    COUNTS.setdefault(entry, Counter())[kind] += 1
    assert kind == "clear", f"{args}: {kind}, exit {p.returncode}: {p.stderr[-500:]}"
    # one line of ours, or Click's usage error (a usage line, a hint and a boxed message)
    assert len(p.stderr.strip().splitlines()) <= 3 or p.stderr.startswith("Usage:"), p.stderr


@SETTINGS
@given(bad=st.integers(4, 10**12), n=st.integers(2, 6))
def test_a_partition_file_naming_more_parts_than_asked(tmp_path_factory, bad, n):
    """A part id of 5,000 under ``--parts 4`` used to make 5,001 partitions, silently."""
    from workflows.bips3d import load_case

    d = tmp_path_factory.mktemp("mesh")
    graph = d / "g.graph"
    # a path 1 - 2 - ... - n
    lines = [f"{n} {n - 1}"] + [
        " ".join(str(v) for v in (i - 1, i + 1) if 1 <= v <= n) for i in range(1, n + 1)
    ]
    graph.write_text("\n".join(lines) + "\n")
    (d / "g.graph.part.4").write_text("\n".join(["0"] * (n - 1) + [str(bad)]) + "\n")
    classify("load_case", lambda: load_case(mesh=graph, parts=4), str(bad), "parts=4")


def test_report():
    """Last: the counts of this run, as issue 14 reports them (also in out/bad-inputs.json)."""
    total: Counter[str] = Counter()
    for c in COUNTS.values():
        total.update(c)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({k: dict(v) for k, v in sorted(COUNTS.items())} | {"total": total}))
    print("\nbad inputs tried:", sum(total.values()), dict(total))
    for entry, c in sorted(COUNTS.items()):
        print(f"  {entry}: {dict(c)}")
    assert total["traceback"] == total["accepted"] == total["hang"] == total["unclear"] == 0
