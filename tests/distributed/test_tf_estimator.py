"""A TensorFlow model_fn under `mpiexec -n W` (the TF bridge): CrossShardOptimizer sums over the processes."""

import json

import numpy as np
import pytest

from .launch import HERE, requires_mpi, run_program

pytest.importorskip("tensorflow", reason="needs TensorFlow: the `tensorflow` extra (CI's TF venv has it and MPI)")
pytestmark = requires_mpi

PROGRAM = HERE / "tf_estimator_program.py"


def run(world_size, tmp_path, name, action="train"):
    out = tmp_path / f"{name}.json"
    run_program(world_size, PROGRAM, tmp_path / name, out, action)
    return json.loads(out.read_text())


def test_a_tensorflow_model_fn_on_two_replicas_trains_one_process_numbers(tmp_path):
    one, two = run(1, tmp_path, "one"), run(2, tmp_path, "two")
    assert one["errors"] == [None] and two["errors"] == [None, None]
    assert sorted(two["variables"]) == sorted(one["variables"])
    for name, value in one["variables"].items():
        np.testing.assert_allclose(
            np.array(two["variables"][name]), np.array(value), rtol=1e-5, atol=1e-7, err_msg=name
        )
    # metric_fn's streaming metrics saw every replica's examples (joined, as TPUEstimator joins the shards')
    assert two["metrics"]["mean_label"] == pytest.approx(one["metrics"]["mean_label"], rel=1e-6)
    assert two["metrics"]["count"] == one["metrics"]["count"] == 12  # each batch: both replicas' 6 examples


def test_without_cross_shard_optimizer_every_replica_refuses_to_train(tmp_path):
    result = run(2, tmp_path, "plain", action="train-plain")
    assert all(
        error.startswith("ValueError: Under mpiexec -n 2 each process is a replica") for error in result["errors"]
    )
