"""Input conversion: every accepted id format becomes one `Ragged` batch.

The engine works on a single internal form. A batch of `B` examples of one
feature is four flat arrays::

    example 0: ids [3, 7]      example 1: (empty)     example 2: ids [5]

    values     = [3, 7, 5]             int64 row ids, all in [0, num_buckets)
    row_splits = [0, 2, 2, 3]          int64 [B + 1]; example b is values[row_splits[b]:row_splits[b+1]]
    weights    = [1.0, 0.5, 2.0]       float32 [N], or None (= all 1)
    positions  = [0, 1, 0]             int64 [N]; where each id sat inside its example

`to_ragged` accepts what TensorFlow users feed (dense arrays padded with
negative ids, ragged Python lists, `SparseTensor`- and `RaggedTensor`-like
objects, strings for vocabulary features), checks it once, and returns a
`Ragged`. The lookup kernels trust what it returns and never re-check.

Rules (the same for every input form unless said otherwise):

- Negative ids are padding and are dropped, with their weights and without
  changing the positions of the ids that remain. In a *dense* array every
  negative entry is padding (and, for string arrays, the empty string).
- An identity feature with `default_value` maps any out-of-range value
  (negative or >= num_buckets) that is not dense padding to
  `default_value`: TensorFlow's `categorical_column_with_identity` rule.
- Otherwise an id >= num_buckets is a `ValueError` naming the feature, the
  id and the allowed range: TensorFlow's CPU gather fails the same way.
- Ids must be integers: floats, bools and strings (for an identity
  feature) are a `TypeError`.
- Vocabulary features map each token to its index in `feature.vocabulary`.
  An unknown token gets `default_value` (None or -1: dropped) or, with
  `num_oov_buckets > 0`, the id `len(vocabulary) + fingerprint64(token) %
  num_oov_buckets`, where `fingerprint64` is FarmHash's `Fingerprint64`
  (the hash TensorFlow's `tf.strings.to_hash_bucket_fast` uses, so the OOV
  buckets are TensorFlow's). Integer tokens are hashed as their decimal
  string, as TensorFlow does. (`vocabulary.py` maps the tokens,
  `farmhash.py` hashes them.)

>>> from tpu_embedding_shim.spec import FeatureSpec
>>> f = FeatureSpec(name="movie", table="tbl_movie", num_buckets=10)
>>> r = to_ragged([[3, 7], [-1, -1], [5, -1]], feature=f)
>>> r.values.tolist(), r.row_splits.tolist(), r.row_positions().tolist()
([3, 7, 5], [0, 2, 2, 3], [0, 1, 0])
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..spec import FeatureSpec
from .farmhash import fingerprint64, hash_bucket
from .vocabulary import map_vocabulary, normalize_token

# `fingerprint64` and `hash_bucket` (farmhash.py) stay importable from here, where they were first documented.
__all__ = [
    "Ragged",
    "to_ragged",
    "CheckedBatch",
    "check_batch",
    "check_batches",
    "is_sparse",
    "is_ragged_tensor",
    "fingerprint64",
    "hash_bucket",
]


# --------------------------------------------------------------------------
# The internal form
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Ragged:
    """One batch of one feature in the engine's single internal form.

    Attributes:
      values: int64 [N] row ids, all in [0, num_buckets), example by example.
      row_splits: int64 [B + 1]; the ids of example b are
        `values[row_splits[b]:row_splits[b + 1]]`. Starts at 0, ends at N.
      weights: float32 [N], or None meaning every weight is 1.
      positions: int64 [N]; the position of each id inside its example: the
        column index of a sparse or dense input, the index inside a ragged
        row. Sequence lookups put id k at `out[b, positions[k]]`. None
        means the index inside the row (`k - row_splits[b]`), computed when
        first asked for (`row_positions()`): a pooled lookup never needs
        them, and the fast path's input pass then writes one array, not two.
    """

    values: np.ndarray
    row_splits: np.ndarray
    weights: np.ndarray | None
    positions: np.ndarray | None = None

    def __post_init__(self):
        # Cheap structural checks only (O(1)); contents are checked by to_ragged.
        n = self.values.shape[0] if self.values.ndim == 1 else -1
        ok = (
            self.values.ndim == 1
            and self.row_splits.ndim == 1
            and self.row_splits.shape[0] >= 1
            and int(self.row_splits[0]) == 0
            and int(self.row_splits[-1]) == n
            and (self.positions is None or self.positions.shape == (n,))
            and (self.weights is None or self.weights.shape == (n,))
        )
        if not ok:
            raise ValueError(
                "Ragged needs values [N], row_splits [B+1] from 0 to N, positions [N] and "
                f"weights [N] or None. Received shapes: values {self.values.shape}, row_splits "
                f"{self.row_splits.shape}, positions {None if self.positions is None else self.positions.shape}, "
                f"weights "
                f"{None if self.weights is None else self.weights.shape}."
            )

    @property
    def batch_size(self) -> int:
        """Number of examples B."""
        return int(self.row_splits.shape[0]) - 1

    @property
    def num_values(self) -> int:
        """Number of ids N over the whole batch."""
        return int(self.values.shape[0])

    def row_lengths(self) -> np.ndarray:
        """int64 [B]: number of ids in each example."""
        return np.diff(self.row_splits)

    def row_ids(self) -> np.ndarray:
        """int64 [N]: the example each id belongs to (non-decreasing)."""
        return np.repeat(np.arange(self.batch_size, dtype=np.int64), self.row_lengths())

    def row_positions(self) -> np.ndarray:
        """int64 [N]: `positions`, or, when None, each id's index inside its row (computed once)."""
        positions = self.positions
        if positions is None:
            positions = np.arange(self.num_values, dtype=np.int64) - np.repeat(self.row_splits[:-1], self.row_lengths())
            object.__setattr__(self, "positions", positions)  # a cache: the same values the None stood for
        return positions

    def weights_or_ones(self) -> np.ndarray:
        """float32 [N]: the weights, with None read as all ones."""
        if self.weights is None:
            return np.ones(self.num_values, dtype=np.float32)
        return self.weights


