"""`tf.train.Checkpoint.restore` of a SparseCore checkpoint (a TPUEmbeddingV2 trained on a TPU, tables stacked with
their layouts; the fixture TensorFlow 2.21 wrote) into every mid-level class: each table and slot cut out of its
stack, bit for bit, so a model trained on SparseCore serves and trains on. A checkpoint of other tables is
refused before anything changes."""

from pathlib import Path

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.checkpoints.sparsecore import write_sparsecore
from tpu_embedding_shim.engine import CheckpointError, sparsecore_layout

E = tf.tpu.experimental.embedding
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints" / "sparsecore_adagrad"
SHAPES = {"movies": (100, 8), "users": (37, 5), "tags": (50, 16)}


def build(cls, shapes=SHAPES, output_shape=None):
    tables = {n: E.TableConfig(vocabulary_size=r, dim=d, name=n) for n, (r, d) in shapes.items()}
    config = {n: E.FeatureConfig(table=t, output_shape=output_shape) for n, t in tables.items()}
    if cls == "TPUEmbeddingV2":
        with tf.distribute.TPUStrategy().scope():
            return E.TPUEmbeddingV2(feature_config=config, optimizer=E.Adagrad(0.1))
    return getattr(tf.tpu.experimental.embedding, cls)(feature_config=config, optimizer=E.Adagrad(0.1))


@pytest.mark.parametrize("cls", ["TPUEmbeddingV2", "TPUEmbedding", "TPUEmbeddingForServing"])
def test_a_tpu_trained_sparsecore_checkpoint_restores_bit_for_bit(cls):
    original = np.load(FIXTURE / "original.npz")
    embedding = build(cls)
    tf.train.Checkpoint(embedding=embedding).restore(str(FIXTURE / "ckpt-1")).assert_existing_objects_matched()
    for name in SHAPES:
        assert embedding.engine.table(name).tobytes() == original[f"{name}|embedding"].tobytes()
        assert embedding.engine.slots(name)["accumulators"].tobytes() == original[f"{name}|accumulators"].tobytes()


def test_a_written_sparsecore_checkpoint_restores_and_a_mismatch_changes_nothing(tmp_path):
    layouts = sparsecore_layout.stack_tables(
        [sparsecore_layout.StackRequest(n, r, d, "adagrad", 64) for n, (r, d) in SHAPES.items()], num_partitions=4
    )
    rng = np.random.default_rng(5)
    state = {
        x.table_name: {
            "embedding": rng.standard_normal(x.unsharded_shape).astype(np.float32),
            "accumulators": rng.random(x.unsharded_shape).astype(np.float32),
        }
        for x in layouts
    }
    prefix = write_sparsecore(str(tmp_path / "ckpt-1"), state, layouts)
    embedding = build("TPUEmbeddingV2")
    tf.train.Checkpoint(embedding=embedding).restore(prefix)
    assert embedding.engine.table("users").tobytes() == state["users"]["embedding"].tobytes()
    other = build("TPUEmbeddingV2", {**SHAPES, "users": (36, 5)})
    before = other.engine.table("movies").copy()
    with pytest.raises(CheckpointError, match=r"table 'users' \[37, 5\]; this object's is \[36, 5\]"):
        tf.train.Checkpoint(embedding=other).restore(prefix)
    assert other.engine.table("movies").tobytes() == before.tobytes()


def test_embedding_layouts_are_tensorflows_stacking():
    embedding = build("TPUEmbeddingV2", output_shape=[8])
    layouts = embedding.embedding_layouts
    assert {n: (x.stacked_table_name, x.sparse_core_shard_rotation) for n, x in layouts.items()} == {
        "movies": ("movies_users", 0),
        "users": ("movies_users", 0),  # one chip: rotation 4 % 4
        "tags": ("tags", 0),
    }
    assert layouts["users"].unsharded_padded_shape == (64, 8) and layouts["users"].sparse_core_shard_row_offset == 32
