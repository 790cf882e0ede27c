"""The torch bridge under `mpiexec -n W`: train_op sums or averages the dense gradients across replicas."""

import json
from pathlib import Path

import numpy as np
import pytest

from .launch import HERE, requires_mpi, run_program

pytest.importorskip("torch", reason="needs torch: the `torch` extra (CI's every-extra venv has it and MPI)")
pytestmark = requires_mpi

PROGRAM = HERE / "torch_program.py"


def run(world_size, tmp_path, reduction, steps):
    out = tmp_path / f"{world_size}-{reduction}.json"
    run_program(world_size, PROGRAM, tmp_path / f"model-{world_size}-{reduction}", out, reduction, steps)
    return {key: np.array(value) for key, value in json.loads(Path(out).read_text()).items()}


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_loss_over_the_global_batch_with_summed_gradients_trains_one_process_numbers(tmp_path, world_size):
    one, many = run(1, tmp_path, "sum", 6), run(world_size, tmp_path, "sum", 6)
    for key in ("weight", "bias", "table"):
        np.testing.assert_allclose(many[key], one[key], rtol=1e-5, atol=1e-7, err_msg=key)


def test_per_replica_means_with_averaged_gradients_give_the_dense_step_of_one_process(tmp_path):
    """One step: the average of the replicas' mean gradients is the global mean gradient (equal slices); the
    embeddings get the replicas' sum, twice one process's step, as on a TPU."""
    one, two = run(1, tmp_path, "mean", 1), run(2, tmp_path, "mean", 1)
    np.testing.assert_allclose(two["weight"], one["weight"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(two["bias"], one["bias"], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(two["initial"], one["initial"])
    start = one["initial"]
    np.testing.assert_allclose(two["table"] - start, 2 * (one["table"] - start), rtol=1e-4, atol=1e-6)
