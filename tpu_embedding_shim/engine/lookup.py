"""Lookup kernels, forward and backward: the executable specification.

Pure numpy functions over one `Ragged` batch. `table` is anything that
gathers rows with `table[ids]` (a `[V, D]` numpy array or a
`ShardedTable`); results are float32.

Pooled lookup (one vector per example). For example b with kept entries
k (ids i_k, weights w_k, default 1)::

    sum   : out[b] = sum_k w_k T[i_k]
    mean  : out[b] = sum_k w_k T[i_k] / sum_k w_k          (0 if the sum is 0)
    sqrtn : out[b] = sum_k w_k T[i_k] / sqrt(sum_k w_k^2)  (0 if the sum is 0)

Both directions use one coefficient per entry, `c_k = scale[b] * w_k`, with
`scale[b]` = 1, 1 / sum w or 1 / sqrt(sum w^2)::

    forward : out[b]         = sum_{k in b} c_k T[i_k]
    backward: dL/dT[i] = sum_{k: i_k = i} c_k dL/dout[b_k]

so the backward pass is exactly the transpose of the forward pass (the
weights are data, not parameters: no gradient flows into them).

The safe rule (`safe=True`, TensorFlow's `safe_embedding_lookup_sparse`):
negative ids were already dropped by `to_ragged`; entries with weight <= 0
are pruned for mean and sqrtn (kept for sum); an example left with no entry
gives zeros, or `T[default_id]` when `default_id` is given. `safe=False` is
TensorFlow's plain `embedding_lookup_sparse`: no pruning, and an empty
example gives zeros (TensorFlow instead drops trailing empty examples from
its output; we always return [B, D]).

Simulated quantization (a table's `QuantizationSpec`, TensorFlow's
`QuantizationConfig`; TPU lookups only): each gathered row goes through
`quantize` before it is combined or placed in a sequence; forward only,
the backward pass does not see it (`quantization_parameters` gives the
float32 (lower, upper, quantum) the lookups take).

`max_norm` (TensorFlow's `tf.nn.embedding_lookup*` option, not a TPU one):
each gathered row longer than `max_norm` (L2) is scaled down to that norm
before it is combined (`clip_rows`); forward only.

Every sum (a pooled example's terms, a row's duplicate gradients) is a
running sum in float32, term after term in entry order (`running_sums`):
the fast kernels of `fast/` compute the same bits.

Sequence lookup (one vector per position): `out[b, p] = T[id]` for the id
at position p < L of example b; positions >= L are dropped; positions with
no id are zero rows; `length[b] = min(max position + 1, L)`, 0 when empty.
Weights are ignored, as on a TPU.

>>> import numpy as np
>>> from tpu_embedding_shim.engine.ragged import Ragged
>>> table = np.repeat(np.arange(10, dtype=np.float32)[:, None], 2, axis=1)  # row i = [i, i]
>>> batch = Ragged(values=np.array([3, 7, 5]), row_splits=np.array([0, 2, 2, 3]),
...                weights=None, positions=np.array([0, 1, 0]))
>>> pooled_lookup(table, batch, "mean").tolist()
[[5.0, 5.0], [0.0, 0.0], [5.0, 5.0]]
>>> pooled_lookup(table, batch, "sum", default_id=9).tolist()
[[10.0, 10.0], [9.0, 9.0], [5.0, 5.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tpu_embedding_shim.spec import QuantizationSpec, parse_combiner
from tpu_embedding_shim.spec.checks import check_int

from .ragged import Ragged

__all__ = [
    "pooled_lookup",
    "pooled_backward",
    "pooled_entries",
    "sequence_entries",
    "sequence_lookup",
    "sequence_backward",
    "sum_duplicates",
    "pooled_coefficients",
    "check_default_id",
    "running_sums",
    "clip_rows",
    "quantize",
    "quantization_parameters",
]

_HALF = np.float32(0.5)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


_FEW = 8  # running sums still open below this count are finished one by one (long bags, hot ids)


def running_sums(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`out[s] = ((data[a] + data[a + 1]) + data[a + 2]) + ...` over `data[a:a + lengths[s]]`, a = starts[s].

    THE order of every sum in the engine: a running sum, term after term,
    in float32 (what a sequential loop gives, and what the fast kernels
    compute bit for bit). numpy's own `add.reduceat` adds pairwise instead,
    so it is not used. Vectorized over segments: pass j adds the j-th term
    of every segment longer than j; the few segments still open once fewer
    than `_FEW` remain are finished with `np.add.accumulate` (sequential).
    Every length must be >= 1.
    """
    out = np.empty((starts.shape[0],) + data.shape[1:], dtype=data.dtype)
    if starts.shape[0] == 0:
        return out
    order = np.argsort(-lengths, kind="stable")  # longest first: open segments are a prefix
    lengths, starts = lengths[order], starts[order]
    acc = data[starts]
    descending = -lengths
    j = 1
    while True:
        open_ = int(np.searchsorted(descending, -j, side="left"))  # segments longer than j
        if open_ == 0:
            break
        if open_ < _FEW:
            for s in range(open_):
                rest = data[starts[s] + j : starts[s] + lengths[s]]
                acc[s] = np.add.accumulate(np.concatenate([acc[s : s + 1], rest]), axis=0)[-1]
            break
        acc[:open_] += data[starts[:open_] + j]
        j += 1
    out[order] = acc
    return out


