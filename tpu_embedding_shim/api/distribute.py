"""An in-process CPU emulation of `tf.distribute.TPUStrategy` and the TPU set-up calls.

There is no TPU and no second device here. `TPUStrategy` runs the step
function in this process, on the CPU, once per call. Started without a
launcher, the process is the only replica: `num_replicas_in_sync` is 1 and
the global batch is the per-replica batch. Under `mpiexec -n N` each process
is one replica (replicas.py, docs/distributed.md): `num_replicas_in_sync` is
N, each replica gets its slice of every global batch, reductions run across
the processes, and the mid-level API's tables are sharded over them. It
exists so that TensorFlow's mid-level training loops run with only the
import changed (the resolver records its arguments; connecting and
initializing are no-ops that log that they emulate):

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    with strategy.scope():
        embedding = tf.tpu.experimental.embedding.TPUEmbedding(...)
    options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    dataset = strategy.experimental_distribute_dataset(batches, options)
    strategy.run(step, args=(next(iter(dataset)),))  # step(...), here, once

What it does: `scope()` makes it the current strategy (`get_strategy()`);
`run` calls the function with its arguments in a replica context and returns
its result; the dataset functions wrap any iterable of batches (a "dataset"
in the numpy world) so that `iter()` and `next()` work, each element this
replica's rows of the global batch (`replicas.replica_slice`); `reduce`,
`gather` and the replica context's `all_reduce` / `all_gather` run across
the replicas; `experimental_local_results` is this replica's value.

What it does not do: no devices, no XLA compilation, no host/device
placement (`InputOptions` are checked and recorded, never acted on). Only
`TPUStrategy` spans the processes; the default strategy is one replica in
any process. `tf.function` and `tf.range` are in control_flow.py,
`tf.config`'s device lists in devices.py.

>>> resolver = TPUClusterResolver(tpu="local")
>>> strategy = TPUStrategy(resolver)
>>> strategy
<TPUStrategy: in-process CPU emulation, 1 replica, no TPU>
>>> with strategy.scope():
...     get_strategy() is strategy
True
>>> strategy.run(lambda x, y: x + y, args=(1,), kwargs={"y": 2})
3
>>> next(iter(strategy.experimental_distribute_dataset([[1, 2], [3, 4]])))
[1, 2]
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..spec.checks import check_bool
from . import replicas

log = logging.getLogger("tpu_embedding_shim")

__all__ = [
    "TPUClusterResolver",
    "TPUStrategy",
    "Strategy",
    "InputOptions",
    "InputContext",
    "InputReplicationMode",
    "ReduceOp",
    "RunOptions",
    "DistributedDataset",
    "get_strategy",
    "has_strategy",
    "get_replica_context",
    "in_cross_replica_context",
    "experimental_connect_to_cluster",
    "initialize_tpu_system",
    "shutdown_tpu_system",
]

_EMULATION = "in-process CPU emulation"


# ---------------------------------------------------------------------------------------------
# Cluster resolver and TPU system set-up
# ---------------------------------------------------------------------------------------------


class TPUClusterResolver:
    """`tf.distribute.cluster_resolver.TPUClusterResolver`, emulated: it resolves nothing.

    It records its arguments so code that builds one keeps working; there is
    no TPU to find, so `master()` is '' (the local process), the cluster spec
    is empty and `num_accelerators()` reports no TPU.
    """

    def __init__(
        self,
        tpu: Any = None,
        zone: str | None = None,
        project: str | None = None,
        job_name: str = "worker",
        coordinator_name: str | None = None,
        coordinator_address: str | None = None,
        credentials: Any = "default",
        service: Any = None,
        discovery_url: str | None = None,
    ):
        self.tpu = tpu
        self.zone = zone
        self.project = project
        self.job_name = job_name
        self.coordinator_name = coordinator_name
        self.coordinator_address = coordinator_address
        self.task_type = job_name
        self.task_id = 0
        self.rpc_layer = None
        self.environment = ""

    @classmethod
    def connect(cls, tpu: Any = None, zone: str | None = None, project: str | None = None) -> TPUClusterResolver:
        """Builds a resolver, "connects" and "initializes the TPU system": all emulated no-ops."""
        resolver = cls(tpu=tpu, zone=zone, project=project)
        experimental_connect_to_cluster(resolver)
        initialize_tpu_system(resolver)
        return resolver

    def master(self, task_type: Any = None, task_id: Any = None, rpc_layer: Any = None) -> str:
        return ""

    get_master = master

    def cluster_spec(self) -> dict:
        return {}

    def num_accelerators(self, task_type: Any = None, task_id: Any = None, config_proto: Any = None) -> dict:
        return {"TPU": 0}

    def __repr__(self) -> str:
        return f"<TPUClusterResolver tpu={self.tpu!r}: {_EMULATION}, resolves to this process, no TPU>"


class EmulatedTopology:
    """What `initialize_tpu_system` returns here (TensorFlow: a `Topology`): one task, one replica, no TPU."""

    num_tasks = 1
    num_tpus_per_task = 0
    num_replicas = 1

    def __repr__(self) -> str:
        return f"<EmulatedTopology: {_EMULATION}, 1 task, 1 replica, no TPU>"


def experimental_connect_to_cluster(
    cluster_spec_or_resolver: Any = None,
    job_name: str = "localhost",
    task_index: int = 0,
    protocol: Any = None,
    make_master_device_default: bool = True,
    cluster_device_filters: Any = None,
) -> None:
    """`tf.config.experimental_connect_to_cluster`: a no-op; everything runs in this process on the CPU."""
    log.info("experimental_connect_to_cluster(%r): %s, nothing to connect to.", cluster_spec_or_resolver, _EMULATION)


def initialize_tpu_system(cluster_resolver: Any = None) -> EmulatedTopology:
    """`tf.tpu.experimental.initialize_tpu_system`: a no-op on the CPU; returns an `EmulatedTopology`.

    TensorFlow's note that a `TPUEmbedding` may be created only once per
    initialization does not apply: there is no TPU state to clear.
    """
    log.info("initialize_tpu_system(%r): %s, no TPU to initialize.", cluster_resolver, _EMULATION)
    return EmulatedTopology()


def shutdown_tpu_system(cluster_resolver: Any = None) -> None:
    """`tf.tpu.experimental.shutdown_tpu_system`: a no-op on the CPU."""
    log.info("shutdown_tpu_system(%r): %s, nothing to shut down.", cluster_resolver, _EMULATION)


# ---------------------------------------------------------------------------------------------
# Input options and distributed datasets
# ---------------------------------------------------------------------------------------------


class InputReplicationMode(enum.Enum):
    """`tf.distribute.InputReplicationMode`."""

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


class ReduceOp(enum.Enum):
    """`tf.distribute.ReduceOp`."""

    SUM = "SUM"
    MEAN = "MEAN"


def _bool_or_none(name: str, value: Any) -> bool | None:
    """None (TensorFlow's "default") or a bool; anything else is a ValueError naming the argument."""
    return None if value is None else check_bool(name, value, owner="InputOptions", error=ValueError)


class InputOptions:
    """`tf.distribute.InputOptions`: recorded and checked, never acted on (no device to fetch to).

    TF 2.3's `experimental_prefetch_to_device` and later versions'
    `experimental_fetch_to_device` are both accepted. The mid-level API's
    pages set either to False so embedding ids stay on the host; here they
    always do.
    """

    def __init__(
        self,
        experimental_fetch_to_device: bool | None = None,
        experimental_replication_mode: InputReplicationMode = InputReplicationMode.PER_WORKER,
        experimental_place_dataset_on_device: bool = False,
        experimental_per_replica_buffer_size: int = 1,
        experimental_prefetch_to_device: bool | None = None,
    ):
        self.experimental_fetch_to_device = _bool_or_none("experimental_fetch_to_device", experimental_fetch_to_device)
        self.experimental_prefetch_to_device = _bool_or_none(
            "experimental_prefetch_to_device", experimental_prefetch_to_device
        )
        if not isinstance(experimental_replication_mode, InputReplicationMode):
            raise ValueError(
                "Argument `experimental_replication_mode` of InputOptions must be a "
                f"tf.distribute.InputReplicationMode. Received: {experimental_replication_mode!r}."
            )
        self.experimental_replication_mode = experimental_replication_mode
        self.experimental_place_dataset_on_device = _bool_or_none(
            "experimental_place_dataset_on_device", experimental_place_dataset_on_device
        )
        if not isinstance(experimental_per_replica_buffer_size, int) or experimental_per_replica_buffer_size < 0:
            raise ValueError(
                "Argument `experimental_per_replica_buffer_size` of InputOptions must be an int >= 0. "
                f"Received: {experimental_per_replica_buffer_size!r}."
            )
        self.experimental_per_replica_buffer_size = experimental_per_replica_buffer_size

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"InputOptions({fields})"


@dataclasses.dataclass(frozen=True)
class InputContext:
    """`tf.distribute.InputContext`: what a dataset function is called with (one pipeline, one replica)."""

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        if global_batch_size % self.num_replicas_in_sync:
            raise ValueError(
                f"The `global_batch_size` {global_batch_size} is not divisible by "
                f"`num_replicas_in_sync` {self.num_replicas_in_sync}"
            )
        return global_batch_size // self.num_replicas_in_sync


@dataclasses.dataclass(frozen=True)
class ValueContext:
    """`tf.distribute.experimental.ValueContext`."""

    replica_id_in_sync_group: int = 0
    num_replicas_in_sync: int = 1


class DistributedDataset:
    """A "distributed" dataset: any iterable of batches, iterated in this process.

    `iter(dataset)` returns an iterator with `next()` and `get_next()`; each
    element is `per_replica(batch)`: this replica's rows of the global batch
    (`replicas.replica_slice`) for `experimental_distribute_dataset`, the
    batch itself for a dataset function's per-replica batches and for one
    replica.
    """

    def __init__(
        self,
        dataset: Iterable[Any],
        options: InputOptions | None = None,
        per_replica: Callable[[Any], Any] | None = None,
    ):
        if not hasattr(dataset, "__iter__"):
            raise ValueError(
                f"A dataset must be an iterable of batches (a list, a generator, a tf.data-like "
                f"object). Received: {type(dataset).__name__}."
            )
        if options is not None and not isinstance(options, InputOptions):
            raise ValueError(f"Argument `options` must be a tf.distribute.InputOptions or None. Received: {options!r}.")
        self._dataset = dataset
        self.options = options
        self._per_replica = per_replica

    def __iter__(self) -> DistributedIterator:
        return DistributedIterator(iter(self._dataset), self._per_replica)

    def __repr__(self) -> str:
        count = replicas.num_replicas() if self._per_replica is not None else 1
        return f"<DistributedDataset over {type(self._dataset).__name__}: {_EMULATION}, {_replicas_text(count)}>"


class DistributedIterator:
    """An iterator over a `DistributedDataset`."""

    def __init__(self, iterator: Iterator[Any], per_replica: Callable[[Any], Any] | None = None):
        self._iterator = iterator
        self._per_replica = per_replica

    def __iter__(self) -> DistributedIterator:
        return self

    def __next__(self) -> Any:
        batch = next(self._iterator)
        return batch if self._per_replica is None else self._per_replica(batch)

    def get_next(self) -> Any:
        return next(self)


def _replicas_text(count: int) -> str:
    return "1 replica" if count == 1 else f"{count} replicas (one per process)"


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

_local = threading.local()


def _stack() -> list[Strategy]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def _replica_depth() -> int:
    return getattr(_local, "replica_depth", 0)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """`tf.distribute.RunOptions`: accepted, no effect."""

    experimental_enable_dynamic_batch_size: bool = True
    experimental_bucketizing_dynamic_shape: bool = False
    experimental_xla_options: Any = None


class _Extended:
    """`strategy.extended`: the few attributes TPU code reads."""

    num_replicas_per_host = 1
    worker_devices = ("/job:localhost/replica:0/task:0/device:CPU:0",)
    parameter_devices = worker_devices

    def __init__(self, hosts: int = 1):
        self.num_hosts = hosts

    def __repr__(self) -> str:
        return f"<strategy.extended: {_EMULATION}, 1 host, 1 replica on the CPU>"


class _TPUExtended(_Extended):
    """`TPUStrategy.extended`: its worker device is the (emulated) TPU, as on a TPU host; a process is a host."""

    worker_devices = ("/job:localhost/replica:0/task:0/device:TPU:0",)
    parameter_devices = worker_devices

    def __repr__(self) -> str:
        return f"<TPUStrategy.extended: {_EMULATION}, {self.num_hosts} host(s), 1 replica each on an emulated TPU:0>"


class Strategy:
    """What every strategy stand-in does: one replica, in this process."""

    _name = "Strategy"
    _spans_processes = False  # TPUStrategy: one replica per process under mpiexec

    def __init__(self) -> None:
        self.extended = _Extended()

    @property
    def num_replicas_in_sync(self) -> int:
        """How many replicas run each step: 1, or for `TPUStrategy` the processes under mpiexec."""
        return replicas.num_replicas() if self._spans_processes else 1

    @property
    def replica_id(self) -> int:
        """This process's replica: its rank under mpiexec for `TPUStrategy`, else 0 (what `ReplicaContext`,
        `InputContext` and `ValueContext` report). Not a TensorFlow attribute."""
        return replicas.replica_id() if self._spans_processes else 0

    @contextlib.contextmanager
    def scope(self):
        """Makes this the current strategy (`get_strategy()`) for the `with` block."""
        _stack().append(self)
        try:
            yield self
        finally:
            _stack().pop()

    def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict | None = None,
        options: RunOptions | None = None,
    ) -> Any:
        """Calls `fn(*args, **kwargs)` once, here (this replica), in this strategy's scope; returns its result."""
        if not callable(fn):
            raise ValueError(f"Argument `fn` of run must be callable. Received: {fn!r}.")
        kwargs = {} if kwargs is None else kwargs
        with self.scope():
            _local.replica_depth = _replica_depth() + 1
            try:
                return fn(*tuple(args), **kwargs)
            finally:
                _local.replica_depth -= 1

    def experimental_distribute_dataset(
        self, dataset: Iterable[Any], options: InputOptions | None = None
    ) -> DistributedDataset:
        """Wraps an iterable of global batches; each element is this replica's rows of the batch
        (`replicas.replica_slice`: contiguous runs of ceil(B / N) rows, as TensorFlow splits a batch)."""
        if self.num_replicas_in_sync == 1:
            return DistributedDataset(dataset, options)
        return DistributedDataset(dataset, options, per_replica=replicas.replica_slice)

    def distribute_datasets_from_function(
        self, dataset_fn: Callable[[InputContext], Iterable[Any]], options: InputOptions | None = None
    ) -> DistributedDataset:
        """Calls `dataset_fn` with this replica's `InputContext` (one input pipeline per replica) and wraps
        what it returns: its batches are per-replica batches (`get_per_replica_batch_size`)."""
        if not callable(dataset_fn):
            raise ValueError(f"Argument `dataset_fn` must be callable. Received: {dataset_fn!r}.")
        count = self.num_replicas_in_sync
        return DistributedDataset(dataset_fn(InputContext(count, self.replica_id, count)), options)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def experimental_distribute_values_from_function(self, value_fn: Callable[[ValueContext], Any]) -> Any:
        return value_fn(ValueContext(self.replica_id, self.num_replicas_in_sync))

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """This process's replica's value, as a 1-tuple."""
        return (value,)

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """`value` (this replica's) reduced across the replicas; `axis` also reduces within each (collective
        under mpiexec: every replica calls it)."""
        op = reduce_op if isinstance(reduce_op, ReduceOp) else ReduceOp[str(reduce_op).upper()]
        count = self.num_replicas_in_sync
        if axis is None:
            if count == 1:
                return value
            return replicas.cross_replica_sum(value) if op is ReduceOp.SUM else replicas.cross_replica_mean(value)
        local = np.sum(value, axis=axis)
        if count == 1:
            return local if op is ReduceOp.SUM else np.mean(value, axis=axis)
        total = replicas.cross_replica_sum(np.asarray(local))
        if op is ReduceOp.SUM:
            return total
        rows = replicas.cross_replica_sum(np.asarray(np.shape(value)[axis], np.int64))
        return (total / rows).astype(np.result_type(np.asarray(value).dtype, np.float32))

    def gather(self, value: Any, axis: int) -> Any:
        """Every replica's `value`, joined along `axis` in replica order (collective under mpiexec)."""
        return value if self.num_replicas_in_sync == 1 else replicas.all_gather(value, axis)

    def __repr__(self) -> str:
        return f"<{self._name}: {_EMULATION}, {_replicas_text(self.num_replicas_in_sync)}>"


