"""Multi-dimensional output shapes of the mid-level API (TensorFlow's rules, tf_semantics.md §1.7 and §1.8).

Every input becomes `prod(output_shape)` samples of the engine; activations are
`output_shape + [dim]`. Each case is checked against the engine's reference
kernels (`engine/lookup.py`, `engine/optimizers.py`) on samples written out by
hand, for the lookup and for where the gradients go, on `TPUEmbedding`,
`TPUEmbeddingV2`, `TPUEmbeddingForServing` and `serving_embedding_lookup`.
"""

from __future__ import annotations

import contextlib
import types
import warnings

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.lowering import optimizer_spec
from tpu_embedding_shim.engine.lookup import pooled_backward, pooled_lookup, sequence_backward, sequence_lookup
from tpu_embedding_shim.engine.optimizers import apply_sparse_update
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.spec import FeatureSpec

E = tf.tpu.experimental.embedding
V, D = 12, 3


def random_table(seed=0):
    return np.random.default_rng(seed).normal(size=(V, D)).astype(np.float32)


def make_table(combiner, seed=0, name="t"):
    values = random_table(seed)
    return E.TableConfig(
        vocabulary_size=V, dim=D, combiner=combiner, name=name, initializer=lambda shape, dtype=None: values.copy()
    )


def sparse(indices, values, shape, weights=None):
    ids = tf.SparseTensor(indices, values, shape)
    return ids if weights is None else (ids, tf.SparseTensor(indices, weights, shape))


def unchecked_sparse(indices, values, shape):
    """A SparseTensor-like object that skips the constructor's checks (any object with these attributes works)."""
    return types.SimpleNamespace(indices=np.array(indices), values=np.array(values), dense_shape=np.array(shape))


REF = FeatureSpec(name="ref", table="t", num_buckets=V)


def ragged_rows(rows, weights=None):
    ids = tf.RaggedTensor.from_row_lengths([i for r in rows for i in r], [len(r) for r in rows])
    w = None
    if weights is not None:
        w = tf.RaggedTensor.from_row_lengths(
            np.array([x for r in weights for x in r], np.float32), [len(r) for r in weights]
        )
    return to_ragged(ids, w, feature=REF)


