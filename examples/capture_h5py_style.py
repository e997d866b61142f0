"""Keep your h5py code: run it against `orchestrator.capture` instead of `h5py.File`.

`write_fields` is ordinary h5py code. Given an `h5py.File` it writes directly;
given the object `orchestrator.capture` yields it records the same writes, and
at the end of the `with` block they go through the planned, atomic stage.
"""

import h5py
import numpy as np

import orchestrator as orc


def write_fields(f, step, n=5000):
    u = f.create_dataset("u", shape=(n, 3), dtype="f8")
    u[: n // 2] = np.ones((n // 2, 3))  # a slice
    u[n // 2 :] = 2.0  # broadcast
    u[[0, 17, n - 1]] = np.arange(9.0).reshape(3, 3)  # integer array of rows
    mask = np.zeros(n, bool)
    mask[100:200] = True
    f["ids"] = np.arange(n, dtype=np.int32)  # create from data
    f["ids"][mask] = -1  # a boolean mask of rows
    u.attrs["units"] = "m/s"
    f.attrs["step"] = step


if __name__ == "__main__":
    import pathlib

    pathlib.Path("checkpoints").mkdir(exist_ok=True)
    with h5py.File("checkpoints/plain-h5py.h5", "w") as f:  # before
        write_fields(f, step=3)
    with orc.capture("checkpoints/captured.h5", overwrite=True, n_ionodes=2) as f:  # after
        write_fields(f, step=3)
    with h5py.File("checkpoints/plain-h5py.h5") as a, h5py.File("checkpoints/captured.h5") as b:
        for name in ("u", "ids"):
            assert np.array_equal(a[name][...], b[name][...]), name
        assert b["u"].attrs["units"] == "m/s" and b.attrs["step"] == 3
    try:
        with orc.capture("checkpoints/never.h5") as f:
            f.create_dataset("u", shape=(10, 3))[2, 0:2] = 1.0  # part of a row
    except orc.CaptureError as err:
        print("refused:", err)
    print("ok: the captured checkpoint equals the h5py one")
