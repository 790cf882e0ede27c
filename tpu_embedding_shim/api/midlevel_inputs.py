"""TensorFlow's input rules for the mid-level API: one enqueued feature -> the engine's samples.

Per feature (TensorFlow's rules, as `TPUEmbedding.enqueue`, `TPUEmbeddingV2`
and `TPUEmbeddingForServing` apply them):

- dense `[B]`, `[B, 1]`, `[B, T, 1]`...: one id per output -> `[B, D]`,
  `[B, T, D]`... A dense input of rank >= 2 whose last dimension is not 1
  is a `ValueError` (use a `SparseTensor` or `RaggedTensor` for several ids
  per example); weights for a dense input are a `ValueError`.
- `SparseTensor` `[B, N]` and `RaggedTensor` `[B, (N)]`: the ids of each
  example, combined by the table's combiner -> `[B, D]`; for a feature with
  `max_sequence_length = L > 0`, one row per position -> `[B, L, D]`.
- `SparseTensor` `[B, T, N]` (any rank >= 3): the ids along the last
  dimension combined -> `[B, T, D]` (`max_sequence_length` ignored).
- a `FeatureConfig.output_shape` (or a `build()` shape of larger rank) is
  filled by element count: a ragged / rank-2 sparse input of B examples
  gives B combined outputs or k * B per-position ones; a dense or rank >= 3
  sparse input must have that many outputs (`_resolve_output_shape`).
- weights have the type of their ids (sparse with sparse, ragged with
  ragged); another type is a `ValueError`.
- a rank-0 dense input (a `build()` shape `[]` too) and a rank-1
  `SparseTensor` are `ValueError`s, as TensorFlow's `TPUEmbedding` refuses
  them on a TPU. TensorFlow's CPU serving lookup takes them (one `[D]`
  vector: the id, or all the ids combined); serving here keeps the
  training path's rules and refuses them too.
- a list of unequal-length lists is read as a `RaggedTensor` (a CPU
  convenience; TensorFlow would need `tf.ragged.constant`).

`convert_input` applies them to one feature and returns a `ConvertedInput`:
`prod(output_shape)` samples the engine looks up as pooled bags of ids.
`convert_inputs` applies them to every feature of a batch: the dense int64
inputs (a Keras program's ids) in one pass, with their ids checked in one
compiled call, the others one by one; the same results and errors.
`build()`'s shapes follow the same rules (`output_shape_of_input_shape`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..engine import (
    CheckedBatch,
    Ragged,
    check_batch,
    check_batches,
    checked_sparse_indices,
    is_ragged_tensor,
    is_sparse,
    to_ragged,
)
from ..spec import FeatureSpec
from ..spec.checks import is_int
from . import tpu_embedding_v2_utils as v2_utils
from .nest import Path, is_nest, path_name, path_string
from .tensors import RaggedTensor, SparseTensor

__all__ = [
    "ConvertedInput",
    "convert_input",
    "convert_inputs",
    "check_gradient",
    "zero_gradient_warning",
    "flatten_shapes",
    "output_shape_of_input_shape",
    "shapes_match",
    "tf_shape_check_skipped",
]


# TensorFlow's TPUEmbedding refuses a rank-0 dense input and a rank-1 SparseTensor on a TPU (its `build` and
# `enqueue` shape checks); the fixes, added to its messages:
_BATCH_OF_DENSE_IDS = "Each input is a batch: give dense ids of shape [B] or [B, 1], one id per example."
_BATCH_OF_SPARSE_IDS = (
    "Give a SparseTensor of shape [B, N], the ids of example b in row b (tf.sparse.expand_dims(ids, -1) makes "
    "one id per example; for Keras, tf.keras.Input(shape=(None,), sparse=True))."
)


def _is_ragged_lists(x: Any) -> bool:
    """A list of rows of unequal lengths: a ragged batch written as Python lists."""
    if not isinstance(x, (list, tuple)) or not x:
        return False
    rows = [r for r in x if isinstance(r, (list, tuple, np.ndarray))]
    return len(rows) == len(x) and len({len(r) for r in rows}) > 1


def _is_dense(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, list, tuple, int)) or hasattr(x, "__array__")


@dataclasses.dataclass(frozen=True)
class ConvertedInput:
    """One feature of one batch, ready for the engine.

    The engine sees every input in one form: `prod(output_shape)` samples,
    each a bag of ids combined by the table's combiner (TensorFlow's
    SparseCore view: `sample_count = prod(output_shape)`). Its `[S, dim]`
    activations are reshaped to `output_shape + [dim]`, and gradients of that
    shape back to `[S, dim]`.

    Attributes:
      ids: what `Engine.forward` takes, one row per sample: dense `[S, 1]`,
        a rank-2 `SparseTensor` `[S, N]`, or a ragged batch of S rows.
      weights: the matching weights, or None.
      kind: 'dense', 'sparse' or 'ragged' (the TensorFlow input type).
      output_shape: TensorFlow's per-replica output shape without the
        embedding dimension.
      positions: 0 when each sample is one example's combined ids; k > 0
        when the input was spread one position per sample, k positions per
        example (a sequence feature, or a ragged / rank-2 sparse input whose
        output shape holds k outputs per example): weights are then ignored
        and positions >= k dropped.
      checked: `ids` and `weights` as the engine checked them (`check_batch`),
        which `Engine.forward` takes as they are; None when the samples were
        made here (spread positions) and the engine checks them itself.
    """

    ids: Any
    weights: Any
    kind: str
    output_shape: tuple[int, ...]
    positions: int = 0
    checked: CheckedBatch | None = None

    @property
    def num_samples(self) -> int:
        return math.prod(self.output_shape)


def _sparse_to_samples(ids: Any, weight: Any, shape: list[int], where: str) -> tuple[Any, Any]:
    """A rank-n SparseTensor `[d0, ..., d(n-2), N]` as a rank-2 one `[d0 * ... * d(n-2), N]`.

    Sample `s` is the row-major index of an entry's first n-1 coordinates;
    the last coordinate stays its position.
    """
    values = np.asarray(ids.values).reshape(-1)
    indices = checked_sparse_indices(ids.indices, values.shape[0], np.asarray(shape, dtype=np.int64), where)
    samples = int(np.prod(shape[:-1], dtype=np.int64))
    sample = (
        np.ravel_multi_index(tuple(indices[:, :-1].T), tuple(shape[:-1])) if indices.shape[0] else np.zeros(0, np.int64)
    )
    flat = np.stack([sample, indices[:, -1]], axis=1) if indices.shape[0] else np.zeros((0, 2), np.int64)
    new_ids = SparseTensor(flat, values, [samples, shape[-1]])
    new_weight = None
    if weight is not None:
        w_shape = [int(s) for s in np.asarray(weight.dense_shape).reshape(-1)]
        w_indices = np.asarray(weight.indices, dtype=np.int64).reshape(-1, len(w_shape))
        if w_shape != shape or w_indices.shape != indices.shape or not np.array_equal(w_indices, indices):
            raise ValueError(
                f"{where}: the sparse weights have other indices or another dense_shape than the ids "
                f"(ids dense_shape {shape}, weights dense_shape {w_shape})."
            )
        new_weight = SparseTensor(flat, np.asarray(weight.values), [samples, shape[-1]])
    return new_ids, new_weight


def _is_shape(value: Any) -> bool:
    """One input shape of a `per_replica_input_shapes` nest: a `TensorShape`-like object (`as_list()`), an
    array, or a flat list or tuple of sizes (ints or None)."""
    if hasattr(value, "as_list") or isinstance(value, np.ndarray):
        return True
    return isinstance(value, (list, tuple)) and all(s is None or is_int(s) for s in value)


def flatten_shapes(shapes: Any) -> list[Any]:
    """`tf.nest.flatten(shapes)` with each shape a leaf (dict keys sorted)."""
    if _is_shape(shapes) or not is_nest(shapes):
        return [shapes]
    items = [shapes[key] for key in sorted(shapes)] if isinstance(shapes, Mapping) else list(shapes)
    return [leaf for item in items for leaf in flatten_shapes(item)]


def _shape_sizes(shape: Any, path: Path) -> list[int | None]:
    """A shape's sizes, None where unknown."""
    where = path_name(path)
    if hasattr(shape, "as_list"):
        try:
            shape = shape.as_list()
        except ValueError:  # a TensorShape of unknown rank
            raise ValueError(
                f"Received input shape of unknown rank at path {where}. Rank must be 1 and above"
            ) from None
    elif isinstance(shape, np.ndarray) and shape.ndim == 1:
        shape = shape.tolist()
    if not isinstance(shape, (list, tuple)) or not all(s is None or (is_int(s) and s >= 0) for s in shape):
        raise ValueError(
            f"Received input shape {shape!r} at path {where}: give a list of sizes (ints >= 0, or None "
            "where unknown) or a TensorShape."
        )
    return [None if s is None else int(s) for s in shape]