def _segment_sum(data: np.ndarray, segment: np.ndarray, num_segments: int) -> np.ndarray:
    """out[s] = the running sum of data[k] with segment[k] == s; `segment` must be non-decreasing."""
    out = np.zeros((num_segments,) + data.shape[1:], dtype=data.dtype)
    if segment.shape[0] == 0:
        return out
    starts = np.flatnonzero(np.concatenate([[True], segment[1:] != segment[:-1]]))
    lengths = np.diff(np.append(starts, segment.shape[0]))
    out[segment[starts]] = running_sums(data, starts, lengths)
    return out


def _gather(table: Any, ids: np.ndarray) -> np.ndarray:
    """float32 [n, D] rows of `table` (works for empty `ids` too)."""
    return np.asarray(table[ids], dtype=np.float32)


def _num_rows(table: Any) -> int | None:
    """V, when the table tells (numpy arrays and ShardedTable do)."""
    shape = getattr(table, "shape", None)
    if shape is not None:
        return int(shape[0])
    try:
        return len(table)
    except TypeError:
        return None


def clip_rows(rows: np.ndarray, max_norm: float | None) -> np.ndarray:
    """Each row (last axis) scaled down to L2 norm `max_norm` if it is longer; None: `rows` as given.

    TensorFlow's `clip_by_norm`, as `max_norm` of `tf.nn.embedding_lookup*`
    applies it: `row * max_norm / max(||row||, max_norm)`, in the rows' own
    (floating) dtype; a zero row stays zero. Returns a new array.

    >>> clip_rows(np.array([[3.0, 4.0], [0.3, 0.4]], dtype=np.float32), 1.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    if max_norm is None:
        return rows
    norm = np.sqrt(np.sum(rows * rows, axis=-1, keepdims=True))
    limit = rows.dtype.type(max_norm)
    return rows * limit / np.maximum(norm, limit)


def quantization_parameters(quantization: QuantizationSpec | None) -> np.ndarray | None:
    """float32 [3] (lower, upper, quantum) of a table's quantization, what `quantize` and the fast kernels
    take; None for a table without one."""
    if quantization is None:
        return None
    return np.array(quantization.float32_parameters(), dtype=np.float32)


def quantize(rows: np.ndarray, parameters: np.ndarray | None) -> np.ndarray:
    """TensorFlow's simulated quantization of float32 `rows`, element-wise, in float32; None: `rows`.

    With (lower, upper, quantum) = `parameters` (`quantization_parameters`)::

        x = floor((clip(x, lower, upper) - lower) / quantum + 0.5) * quantum + lower

    each operation rounded to float32 in that order (no fused multiply-add):
    the fast kernels' `forward.quantized` computes the same bits. NaN stays
    NaN; inf is clipped.

    >>> quantize(np.array([[-3.0, 0.2, 0.25, 0.3, 9.0]], np.float32), np.array([-1.0, 1.0, 0.5], np.float32)).tolist()
    [[-1.0, 0.0, 0.5, 0.5, 1.0]]
    """
    if parameters is None:
        return rows
    lower, upper, quantum = parameters[0], parameters[1], parameters[2]
    clipped = np.where(rows < lower, lower, np.where(rows > upper, upper, rows))  # comparisons keep NaN
    return np.floor((clipped - lower) / quantum + _HALF) * quantum + lower


def check_default_id(default_id: int | None, table_rows: int | None, safe: bool) -> None:
    if default_id is None:
        return
    if not safe:
        raise ValueError(
            "Argument `default_id` is only used by the safe lookup (safe=True). "
            f"Received: default_id={default_id!r} with safe=False."
        )
    limit = f"an int in [0, {table_rows})" if table_rows is not None else "an int >= 0"
    if isinstance(default_id, bool) or not isinstance(default_id, (int, np.integer)):
        raise TypeError(f"Argument `default_id` must be {limit} or None. Received: {default_id!r}.")
    if default_id < 0 or (table_rows is not None and default_id >= table_rows):
        raise ValueError(f"Argument `default_id` must be {limit} or None. Received: {default_id!r}.")


def pooled_coefficients(
    batch: Ragged, combiner: str, *, safe: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The entries that take part in a pooled lookup and their coefficients.

    Returns:
      (example, ids, coef, empty): for every kept entry k its example
      `example[k]`, its row id `ids[k]` and `coef[k] = scale[example[k]] *
      w_k` (float64), so that `out[b] = sum_{example[k] = b} coef[k] *
      T[ids[k]]`; and `empty` (bool [B]): examples with no kept entry.
    """
    combiner = parse_combiner(combiner)
    example = batch.row_ids()
    ids = batch.values
    w = batch.weights_or_ones().astype(np.float64)
    if safe and combiner != "sum":
        keep = w > 0  # TensorFlow prunes non-positive weights for mean and sqrtn only
        example, ids, w = example[keep], ids[keep], w[keep]

    num_examples = batch.batch_size
    denominator: np.ndarray  # float64 [B] (numpy's stubs type a weighted bincount as ints)
    if combiner == "sum":
        denominator = np.ones(num_examples)
    elif combiner == "mean":
        denominator = np.bincount(example, weights=w, minlength=num_examples)
    else:  # sqrtn
        denominator = np.sqrt(np.bincount(example, weights=w * w, minlength=num_examples))
    # div_no_nan: a zero denominator gives a zero result.
    scale = np.divide(1.0, denominator, out=np.zeros(num_examples), where=denominator != 0)
    empty = np.bincount(example, minlength=num_examples) == 0
    return example, ids, scale[example] * w, empty


