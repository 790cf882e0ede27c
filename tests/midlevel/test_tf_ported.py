"""TensorFlow 2.15's own mid-level tests, ported: build shapes, constant tables, devices, optimizer equality, reprs.

The cases come from tensorflow/python/tpu/tests/tpu_embedding_base_test.py,
tpu_embedding_v2_correctness_base_test.py, tpu_embedding_for_serving_test.py
and tpu_embedding_v2_utils_test.py; each test names the TF test or behaviour
it ports. Expected values and messages were checked on TensorFlow 2.15.1.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.spec import Constant

E = tf.tpu.experimental.embedding

# TPUEmbeddingBaseTest.setUp: both tables are set from one 32-value constant.
EMBEDDING_VALUES = np.arange(32, dtype=np.float64)
BATCH_SIZE, DATA_BATCH_SIZE = 2, 4
WATCHED = ([[0, 0], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0]], [0, 0, 1, 0, 1, 1], 2)
FAVORITED = ([[0, 0], [0, 1], [1, 0], [2, 0], [3, 0], [3, 1]], [0, 1, 1, 0, 0, 1], 2)
FRIENDS = ([[0, 0], [1, 0], [1, 1], [1, 2], [2, 0], [3, 0], [3, 1], [3, 2]], [3, 0, 1, 2, 3, 0, 1, 2], 3)


def base_feature_config():
    """TPUEmbeddingBaseTest's config: a tuple of three features over 'video' (sum) and 'user' (mean)."""
    initializer = tf.constant_initializer(EMBEDDING_VALUES)
    video = E.TableConfig(vocabulary_size=8, dim=4, initializer=initializer, combiner="sum", name="video")
    user = E.TableConfig(vocabulary_size=16, dim=2, initializer=initializer, combiner="mean", name="user")
    return (
        E.FeatureConfig(table=video, name="watched"),
        E.FeatureConfig(table=video, name="favorited"),
        E.FeatureConfig(table=user, name="friends"),
    )


def high_dimensional_sparse(feature, batch):
    """`_create_high_dimensional_sparse_dataset`'s first global batch: [batch, DATA_BATCH_SIZE, N]."""
    indices, values, width = feature
    rows = [[b] + index for b in range(batch) for index in indices]
    return tf.SparseTensor(rows, values * batch, [batch, DATA_BATCH_SIZE, width])


def sgd_reference(table, sparse, gradient, combiner, learning_rate):
    """The table after one SGD step, from `_compute_gradients_wrt_embedding_table`'s rule."""
    table = table.copy()
    indices = np.asarray(sparse.indices)
    counts = {}
    for index in indices:
        counts[tuple(index[:-1])] = counts.get(tuple(index[:-1]), 0) + 1
    for index, vocabulary_id in zip(indices, np.asarray(sparse.values)):
        sample = tuple(index[:-1])
        scale = 1.0 / counts[sample] if combiner == "mean" else 1.0
        table[vocabulary_id] -= learning_rate * scale * gradient[sample]
    return table


# Items 1 and 2: build(per_replica_input_shapes) -------------------------------------------------------------


