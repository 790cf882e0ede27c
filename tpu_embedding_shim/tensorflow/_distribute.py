"""The TPUStrategy stand-in (`api/distribute.py`) for TensorFlow programs: a TensorFlow strategy too.

The stand-in runs one replica in this process: the only one, or under
`mpiexec -n N` one of N (docs/distributed.md). For TensorFlow programs it is
a `tf.distribute.Strategy` (TensorFlow's one-device implementation on the
CPU, its reductions across the processes), so Keras `fit` / `evaluate` /
`predict`, Keras optimizers and TensorFlow's own
`tf.distribute.get_strategy()` treat it as any strategy;
`extended.tpu_hardware_feature` reports the embedding feature V1. It also:

- hands a `tf.data.Dataset` from `experimental_distribute_dataset` back as
  a `tf.data.Dataset` of this replica's rows of each global batch (one
  replica: the dataset as it is), so `iter()`, `next()` and `for` work
  inside `tf.function` as on any dataset; a dataset function gets
  TensorFlow's `tf.distribute.InputContext` of this replica, and its
  batches are per-replica batches;
- takes TensorFlow's `tf.distribute.InputOptions` (recorded, as the
  stand-in's own are), which here also accept TF 2.3's name
  `experimental_prefetch_to_device` (the mid-level API's pages use it);
- converts the step function of `strategy.run` with autograph inside
  `tf.function`, as TensorFlow's strategies do;
- reduces and gathers TensorFlow tensors as TensorFlow's strategies do,
  summing over the processes in replica order (`_replicas.py`), so Keras
  optimizers sum the replicas' dense gradients.

The resolver's `cluster_spec()` is a `tf.train.ClusterSpec` (empty: one
local task), which TensorFlow's own utilities read. `experimental_connect_to_cluster`
is the stand-in's no-op for its resolver and TensorFlow's for any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf.tpu import topology_pb2
from tensorflow.python.distribute import one_device_strategy
from tensorflow.python.tpu import tpu_hardware_feature

from ..api import distribute as stand_in
from ..api import replicas
from . import _replicas

# TensorFlow's own, bound now: while the drop-in mode is on (`_mode.py`), `tf.distribute`'s names are this module's.
_TF_INPUT_OPTIONS = tf.distribute.InputOptions
_TF_CONNECT_TO_CLUSTER = tf.config.experimental_connect_to_cluster

__all__ = [
    "TPUClusterResolver",
    "initialize_tpu_system",
    "TPUStrategy",
    "InputOptions",
    "experimental_connect_to_cluster",
]


def _hardware_feature_proto() -> Any:
    """TensorFlow's `TPUHardwareFeature` proto of the stand-in: embedding feature V1, one embedding device a chip."""
    return topology_pb2.TPUHardwareFeature(
        embedding_feature=topology_pb2.TPUHardwareFeature.EmbeddingFeature.V1,
        num_embedding_devices_per_chip=1,
    )


def _topology_proto() -> Any:
    """TensorFlow's `TopologyProto` of the stand-in: one task a process, one core each, in a line of the mesh."""
    count = replicas.num_replicas()
    return topology_pb2.TopologyProto(
        mesh_shape=[count, 1, 1, 1],
        num_tasks=count,
        num_tpu_devices_per_task=1,
        device_coordinates=[c for task in range(count) for c in (task, 0, 0, 0)],
        tpu_hardware_feature=_hardware_feature_proto(),
    )


def topology() -> Any:
    """TensorFlow's `tf.tpu.experimental.Topology` of the stand-in (what `DeviceAssignment.build` takes)."""
    return tf.tpu.experimental.Topology(serialized=_topology_proto().SerializeToString())


def initialize_tpu_system(cluster_resolver: Any = None) -> Any:
    """`tf.tpu.experimental.initialize_tpu_system`: the stand-in's no-op, returning TensorFlow's `Topology`, as
    TensorFlow does (one core a process), so `tf.tpu.experimental.DeviceAssignment.build(topology, ...)` works."""
    stand_in.initialize_tpu_system(cluster_resolver)
    return topology()