# --------------------------------------------------------------------------
# Pooled
# --------------------------------------------------------------------------


def pooled_lookup(
    table: Any,
    batch: Ragged,
    combiner: str,
    *,
    safe: bool = True,
    default_id: int | None = None,
    max_norm: float | None = None,
    quantization: np.ndarray | None = None,
) -> np.ndarray:
    """One combined vector per example: float32 [B, D].

    Args:
      table: `[V, D]` rows, gathered with `table[ids]`.
      batch: the ids (and weights) of B examples.
      combiner: 'sum', 'mean' or 'sqrtn'.
      safe: TensorFlow's safe lookup rule (see the module docstring).
      default_id: with `safe`, empty examples get `table[default_id]`
        instead of zeros.
      max_norm: None, or a number > 0: every gathered row (the default row
        too) goes through `clip_rows` first, as TensorFlow's `max_norm`.
      quantization: None, or a table's `quantization_parameters`: every
        gathered row (the default row too) goes through `quantize` first.

    Example (row i of the table is [i, i]): ids [[1, 2], [], [4]] with sum
    give [[3, 3], [0, 0], [4, 4]].
    """
    combiner = parse_combiner(combiner)
    check_default_id(default_id, _num_rows(table), safe)
    example, ids, coef, empty = pooled_coefficients(batch, combiner, safe=safe)
    rows = clip_rows(quantize(_gather(table, ids), quantization), max_norm)
    out = _segment_sum(rows * coef.astype(np.float32)[:, None], example, batch.batch_size)
    if default_id is not None and empty.any():
        default_row = quantize(_gather(table, np.array([default_id], dtype=np.int64)), quantization)
        out[empty] = clip_rows(default_row, max_norm)[0]
    return out