def shapes_match(known: tuple[int, ...], incoming: tuple[int | None, ...]) -> bool:
    """TensorFlow's `_is_tensor_shape_match` for equal ranks: an unknown size matches any."""
    return len(known) == len(incoming) and all(b is None or a == b for a, b in zip(known, incoming))


def tf_shape_check_skipped(known: tuple[int, ...], incoming: tuple[int, ...]) -> bool:
    """TensorFlow's `_check_output_shapes` skips an incoming rank-1 or rank-2 shape when the stored one has a
    larger rank ("we push the check down to the enqueue op"): the stored shape then decides the layout."""
    return len(incoming) in (1, 2) and len(known) > len(incoming)


def _resolve_output_shape(
    natural: tuple[int, ...],
    natural_positions: int,
    configured: tuple[int, ...] | None,
    known: tuple[int, ...] | None,
    path: Path,
    *,
    batch: int | None,
    description: str,
) -> tuple[tuple[int, ...], int]:
    """The output shape of one input and how its ids fill it: (output_shape, positions).

    `natural` is TensorFlow's auto-detected output shape. A configured
    `FeatureConfig.output_shape` wins; otherwise a shape fixed by `build()` or
    an earlier batch (`known`) must be equal, or, as TensorFlow's check
    allows, of larger rank than a rank-1 or rank-2 natural shape. A target
    shape other than the natural one is filled by element count: a ragged or
    rank-2 sparse input (`batch` = its number of examples) gives one
    combined output per example when the count is `batch`, or one output per
    position, k per example, when it is `k * batch`; a dense or rank >= 3
    sparse input must have exactly as many samples as the count.
    """
    target = configured if configured is not None else known
    if target is None or tuple(target) == tuple(natural):
        return tuple(natural), natural_positions
    target = tuple(int(s) for s in target)
    if configured is None and not tf_shape_check_skipped(target, natural):
        raise ValueError(
            f"Inconsistent shape for feature {path_name(path)}: this batch gives output shape {list(natural)}, an "
            f"earlier batch or the configuration {list(target)}. The batch size is fixed; drop the remainder of the "
            "last batch."
        )
    source = (
        "FeatureConfig.output_shape"
        if configured is not None
        else "the output shape fixed by build() or an earlier batch"
    )
    count = int(np.prod(target, dtype=np.int64))
    if batch is None:
        samples = int(np.prod(natural, dtype=np.int64))
        if count == samples:
            return target, 0
        raise ValueError(
            f"Inconsistent shape for feature {path_name(path)}: {source} is {list(target)} ({count} outputs), but "
            f"{description} gives {samples} outputs (shape {list(natural)}); the element counts must be equal."
        )
    if count == batch:
        return target, 0
    if batch > 0 and count % batch == 0:
        return target, count // batch
    raise ValueError(
        f"Inconsistent shape for feature {path_name(path)}: {source} is {list(target)} ({count} outputs), which is "
        f"neither the input data batch size {batch} nor a multiple of it. {description[0].upper()}{description[1:]} "
        "gives one combined output per example (element count = batch size) or one output per position, k per "
        "example (element count = k * batch size)."
    )