# --------------------------------------------------------------------------
# Classifying raw values
# --------------------------------------------------------------------------


def _kind(values: np.ndarray, feature: FeatureSpec, what: str = "ids") -> tuple[str, np.ndarray]:
    """('int' | 'str', values) or TypeError for floats, bools and other types."""
    k = values.dtype.kind
    if k in "iu":
        return "int", values
    if k in "US":
        return "str", values
    if k == "O":
        flat = values.ravel().tolist()
        if all(isinstance(v, (str, bytes)) for v in flat):
            return "str", np.array([normalize_token(v) for v in flat], dtype=str).reshape(values.shape)
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in flat):
            return "int", np.array(flat, dtype=np.int64).reshape(values.shape)
    received = (
        f"dtype {values.dtype}"
        if k != "O"
        else "objects of type " + ", ".join(sorted({type(v).__name__ for v in values.ravel().tolist()}))
    )
    hint = ""
    if k == "f":
        hint = " If the values are whole numbers, cast them first, e.g. `ids.astype(np.int64)`."
    allowed = "integers" if feature.id_source == "identity" else "tokens (strings or integers)"
    raise TypeError(f"Feature {feature.name!r}: {what} must be {allowed}. Received {received}.{hint}")


def _weights_array(weights: Any, feature: FeatureSpec) -> np.ndarray:
    """float32 weights; an infinite one (also a float64 one past float32's range) is refused: it would
    write NaN into the table. NaN weights are kept: the safe rule drops them (as any weight <= 0)."""
    w = np.asarray(weights)
    if w.size and (w.dtype.kind not in "iuf"):
        raise TypeError(f"Feature {feature.name!r}: weights must be numbers (float or int). Received dtype {w.dtype}.")
    with np.errstate(over="ignore"):  # a float64 weight past float32's range: refused just below
        w32 = w.astype(np.float32)
    check_weights_finite(w32, feature, received=w)
    return w32


