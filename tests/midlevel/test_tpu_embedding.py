"""TPUEmbedding: every method, TensorFlow's input rules and every error case of its page."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.lowering import optimizer_spec
from tpu_embedding_shim.engine.lookup import pooled_lookup, sequence_lookup
from tpu_embedding_shim.engine.optimizers import apply_sparse_update
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.spec import FeatureSpec

E = tf.tpu.experimental.embedding
V, D = 10, 2


def row_ids_table(name=None, combiner="sum", optimizer=None, vocabulary_size=V, dim=D):
    """Row i is [i, i, ...]: every lookup can be read by eye."""
    return E.TableConfig(
        vocabulary_size=vocabulary_size,
        dim=dim,
        initializer=E.RowIdInitializer(),
        combiner=combiner,
        name=name,
        optimizer=optimizer,
    )


def nested_config():
    """A dict holding a list and a tuple: {'a': [f, f_seq], 'b': (g,)} over two tables."""
    t1, t2 = row_ids_table(), row_ids_table(combiner="mean")
    return {
        "b": (E.FeatureConfig(table=t2),),
        "a": [E.FeatureConfig(table=t1), E.FeatureConfig(table=t1, max_sequence_length=3)],
    }


def nested_features():
    return {
        "b": (tf.ragged.constant([[1, 3], [5]]),),
        "a": [np.array([4, 7]), tf.SparseTensor([[0, 0], [0, 2], [1, 5]], [1, 2, 9], [2, 6])],
    }


def simple(optimizer=None, **kwargs):
    table = row_ids_table()
    embedding = E.TPUEmbedding(
        feature_config={"f": E.FeatureConfig(table=table)}, optimizer=optimizer or E.SGD(1.0), **kwargs
    )
    return embedding, table


# Construction ----------------------------------------------------------------------------------


def test_tf23_signature_with_batch_size_and_later_signature_without():
    config = {"f": E.FeatureConfig(table=row_ids_table())}
    old = E.TPUEmbedding(config, 4, E.SGD(0.1), False, True)
    assert old._batch_size == 4
    new = E.TPUEmbedding(config, E.SGD(0.1), True)
    assert new._batch_size is None and new._pipeline_execution_with_tensor_core
    keywords = E.TPUEmbedding(feature_config=config, optimizer=E.SGD(0.1), pipeline_execution_with_tensor_core=True)
    assert keywords.engine.spec.pipeline_execution_with_tensor_core
    # No global optimizer, positionally (each table has its own; keras-rs calls it so): None is not a batch size.
    own = E.TableConfig(vocabulary_size=4, dim=2, optimizer=E.Adagrad(0.1), name="own")
    per_table = E.TPUEmbedding({"f": E.FeatureConfig(table=own)}, None, True)
    assert per_table._batch_size is None and per_table._pipeline_execution_with_tensor_core
    assert own.optimizer == E.Adagrad(0.1)


@pytest.mark.parametrize("optimizer", ["sgd", tf.tpu.experimental.AdagradParameters(0.1), 0.1, False, True])
def test_unsupported_optimizer_is_a_value_error(optimizer):
    with pytest.raises(ValueError, match="unsupported optimizer class"):
        E.TPUEmbedding(feature_config=E.FeatureConfig(table=row_ids_table()), optimizer=optimizer)


def test_no_optimizer_is_allowed_outside_a_strategy_but_not_under_tpu_strategy():
    embedding = E.TPUEmbedding(feature_config=E.FeatureConfig(table=row_ids_table()), optimizer=None)
    assert embedding.variables[next(iter(embedding.variables))].keys() == {"parameters"}
    embedding.enqueue(np.array([1]))
    embedding.dequeue()
    with pytest.raises(RuntimeError, match="no optimizer"):
        embedding.apply_gradients(np.zeros((1, D), np.float32))
    with tf.distribute.TPUStrategy().scope(), pytest.raises(ValueError, match="unsupported optimizer class"):
        E.TPUEmbedding(feature_config=E.FeatureConfig(table=row_ids_table()), optimizer=None)


def test_missing_optimizer_and_bad_batch_size():
    config = E.FeatureConfig(table=row_ids_table())
    with pytest.raises(TypeError, match="optimizer"):
        E.TPUEmbedding(config, 8)
    with pytest.raises(ValueError, match="batch_size"):
        E.TPUEmbedding(config, 0, E.SGD(0.1))


def test_tables_are_named_and_given_the_global_optimizer_by_mutation_as_tensorflow_does():
    own = E.Adagrad(0.5)
    t_own, t_global = row_ids_table(optimizer=own), row_ids_table()
    sgd = E.SGD(0.1)
    E.TPUEmbedding(feature_config=[E.FeatureConfig(table=t_global), E.FeatureConfig(table=t_own)], optimizer=sgd)
    assert (t_global.name, t_own.name) == ("table_0", "table_1")
    assert t_global.optimizer is sgd and t_own.optimizer is own


def test_duplicate_table_names_are_a_value_error():
    config = [E.FeatureConfig(table=row_ids_table(name="t")), E.FeatureConfig(table=row_ids_table(name="t"))]
    with pytest.raises(ValueError, match="unique name"):
        E.TPUEmbedding(feature_config=config, optimizer=E.SGD(0.1))


def test_feature_config_must_hold_feature_configs():
    with pytest.raises(ValueError, match="FeatureConfig"):
        E.TPUEmbedding(feature_config={"f": row_ids_table()}, optimizer=E.SGD(0.1))


def test_table_level_optimizer_overrides_the_global_one():
    t_own, t_global = row_ids_table(optimizer=E.SGD(2.0)), row_ids_table()
    embedding = E.TPUEmbedding(
        feature_config={"a": E.FeatureConfig(table=t_own), "b": E.FeatureConfig(table=t_global)},
        optimizer=E.Adagrad(0.5, initial_accumulator_value=1.0),
    )
    assert sorted(embedding.variables[t_own]) == ["parameters"]
    assert sorted(embedding.variables[t_global]) == ["accumulators", "parameters"]
    embedding.enqueue({"a": np.array([3]), "b": np.array([3])})
    embedding.dequeue()
    embedding.apply_gradients({"a": np.ones((1, D), np.float32), "b": np.ones((1, D), np.float32)})
    tables = embedding.embedding_tables
    np.testing.assert_allclose(tables[t_own][3], 3 - 2.0)
    np.testing.assert_allclose(tables[t_global][3], 3 - 0.5 / np.sqrt(2.0), rtol=1e-6)


# enqueue / dequeue ---------------------------------------------------------------------------------


def test_nested_structures_in_and_out_with_dense_sparse_and_ragged_inputs():
    config = nested_config()
    embedding = E.TPUEmbedding(feature_config=config, optimizer=E.SGD(0.1))
    embedding.enqueue(nested_features())
    out = embedding.dequeue()
    assert list(out) == ["b", "a"] and isinstance(out["a"], list) and isinstance(out["b"], tuple)
    np.testing.assert_array_equal(out["a"][0], [[4, 4], [7, 7]])  # dense [B] -> [B, D]
    assert out["a"][1].shape == (2, 3, D)  # sparse sequence -> [B, L, D]
    np.testing.assert_array_equal(out["a"][1][..., 0], [[1, 0, 2], [0, 0, 0]])  # position 5 truncated
    np.testing.assert_array_equal(out["b"][0], [[2, 2], [5, 5]])  # ragged, mean


def test_activations_equal_the_reference_lookup_kernels():
    t = E.TableConfig(vocabulary_size=V, dim=3, combiner="sqrtn", initializer=tf.random_normal_initializer(seed=3))
    embedding = E.TPUEmbedding(
        feature_config=[E.FeatureConfig(table=t), E.FeatureConfig(table=t, max_sequence_length=2)], optimizer=E.SGD(0.1)
    )
    ids = tf.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 3]], [2, 2, 5, 9], [3, 4])
    weights = tf.SparseTensor(ids.indices, [0.5, 2.0, 1.0, 3.0], ids.dense_shape)
    embedding.enqueue([ids, ids], weights=[weights, None])
    pooled, sequence = embedding.dequeue()
    table = embedding.embedding_tables[t]
    batch = to_ragged(ids, weights, feature=FeatureSpec(name="x", table="t", num_buckets=V))
    np.testing.assert_array_equal(pooled, pooled_lookup(table, batch, "sqrtn"))
    np.testing.assert_array_equal(sequence, sequence_lookup(table, batch, 2)[0])


@pytest.mark.parametrize(
    "ids,expected",
    [
        (np.array([3, 1]), [[3, 3], [1, 1]]),
        (np.array([[3], [1]]), [[3, 3], [1, 1]]),
        ([3, 1], [[3, 3], [1, 1]]),
        ([[3, 4], [1]], [[7, 7], [1, 1]]),  # ragged lists
        (tf.ragged.constant([[3, 4], [1]]), [[7, 7], [1, 1]]),
        (tf.SparseTensor([[0, 0], [0, 1], [1, 0]], [3, 4, 1], [2, 2]), [[7, 7], [1, 1]]),
    ],
    ids=["dense_b", "dense_b1", "list_b", "ragged_lists", "ragged", "sparse"],
)
def test_every_input_form(ids, expected):
    embedding, _ = simple()
    embedding.enqueue({"f": ids})
    np.testing.assert_array_equal(embedding.dequeue()["f"], expected)


def test_dense_input_for_a_sequence_feature_gives_one_row_per_example_and_trains():
    table = row_ids_table()
    embedding = E.TPUEmbedding(feature_config=E.FeatureConfig(table=table, max_sequence_length=4), optimizer=E.SGD(1.0))
    embedding.enqueue(np.array([[2], [6]]))
    np.testing.assert_array_equal(embedding.dequeue(), [[2, 2], [6, 6]])
    embedding.apply_gradients(np.ones((2, D), np.float32))
    np.testing.assert_array_equal(embedding.embedding_tables[table][[2, 6], 0], [1, 5])


def test_weights_in_the_structure_of_the_features():
    t = row_ids_table(combiner="mean")
    config = {"x": E.FeatureConfig(table=t), "y": E.FeatureConfig(table=t)}
    embedding = E.TPUEmbedding(feature_config=config, optimizer=E.SGD(0.1))
    ids = tf.ragged.constant([[1, 5]])
    embedding.enqueue({"x": ids, "y": ids}, weights={"x": tf.ragged.constant([[3.0, 1.0]]), "y": None})
    out = embedding.dequeue()
    np.testing.assert_allclose(out["x"], [[2.0, 2.0]])  # (3 * 1 + 1 * 5) / 4
    np.testing.assert_allclose(out["y"], [[3.0, 3.0]])


@pytest.mark.parametrize(
    "features,error,match",
    [
        ({"b": (np.array([1]),), "a": [np.array([1])]}, ValueError, "2 items"),
        ({"b": (np.array([1]),)}, ValueError, "keys"),
        ({"b": [np.array([1])], "a": [np.array([1]), np.array([1])]}, TypeError, "tuple"),
        ([np.array([1])], TypeError, "dict"),
        ({"b": np.array([1]), "a": [np.array([1]), np.array([1])]}, ValueError, "nested structure"),
    ],
    ids=["short_list", "missing_key", "list_for_tuple", "list_for_dict", "leaf_for_tuple"],
)
def test_enqueue_structure_errors_are_tf_nest_errors(features, error, match):
    embedding = E.TPUEmbedding(feature_config=nested_config(), optimizer=E.SGD(0.1))
    with pytest.raises(error, match=match):
        embedding.enqueue(features)


@pytest.mark.parametrize(
    "ids,weights,match",
    [
        (np.array(3), None, "rank 1 and above"),
        (np.array([[1, 2], [3, 4]]), None, "last dimension as 1"),
        (np.array([1, 2]), np.array([1.0, 1.0]), "Weight specified for dense input"),
        (tf.SparseTensor([[0, 0]], [1], [2, 2]), tf.ragged.constant([[1.0], []]), "does not match type input"),
        (
            tf.ragged.constant([[1], [2]]),
            tf.SparseTensor([[0, 0], [1, 0]], [1.0, 1.0], [2, 1]),
            "does not match type input",
        ),
        (tf.SparseTensor([[0]], [1], [2]), None, "rank 2 and above"),
        ("ids", None, "unknown type"),
        ({"nested": np.array([1])}, None, "unknown type"),
        (np.array([1, V]), None, "out of range"),
    ],
    ids=[
        "rank0",
        "dense_last_dim",
        "dense_weights",
        "sparse_vs_ragged_weights",
        "ragged_vs_sparse_weights",
        "sparse_rank1",
        "string",
        "dict",
        "id_out_of_range",
    ],
)
def test_enqueue_input_errors_are_value_errors(ids, weights, match):
    embedding, _ = simple()
    with pytest.raises(ValueError, match=match):
        embedding.enqueue({"f": ids}, weights=None if weights is None else {"f": weights})
    with pytest.raises(RuntimeError):  # nothing was queued
        embedding.dequeue()


def test_float_ids_are_a_type_error():
    embedding, _ = simple()
    with pytest.raises(TypeError, match="integers"):
        embedding.enqueue({"f": np.array([1.0, 2.0])})


def test_batch_size_must_be_the_configured_one():
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=row_ids_table())}, 4, E.SGD(0.1))
    with pytest.raises(ValueError, match="batch_size=4"):
        embedding.enqueue({"f": np.arange(3)})
    embedding.enqueue({"f": np.arange(4)})


def test_later_batches_must_keep_the_first_batch_size_and_features_may_differ():
    # TensorFlow checks each feature's output shape on its own; features need not share a batch size.
    embedding = E.TPUEmbedding(feature_config=[E.FeatureConfig(table=row_ids_table())] * 2, optimizer=E.SGD(0.1))
    embedding.enqueue([np.arange(2), np.arange(3)])
    assert [a.shape for a in embedding.dequeue()] == [(2, D), (3, D)]
    embedding.enqueue([np.arange(2), np.arange(3)])
    with pytest.raises(ValueError, match="Inconsistent shape"):
        embedding.enqueue([np.arange(3), np.arange(3)])


def test_enqueue_takes_a_tpu_device_and_refuses_others():
    embedding, _ = simple()
    embedding.enqueue({"f": np.arange(2)}, device="/job:worker/task:0/device:TPU:0")
    with pytest.raises(ValueError, match="Non-TPU device"):
        embedding.enqueue({"f": np.arange(2)}, device="/device:CPU:0")


def test_dequeue_before_enqueue_is_a_runtime_error():
    embedding, _ = simple()
    with pytest.raises(RuntimeError, match="unbuilt"):
        embedding.dequeue()
    embedding.build()
    with pytest.raises(RuntimeError, match="nothing enqueued"):
        embedding.dequeue()


def test_batches_are_dequeued_in_order_and_looked_up_at_dequeue_time():
    embedding, _table = simple()
    embedding.enqueue({"f": np.array([1])})
    embedding.enqueue({"f": np.array([1])})
    assert embedding.dequeue()["f"][0, 0] == 1.0
    embedding.apply_gradients({"f": np.ones((1, D), np.float32)})
    assert embedding.dequeue()["f"][0, 0] == 0.0  # the second lookup sees the first update


def test_an_untrained_training_batch_warns_at_the_next_dequeue():
    embedding, _ = simple()
    embedding.enqueue({"f": np.array([1])})
    embedding.enqueue({"f": np.array([1])})
    embedding.dequeue()
    with pytest.warns(UserWarning, match="never applied"):
        embedding.dequeue()


# apply_gradients -----------------------------------------------------------------------------------


def test_apply_gradients_updates_match_the_reference_optimizer():
    optimizer = E.FTRL(learning_rate=0.3, l1_regularization_strength=0.01)
    table = E.TableConfig(vocabulary_size=V, dim=3, initializer=tf.random_normal_initializer(seed=4))
    embedding = E.TPUEmbedding(feature_config=E.FeatureConfig(table=table), optimizer=optimizer)
    before = embedding.variables[table]
    ids = tf.ragged.constant([[1, 1, 4], [7]])
    grad = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    embedding.enqueue(ids)
    embedding.dequeue()
    embedding.apply_gradients(grad)
    batch = to_ragged(ids, feature=FeatureSpec(name="f", table="t", num_buckets=V))
    from tpu_embedding_shim.engine.lookup import pooled_backward

    row_ids, row_grads = pooled_backward(batch, "mean", grad)
    want, want_slots = apply_sparse_update(
        optimizer_spec(optimizer),
        before["parameters"],
        {k: v for k, v in before.items() if k != "parameters"},
        row_ids,
        row_grads,
        step=0,
    )
    after = embedding.variables[table]
    np.testing.assert_allclose(after["parameters"], want, rtol=1e-6)
    for slot in ("accumulators", "linears"):
        np.testing.assert_allclose(after[slot], want_slots[slot], rtol=1e-6)


def test_apply_gradients_before_build_or_dequeue_is_a_runtime_error():
    embedding, _ = simple()
    with pytest.raises(RuntimeError, match="unbuilt"):
        embedding.apply_gradients({"f": np.ones((1, D), np.float32)})
    embedding.enqueue({"f": np.array([1])})
    with pytest.raises(RuntimeError, match="no dequeued batch"):
        embedding.apply_gradients({"f": np.ones((1, D), np.float32)})


def test_apply_gradients_after_an_inference_enqueue_is_a_runtime_error():
    embedding, table = simple()
    embedding.enqueue({"f": np.array([1])}, training=False)
    embedding.dequeue()
    with pytest.raises(RuntimeError, match="training=False"):
        embedding.apply_gradients({"f": np.ones((1, D), np.float32)})
    np.testing.assert_array_equal(embedding.embedding_tables[table][1], [1, 1])


def test_apply_gradients_twice_for_one_batch_is_a_runtime_error():
    embedding, _ = simple()
    embedding.enqueue({"f": np.array([1])})
    embedding.dequeue()
    embedding.apply_gradients({"f": np.ones((1, D), np.float32)})
    with pytest.raises(RuntimeError, match="no dequeued batch"):
        embedding.apply_gradients({"f": np.ones((1, D), np.float32)})


@pytest.mark.parametrize(
    "gradients,error,match",
    [
        ({"f": np.ones((1, D + 1), np.float32)}, ValueError, r"Expected shape \[1, 2\]"),
        ({"f": np.ones((2, D), np.float32)}, ValueError, "Found gradient of shape"),
        ({"f": [[1.0, 1.0]]}, ValueError, "non-tensor type"),
        ({"f": np.ones((1, D), np.float32), "g": None}, ValueError, "keys"),
        ([np.ones((1, D), np.float32)], TypeError, "dict"),
        ({"f": np.full((1, D), np.nan, np.float32)}, ValueError, "NaN"),
    ],
    ids=["wrong_dim", "wrong_batch", "list", "extra_key", "list_for_dict", "nan"],
)
def test_bad_gradients_raise_and_change_nothing(gradients, error, match):
    embedding, table = simple()
    embedding.enqueue({"f": np.array([1])})
    embedding.dequeue()
    with pytest.raises(error, match=match):
        embedding.apply_gradients(gradients)
    np.testing.assert_array_equal(embedding.embedding_tables[table], E.RowIdInitializer()((V, D)))
    embedding.apply_gradients({"f": np.ones((1, D), np.float32)})  # the batch can still be trained on


def test_sequence_gradient_shape_is_batch_length_dim():
    table = row_ids_table()
    embedding = E.TPUEmbedding(feature_config=E.FeatureConfig(table=table, max_sequence_length=3), optimizer=E.SGD(1.0))
    embedding.enqueue(tf.ragged.constant([[1, 2], [3]]))
    embedding.dequeue()
    with pytest.raises(ValueError, match=r"Expected shape \[2, 3, 2\]"):
        embedding.apply_gradients(np.ones((2, D), np.float32))
    embedding.apply_gradients(np.ones((2, 3, D), np.float32))
    np.testing.assert_array_equal(embedding.embedding_tables[table][[1, 2, 3], 0], [0, 1, 2])


def _zero_gradient_run(optimizer):
    table = E.TableConfig(vocabulary_size=4, dim=1, initializer=tf.constant_initializer(1.0))
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=optimizer)
    embedding.enqueue({"f": np.array([0, 1])})
    embedding.dequeue()
    embedding.apply_gradients({"f": np.ones((2, 1), np.float32)})
    before = embedding.embedding_tables[table][:, 0]
    embedding.enqueue({"f": tf.ragged.constant([[1], []])})  # the batch size stays 2; only row 1 is looked up
    embedding.dequeue()
    with pytest.warns(UserWarning, match="No gradient passed for feature f"):
        embedding.apply_gradients({"f": None})
    return before, embedding.embedding_tables[table][:, 0]


def test_none_gradient_is_a_zero_gradient_with_a_warning():
    before, after = _zero_gradient_run(E.SGD(0.1))  # SGD: no change at all
    np.testing.assert_array_equal(after, before)
    before, after = _zero_gradient_run(E.Adagrad(0.1))
    np.testing.assert_array_equal(after, before)


def test_none_gradient_moves_rows_under_adam_lazy_only_the_looked_up_ones():
    before, after = _zero_gradient_run(E.Adam(0.1, lazy_adam=True))
    moved = np.flatnonzero(after != before).tolist()
    assert moved == [1]  # row 1 was looked up: its momentum moves it; row 0 was not
    before, after = _zero_gradient_run(E.Adam(0.1, lazy_adam=False))
    moved = np.flatnonzero(after != before).tolist()
    assert moved == [0, 1]  # non-lazy Adam updates every row (rows 2, 3 have zero momentum)


def test_callable_learning_rate_is_evaluated_once_per_apply_gradients():
    calls = []

    def learning_rate():
        calls.append(1)
        return 0.5 * len(calls)

    optimizer = E.SGD(learning_rate=learning_rate)
    t1, t2 = row_ids_table(), row_ids_table()
    embedding = E.TPUEmbedding(
        feature_config=[E.FeatureConfig(table=t1), E.FeatureConfig(table=t2)], optimizer=optimizer
    )
    for step in range(3):
        embedding.enqueue([np.array([5]), np.array([5])])
        embedding.dequeue()
        embedding.apply_gradients([np.ones((1, D), np.float32), np.ones((1, D), np.float32)])
        assert len(calls) == step + 1  # two tables, one shared callable: one call
    np.testing.assert_allclose(embedding.embedding_tables[t1][5], 5 - (0.5 + 1.0 + 1.5))


def test_slot_variable_creation_fn_sets_initial_slots():
    seen = {}

    def create_slots(table_variable, slot_names, slot_initializers):
        seen["args"] = (table_variable.shape, list(slot_names), [init((1, 1))[0, 0] for init in slot_initializers])
        return {name: np.full(table_variable.shape, 0.25 * (i + 1)) for i, name in enumerate(slot_names)}

    table = row_ids_table()
    embedding = E.TPUEmbedding(
        feature_config=E.FeatureConfig(table=table), optimizer=E.Adam(0.1, slot_variable_creation_fn=create_slots)
    )
    variables = embedding.variables[table]
    assert seen["args"] == ((V, D), ["momenta", "velocities"], [0.0, 0.0])
    np.testing.assert_array_equal(variables["momenta"], np.full((V, D), 0.25))
    np.testing.assert_array_equal(variables["velocities"], np.full((V, D), 0.5))


@pytest.mark.parametrize(
    "returned,match",
    [
        (lambda shape: {"accumulators": np.zeros((1, 1))}, "shape"),
        (lambda shape: {"wrong": np.zeros(shape)}, "slot names"),
        (lambda shape: [np.zeros(shape)], "slot names"),
    ],
)
def test_slot_variable_creation_fn_results_are_checked(returned, match):
    optimizer = E.Adagrad(0.1, slot_variable_creation_fn=lambda table, names, inits: returned(table.shape))
    embedding = E.TPUEmbedding(feature_config=E.FeatureConfig(table=row_ids_table()), optimizer=optimizer)
    with pytest.raises(ValueError, match=match):
        embedding.build()


# build, tables, variables ----------------------------------------------------------------------------


def test_build_with_input_shapes_or_batch_size_fixes_the_output_shapes():
    embedding = E.TPUEmbedding(feature_config=nested_config(), optimizer=E.SGD(0.1))
    embedding.build(per_replica_input_shapes={"b": ([2, 4],), "a": [[2], [2, 6]]})
    assert embedding._output_shapes == [(2,), (2, 3), (2,)]  # tf.nest order: a/0, a/1 (sequence), b/0
    embedding.build(per_replica_batch_size=5)  # a second build does nothing
    with pytest.raises(ValueError, match="Inconsistent shape"):
        embedding.enqueue({"b": (tf.ragged.constant([[1]] * 3),), "a": [np.arange(3), tf.ragged.constant([[1]] * 3)]})
    other = E.TPUEmbedding(feature_config=nested_config(), optimizer=E.SGD(0.1))
    other.build(per_replica_batch_size=2)
    other.enqueue(nested_features())
    assert other.dequeue()["a"][1].shape == (2, 3, D)


def test_build_shapes_must_agree_with_the_feature_config_output_shape():
    embedding = E.TPUEmbedding(
        feature_config=E.FeatureConfig(table=row_ids_table(), output_shape=[4]), optimizer=E.SGD(0.1)
    )
    with pytest.raises(ValueError, match="Inconsistent shape"):
        embedding.build(per_replica_batch_size=3)
    with pytest.raises(ValueError, match="Inconsistent shape"):
        embedding.enqueue(np.arange(3))
    embedding.enqueue(np.arange(4))


def test_embedding_tables_and_variables_are_keyed_by_table_config_with_tf_slot_names():
    t1, t2 = row_ids_table(), row_ids_table(optimizer=E.FTRL(0.1))
    embedding = E.TPUEmbedding(
        feature_config=[E.FeatureConfig(table=t1), E.FeatureConfig(table=t2)], optimizer=E.Adam(0.1)
    )
    assert list(embedding.embedding_tables) == [t1, t2]
    np.testing.assert_array_equal(embedding.embedding_tables[t1], E.RowIdInitializer()((V, D)))
    assert sorted(embedding.variables[t1]) == ["momenta", "parameters", "velocities"]
    assert sorted(embedding.variables[t2]) == ["accumulators", "linears", "parameters"]
    np.testing.assert_array_equal(embedding.variables[t2]["accumulators"], np.full((V, D), 0.1, np.float32))
    embedding.embedding_tables[t1][:] = 99  # copies: the engine is not changed through them
    assert embedding.embedding_tables[t1][0, 0] == 0


def test_works_outside_any_strategy_and_under_the_emulated_one_alike():
    results = []
    for scope in (None, tf.distribute.TPUStrategy()):
        if scope is None:
            embedding, table = simple()
        else:
            with scope.scope():
                embedding, table = simple()
        assert ("emulated TPUStrategy" in repr(embedding)) == (scope is not None)
        embedding.enqueue({"f": np.array([2, 3])})
        embedding.dequeue()
        embedding.apply_gradients({"f": np.ones((2, D), np.float32)})
        results.append(embedding.embedding_tables[table])
    np.testing.assert_array_equal(results[0], results[1])


def test_no_warning_on_a_normal_step():
    embedding, _ = simple()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        embedding.enqueue({"f": np.array([2])})
        embedding.dequeue()
        embedding.apply_gradients({"f": np.ones((1, D), np.float32)})
