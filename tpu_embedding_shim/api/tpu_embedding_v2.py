"""`tf.tpu.experimental.embedding.TPUEmbedding`, the mid-level API, on a CPU.

TensorFlow's class drives a TPU's embedding engine: `enqueue` sends ids to
the host, `dequeue` returns activations, `apply_gradients` sends d loss /
d activations back and the TPU updates its tables. Here the same calls drive
the CPU engine (`engine.Engine`), inside or outside a strategy scope:

- `enqueue(features)`: validate and queue the batch (TensorFlow's input
  rules, midlevel_inputs.py);
- `dequeue()`: look the oldest queued batch up -> a nest of
  `output_shape + [D]`;
- `apply_gradients(g)`: one optimizer update per touched row, as on a TPU.

What the mid-level classes share (tables, features, the engine) is
`MidLevelBase` (midlevel_base.py); the `tf.nest` walks are nest.py.

Under `mpiexec -n N`, an object created in a `TPUStrategy` scope is one
replica of N: it takes per-replica batches (what
`strategy.experimental_distribute_dataset` hands each replica), its tables
are sharded over the processes, and `build`, `enqueue`, `dequeue`,
`apply_gradients`, `embedding_tables` and `variables` are collective: every
replica calls them, in the same order (docs/distributed.md).

>>> import numpy as np
>>> import tpu_embedding_shim as tf
>>> table = tf.tpu.experimental.embedding.TableConfig(
...     vocabulary_size=4, dim=2, initializer=tf.tpu.experimental.embedding.RowIdInitializer())
>>> embedding = TPUEmbedding(
...     feature_config={"f": tf.tpu.experimental.embedding.FeatureConfig(table=table)},
...     optimizer=tf.tpu.experimental.embedding.SGD(learning_rate=1.0))
>>> embedding.enqueue({"f": np.array([1, 3])})
>>> embedding.dequeue()["f"].tolist()
[[1.0, 1.0], [3.0, 3.0]]
>>> embedding.apply_gradients({"f": np.ones((2, 2), np.float32)})
>>> embedding.embedding_tables[table].tolist()
[[0.0, 0.0], [0.0, 0.0], [2.0, 2.0], [2.0, 2.0]]
"""

from __future__ import annotations

import collections
import dataclasses
import warnings
from typing import Any

from ..engine import LookupResult
from ..spec.checks import is_int
from . import tpu_embedding_v2_utils as v2_utils
from .midlevel_base import MidLevelBase

# check_gradient, zero_gradient_warning and flatten_up_to are here for the TF bridge (tensorflow/_midlevel.py),
# which reads them through this module.
from .midlevel_inputs import (  # noqa: F401
    ConvertedInput,
    check_gradient,
    flatten_shapes,
    output_shape_of_input_shape,
    shapes_match,
    tf_shape_check_skipped,
    zero_gradient_warning,
)
from .nest import flatten_up_to, pack_as, path_name, path_string, short_repr  # noqa: F401

__all__ = ["TPUEmbedding"]


def device_type(device: Any) -> str | None:
    """The device type of a TensorFlow device string, read as `tf.DeviceSpec.from_string` reads it.

    '/job:worker/replica:0/task:0/device:TPU:2' and the short 'tpu:1' give
    'TPU'; '/device:tpu:0' gives 'tpu' (TensorFlow upper-cases the short
    form only); None when the text names no device type or is no device
    string.
    """
    kind = None
    for part in str(device).split("/"):
        fields = part.split(":")
        if len(fields) == 3 and fields[0] == "device":
            kind = fields[1]
        elif len(fields) <= 2 and fields[0].upper() in ("CPU", "GPU", "TPU"):
            kind = fields[0].upper()
        elif not (fields == [""] or (len(fields) == 2 and fields[0] in ("job", "replica", "task"))):
            return None
    return kind


_UNSET = object()


@dataclasses.dataclass
class _QueuedBatch:
    converted: list[ConvertedInput]
    training: bool


