"""The replicas of `mpiexec -n N` for TensorFlow values: cross-process sums and gathers as ops, batches split.

The TPUStrategy stand-in of TensorFlow programs (`_distribute.py`) is one
replica per process, as the numpy world's is (`api/replicas.py`). Here are
the two things TensorFlow values need on top of it:

- `all_reduce(reduce_op, tensors)` and `all_gather(tensors, axis)`: the
  numpy world's `cross_replica_sum` / `all_gather` on tensors, eagerly or as
  one op inside `tf.function`. The op is a bridged call (`_convert.call`),
  chained after the previous one of the graph, so every replica runs the
  collectives (these and the embedding's) in the same order. Keras's
  optimizers sum their gradients with it (`StrategyExtended.batch_reduce_to`).
- `replica_batch(element)`: this replica's rows of a `tf.data` element (a
  global batch), as `experimental_distribute_dataset` hands each replica
  its part: contiguous runs of ceil(B / N) rows in replica order
  (`replicas.replica_rows`), for dense, sparse and ragged tensors.

>>> import tensorflow as tf
>>> all_reduce("SUM", [tf.constant([1.0, 2.0])])[0].numpy()   # one process: the value itself
array([1., 2.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ..api import replicas
from . import _convert

__all__ = ["all_reduce", "all_gather", "replica_batch", "replica_batch_of_components"]


def _dense(value: Any) -> tf.Tensor:
    """A tensor (IndexedSlices, a gradient of a gather, made dense: every replica sums the same shape)."""
    return tf.convert_to_tensor(value)


def all_reduce(reduce_op: str, tensors: Sequence[Any]) -> list[tf.Tensor]:
    """Each tensor summed ('SUM') or averaged ('MEAN') over the replicas, in replica order (collective).

    Every replica passes tensors of the same dtypes and shapes; every replica
    gets the same bits back. One process: the tensors as they are.
    """
    tensors = [_dense(t) for t in tensors]
    if replicas.num_replicas() == 1 or not tensors:
        return tensors

    def reduce(*arrays: np.ndarray) -> list[np.ndarray]:
        reduced = replicas.cross_replica_sum(tuple(arrays))  # a tuple: always structure, never rows
        if reduce_op == "MEAN":
            reduced = [np.asarray(r / replicas.num_replicas()).astype(a.dtype) for r, a in zip(reduced, arrays)]
        return reduced

    leaves = [_convert.encode(t, "all_reduce value") for t in tensors]
    # Not named CROSS_REPLICA_OP: the runner counts an op of that name as CrossShardOptimizer's.
    return _convert.call(reduce, leaves, [t.dtype for t in tensors], [t.shape for t in tensors], "replica_all_reduce")


def all_gather(tensors: Sequence[Any], axis: int) -> list[tf.Tensor]:
    """Every replica's tensors joined along `axis` in replica order (collective; sizes along `axis` may differ)."""
    tensors = [_dense(t) for t in tensors]
    if replicas.num_replicas() == 1 or not tensors:
        return tensors

    def gather(*arrays: np.ndarray) -> list[np.ndarray]:
        return list(replicas.all_gather(tuple(arrays), axis))

    shapes = []
    for t in tensors:
        shape = t.shape.as_list() if t.shape.rank is not None else None
        if shape is not None:
            shape[axis] = None
        shapes.append(tf.TensorShape(shape))
    leaves = [_convert.encode(t, "all_gather value") for t in tensors]
    return _convert.call(gather, leaves, [t.dtype for t in tensors], shapes, "all_gather")


def _rows(value: Any) -> Any:
    """The number of rows: an int when TensorFlow knows it statically (`batch(..., drop_remainder=True)`)."""
    static = value.shape[0] if value.shape.rank else None
    if static is not None:
        return int(static)
    if isinstance(value, tf.SparseTensor):
        return value.dense_shape[0]
    if isinstance(value, tf.RaggedTensor):
        return value.nrows(out_type=tf.int64)
    return tf.shape(value, out_type=tf.int64)[0]


def _take(value: Any, start: Any, stop: Any) -> Any:
    if isinstance(value, tf.SparseTensor):
        tail = value.dense_shape[1:]
        size = tf.concat([tf.cast([stop - start], tf.int64), tail], 0)  # static rows when `start` is an int
        sliced = tf.sparse.slice(value, tf.concat([tf.cast([start], tf.int64), tf.zeros_like(tail)], 0), size)
        return tf.SparseTensor(sliced.indices, sliced.values, size)
    return value[start:stop]


def replica_batch(element: Any, replica: int | None = None, count: int | None = None) -> Any:
    """This replica's rows of a global batch (a nest of tensors sharing their first dimension).

    With a static batch size (a dataset batched with `drop_remainder=True`,
    as TPU programs batch) the slices keep static shapes: `[B / N, ...]`.
    """
    replica = replicas.replica_id() if replica is None else replica
    count = replicas.num_replicas() if count is None else count
    leaves = tf.nest.flatten(element)
    if not leaves:
        return element
    batch = _rows(leaves[0])
    if isinstance(batch, int):
        start, stop = replicas.replica_rows(batch, replica, count)
    else:
        per_replica = (batch + count - 1) // count
        start = tf.minimum(replica * per_replica, batch)
        stop = tf.minimum(start + per_replica, batch)
    return tf.nest.map_structure(lambda leaf: _take(leaf, start, stop), element)


def replica_batch_of_components(*components: Any) -> Any:
    """`replica_batch` as `tf.data.Dataset.map` calls it: a tuple element's components as arguments."""
    return replica_batch(components if len(components) > 1 else components[0])
