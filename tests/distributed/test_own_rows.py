"""Each rank creates only its rows: the initial tables of one process on any number of ranks, `div` and
`mod`, in memory or in a file per rank, without any rank drawing or holding the full table."""

import json
import os

import pytest

from .launch import HERE, mpirun, requires_mpi

pytestmark = requires_mpi


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("strategy", ["div", "mod"])
@pytest.mark.parametrize("in_files", [False, True], ids=["memory", "table_files"])
def test_each_rank_builds_its_rows_alone(tmp_path, world_size, strategy, in_files):
    files = tmp_path / "files"
    job = mpirun(world_size, HERE / "own_rows_program.py", strategy, files if in_files else "-", tmp_path, timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world_size)]
    for rank in ranks:
        assert rank["same"] and rank["slot_same"], rank  # one process's initial rows and slot, bit for bit
        # what numpy allocated to build the engine: within 1.25x the rank's rows + slot, never the full table
        assert rank["peak"] <= 1.25 * rank["held"], rank
    if in_files:  # a file per rank, on its host's disk
        assert sorted(name for name in os.listdir(files) if not name.endswith(".accumulators.npy")) == [
            f"big.rank-{r:05d}-of-{world_size:05d}.npy" for r in range(world_size)
        ]


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_table_is_gathered_on_rank_0_block_by_block(tmp_path, world_size):
    job = mpirun(world_size, HERE / "gather_program.py", tmp_path, timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    for rank in range(world_size):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text())["failures"] == []


@pytest.mark.parametrize("world_size", [2, 3])
def test_an_export_is_written_as_the_rows_arrive(tmp_path, world_size):
    job = mpirun(world_size, HERE / "export_program.py", tmp_path / "export", "good", tmp_path, timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world_size)]
    assert all(rank.get("same") for rank in ranks), ranks  # the full tables in id order, read back everywhere


def test_a_write_that_fails_half_way_fails_every_replica_and_leaves_nothing(tmp_path):
    job = mpirun(2, HERE / "export_program.py", tmp_path / "export", "fail_mid_table", tmp_path, timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr  # no hang: replica 0 ran the rest of every table's blocks
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["error"] == "OSError: [Errno 28] No space left on device"
    assert ranks[1]["error"].startswith("PeerFailedError: ") and "No space left" in ranks[1]["error"]
    assert sorted(os.listdir(tmp_path)) == ["rank0.json", "rank1.json"]  # no export, no temporary directory