@pytest.mark.parametrize("last", ["sizes", "unknown"])
def test_embedding_high_dimensional_sparse_training_after_build_with_a_list_of_shapes(last):
    """TPUEmbeddingCorrectnessBaseTest._test_embedding(sparse, is_high_dimensional, training) with SGD.

    TF builds a tuple `feature_config` from a *list* of TensorShapes, with
    the sparse widths or with `None` as the last dimension.
    """
    config = base_feature_config()
    embedding = E.TPUEmbedding(feature_config=config, optimizer=E.SGD(learning_rate=0.1))
    widths = [2, 2, 3] if last == "sizes" else [None, None, None]
    embedding.build([[BATCH_SIZE, DATA_BATCH_SIZE, w] for w in widths])
    assert embedding._output_shapes == [(BATCH_SIZE, DATA_BATCH_SIZE)] * 3

    features = tuple(high_dimensional_sparse(f, BATCH_SIZE) for f in (WATCHED, FAVORITED, FRIENDS))
    embedding.enqueue(features, training=True)
    watched, favorited, friends = embedding.dequeue()

    # _check_results: core 0's golds, watched and favorited alternating, stacked per example.
    watched_gold0 = np.array([[0, 1, 2, 3], [4, 6, 8, 10]])
    favorited_gold0 = np.array([[4, 6, 8, 10], [4, 5, 6, 7]])
    friends_gold0 = np.array([[6, 7], [2, 3]])
    watched_gold = np.stack([np.concatenate([watched_gold0, favorited_gold0])] * BATCH_SIZE)
    favorited_gold = np.stack([np.concatenate([favorited_gold0, watched_gold0])] * BATCH_SIZE)
    friends_gold = np.stack([np.concatenate([friends_gold0, friends_gold0])] * BATCH_SIZE)
    np.testing.assert_allclose(watched, watched_gold)
    np.testing.assert_allclose(favorited, favorited_gold)
    np.testing.assert_allclose(friends, friends_gold)

    # The loss is the sum over features of mean(sum(activation ** 2, -1)): d loss / d activation = 2a / 8.
    global_batch = BATCH_SIZE * DATA_BATCH_SIZE
    gradients = tuple(2 * a / global_batch for a in (watched, favorited, friends))
    embedding.apply_gradients(gradients)
    video_before, user_before = EMBEDDING_VALUES.reshape(8, 4), EMBEDDING_VALUES.reshape(16, 2)
    video = sgd_reference(video_before, features[0], gradients[0], "sum", 0.1)
    video = sgd_reference(video, features[1], gradients[1], "sum", 0.1)
    user = sgd_reference(user_before, features[2], gradients[2], "mean", 0.1)
    np.testing.assert_allclose(embedding.embedding_tables[config[0].table], video, rtol=1e-6)
    np.testing.assert_allclose(embedding.embedding_tables[config[2].table], user, rtol=1e-6)


def test_build_flattens_the_shapes_and_checks_only_their_count():
    """`nest.assert_same_structure(nest.flatten(shapes), nest.flatten(feature_config))`: only the count matters."""
    table = E.TableConfig(vocabulary_size=8, dim=2, name="t")
    config = {"b": E.FeatureConfig(table=table), "a": (E.FeatureConfig(table=table), E.FeatureConfig(table=table))}
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    embedding.build([[3], [3, 1], (3, 5, 2)])  # tf.nest order: a/0, a/1, b
    assert embedding._output_shapes == [(3,), (3,), (3, 5)]

    for shapes in ([[3], [3]], {"a": [[3], [3]], "b": [3], "c": [3]}):
        other = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
        with pytest.raises(ValueError, match=r"per_replica_input_shapes.*3 features.*Received \d shapes"):
            other.build(shapes)
        assert not other._built


def test_build_takes_tensor_shape_like_objects():
    """TF's tests pass `TensorShape`s: anything with `as_list()` (a real `tf.TensorShape` too) is one shape."""

    class Shape:
        def __init__(self, dims):
            self.dims = dims

        def as_list(self):
            return list(self.dims)

    config = base_feature_config()
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    embedding.build([Shape([2, 4, None]), Shape([2, 4, 2]), Shape([2, 3])])
    assert embedding._output_shapes == [(2, 4), (2, 4), (2,)]


def test_build_drops_an_unknown_last_dimension():
    """`_get_output_shapes_from_input_shapes`: the output shape is the input shape without its last dimension."""
    table = E.TableConfig(vocabulary_size=8, dim=2, name="t")
    config = [
        E.FeatureConfig(table=table),
        E.FeatureConfig(table=table, max_sequence_length=5),
        E.FeatureConfig(table=table, output_shape=[2, 4]),
        E.FeatureConfig(table=table, output_shape=[6]),
    ]
    embedding = E.TPUEmbedding(config, optimizer=E.SGD(0.1))
    # a sequence feature's [B, None] gets max_sequence_length; an unknown size that a FeatureConfig.output_shape
    # fixes is TF's wildcard in `_is_tensor_shape_match`.
    embedding.build([[2, 4, None], [3, None], [2, 4, None], [None, 4]])
    assert embedding._output_shapes == [(2, 4), (3, 5), (2, 4), (6,)]


