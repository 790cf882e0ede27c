"""`numpy_elements` (runner/tf_data.py): a dataset's elements as `to_numpy(next(iterator))` gives them."""

import numpy as np
import pytest
import tensorflow as tf

from tpu_embedding_shim.api.tensors import RaggedTensor, SparseTensor
from tpu_embedding_shim.runner import tf_data
from tpu_embedding_shim.runner.tf_bridge import to_numpy

N = 5


def _slices():
    rng = np.random.default_rng(0)
    return {
        "b_ids": rng.integers(0, 9, (N, 4, 2)),
        "a_dense": rng.standard_normal((N, 4, 3)).astype(np.float32),
        "words": np.array([[b"x", b"yz", b"", b"w"]] * N),
        "flag": np.array([[True, False, True, True]] * N),
    }


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)  # the dataset's key order, not tf.nest's sorted one
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, (SparseTensor, RaggedTensor)):
        for name in ("indices", "values", "dense_shape", "row_splits"):
            if hasattr(want, name):
                np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    else:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def _elements(dataset):
    return list(tf_data.numpy_elements(dataset, to_numpy))


def _oracle(dataset):
    return [to_numpy(element) for element in dataset]


@pytest.mark.parametrize(
    "make",
    [
        lambda s: tf.data.Dataset.from_tensor_slices(s),  # a dict
        lambda s: tf.data.Dataset.from_tensor_slices((s, s["a_dense"][:, :, 0])),  # (features, labels)
        lambda s: tf.data.Dataset.from_tensor_slices(s["a_dense"]),  # one tensor
        lambda s: tf.data.Dataset.from_tensor_slices(s).map(lambda d: [d["b_ids"], (d["words"], d["flag"])]),
        lambda s: tf.data.Dataset.from_tensor_slices(s).map(lambda d: {"z": d["flag"], "y": tf.reduce_sum(d["b_ids"])}),
    ],
    ids=["dict", "features-labels", "tensor", "list-of-tuple", "scalar-in-dict"],
)
def test_each_element_is_what_to_numpy_of_next_gives(make, monkeypatch):
    dataset = make(_slices())
    readers = []
    flat_reader = tf_data._flat_reader
    monkeypatch.setattr(tf_data, "_flat_reader", lambda it: readers.append(1) or flat_reader(it))
    got, want = _elements(dataset), _oracle(dataset)
    assert readers == [1]  # read by the op, not by next()
    assert len(got) == len(want) == N
    for g, w in zip(got, want):
        _same(g, w)


def test_sparse_and_ragged_elements_are_read_by_next_as_before():
    ids = tf.ragged.constant([[1, 2], [3], [], [4, 5, 6]], dtype=tf.int64)
    dataset = tf.data.Dataset.from_tensors({"r": ids, "s": tf.sparse.from_dense(tf.constant([[0, 7], [8, 0]]))})
    assert tf_data._plan(dataset.element_spec) is None
    got, want = _elements(dataset.repeat(2)), _oracle(dataset.repeat(2))
    assert len(got) == 2
    for g, w in zip(got, want):
        _same(g, w)


def test_an_empty_dataset_and_the_end_of_one():
    assert _elements(tf.data.Dataset.from_tensor_slices(np.zeros((0, 3)))) == []
    reader = tf_data.numpy_elements(tf.data.Dataset.range(2), to_numpy)
    assert [int(x) for x in reader] == [0, 1]
    assert list(reader) == []


def test_an_error_in_the_dataset_is_tensorflows_own():
    dataset = tf.data.Dataset.from_tensor_slices(np.array([1.0, np.nan], np.float32)).map(
        lambda x: tf.debugging.check_numerics(x, "not finite")
    )
    reader = tf_data.numpy_elements(dataset, to_numpy)
    assert float(next(reader)) == 1.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="not finite"):
        next(reader)


def test_asynchronous_execution_reads_by_next(monkeypatch):
    dataset = tf.data.Dataset.from_tensor_slices(_slices())
    monkeypatch.setattr(tf_data, "_flat_reader", None)  # not called
    tf.config.experimental.set_synchronous_execution(False)
    try:
        got = _elements(dataset)
    finally:
        tf.config.experimental.set_synchronous_execution(True)
    for g, w in zip(got, _oracle(dataset)):
        _same(g, w)
