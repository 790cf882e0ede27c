"""A TensorFlow model_fn under `mpiexec -n W` (the TF bridge): CrossShardOptimizer sums over the processes."""

import json

import numpy as np
import pytest

from .launch import HERE, mpirun, requires_mpi, run_program

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


def test_the_tensorflow_programs_tpu_strategy_refuses_to_span_processes_yet(tmp_path):
    """Rather than hand every replica the whole tf.data batch (wrong numbers), it says what runs instead."""
    code = (
        "import os, sys\n"
        "import tpu_embedding_shim.tensorflow as tf\n"
        "try:\n"
        "    tf.distribute.TPUStrategy()\n"
        "except NotImplementedError as error:\n"
        "    open(os.path.join(sys.argv[1], 'rank' + os.environ['PMI_RANK']), 'w').write(str(error))\n"
    )
    job = mpirun(2, "-c", code, tmp_path, timeout=180)
    assert job.returncode == 0, job.stderr
    for rank in (0, 1):
        message = (tmp_path / f"rank{rank}").read_text()
        assert message.startswith("The TPUStrategy of TensorFlow programs does not span the 2 processes of mpiexec")