def _spread_positions(ids: Any, weight: Any, positions: int, feature: FeatureSpec) -> Ragged:
    """One sample per (example, position < k): sample `example * k + position` holds that position's id.

    Weights are checked, then ignored (TensorFlow's rule for sequence and
    per-position lookups); positions >= k are dropped and missing ones give
    empty samples (zero activations).
    """
    sequence = dataclasses.replace(feature, max_sequence_length=positions)  # one id per position, checked
    batch = to_ragged(ids, weight, feature=sequence)
    keep = batch.row_positions() < positions
    sample = batch.row_ids()[keep] * positions + batch.row_positions()[keep]
    values = batch.values[keep]
    order = np.argsort(sample, kind="stable")
    sample, values = sample[order], values[order]
    count = batch.batch_size * positions
    row_splits = np.concatenate([[0], np.cumsum(np.bincount(sample, minlength=count))]).astype(np.int64)
    return Ragged(values.astype(np.int64), row_splits, None, np.zeros(values.shape[0], np.int64))


def convert_input(
    ids: Any,
    weight: Any,
    config: v2_utils.FeatureConfig,
    path: Path,
    *,
    feature: FeatureSpec,
    serving: bool = False,
    known: tuple[int, ...] | None = None,
    check: Callable[..., CheckedBatch] = check_batch,
) -> ConvertedInput:
    """Applies TensorFlow's rules for one enqueued feature (module docstring) and checks its ids.

    `feature` is the engine's (pooled) spec of the feature; `known` the
    output shape fixed by `build()` or an earlier batch, if any; `check`
    checks the ids (`check_batch`, or it over an engine's kernels).
    `serving=True` adds `serving_embedding_lookup`'s two extra checks: no
    weights and no dense input for a sequence feature.
    """
    where = f"input {path_name(path)}"
    sequence = config.max_sequence_length > 0
    configured = tuple(config.output_shape) if config.output_shape is not None else None
    if _is_ragged_lists(ids):
        ids = RaggedTensor.from_list([list(r) for r in ids])
        if weight is not None and not is_ragged_tensor(weight) and isinstance(weight, (list, tuple)):
            weight = RaggedTensor.from_list([list(r) for r in weight])
    if serving and sequence and weight is not None:
        raise ValueError(
            f"Weight specified for {where}, a sequence feature (max_sequence_length="
            f"{config.max_sequence_length}); sequence features take no weights."
        )
    if is_sparse(ids):
        shape = [int(s) for s in np.asarray(ids.dense_shape).reshape(-1)]
        if len(shape) < 2:
            raise ValueError(
                f"Only rank 2 and above sparse tensor is supported, find rank {len(shape)} sparse tensor for {where}. "
                f"{_BATCH_OF_SPARSE_IDS}"
            )
        if weight is not None and not is_sparse(weight):
            raise ValueError(
                f"Weight for {path_string(path)} is type {type(weight)} which does not match type "
                "input which is SparseTensor."
            )
        if len(shape) > 2:
            if sequence and configured is None:
                warnings.warn(
                    f"max_sequence_length={config.max_sequence_length} of {where} is ignored because the "
                    f"rank of the input sparse tensor is {len(shape)}, not 2 (TensorFlow's rule): the output "
                    f"shape is {shape[:-1]}.",
                    UserWarning,
                    stacklevel=3,
                )
            natural = tuple(shape[:-1])
            output_shape, _ = _resolve_output_shape(
                natural,
                0,
                configured,
                known,
                path,
                batch=None,
                description=f"the rank-{len(shape)} sparse input {shape}",
            )
            ids, weight = _sparse_to_samples(ids, weight, shape, where)
            checked = check(ids, weight, feature=feature)
            return ConvertedInput(ids, weight, "sparse", output_shape, checked=checked)
        return _flexible(ids, weight, "sparse", shape[0], config, configured, known, path, feature, check)
    if is_ragged_tensor(ids):
        if np.ndim(ids.values) != 1 or is_ragged_tensor(ids.values):
            raise ValueError(
                f"Only rank 2 ragged tensor is supported, but got a ragged tensor of higher rank for {where}."
            )
        if weight is not None and not is_ragged_tensor(weight):
            raise ValueError(
                f"Weight for {path_string(path)} is type {type(weight)} which does not match type "
                "input which is RaggedTensor."
            )
        batch = int(np.asarray(ids.row_splits).reshape(-1).shape[0]) - 1
        return _flexible(ids, weight, "ragged", batch, config, configured, known, path, feature, check)
    if isinstance(ids, (str, bytes, Mapping)) or ids is None or not _is_dense(ids):
        raise ValueError(
            f"Input {path_string(path)} is of unknown type {type(ids)}. Please only pass Tensor, "
            "SparseTensor or RaggedTensor as input to enqueue."
        )
    array = np.asarray(ids)
    if array.ndim < 1:
        raise ValueError(
            f"Only rank 1 and above dense tensor is supported, find rank {array.ndim} sparse tensor for {where}. "
            f"{_BATCH_OF_DENSE_IDS}"
        )
    if array.ndim > 1 and array.shape[-1] != 1:
        raise ValueError(
            "Rank 2 or above dense tensor should have last dimension as 1 as the last dimension will always be "
            f"reduced. Instead got dense tensor as shape {list(array.shape)} for {where}. For several ids per "
            "example pass a SparseTensor or a RaggedTensor."
        )
    if weight is not None:
        raise ValueError(
            f"Weight specified for dense input {path_string(path)}, which is not allowed. Weight "
            "will always be 1 in this case."
        )
    if serving and sequence:
        raise ValueError(
            f"{where} is a dense tensor for a sequence feature (max_sequence_length="
            f"{config.max_sequence_length}); pass a SparseTensor or a RaggedTensor."
        )
    natural = tuple(int(s) for s in (array.shape if array.ndim == 1 else array.shape[:-1]))
    output_shape, _ = _resolve_output_shape(
        natural, 0, configured, known, path, batch=None, description=f"the dense input of shape {list(array.shape)}"
    )
    samples = array.reshape(-1, 1)
    return ConvertedInput(samples, None, "dense", output_shape, checked=check(samples, None, feature=feature))


