"""TensorFlow's embedding lookups, `tf.nn.embedding_lookup*`, on the engine's kernels.

The six functions of TensorFlow 2.15's `embedding_ops.py`, with their v2
(`tf.nn`) and v1 (`tf.compat.v1.nn`) signatures and defaults. `params` is
one `[V, ...]` table or a list of its shards; which shard owns an id is
`engine.sharding`'s `div` / `mod` rule (TensorFlow's formulas, vocabularies
that are not a multiple of the shard count included), and the pooled
lookups are `engine.lookup.pooled_lookup`. The v2 functions always use
`div`, as TensorFlow's do.

What TensorFlow computes, and so what these compute:

- `embedding_lookup`: a gather; output `ids.shape + params.shape[1:]`, in
  the params' dtype.
- `embedding_lookup_sparse` (plain): ids combined per row of `sp_ids` (its
  first index), nothing pruned. The output has only `max(row with an id) +
  1` rows: TensorFlow's segment sums drop trailing empty rows (inner empty
  rows are zeros). Rows must come in order, as TensorFlow requires.
- `safe_embedding_lookup_sparse`: ids < 0 are dropped, and for `mean` and
  `sqrtn` entries with weight <= 0; an empty row gives zeros, or
  `params[default_id]`. Sparse ids of shape `[d0, ..., dn]` give
  `[d0, ..., dn-1] + params.shape[1:]`.
- `max_norm`: each gathered row is scaled down to that L2 norm before it is
  combined (`engine.lookup.clip_rows`).

Errors: TensorFlow's run-time `InvalidArgumentError` (an id out of range,
shards that do not fit together) is a `ValueError` here, raised before
anything is computed; argument errors keep TensorFlow's types. Pooled
results are float32 (the engine's precision). The few places where this is
stricter than TensorFlow are listed in docs/stricter_than_tensorflow.md.

>>> import numpy as np
>>> import tpu_embedding_shim as tf
>>> params = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], dtype=np.float32)
>>> sp_ids = tf.SparseTensor(indices=[[0, 0], [0, 1], [2, 0]], values=[0, 1, 3], dense_shape=[4, 2])
>>> tf.nn.embedding_lookup_sparse(params, sp_ids, None, combiner="sum").tolist()  # trailing empty row dropped
[[4.0, 6.0], [0.0, 0.0], [7.0, 8.0]]
>>> tf.nn.safe_embedding_lookup_sparse(params, sp_ids, combiner="sum", default_id=2).tolist()
[[4.0, 6.0], [5.0, 6.0], [7.0, 8.0], [5.0, 6.0]]
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..engine import Ragged, is_ragged_tensor, is_sparse, locate, lookup, shard_sizes, to_ragged
from ..spec import FeatureSpec, parse_combiner, parse_partition_strategy
from ..spec.checks import check_bool, check_real, fail
from .tensors import RaggedTensor, SparseTensor

__all__ = [
    "embedding_lookup",
    "embedding_lookup_v2",
    "embedding_lookup_sparse",
    "embedding_lookup_sparse_v2",
    "safe_embedding_lookup_sparse",
    "safe_embedding_lookup_sparse_v2",
]


# --------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------


_FLOAT32 = np.finfo(np.float32)


def _max_norm(max_norm: Any) -> float | None:
    """None, or a number > 0 that float32 holds (TensorFlow also takes 0 and negatives, and flips or zeroes
    rows; a norm past float32's range would turn rows into NaN or zeros)."""
    if max_norm is None:
        return None
    number = check_real("max_norm", max_norm, minimum=0, min_open=True)
    low, high = float(_FLOAT32.smallest_subnormal), float(_FLOAT32.max)
    if not low <= number <= high:
        raise fail("max_norm", f"a number > 0 within float32's range [{low:g}, {high:g}]", max_norm)
    return number


class _Table(NamedTuple):
    """One table as TensorFlow's `params`: its `[rows, D]` shards (D = the embedding size, flattened)."""

    shards: list[np.ndarray]
    strategy: str
    embedding_shape: tuple[int, ...]

    @property
    def vocabulary_size(self) -> int:
        return sum(s.shape[0] for s in self.shards)

    @property
    def dtype(self) -> np.dtype:
        return self.shards[0].dtype

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """`[len(ids), D]`: the rows of ids already checked to be in [0, V); only those rows are read."""
        if len(self.shards) == 1:
            return self.shards[0][ids]
        shard, row = locate(ids, self.vocabulary_size, len(self.shards), self.strategy)
        out = np.empty((ids.shape[0], self.shards[0].shape[1]), dtype=np.result_type(*self.shards))
        for s, values in enumerate(self.shards):
            mine = shard == s
            out[mine] = values[row[mine]]
        return out


def _table(params: Any, strategy: str, name: str) -> _Table:
    """`params` checked: one table, or a list of its shards laid out by `strategy` (`div` or `mod`,
    TensorFlow's `partition_strategy`). Shards are never joined into a copy of the whole table."""
    allowed = "a [vocabulary_size, ...] array or a non-empty list of its shards"
    if params is None or (isinstance(params, list) and not params):
        raise ValueError(f"Argument `{name}` must be {allowed}. Received: {params!r}.")
    if isinstance(params, tuple):  # TensorFlow converts a tuple to one tensor: equal shapes only
        try:
            params = np.asarray(params)
        except ValueError:
            shapes = [np.shape(p) for p in params]
            raise ValueError(
                f"Argument `{name}` must be {allowed}. Received a tuple of arrays of shapes {shapes}: TensorFlow "
                "reads a tuple as one tensor (its elements of equal shape); pass shards as a list."
            ) from None
    shards = [np.asarray(p) for p in (params if isinstance(params, list) else [params])]
    if any(s.ndim == 0 for s in shards):
        raise ValueError(
            f"Argument `{name}` must be {allowed}, each of rank >= 1. Received shapes {[s.shape for s in shards]}."
        )
    embedding_shape = shards[0].shape[1:]
    if any(s.shape[1:] != embedding_shape for s in shards):
        raise ValueError(
            f"Argument `{name}`: every shard must have the same shape after the first "
            f"dimension. Received shapes {[s.shape for s in shards]}."
        )
    dim = int(np.prod(embedding_shape, dtype=np.int64))
    flat = [s.reshape(s.shape[0], dim) for s in shards]
    if len(flat) == 1:
        return _Table(flat, strategy, embedding_shape)
    rows = [s.shape[0] for s in flat]
    vocabulary_size, num_shards = sum(rows), len(flat)
    if vocabulary_size < (num_shards if strategy == "div" else 1):
        raise ValueError(
            f"Argument `{name}`: {num_shards} shards of {rows} rows can't hold a table by "
            f"partition_strategy={strategy!r}: 'div' needs at least one row per shard (TensorFlow "
            "fails with 'Integer division by zero'), 'mod' at least one row."
        )
    expected = shard_sizes(vocabulary_size, num_shards, strategy)
    if rows != expected:
        raise ValueError(
            f"Argument `{name}`: a {vocabulary_size}-row table split into {num_shards} shards by "
            f"partition_strategy={strategy!r} has shards of {expected} rows. Received shards of {rows} rows."
        )
    return _Table(flat, strategy, embedding_shape)


def _check_range(name: str, ids: np.ndarray, vocabulary_size: int, *, entry: bool = True) -> None:
    """ValueError (TensorFlow: InvalidArgumentError) for the first id outside [0, V); `entry`: say where."""
    bad = (ids < 0) | (ids >= vocabulary_size)
    if bad.any():
        k = int(np.flatnonzero(bad.reshape(-1))[0])
        where = f" (entry {k})" if entry else ""
        raise ValueError(
            f"Argument `{name}` must hold row ids in [0, {vocabulary_size}). Received: "
            f"{int(ids.reshape(-1)[k])}{where}."
        )


def _int_ids(name: str, values: np.ndarray) -> np.ndarray:
    """int64 ids, or TypeError for floats, bools, strings (TensorFlow's gather takes int16/32/64)."""
    if values.size == 0:
        return values.astype(np.int64)
    if values.dtype.kind not in "iu":
        raise TypeError(f"Argument `{name}` must hold integer ids (int32 or int64). Received dtype {values.dtype}.")
    if values.dtype.kind == "u" and values.dtype.itemsize == 8:
        big = values > np.iinfo(np.int64).max
        if big.any():  # would wrap to a negative int64
            k = int(np.flatnonzero(big.reshape(-1))[0])
            raise ValueError(
                f"Argument `{name}` must hold row ids that fit in int64 (< 2**63). Received: "
                f"{int(values.reshape(-1)[k])} (entry {k})."
            )
    return values.astype(np.int64)


# --------------------------------------------------------------------------
# Sparse and ragged ids -> one Ragged batch
# --------------------------------------------------------------------------


class _Coo(NamedTuple):
    """A rank-2 COO batch, as `to_ragged` reads it."""

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


def _linear(indices: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Row-major linear index of each row of `indices` within `shape` (zeros for rank 0)."""
    if shape.size == 0:
        return np.zeros(indices.shape[0], dtype=np.int64)
    return np.ravel_multi_index(tuple(indices.T), tuple(int(d) for d in shape)).astype(np.int64)


def _as_coo(x: Any, name: str, *, safe: bool) -> tuple[_Coo, tuple[int, ...]]:
    """A SparseTensor or RaggedTensor as a rank-2 COO, and the leading shape of the output.

    Safe lookup (TensorFlow reshapes `[d0, ..., dn]` to `[d0 * ... * dn-1, dn]`):
    the rows are all dimensions but the last. Plain lookup (TensorFlow's
    segments are the first index): the rows are the first dimension.
    """
    if is_sparse(x):
        st = SparseTensor(x.indices, x.values, x.dense_shape)
        indices, shape = st.indices, st.dense_shape
        if shape.size == 0:
            raise ValueError(f"Argument `{name}` must be a SparseTensor of rank >= 1. Received dense_shape [].")
        split = shape.size - 1 if safe else 1
        rows, cols = _linear(indices[:, :split], shape[:split]), _linear(indices[:, split:], shape[split:])
        coo_shape = [int(np.prod(shape[:split])), int(np.prod(shape[split:]))]
        lead = tuple(int(d) for d in shape[:split])
        values = st.values
    else:
        rt = RaggedTensor(x.values, x.row_splits)
        rows = rt.value_rowids().astype(np.int64)
        cols = np.arange(rows.shape[0], dtype=np.int64) - rt.row_splits[rows]
        coo_shape = [rt.nrows, int(rt.row_lengths().max(initial=0))]
        lead, values = (rt.nrows,), rt.values
    return _Coo(np.stack([rows, cols], axis=1), values, np.array(coo_shape, dtype=np.int64)), lead


def _batch(
    sp_ids: Any, sp_weights: Any, vocabulary_size: int, combiner: str, *, safe: bool, names: tuple[str, str]
) -> tuple[Ragged, tuple[int, ...]]:
    """The engine's batch for a pooled lookup, every id checked, and the output's leading shape."""
    ids_name, weights_name = names
    if is_sparse(sp_ids):
        kind, same_kind = "SparseTensor", is_sparse
    elif is_ragged_tensor(sp_ids):
        kind, same_kind = "RaggedTensor", is_ragged_tensor
    else:
        raise TypeError(
            f"Argument `{ids_name}` must be a SparseTensor or a RaggedTensor. Received: {type(sp_ids).__name__}."
        )
    ids, lead = _as_coo(sp_ids, ids_name, safe=safe)
    ids = ids._replace(values=_int_ids(ids_name, ids.values))

    weights = None
    if sp_weights is not None:
        if not same_kind(sp_weights):
            raise TypeError(
                f"Argument `{weights_name}` must be None or a {kind}, like `{ids_name}`. "
                f"Received: {type(sp_weights).__name__}."
            )
        weights, _ = _as_coo(sp_weights, weights_name, safe=safe)
        if weights.values.size and weights.values.dtype.kind not in "iuf":
            raise TypeError(f"Argument `{weights_name}` must hold numbers. Received dtype {weights.values.dtype}.")
        if not (np.array_equal(weights.indices, ids.indices) and np.array_equal(weights.dense_shape, ids.dense_shape)):
            raise ValueError(
                f"Argument `{weights_name}` must have the same indices and shape as `{ids_name}` (one weight per id)."
            )
        with np.errstate(over="ignore"):  # a float64 weight past float32's range is refused just below
            infinite = np.isinf(weights.values.astype(np.float32))
        if infinite.any():
            k = int(np.flatnonzero(infinite)[0])
            raise ValueError(
                f"Argument `{weights_name}` must hold finite weights (in float32). Received: "
                f"{float(weights.values[k])} (entry {k})."
            )

    rows = ids.indices[:, 0]
    if not safe:
        if np.any(rows[1:] < rows[:-1]):
            raise ValueError(
                f"Argument `{ids_name}`: its rows must come in order (canonical row-major order, "
                "as tf.sparse.reorder gives); TensorFlow fails with 'segment ids are not increasing'. "
                f"Received rows {rows.tolist()[:10]}."
            )
        _check_range(ids_name, ids.values, vocabulary_size)  # nothing is pruned: every id is looked up
        # The output stops at the last row with an id, so the batch does too: a huge dense_shape costs nothing.
        used_rows = np.array([int(rows.max(initial=-1)) + 1, ids.dense_shape[1]], dtype=np.int64)
        ids = ids._replace(dense_shape=used_rows)
        if weights is not None:
            weights = weights._replace(dense_shape=used_rows)
    # to_ragged drops ids < 0 (the safe rule's first step). A safe lookup's range is checked on
    # the ids it really uses (TensorFlow never gathers an entry the safe rule pruned), so the
    # spec admits every id here.
    top = int(ids.values.max(initial=-1)) + 1
    feature = FeatureSpec(name=ids_name, table="params", num_buckets=max(vocabulary_size, top, 1))
    batch = to_ragged(ids, weights, feature=feature)
    if safe:
        used = lookup.pooled_coefficients(batch, combiner, safe=True)[1]
        _check_range(ids_name, used, vocabulary_size, entry=False)
    else:  # segment sums stop at the last row with an id
        lead = (int(rows.max(initial=-1)) + 1,)
    return batch, lead


class _Pooling(NamedTuple):
    """The options of a pooled lookup, checked."""

    combiner: str
    strategy: str
    max_norm: float | None


def _pooling(combiner: Any, partition_strategy: Any, max_norm: Any, allow_fast_lookup: Any) -> _Pooling:
    """Checks a pooled lookup's options; None is the 'mean' combiner, `allow_fast_lookup` a speed hint (no effect)."""
    combiner = parse_combiner("mean" if combiner is None else combiner)
    strategy = parse_partition_strategy(partition_strategy)
    max_norm = _max_norm(max_norm)
    check_bool("allow_fast_lookup", allow_fast_lookup)
    return _Pooling(combiner, strategy, max_norm)


def _pooled(
    params: Any,
    sp_ids: Any,
    sp_weights: Any,
    pooling: _Pooling,
    *,
    safe: bool,
    default_id: Any = None,
    names=("params", "sp_ids", "sp_weights"),
) -> np.ndarray:
    """The plain (`safe=False`) or safe pooled lookup: float32 `lead + params.shape[1:]`."""
    combiner, strategy, max_norm = pooling
    table = _table(params, strategy, names[0])
    if table.dtype.kind not in "iuf":
        raise TypeError(f"Argument `{names[0]}` must hold numbers. Received dtype {table.dtype}.")
    try:
        batch, lead = _batch(sp_ids, sp_weights, table.vocabulary_size, combiner, safe=safe, names=names[1:])
    except MemoryError:  # a safe lookup returns every row of the dense shape, as TensorFlow does
        shape = [int(d) for d in getattr(sp_ids, "dense_shape", [])]
        raise ValueError(
            f"Argument `{names[1]}`: its dense_shape {shape} asks for more rows than fit in memory (a safe lookup "
            "returns one row per row of the dense shape, as TensorFlow does); give the SparseTensor the shape of "
            "its batch."
        ) from None
    if len(table.shards) == 1:
        rows = table.shards[0]
    else:  # only the rows the batch names (and the default row), gathered from their shards; ids renumbered
        lookup.check_default_id(default_id, table.vocabulary_size, safe)
        named = batch.values[batch.values < table.vocabulary_size]  # ids >= V here are pruned by the safe rule
        used = np.unique(named if default_id is None else np.append(named, default_id))
        rows = table.rows(used)
        renumbered = np.minimum(np.searchsorted(used, batch.values), max(used.size - 1, 0))
        batch = dataclasses.replace(batch, values=renumbered)
        default_id = None if default_id is None else int(np.searchsorted(used, default_id))
    out = lookup.pooled_lookup(rows, batch, combiner, safe=safe, default_id=default_id, max_norm=max_norm)
    return out[: int(np.prod(lead))].reshape(lead + table.embedding_shape)


# --------------------------------------------------------------------------
# The TensorFlow functions
# --------------------------------------------------------------------------


def embedding_lookup(
    params: Any,
    ids: Any,
    partition_strategy: str = "mod",
    name: str | None = None,
    validate_indices: bool = True,
    max_norm: float | None = None,
) -> np.ndarray:
    """`tf.compat.v1.nn.embedding_lookup`: the rows of `ids`, from one table or its shards.

    Args:
      params: a `[V, ...]` array, or a list of its shards (same shape after
        the first dimension), laid out by `partition_strategy`.
      ids: integer ids in [0, V), any shape (an array, a list, an int).
      partition_strategy: 'mod' (id i in shard i % N) or 'div' (contiguous
        ranges; the first V % N shards hold one row more).
      name: accepted, no effect (TensorFlow's op name).
      validate_indices: accepted, no effect (deprecated in TensorFlow; ids
        are always checked, as on TensorFlow's CPU).
      max_norm: None, or a number > 0: rows longer (L2) are scaled down to it.

    Returns:
      `ids.shape + params.shape[1:]`, in the params' dtype.

    Raises:
      ValueError: no params, shards that do not fit the strategy, an id out
        of range, a `partition_strategy` other than 'div' or 'mod'.
      TypeError: ids that are not integers; `max_norm` with integer params.

    >>> import numpy as np
    >>> shards = [np.array([[0.0], [2.0], [4.0]]), np.array([[1.0], [3.0]])]  # 5 rows, 'mod'
    >>> embedding_lookup(shards, [[4, 1], [0, 3]])[..., 0].tolist()
    [[4.0, 1.0], [0.0, 3.0]]
    """
    strategy = parse_partition_strategy(partition_strategy)
    max_norm = _max_norm(max_norm)
    table = _table(params, strategy, "params")
    if is_sparse(ids):
        raise ValueError(
            "Argument `ids` must be a dense array of ids. Received: a SparseTensor; "
            "use embedding_lookup_sparse or safe_embedding_lookup_sparse."
        )
    if is_ragged_tensor(ids):
        raise TypeError(
            "Argument `ids` must be a dense array of ids. Received: a RaggedTensor; look up "
            "`ids.values` and keep `ids.row_splits`, or use embedding_lookup_sparse to combine rows."
        )
    ids = _int_ids("ids", np.asarray(ids))
    _check_range("ids", ids, table.vocabulary_size)
    rows = table.rows(ids.reshape(-1))
    if max_norm is not None:
        if rows.dtype.kind != "f":
            raise TypeError(f"Argument `max_norm` needs floating-point params. Received params of dtype {rows.dtype}.")
        rows = lookup.clip_rows(rows, max_norm)
    return rows.reshape(ids.shape + table.embedding_shape)


def embedding_lookup_sparse(
    params: Any,
    sp_ids: Any,
    sp_weights: Any,
    partition_strategy: str = "mod",
    name: str | None = None,
    combiner: str | None = None,
    max_norm: float | None = None,
    allow_fast_lookup: bool = False,
) -> np.ndarray:
    """`tf.compat.v1.nn.embedding_lookup_sparse`: one combined row per row of `sp_ids`, nothing pruned.

    Args:
      params: a `[V, ...]` array, or a list of its shards laid out by
        `partition_strategy` ('mod' or 'div').
      sp_ids: a SparseTensor (rows: its first index, in order) or a
        RaggedTensor of ids in [0, V).
      sp_weights: None (every weight 1) or a SparseTensor / RaggedTensor of
        the same kind, indices and shape as `sp_ids`.
      partition_strategy: 'mod' (the default) or 'div', as
        `embedding_lookup`.
      name: accepted, no effect (TensorFlow's op name).
      combiner: 'sum', 'mean' (the default, also for None) or 'sqrtn':
        sum w e, sum w e / sum w, sum w e / sqrt(sum w^2); a zero
        denominator gives 0.
      max_norm: None, or a number > 0: rows are clipped to it before combining.
      allow_fast_lookup: True or False; a speed hint, no effect here.

    Returns:
      float32 `[n] + params.shape[1:]`, n = 1 + the last row that has an id
      (TensorFlow drops trailing empty rows; inner empty rows are zeros).

    Raises:
      TypeError: `sp_ids` not sparse or ragged, `sp_weights` of another kind,
        non-integer ids.
      ValueError: a bad combiner, an id out of range (negative ids too),
        rows out of order, weights that do not line up with the ids.
    """
    pooling = _pooling(combiner, partition_strategy, max_norm, allow_fast_lookup)
    return _pooled(params, sp_ids, sp_weights, pooling, safe=False)


def safe_embedding_lookup_sparse(
    embedding_weights: Any,
    sparse_ids: Any,
    sparse_weights: Any = None,
    combiner: str = "mean",
    default_id: int | None = None,
    name: str | None = None,
    partition_strategy: str = "div",
    max_norm: float | None = None,
    allow_fast_lookup: bool = False,
) -> np.ndarray:
    """`tf.compat.v1.nn.safe_embedding_lookup_sparse`: the pooled lookup with TensorFlow's safe rule.

    Ids < 0 are dropped, and (for 'mean' and 'sqrtn') entries with weight
    <= 0; a row left empty gives zeros, or `embedding_weights[default_id]`.

    Args:
      embedding_weights: a `[V, ...]` array, or a list of its shards laid out
        by `partition_strategy` ('div', the default here, or 'mod').
      sparse_ids: a SparseTensor of shape `[d0, ..., dn]` (combined along the
        last dimension) or a RaggedTensor.
      sparse_weights: None, or weights of the same kind, indices and shape.
      combiner: 'mean' (default), 'sum' or 'sqrtn' (None is 'mean').
      default_id: None, or the row an empty row gets (an int in [0, V)).
      name: accepted, no effect.
      partition_strategy: 'div' (the default here) or 'mod', as
        `embedding_lookup`.
      max_norm: as `embedding_lookup_sparse`.
      allow_fast_lookup: as `embedding_lookup_sparse`.

    Returns:
      float32 `[d0, ..., dn-1] + embedding_weights.shape[1:]`: every row, the
      empty ones included.

    Raises:
      TypeError, ValueError: as `embedding_lookup_sparse`; a kept id >= V
        and a `default_id` outside [0, V) are ValueErrors.
    """
    pooling = _pooling(combiner, partition_strategy, max_norm, allow_fast_lookup)
    names = ("embedding_weights", "sparse_ids", "sparse_weights")
    return _pooled(
        embedding_weights, sparse_ids, sparse_weights, pooling, safe=True, default_id=default_id, names=names
    )


# --------------------------------------------------------------------------
# TensorFlow 2's forms (`tf.nn`)
# --------------------------------------------------------------------------

_TF1_ONLY = ("partition_strategy", "validate_indices")


def _tf2(v1_function: Callable[..., np.ndarray], doc: str) -> Callable[..., np.ndarray]:
    """The `tf.nn` form of a `tf.compat.v1.nn` lookup, derived as TensorFlow 2 derives it.

    TensorFlow 2's function takes TensorFlow 1's arguments and defaults but
    `partition_strategy` (always 'div') and the deprecated
    `validate_indices`, with `name` moved after `max_norm`. The returned
    function has that signature (`inspect.signature`, `help()`); a call
    binds to it, so a missing or unknown argument is a TypeError naming it.
    """
    v1_signature = inspect.signature(v1_function)
    parameters = [p for name, p in v1_signature.parameters.items() if name not in _TF1_ONLY]
    name = parameters.pop([p.name for p in parameters].index("name"))
    parameters.insert([p.name for p in parameters].index("max_norm") + 1, name)
    signature = v1_signature.replace(parameters=parameters)

    def function(*args: Any, **kwargs: Any) -> np.ndarray:
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError as error:
            raise TypeError(f"{function.__name__}() {error}") from None
        return v1_function(**arguments, partition_strategy="div")

    function.__name__ = function.__qualname__ = v1_function.__name__ + "_v2"
    function.__doc__ = doc
    function.__signature__ = signature  # type: ignore[attr-defined]
    return function


embedding_lookup_v2 = _tf2(
    embedding_lookup,
    """`tf.nn.embedding_lookup`: `embedding_lookup` with 'div' shards.

    >>> import numpy as np
    >>> params = [np.array([[1, 2], [3, 4]]), np.array([[5, 6], [7, 8]]), np.array([[9, 10]])]
    >>> embedding_lookup_v2(params, [0, 3, 4]).tolist()
    [[1, 2], [7, 8], [9, 10]]
    """,
)

embedding_lookup_sparse_v2 = _tf2(
    embedding_lookup_sparse,
    """`tf.nn.embedding_lookup_sparse`: `embedding_lookup_sparse` with 'div' shards.

    >>> import numpy as np
    >>> import tpu_embedding_shim as tf
    >>> params = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], dtype=np.float32)
    >>> sp_ids = tf.SparseTensor(indices=[[0, 0], [0, 1], [1, 0], [2, 0]], values=[0, 1, 3, 2], dense_shape=[3, 2])
    >>> weights = sp_ids.with_values(np.array([0.1, 1.0, 0.5, 2.0], dtype=np.float32))
    >>> print(embedding_lookup_sparse_v2(params, sp_ids, weights, combiner="sum"))
    [[ 3.1  4.2]
     [ 3.5  4. ]
     [10.  12. ]]
    """,
)

safe_embedding_lookup_sparse_v2 = _tf2(
    safe_embedding_lookup_sparse,
    """`tf.nn.safe_embedding_lookup_sparse`: `safe_embedding_lookup_sparse` with 'div' shards.

    >>> import numpy as np
    >>> import tpu_embedding_shim as tf
    >>> params = np.arange(8, dtype=np.float32).reshape(4, 2)
    >>> ids = tf.SparseTensor(indices=[[0, 0], [0, 1], [1, 0]], values=[1, 3, -1], dense_shape=[3, 2])
    >>> safe_embedding_lookup_sparse_v2(params, ids).tolist()  # mean; row 1 has only an invalid id
    [[4.0, 5.0], [0.0, 0.0], [0.0, 0.0]]
    """,
)
