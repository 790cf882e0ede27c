"""`convert_inputs` (every feature of a batch at once) against `convert_input` one feature at a time.

The batched conversion checks the dense int64 inputs of a batch in one compiled call and hands the rest to
`convert_input`; on any mix of inputs (dense of either shape and dtype, sparse, ragged, weighted, sequence
features, configured output shapes, ids out of range, padding, weights for dense ids) it must give the same
`ConvertedInput`s, bit for bit, the same warnings, and the same first error.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.midlevel_inputs import convert_input, convert_inputs
from tpu_embedding_shim.engine import NumpyKernels, check_batch, ragged
from tpu_embedding_shim.engine import fast as fast_kernels

E = tf.tpu.experimental.embedding
V = 10
KINDS = ("dense", "dense_column", "dense_int32", "dense_empty", "sparse", "ragged", "ragged_weighted", "dense_weighted")


def kernels_under_test():
    """The numpy kernels, and numba's where it imports (the batched check is theirs)."""
    kernels = [NumpyKernels()]
    if fast_kernels.available():
        from tpu_embedding_shim.engine.fast.kernels import FastKernels

        kernels.append(FastKernels())
    return kernels


def make_input(kind: str, batch: int, rng: np.random.Generator, bad: bool):
    """One feature's ids and weights of `kind`; `bad`: one id out of range."""
    high = V + 3 if bad else V
    if kind.startswith("dense"):
        ids = rng.integers(0, high, size=0 if kind == "dense_empty" else batch).astype(np.int64)
        if bad and ids.size:
            ids[rng.integers(ids.size)] = V
        if kind == "dense_column":
            ids = ids.reshape(-1, 1)
        if kind == "dense_int32":
            ids = ids.astype(np.int32)
        weights = np.ones(ids.shape, np.float32) if kind == "dense_weighted" else None
        return ids, weights
    lengths = rng.integers(0, 4, size=batch)
    values = rng.integers(0, high, size=int(lengths.sum())).astype(np.int64)
    if bad and values.size:
        values[rng.integers(values.size)] = V
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    weights_values = rng.uniform(0.5, 2.0, size=values.size).astype(np.float32)
    if kind == "sparse":
        rows = np.repeat(np.arange(batch), lengths)
        columns = np.arange(values.size) - np.repeat(splits[:-1], lengths)
        indices = np.stack([rows, columns], axis=1).astype(np.int64)
        shape = [batch, 4]
        return tf.SparseTensor(indices, values, shape), tf.SparseTensor(indices, weights_values, shape)
    ids = tf.RaggedTensor.from_row_splits(values, splits)
    weights = tf.RaggedTensor.from_row_splits(weights_values, splits) if kind == "ragged_weighted" else None
    return ids, weights


def outcome(convert):
    """(converted, warnings' messages) or (the error's type and message, warnings' messages)."""
    ragged._warned_dense_zeros.clear()  # the padding warning is given once per feature name: each time here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = convert()
        except (ValueError, TypeError) as error:
            result = (type(error), str(error))
    return result, [str(w.message) for w in caught]