class _DefaultStrategy(Strategy):
    _name = "default strategy (no distribution)"


_DEFAULT = _DefaultStrategy()


class TPUStrategy(Strategy):
    """`tf.distribute.TPUStrategy`, emulated in-process on the CPU (one process per replica): there is no TPU.

    `run(fn, args, kwargs)` calls `fn` here, once; datasets are any
    iterables of batches. Started without a launcher, `num_replicas_in_sync`
    is 1. Under `mpiexec -n N` it is N: each process is one replica, gets
    its slice of every global batch, and `reduce` / `gather` run across the
    processes. A `TPUEmbedding` created in `scope()` behaves as TensorFlow's
    under a TPUStrategy, except that `embedding_tables` also works (there is
    nothing to hide on a CPU; under mpiexec it gathers the full tables).

    Args:
      tpu_cluster_resolver: a `TPUClusterResolver` (or None); recorded.
      experimental_device_assignment: accepted, ignored.
      experimental_spmd_xla_partitioning: accepted, ignored.
    """

    _name = "TPUStrategy"
    _spans_processes = True

    def __init__(
        self,
        tpu_cluster_resolver: Any = None,
        experimental_device_assignment: Any = None,
        experimental_spmd_xla_partitioning: bool = False,
        **kwargs: Any,
    ):
        super().__init__()
        self.extended = _TPUExtended(replicas.num_replicas())
        self.cluster_resolver = tpu_cluster_resolver
        self.device_assignment = experimental_device_assignment
        log.info(
            "TPUStrategy: %s; steps run in this process, %s.", _EMULATION, _replicas_text(self.num_replicas_in_sync)
        )

    def __repr__(self) -> str:
        return f"<TPUStrategy: {_EMULATION}, {_replicas_text(self.num_replicas_in_sync)}, no TPU>"