# Each case: the FeatureConfig's arguments, the input (ids, weights), the output shape, and the reference:
# ("pooled", samples, sample weights): one combined row per sample, row-major over the output shape;
# ("positions", rows per example, k): one row per position < k of each example, zeros where there is none.
CASES = {
    "dense [B]": dict(config={}, ids=np.array([3, 0, 7]), shape=(3,), ref=("pooled", [[3], [0], [7]], None)),
    "dense [B, 1]": dict(config={}, ids=np.array([[3], [5]]), shape=(2,), ref=("pooled", [[3], [5]], None)),
    "dense [B, T, 1]": dict(
        config={},
        ids=np.arange(6).reshape(2, 3, 1) + 1,
        shape=(2, 3),
        ref=("pooled", [[1], [2], [3], [4], [5], [6]], None),
    ),
    "dense [B, T, U, 1] (sequence feature: one id per sample)": dict(
        config={"max_sequence_length": 4},
        ids=np.array([[[[1], [2]], [[3], [-1]]], [[[4], [5]], [[6], [7]]]]),
        shape=(2, 2, 2),
        ref=("pooled", [[1], [2], [3], [], [4], [5], [6], [7]], None),
        serving=False,
    ),
    "sparse [B, N]": dict(
        config={},
        ids=sparse([[0, 0], [0, 3], [2, 1]], [1, 2, 9], [3, 4], weights=[0.5, 2.0, 1.0]),
        shape=(3,),
        ref=("pooled", [[1, 2], [], [9]], [[0.5, 2.0], [], [1.0]]),
    ),
    "sparse [B, N], max_sequence_length=3": dict(
        config={"max_sequence_length": 3},
        ids=sparse([[0, 0], [0, 2], [0, 4], [1, 1]], [1, 2, 3, 4], [2, 5]),
        shape=(2, 3),
        ref=("positions", [[1, -1, 2, -1, 3], [-1, 4]], 3),
    ),
    "sparse [B, T, N]": dict(
        config={},
        ids=sparse(
            [[0, 0, 0], [0, 0, 2], [0, 2, 1], [1, 1, 0], [1, 1, 1]],
            [1, 2, 3, 4, 5],
            [2, 3, 4],
            weights=[1.0, 3.0, 2.0, 0.5, 0.25],
        ),
        shape=(2, 3),
        ref=("pooled", [[1, 2], [], [3], [], [4, 5], []], [[1.0, 3.0], [], [2.0], [], [0.5, 0.25], []]),
    ),
    "sparse [B, T, N], max_sequence_length ignored": dict(
        config={"max_sequence_length": 5},
        ids=sparse([[0, 1, 0], [0, 1, 1], [1, 0, 3]], [6, 7, 8], [2, 2, 4]),
        shape=(2, 2),
        ref=("pooled", [[], [6, 7], [8], []], None),
    ),
    "sparse [A, B, C, N]": dict(
        config={},
        ids=sparse([[0, 0, 1, 0], [1, 1, 0, 2], [1, 1, 0, 0], [0, 1, 1, 1]], [1, 2, 3, 4], [2, 2, 2, 3]),
        shape=(2, 2, 2),
        ref=("pooled", [[], [1], [], [4], [], [], [3, 2], []], None),
    ),
    "ragged [B, (N)]": dict(
        config={}, ids=tf.ragged.constant([[1, 2, 3], [], [4]]), shape=(3,), ref=("pooled", [[1, 2, 3], [], [4]], None)
    ),
    "ragged [B, (N)], max_sequence_length=2": dict(
        config={"max_sequence_length": 2},
        ids=tf.ragged.constant([[1, 2, 3], [], [4]]),
        shape=(3, 2),
        ref=("positions", [[1, 2, 3], [], [4]], 2),
    ),
    "ragged, output_shape [2, 3] = B: combined, reshaped": dict(
        config={"output_shape": [2, 3]},
        ids=(
            tf.ragged.constant([[1, 2], [3], [], [4, 5, 6], [7], [8, 8]]),
            tf.ragged.constant([[1.0, 2.0], [0.5], [], [1.0, 1.0, 2.0], [3.0], [1.0, 1.0]]),
        ),
        shape=(2, 3),
        ref=(
            "pooled",
            [[1, 2], [3], [], [4, 5, 6], [7], [8, 8]],
            [[1.0, 2.0], [0.5], [], [1.0, 1.0, 2.0], [3.0], [1.0, 1.0]],
        ),
    ),
    "ragged, output_shape [2, 3] = 3 * B: one id per position, weights ignored": dict(
        config={"output_shape": [2, 3]},
        ids=(tf.ragged.constant([[1, 2, 3, 4], [5]]), tf.ragged.constant([[2.0, 2.0, 2.0, 2.0], [4.0]])),
        shape=(2, 3),
        ref=("positions", [[1, 2, 3, 4], [5]], 3),
    ),
    "ragged, output_shape [6] = 3 * B (rank 1)": dict(
        config={"output_shape": [6]},
        ids=tf.ragged.constant([[1], [2, 3, 4, 5]]),
        shape=(6,),
        ref=("positions", [[1], [2, 3, 4, 5]], 3),
    ),
    "ragged, output_shape [2, 2] on a sequence feature wins over max_sequence_length": dict(
        config={"output_shape": [2, 2], "max_sequence_length": 5},
        ids=tf.ragged.constant([[1, 2, 3], [4]]),
        shape=(2, 2),
        ref=("positions", [[1, 2, 3], [4]], 2),
    ),
    "sparse [B, N], output_shape [2, 2] = 2 * B: one id per position": dict(
        config={"output_shape": [2, 2]},
        ids=sparse([[0, 1], [0, 3], [1, 0]], [1, 2, 3], [2, 4]),
        shape=(2, 2),
        ref=("positions", [[-1, 1, -1, 2], [3]], 2),
    ),
    "dense [6], output_shape [2, 3]": dict(
        config={"output_shape": [2, 3]},
        ids=np.array([1, 2, 3, 4, 5, 6]),
        shape=(2, 3),
        ref=("pooled", [[1], [2], [3], [4], [5], [6]], None),
    ),
    "sparse [2, 3, N], output_shape [6]": dict(
        config={"output_shape": [6]},
        ids=sparse([[0, 0, 0], [1, 2, 1]], [1, 2], [2, 3, 2]),
        shape=(6,),
        ref=("pooled", [[1], [], [], [], [], [2]], None),
    ),
}

