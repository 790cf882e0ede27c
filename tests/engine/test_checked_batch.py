"""`check_batch` / `CheckedBatch`: a batch checked once (at the mid-level API's enqueue) that the engine takes as it is.

The engine's kernels read rows without bounds checks, so what they trust
must be impossible to change after the check: these tests hold that, and
that a checked batch gives the numbers of the same ids passed raw.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import CheckedBatch, Engine, NumpyKernels, check_batch
from tpu_embedding_shim.engine.ragged import Ragged, to_ragged

try:
    from tpu_embedding_shim.engine.fast.kernels import FastKernels
except ImportError:  # numba is missing: the numpy kernels only
    FastKernels = None  # type: ignore[assignment,misc]
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec, TruncatedNormal

V, D = 50, 4


def make_spec(combiner: str = "mean", **extra) -> EmbeddingSpec:
    table = TableSpec(name="t", vocabulary_size=V, dim=D, combiner=combiner, initializer=TruncatedNormal(seed=3))
    features = (
        FeatureSpec(name="a", table="t", num_buckets=V),
        FeatureSpec(name="b", table="t", num_buckets=V, weight_key="b_w"),
    )
    return EmbeddingSpec(tables=(table,), features=features, optimizer=AdagradSpec(learning_rate=0.1), **extra)


def one_step(engine: Engine, features: dict, weights: dict | None = None) -> tuple[dict, np.ndarray]:
    result = engine.forward(features, weights)
    gradients = {k: np.full(v.shape, 0.5, np.float32) for k, v in result.activations.items()}
    engine.apply_gradients(result, gradients)
    return result.activations, engine.table("t")


rows = st.lists(st.lists(st.integers(0, V - 1), max_size=4), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(a=rows, b=rows, pipelining=st.booleans(), num_shards=st.sampled_from([1, 3]))
def test_a_checked_batch_gives_the_numbers_of_its_raw_ids(a, b, pipelining, num_shards):
    spec = make_spec(pipeline_execution_with_tensor_core=pipelining, num_shards=num_shards, partition_strategy="mod")
    b = b[: len(a)] + [[]] * (len(a) - len(b))  # the estimator's rule: one batch size
    b_weights = [[0.5 + k for k in range(len(r))] for r in b]
    raw, checked = Engine(spec), Engine(spec)
    for _ in range(2):
        want = one_step(raw, {"a": a, "b": b, "b_w": b_weights})
        got = one_step(
            checked,
            {"a": check_batch(a, feature=spec.features[0]), "b": check_batch(b, b_weights, feature=spec.features[1])},
        )
        for name in want[0]:
            np.testing.assert_array_equal(got[0][name], want[0][name])
        np.testing.assert_array_equal(got[1], want[1])


class RaggedInput:  # a RaggedTensor-like object over the caller's arrays
    def __init__(self, values, row_splits):
        self.values, self.row_splits = values, row_splits


KERNELS = [None, NumpyKernels()] + ([FastKernels()] if FastKernels is not None else [])


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: type(k).__name__)
def test_the_checked_batch_owns_its_arrays_so_later_changes_to_the_input_do_nothing(kernels):
    spec = make_spec()
    values, splits = np.array([1, 2, 3], np.int64), np.array([0, 2, 3], np.int64)
    checked = check_batch(RaggedInput(values, splits), feature=spec.features[0], kernels=kernels)
    assert not np.shares_memory(checked.batch.values, values)
    assert not np.shares_memory(checked.batch.row_splits, splits)
    values[0], splits[1] = 10**9, 10**6  # past the table: would be read unchecked if shared
    engine = Engine(spec)
    activations = engine.forward({"a": checked, "b": [[4], []], "b_w": [[1.0], []]}).activations["a"]
    table = engine.table("t")
    np.testing.assert_allclose(activations, [(table[1] + table[2]) / 2, table[3]], rtol=1e-6)


def test_only_check_batch_makes_one():
    batch = Ragged(np.array([10**9]), np.array([0, 1]), None)  # an id no table has
    with pytest.raises(TypeError, match=r"made by check_batch\(ids, weights, feature=feature\)"):
        CheckedBatch(batch, make_spec().features[0])


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: type(k).__name__)
def test_check_batch_gives_what_to_ragged_gives_and_raises_what_it_raises(kernels):
    feature = make_spec().features[0]
    ragged = RaggedInput(np.array([4, 0, 49], np.int64), np.array([0, 2, 2, 3], np.int64))
    want, got = to_ragged(ragged, feature=feature), check_batch(ragged, feature=feature, kernels=kernels).batch
    for name in ("values", "row_splits"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    for bad, message in [
        ([[50]], r"id 50 \(example 0\) is out of range \[0, 50\)"),
        (RaggedInput(np.array([1, 50]), np.array([0, 1, 2])), r"id 50 \(example 1\) is out of range"),
        (RaggedInput(np.array([1, 2]), np.array([0, 5, 2])), r"`row_splits` must be non-decreasing"),
    ]:
        with pytest.raises(ValueError, match=message):
            to_ragged(bad, feature=feature)
        with pytest.raises(ValueError, match=message):
            check_batch(bad, feature=feature, kernels=kernels)


def test_a_batch_checked_for_another_feature_is_refused_before_anything_changes():
    spec = make_spec()
    small = FeatureSpec(name="a", table="t", num_buckets=V + 10)  # same name, other bounds: another feature
    engine = Engine(spec)
    before = engine.table("t").copy()
    with pytest.raises(ValueError, match=r"Feature 'a' was given a batch checked for another feature \('a', 60"):
        engine.forward({"a": check_batch([[55]], feature=small), "b": [[1]]})
    with pytest.raises(ValueError, match=r"Feature 'b': its batch was checked with its weights already"):
        engine.forward({"a": [[1]], "b": check_batch([[2]], feature=spec.features[1]), "b_w": [[1.0]]})
    np.testing.assert_array_equal(engine.table("t"), before)
    assert engine.global_step == 0


def test_a_checked_batch_still_gets_the_nan_weight_rule():
    """A NaN weight that 'sum' would use is refused at the lookup, checked batch or not (same message)."""
    spec = make_spec(combiner="sum")
    nan = [[np.nan, 1.0]]
    with pytest.raises(ValueError, match="weight 0 is NaN") as raw:
        Engine(spec).forward({"a": [[1]], "b": [[1, 2]], "b_w": nan})
    checked = {
        "a": check_batch([[1]], feature=spec.features[0]),
        "b": check_batch([[1, 2]], nan, feature=spec.features[1]),
    }
    with pytest.raises(ValueError) as got:
        Engine(spec).forward(checked)
    assert str(got.value) == str(raw.value)


@pytest.mark.skipif(FastKernels is None, reason="numba is not installed: no compiled check")
def test_a_ragged_tensors_read_only_arrays_are_checked_and_kept_without_a_copy():
    """Nobody can write a tf.RaggedTensor's arrays (it copies what it is given), so a training batch keeps them."""
    import tpu_embedding_shim as tf

    spec = make_spec()
    ragged = tf.RaggedTensor.from_row_splits(np.array([1, 2, 3]), np.array([0, 2, 3]))
    checked = check_batch(ragged, feature=spec.features[0], kernels=FastKernels())
    assert checked.batch.values is ragged.values and not checked.batch.values.flags.writeable
    writable = RaggedInput(np.array([1, 2, 3]), np.array([0, 2, 3]))  # the caller's arrays: copied
    assert not np.shares_memory(
        check_batch(writable, feature=spec.features[0], kernels=FastKernels()).batch.values, writable.values
    )
    with pytest.raises(ValueError, match=r"id 50 \(example 1\) is out of range"):
        check_batch(
            tf.RaggedTensor.from_row_splits(np.array([1, 50]), np.array([0, 1, 2])),
            feature=spec.features[0],
            kernels=FastKernels(),
        )
