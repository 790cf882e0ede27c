"""Infinite weights are refused before anything changes (they wrote NaN into the table); NaN and
weights <= 0 are dropped by the safe rule for mean and sqrtn, as in TensorFlow; a NaN weight that
the lookup would use (sum, or safe lookup off) is refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine import fast
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, RowIdInitializer, TableSpec

KERNELS = ["numpy"] + (["fast"] if fast.available() else [])


def _engine(kernels, combiner="sum"):
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=10, dim=2, combiner=combiner, initializer=RowIdInitializer()),),
        features=(FeatureSpec(name="f", table="t", num_buckets=10),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    return Engine(spec, kernels=kernels)


def _inputs(weight):
    """The same batch (ids 1 and 2 in one example, the second weighted `weight`) in each input form."""
    splits = np.array([0, 2], dtype=np.int64)
    return {
        "dense": (np.array([[1, 2]], dtype=np.int64), np.array([[1.0, weight]])),
        "ragged": (
            tf.RaggedTensor.from_row_splits(np.array([1, 2], dtype=np.int64), splits),
            tf.RaggedTensor.from_row_splits(np.array([1.0, weight]), splits),
        ),
        "sparse": (
            tf.SparseTensor([[0, 0], [0, 1]], [1, 2], [1, 2]),
            tf.SparseTensor([[0, 0], [0, 1]], [1.0, weight], [1, 2]),
        ),
        "lists": ([[1, 2]], [[1.0, weight]]),
    }


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("form", ["dense", "ragged", "sparse", "lists"])
@pytest.mark.parametrize("weight", [np.inf, -np.inf, 1e39])
def test_an_infinite_weight_is_refused_and_changes_nothing(kernels, form, weight):
    engine = _engine(kernels)
    before = engine.table("t").copy()
    ids, weights = _inputs(weight)[form]
    with pytest.raises(ValueError, match=r"Feature 'f': weights must be finite \(in float32\)\. Received .* entry 1"):
        engine.forward({"f": ids}, weights={"f": weights})
    np.testing.assert_array_equal(engine.table("t"), before)
    assert engine.global_step == 0


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("weight", [np.nan, 0.0, -1.0])
def test_nan_and_non_positive_weights_are_dropped_by_the_safe_rule(kernels, weight):
    engine = _engine(kernels, combiner="mean")
    ids, weights = _inputs(weight)["ragged"]
    result = engine.forward({"f": ids}, weights={"f": weights}, training=True)
    np.testing.assert_array_equal(result.activations["f"], [[1.0, 1.0]])  # row 1 alone (RowIdInitializer)
    engine.apply_gradients(result, {"f": np.ones((1, 2))})
    table = engine.table("t")
    assert np.isfinite(table).all() and table[2].tolist() == [2.0, 2.0]  # row 2 untouched


@pytest.mark.parametrize("kernels", KERNELS)
def test_a_nan_weight_the_lookup_would_use_is_refused(kernels):
    engine = _engine(kernels, combiner="sum")
    before = engine.table("t").copy()
    ids, weights = _inputs(np.nan)["sparse"]
    with pytest.raises(ValueError, match=r"weight 1 is NaN, and the lookup would use it \(combiner 'sum'"):
        engine.forward({"f": ids}, weights={"f": weights}, training=True)
    np.testing.assert_array_equal(engine.table("t"), before)


def test_the_mid_level_api_refuses_an_infinite_weight_before_anything_changes():
    table = tf.tpu.experimental.embedding.TableConfig(
        vocabulary_size=8, dim=2, combiner="sum", initializer=tf.tpu.experimental.embedding.RowIdInitializer()
    )
    embedding = tf.tpu.experimental.embedding.TPUEmbedding(
        feature_config={"f": tf.tpu.experimental.embedding.FeatureConfig(table=table)},
        optimizer=tf.tpu.experimental.embedding.SGD(0.1),
    )
    ids = tf.ragged.constant([[1, 2], [3]])
    weights = tf.ragged.constant([[1.0, np.inf], [1.0]])
    before = np.array(embedding.embedding_tables[table]).copy()
    with pytest.raises(ValueError, match="weights must be finite"):
        embedding.enqueue({"f": ids}, weights={"f": weights}, training=True)
    np.testing.assert_array_equal(np.array(embedding.embedding_tables[table]), before)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.floats(width=64, max_value=1e6, min_value=-1e6) | st.sampled_from([np.nan, np.inf, -np.inf, 1e39]),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["sum", "mean", "sqrtn"]),
)
def test_any_weights_either_refused_or_leave_a_finite_table(weights, combiner):
    engine = _engine("numpy", combiner=combiner)
    ids = tf.RaggedTensor.from_row_splits(
        np.arange(len(weights), dtype=np.int64) % 10, np.array([0, len(weights)], dtype=np.int64)
    )
    w = tf.RaggedTensor.from_row_splits(np.array(weights), np.array([0, len(weights)], dtype=np.int64))
    before = engine.table("t").copy()
    try:
        result = engine.forward({"f": ids}, weights={"f": w}, training=True)
    except ValueError:
        with np.errstate(over="ignore"):
            w32 = np.array(weights, dtype=np.float64).astype(np.float32)
        assert np.isinf(w32).any() or (combiner == "sum" and np.isnan(w32).any())
        np.testing.assert_array_equal(engine.table("t"), before)
        return
    engine.apply_gradients(result, {"f": np.ones((1, 2))})
    assert np.isfinite(engine.table("t")).all()
