"""Lookup statistics (`profile_data_directory`) under `mpiexec -n 2` and `-n 3`: one process's files.

`statistics_program.py` trains 80 lookups of global batches of 12 with the statistics flushed twice; every
rank looks up its rows, rank 0 writes. The files (names, numbers, the merge of the second flush into the
first) are those of `Engine` on the global batches, byte for byte.
"""

import pytest

from .launch import HERE, requires_mpi, run_program

pytestmark = requires_mpi

PROGRAM = HERE / "statistics_program.py"


def files(directory):
    return {path.name: path.read_bytes() for path in directory.glob("*.json")}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    directory = tmp_path_factory.mktemp("one")
    run_program(1, PROGRAM, directory)
    return files(directory)


@pytest.mark.parametrize("world_size", [2, 3])
def test_n_ranks_write_the_statistics_files_of_one_process(one_process, world_size, tmp_path):
    run_program(world_size, PROGRAM, tmp_path)
    assert sorted(one_process) == sorted(files(tmp_path)) and len(one_process) == 2  # one file per table
    assert files(tmp_path) == one_process
    assert b'"steps_seen": 80' in one_process[next(iter(one_process))]
