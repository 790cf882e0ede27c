"""TPUEstimator under `mpiexec -n W`: the numbers of one process, checkpoints across world sizes, failures.

Each case runs estimator_program.py alone (the reference) and under mpiexec.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tpu_embedding_shim.engine.tf_bundle import BundleReader, data_files

from .launch import HERE, requires_mpi, run_program

pytestmark = requires_mpi

PROGRAM = HERE / "estimator_program.py"


def alone(model_dir, out, action, batch=12, strategy="div", num_shards="6"):
    return under_mpi(1, model_dir, out, action, batch, strategy, num_shards)


def under_mpi(world_size, model_dir, out, action, batch=12, strategy="div", num_shards="6"):
    """The program on `world_size` replicas (1: a plain process); what replica 0 recorded."""
    run_program(world_size, PROGRAM, model_dir, out, action, batch, strategy, num_shards)
    return json.loads(Path(out).read_text())


def assert_same_model(one, many):
    """Embedding tables and slots equal; the dense part to float rounding (its sums run in another order)."""
    assert sorted(one["variables"]) == sorted(many["variables"])
    for name, value in one["variables"].items():
        np.testing.assert_allclose(np.array(many["variables"][name]), np.array(value), rtol=1e-5, atol=1e-7)
    for key, value in one["metrics"].items():
        assert many["metrics"][key] == pytest.approx(value, rel=1e-6), key


@pytest.mark.parametrize("world_size", [2, 3])
def test_training_on_w_replicas_gives_the_numbers_of_one_process(tmp_path, world_size):
    one = alone(tmp_path / "one", tmp_path / "one.json", "train")
    many = under_mpi(world_size, tmp_path / "many", tmp_path / "many.json", "train")
    assert one["errors"] == [None] and many["errors"] == [None] * world_size
    assert many["replicas"] == world_size
    # input_fn (train, evaluate) got the per-replica batch and knew its replica
    assert many["seen"] == [[12 // world_size, 0, world_size]] * 2 and one["seen"] == [[12, 0, 1]] * 2
    assert many["metrics"]["count"] == 24  # metric_fn saw every replica's examples
    assert_same_model(one, many)
    assert Path(many["checkpoint"]).name == "model.ckpt-6"


@pytest.mark.parametrize(
    "written_by, read_by, strategy",
    [(2, 1, "div"), (1, 3, "div"), (3, 2, "div"), (2, 1, "mod"), (3, 2, "mod"), (1, 3, "mod"), (2, 3, "mod")],
)
def test_a_checkpoint_written_by_n_replicas_restores_on_m(tmp_path, written_by, read_by, strategy):
    """Each replica writes its rows of every table to a data file of its own, as one row slice of the table (a
    TPU host's; `mod`: in the hosts' order), replica 0 the index; any world size reads it back in id order."""
    model_dir = tmp_path / "model"

    def run(world_size, out, action):
        if world_size == 1:
            return alone(model_dir, tmp_path / out, action, strategy=strategy)
        return under_mpi(world_size, model_dir, tmp_path / out, action, strategy=strategy)

    trained = run(written_by, "trained.json", "train")
    reader = BundleReader(trained["checkpoint"])
    table = "dense_features/a_embedding/embedding_weights"
    assert len(data_files(trained["checkpoint"])) == written_by
    slices = reader.entry(table).slices
    assert len(slices or [None]) == written_by and len(reader.entry(table + "/Adagrad").slices or [None]) == written_by
    restored = run(read_by, "restored.json", "evaluate")
    assert restored["errors"] == [None] * read_by
    assert restored["variables"] == trained["variables"]  # the same bits: read back, nothing trained
    assert restored["metrics"] == pytest.approx(trained["metrics"], rel=1e-6)


@pytest.mark.parametrize("written_by, read_by, strategy", [(2, 3, "mod"), (3, 2, "div")])
def test_a_warm_start_under_mpiexec_takes_the_rows_one_process_takes(tmp_path, written_by, read_by, strategy):
    """Each replica warm-starts its rows from a checkpoint of another replica count (reading only them); two
    more steps give the model one process gives from the same checkpoint."""
    source = tmp_path / "source"
    if written_by == 1:
        alone(source, tmp_path / "source.json", "train", strategy=strategy)
    else:
        under_mpi(written_by, source, tmp_path / "source.json", "train", strategy=strategy)
    action = f"warm:{source}"
    one = alone(tmp_path / "one", tmp_path / "one.json", action, strategy=strategy)
    many = under_mpi(read_by, tmp_path / "many", tmp_path / "many.json", action, strategy=strategy)
    assert one["errors"] == [None] and many["errors"] == [None] * read_by
    assert_same_model(one, many)


@pytest.mark.parametrize("world_size", [1, 2])
def test_num_shards_none_is_one_shard_per_replica(tmp_path, world_size):
    """TPUConfig(num_shards=None), the default: TensorFlow takes the count from the TPU system; here it is the
    number of replicas, and each replica writes its one shard."""
    result = under_mpi(world_size, tmp_path / "model", tmp_path / "out.json", "train", num_shards="none")
    assert result["errors"] == [None] * world_size
    assert result["num_shards"] == world_size
    assert len(data_files(result["checkpoint"])) == world_size


def test_a_nan_loss_on_one_replica_stops_every_replica(tmp_path):
    """The loss is the replicas' mean, so every replica raises at the same step, before any update."""
    result = under_mpi(2, tmp_path / "model", tmp_path / "out.json", "train-nan")
    assert result["errors"] == ["NanLossDuringTrainingError: NaN loss during training."] * 2


def test_a_global_batch_that_does_not_split_is_refused_on_every_replica(tmp_path):
    result = under_mpi(2, tmp_path / "model", tmp_path / "out.json", "train", batch=9)
    assert (
        result["errors"]
        == [
            "ValueError: train_batch_size=9 is the global batch of 2 replicas (mpiexec -n 2); it must be a multiple "
            "of 2, as TPUEstimator requires a multiple of the number of shards."
        ]
        * 2
    )


def test_no_model_dir_is_refused_on_every_replica(tmp_path):
    """One process trains in a temporary folder; several replicas would each make their own (on their own
    hosts), and a checkpoint's files would be split over them."""
    result = under_mpi(2, "none", tmp_path / "out.json", "train")
    assert (
        result["errors"]
        == [
            "ValueError: `model_dir` is None on 2 replicas (mpiexec): each would use a temporary folder of its own, "
            "and no checkpoint could be written or read whole. Pass a model_dir that every replica's host sees (a "
            "shared file system)."
        ]
        * 2
    )
