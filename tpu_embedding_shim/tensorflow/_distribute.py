"""The TPUStrategy stand-in (`compat/distribute.py`) for TensorFlow programs: TF datasets, `tf.function`, autograph.

The stand-in runs one replica in this process. For TensorFlow programs it
also:

- hands a `tf.data.Dataset` back as it is from
  `experimental_distribute_dataset` and the dataset-function variants (one
  replica: the global batch is the per-replica batch), so `iter()`, `next()`
  and `for` work inside `tf.function` as on any dataset; a dataset function
  gets TensorFlow's `tf.distribute.InputContext()`;
- takes TensorFlow's `tf.distribute.InputOptions` (recorded, as the
  stand-in's own are), which here also accept TF 2.3's name
  `experimental_prefetch_to_device` (the mid-level API's pages use it);
- converts the step function of `strategy.run` with autograph inside
  `tf.function`, as TensorFlow's strategies do;
- reduces TensorFlow tensors with TensorFlow ops.

`get_strategy()` and friends answer for the stand-in inside its `scope()`
and are TensorFlow's own elsewhere; `experimental_connect_to_cluster` is the
stand-in's no-op for its resolver and TensorFlow's for any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..compat import distribute as stand_in
from ..compat import replicas

__all__ = [
    "TPUStrategy",
    "InputOptions",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
    "get_replica_context",
    "experimental_connect_to_cluster",
]


class InputOptions(tf.distribute.InputOptions):
    """TensorFlow's `tf.distribute.InputOptions`, also taking TF 2.3's `experimental_prefetch_to_device`.

    TensorFlow 2.4 renamed that argument `experimental_fetch_to_device`;
    either name sets the same field. Giving both, with different values, is
    a `ValueError`.
    """

    __slots__ = ()

    def __new__(
        cls,
        experimental_fetch_to_device: bool | None = None,
        experimental_replication_mode: Any = tf.distribute.InputReplicationMode.PER_WORKER,
        experimental_place_dataset_on_device: bool = False,
        experimental_per_replica_buffer_size: int = 1,
        experimental_prefetch_to_device: bool | None = None,
    ):
        if experimental_prefetch_to_device is not None:
            if (
                experimental_fetch_to_device is not None
                and experimental_fetch_to_device != experimental_prefetch_to_device
            ):
                raise ValueError(
                    "Arguments `experimental_fetch_to_device` and `experimental_prefetch_to_device` "
                    "(its TF 2.3 name) of InputOptions disagree: received "
                    f"{experimental_fetch_to_device!r} and {experimental_prefetch_to_device!r}. Give one."
                )
            experimental_fetch_to_device = experimental_prefetch_to_device
        return super().__new__(
            cls,
            experimental_fetch_to_device,
            experimental_replication_mode,
            experimental_place_dataset_on_device,
            experimental_per_replica_buffer_size,
        )


def _check_options(options: Any) -> None:
    if options is not None and not isinstance(options, (tf.distribute.InputOptions, stand_in.InputOptions)):
        raise ValueError(f"Argument `options` must be a tf.distribute.InputOptions or None. Received: {options!r}.")


def _reduce_op_name(reduce_op: Any) -> str:
    """'SUM' or 'MEAN' from TensorFlow's `tf.distribute.ReduceOp`, the stand-in's, or a string."""
    name = str(getattr(reduce_op, "value", reduce_op)).upper()
    if name not in ("SUM", "MEAN"):
        raise ValueError(
            f"Argument `reduce_op` must be tf.distribute.ReduceOp.SUM or MEAN (or 'sum', 'mean'). "
            f"Received: {reduce_op!r}."
        )
    return name


class TPUStrategy(stand_in.TPUStrategy):
    """`tf.distribute.TPUStrategy`, emulated in this process (one replica, no TPU), for TensorFlow programs.

    See `tpu_embedding_shim.compat.distribute.TPUStrategy`; this subclass
    adds TensorFlow datasets, `InputOptions` and autograph (module docstring).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        if replicas.num_replicas() > 1:
            raise NotImplementedError(
                f"The TPUStrategy of TensorFlow programs does not span the {replicas.num_replicas()} processes of "
                "mpiexec yet: it would hand every replica the whole tf.data batch, and Keras optimizers would not "
                "sum their gradients over the processes. Run one process, or use the numpy-world API "
                "(tpu_embedding_shim.compat) or TPUEstimator, which do (docs/distributed.md)."
            )
        super().__init__(*args, **kwargs)

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: dict | None = None, options: Any = None) -> Any:
        """Calls `fn(*args, **kwargs)` once, here; inside `tf.function`, `fn` is converted by autograph."""
        if callable(fn):
            fn = tf.__internal__.autograph.tf_convert(fn, tf.__internal__.autograph.control_status_ctx())
        return super().run(fn, args=args, kwargs=kwargs, options=None)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """A `tf.data.Dataset` as it is (one replica); any other iterable of batches as the stand-in wraps it."""
        _check_options(options)
        if isinstance(dataset, tf.data.Dataset):
            return dataset
        distributed = stand_in.DistributedDataset(dataset)
        distributed.options = options
        return distributed

    def distribute_datasets_from_function(self, dataset_fn: Callable[[Any], Any], options: Any = None) -> Any:
        """Calls `dataset_fn(tf.distribute.InputContext())` (one pipeline, one replica) and distributes the result."""
        if not callable(dataset_fn):
            raise ValueError(f"Argument `dataset_fn` must be callable. Received: {dataset_fn!r}.")
        _check_options(options)
        return self.experimental_distribute_dataset(dataset_fn(tf.distribute.InputContext()), options)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """Across one replica a reduction is the value itself; `axis` reduces within it (TensorFlow ops for tensors)."""
        name = _reduce_op_name(reduce_op)
        if axis is None or not tf.is_tensor(value):
            return super().reduce(name, value, axis)
        return tf.reduce_sum(value, axis=axis) if name == "SUM" else tf.reduce_mean(value, axis=axis)


def get_strategy() -> Any:
    """The stand-in inside its `scope()`; TensorFlow's current strategy elsewhere."""
    return stand_in.get_strategy() if stand_in.has_strategy() else tf.distribute.get_strategy()


def has_strategy() -> bool:
    """True inside the stand-in's `scope()` or a TensorFlow strategy's."""
    return stand_in.has_strategy() or tf.distribute.has_strategy()


def in_cross_replica_context() -> bool:
    """The stand-in's answer inside its `scope()`; TensorFlow's elsewhere."""
    return stand_in.in_cross_replica_context() if stand_in.has_strategy() else tf.distribute.in_cross_replica_context()


def get_replica_context() -> Any:
    """The stand-in's replica context inside its `scope()`; TensorFlow's elsewhere."""
    return stand_in.get_replica_context() if stand_in.has_strategy() else tf.distribute.get_replica_context()


def experimental_connect_to_cluster(cluster_spec_or_resolver: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The stand-in's no-op for its `TPUClusterResolver` (or None); TensorFlow's own for anything else."""
    if cluster_spec_or_resolver is None or isinstance(cluster_spec_or_resolver, stand_in.TPUClusterResolver):
        return stand_in.experimental_connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs)
    return tf.config.experimental_connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs)
