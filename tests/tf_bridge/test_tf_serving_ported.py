"""TensorFlow 2.15's CPU tests of `TPUEmbeddingForServing`, re-expressed against the bridge.

Each test names the case of TensorFlow's
tensorflow/python/tpu/tpu_embedding_for_serving_test.py (class
`TPUEmbeddingForServingTest`) that it ports: the same tables (two tables set
from one 32-value constant), the same batches, the same expected values
computed in numpy from the tables' `.numpy()`, and TensorFlow's messages
where its test asserts one. Each lookup runs eagerly and inside
`tf.function`.
"""

import numpy as np
import pytest
import tensorflow as real_tf

import tpu_embedding_shim.tensorflow as tf

E = tf.tpu.experimental.embedding

BATCH = 4  # TensorFlow's data_batch_size
WATCHED = ([[0, 0], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0]], [0, 0, 1, 0, 1, 1], [1, 2, 2, 1], 2)
FAVORITED = ([[0, 0], [0, 1], [1, 0], [2, 0], [3, 0], [3, 1]], [0, 1, 1, 0, 0, 1], [2, 1, 1, 2], 2)
FRIENDS = ([[0, 0], [1, 0], [1, 1], [1, 2], [2, 0], [3, 0], [3, 1], [3, 2]], [3, 0, 1, 2, 3, 0, 1, 2], [1, 3, 1, 3], 3)
FEATURES = (WATCHED, FAVORITED, FRIENDS)


def tables():
    """setUp: 'video' [8, 4] sum and 'user' [16, 2] mean, both from the values 0..31 in row-major order."""
    initializer = real_tf.constant_initializer(np.arange(32, dtype=np.float64))
    video = E.TableConfig(vocabulary_size=8, dim=4, initializer=initializer, combiner="sum", name="video")
    user = E.TableConfig(vocabulary_size=16, dim=2, initializer=initializer, combiner="mean", name="user")
    return video, user


def feature_config():
    video, user = tables()
    return (
        E.FeatureConfig(table=video, name="watched"),
        E.FeatureConfig(table=video, name="favorited"),
        E.FeatureConfig(table=user, name="friends"),
    )


def mid_level(config=None, optimizer="sgd"):
    """`_create_mid_level`: SGD(0.1) over TensorFlow's three features."""
    return E.TPUEmbeddingForServing(
        feature_config=config or feature_config(), optimizer=E.SGD(learning_rate=0.1) if optimizer else None
    )


def dense(dtype=real_tf.int32):
    return tuple(real_tf.constant(values, dtype=dtype) for _, values, _, _ in FEATURES)


def sparse(dtype=real_tf.int32):
    return tuple(
        real_tf.SparseTensor(indices, real_tf.constant(values, dtype=dtype), [BATCH, width])
        for indices, values, _, width in FEATURES
    )


def ragged(dtype=real_tf.int32):
    return tuple(
        real_tf.RaggedTensor.from_row_lengths(real_tf.constant(values, dtype=dtype), lengths)
        for _, values, lengths, _ in FEATURES
    )