def convert_inputs(
    ids: list[Any],
    weights: list[Any],
    configs: list[v2_utils.FeatureConfig],
    paths: list[Path],
    *,
    features: list[FeatureSpec],
    serving: bool = False,
    known: list[tuple[int, ...] | None],
    kernels: Any = None,
) -> list[ConvertedInput]:
    """`convert_input` of every feature of a batch (lists, one item per feature): the same results, warnings
    and first error.

    The inputs that are plain dense int64 arrays `[B]` or `[B, 1]` without weights, whose output shape is
    the natural one, are converted in one pass: their ids checked in one compiled call
    (`engine.check_batches`, with an engine's `kernels`); the others, and all of them when that call
    declines (an id out of range, say), go through `convert_input` in order, which raises the first error.
    """
    check = check_batch if kernels is None else functools.partial(check_batch, kernels=kernels)
    fast: list[int] = []
    if kernels is not None:
        for k, (x, w, config) in enumerate(zip(ids, weights, configs)):
            if (
                w is None
                and type(x) is np.ndarray
                and x.dtype == np.int64
                and (x.ndim == 1 or (x.ndim == 2 and x.shape[1] == 1))
                and not (serving and config.max_sequence_length > 0)
            ):
                target = tuple(config.output_shape) if config.output_shape is not None else known[k]
                if target is None or tuple(target) == x.shape[:1]:
                    fast.append(k)
    checked = check_batches([ids[k].reshape(-1, 1) for k in fast], [features[k] for k in fast], kernels=kernels)
    if checked is None:
        fast, checked = [], []
    converted: dict[int, ConvertedInput] = {
        k: ConvertedInput(ids[k].reshape(-1, 1), None, "dense", ids[k].shape[:1], checked=c)
        for k, c in zip(fast, checked)
    }
    return [
        converted[k]
        if k in converted
        else convert_input(
            ids[k], weights[k], configs[k], paths[k], feature=features[k], serving=serving, known=known[k], check=check
        )
        for k in range(len(ids))
    ]