COMBINERS = ["sum", "mean", "sqrtn"]


def split(case):
    ids = case["ids"]
    return ids if isinstance(ids, tuple) else (ids, None)


def reference(table, case, combiner):
    """(activation, backward) from the engine's reference kernels on the hand-written samples."""
    mode, rows, extra = case["ref"]
    shape = case["shape"]
    if mode == "pooled":
        batch = ragged_rows(rows, extra)
        out = pooled_lookup(table, batch, combiner)

        def backward(grad):
            return pooled_backward(batch, combiner, grad.reshape(-1, D))
    else:  # one row per position: the sequence kernels, with -1 marking an empty position
        values = [i for r in rows for i in r]
        batch = to_ragged(tf.RaggedTensor.from_row_lengths(values, [len(r) for r in rows]), feature=REF)
        out, _ = sequence_lookup(table, batch, extra)

        def backward(grad):
            return sequence_backward(batch, extra, grad.reshape(len(rows), extra, D))

    return out.reshape(shape + (D,)), backward


def feature_config(case, combiner, seed=0):
    return {"f": E.FeatureConfig(table=make_table(combiner, seed), **case["config"])}


def lookup_and_train(cls, case, combiner, optimizer, grad):
    config = feature_config(case, combiner)
    ids, weights = split(case)
    features, w = {"f": ids}, (None if weights is None else {"f": weights})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cls is E.TPUEmbedding:
            embedding = E.TPUEmbedding(config, optimizer=optimizer)
            embedding.enqueue(features, w)
            activation = embedding.dequeue()["f"]
            before = embedding.variables[config["f"].table]
            embedding.apply_gradients({"f": grad})
        else:
            with tf.distribute.TPUStrategy().scope():  # TPUEmbeddingV2 requires one, as in TensorFlow
                embedding = E.TPUEmbeddingV2(config, optimizer=optimizer)
            activations, preserved = embedding(features, w)
            activation = activations["f"]
            before = embedding.variables[config["f"].table]
            embedding.apply_gradients({"f": grad}, preserved)
            csr = preserved["t"]
            assert csr.sample_count == int(np.prod(case["shape"]))
            assert np.all(csr.sorted_sample_ids < csr.sample_count)
    return activation, before, embedding.variables[config["f"].table]


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("cls", [E.TPUEmbedding, E.TPUEmbeddingV2])
@pytest.mark.parametrize("name", list(CASES))
def test_lookup_and_gradients_match_the_reference_kernels(name, cls, combiner):
    case = CASES[name]
    table = random_table()
    want, backward = reference(table, case, combiner)
    grad = np.random.default_rng(1).normal(size=case["shape"] + (D,)).astype(np.float32)
    optimizer = E.Adagrad(0.3)
    activation, before, after = lookup_and_train(cls, case, combiner, optimizer, grad)
    assert activation.shape == case["shape"] + (D,)
    np.testing.assert_allclose(activation, want, rtol=1e-6, atol=1e-6)
    row_ids, row_grads = backward(grad)
    new, slots = apply_sparse_update(
        optimizer_spec(optimizer),
        before["parameters"],
        {"accumulators": before["accumulators"]},
        row_ids,
        row_grads,
        step=0,
    )
    np.testing.assert_allclose(after["parameters"], new, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(after["accumulators"], slots["accumulators"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.get("serving", True)])
def test_serving_gives_exactly_the_training_lookups(name, combiner):
    case = CASES[name]
    config = feature_config(case, combiner)
    ids, weights = split(case)
    features, w = {"f": ids}, (None if weights is None or config["f"].max_sequence_length else {"f": weights})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        training = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
        training.enqueue(features, w, training=False)
        trained = training.dequeue()["f"]
        tables = training.embedding_tables
        served = E.serving_embedding_lookup(features, w, tables, config)["f"]
        serving = E.TPUEmbeddingForServing(feature_config(case, combiner), optimizer=None)
        by_object = serving.embedding_lookup(features, w)["f"]
        with tf.distribute.TPUStrategy().scope():
            v2 = E.TPUEmbeddingV2(feature_config(case, combiner), optimizer=E.SGD(0.1))
        by_v2 = v2(features, w)[0]["f"]
    assert trained.shape == case["shape"] + (D,)
    np.testing.assert_array_equal(served, trained)
    np.testing.assert_array_equal(by_object, trained)
    np.testing.assert_array_equal(by_v2, trained)


# Priority: FeatureConfig.output_shape > build() shapes > auto-detected --------------------------------------


def test_build_input_shapes_give_multi_dimensional_output_shapes():
    table = make_table("sum")
    config = {
        "dense": E.FeatureConfig(table=table),
        "sparse": E.FeatureConfig(table=table),
        "seq": E.FeatureConfig(table=table, max_sequence_length=4),
    }
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    embedding.build(per_replica_input_shapes={"dense": [2, 3, 1], "sparse": [2, 3, 5], "seq": [2, 7]})
    assert embedding._output_shapes == [(2, 3), (2, 4), (2, 3)]  # tf.nest order: dense, seq, sparse
    with pytest.raises(ValueError, match="Inconsistent shape for feature sparse"):  # same rank, other shape
        embedding.enqueue(
            {
                "dense": np.ones((2, 3, 1), np.int64),
                "seq": tf.ragged.constant([[1], [2]]),
                "sparse": sparse([[0, 0, 0]], [1], [3, 2, 5]),
            }
        )
    # A rank-1 incoming shape under a larger stored one: TensorFlow skips its check and the stored shape decides.
    embedding.enqueue(
        {
            "dense": np.arange(6) + 1,
            "seq": tf.ragged.constant([[1], [2]]),
            "sparse": tf.ragged.constant([[1], [2, 3], [], [4], [5], [6]]),
        }
    )
    out = embedding.dequeue()
    assert out["dense"].shape == out["sparse"].shape == (2, 3, D) and out["seq"].shape == (2, 4, D)
    np.testing.assert_allclose(out["sparse"].reshape(6, D)[1], random_table()[2] + random_table()[3], rtol=1e-6)


def test_the_first_batch_fixes_a_multi_dimensional_output_shape():
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=make_table("sum"))}, optimizer=E.SGD(0.1))
    embedding.enqueue({"f": sparse([[0, 0, 0]], [1], [2, 3, 4])})
    embedding.enqueue({"f": sparse([[1, 2, 3]], [1], [2, 3, 9])})  # only the last dimension may change
    with pytest.raises(ValueError, match=r"Inconsistent shape for feature f: this batch gives output shape \[3, 2\]"):
        embedding.enqueue({"f": sparse([[0, 0, 0]], [1], [3, 2, 4])})
    with pytest.raises(ValueError, match="Inconsistent shape"):
        embedding.enqueue({"f": np.ones((2, 4, 1), np.int64)})


