"""Pictures for the docs, produced by the code they document."""

from pathlib import Path

import orchestrator as orc
from orchestrator.plots import close, gantt

#: The example every policy page draws: 16 transfers from 6 clients to 4 I/O
#: nodes with sizes 1-8 (a seeded random draw on which the policies differ).
EXAMPLE = orc.TransferSet(
    client=[4, 1, 1, 5, 1, 1, 3, 4, 3, 5, 0, 2, 3, 2, 2, 2],
    ionode=[0, 0, 2, 1, 3, 0, 3, 1, 0, 0, 1, 0, 3, 3, 3, 1],
    nbytes=[1, 3, 4, 5, 4, 5, 4, 6, 1, 8, 5, 2, 7, 3, 8, 3],
)
#: One byte per second and a little latency, so durations read as sizes.
COST = orc.CostModel(network_bandwidth=1.0, disk_bandwidth=1.0, disk_latency=0.1, name="docs")


def draw_all(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, p in orc.policies().items():
        opts: dict[str, object] = {"block_size": 2} if p.default_block_size else {}
        if "min_piece" in p.parameters:  # the example's transfers are a few bytes
            opts["min_piece"] = 1
        plan = orc.schedule(EXAMPLE, name, cost=COST, seed=1, **opts)
        close(gantt(plan, path=out / f"gantt_{name}.png"))
    draw_interval_map(out)
    write_slurm_script(out)
    draw_read_orders(out)


def draw_read_orders(out: Path) -> None:
    """Each read policy's service order on the HIO paper's best case, one picture each."""
    from orchestrator.bench import hio

    rs = hio.example()
    for name in hio.POLICIES:
        hio.service_picture(rs, out, policies=[name], name=f"reads_{name}.png")


#: The command whose script the "Running under Slurm" page explains line by line.
SLURM_EXAMPLE = (
    "iorch slurm script bips3d --nodes 4 --io-nodes 1 --ionodes 4 --partition compute "
    "--account myproject -- --parts 64 --load 100"
)


def write_slurm_script(out: Path) -> None:
    """The batch script of :data:`SLURM_EXAMPLE`, with a user's paths for the folders."""
    import typer.main

    from orchestrator.cli import app
    from orchestrator.cli.slurm import script_text

    text = script_text(
        "bips3d",
        ["--parts", "64", "--load", "100"],
        nodes=4,
        io_nodes="1",
        ionodes=4,
        shared_nodes=None,
        compute_per_node=1,
        local_directory=None,
        time_limit="00:30:00",
        partition="compute",
        account="myproject",
        job_name=None,
        output=None,
        exclusive=True,
        sbatch=None,
        check=False,
        origin=SLURM_EXAMPLE,
        workdir="/scratch/me/run1",
        python_bin="/home/me/venv/bin",
        root=typer.main.get_command(app),
    )  # fmt: skip  (the call reads as the command line it stands for)
    (out / "bips3d-4nodes.sbatch").write_text(text)


def draw_interval_map(out: Path) -> None:
    """The writer of every node of a generated device mesh under each assignment method."""
    from orchestrator.workflows.mesh import partition
    from orchestrator.workflows.meshgen import generate_mesh

    from orchestrator.plots import interval_map

    m = generate_mesh(4000, seed=1)
    part = partition(m.indptr, m.indices, 6, seed=0)
    rs = orc.replica_sets(m.indptr, m.indices, part, halo=1)
    writers = {k: orc.assign(rs, part, k, seed=0) for k in ("metis", "first", "random", "idg")}
    title = "4,000-node generated device mesh, 6 METIS partitions, halo 1"
    close(interval_map(writers, 6, path=out / "interval_map.png", title=title))
