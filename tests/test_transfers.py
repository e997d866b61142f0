"""TransferSet: validation names the column and index; loaders round-trip."""

import re

import numpy as np
import pytest

from orchestrator import TransferSet, TransferSetError


def test_columns_are_int64_and_read_only():
    ts = TransferSet([0, 2], [1, 0], [5, 7], n_ionodes=4)
    assert ts.client.dtype == np.int64 and (ts.n_clients, ts.n_ionodes) == (3, 4)
    with pytest.raises(ValueError):
        ts.nbytes[0] = 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"client": [0, -1], "ionode": [0, 0], "nbytes": [1, 1]},
            "column 'client': value -1 at index 1",
        ),
        (
            {"client": [0, 0], "ionode": [0, 0], "nbytes": [1, 0]},
            "column 'nbytes': value 0 at index 1",
        ),
        (
            {"client": [0], "ionode": [0], "nbytes": [np.nan]},
            "column 'nbytes': value nan at index 0",
        ),
        ({"client": [0], "ionode": [0.5], "nbytes": [1]}, "column 'ionode': value 0.5 at index 0"),
        ({"client": [0, 1], "ionode": [0], "nbytes": [1, 1]}, "client=2, ionode=1, nbytes=2"),
        ({"client": [], "ionode": [], "nbytes": []}, "empty TransferSet"),
        (
            {"client": ["a"], "ionode": [0], "nbytes": [1]},
            "column 'client': value 'a' at index 0 is not an integer",
        ),
        (
            {"client": [0, None], "ionode": [0, 0], "nbytes": [1, 1]},
            "column 'client': value None at index 1 is not an integer",
        ),
        (
            {"client": [0], "ionode": [0], "nbytes": [10**23]},
            "column 'nbytes': value 100000000000000000000000 at index 0 does not fit in int64",
        ),
        (
            {"client": [0], "ionode": [0], "nbytes": [1e19]},
            "column 'nbytes': value 1e+19 at index 0 does not fit in int64",
        ),
        (
            {"client": [0], "ionode": [2**40], "nbytes": [1]},
            "column 'ionode': value 1099511627776 at index 0 must be < 2147483647",
        ),
        (
            {"client": [0, 1], "ionode": [0, 0], "nbytes": [2**62, 2**62]},
            "the total exceeds 2**63 - 1 bytes",
        ),
        (
            {"client": [0, 5], "ionode": [0, 0], "nbytes": [1, 1], "n_clients": 3},
            "column 'client': value 5 at index 1 is out of range for n_clients=3",
        ),
    ],
)
def test_bad_columns_are_named(kwargs, message):
    with pytest.raises(TransferSetError, match=re.escape(message)):
        TransferSet(**kwargs)


def test_float_columns_holding_integers_are_accepted():
    ts = TransferSet(np.array([0.0, 1.0]), [0, 0], np.array([4.0, 8.0]))
    assert ts.nbytes.tolist() == [4, 8]


def test_csv_round_trip_and_errors_name_file_and_line(tmp_path):
    ts = TransferSet([0, 1, 1], [2, 0, 1], [10, 20, 30])
    p = tmp_path / "t.csv"
    ts.to_csv(p)
    back = TransferSet.from_csv(p)
    assert back.bytes_matrix().tolist() == ts.bytes_matrix().tolist()
    bad = tmp_path / "bad.csv"
    bad.write_text("client,ionode,nbytes\n0,0,10\n1,x,5\n")
    with pytest.raises(TransferSetError, match=r"bad.csv, line 3: column 'ionode' value 'x'"):
        TransferSet.from_csv(bad)
    neg = tmp_path / "neg.csv"
    neg.write_text("client,ionode,nbytes\n0,0,10\n1,0,-5\n")
    with pytest.raises(
        TransferSetError, match=r"neg.csv, line 3: column 'nbytes': value -5 at index 1"
    ):
        TransferSet.from_csv(neg)
    gappy = tmp_path / "gappy.csv"  # blank lines are skipped but still counted
    gappy.write_text("client,ionode,nbytes\n\n0,0,10\n\n1,-2,5\n")
    with pytest.raises(
        TransferSetError, match=r"gappy.csv, line 5: column 'ionode': value -2 at index 1"
    ):
        TransferSet.from_csv(gappy)
    nohead = tmp_path / "nohead.csv"
    nohead.write_text("a,b\n1,2\n")
    with pytest.raises(TransferSetError, match="lacks column"):
        TransferSet.from_csv(nohead)


def test_npz_round_trip(tmp_path):
    ts = TransferSet([3, 1], [0, 2], [1, 2**40])
    ts.save_npz(tmp_path / "t.npz")
    back = TransferSet.load_npz(tmp_path / "t.npz")
    assert back.nbytes.tolist() == [1, 2**40] and back.n_clients == 4
    with pytest.raises(TransferSetError, match="missing column"):
        TransferSet.from_arrays({"client": [0]})