def test_feature_config_output_shape_wins_over_build_shapes_of_lower_rank():
    config = {"f": E.FeatureConfig(table=make_table("sum"), output_shape=[2, 3])}
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    embedding.build(per_replica_input_shapes={"f": [6, 4]})  # [6] vs [2, 3]: TensorFlow's check skips it
    assert embedding._output_shapes == [(2, 3)]
    other = E.TPUEmbedding({"f": E.FeatureConfig(table=make_table("sum"), output_shape=[2, 3])}, optimizer=E.SGD(0.1))
    with pytest.raises(ValueError, match="Inconsistent shape"):
        other.build(per_replica_input_shapes={"f": [3, 2, 4]})
    # [None, 4] gives [None]: TensorFlow skips the check (lower rank) and keeps the configured, fully defined shape.
    other.build(per_replica_input_shapes={"f": [None, 4]})
    assert other._output_shapes == [(2, 3)]
    unset = E.TPUEmbedding({"f": E.FeatureConfig(table=make_table("sum"))}, optimizer=E.SGD(0.1))
    with pytest.raises(ValueError, match="not fully defined"):
        unset.build(per_replica_input_shapes={"f": [None, 4]})


def test_per_replica_batch_size_ignores_max_sequence_length_when_output_shape_is_set():
    config = {
        "f": E.FeatureConfig(table=make_table("sum"), max_sequence_length=3, output_shape=[4]),
        "g": E.FeatureConfig(table=make_table("sum", seed=1, name="u"), max_sequence_length=3),
    }
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    embedding.build(per_replica_batch_size=4)
    assert embedding._output_shapes == [(4,), (4, 3)]


# Errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [E.TPUEmbedding, E.TPUEmbeddingV2])
def test_a_gradient_of_the_wrong_shape_names_the_feature_and_the_expected_shape(cls):
    config = {"f": E.FeatureConfig(table=make_table("sum"))}
    with tf.distribute.TPUStrategy().scope() if cls is E.TPUEmbeddingV2 else contextlib.nullcontext():
        embedding = cls(config, optimizer=E.SGD(0.1))
    features = {"f": sparse([[0, 0, 0], [1, 2, 3]], [1, 2], [2, 3, 4])}
    if cls is E.TPUEmbedding:
        embedding.enqueue(features)
        embedding.dequeue()
        apply = lambda g: embedding.apply_gradients(g)  # noqa: E731
    else:
        _, preserved = embedding(features)
        apply = lambda g: embedding.apply_gradients(g, preserved)  # noqa: E731
    before = embedding.embedding_tables[config["f"].table]
    for wrong in [np.ones((6, D), np.float32), np.ones((2, 3, D + 1), np.float32), np.ones((3, 2, D), np.float32)]:
        with pytest.raises(ValueError, match=r"at path f\. Expected shape \[2, 3, 3\]"):
            apply({"f": wrong})
    np.testing.assert_array_equal(embedding.embedding_tables[config["f"].table], before)
    with pytest.warns(UserWarning, match=r"zero gradient of shape \[2, 3, 3\]"):
        apply({"f": None})


def test_tf23_batch_size_is_checked_against_the_leading_dimension_of_the_output_shape():
    config = {"f": E.FeatureConfig(table=make_table("sum"))}
    embedding = E.TPUEmbedding(config, 2, E.SGD(0.1))
    embedding.enqueue({"f": sparse([[0, 0, 0]], [1], [2, 3, 4])})
    with pytest.raises(ValueError, match="batch_size=2"):
        E.TPUEmbedding(config, 2, E.SGD(0.1)).enqueue({"f": sparse([[0, 0, 0]], [1], [3, 2, 4])})
    per_position = E.TPUEmbedding({"f": E.FeatureConfig(table=make_table("sum"), output_shape=[2, 3])}, 2, E.SGD(0.1))
    per_position.enqueue({"f": tf.ragged.constant([[1], [2]])})


def test_features_may_have_their_own_batch_sizes_and_shapes():
    table = make_table("sum")
    config = [E.FeatureConfig(table=table), E.FeatureConfig(table=table, output_shape=[2, 2])]
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(1.0))
    embedding.enqueue([np.array([1, 2, 3]), tf.ragged.constant([[4, 5, 6], [7]])])
    out = embedding.dequeue()
    assert [a.shape for a in out] == [(3, D), (2, 2, D)]
    embedding.apply_gradients([np.ones((3, D), np.float32), np.ones((2, 2, D), np.float32)])
    moved = np.flatnonzero(embedding.embedding_tables[table][:, 0] != random_table()[:, 0])
    assert moved.tolist() == [1, 2, 3, 4, 5, 7]  # 6 was truncated (position 2 >= k = 2)
    served = E.serving_embedding_lookup(
        [np.array([1]), tf.ragged.constant([[4, 5, 6], [7]])], None, embedding.embedding_tables, config
    )
    assert [a.shape for a in served] == [(1, D), (2, 2, D)]


