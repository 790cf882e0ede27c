"""SparseTensor and RaggedTensor: numpy-backed, with TensorFlow's construction checks."""

import numpy as np
import pytest

import tpu_embedding_shim as tf


def test_sparse_tensor_round_trips_dense():
    st = tf.SparseTensor(indices=[[0, 1], [2, 0]], values=[5, 6], dense_shape=[3, 2])
    np.testing.assert_array_equal(st.to_dense(), [[0, 5], [0, 0], [6, 0]])
    back = tf.SparseTensor.from_dense(st.to_dense())
    np.testing.assert_array_equal(back.indices, st.indices)
    assert st.shape == (3, 2)


@pytest.mark.parametrize(
    "kwargs,error,fragment",
    [
        ({"indices": [[0, 0]], "values": [1, 2], "dense_shape": [2, 2]}, ValueError, "values"),
        ({"indices": [[0, 5]], "values": [1], "dense_shape": [2, 2]}, ValueError, "out of bounds"),
        ({"indices": [[0, 0, 0]], "values": [1], "dense_shape": [2, 2]}, ValueError, "rank"),
        ({"indices": [[0.5, 0]], "values": [1], "dense_shape": [2, 2]}, TypeError, "indices"),
        ({"indices": [[0, 0]], "values": [[1]], "dense_shape": [2, 2]}, ValueError, "values"),
        ({"indices": [[0, 0]], "values": [1], "dense_shape": [-1, 2]}, ValueError, "dense_shape"),
    ],
)
def test_bad_sparse_tensor(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        tf.SparseTensor(**kwargs)


def test_empty_sparse_tensor():
    st = tf.SparseTensor(indices=np.zeros((0, 2), np.int64), values=np.zeros(0, np.int64), dense_shape=[4, 3])
    assert st.to_dense().sum() == 0


def test_sparse_tensor_is_immutable():
    st = tf.SparseTensor([[0, 0]], [1], [1, 1])
    with pytest.raises(ValueError):
        st.values[0] = 3


def test_ragged_constructors_agree():
    a = tf.RaggedTensor.from_row_splits([1, 2, 3], [0, 2, 2, 3])
    b = tf.RaggedTensor.from_row_lengths([1, 2, 3], [2, 0, 1])
    c = tf.RaggedTensor.from_value_rowids([1, 2, 3], [0, 0, 2], nrows=3)
    d = tf.ragged.constant([[1, 2], [], [3]])
    for other in (b, c, d):
        np.testing.assert_array_equal(other.row_splits, a.row_splits)
        np.testing.assert_array_equal(other.values, a.values)
    assert a.to_list() == [[1, 2], [], [3]]
    assert a.nrows == 3


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: tf.RaggedTensor.from_row_splits([1, 2], [1, 2]), "row_splits"),
        (lambda: tf.RaggedTensor.from_row_splits([1, 2], [0, 3]), "last row split"),
        (lambda: tf.RaggedTensor.from_row_splits([1, 2], [0, 2, 1]), "non-decreasing"),
        (lambda: tf.RaggedTensor.from_row_lengths([1, 2], [3, -1]), "row_lengths"),
        (lambda: tf.RaggedTensor.from_value_rowids([1, 2], [1, 0]), "value_rowids"),
        (lambda: tf.RaggedTensor.from_value_rowids([1, 2], [0, 1], nrows=1), "nrows"),
    ],
)
def test_bad_ragged_tensor(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_ragged_constant_takes_tensorflows_dtype_and_refuses_a_cast_that_changes_values():
    """TF: `tf.ragged.constant(pylist, dtype=None, ragged_rank=None, inner_shape=None, name=None, row_splits_dtype)`;
    a value the dtype cannot hold is TF's TypeError."""
    assert tf.ragged.constant([[1, 2], [3]], dtype=tf.float32).values.dtype == np.float32
    assert tf.ragged.constant([[1, 2], [3]], dtype="int32", name="ids").to_list() == [[1, 2], [3]]
    assert tf.ragged.constant([[], []], dtype=tf.int64).values.dtype == np.int64
    for bad in ([[1.5]], [["a"]]):
        with pytest.raises(TypeError, match="cannot be int64 without changing them"):
            tf.ragged.constant(bad, dtype=tf.int64)
    with pytest.raises(ValueError, match="rank-2"):
        tf.ragged.constant([[1]], ragged_rank=2)


def test_the_callers_arrays_stay_writable_and_the_tensor_keeps_its_values():
    """As TensorFlow's tensors: built from numpy arrays, they copy them; the arrays stay the caller's."""
    values, splits = np.array([3, 1, 2]), np.array([0, 2, 3])
    ragged = tf.RaggedTensor.from_row_splits(values, splits)
    sparse = tf.SparseTensor(indices=np.array([[0, 0], [1, 0]]), values=values[:2], dense_shape=[2, 1])
    values[:] = 7  # the caller's array: still writable, and the tensors do not see the change
    splits[1] = 1
    assert ragged.values.tolist() == [3, 1, 2] and ragged.row_splits.tolist() == [0, 2, 3]
    assert sparse.values.tolist() == [3, 1]
    with pytest.raises(ValueError, match="read-only"):
        ragged.values[0] = 0  # the tensor's own arrays are immutable, as a tf.Tensor