class TPUEmbedding(MidLevelBase):
    """The TPUEmbedding mid-level API, running on the CPU engine.

    Both TensorFlow signatures are accepted: TF 2.3's
    `TPUEmbedding(feature_config, batch_size, optimizer,
    pipeline_execution_with_tensor_core=False, initialize_tpu_embedding=True)`
    and the later `TPUEmbedding(feature_config, optimizer,
    pipeline_execution_with_tensor_core=False)`; a bool third argument
    means the later one, so `TPUEmbedding(feature_config, None, False)` is
    no global optimizer (each table has its own), not a batch size of None.

    Created under a `tf.distribute.TPUStrategy` scope (this package's
    in-process emulation) or outside any scope, it behaves the same: on a
    CPU, `enqueue`, `dequeue` and `apply_gradients` work everywhere (in
    TensorFlow they raise outside a TPUStrategy), and `embedding_tables`
    works everywhere (in TensorFlow it raises under one).

    Under `mpiexec -n N` and a `TPUStrategy` scope it is one replica of N
    (module docstring): `batch_size` is still the global batch size, each
    enqueue gets `batch_size / N` rows, and the methods that reach the
    engine are collective.

    Args:
      feature_config: a nest (dict, list, tuple) of `FeatureConfig`.
      batch_size: TF 2.3 only: the global batch size; every enqueued feature
        must have it (`ValueError` otherwise). Later versions fix the batch
        size at the first `enqueue` or `build` instead, with the same check.
      optimizer: `SGD`, `Adagrad`, `AdagradMomentum`, `Adam` or `FTRL`; the
        optimizer of every table without its own. None (outside a
        TPUStrategy) creates no slots and allows no training.
      pipeline_execution_with_tensor_core: one-step-stale lookups, as on a
        TPU: a training lookup sees the tables before the previous step's
        update.
      initialize_tpu_embedding: TF 2.3 only; accepted, no effect on a CPU.

    Raises:
      ValueError: an optimizer that is not one of the classes above (or None
        under a TPUStrategy); two tables with one name; a `batch_size` that
        is not an int >= 1.
    """

    def __init__(
        self,
        feature_config: Any,
        batch_size: Any = _UNSET,
        optimizer: Any = _UNSET,
        pipeline_execution_with_tensor_core: bool = False,
        initialize_tpu_embedding: bool = True,
    ):
        second_given = batch_size is not _UNSET
        batch_size = None if batch_size is _UNSET else batch_size
        if optimizer is _UNSET:  # TensorFlow >= 2.4: TPUEmbedding(feature_config, optimizer, ...)
            if is_int(batch_size):
                raise TypeError("TPUEmbedding() missing required argument: 'optimizer'.")
            optimizer, batch_size = batch_size, None
        elif (
            second_given
            and isinstance(optimizer, bool)
            and (batch_size is None or isinstance(batch_size, v2_utils.Optimizer))
        ):
            # TensorFlow >= 2.4 positionally: TPUEmbedding(feature_config, optimizer, pipelining), the optimizer
            # None where every table has its own (keras-rs's DistributedEmbedding calls it so); no TF 2.3
            # optimizer is a bool. `optimizer=False` by keyword stays an optimizer, refused below.
            optimizer, pipeline_execution_with_tensor_core, batch_size = batch_size, optimizer, None
        if batch_size is not None and (not is_int(batch_size) or batch_size < 1):
            raise ValueError(f"Argument `batch_size` of TPUEmbedding must be an int >= 1. Received: {batch_size!r}.")
        super().__init__(feature_config, optimizer, pipeline_execution_with_tensor_core)
        self._batch_size = None if batch_size is None else int(batch_size)
        self._initialize_tpu_embedding = initialize_tpu_embedding
        self._queue: collections.deque[_QueuedBatch] = collections.deque()
        self._dequeued: tuple[LookupResult, list[ConvertedInput]] | None = None

    def build(self, per_replica_input_shapes: Any = None, per_replica_batch_size: int | None = None) -> None:
        """Creates the tables and slots; optionally fixes the per-replica shapes.

        `enqueue` calls it. `per_replica_input_shapes` holds one input shape
        per feature, in `tf.nest.flatten(feature_config)` order: any nest
        (TensorFlow's own tests pass a list for a tuple `feature_config`);
        only the flattened count must match, as in TensorFlow. A shape is a
        list or tuple of sizes or a `TensorShape`-like object (`as_list()`):
        `[B]`, `[B, 1]`, `[B, T, 1]` for a dense input; `[B, N]`, `[B, T, N]`
        for a sparse one; `[B, N]` for a ragged one. The output shape is the
        input shape without its last dimension (rank 1: itself), which may
        be None (`[B, T, None]` gives `[B, T]`); a sequence feature's rank-2
        shape `[B, N]` (N != 1) gives `[B, max_sequence_length]`.
        `per_replica_batch_size` (deprecated in TensorFlow) gives `[B]` or
        `[B, L]` for every feature. A `FeatureConfig.output_shape` wins over
        both (an unknown size in the incoming shape matches any). A second
        call does nothing, as in TensorFlow.

        Raises:
          ValueError: another number of shapes than features; shapes
            inconsistent with the configuration; an output shape that is not
            fully defined; a shape of rank 0.
        """
        if self._built:
            return
        merged = self._agreed("build", self._build_shapes, per_replica_input_shapes, per_replica_batch_size)
        if merged is not None:
            for shape, f in zip(merged, self._features):
                f.output_shape = shape
        self._build_engine()
        self._built = True

    def _build_shapes(self, per_replica_input_shapes: Any, per_replica_batch_size: Any) -> list | None:
        """Every feature's output shape from `build`'s arguments (checked), or None when they give none."""
        shapes = None
        features = self._features
        if per_replica_input_shapes is not None:
            if is_int(per_replica_input_shapes):
                per_replica_batch_size, per_replica_input_shapes = per_replica_input_shapes, None
            else:
                flat = flatten_shapes(per_replica_input_shapes)
                if len(flat) != len(features):
                    raise ValueError(
                        "Argument `per_replica_input_shapes` must hold one input shape per feature of "
                        f"`feature_config` ({len(features)} features, in tf.nest order: "
                        f"{[path_string(f.path) for f in features]}); any nesting works, only the count must match. "
                        f"Received {len(flat)} shapes: {short_repr(per_replica_input_shapes)}."
                    )
                shapes = [output_shape_of_input_shape(s, f.config, f.path) for s, f in zip(flat, features)]
        if shapes is None and per_replica_batch_size is not None:
            if not is_int(per_replica_batch_size) or per_replica_batch_size < 1:
                raise ValueError(
                    f"Argument `per_replica_batch_size` must be an int >= 1. Received: {per_replica_batch_size!r}."
                )
            b = int(per_replica_batch_size)
            shapes = [
                (b, f.config.max_sequence_length)
                if f.config.max_sequence_length and f.config.output_shape is None
                else (b,)
                for f in features
            ]
        if shapes is not None:
            merged = []
            for shape, f in zip(shapes, features):
                known = f.output_shape
                if known is not None and not tf_shape_check_skipped(known, shape) and not shapes_match(known, shape):
                    raise ValueError(
                        f"Inconsistent shape for feature {path_string(f.path)}: build() gives output "
                        f"shape {list(shape)}, the configuration {list(known)}."
                    )
                merged.append(known if known is not None else shape)
            for shape, f in zip(merged, features):
                if None in shape:
                    raise ValueError(
                        f"Input Feature {path_string(f.path)} has output shape set as {list(shape)} "
                        "which is not fully defined. Please specify the fully defined shape in either "
                        "FeatureConfig or for the build method."
                    )
            return merged
        return None

    def _forget_lookup(self) -> None:
        self._dequeued = None  # a lookup made before a restore can't be trained on after it

    def enqueue(
        self, features: Any, weights: Any = None, training: bool = True, name: Any = None, device: str | None = None
    ) -> None:
        """Queues one batch of ids (and weights) for `dequeue`.

        Every check runs here, before anything is queued: the structure of
        `features` and `weights` against `feature_config`, TensorFlow's input
        rules (midlevel_inputs.py), the batch size, and each id's range.

        Args:
          features: a nest like `feature_config` of dense arrays, `SparseTensor`s
            or `RaggedTensor`s (or ragged lists of lists).
          weights: None, or a nest like `features` of float weights (None
            leaves allowed), of the type of their ids.
          training: False queues an inference batch; `apply_gradients` after it
            is a `RuntimeError`.
          name: accepted, unused.
          device: None or a TPU device string ('/device:TPU:0', one of a
            `TPUStrategy`'s `extended.worker_devices`); another device type
            is a `ValueError`, as in TensorFlow (`device_type`).

        Raises:
          ValueError: a structure that differs in nesting, length or keys; a
            bad input (rank, type, weights for a dense input, weights of
            another type than their ids); an output shape that does not fit
            the configured, built or first one; a leading output dimension
            other than TF 2.3's `batch_size`; an id outside the table.
          TypeError: a sequence type that differs from `feature_config`'s;
            ids that are not integers.
        """
        converted = self._agreed("enqueue", self._checked_batch, features, weights, device)
        self._check_output_shapes(converted)
        self._build_engine()
        self._built = True
        self._queue.append(_QueuedBatch(converted, bool(training)))

    def _checked_batch(self, features: Any, weights: Any, device: str | None) -> list[ConvertedInput]:
        """`enqueue`'s checks and conversion (local: no collective)."""
        if device is not None and device_type(device) != "TPU":
            raise ValueError(
                f"Non-TPU device {device} passed to enqueue: give a TPU device such as "
                "'/job:worker/replica:0/task:0/device:TPU:0' (strategy.extended.worker_devices under a "
                "TPUStrategy), or None."
            )
        converted = self._convert(features, weights)
        if self._batch_size is not None:
            per_replica = self._batch_size // self._replicas
            for c, f in zip(converted, self._features):
                if c.output_shape[0] != per_replica:
                    raise ValueError(
                        f"The batch size of feature {path_name(f.path)} is {c.output_shape[0]}; TPUEmbedding was "
                        f"created with batch_size={self._batch_size} and every enqueue must use it per replica: "
                        f"batch_size / num_replicas_in_sync = {per_replica}."
                    )
        return converted

    def dequeue(self, name: str | None = None) -> Any:
        """Looks up the oldest queued batch: a nest like `feature_config` of activations.

        Each activation is float32 `output_shape + [dim]`: `[B, dim]`, `[B,
        max_sequence_length, dim]` for a sequence feature, `[B, T, dim]` for a
        `[B, T, N]` sparse input (midlevel_inputs.py). The lookup happens now,
        so it sees every update applied so far (with pipelining: all but the
        last one).

        Raises:
          RuntimeError: nothing was enqueued (TensorFlow: dequeue before
            enqueue or build).
        """
        if not self._built:
            raise RuntimeError(
                "dequeue called on unbuilt TPUEmbedding object. Please either call enqueue first or "
                "manually call the build method."
            )
        if not self._queue:
            raise RuntimeError(
                "dequeue called with nothing enqueued. Call enqueue(features) once before each dequeue()."
            )
        if self._dequeued is not None and self._dequeued[0].training:
            warnings.warn(
                "dequeue() after a training batch whose gradients were never applied: that batch is "
                "dropped without an update (a TPU would wait for apply_gradients). Enqueue with "
                "training=False for batches you do not train on.",
                UserWarning,
                stacklevel=2,
            )
        batch = self._queue.popleft()
        result, activations = self._lookup(batch.converted, batch.training)
        self._dequeued = (result, batch.converted)
        return pack_as(self._feature_config, activations)

    def apply_gradients(self, gradients: Any, name: str | None = None) -> None:
        """Applies d loss / d activations of the last dequeued batch: one update per touched row.

        A `None` gradient (anywhere in the nest) is a zero gradient, with a
        warning: no change for SGD and Adagrad, but an update for Adam (lazy
        Adam moves the rows the feature looked up, non-lazy Adam every row)
        and momentum-like optimizers. Callable learning rates are evaluated
        once per call.

        Raises:
          RuntimeError: not built, no dequeued batch, or the batch was
            enqueued with `training=False`; a table without optimizer.
          ValueError: a gradient that is not an array (a list, say), of the
            wrong shape, or non-finite; a structure that differs in nesting,
            length or keys from `feature_config`.
          TypeError: a sequence type that differs from `feature_config`'s.
        """
        if not self._built:
            raise RuntimeError(
                "apply_gradients called on unbuilt TPUEmbedding object. Please either call enqueue "
                "first or manually call the build method."
            )
        if self._dequeued is None:
            raise RuntimeError(
                "apply_gradients called with no dequeued batch to train on: call enqueue(..., "
                "training=True) and dequeue() first, and apply_gradients once per dequeue."
            )
        result, converted = self._dequeued
        if not result.training:
            raise RuntimeError(
                "apply_gradients called after the batch was enqueued with training=False (an "
                "inference batch, which on a TPU may deadlock). Enqueue with training=True to train."
            )
        engine_gradients = self._agreed("apply_gradients", self._engine_gradients, gradients, converted)
        self._apply(result, engine_gradients)
        self._dequeued = None