def check_weights_finite(weights: np.ndarray, feature: FeatureSpec, received: np.ndarray | None = None) -> None:
    """ValueError for an infinite float32 weight (naming the feature, the value and where it is)."""
    infinite = np.isinf(weights)
    if infinite.any():
        k = int(np.flatnonzero(infinite.reshape(-1))[0])
        value = float((weights if received is None else np.asarray(received)).reshape(-1)[k])
        raise ValueError(
            f"Feature {feature.name!r}: weights must be finite (in float32). Received {value} at entry {k}. "
            "An infinite weight would write NaN into the table; NaN and weights <= 0 are dropped by the safe "
            "lookup rule instead."
        )


def check_nan_weights_dropped(batch: Ragged, feature: FeatureSpec, combiner: str) -> None:
    """ValueError for a NaN weight the lookup would use: the safe rule drops NaN (and weights <= 0) for
    'mean' and 'sqrtn', but 'sum' and `safe=False` keep every weight, and a NaN one would write NaN
    into the table. Sequence features ignore weights (as a TPU does)."""
    if batch.weights is None or (combiner != "sum" and feature.safe_lookup):
        return
    nan = np.isnan(batch.weights)
    if nan.any():
        k = int(np.flatnonzero(nan)[0])
        kept_by = "combiner 'sum'" if combiner == "sum" else "safe lookup off"
        raise ValueError(
            f"Feature {feature.name!r}: weight {k} is NaN, and the lookup would use it ({kept_by} keeps every "
            "weight) and write NaN into the table. Drop the entry, or give it weight 0."
        )


def is_sparse(x: Any) -> bool:
    """Whether `x` is a SparseTensor-like input: it has `indices`, `values` and `dense_shape`."""
    return all(hasattr(x, a) for a in ("indices", "values", "dense_shape"))


def is_ragged_tensor(x: Any) -> bool:
    """Whether `x` is a RaggedTensor-like input: it has `values` and `row_splits`."""
    return hasattr(x, "values") and hasattr(x, "row_splits")


def _is_row(x: Any) -> bool:
    return isinstance(x, (list, tuple)) or (isinstance(x, np.ndarray) and x.ndim >= 1)


def _mismatch(feature: FeatureSpec, detail: str) -> ValueError:
    return ValueError(
        f"Feature {feature.name!r}: weights must have the same form as the ids and line up with them; {detail}"
    )


# --------------------------------------------------------------------------
# Decomposition of each input form into flat arrays
# --------------------------------------------------------------------------


@dataclasses.dataclass
class _Flat:
    values: np.ndarray  # raw values [N] (ints or strings)
    row_splits: np.ndarray  # int64 [B + 1]
    positions: np.ndarray | None  # int64 [N]; None: each id's index inside its row
    weights: np.ndarray | None  # float32 [N] or None
    dense: bool = False  # True: negative ints / '' strings are padding


def checked_sparse_indices(indices: Any, num_values: int, dense_shape: np.ndarray, where: str) -> np.ndarray:
    """A sparse tensor's `indices` as int64 `[N, rank]`, after TensorFlow's checks of a SparseTensor.

    One row per value, one integer column per dimension of `dense_shape`,
    every index inside it; otherwise a ValueError starting with `where`
    (the feature or the object being built).
    """
    indices = np.asarray(indices)
    rank = dense_shape.shape[0]
    if indices.size == 0:
        indices = indices.reshape(0, rank).astype(np.int64)
    if indices.ndim != 2 or indices.shape[1] != rank or indices.dtype.kind not in "iu":
        raise ValueError(
            f"{where}: sparse `indices` must be integers of shape [N, {rank}] (one column per dimension: the rank "
            f"of dense_shape). Received shape {indices.shape}, dtype {indices.dtype}."
        )
    if indices.shape[0] != num_values:
        raise ValueError(
            f"{where}: sparse `indices` and `values` must have the same length. "
            f"Received {indices.shape[0]} indices and {num_values} values."
        )
    indices = indices.astype(np.int64)
    bad = np.flatnonzero(np.any((indices < 0) | (indices >= dense_shape), axis=1))
    if bad.size:
        raise ValueError(
            f"{where}: sparse index {indices[bad[0]].tolist()} is outside dense_shape {dense_shape.tolist()} (out "
            "of bounds). Every index must satisfy 0 <= index < dense_shape."
        )
    return indices