def both_ways(embedding, features, weights=None):
    """The lookup eagerly and inside tf.function: the same numbers (returns the eager one)."""
    eager = embedding(features, weights=weights)
    traced = real_tf.function(lambda f, w: embedding(f, weights=w))(features, weights)
    for a, b in zip(real_tf.nest.flatten(eager), real_tf.nest.flatten(traced)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    return eager


def pooled(table, values, row_starts, weights=None, mean=False):
    """What TensorFlow's tests compute: `np.add.reduceat` of the looked-up (weighted) rows, divided for mean."""
    weights = np.ones(len(values)) if weights is None else np.asarray(weights)
    rows = table[np.asarray(values)] * weights[:, None]
    out = np.add.reduceat(rows, row_starts)
    return out / np.add.reduceat(weights, row_starts)[:, None] if mean else out


def row_starts(lengths):
    return np.concatenate([[0], np.cumsum(lengths)[:-1]])


def test_cpu_dense_lookup():
    embedding = mid_level()
    results = both_ways(embedding, dense())
    for result, feature, config in zip(results, dense(), feature_config()):
        table = embedding.embedding_tables[embedding._table_config[0 if config.table.name == "video" else 1]]
        np.testing.assert_allclose(result.numpy(), table.numpy()[feature.numpy()])


def test_cpu_dense_lookup_with_weights():
    with pytest.raises(ValueError, match="Weight specified for .*, but input is dense."):
        mid_level()(dense(), weights=dense(real_tf.float32))


@pytest.mark.parametrize(
    "weighted", [False, True], ids=["test_cpu_sparse_lookup", "test_cpu_sparse_lookup_with_weights"]
)
def test_cpu_sparse_lookup(weighted):
    embedding = mid_level()
    weights = sparse(real_tf.float32) if weighted else None
    results = both_ways(embedding, sparse(), weights)
    for result, (_, values, lengths, _), table in zip(results, FEATURES, _tables_of(embedding)):
        expected = pooled(table, values, row_starts(lengths), values if weighted else None, mean=table.shape[1] == 2)
        np.testing.assert_allclose(result.numpy(), expected)


def test_cpu_sparse_lookup_with_non_sparse_weights():
    with pytest.raises(ValueError, match="but it does not match type of the input which is"):
        mid_level()(sparse(), weights=dense(real_tf.float32))


def test_cpu_ragged_lookup_with_weights():
    embedding = mid_level()
    results = both_ways(embedding, ragged(), ragged(real_tf.float32))
    for result, (_, values, lengths, _), table in zip(results, FEATURES, _tables_of(embedding)):
        expected = pooled(table, values, row_starts(lengths), values, mean=table.shape[1] == 2)
        np.testing.assert_allclose(result.numpy(), expected)


def test_cpu_invalid_structure_for_features():
    with pytest.raises(ValueError):
        mid_level()(sparse()[:2], weights=None)


def test_cpu_invalid_structure_for_weights():
    with pytest.raises(ValueError):
        mid_level()(sparse(), weights=dense(real_tf.float32)[:2])


def sequence_golden(table, indices, values, max_sequence_length):
    """`_numpy_sequence_lookup`: positions >= max_sequence_length dropped, each id's row at its position."""
    out = np.zeros([BATCH, max_sequence_length, table.shape[1]])
    for index, value in zip(np.asarray(indices), np.asarray(values)):
        if index[1] < max_sequence_length:
            out[index[0], index[1]] = table[value]
    return out


@pytest.mark.parametrize(
    "kind", ["sparse", "ragged"], ids=["test_cpu_sequence_lookup_sparse", "test_cpu_sequence_lookup_ragged"]
)
def test_cpu_sequence_lookup(kind):
    _, user = tables()
    embedding = mid_level((E.FeatureConfig(table=user, name="friends", max_sequence_length=2),))
    features = (sparse() if kind == "sparse" else ragged())[2:3]
    result = both_ways(embedding, features)
    as_sparse = features[0] if kind == "sparse" else features[0].to_sparse()
    golden = sequence_golden(embedding.embedding_tables[user].numpy(), as_sparse.indices, as_sparse.values, 2)
    np.testing.assert_allclose(result[0].numpy(), golden)


@pytest.mark.parametrize(
    "output_shape", [[2, 2], [2, 4]], ids=["test_cpu_high_dimensional_lookup_ragged", "..._sequence_lookup_ragged"]
)
def test_cpu_high_dimensional_lookup_ragged(output_shape):
    _, user = tables()
    embedding = mid_level((E.FeatureConfig(table=user, name="friends", output_shape=output_shape),))
    result = both_ways(embedding, ragged()[2:3])
    assert result[0].shape.as_list() == output_shape + [2]


def test_cpu_high_dimensional_invalid_lookup_ragged():
    _, user = tables()
    embedding = mid_level((E.FeatureConfig(table=user, name="friends", output_shape=[3]),))
    with pytest.raises(ValueError, match="Output shape set in the FeatureConfig should be the factor"):
        embedding(ragged()[2:3], weights=None)


def test_cpu_no_optimizer():
    video, _ = tables()
    embedding = mid_level((E.FeatureConfig(table=video, name="watched", max_sequence_length=2),), optimizer=None)
    embedding.build()
    assert list(embedding._variables[video.name].keys()) == ["parameters"]


def test_cpu_multiple_creation():
    _, user = tables()
    config = (E.FeatureConfig(table=user, name="friends", max_sequence_length=2),)
    one, two = mid_level(config), mid_level(config)
    one.build()
    two.build()
    assert one.embedding_tables[user] is not two.embedding_tables[user]
    assert one.embedding_tables[user].name == two.embedding_tables[user].name == "user:0"


def _tables_of(embedding):
    """Each feature's table as numpy, in TensorFlow's feature order (video, video, user)."""
    video, user = embedding._table_config
    return [embedding.embedding_tables[t].numpy() for t in (video, video, user)]


# Beyond TensorFlow's cases: what its tests rely on the tables being ------------------------------


def test_the_tables_are_tensorflow_variables_that_assign_and_train():
    """`embedding_tables` values are `tf.Variable`s named after the tables; an assigned value is what the next
    lookup reads, and a GradientTape's gradient reaches the table as TensorFlow's own CPU lookup's does."""
    embedding = mid_level()
    video, user = embedding._table_config
    variable = embedding.embedding_tables[video]
    assert isinstance(variable, real_tf.Variable) and variable.trainable and variable.shape == (8, 4)
    assert sorted(embedding._variables) == ["user", "video"] and list(embedding._variables["video"]) == ["parameters"]
    variable.assign(np.ones((8, 4), np.float32))
    np.testing.assert_array_equal(embedding(dense())[0].numpy(), np.ones((6, 4)))
    with real_tf.GradientTape() as tape:
        loss = real_tf.reduce_sum(embedding(ragged())[2])
    gradient = real_tf.convert_to_tensor(tape.gradient(loss, embedding.embedding_tables[user]))
    # mean over rows of 1 and 3 ids: each id gets 1 / (ids of its row)
    expected = np.zeros((16, 2), np.float32)
    for ids in ([3], [0, 1, 2], [3], [0, 1, 2]):
        for i in ids:
            expected[i] += 1.0 / len(ids)
    np.testing.assert_allclose(gradient.numpy(), expected, rtol=1e-6)


def test_the_numbers_equal_the_projects_numpy_serving_lookups():
    import tpu_embedding_shim as shim

    numpy_side = shim.tpu.experimental.embedding
    initializer = shim.constant_initializer(np.arange(32, dtype=np.float64))
    video = numpy_side.TableConfig(vocabulary_size=8, dim=4, initializer=initializer, combiner="sum", name="video")
    user = numpy_side.TableConfig(vocabulary_size=16, dim=2, initializer=initializer, combiner="sqrtn", name="user")
    plain = numpy_side.TPUEmbeddingForServing(
        (
            numpy_side.FeatureConfig(table=video, name="w"),
            numpy_side.FeatureConfig(table=user, max_sequence_length=2, name="s"),
            numpy_side.FeatureConfig(table=user, output_shape=[2, 4], name="o"),
        ),
        None,
    )
    mine_video, mine_user = tables()
    mine_user.combiner = "sqrtn"
    mine = mid_level(
        (
            E.FeatureConfig(table=mine_video, name="w"),
            E.FeatureConfig(table=mine_user, max_sequence_length=2, name="s"),
            E.FeatureConfig(table=mine_user, output_shape=[2, 4], name="o"),
        ),
        optimizer=None,
    )
    rows = [[1, -1, 2], [], [7, 7], [0]]
    features = (
        real_tf.ragged.constant(rows),
        real_tf.ragged.constant([[3, 4, 5], [6], [], [-1, 2]]),
        real_tf.ragged.constant([[15, 14, 13], [1], [2, 3, 4, 5, 6], []]),
    )
    weights = (real_tf.ragged.constant([[0.5, 2.0, -1.0], [], [1.0, 3.0], [2.0]]), None, None)
    expected = plain(
        (
            shim.ragged.constant(rows),
            shim.ragged.constant([[3, 4, 5], [6], [], [-1, 2]]),
            shim.ragged.constant([[15, 14, 13], [1], [2, 3, 4, 5, 6], []]),
        ),
        (shim.ragged.constant([[0.5, 2.0, -1.0], [], [1.0, 3.0], [2.0]]), None, None),
    )
    for a, b in zip(both_ways(mine, features, weights), expected):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-6)


def test_an_id_out_of_range_is_the_projects_error_eagerly_and_an_assertion_inside_tf_function():
    embedding = mid_level()
    features = (real_tf.constant([1, 8]), real_tf.constant([0]), real_tf.constant([0]))
    with pytest.raises(ValueError, match=r"id 8 \(example 1\) is out of range \[0, 8\)"):
        embedding(features)
    message = r"watched \(table video\): an id is out of range \[0, 8\)"
    with pytest.raises(real_tf.errors.InvalidArgumentError, match=message):
        real_tf.function(embedding.embedding_lookup)(features)