def pooled_entries(
    batch: Ragged, combiner: str, grad: np.ndarray, *, safe: bool = True, default_id: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The gradient of each entry of a pooled lookup, duplicates NOT summed.

    Returns (ids int64 [n], entry_grads float32 [n, D]) in entry order:
    entry k of example b sends `c_k * grad[b]` to row `ids[k]`; with
    `default_id`, each empty example's whole gradient goes to `default_id`
    (after the entries). `pooled_backward` sums them; the engine sums the
    entries of every feature of a table at once.
    """
    combiner = parse_combiner(combiner)
    grad = np.asarray(grad, dtype=np.float32)
    if grad.ndim != 2 or grad.shape[0] != batch.batch_size:
        raise ValueError(
            f"Argument `grad` must have shape [batch_size={batch.batch_size}, dim]. Received shape {grad.shape}."
        )
    check_default_id(default_id, None, safe)
    example, ids, coef, empty = pooled_coefficients(batch, combiner, safe=safe)
    entry_grads = grad[example] * coef.astype(np.float32)[:, None]
    if default_id is not None and empty.any():
        ids = np.concatenate([ids, np.full(int(empty.sum()), default_id, dtype=np.int64)])
        entry_grads = np.concatenate([entry_grads, grad[empty]])
    return ids, entry_grads


def pooled_backward(
    batch: Ragged, combiner: str, grad: np.ndarray, *, safe: bool = True, default_id: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Row gradients of a pooled lookup.

    Args:
      batch: as given to `pooled_lookup`.
      combiner: as given to `pooled_lookup`.
      grad: float [B, D], the gradient of the loss with respect to the
        lookup's output.
      safe: as given to `pooled_lookup`.
      default_id: as given to `pooled_lookup`.

    Returns:
      (unique_ids int64 [U] sorted, row_grads float32 [U, D]): the gradient
      of the loss with respect to each touched table row, duplicates
      summed. Pruned entries contribute nothing; with `default_id`, each
      empty example sends its whole gradient to row `default_id`.
    """
    return sum_duplicates(*pooled_entries(batch, combiner, grad, safe=safe, default_id=default_id))


# --------------------------------------------------------------------------
# Sequence
# --------------------------------------------------------------------------


def _sequence_entries(batch: Ragged, max_sequence_length: int):
    check_int("max_sequence_length", max_sequence_length, minimum=1)
    example = batch.row_ids()
    keep = batch.row_positions() < max_sequence_length  # truncation
    return example, keep


def sequence_lookup(
    table: Any, batch: Ragged, max_sequence_length: int, quantization: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """One vector per position, padded or truncated to `max_sequence_length`.

    `quantization`: None, or a table's `quantization_parameters`: every
    gathered row goes through `quantize` (padding rows stay zero).

    Returns:
      (out float32 [B, L, D], lengths int64 [B]) with L = max_sequence_length:
      `out[b, p]` is the row of the id at position p of example b (zeros if
      there is none); `lengths[b] = min(max position + 1, L)`, 0 for an
      empty example.

    Example (row i = [i]): ids [[4, 5, 6], [7]] with L = 2 give
    out [[[4], [5]], [[7], [0]]] and lengths [2, 1].
    """
    length = int(max_sequence_length)
    example, keep = _sequence_entries(batch, length)
    rows = quantize(_gather(table, batch.values[keep]), quantization)
    out = np.zeros((batch.batch_size, length, rows.shape[1]), dtype=np.float32)
    out[example[keep], batch.row_positions()[keep]] = rows
    lengths = np.zeros(batch.batch_size, dtype=np.int64)
    np.maximum.at(lengths, example, batch.row_positions() + 1)
    return out, np.minimum(lengths, length)


def sequence_entries(batch: Ragged, max_sequence_length: int, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gradient of each kept entry of a sequence lookup, duplicates NOT summed: (ids, entry_grads).

    `grad` is float [B, L, D]. The id at position p < L of example b gets
    `grad[b, p]`; truncated positions get nothing.
    """
    length = int(max_sequence_length)
    grad = np.asarray(grad, dtype=np.float32)
    if grad.ndim != 3 or grad.shape[:2] != (batch.batch_size, length):
        raise ValueError(
            f"Argument `grad` must have shape [batch_size={batch.batch_size}, "
            f"max_sequence_length={length}, dim]. Received shape {grad.shape}."
        )
    example, keep = _sequence_entries(batch, length)
    return batch.values[keep], grad[example[keep], batch.row_positions()[keep]]


def sequence_backward(batch: Ragged, max_sequence_length: int, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row gradients of a sequence lookup: (unique_ids, row_grads), duplicates summed."""
    return sum_duplicates(*sequence_entries(batch, max_sequence_length, grad))


# --------------------------------------------------------------------------
# Duplicates
# --------------------------------------------------------------------------


def sum_duplicates(ids: Any, grads: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sums the gradients of repeated ids: one row gradient per unique id.

    This is what a TPU does before an optimizer update, and what TensorFlow's
    `_deduplicate_indexed_slices` does: each touched row then gets exactly
    one update per step.

    Args:
      ids: int [n] row ids (any order, repeats allowed).
      grads: float [n, ...] one gradient per id.

    Returns:
      (unique_ids int64 [U] sorted ascending, summed float32 [U, ...]).

    >>> u, g = sum_duplicates([5, 2, 5], [[1.0], [2.0], [3.0]])
    >>> u.tolist(), g.tolist()
    ([2, 5], [[2.0], [4.0]])
    """
    ids = np.asarray(ids).astype(np.int64, copy=False).reshape(-1)
    grads = np.asarray(grads, dtype=np.float32)
    if grads.shape[:1] != ids.shape:
        raise ValueError(
            f"Arguments `ids` and `grads` must have the same length. Received {ids.shape[0]} ids "
            f"and grads of shape {grads.shape}."
        )
    if ids.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0,) + grads.shape[1:], dtype=np.float32)
    order = np.argsort(ids, kind="stable")  # each id's gradients in their given order
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_ids[1:] != sorted_ids[:-1]]))
    lengths = np.diff(np.append(starts, ids.shape[0]))
    return sorted_ids[starts], running_sums(grads[order], starts, lengths)