def _from_sparse(ids: Any, weights: Any, feature: FeatureSpec) -> _Flat:
    name = feature.name
    values = np.asarray(ids.values).reshape(-1)
    dense_shape = np.asarray(ids.dense_shape).reshape(-1)
    if dense_shape.shape != (2,):
        raise ValueError(
            f"Feature {name!r}: sparse ids must have rank 2 ([batch, positions]). "
            f"Received dense_shape {dense_shape.tolist()}."
        )
    indices = checked_sparse_indices(ids.indices, values.shape[0], dense_shape, f"Feature {name!r}")
    num_rows = int(dense_shape[0])
    rows, cols = indices[:, 0], indices[:, 1]

    w = None
    if weights is not None:
        if not is_sparse(weights):
            raise _mismatch(feature, f"ids are sparse, weights are {type(weights).__name__}.")
        w_indices = np.asarray(weights.indices).reshape(-1, 2) if np.size(weights.indices) else np.zeros((0, 2))
        w_shape = np.asarray(weights.dense_shape).reshape(-1)
        if (
            w_indices.shape != indices.shape
            or not np.array_equal(w_indices, indices)
            or not np.array_equal(w_shape, dense_shape)
        ):
            raise _mismatch(feature, "the sparse weights have other indices or another dense_shape than the ids.")
        w = _weights_array(weights.values, feature).reshape(-1)

    # Row-major order, as tf.sparse.reorder would give.
    order = np.lexsort((cols, rows))
    if not np.array_equal(order, np.arange(len(order))):
        rows, cols, values = rows[order], cols[order], values[order]
        w = None if w is None else w[order]
    if feature.is_sequence and len(rows) > 1:
        same = (rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])
        if same.any():
            k = int(np.flatnonzero(same)[0])
            raise ValueError(
                f"Feature {name!r}: sparse index [{rows[k]}, {cols[k]}] appears more than once; a "
                "sequence feature needs one id per position."
            )
    counts = np.bincount(rows, minlength=num_rows)
    row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return _Flat(values, row_splits, cols, w)


def _from_ragged_tensor(ids: Any, weights: Any, feature: FeatureSpec) -> _Flat:
    name = feature.name
    if is_ragged_tensor(ids.values):
        raise ValueError(f"Feature {name!r}: ragged ids must have one ragged dimension ([batch, (ids)]).")
    values = np.asarray(ids.values)
    splits = np.asarray(ids.row_splits).reshape(-1)
    if values.ndim != 1:
        raise ValueError(f"Feature {name!r}: ragged `values` must be 1-D. Received shape {values.shape}.")
    if (
        splits.dtype.kind not in "iu"
        or splits.size < 1
        or splits[0] != 0
        or splits[-1] != values.shape[0]
        or np.any(np.diff(splits) < 0)
    ):
        raise ValueError(
            f"Feature {name!r}: `row_splits` must be non-decreasing integers from 0 to len(values) "
            f"= {values.shape[0]}. Received {splits.tolist()[:10]}."
        )
    splits = splits.astype(np.int64)
    w = None
    if weights is not None:
        if not is_ragged_tensor(weights):
            raise _mismatch(feature, f"ids are ragged, weights are {type(weights).__name__}.")
        if not np.array_equal(np.asarray(weights.row_splits).reshape(-1), splits):
            raise _mismatch(feature, "the ragged weights have other row_splits than the ids.")
        w = _weights_array(weights.values, feature).reshape(-1)
    return _Flat(values, splits, None, w)