class TPUClusterResolver(stand_in.TPUClusterResolver):
    """The stand-in resolver (no TPU, this process) whose cluster spec and system facts are TensorFlow's types.

    TensorFlow code reads the spec's `jobs` and `as_dict()` (its
    `PreemptionCheckpointHandler`, which Orbit's trainers make, does); an
    empty `tf.train.ClusterSpec` says "one local task", as for a
    one-device strategy. `get_tpu_system_metadata()` is TensorFlow's
    `TPUSystemMetadata` (one core a process: `num_cores` is the replica
    count), which programs read to size their `DeviceAssignment`;
    `tpu_hardware_feature` is TensorFlow's proto, embedding feature V1.
    """

    def cluster_spec(self) -> Any:
        return tf.train.ClusterSpec({})

    def get_tpu_system_metadata(self) -> Any:
        """TensorFlow's `tf.tpu.experimental.TPUSystemMetadata` of the stand-in."""
        count = replicas.num_replicas()
        devices = tf.config.list_logical_devices("CPU")[:1]
        return tf.tpu.experimental.TPUSystemMetadata(
            num_cores=count, num_hosts=count, num_of_cores_per_host=1, topology=topology(), devices=devices
        )

    @property
    def tpu_hardware_feature(self) -> Any:
        """TensorFlow's `TPUHardwareFeature` proto (as TensorFlow's resolver returns it): embedding feature V1."""
        return _hardware_feature_proto()

    def set_tpu_topology(self, serialized_tpu_topology: Any) -> None:
        """Taken and ignored: the stand-in's topology is fixed (one core a process)."""

    def get_job_name(self) -> str:
        return self.job_name


class InputOptions(tf.distribute.InputOptions):  # class-definition time: TensorFlow's own
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
    if options is not None and not isinstance(options, (_TF_INPUT_OPTIONS, stand_in.InputOptions)):
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


class _TPUExtended(one_device_strategy.OneDeviceExtended):
    """`TPUStrategy.extended`: TensorFlow's one-device implementation on the CPU, with what TPU code reads, its
    reductions across the processes of mpiexec.

    `tpu_hardware_feature` reports the embedding feature V1 (the mid-level
    `TPUEmbedding`, which is what the engine runs): TensorFlow Recommenders
    reads it to choose its TPU path. Under `mpiexec -n N` there are N
    replicas, one per process: `reduce_to` / `batch_reduce_to` (what Keras
    optimizers sum their gradients with, what `strategy.reduce` and the
    replica context's `all_reduce` reach) and `gather` run across them
    (`_replicas.py`); one process, they are TensorFlow's identities.
    """

    num_replicas_per_host = 1

    @property
    def num_hosts(self) -> int:
        return replicas.num_replicas()

    @property
    def _num_replicas_in_sync(self) -> int:
        return replicas.num_replicas()

    def _reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any) -> Any:
        return self._batch_reduce_to(reduce_op, [(value, destinations)], options)[0]

    def _batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any) -> Any:
        values = [value for value, _ in value_destination_pairs]
        if replicas.num_replicas() == 1:
            return values
        return _replicas.all_reduce(_reduce_op_name(reduce_op), values)

    def _gather_to_implementation(self, value: Any, destinations: Any, axis: Any, options: Any) -> Any:
        return value if replicas.num_replicas() == 1 else _replicas.all_gather([value], int(axis))[0]

    @property
    def tpu_hardware_feature(self) -> Any:
        """TensorFlow's `HardwareFeature`: embedding feature V1, one embedding device per chip."""
        return tpu_hardware_feature.HardwareFeature(_hardware_feature_proto())

    def __repr__(self) -> str:
        count = replicas.num_replicas()
        return f"<TPUStrategy.extended: in-process CPU emulation, {count} host(s), 1 replica each on the CPU>"