def same_array(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def same_ids(a, b) -> bool:
    """Dense arrays, SparseTensors and RaggedTensors, component by component."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return same_array(a, b)
    if a is None or b is None:
        return a is None and b is None
    if type(a) is not type(b):
        return False
    if hasattr(a, "indices"):
        return (
            same_array(a.indices, b.indices)
            and same_array(a.values, b.values)
            and list(a.dense_shape) == list(b.dense_shape)
        )
    if hasattr(a, "row_splits"):
        return same_array(a.values, b.values) and same_array(a.row_splits, b.row_splits)
    return a is b


def same_converted(a, b) -> bool:
    if a.kind != b.kind or a.output_shape != b.output_shape or a.positions != b.positions:
        return False
    if not (same_ids(a.ids, b.ids) and same_ids(a.weights, b.weights)):
        return False
    if (a.checked is None) != (b.checked is None):
        return False
    if a.checked is None:
        return True
    x, y = a.checked.batch, b.checked.batch
    return (
        a.checked.feature is b.checked.feature
        and same_array(x.values, y.values)
        and same_array(x.row_splits, y.row_splits)
        and same_array(x.weights, y.weights)
        and same_array(x.row_positions(), y.row_positions())
    )


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5),
    bad=st.lists(st.booleans(), min_size=5, max_size=5),
    sequence=st.lists(st.booleans(), min_size=5, max_size=5),
    known=st.lists(st.sampled_from([None, "same", "other"]), min_size=5, max_size=5),
    padding=st.booleans(),
    serving=st.booleans(),
    batch=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_batched_conversion_equals_one_by_one(kinds, bad, sequence, known, padding, serving, batch, seed):
    rng = np.random.default_rng(seed)
    inputs = [make_input(kind, batch, rng, bad[k]) for k, kind in enumerate(kinds)]
    table = E.TableConfig(vocabulary_size=V, dim=2, name="t")
    configs = [
        E.FeatureConfig(table=table, name=f"f{k}", max_sequence_length=3 if sequence[k] else 0)
        for k in range(len(kinds))
    ]
    embedding = E.TPUEmbedding(
        feature_config={f"f{k}": c for k, c in enumerate(configs)}, optimizer=E.SGD(learning_rate=0.1)
    )
    features = embedding.features
    specs = [f.spec for f in features]
    if padding:  # an EmbeddingConfigSpec feature's rule: a dense 0 is padding
        specs = [dataclasses.replace(s, dense_zero_is_padding=True) for s in specs]
    shapes = {None: None, "same": (batch,), "other": (batch + 1,)}
    knowns = [shapes[known[k]] for k in range(len(kinds))]
    ids = [inputs[k][0] for k in range(len(kinds))]
    weights = [inputs[k][1] for k in range(len(kinds))]
    paths = [f.path for f in features]
    configs = [f.config for f in features]
    for kernels in kernels_under_test():

        def one_by_one(kernels=kernels):
            return [
                convert_input(
                    ids[k],
                    weights[k],
                    configs[k],
                    paths[k],
                    feature=specs[k],
                    serving=serving,
                    known=knowns[k],
                    check=functools.partial(check_batch, kernels=kernels),
                )
                for k in range(len(kinds))
            ]

        def batched(kernels=kernels):
            return convert_inputs(
                ids, weights, configs, paths, features=specs, serving=serving, known=knowns, kernels=kernels
            )

        expected, expected_warnings = outcome(one_by_one)
        got, got_warnings = outcome(batched)
        assert got_warnings == expected_warnings
        if isinstance(expected, tuple):
            assert got == expected
        else:
            assert isinstance(got, list) and len(got) == len(expected)
            assert all(same_converted(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("kernels", kernels_under_test(), ids=lambda k: type(k).__name__)
def test_batched_check_copies_the_ids(kernels):
    """A checked batch holds ids the caller can no longer change (the engine indexes with them unchecked)."""
    table = E.TableConfig(vocabulary_size=V, dim=2, name="t")
    embedding = E.TPUEmbedding(
        feature_config={f"f{k}": E.FeatureConfig(table=table) for k in range(3)}, optimizer=E.SGD(learning_rate=0.1)
    )
    features = embedding.features
    ids = [np.array([1, 2, 3], np.int64), np.array([[4], [5], [6]], np.int64), np.array([7, 8, 9], np.int64)]
    converted = convert_inputs(
        ids,
        [None] * 3,
        [f.config for f in features],
        [f.path for f in features],
        features=[f.spec for f in features],
        known=[None] * 3,
        kernels=kernels,
    )
    for array in ids:
        array[...] = V + 5
    assert [c.checked.batch.values.tolist() for c in converted] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [c.output_shape for c in converted] == [(3,), (3,), (3,)]
