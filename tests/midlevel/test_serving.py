"""CPU serving: TPUEmbeddingForServing and serving_embedding_lookup give exactly the training lookups."""

from __future__ import annotations

import numpy as np
import pytest

import tpu_embedding_shim as tf

from .nests import assert_same_structure

E = tf.tpu.experimental.embedding
V, D = 12, 3


def config():
    t_sum = E.TableConfig(
        vocabulary_size=V, dim=D, combiner="sum", name="s", initializer=tf.random_normal_initializer(seed=1)
    )
    t_mean = E.TableConfig(
        vocabulary_size=V, dim=D, combiner="mean", name="m", initializer=tf.random_normal_initializer(seed=2)
    )
    return {
        "dense": E.FeatureConfig(table=t_sum),
        "sparse": E.FeatureConfig(table=t_mean),
        "ragged": [E.FeatureConfig(table=t_sum), E.FeatureConfig(table=t_mean, validate_weights_and_indices=False)],
        "seq_sparse": E.FeatureConfig(table=t_mean, max_sequence_length=3),
        "seq_ragged": E.FeatureConfig(table=t_sum, max_sequence_length=2),
    }


def features():
    return {
        "dense": np.array([[3], [-1], [11]]),
        "sparse": tf.SparseTensor([[0, 0], [0, 3], [2, 1]], [1, 1, 9], [3, 4]),
        "ragged": [tf.ragged.constant([[2, 5], [], [7, 7, 7]]), tf.ragged.constant([[0], [4, 6], [8]])],
        "seq_sparse": tf.SparseTensor([[0, 1], [0, 4], [1, 0], [2, 2]], [3, 4, 5, 6], [3, 5]),  # 4 truncated
        "seq_ragged": tf.ragged.constant([[1, 2, 3], [4], []]),  # 3 truncated
    }


def weights():
    return {
        "dense": None,
        "sparse": tf.SparseTensor([[0, 0], [0, 3], [2, 1]], [0.5, 2.0, 1.5], [3, 4]),
        "ragged": [
            tf.ragged.constant([[1.0, -2.0], [], [0.5, 0.5, 1.0]]),
            tf.ragged.constant([[2.0], [0.0, 1.0], [1.0]]),
        ],
        "seq_sparse": None,
        "seq_ragged": None,
    }


def trained_embedding():
    embedding = E.TPUEmbedding(feature_config=config(), optimizer=E.Adagrad(0.3))
    rng = np.random.default_rng(0)
    for _ in range(3):
        embedding.enqueue(features(), weights=weights())
        activations = embedding.dequeue()
        grads = {
            k: (
                rng.normal(size=v.shape).astype(np.float32)
                if not isinstance(v, list)
                else [rng.normal(size=a.shape).astype(np.float32) for a in v]
            )
            for k, v in activations.items()
        }
        embedding.apply_gradients(grads)
    return embedding


def test_serving_lookups_equal_the_training_lookups(tmp_path):
    embedding = trained_embedding()
    embedding.enqueue(features(), weights=weights(), training=False)
    training = embedding.dequeue()
    assert training["seq_sparse"].shape == (3, 3, D) and training["seq_ragged"].shape == (3, 2, D)

    # serving_embedding_lookup on the trained tables
    served = E.serving_embedding_lookup(features(), weights(), embedding.embedding_tables, embedding._feature_config)
    assert_same_structure(served, training)

    # TPUEmbeddingForServing restored from the training checkpoint (no optimizer: slots are skipped)
    path = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "ckpt"))
    serving = E.TPUEmbeddingForServing(config(), optimizer=None)
    status = tf.train.Checkpoint(embedding=serving).restore(path).assert_existing_objects_matched()
    with pytest.raises(AssertionError, match="accumulators"):  # the slots are left over, as in TensorFlow 2.15
        status.assert_consumed()
    assert_same_structure(serving.embedding_lookup(features(), weights()), training)
    assert_same_structure(serving(features(), weights()), training)
    assert sorted(next(iter(serving.variables.values()))) == ["parameters"]


def test_serving_is_refused_under_a_tpu_strategy():
    with tf.distribute.TPUStrategy().scope(), pytest.raises(RuntimeError, match="Serving on TPU"):
        E.TPUEmbeddingForServing(config(), optimizer=E.SGD(0.1))


def test_serving_object_builds_and_exposes_tables():
    serving = E.TPUEmbeddingForServing(config(), optimizer=E.Adagrad(0.1))
    serving.build()
    serving.build()
    tables = serving.embedding_tables
    assert [t.name for t in tables] == ["s", "m"] and all(v.shape == (V, D) for v in tables.values())
    assert sorted(serving.variables[next(iter(tables))]) == ["accumulators", "parameters"]


@pytest.mark.parametrize(
    "inputs,inputs_weights,match",
    [
        ({"seq": tf.ragged.constant([[1]])}, {"seq": tf.ragged.constant([[1.0]])}, "sequence feature"),
        ({"seq": np.array([1])}, None, "dense tensor for a sequence feature"),
        (
            {"seq": tf.ragged.constant([[1]]), "bag": np.array([1])},
            {"seq": None, "bag": np.array([1.0])},
            "Weight specified for bag, but input is dense",  # TensorFlow's serving message
        ),
        (
            {"seq": tf.ragged.constant([[1]]), "bag": tf.ragged.constant([[1]])},
            {"seq": None, "bag": tf.SparseTensor([[0, 0]], [1.0], [1, 1])},
            "does not match type",
        ),
        ({"seq": tf.ragged.constant([[1]])}, None, "keys"),
    ],
    ids=["weights_for_sequence", "dense_for_sequence", "weights_for_dense", "weight_type", "structure"],
)
def test_serving_checks(inputs, inputs_weights, match):
    table = E.TableConfig(vocabulary_size=V, dim=D, name="t")
    feature_config = {"seq": E.FeatureConfig(table=table, max_sequence_length=2), "bag": E.FeatureConfig(table=table)}
    if "bag" not in inputs and match != "keys":
        feature_config = {"seq": feature_config["seq"]}
    tables = {table: np.zeros((V, D), np.float32)}
    with pytest.raises(ValueError, match=match):
        E.serving_embedding_lookup(inputs, inputs_weights, tables, feature_config)
    serving = E.TPUEmbeddingForServing(feature_config, optimizer=None)
    with pytest.raises(ValueError, match=match):
        serving.embedding_lookup(inputs, inputs_weights)


def test_serving_lookup_tables_are_checked():
    table = E.TableConfig(vocabulary_size=V, dim=D, name="t")
    other = E.TableConfig(vocabulary_size=V, dim=D, name="o")
    feature_config = E.FeatureConfig(table=table)
    with pytest.raises(ValueError, match="no table"):
        E.serving_embedding_lookup(np.array([1]), None, {other: np.zeros((V, D))}, feature_config)
    with pytest.raises(ValueError, match="shape"):
        E.serving_embedding_lookup(np.array([1]), None, {table: np.zeros((V, D + 1))}, feature_config)
    out = E.serving_embedding_lookup(np.array([1, 2]), None, {"t": np.ones((V, D))}, feature_config)
    np.testing.assert_array_equal(out, np.ones((2, D)))  # keyed by name also works
