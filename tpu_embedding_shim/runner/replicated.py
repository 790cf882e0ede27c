"""TPUEstimator over the replicas of an `mpiexec -n N` job: what each replica reads, sums and writes.

Started with `mpiexec -n N`, a TPUEstimator program is N replicas, as on a
TPU pod with N hosts (one replica each; docs/distributed.md):

- the engine is a `DistributedEngine`: every table is sharded over the
  replicas, each looks up its own examples, and the embedding gradients of
  all replicas are summed, as a TPU sums them;
- `train_batch_size` (and the eval / predict ones) is the global batch: each
  replica's input_fn and model_fn get `params['batch_size']` = global / N,
  as TensorFlow's TPUEstimator gives them the per-replica size, and
  `params['context']` says which replica this is (`current_host`,
  `num_replicas`, `current_input_fn_deployment()`);
- each step runs on every replica while every replica has a batch (one
  `allreduce`); the reported loss is the mean of the replicas' losses, so a
  NaN on one replica stops every replica before anything is written;
- the dense model is a copy on each replica: its gradients must be summed
  or averaged across replicas (`tf.compat.v1.tpu.cross_replica_sum` for a
  numpy model_fn, `torch_bridge.train_op`'s `reduction` for torch);
- replica 0 alone takes the model_dir lock and writes checkpoints and
  exports (`replicas.on_chief`); every replica reads the checkpoint back.

Started without a launcher, there is one replica and each function here is
the one-process behaviour.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..api import replicas
from ..engine import DistributedEngine, EmbeddingEngine, Engine, agree
from ..engine.tf_bundle import acquire_writer, release_writer
from ..spec import EmbeddingSpec

__all__ = [
    "check_batch_sizes",
    "new_engine",
    "common_seed",
    "per_replica",
    "while_every_replica_has",
    "mean_over_replicas",
    "chief_writer",
]


def check_batch_sizes(batch_sizes: dict[str, int | None], num_shards: int) -> None:
    """Under N replicas: each batch size and `TPUConfig.num_shards` must be multiples of N.

    Raises:
      ValueError: naming the size, its value and N (on every replica alike).
    """
    count = replicas.num_replicas()
    if count == 1:
        return
    for name, size in batch_sizes.items():
        if size is not None and size % count:
            raise ValueError(
                f"{name}_batch_size={size} is the global batch of {count} replicas (mpiexec -n {count}); it must be "
                f"a multiple of {count}, as TPUEstimator requires a multiple of the number of shards."
            )
    if num_shards % count:
        raise ValueError(
            f"TPUConfig.num_shards={num_shards}: under mpiexec -n {count} every replica holds the same number of "
            f"shards of each table, so num_shards must be a multiple of {count}."
        )


def per_replica(batch_size: int | None) -> int | None:
    """The per-replica batch size of a global `batch_size` (None stays None)."""
    return None if batch_size is None else batch_size // replicas.num_replicas()


def common_seed(seed: int | None) -> int | None:
    """`seed`, or under N replicas one drawn on replica 0 for all (the replicated parts start equal)."""
    if seed is not None or replicas.num_replicas() == 1:
        return seed
    drawn = int(np.random.default_rng().integers(2**31)) if replicas.is_chief() else None
    return int(replicas.world().bcast_object(drawn))


def new_engine(spec: EmbeddingSpec, seed: int | None, *, initialize: bool = True) -> EmbeddingEngine:
    """`Engine(spec)` in one process; under N replicas a `DistributedEngine` over them (`initialize`: False
    when a restore replaces its rows next; see `DistributedEngine`)."""
    if replicas.num_replicas() == 1:
        return Engine(spec, seed=seed)
    return DistributedEngine(spec, replicas.world(), seed=seed, initialize=initialize)


def while_every_replica_has(batches: Iterable[Any]) -> Iterator[Any]:
    """The batches, while every replica still has one (one `allreduce` per batch under N replicas): every
    replica runs the same number of steps, so none waits forever in a step the others never start."""
    iterator = iter(batches)
    comm = replicas.world()
    while True:
        try:
            item, has = next(iterator), True
        except StopIteration:
            item, has = None, False
        if comm.size > 1:
            has = bool(comm.allreduce(np.array([int(has)], np.int64), "min")[0])
        if not has:
            return
        yield item


def mean_over_replicas(value: float) -> float:
    """The mean of `value` over the replicas (the same float on every replica; NaN if any is NaN)."""
    if replicas.num_replicas() == 1:
        return value
    return float(replicas.cross_replica_mean(np.float64(value)))


@contextlib.contextmanager
def chief_writer(directory: str, what: str) -> Iterator[None]:
    """The model_dir's sole-writer lock, taken by replica 0 for all (collective): if it can't be taken,
    every replica raises (the chief `DirectoryInUseError`, the others `PeerFailedError`)."""
    comm = replicas.world()
    key, error = None, None
    if comm.rank == 0:
        try:
            key = acquire_writer(directory, what)
        except Exception as caught:
            error = caught
    if comm.size > 1:
        agree(comm, error, what)
    elif error is not None:
        raise error
    try:
        yield
    finally:
        if key is not None:
            release_writer(key)