def _from_lists(ids: Any, weights: Any, feature: FeatureSpec) -> _Flat:
    """A list of rows of unequal lengths."""
    rows = [np.asarray(r) for r in ids]
    if any(r.ndim != 1 for r in rows):
        raise ValueError(f"Feature {feature.name!r}: each row of ragged ids must be a flat list of ids.")
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    row_splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    nonempty = [r for r in rows if r.size]
    values = np.concatenate(nonempty) if nonempty else np.zeros(0, np.int64)
    if values.dtype.kind == "O" or any(r.dtype.kind != values.dtype.kind for r in nonempty):
        values = np.array([v for r in nonempty for v in r.tolist()], dtype=object)
    w = None
    if weights is not None:
        if (
            not isinstance(weights, (list, tuple))
            or len(weights) != len(rows)
            or any(not _is_row(wr) or len(wr) != n for wr, n in zip(weights, lengths))
        ):
            raise _mismatch(feature, "ids are ragged lists, so weights must be lists with the same row lengths.")
        w_rows = [_weights_array(wr, feature).reshape(-1) for wr in weights]
        w = np.concatenate(w_rows) if w_rows else np.zeros(0, np.float32)
    return _Flat(values, row_splits, None, w)


def _asarray(x: Any, feature: FeatureSpec, what: str) -> np.ndarray:
    try:
        return np.asarray(x)
    except ValueError as e:  # ragged nesting numpy cannot make rectangular
        raise ValueError(
            f"Feature {feature.name!r}: {what} must be a rectangular array, a list of flat lists, a "
            f"sparse or a ragged tensor. Received {type(x).__name__} ({e})."
        ) from None


def _from_dense(ids: Any, weights: Any, feature: FeatureSpec) -> _Flat:
    name = feature.name
    arr = _asarray(ids, feature, "ids")
    if arr.ndim not in (1, 2):
        raise ValueError(
            f"Feature {name!r}: dense ids must have shape [batch] or [batch, length]. Received shape {arr.shape}."
        )
    batch = arr.shape[0]
    length = 1 if arr.ndim == 1 else arr.shape[1]
    w = None
    if weights is not None:
        if is_sparse(weights) or is_ragged_tensor(weights):
            raise _mismatch(feature, f"ids are dense, weights are {type(weights).__name__}.")
        w_arr = _asarray(weights, feature, "weights")
        if w_arr.shape != arr.shape:
            raise _mismatch(feature, f"ids are dense with shape {arr.shape}, weights have shape {w_arr.shape}.")
        w = _weights_array(w_arr, feature).reshape(-1)
    values = arr.reshape(-1)
    row_splits = np.arange(batch + 1, dtype=np.int64) * length
    return _Flat(values, row_splits, None, w, dense=True)


_warned_dense_zeros: set = set()


def _warn_dense_zeros(feature: FeatureSpec) -> None:
    """Once per feature: say that id 0 of a dense input was dropped, and how to keep it."""
    if feature.name in _warned_dense_zeros:
        return
    _warned_dense_zeros.add(feature.name)
    warnings.warn(
        f"Feature {feature.name!r}: id 0 in a dense input is padding, as TPUEstimator makes it on a TPU "
        "(it keeps only the non-zero entries of dense inputs); those entries were dropped. To look up "
        "row 0, feed a SparseTensor or RaggedTensor, or shift the ids by one.",
        UserWarning,
        stacklevel=4,
    )


def _dense_padding(values: np.ndarray, kind: str) -> np.ndarray:
    """Padding entries of a dense array: negative ints, empty strings."""
    if kind == "str":
        return values == (b"" if values.dtype.kind == "S" else "")
    return values < 0


# --------------------------------------------------------------------------
# The converter
# --------------------------------------------------------------------------