def _flexible(
    ids: Any,
    weight: Any,
    kind: str,
    batch: int,
    config: v2_utils.FeatureConfig,
    configured: tuple[int, ...] | None,
    known: tuple[int, ...] | None,
    path: Path,
    feature: FeatureSpec,
    check: Callable[..., CheckedBatch],
) -> ConvertedInput:
    """A ragged or rank-2 sparse input: `[B]`, `[B, max_sequence_length]`, or a configured output shape."""
    length = config.max_sequence_length if configured is None else 0
    natural = (batch, length) if length else (batch,)
    what = "RaggedTensor" if kind == "ragged" else "SparseTensor"
    output_shape, positions = _resolve_output_shape(
        natural,
        length,
        configured,
        known,
        path,
        batch=batch,
        description=f"the rank-2 {what} input with {batch} examples",
    )
    if positions:
        if weight is not None and not length:
            warnings.warn(
                f"Weights of input {path_name(path)} are ignored: its output shape {list(output_shape)} "
                f"holds {positions} outputs per example, one per position, so nothing is combined "
                "(TensorFlow's rule).",
                UserWarning,
                stacklevel=4,
            )
        return ConvertedInput(_spread_positions(ids, weight, positions, feature), None, kind, output_shape, positions)
    return ConvertedInput(ids, weight, kind, output_shape, checked=check(ids, weight, feature=feature))