@pytest.mark.parametrize("output_shape, rows", [([5], 2), ([2, 3], 4), ([4], 3)])
def test_a_ragged_output_shape_that_is_no_multiple_of_the_batch_is_a_value_error(output_shape, rows):
    config = {"f": E.FeatureConfig(table=make_table("sum"), output_shape=output_shape)}
    ids = {"f": tf.ragged.constant([[1]] * rows)}
    with pytest.raises(ValueError, match="neither the input data batch size"):
        E.TPUEmbedding(config, optimizer=E.SGD(0.1)).enqueue(ids)
    with pytest.raises(ValueError, match="should be the factor of the input data batch size"):  # TF's serving text
        E.serving_embedding_lookup(ids, None, {config["f"].table: random_table()}, config)
    with tf.distribute.TPUStrategy().scope(), pytest.raises(ValueError, match="neither the input data batch size"):
        E.TPUEmbeddingV2(config, optimizer=E.SGD(0.1))(ids)


@pytest.mark.parametrize("ids", [np.arange(4), sparse([[0, 0, 0]], [1], [2, 2, 3]), np.ones((4, 2, 1), np.int64)])
def test_a_dense_or_rank_3_sparse_input_must_have_as_many_samples_as_the_output_shape(ids):
    config = {"f": E.FeatureConfig(table=make_table("sum"), output_shape=[2, 3])}
    with pytest.raises(ValueError, match=r"output_shape is \[2, 3\] \(6 outputs\)"):
        E.TPUEmbedding(config, optimizer=E.SGD(0.1)).enqueue({"f": ids})
    with pytest.raises(ValueError, match="element counts must be equal"):
        E.serving_embedding_lookup({"f": ids}, None, {config["f"].table: random_table()}, config)


def test_weights_of_a_per_position_lookup_are_ignored_with_a_warning():
    config = {"f": E.FeatureConfig(table=make_table("sum"), output_shape=[2, 2])}
    ids, w = tf.ragged.constant([[1, 2], [3]]), tf.ragged.constant([[5.0, 5.0], [5.0]])
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    with pytest.warns(UserWarning, match="Weights of input f are ignored"):
        embedding.enqueue({"f": ids}, {"f": w})
    np.testing.assert_allclose(embedding.dequeue()["f"].reshape(4, D)[:3], random_table()[[1, 2, 3]], rtol=1e-6)


def test_rank_3_sparse_input_of_a_sequence_feature_warns_that_max_sequence_length_is_ignored():
    config = {"f": E.FeatureConfig(table=make_table("sum"), max_sequence_length=4)}
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    with pytest.warns(UserWarning, match="max_sequence_length=4 of input f is ignored"):
        embedding.enqueue({"f": sparse([[0, 0, 0]], [1], [2, 3, 4])})
    assert embedding.dequeue()["f"].shape == (2, 3, D)


@pytest.mark.parametrize(
    "ids, weights, match",
    [
        (
            unchecked_sparse([[0, 3, 0]], [1], [2, 3, 4]),
            None,
            r"sparse index \[0, 3, 0\] is outside dense_shape \[2, 3, 4\]",
        ),
        (unchecked_sparse([[0, 0, -1]], [1], [2, 3, 4]), None, "outside dense_shape"),
        (sparse([[0, 0, 0]], [1], [2, 3, 4]), sparse([[0, 1, 0]], [1.0], [2, 3, 4]), "other indices"),
        (sparse([[0, 0, 0]], [1], [2, 3, 4]), sparse([[0, 0, 0]], [1.0], [2, 3, 5]), "another dense_shape"),
        (sparse([[0, 0, 0]], [1], [2, 3, 4]), tf.ragged.constant([[1.0]]), "does not match type"),
        (sparse([[0, 0, 0]], [V], [2, 3, 4]), None, "out of range"),
        (np.ones((2, 3, 2), np.int64), None, "last dimension as 1"),
        (np.array(3), None, "rank 1 and above"),
        (sparse([[0]], [1], [2]), None, "rank 2 and above"),
    ],
)
def test_bad_multi_dimensional_inputs_are_value_errors(ids, weights, match):
    config = {"f": E.FeatureConfig(table=make_table("sum"))}
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    with pytest.raises(ValueError, match=match):
        embedding.enqueue({"f": ids}, None if weights is None else {"f": weights})
    with pytest.raises(ValueError, match=match):
        E.serving_embedding_lookup(
            {"f": ids}, None if weights is None else {"f": weights}, {config["f"].table: random_table()}, config
        )
    assert not embedding._queue


