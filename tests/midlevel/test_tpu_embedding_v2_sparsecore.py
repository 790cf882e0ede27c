"""TPUEmbeddingV2 (the SparseCore mid-level API): every method and every error case of its page."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.lowering import optimizer_spec
from tpu_embedding_shim.engine.lookup import pooled_backward, pooled_lookup
from tpu_embedding_shim.engine.optimizers import apply_sparse_update
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.engine.sharding import join_shards
from tpu_embedding_shim.spec import FeatureSpec

E = tf.tpu.experimental.embedding
V, D = 10, 2
STRATEGY = tf.distribute.TPUStrategy()


def v2(*args, **kwargs):
    """A TPUEmbeddingV2 created as TensorFlow requires: in a TPUStrategy scope (the stand-in)."""
    with STRATEGY.scope():
        return E.TPUEmbeddingV2(*args, **kwargs)


def row_ids_table(combiner="sum", name=None, optimizer=None):
    return E.TableConfig(
        vocabulary_size=V, dim=D, initializer=E.RowIdInitializer(), combiner=combiner, name=name, optimizer=optimizer
    )


def make(optimizer=None, **kwargs):
    table = row_ids_table()
    config = {"x": E.FeatureConfig(table=table), "seq": [E.FeatureConfig(table=table, max_sequence_length=2)]}
    return v2(feature_config=config, optimizer=optimizer or E.SGD(1.0), **kwargs), table


FEATURES = {"x": tf.ragged.constant([[1, 2], [3]]), "seq": [tf.ragged.constant([[4, 5, 6], [7]])]}


# Construction and build -----------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adam", tf.tpu.experimental.AdamParameters(0.1)])
@pytest.mark.parametrize("create", [v2, E.TPUEmbeddingV2], ids=["in_scope", "outside"])
def test_unsupported_optimizer_is_a_value_error_even_outside_a_strategy(optimizer, create):
    # TensorFlow checks the configuration (TPUEmbeddingBase) before the strategy.
    with pytest.raises(ValueError, match="unsupported optimizer class"):
        create(feature_config=E.FeatureConfig(table=row_ids_table()), optimizer=optimizer)


def test_created_outside_a_tpu_strategy_is_a_runtime_error_that_says_how_and_changes_nothing():
    table = row_ids_table()
    for scope in (contextlib.nullcontext(), tf.distribute.get_strategy().scope()):
        with (
            scope,
            pytest.raises(
                RuntimeError,
                match=r"should be created under TPUStrategy but found <default "
                r"strategy.*with strategy\.scope\(\)",
            ),
        ):
            E.TPUEmbeddingV2(feature_config=E.FeatureConfig(table=table), optimizer=E.SGD(0.1))
    assert table.name is None and table.optimizer is None  # not renamed table_0, not given the SGD
    embedding = v2(feature_config=E.FeatureConfig(table=table), optimizer=E.SGD(0.1))
    assert table.name == "table_0" and "emulated TPUStrategy" in repr(embedding)


def test_optimizer_none_in_a_strategy_is_a_value_error_unless_every_table_has_its_own():
    with pytest.raises(ValueError, match="unsupported optimizer class"):
        v2(feature_config=E.FeatureConfig(table=row_ids_table()), optimizer=None)
    table = row_ids_table(optimizer=E.Adagrad(0.1))
    embedding = v2(feature_config=E.FeatureConfig(table=table), optimizer=None)
    assert sorted(embedding.variables[table]) == ["accumulators", "parameters"]


@pytest.mark.parametrize(
    "decay",
    [
        dict(weight_decay_factor=0.1),
        dict(weight_decay_factor=0.0),
        dict(weight_decay_factor=0.1, multiply_weight_decay_factor_by_learning_rate=True),
        dict(multiply_weight_decay_factor_by_learning_rate=False),
    ],
    ids=["factor", "factor_zero", "both", "flag_false"],
)
@pytest.mark.parametrize("optimizer_class", [E.SGD, E.Adagrad, E.AdagradMomentum, E.Adam, E.FTRL])
def test_weight_decay_is_not_implemented_as_in_tensorflow_sparsecore(optimizer_class, decay):
    # TensorFlow's TPUEmbeddingV2.__init__ raises for any value that is not None (0.0 and False included).
    plain = row_ids_table(name="plain")
    decayed = row_ids_table(name="decayed", optimizer=optimizer_class(0.1, **decay))
    config = [E.FeatureConfig(table=plain), E.FeatureConfig(table=decayed)]
    with pytest.raises(
        NotImplementedError,
        match=r"weight_decay_factor and multiply_weight_decay_factor_by_"
        r"learning_rate are not supported yet\. But found in table "
        r"decayed setting.*use TPUEmbedding",
    ):
        v2(feature_config=config, optimizer=E.SGD(0.1))
    assert plain.optimizer is None  # the global optimizer was not left on the table
    with pytest.raises(NotImplementedError, match="found in table plain"):
        v2(feature_config=E.FeatureConfig(table=row_ids_table(name="plain")), optimizer=optimizer_class(0.1, **decay))
    # TPUEmbedding has weight decay (docs/semantics.md), and the strategy check comes first in TPUEmbeddingV2.
    E.TPUEmbedding(feature_config=config, optimizer=E.SGD(0.1))
    with pytest.raises(RuntimeError, match="should be created under TPUStrategy"):
        E.TPUEmbeddingV2(
            feature_config=[E.FeatureConfig(table=row_ids_table(optimizer=optimizer_class(0.1, **decay)))],
            optimizer=None,
        )


def test_weight_decay_left_none_is_accepted():
    embedding, table = make(E.Adam(0.1, weight_decay_factor=None, multiply_weight_decay_factor_by_learning_rate=None))
    assert sorted(embedding.variables[table]) == ["momenta", "parameters", "velocities"]


def test_works_under_the_emulated_strategy():
    embedding, _table = make()
    assert "TPUEmbeddingV2" in repr(embedding) and "emulated TPUStrategy" in repr(embedding)
    _activations, preserved = embedding(FEATURES)
    with pytest.warns(UserWarning, match="seq/0"):
        embedding.apply_gradients({"x": np.ones((2, D), np.float32), "seq": [None]}, preserved)


def test_build_is_idempotent_and_creates_tables_and_slots():
    embedding, table = make(E.AdagradMomentum(0.1, momentum=0.9))
    embedding.build()
    embedding.build()
    assert sorted(embedding.variables[table]) == ["accumulators", "momenta", "parameters"]
    np.testing.assert_array_equal(embedding.embedding_tables[table], E.RowIdInitializer()((V, D)))


def test_embedding_table_shards_are_the_mod_shards_the_engine_stores():
    embedding, table = make()
    shards = embedding.embedding_table_shards[table]
    assert len(shards) == 4 and [s.shape[0] for s in shards] == [3, 3, 2, 2]
    assert shards[1][:, 0].tolist() == [1, 5, 9]
    np.testing.assert_array_equal(join_shards(shards, V, "mod"), embedding.embedding_tables[table])


# Lookups --------------------------------------------------------------------------------------------


def test_embedding_lookup_and_call_return_activations_and_preserved_outputs():
    embedding, table = make()
    activations, preserved = embedding.embedding_lookup(FEATURES)
    np.testing.assert_array_equal(activations["x"], [[3, 3], [3, 3]])
    np.testing.assert_array_equal(activations["seq"][0][..., 0], [[4, 5], [7, 0]])
    again, _ = embedding(FEATURES)
    np.testing.assert_array_equal(again["x"], activations["x"])
    csr = preserved[table.name]
    assert csr.sample_count == 2 + 2 * 2  # x: 2 samples; seq: 2 examples x 2 positions
    assert csr.sorted_token_ids.tolist() == [1, 2, 3, 4, 5, 7]
    # Samples in tf.nest order: seq/0 first (example * 2 + position: 0..3), then x (4, 5).
    assert csr.sorted_sample_ids.tolist() == [4, 4, 5, 0, 1, 2]
    assert csr.row_pointers.tolist() == [0, 6] and csr.num_minibatches_per_physical_sparse_core == 1


def test_csr_gains_are_weight_times_combiner_scale():
    table = row_ids_table(combiner="mean", name="m")
    embedding = v2(feature_config=E.FeatureConfig(table=table), optimizer=E.SGD(0.1))
    ids = tf.ragged.constant([[1, 2], [3]])
    _, preserved = embedding(ids, weights=tf.ragged.constant([[1.0, 3.0], [2.0]]))
    np.testing.assert_allclose(preserved["m"].sorted_gains, [0.25, 0.75, 1.0])


def test_enqueue_dequeue_and_preprocess_features_equal_embedding_lookup():
    embedding, _ = make()
    direct, _ = embedding(FEATURES)
    via_queue, _ = embedding.dequeue(embedding.enqueue(FEATURES))
    via_preprocess, _ = embedding.dequeue(embedding.preprocess_features(FEATURES))
    flat = [FEATURES["seq"][0], FEATURES["x"]]  # tf.nest order: seq/0, x
    via_flat, _ = embedding.dequeue(embedding.preprocess_features(flat_inputs=flat, flat_weights=[None, None]))
    for other in (via_queue, via_preprocess, via_flat):
        np.testing.assert_array_equal(other["x"], direct["x"])
        np.testing.assert_array_equal(other["seq"][0], direct["seq"][0])


def test_enqueue_refuses_a_non_tpu_device_and_dequeue_a_foreign_batch():
    embedding, _ = make()
    other, _ = make()
    with pytest.raises(ValueError, match="Non-TPU device"):
        embedding.enqueue(FEATURES, device="/device:CPU:0")
    with pytest.raises(ValueError, match="enqueue"):
        embedding.dequeue(other.enqueue(FEATURES))
    with pytest.raises(ValueError, match="enqueue"):
        embedding.dequeue({"table_0": None})


@pytest.mark.parametrize(
    "features,weights,error,match",
    [
        ({"x": "ids", "seq": [np.array([1, 2])]}, None, ValueError, "unknown type"),
        (
            {"x": tf.ragged.constant([[1], [2]]), "seq": [np.array([1, 2])]},
            {"x": tf.SparseTensor([[0, 0], [1, 0]], [1.0, 1.0], [2, 1]), "seq": [None]},
            ValueError,
            "does not match",
        ),
        ({"x": np.array([1, 2]), "seq": (np.array([1, 2]),)}, None, TypeError, "tuple"),
        ({"x": np.array([1, 2]), "seq": [np.array([1, 2])]}, {"x": None}, ValueError, "keys"),
        ({"x": np.array([1, 2])}, None, ValueError, "keys"),
    ],
    ids=["unknown_type", "weight_type", "list_vs_tuple", "weights_structure", "missing_feature"],
)
def test_embedding_lookup_errors(features, weights, error, match):
    embedding, _ = make()
    with pytest.raises(error, match=match):
        embedding.embedding_lookup(features, weights)


def test_activations_and_updates_equal_the_reference_kernels():
    optimizer = E.Adam(0.05, lazy_adam=True)
    table = E.TableConfig(vocabulary_size=V, dim=3, combiner="sqrtn", initializer=tf.random_normal_initializer(seed=2))
    embedding = v2(feature_config=[E.FeatureConfig(table=table), E.FeatureConfig(table=table)], optimizer=optimizer)
    ids = [tf.ragged.constant([[1, 1, 8], [2]]), tf.SparseTensor([[0, 0], [1, 3]], [8, 4], [2, 5])]
    before = embedding.variables[table]
    activations, preserved = embedding(ids)
    spec = FeatureSpec(name="f", table="t", num_buckets=V)
    batches = [to_ragged(i, feature=spec) for i in ids]
    for activation, batch in zip(activations, batches):
        np.testing.assert_array_equal(activation, pooled_lookup(before["parameters"], batch, "sqrtn"))
    grads = [np.random.default_rng(i).normal(size=(2, 3)).astype(np.float32) for i in range(2)]
    embedding.apply_gradients(grads, preserved)
    row_ids, row_grads = zip(*[pooled_backward(b, "sqrtn", g) for b, g in zip(batches, grads)])
    want, want_slots = apply_sparse_update(
        optimizer_spec(optimizer),
        before["parameters"],
        {"momenta": before["momenta"], "velocities": before["velocities"]},
        np.concatenate(row_ids),
        np.concatenate(row_grads),
        step=0,
    )
    after = embedding.variables[table]
    np.testing.assert_allclose(after["parameters"], want, rtol=1e-6)
    np.testing.assert_allclose(after["velocities"], want_slots["velocities"], rtol=1e-6)


# apply_gradients -------------------------------------------------------------------------------------


def test_apply_gradients_before_build_is_a_runtime_error():
    embedding, _ = make()
    with pytest.raises(RuntimeError, match="unbuilt"):
        embedding.apply_gradients({"x": None, "seq": [None]}, {})


@pytest.mark.parametrize(
    "gradients,error,match",
    [
        ({"x": [[1.0, 1.0], [1.0, 1.0]], "seq": [None]}, ValueError, "non-tensor type"),
        ({"x": np.ones((2, D + 1), np.float32), "seq": [None]}, ValueError, "Expected shape"),
        (
            {"x": np.ones((2, D), np.float32), "seq": [np.ones((2, D), np.float32)]},
            ValueError,
            r"Expected shape \[2, 2, 2\]",
        ),
        ({"x": np.ones((2, D), np.float32), "seq": (None,)}, TypeError, "tuple"),
        ({"x": np.ones((2, D), np.float32), "seq": []}, ValueError, "items"),
    ],
    ids=["list", "wrong_dim", "seq_shape", "tuple_for_list", "short_list"],
)
def test_bad_gradients(gradients, error, match):
    embedding, table = make()
    _, preserved = embedding(FEATURES)
    with pytest.raises(error, match=match):
        embedding.apply_gradients(gradients, preserved)
    np.testing.assert_array_equal(embedding.embedding_tables[table], E.RowIdInitializer()((V, D)))


def test_none_gradient_is_zero_with_a_warning():
    embedding, table = make(E.SGD(1.0))
    _, preserved = embedding(FEATURES)
    with pytest.warns(UserWarning, match="No gradient passed for feature seq/0"):
        embedding.apply_gradients({"x": np.ones((2, D), np.float32), "seq": [None]}, preserved)
    np.testing.assert_array_equal(embedding.embedding_tables[table][[1, 2, 3, 4], 0], [0, 1, 2, 4])


def test_preserved_outputs_must_be_this_objects_and_are_used_once():
    embedding, _ = make()
    other, _ = make()
    _, foreign = other(FEATURES)
    embedding.build()
    grads = {"x": np.ones((2, D), np.float32), "seq": [np.ones((2, 2, D), np.float32)]}
    with pytest.raises(ValueError, match="preserved_outputs"):
        embedding.apply_gradients(grads, foreign)
    _, preserved = embedding(FEATURES)
    with pytest.raises(ValueError, match="preserved_outputs"):
        embedding.apply_gradients(grads, dict(preserved))
    embedding.apply_gradients(grads, preserved)
    with pytest.raises(RuntimeError, match="step"):
        embedding.apply_gradients(grads, preserved)


def test_callable_learning_rate_and_pipelining():
    rates = iter([1.0, 2.0, 3.0])
    table = row_ids_table(combiner="sum")
    embedding = v2(
        feature_config=E.FeatureConfig(table=table),
        optimizer=E.SGD(learning_rate=lambda: next(rates)),
        pipeline_execution_with_tensor_core=True,
    )
    seen = []
    for _ in range(3):
        activations, preserved = embedding(np.array([5]))
        seen.append(float(activations[0, 0]))
        embedding.apply_gradients(np.ones((1, D), np.float32), preserved)
    assert seen == [5.0, 5.0, 4.0]  # one step stale
    assert embedding.embedding_tables[table][5, 0] == 5.0 - 1.0 - 2.0 - 3.0
