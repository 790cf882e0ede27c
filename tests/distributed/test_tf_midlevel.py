"""A Keras / TFRS program on the TF bridge under `mpiexec -n 2` and `-n 3`: one replica per process.

`tf_midlevel_program.py` trains TensorFlow Recommenders' TPU embedding layer with `model.fit`, then runs a
mid-level loop in `tf.function`; each run is compared with the same program as one process.
"""

import json

import numpy as np
import pytest

from .launch import HERE, requires_mpi, run_program

pytest.importorskip("tensorflow", reason="needs TensorFlow: the `tensorflow` extra (CI's TF venv has it and MPI)")
pytest.importorskip("tensorflow_recommenders", reason="needs tensorflow-recommenders (CI's TF venv has it)")
pytestmark = requires_mpi

PROGRAM = HERE / "tf_midlevel_program.py"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return run(1, tmp_path_factory.mktemp("one"))


def run(world_size, directory):
    out = directory / "out.json"
    run_program(world_size, PROGRAM, out, timeout=600)
    return json.loads(out.read_text())


@pytest.mark.parametrize("world_size", [2, 3])
def test_keras_fit_with_the_tfrs_layer_on_n_replicas_trains_one_process_numbers(one_process, world_size, tmp_path):
    got = run(world_size, tmp_path)
    assert one_process["errors"] == [None] and got["errors"] == [None] * world_size
    assert got["replicas"] == world_size and one_process["replicas"] == 1
    assert got["engine_step"] == one_process["engine_step"] == 8  # 2 epochs of 4 global batches; evaluate: none
    # A tf.train.Checkpoint saved as multi-worker TensorFlow programs save one restores the tables on every replica.
    assert got["restored_equal"] is True and one_process["restored_equal"] is True
    # evaluate and predict run their lookups on every replica; each replica predicts its rows.
    assert got["predict_rows"] == 48 // world_size and one_process["predict_rows"] == 48
    # Each replica read its 12 / N rows of every global batch, and the sums over replicas saw all 12.
    assert got["local_rows"] == [12 // world_size] * 4
    np.testing.assert_allclose(got["seen"], one_process["seen"], rtol=1e-6, atol=1e-6)
    # Keras sums the replicas' dense gradients (each of its replica's mean / N): one process's model, to float
    # tolerance (the mean of the global batch adds in another order).
    for name, table in one_process["fit_tables"].items():
        np.testing.assert_allclose(got["fit_tables"][name], table, rtol=1e-5, atol=1e-6, err_msg=name)
    for mine, theirs in zip(got["fit_dense"], one_process["fit_dense"]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
    # The mid-level loop, each example's gradient its own: the activations of the global batch and the table
    # are one process's bits.
    assert np.array(got["loop_activations"]).shape == (4, 12, 4)
    assert np.array_equal(got["loop_activations"], one_process["loop_activations"])
    assert np.array_equal(got["loop_table"], one_process["loop_table"])