class TPUStrategy(stand_in.TPUStrategy, tf.distribute.Strategy):
    """`tf.distribute.TPUStrategy`, emulated in this process (one replica, no TPU), for TensorFlow programs.

    A TensorFlow strategy (one replica on the CPU, TensorFlow's one-device
    implementation), so Keras and TensorFlow see it as any strategy: inside
    `scope()` TensorFlow's `tf.distribute.get_strategy()` is it, variables
    are made under it, `strategy.run` runs the step in TensorFlow's replica
    context. It is also the project's stand-in
    (`tpu_embedding_shim.api.distribute.TPUStrategy`): a `TPUEmbedding`
    made in its scope knows it was. This subclass adds TensorFlow datasets,
    `InputOptions` and autograph (module docstring).
    """

    def __init__(
        self,
        tpu_cluster_resolver: Any = None,
        experimental_device_assignment: Any = None,
        experimental_spmd_xla_partitioning: bool = False,
        **kwargs: Any,
    ):
        tf.distribute.Strategy.__init__(self, _TPUExtended(self, "/cpu:0"))
        self._resolver = tpu_cluster_resolver
        self.device_assignment = experimental_device_assignment
        stand_in.log.info(
            "TPUStrategy: in-process CPU emulation; steps run in this process, 1 replica of %d.",
            replicas.num_replicas(),
        )

    @property
    def cluster_resolver(self) -> Any:
        """The `TPUClusterResolver` it was made with (or None)."""
        return self._resolver

    @contextlib.contextmanager
    def scope(self) -> Iterator[TPUStrategy]:
        """TensorFlow's strategy scope, which also makes it the project's current strategy."""
        with tf.distribute.Strategy.scope(self), stand_in.Strategy.scope(self):
            yield self

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: dict | None = None, options: Any = None) -> Any:
        """Calls `fn(*args, **kwargs)` once, here, in TensorFlow's replica context; inside `tf.function`, `fn` is
        converted by autograph."""
        if not callable(fn):
            raise ValueError(f"Argument `fn` of run must be callable. Received: {fn!r}.")
        fn = tf.__internal__.autograph.tf_convert(fn, tf.__internal__.autograph.control_status_ctx())

        def in_replica(*args: Any, **kwargs: Any) -> Any:
            return tf.distribute.Strategy.run(self, fn, args=args, kwargs=kwargs)

        return stand_in.Strategy.run(self, in_replica, args=args, kwargs=kwargs)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """A `tf.data.Dataset` of global batches as this replica's: as it is with one replica, else each element
        cut to this replica's rows (`_replicas.replica_batch`); any other iterable of batches as the stand-in
        distributes it."""
        _check_options(options)
        if isinstance(dataset, tf.data.Dataset):
            if replicas.num_replicas() == 1:
                return dataset
            return dataset.map(_replicas.replica_batch_of_components)
        per_replica = replicas.replica_slice if replicas.num_replicas() > 1 else None
        distributed = stand_in.DistributedDataset(dataset, per_replica=per_replica)
        distributed.options = options
        return distributed

    def distribute_datasets_from_function(self, dataset_fn: Callable[[Any], Any], options: Any = None) -> Any:
        """Calls `dataset_fn` with this replica's `tf.distribute.InputContext` (one input pipeline per process)
        and hands its per-replica batches as they are."""
        if not callable(dataset_fn):
            raise ValueError(f"Argument `dataset_fn` must be callable. Received: {dataset_fn!r}.")
        _check_options(options)
        count = replicas.num_replicas()
        dataset = dataset_fn(tf.distribute.InputContext(count, replicas.replica_id(), count))
        if isinstance(dataset, tf.data.Dataset):
            return dataset
        distributed = stand_in.DistributedDataset(dataset)
        distributed.options = options
        return distributed

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """`value` (this replica's) reduced across the replicas, `axis` also within each: TensorFlow's reduction
        for tensors (its ops, ours across the processes: `_TPUExtended`), the stand-in's for numpy values."""
        name = _reduce_op_name(reduce_op)
        if not any(tf.is_tensor(leaf) for leaf in tf.nest.flatten(value)):
            return stand_in.Strategy.reduce(self, name, value, axis)
        return tf.distribute.Strategy.reduce(self, name, value, axis)

    def gather(self, value: Any, axis: int) -> Any:
        """Every replica's `value` joined along `axis` in replica order (TensorFlow's for tensors)."""
        if not any(tf.is_tensor(leaf) for leaf in tf.nest.flatten(value)):
            return stand_in.Strategy.gather(self, value, axis)
        return tf.distribute.Strategy.gather(self, value, axis)

    def __repr__(self) -> str:
        count = self.num_replicas_in_sync
        replicas_text = "1 replica" if count == 1 else f"{count} replicas (one per process)"
        return f"<TPUStrategy: in-process CPU emulation, {replicas_text}, no TPU>"


def experimental_connect_to_cluster(cluster_spec_or_resolver: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The stand-in's no-op for its `TPUClusterResolver` (or None); TensorFlow's own for anything else."""
    if cluster_spec_or_resolver is None or isinstance(cluster_spec_or_resolver, stand_in.TPUClusterResolver):
        return stand_in.experimental_connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs)
    return _TF_CONNECT_TO_CLUSTER(cluster_spec_or_resolver, *args, **kwargs)
