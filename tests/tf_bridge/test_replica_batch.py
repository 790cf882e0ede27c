"""A tf.data global batch cut into replicas' parts (`_replicas.replica_batch`) as the numpy world cuts one.

The TF bridge's `experimental_distribute_dataset` hands each process of `mpiexec -n N` these rows; they must
be `api.replicas.replica_slice`'s (contiguous runs of ceil(B / N) rows), for dense, ragged and sparse tensors,
with static shapes when the batch size is static.
"""

import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.api import replicas
from tpu_embedding_shim.tensorflow import _replicas


def global_batch(rows):
    dense = np.arange(len(rows) * 2, dtype=np.int64).reshape(-1, 2)
    ragged = tf.ragged.constant(rows, dtype=tf.int64, row_splits_dtype=tf.int64)
    sparse = ragged.to_sparse()
    return dense, ragged, sparse


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 9), max_size=3), min_size=1, max_size=9), st.integers(1, 4))
def test_each_replica_gets_the_rows_the_numpy_world_gives_it(rows, count):
    dense, ragged, sparse = global_batch(rows)
    for replica in range(count):
        part = _replicas.replica_batch({"d": tf.constant(dense), "r": ragged, "s": sparse}, replica, count)
        start, stop = replicas.replica_rows(len(rows), replica, count)
        np.testing.assert_array_equal(part["d"].numpy(), dense[start:stop])
        assert part["r"].to_list() == [list(row) for row in rows[start:stop]]
        assert part["s"].shape[0] == stop - start
        np.testing.assert_array_equal(
            tf.sparse.to_dense(part["s"]).numpy(),
            ragged[start:stop].to_tensor(shape=[stop - start, sparse.shape[1]]).numpy(),
        )


def test_a_dataset_batched_with_drop_remainder_keeps_static_per_replica_shapes():
    ids = tf.ragged.constant([[1], [2, 3], [4], [5], [6, 7], [8]], dtype=tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices(({"ids": ids, "dense": tf.range(6)}, tf.zeros(6))).batch(
        6, drop_remainder=True
    )
    mapped = dataset.map(lambda *c: _replicas.replica_batch(c, 1, 3))
    features, labels = mapped.element_spec
    assert features["ids"].shape.as_list() == [2, None] and features["dense"].shape.as_list() == [2]
    assert labels.shape.as_list() == [2]
    ((features, labels),) = list(mapped)
    assert features["ids"].to_list() == [[4], [5]] and features["dense"].numpy().tolist() == [2, 3]


def test_one_process_reduces_to_the_values_themselves():
    (total,) = _replicas.all_reduce("SUM", [tf.constant([1.5, 2.0])])
    (gathered,) = _replicas.all_gather([tf.constant([[1.0], [2.0]])], axis=0)
    assert total.numpy().tolist() == [1.5, 2.0] and gathered.numpy().tolist() == [[1.0], [2.0]]