@pytest.mark.parametrize("shape", [[None], [None, 4], [2, None, 3], [2, None, None]])
def test_build_output_shape_not_fully_defined(shape):
    """`_check_output_shapes_fully_defined`: an unknown size that stays in the output shape is a ValueError."""
    embedding = E.TPUEmbedding(
        [E.FeatureConfig(table=E.TableConfig(vocabulary_size=8, dim=2, name="t"))], optimizer=E.SGD(0.1)
    )
    with pytest.raises(ValueError, match="Input Feature 0 has output shape set as .* which is not fully defined"):
        embedding.build([shape])
    assert not embedding._built


def test_build_unknown_size_must_still_match_the_feature_config_output_shape():
    """`_check_output_shapes`: known sizes must agree with FeatureConfig.output_shape; ranks too."""
    table = E.TableConfig(vocabulary_size=8, dim=2, name="t")
    for shape in ([3, None, 2], [2, 4, 7, None]):
        embedding = E.TPUEmbedding([E.FeatureConfig(table=table, output_shape=[2, 4])], optimizer=E.SGD(0.1))
        with pytest.raises(ValueError, match="Inconsistent shape"):
            embedding.build([shape])


# Item 3: constant_initializer with an array --------------------------------------------------------------------


@pytest.mark.parametrize("make", [tf.constant_initializer, tf.compat.v1.constant_initializer])
def test_constant_initializer_reshapes_an_array_to_the_variable_shape(make):
    """init_ops_v2.Constant's docstring: 8 values fit [2, 4]; a nested list or an N-d array is read row-major."""
    np.testing.assert_array_equal(make(np.arange(6))(shape=(2, 3)), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(make([0, 1, 2, 3, 4, 5, 6, 7])((2, 4)), np.arange(8).reshape(2, 4))
    np.testing.assert_array_equal(make([[1, 2], [3, 4]])(shape=(4, 1)), [[1], [2], [3], [4]])
    np.testing.assert_array_equal(make(np.arange(8).reshape(2, 2, 2))(shape=(4, 2)), np.arange(8).reshape(4, 2))
    assert make(np.arange(6))((2, 3)).dtype == np.float32
    assert make(np.arange(6))((2, 3), np.float64).dtype == np.float64


@pytest.mark.parametrize("make", [tf.constant_initializer, tf.compat.v1.constant_initializer])
@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (6, 2)])
def test_constant_initializer_with_a_size_mismatch_is_a_type_error(make, shape):
    """TF: "... has 6 elements, but got `shape` (2, 2) with 4 elements)", a TypeError."""
    init = make(np.arange(6))
    count = int(np.prod(shape))
    with pytest.raises(
        TypeError,
        match=rf"has 6 elements, but got `shape` \({shape[0]}, {shape[1]}\) with "
        rf"{count} elements",
    ):
        init(shape=shape)


@pytest.mark.parametrize("make", [tf.constant_initializer, tf.compat.v1.constant_initializer])
def test_constant_initializer_scalar_or_single_value_fills_any_shape(make):
    np.testing.assert_array_equal(make(5)(shape=(2, 3)), np.full((2, 3), 5.0))
    np.testing.assert_array_equal(make([5])(shape=(2, 3)), np.full((2, 3), 5.0))
    np.testing.assert_array_equal(make(np.array(2.5))(shape=(2,)), [2.5, 2.5])
    assert make(np.float32(1.5)) == Constant(1.5) and repr(make(0.5)) == "Constant(value=0.5)"


def test_constant_initializer_single_value_of_rank_two_does_not_fill():
    """TF's Fill needs a scalar: [[5]] for a (2, 3) variable is an error (InvalidArgumentError in TF)."""
    with pytest.raises(TypeError, match="has 1 elements"):
        tf.constant_initializer([[5]])(shape=(2, 3))
    np.testing.assert_array_equal(tf.constant_initializer([[5]])(shape=(1, 1)), [[5.0]])