TPUStrategyV2 = TPUStrategy


def get_strategy() -> Strategy:
    """The strategy of the innermost `scope()`, else the default (no distribution)."""
    stack = _stack()
    return stack[-1] if stack else _DEFAULT


def has_strategy() -> bool:
    """True inside some `strategy.scope()`."""
    return bool(_stack())


def in_cross_replica_context() -> bool:
    """True outside `strategy.run`."""
    return _replica_depth() == 0


@dataclasses.dataclass(frozen=True)
class ReplicaContext:
    """`tf.distribute.ReplicaContext` of this process's replica."""

    strategy: Strategy
    replica_id_in_sync_group: int = 0
    num_replicas_in_sync: int = 1

    def all_reduce(self, reduce_op: Any, value: Any) -> Any:
        """`value` summed (or averaged) over the replicas (collective under mpiexec)."""
        return self.strategy.reduce(reduce_op, value)

    def all_gather(self, value: Any, axis: int) -> Any:
        """Every replica's `value` joined along `axis` (collective under mpiexec)."""
        return self.strategy.gather(value, axis)


def get_replica_context() -> ReplicaContext | None:
    """The replica context inside `strategy.run` (or outside any scope); None in a cross-replica scope."""
    if _replica_depth() > 0 or not has_strategy():
        strategy = get_strategy()
        return ReplicaContext(strategy, strategy.replica_id, strategy.num_replicas_in_sync)
    return None
