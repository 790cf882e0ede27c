"""`tf.SparseTensor` and `tf.RaggedTensor` for a world without TensorFlow.

Both are thin, immutable, numpy-backed containers with the checks TensorFlow
makes when they are built. The engine reads them by their attributes
(`indices`/`values`/`dense_shape`, `values`/`row_splits`), never by type.

>>> st = SparseTensor(indices=[[0, 0], [1, 2]], values=[3, 7], dense_shape=[2, 4])
>>> st.to_dense().tolist()
[[3, 0, 0, 0], [0, 0, 7, 0]]
>>> rt = RaggedTensor.from_row_lengths([3, 7, 9], [2, 0, 1])
>>> rt.to_list()
[[3, 7], [], [9]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import checked_sparse_indices
from ..spec.checks import check_int, fail
from .dtypes import as_dtype


def _int_array(name: str, value: Any, ndim: int, owner: str) -> np.ndarray:
    array = np.asarray(value)
    if array.size == 0 and array.ndim != ndim:  # an empty list: [0] or [0, 2]; (0, rank) indices stay
        array = array.reshape((0,) if ndim == 1 else (0, 2))
    if array.size == 0:
        array = array.astype(np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise fail(name, "an integer array", value, error=TypeError, owner=owner)
    if array.ndim != ndim:
        raise fail(name, f"an array of rank {ndim}", value, owner=owner)
    return array.astype(np.int64)


class SparseTensor:
    """A COO sparse tensor: `indices` [N, rank], `values` [N], `dense_shape` [rank].

    Like TensorFlow's, it does not sort its indices; `to_dense` and the engine
    treat unsorted indices as `tf.sparse.reorder` would.
    """

    def __init__(self, indices: Any, values: Any, dense_shape: Any):
        owner = "SparseTensor"
        shape = _int_array("dense_shape", dense_shape, 1, owner)
        if np.any(shape < 0):
            raise fail("dense_shape", "non-negative sizes", dense_shape, owner=owner)
        idx = np.asarray(indices)
        if idx.size == 0:
            idx = np.zeros((0, len(shape)), np.int64)
        idx = _int_array("indices", idx, 2, owner)
        vals = np.array(values)  # a copy: the caller's array stays theirs (writable), the tensor immutable
        if vals.ndim != 1:
            raise fail("values", "a rank-1 array", values, owner=owner)
        idx = checked_sparse_indices(idx, vals.shape[0], shape, owner)
        self.indices, self.values, self.dense_shape = idx, vals, shape
        for array in (self.indices, self.values, self.dense_shape):
            array.setflags(write=False)

    @property
    def shape(self):
        return tuple(int(s) for s in self.dense_shape)

    @property
    def dtype(self):
        return self.values.dtype

    def to_dense(self, default_value: Any = 0) -> np.ndarray:
        """The dense array, `default_value` where no entry is given."""
        dense = np.full(self.shape, default_value, dtype=self.values.dtype)
        dense[tuple(self.indices.T)] = self.values
        return dense

    def with_values(self, values: Any) -> SparseTensor:
        """The same indices with new values (as `tf.SparseTensor.with_values`)."""
        return SparseTensor(self.indices, values, self.dense_shape)

    @classmethod
    def from_dense(cls, dense: Any, ignore_value: Any = None) -> SparseTensor:
        """Entries not equal to `ignore_value` (default: 0, or '' for strings)."""
        dense = np.asarray(dense)
        if ignore_value is None:
            ignore_value = "" if dense.dtype.kind in "US" else 0
        keep = dense != ignore_value
        return cls(np.argwhere(keep), dense[keep], dense.shape)

    def __repr__(self):
        return (
            f"SparseTensor(indices={self.indices.tolist()}, values={self.values.tolist()}, "
            f"dense_shape={self.dense_shape.tolist()})"
        )


class RaggedTensor:
    """A batch of variable-length rows: flat `values` and `row_splits` [B+1]."""

    def __init__(self, values: Any, row_splits: Any):
        owner = "RaggedTensor"
        vals = np.array(values)  # a copy: the caller's array stays theirs (writable), the tensor immutable
        if vals.ndim != 1:
            raise fail("values", "a rank-1 array", values, owner=owner)
        splits = _int_array("row_splits", row_splits, 1, owner)
        if splits.size == 0 or splits[0] != 0:
            raise fail("row_splits", "a non-empty array starting at 0", row_splits, owner=owner)
        if np.any(np.diff(splits) < 0):
            raise fail("row_splits", "a non-decreasing array", row_splits, owner=owner)
        if splits[-1] != vals.shape[0]:
            raise ValueError(
                f"RaggedTensor: the last row split ({int(splits[-1])}) must equal the number of "
                f"values ({vals.shape[0]}). Received: row_splits={splits.tolist()!r:.200}."
            )
        self.values, self.row_splits = vals, splits
        self.values.setflags(write=False)
        self.row_splits.setflags(write=False)

    @classmethod
    def from_row_splits(cls, values: Any, row_splits: Any) -> RaggedTensor:
        return cls(values, row_splits)

    @classmethod
    def from_row_lengths(cls, values: Any, row_lengths: Any) -> RaggedTensor:
        lengths = _int_array("row_lengths", row_lengths, 1, "RaggedTensor")
        if np.any(lengths < 0):
            raise fail("row_lengths", "non-negative lengths", row_lengths, owner="RaggedTensor")
        if np.ndim(values) == 1 and int(lengths.sum()) != np.shape(values)[0]:
            raise fail(
                "row_lengths",
                f"lengths adding up to the number of values ({np.shape(values)[0]})",
                row_lengths,
                owner="RaggedTensor",
            )
        return cls(values, np.concatenate([[0], np.cumsum(lengths)]))

    @classmethod
    def from_value_rowids(cls, values: Any, value_rowids: Any, nrows: Any = None) -> RaggedTensor:
        rowids = _int_array("value_rowids", value_rowids, 1, "RaggedTensor")
        if np.any(np.diff(rowids) < 0) or np.any(rowids < 0):
            raise fail("value_rowids", "a sorted array of non-negative row ids", value_rowids, owner="RaggedTensor")
        if nrows is None:
            nrows = int(rowids[-1]) + 1 if rowids.size else 0
        nrows = check_int("nrows", nrows, minimum=0, owner="RaggedTensor")
        if rowids.size and nrows <= rowids[-1]:
            raise fail("nrows", f"an int > the largest row id ({int(rowids[-1])})", nrows, owner="RaggedTensor")
        if np.ndim(values) == 1 and rowids.size != np.shape(values)[0]:
            raise fail(
                "value_rowids", f"one row id per value ({np.shape(values)[0]})", value_rowids, owner="RaggedTensor"
            )
        try:
            lengths = np.bincount(rowids, minlength=int(nrows))
        except MemoryError:  # numpy's own error would not say which argument asked for it
            raise fail(
                "nrows", "a number of rows whose row lengths fit in memory", nrows, owner="RaggedTensor"
            ) from None
        return cls.from_row_lengths(values, lengths)

    @classmethod
    def from_list(cls, rows: list[list[Any]]) -> RaggedTensor:
        """From a list of lists (`tf.ragged.constant` for rank 2)."""
        flat = [v for row in rows for v in row]
        return cls.from_row_lengths(np.asarray(flat) if flat else np.zeros(0, np.int64), [len(r) for r in rows])

    @property
    def nrows(self) -> int:
        return int(self.row_splits.shape[0] - 1)

    def row_lengths(self) -> np.ndarray:
        return np.diff(self.row_splits)

    def value_rowids(self) -> np.ndarray:
        return np.repeat(np.arange(self.nrows), self.row_lengths())

    def with_values(self, values: Any) -> RaggedTensor:
        return RaggedTensor(values, self.row_splits)

    def to_list(self) -> list[list[Any]]:
        return [self.values[a:b].tolist() for a, b in zip(self.row_splits[:-1], self.row_splits[1:])]

    def __repr__(self):
        return f"RaggedTensor({self.to_list()})"


def ragged_constant(
    pylist: list[list[Any]],
    dtype: Any = None,
    ragged_rank: Any = None,
    inner_shape: Any = None,
    name: Any = None,
    row_splits_dtype: Any = None,
) -> RaggedTensor:
    """`tf.ragged.constant` for rank-2 lists; `dtype` casts the values (`tf.int64`, `'float32'`, a numpy dtype).

    `ragged_rank` may be None or 1 and `inner_shape` None (only rank 2 is
    built); `name` and `row_splits_dtype` are accepted and ignored (the
    row splits are int64).
    """
    if ragged_rank not in (None, 1) or inner_shape is not None:
        raise ValueError(
            "tf.ragged.constant here builds rank-2 ragged tensors only: `ragged_rank` must be None or 1 and "
            f"`inner_shape` None. Received: ragged_rank={ragged_rank!r}, inner_shape={inner_shape!r}."
        )
    ragged = RaggedTensor.from_list(pylist)
    if dtype is None:
        return ragged
    target = as_dtype(dtype)
    values = ragged.values
    if not values.size:
        return ragged.with_values(np.zeros(0, target))
    text = values.dtype.kind in "USO"
    cast = values.astype(target) if text == (target.kind in "USO") else None
    if cast is None or (not text and not np.array_equal(cast.astype(values.dtype), values)):
        raise TypeError(
            f"tf.ragged.constant: the values {values[:5].tolist()!r:.80} cannot be {target.name} without changing "
            f"them. Received: dtype={dtype!r}."
        )
    return ragged.with_values(cast)