def to_ragged(ids: Any, weights: Any = None, *, feature: FeatureSpec) -> Ragged:
    """Converts one feature's ids (and optional weights) of one batch to `Ragged`.

    Args:
      ids: one of
        - a dense array or nested list of shape [B] (one id per example) or
          [B, L]; negative entries (and '' in string arrays) are padding;
        - a list of lists of unequal lengths (a ragged batch);
        - a SparseTensor-like object with `indices` [N, 2] (row, position),
          `values` [N] and `dense_shape` [2]; indices are sorted row-major if
          they are not;
        - a RaggedTensor-like object with `values` [N] and `row_splits` [B+1].
        Integer ids for identity features; strings (or ints) for vocabulary
        features.
      weights: None, or weights in the same form as `ids` and lining up with
        them (same shape, same sparse indices or same row_splits).
      feature: the feature's spec: its name, `num_buckets`, id source,
        vocabulary, default value and OOV buckets.

    Returns:
      A `Ragged` with B = the batch size of `ids`, every id in
      [0, feature.num_buckets).

    Raises:
      TypeError: ids are not integers (floats, bools), strings for an
        identity feature, ints for a string vocabulary, or weights are not
        numbers.
      ValueError: an id >= num_buckets (identity feature without
        `default_value`), weights that do not line up with the ids, or a
        malformed input (bad shape, sparse index outside dense_shape).
    """
    if not isinstance(feature, FeatureSpec):
        raise TypeError(f"Argument `feature` must be a FeatureSpec. Received: {feature!r}.")

    if is_sparse(ids):
        flat = _from_sparse(ids, weights, feature)
    elif is_ragged_tensor(ids):
        flat = _from_ragged_tensor(ids, weights, feature)
    elif isinstance(ids, (list, tuple)) and any(_is_row(r) for r in ids):
        if not all(_is_row(r) for r in ids):
            raise ValueError(
                f"Feature {feature.name!r}: ids mix scalars and lists. Use one id per example "
                "([B]) or one list of ids per example ([B, ...])."
            )
        if len({len(r) for r in ids}) > 1:
            flat = _from_lists(ids, weights, feature)
        else:
            flat = _from_dense(ids, weights, feature)
    else:
        flat = _from_dense(ids, weights, feature)

    raw = np.asarray(flat.values).reshape(-1)
    if raw.size == 0:  # nothing to check or map (an empty list is float64 to numpy)
        empty = np.zeros(0, dtype=np.int64)
        return Ragged(empty, flat.row_splits, None if flat.weights is None else flat.weights, empty.copy())
    kind, values = _kind(raw, feature)
    n = values.shape[0]
    positions = None if flat.positions is None else flat.positions.astype(np.int64)
    common = feature.id_source == "identity" and kind == "int" and not flat.dense
    if common and values.min() >= 0 and values.max() < feature.num_buckets:
        # The common case, in two passes over the ids and a copy (the batch never shares the caller's arrays):
        # every id in range, none to drop or map.
        return Ragged(np.array(values, dtype=np.int64), flat.row_splits, flat.weights, positions)
    padding = _dense_padding(values, kind) if flat.dense else np.zeros(n, dtype=bool)
    if flat.dense and kind == "int" and feature.dense_zero_is_padding:
        zeros = values == 0
        if zeros.any():
            _warn_dense_zeros(feature)
            padding |= zeros

    if feature.id_source == "identity":
        if kind != "int":
            raise TypeError(
                f"Feature {feature.name!r} is an identity feature: its ids must be integers. "
                "Received strings. Map tokens through a vocabulary feature "
                "(id_source='vocabulary_list' or 'vocabulary_file')."
            )
        num_buckets = feature.num_buckets
        too_big = (values >= num_buckets) & ~padding
        # Every id >= num_buckets is handled below, so capping first keeps uint64 exact.
        ids64 = np.minimum(values, num_buckets).astype(np.int64)
        ids64[padding] = -1
        if feature.default_value is not None:
            ids64[(ids64 < 0) & ~padding] = feature.default_value
            ids64[too_big] = feature.default_value
        elif too_big.any():
            k = int(np.flatnonzero(too_big)[0])
            example = int(np.searchsorted(flat.row_splits, k, side="right") - 1)
            raise ValueError(
                f"Feature {feature.name!r}: id {values[k]} (example {example}) is out of range "
                f"[0, {num_buckets}). Ids must be in [0, num_buckets={num_buckets}); negative "
                "ids are padding and are dropped. To send out-of-range ids to one row, set "
                "`default_value`."
            )
    elif padding.any():
        ids64 = np.full(n, -1, dtype=np.int64)
        live = ~padding
        ids64[live] = map_vocabulary(feature, values[live], kind)
    else:  # no padding (the usual batch): every token mapped at once, into the batch's own new array
        ids64 = map_vocabulary(feature, values, kind)

    keep = ids64 >= 0
    if keep.all():
        return Ragged(ids64, flat.row_splits, flat.weights, positions)
    batch = len(flat.row_splits) - 1
    row_ids = np.repeat(np.arange(batch, dtype=np.int64), np.diff(flat.row_splits))
    counts = np.bincount(row_ids[keep], minlength=batch)
    row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if positions is None:  # the dropped ids keep their places: the others' positions are those of the input
        positions = np.arange(n, dtype=np.int64) - flat.row_splits[row_ids]
    return Ragged(
        ids64[keep],
        row_splits,
        None if flat.weights is None else flat.weights[keep],
        positions[keep],
    )


