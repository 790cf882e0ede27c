"""A TensorFlow checkpoint written by every rank at once (`write_collectively`), under `mpiexec`."""

import json
import os

import numpy as np
import pytest

from tpu_embedding_shim.engine.tf_bundle import BundleReader, data_files, write_bundle

from .bundle_program import TABLE
from .launch import HERE, mpirun, requires_mpi

pytestmark = requires_mpi


def run(world_size, tmp_path, case):
    prefix = str(tmp_path / "ckpt" / "model.ckpt-5")
    job = mpirun(world_size, HERE / "bundle_program.py", prefix, case, tmp_path, timeout=60)
    assert job.returncode == 0, job.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world_size)]
    return prefix, ranks


@pytest.mark.parametrize("world_size", [2, 3])
def test_each_rank_writes_its_rows_and_rank_0_the_index(tmp_path, world_size):
    os.makedirs(tmp_path / "ckpt")
    write_bundle(str(tmp_path / "ckpt" / "model.ckpt-5"), {"old": np.zeros(2)}, num_shards=5)  # replaced whole
    prefix, ranks = run(world_size, tmp_path, "good")
    assert all("error" not in rank for rank in ranks), ranks
    assert len(data_files(prefix)) == world_size  # one data file per rank; the old checkpoint's five are gone
    reader = BundleReader(prefix)
    assert reader.names() == ["global_step", "table"]
    assert len(reader.entry("table").slices) == world_size
    np.testing.assert_array_equal(reader.read("table"), TABLE)
    assert sorted(os.listdir(tmp_path / "ckpt")) == sorted(
        [os.path.basename(p) for p in data_files(prefix)] + ["model.ckpt-5.index"]
    )


def test_a_rank_that_fails_to_write_fails_every_rank_and_leaves_nothing(tmp_path):
    _, ranks = run(3, tmp_path, "bad_rank_1")
    assert ranks[1]["error"].startswith("TypeError: write_bundle: tensor 'bad' is an object array")
    for rank in (0, 2):
        assert ranks[rank]["error"].startswith("PeerFailedError: Rank 1 failed this call on its input (TypeError")
    assert os.listdir(tmp_path / "ckpt") == []  # no index, no data file, no temporary file