@pytest.mark.parametrize(
    "value,error",
    [({"a": 1}, TypeError), (None, TypeError), ("a", TypeError), ([1, "a"], TypeError), ([[1, 2], [3]], ValueError)],
)
def test_constant_initializer_invalid_value(value, error):
    """TF: a dict or None is a TypeError ("Invalid type for initial value"); ragged lists a ValueError."""
    with pytest.raises(error, match="Argument `value`"):
        tf.constant_initializer(value)


def test_compat_v1_constant_initializer_verify_shape():
    """init_ops.Constant(verify_shape=True): the value's own shape must be the variable's (a TypeError)."""
    with pytest.raises(TypeError, match=r"with shape \(2, 3\), but got shape \(6,\)"):
        tf.compat.v1.constant_initializer(np.arange(6), verify_shape=True)(shape=(2, 3))
    with pytest.raises(TypeError, match=r"with shape \(2, 3\), but got shape \(\)"):
        tf.compat.v1.constant_initializer(2.0, verify_shape=True)(shape=(2, 3))
    ok = tf.compat.v1.constant_initializer(np.arange(6).reshape(2, 3), verify_shape=True)
    np.testing.assert_array_equal(ok(shape=(2, 3)), np.arange(6).reshape(2, 3))


def test_constant_spec_is_frozen_hashable_and_compares_by_values():
    a, b = Constant(np.arange(6)), Constant([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    assert a != b  # same values, other shape
    assert a == Constant(list(range(6))) and hash(a) == hash(Constant(list(range(6))))
    assert a != Constant(np.arange(6) + 1) and len({a, b, Constant(np.arange(6))}) == 2
    as_float32 = Constant(np.arange(6, dtype=np.float32))
    assert as_float32 == a and hash(as_float32) == hash(a) and as_float32.value.dtype == np.float32
    with pytest.raises(AttributeError):
        a.value = 1.0
    with pytest.raises(ValueError):
        a.value[0] = 7.0  # read-only: the spec cannot change under a table that used it
    source = np.arange(4.0)
    c = Constant(source)
    source[0] = 9.0
    assert c.value[0] == 0.0  # a copy of the caller's array
    assert repr(Constant([1, 2])) == "Constant(value=[1.0, 2.0])"
    assert repr(Constant(np.arange(32.0).reshape(8, 4))) == (
        "Constant(value=<float64 array of shape (8, 4): 0.0, 1.0, 2.0, 3.0, ..., 31.0>)"
    )


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=3), st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data()
)
def test_constant_initializer_any_shape_of_the_same_size_is_a_row_major_reshape(value_dims, shape_dims, data):
    """Property: values of any rank fill any shape with as many elements, in row-major order; specs built
    from equal values are equal and hash equally."""
    size = int(np.prod(value_dims))
    values = np.asarray(data.draw(st.lists(st.integers(-50, 50), min_size=size, max_size=size))).reshape(value_dims)
    shape = (
        tuple(shape_dims[:-1]) + (size // int(np.prod(shape_dims[:-1])),)
        if size % int(np.prod(shape_dims[:-1])) == 0
        else (size,)
    )
    init = tf.constant_initializer(values)
    np.testing.assert_array_equal(init(shape), values.reshape(shape))
    same = tf.compat.v1.constant_initializer(values.tolist())
    assert same == init and hash(same) == hash(init)


def test_cpu_sparse_lookup():
    """TPUEmbeddingForServingTest.test_cpu_sparse_lookup: tables set from np.arange(32), sum and mean lookups."""
    config = base_feature_config()
    serving = E.TPUEmbeddingForServing(feature_config=config, optimizer=E.SGD(learning_rate=0.1))
    features = tuple(
        tf.SparseTensor(indices, values, [DATA_BATCH_SIZE, width])
        for indices, values, width in (WATCHED, FAVORITED, FRIENDS)
    )
    results = serving(features, weights=None)
    np.testing.assert_array_equal(serving.embedding_tables[config[0].table], EMBEDDING_VALUES.reshape(8, 4))
    np.testing.assert_array_equal(serving.embedding_tables[config[2].table], EMBEDDING_VALUES.reshape(16, 2))
    for result, feature, (indices, values, _) in zip(results, config, (WATCHED, FAVORITED, FRIENDS)):
        table = serving.embedding_tables[feature.table]
        starts = np.flatnonzero(np.diff([-1] + [i[0] for i in indices]))
        expected = np.add.reduceat(table[values], starts)
        if feature.table.combiner == "mean":
            expected /= np.diff(np.append(starts, len(values)))[:, None]
        np.testing.assert_allclose(result, expected)
    # TF 2.15's numbers for this batch
    np.testing.assert_array_equal(results[2], [[6, 7], [2, 3], [6, 7], [2, 3]])


# Item 4: enqueue(device=...) ---------------------------------------------------------------------------------


def test_enqueue_on_a_worker_device_of_the_strategy():
    """TPUEmbedding.enqueue's docstring: `embedding.enqueue(..., device=strategy.extended.worker_devices[core])`."""
    strategy = tf.distribute.TPUStrategy()
    with strategy.scope():
        embedding = E.TPUEmbedding(feature_config=base_feature_config(), optimizer=E.SGD(0.1))
    features = tuple(
        tf.SparseTensor(indices, values, [DATA_BATCH_SIZE, width])
        for indices, values, width in (WATCHED, FAVORITED, FRIENDS)
    )

    def per_core_enqueue(ctx):
        device = strategy.extended.worker_devices[ctx.replica_id_in_sync_group]
        embedding.enqueue(features, device=device)

    strategy.experimental_distribute_values_from_function(per_core_enqueue)
    np.testing.assert_array_equal(strategy.run(embedding.dequeue)[2], [[6, 7], [2, 3], [6, 7], [2, 3]])
    assert all(d.endswith("/device:TPU:0") for d in strategy.extended.worker_devices)


@pytest.mark.parametrize(
    "device,ok",
    [
        ("/job:worker/replica:0/task:0/device:TPU:2", True),
        ("TPU:0", True),
        ("tpu:1", True),
        ("/device:CPU:0", False),
        ("/job:tpu_worker/replica:0/task:0/device:CPU:0", False),
        ("/cpu:0", False),
        ("/device:tpu:0", False),
        ("", False),
        ("garbage", False),
    ],
)
def test_enqueue_device_type_is_read_as_tf_device_spec_does(device, ok):
    """`DeviceSpec.from_string(device).device_type != "TPU"` is TF's 'Non-TPU device' check."""
    embedding = E.TPUEmbedding(feature_config=base_feature_config(), optimizer=E.SGD(0.1))
    features = (np.arange(2), np.arange(2), np.arange(2))
    if ok:
        embedding.enqueue(features, device=device)
    else:
        with pytest.raises(ValueError, match="Non-TPU device"):
            embedding.enqueue(features, device=device)
        assert not embedding._queue


# Item 5: optimizer equality ------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", [E.SGD, E.Adagrad, E.AdagradMomentum, E.Adam, E.FTRL])
def test_equal_and_hash_function(optimizer):
    """TPUEmbeddingOptimizerTest.test_equal_and_hash_function."""
    opt1, opt2, opt3 = optimizer(0.1), optimizer(0.1), optimizer(0.2)
    assert opt1 == opt2 and hash(opt1) == hash(opt2)
    assert opt1 != opt3 and hash(opt1) != hash(opt3)


def test_optimizer_equality_is_by_every_attribute_as_in_tf():
    """TF 2.15 on the oracle: clipvalue 1.0 equals (-1.0, 1.0); 1 equals 1.0; classes differ; callables by identity."""
    assert E.SGD(0.1, clipvalue=1.0) == E.SGD(0.1, clipvalue=(-1.0, 1.0))
    assert E.SGD(1) == E.SGD(1.0) and hash(E.SGD(1)) == hash(E.SGD(1.0))
    assert E.SGD(0.1) != E.Adagrad(0.1) and E.SGD(0.1) != 0.1
    rate = lambda: 0.1  # noqa: E731
    assert E.SGD(rate) == E.SGD(rate) and E.SGD(rate) != E.SGD(lambda: 0.1)
    assert E.Adam(0.1, lazy_adam=False) != E.Adam(0.1)
    assert len({E.SGD(0.1), E.SGD(0.1), E.SGD(0.2)}) == 2


TF_COMMON_ATTRIBUTES = [
    "learning_rate",
    "use_gradient_accumulation",
    "clip_weight_min",
    "clip_weight_max",
    "clip_gradient_min",
    "clip_gradient_max",
    "weight_decay_factor",
    "multiply_weight_decay_factor_by_learning_rate",
    "slot_variable_creation_fn",
    "low_dimensional_packing_status",
]


@pytest.mark.parametrize(
    "optimizer,own",
    [
        (E.SGD, []),
        (E.Adagrad, ["initial_accumulator_value"]),
        (E.AdagradMomentum, ["momentum", "use_nesterov", "exponent", "beta2", "epsilon"]),
        (E.Adam, ["beta_1", "beta_2", "epsilon", "lazy_adam", "sum_inside_sqrt"]),
        (
            E.FTRL,
            [
                "initial_accumulator_value",
                "learning_rate_power",
                "l1_regularization_strength",
                "l2_regularization_strength",
                "beta",
                "multiply_linear_by_learning_rate",
                "allow_zero_accumulator",
            ],
        ),
    ],
)
def test_optimizer_attributes_are_tfs(optimizer, own):
    """`vars(optimizer)` of TF 2.15 (what its __eq__ and __hash__ go over): no attribute more or less."""
    assert sorted(vars(optimizer(0.1))) == sorted(TF_COMMON_ATTRIBUTES + own)


# Item 6: reprs -----------------------------------------------------------------------------------------------


def test_table_config_repr():
    """ConfigTest.test_table_config_repr (the default initializer prints as None)."""
    table = E.TableConfig(vocabulary_size=2, dim=4, combiner="sum", name="table")
    assert repr(table) == (
        "TableConfig(vocabulary_size=2, dim=4, initializer=None, optimizer=None, "
        "combiner='sum', name='table', quantization_config=None)"
    )


def test_feature_config_repr():
    """ConfigTest.test_feature_config_repr: the output shape prints as a TensorShape."""
    table = E.TableConfig(vocabulary_size=2, dim=4, initializer=None, combiner="sum", name="table")
    feature_config = E.FeatureConfig(table=table, output_shape=[16, 4], name="feature")
    assert repr(feature_config) == (
        "FeatureConfig(table=TableConfig(vocabulary_size=2, dim=4, initializer=None, optimizer=None, "
        "combiner='sum', name='table', quantization_config=None), max_sequence_length=0, "
        "validate_weights_and_indices=True, output_shape=TensorShape([16, 4]), name='feature')"
    )
    unset = E.FeatureConfig(table=E.TableConfig(vocabulary_size=8, dim=4))
    assert repr(unset) == (
        "FeatureConfig(table=TableConfig(vocabulary_size=8, dim=4, initializer=None, optimizer=None, "
        "combiner='mean', name=None, quantization_config=None), max_sequence_length=0, "
        "validate_weights_and_indices=True, output_shape=TensorShape(None), name=None)"
    )


def test_table_config_repr_of_other_initializers_and_optimizers():
    """TF prints a non-default initializer (also a truncated normal of another stddev) and the optimizer."""
    table = E.TableConfig(
        vocabulary_size=8,
        dim=4,
        initializer=tf.compat.v1.truncated_normal_initializer(0.0, 0.25),
        optimizer=E.SGD(0.1),
        combiner="sum",
        name="video",
        quantization_config=E.QuantizationConfig(4, -1.0, 1.0),
    )
    text = repr(table)
    assert text.startswith("TableConfig(vocabulary_size=8, dim=4, initializer=TruncatedNormal(")
    assert f"optimizer={table.optimizer!r}, combiner='sum', name='video', " in text
    assert text.endswith("quantization_config=QuantizationConfig(num_buckets=4, lower=-1.0, upper=1.0))")
    seeded_default = E.TableConfig(
        vocabulary_size=8, dim=4, initializer=tf.compat.v1.truncated_normal_initializer(0.0, 0.5, seed=3)
    )
    assert "initializer=None" in repr(seeded_default)  # TF compares mean and stddev only