# --------------------------------------------------------------------------
# A batch checked once
# --------------------------------------------------------------------------

_CHECKED = object()  # only `check_batch` makes a `CheckedBatch`


@dataclasses.dataclass(frozen=True, eq=False)
class CheckedBatch:
    """One feature's batch as `check_batch` checked it, for `Engine.forward` to take as the feature's ids.

    The engine uses it as it is: no second check and no copy. That is safe
    because the kernels' one trust (every id in range, the row splits
    sound) holds by construction: `batch` is made of new arrays, which
    nothing but this object holds, or of arrays nobody can write (a
    `tf.RaggedTensor`'s own, read-only), so whatever the caller does to the
    arrays it passed cannot move an id past a table after the check. Hence
    only `check_batch` makes one. The mid-level API checks each batch at
    `enqueue` (where TensorFlow raises) and hands the engine this at
    `dequeue`.
    """

    batch: Ragged
    feature: FeatureSpec
    _key: object = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if self._key is not _CHECKED:
            raise TypeError(
                "A CheckedBatch is made by check_batch(ids, weights, feature=feature), which checks the ids; "
                "it cannot be built directly."
            )

    def for_feature(self, feature: FeatureSpec, weights: Any = None) -> Ragged:
        """The batch, when it was checked for `feature` (the same spec) and no other weights come with it."""
        if self.feature is not feature and self.feature != feature:
            raise ValueError(
                f"Feature {feature.name!r} was given a batch checked for another feature "
                f"({self.feature.name!r}, {self.feature.num_buckets} buckets); check it with "
                f"check_batch(ids, weights, feature=<the spec of {feature.name!r}>)."
            )
        if weights is not None:
            raise ValueError(
                f"Feature {feature.name!r}: its batch was checked with its weights already; pass the weights to "
                "check_batch, not to the lookup."
            )
        return self.batch


def check_batch(ids: Any, weights: Any = None, *, feature: FeatureSpec, kernels: Any = None) -> CheckedBatch:
    """`to_ragged(ids, weights, feature=feature)`, kept as a `CheckedBatch` the engine takes as it is.

    With an engine's `kernels`, through their `to_batch(..., copy=True)`:
    the same batch or the same error, in one compiled pass for the common
    inputs, sharing no array the caller can still write."""
    if kernels is None:
        batch = to_ragged(ids, weights, feature=feature)
    else:
        batch = kernels.to_batch(ids, feature, weights, copy=True)
    return CheckedBatch(batch, feature, _CHECKED)


def check_batches(ids: Sequence[np.ndarray], features: Sequence[FeatureSpec], *, kernels: Any) -> list | None:
    """`[check_batch(ids[k], feature=features[k], kernels=kernels) ...]` for dense int64 `[S, 1]` or `[S]`
    arrays without weights, in one compiled pass for all of them (the kernels' `dense_batches`: the ids
    copied into one new array and checked against each feature's range); the same batches.

    None when that pass does not apply (numpy kernels, a step too large for it, an empty array) or
    declines (an id out of range or padding): the caller then checks each with `check_batch`, which
    gives its own batch or error."""
    dense_batches = getattr(kernels, "dense_batches", None)
    if dense_batches is None or not ids:
        return None
    for a, feature in zip(ids, features):
        if not (
            type(a) is np.ndarray
            and a.dtype == np.int64
            and a.size
            and (a.ndim == 1 or (a.ndim == 2 and a.shape[1] == 1))
            and feature.id_source == "identity"
        ):
            return None
    found = dense_batches(list(ids), list(features))
    if found is None:
        return None
    return [CheckedBatch(batch, feature, _CHECKED) for batch, feature in zip(found, features)]