def check_gradient(gradient: Any, expected: tuple[int, ...], path: Path) -> np.ndarray | None:
    """A gradient as float32 of shape `expected`; None stays None (the caller warns and uses zeros)."""
    if gradient is None:
        return None
    if isinstance(gradient, (list, tuple, Mapping, str, bytes)) or not hasattr(gradient, "shape"):
        raise ValueError(f"found non-tensor type: {type(gradient)} at path {path_string(path)}.")
    if tuple(int(s) for s in gradient.shape) != tuple(expected):
        raise ValueError(
            f"Found gradient of shape {list(gradient.shape)} at path {path_string(path)}. Expected "
            f"shape {list(expected)}."
        )
    return np.asarray(gradient, dtype=np.float32)


def zero_gradient_warning(path: Path, shape: tuple[int, ...]) -> None:
    warnings.warn(
        f"No gradient passed for feature {path_name(path)}, sending zero gradient of "
        f"shape {list(shape)}. This may not be correct behavior for certain optimizers like Adam: a zero "
        "gradient is still an update (lazy Adam moves every looked-up row, non-lazy Adam every row).",
        UserWarning,
        stacklevel=4,
    )  # warn -> _engine_gradients -> apply_gradients -> the caller


def output_shape_of_input_shape(shape: Any, config: v2_utils.FeatureConfig, path: Path) -> tuple[int | None, ...]:
    """TensorFlow's output shape of a `build()` input shape; unknown sizes stay None.

    The input shape without its last dimension (rank 1: itself); a sequence
    feature's rank-2 shape `[B, N]` (N != 1) gives `[B, max_sequence_length]`.
    """
    dims = _shape_sizes(shape, path)
    if len(dims) < 1:  # TensorFlow prints the shape as a TensorShape: "()"
        where = f" (input {path_string(path)})" if path else ""
        raise ValueError(f"Received input tensor of shape (). Rank must be 1 and above{where}. {_BATCH_OF_DENSE_IDS}")
    if len(dims) == 2 and dims[-1] != 1 and config.max_sequence_length > 0 and config.output_shape is None:
        dims = [dims[0], config.max_sequence_length, dims[1]]
    return tuple(dims) if len(dims) == 1 else tuple(dims[:-1])
