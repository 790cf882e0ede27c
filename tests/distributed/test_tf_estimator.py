"""A TensorFlow model_fn under `mpiexec -n W` (the TF bridge): CrossShardOptimizer sums over the processes."""

import json
import subprocess
import sys

import numpy as np
import pytest

from .launch import HERE, environment, mpirun, requires_mpi

pytest.importorskip("tensorflow", reason="needs TensorFlow: the `tensorflow` extra (CI's TF venv has it and MPI)")
pytestmark = requires_mpi

PROGRAM = HERE / "tf_estimator_program.py"


def run(world_size, tmp_path, name, action="train"):
    out = tmp_path / f"{name}.json"
    args = [str(tmp_path / name), str(out), action]
    if world_size == 1:
        job = subprocess.run(
            [sys.executable, str(PROGRAM), *args], env=environment(), capture_output=True, text=True, timeout=180
        )
    else:
        job = mpirun(world_size, PROGRAM, *args, timeout=180)
    assert job.returncode == 0, job.stderr
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


def test_the_tensorflow_programs_tpu_strategy_refuses_to_span_processes_yet():
    """Rather than hand every replica the whole tf.data batch (wrong numbers), it says what runs instead."""
    code = (
        "import tpu_embedding_shim.tensorflow as tf\n"
        "try:\n"
        "    tf.distribute.TPUStrategy()\n"
        "except NotImplementedError as error:\n"
        "    print('refused:', error)\n"
    )
    job = mpirun(2, "-c", code, timeout=180)
    assert job.returncode == 0, job.stderr
    assert job.stdout.count("refused: The TPUStrategy of TensorFlow programs does not span the 2 processes") == 2