# TensorFlow's TPUEmbedding (tensorflow/python/tpu/tpu_embedding_v2.py) refuses a rank-0 dense input in `build`
# (`_get_output_shapes_from_input_shapes`) and `enqueue` (`_get_input_shape_for_tensor`), and a rank-1 sparse one in
# `enqueue` (`_get_input_shape_for_sparse_tensor`): a Keras layer built from a rank-1 sparse `tf.keras.Input` builds,
# then its first call is refused. The messages are TensorFlow's, with the fix.


def test_a_rank_0_build_shape_is_refused_as_on_a_tpu_and_builds_nothing():
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=make_table("sum"))}, optimizer=E.SGD(0.1))
    message = (
        r"^Received input tensor of shape \(\)\. Rank must be 1 and above \(input f\)\. Each input is a batch: "
        r"give dense ids of shape \[B\] or \[B, 1\], one id per example\.$"
    )
    with pytest.raises(ValueError, match=message):
        embedding.build(per_replica_input_shapes={"f": []})
    assert embedding._engine is None
    embedding.build(per_replica_input_shapes={"f": [4]})  # the batch the message asks for
    assert embedding._output_shapes == [(4,)]


def test_a_rank_1_sparse_input_is_refused_after_a_rank_1_build_as_a_keras_layer_meets_it():
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=make_table("sum"))}, optimizer=E.SGD(0.1))
    embedding.build(per_replica_input_shapes={"f": [4]})  # a sparse tf.keras.Input(batch_size=4, shape=())
    rank_1 = sparse([[0], [2]], [1, 5], [4])
    refusal = r"^Only rank 2 and above sparse tensor is supported, find rank 1 sparse "
    with pytest.raises(ValueError, match=refusal) as e:
        embedding.enqueue({"f": rank_1})
    assert "for input f. Give a SparseTensor of shape [B, N]" in str(e.value)
    assert not embedding._queue and embedding.engine.global_step == 0
    # The fix the message gives: one id per example, in its own row -> the [4] output shape built.
    embedding.enqueue({"f": sparse([[0, 0], [2, 0]], [1, 5], [4, 1])})
    out = embedding.dequeue()["f"]
    np.testing.assert_array_equal(out, np.stack([random_table()[1], np.zeros(D), random_table()[5], np.zeros(D)]))


def test_a_rank_0_dense_input_is_refused_with_the_fix():
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=make_table("sum"))}, optimizer=E.SGD(0.1))
    with pytest.raises(ValueError, match=r"^Only rank 1 and above dense tensor is supported, find rank 0 ") as e:
        embedding.enqueue({"f": np.array(3)})
    fix = "for input f. Each input is a batch: give dense ids of shape [B] or [B, 1], one id per example."
    assert str(e.value).endswith(fix)
    embedding.enqueue({"f": np.array([3])})
    np.testing.assert_array_equal(embedding.dequeue()["f"], random_table()[[3]])


def test_two_ids_at_one_position_of_a_per_position_sparse_input_are_a_value_error():
    config = {"f": E.FeatureConfig(table=make_table("sum"), output_shape=[2, 2])}
    repeated = sparse([[0, 1], [0, 1]], [1, 2], [2, 3])
    with pytest.raises(ValueError, match="appears more than once"):
        E.TPUEmbedding(config, optimizer=E.SGD(0.1)).enqueue({"f": repeated})
