"""This process as one replica of a data-parallel program: which one, how many, and sums across them.

A TPU program is replicated: N replicas run the same step, each on its slice
of the global batch; the embedding tables are sharded over all of them; the
dense model is a copy on each, its gradients summed (or averaged) across
replicas. Here a replica is a process: under `mpiexec -n N` there are N
(docs/distributed.md); started without a launcher, the process is the only
replica and everything below is an identity.

- `world()`: the communicator of the replicas (cached; `use_world` swaps it);
- `num_replicas()`, `replica_id()`, `is_chief()` (replica 0);
- `cross_replica_sum(value)` (`tf.compat.v1.tpu.cross_replica_sum`),
  `cross_replica_mean(value)`: a nest of arrays summed over the replicas in
  replica order, so every replica gets the same bits and the replicated
  dense models stay equal;
- `all_gather(value, axis=0)`: every replica's arrays joined along `axis`
  (their sizes may differ there), in replica order;
- `replica_slice(batch)`: this replica's rows of a global batch (a nest:
  dicts and tuples are structure, a list of numbers or of lists is rows), what
  `TPUStrategy.experimental_distribute_dataset` hands each replica;
- `on_chief(action, what)`: `action()` on replica 0 alone (a checkpoint
  write), every replica waiting; its error is raised on every replica.

>>> import numpy as np
>>> num_replicas(), replica_id(), is_chief()
(1, 0, True)
>>> cross_replica_sum({"w": np.ones(2, np.float32), "b": 0.5})
{'w': array([1., 1.], dtype=float32), 'b': 0.5}
>>> replica_slice(({"ids": [[1], [2, 3], [4]]}, np.arange(3)), replica=1, replicas=2)
({'ids': [[4]]}, array([2]))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..engine import Communicator, agree, communicator
from ..spec.checks import check_int, fail
from .tensors import RaggedTensor, SparseTensor

__all__ = [
    "world",
    "use_world",
    "num_replicas",
    "replica_id",
    "is_chief",
    "cross_replica_sum",
    "cross_replica_mean",
    "all_gather",
    "replica_slice",
    "replica_rows",
    "on_chief",
]

_world: Communicator | None = None


def world() -> Communicator:
    """The replicas' communicator: MPI under an MPI launcher with more than one rank, else this process alone."""
    global _world
    if _world is None:
        _world = communicator()
    return _world


@contextlib.contextmanager
def use_world(comm: Communicator) -> Iterator[Communicator]:
    """Makes `comm` the replicas' communicator for the `with` block (a sub-group of ranks; tests)."""
    global _world
    if not isinstance(comm, Communicator):
        raise TypeError(f"Argument `comm` must be a Communicator. Received: {type(comm).__name__}.")
    previous, _world = _world, comm
    try:
        yield comm
    finally:
        _world = previous


def num_replicas() -> int:
    """How many replicas run this program (processes under mpiexec; 1 without a launcher)."""
    return world().size


def replica_id() -> int:
    """This replica's index, 0 <= replica_id() < num_replicas()."""
    return world().rank


def is_chief() -> bool:
    """Whether this is replica 0, the one that writes checkpoints, exports and summaries."""
    return world().rank == 0


# Sums and gathers ----------------------------------------------------------------------------------


def _is_structure(value: Any) -> bool:
    """Dicts and tuples are structure; so is a list, unless it holds numbers or lists: then it is rows of data
    (`[[1, 2], [3]]`, the numpy world's ragged ids), as the mid-level and estimator inputs take them."""
    if isinstance(value, (Mapping, tuple)):
        return True
    return isinstance(value, list) and not all(isinstance(item, (list, int, float, np.number)) for item in value)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if _is_structure(value):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _structure(value: Any) -> str:
    """The nest with `*` for its leaves (keys sorted), as `{'b': tuple(*, *)}`: what every replica must share."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key!r}: {_structure(value[key])}" for key in sorted(value)) + "}"
    if _is_structure(value):
        return f"{type(value).__name__}({', '.join(_structure(item) for item in value)})"
    return "*"


def _rebuild(value: Any, leaves: Iterator[Any]) -> Any:
    if isinstance(value, Mapping):
        rebuilt = {key: _rebuild(value[key], leaves) for key in sorted(value)}
        return {key: rebuilt[key] for key in value}
    if _is_structure(value):
        items = [_rebuild(item, leaves) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return next(leaves)


def cross_replica_sum(value: Any) -> Any:
    """`value` (a nest of numpy arrays and numbers) summed element-wise over every replica (collective).

    Every replica passes the same structure and shapes. The sum runs in
    replica order on every replica, so each gets the same bits. Leaves
    keep their dtype; Python numbers come back as Python numbers.

    Raises:
      ValueError: on every replica, when the replicas' structures, shapes
        or dtypes differ (nothing is summed).
    """
    comm = world()
    if comm.size == 1 and type(value) is dict and all(_plain_array(leaf) for leaf in value.values()):
        return {key: leaf.copy() for key, leaf in value.items()}  # a model_fn's dense gradients, every step
    leaves = _leaves(value)
    arrays = [np.asarray(leaf) for leaf in leaves]
    error = None
    if any(array.dtype == object for array in arrays):
        error = TypeError("cross_replica_sum takes a nest of numeric arrays and numbers.")
    if comm.size == 1:  # one replica: nothing to compare or add (a model_fn calls this every step)
        if error is not None:
            raise error
        summed = [array.copy() for array in arrays]
    else:
        layout = [(array.dtype.str, array.shape) for array in arrays]
        agree(comm, error, "cross_replica_sum", structure=_structure(value), layout=layout)
        summed = []
        for dtype in sorted({array.dtype.str for array in arrays}):  # one allgather per dtype
            chosen = [i for i, array in enumerate(arrays) if array.dtype.str == dtype]
            flat = np.concatenate([arrays[i].reshape(-1) for i in chosen]) if chosen else np.zeros(0, dtype)
            total = _sum_in_order(comm.allgather(flat))
            start = 0
            for i in chosen:
                summed.append((i, total[start : start + arrays[i].size].reshape(arrays[i].shape)))
                start += arrays[i].size
        summed = [array for _, array in sorted(summed, key=lambda pair: pair[0])]
    out = [
        array.item() if isinstance(leaf, (int, float)) and not isinstance(leaf, bool) else array
        for leaf, array in zip(leaves, summed)
    ]
    return _rebuild(value, iter(out))


def _plain_array(leaf: Any) -> bool:
    """A numeric numpy array, nothing derived: summed over one replica, it is its own copy."""
    return type(leaf) is np.ndarray and leaf.dtype != object


def _sum_in_order(stacked: np.ndarray) -> np.ndarray:
    """Row 0 + row 1 + ... in that order (the same running sum on every replica)."""
    total = stacked[0].copy()
    for row in stacked[1:]:
        total += row
    return total


def cross_replica_mean(value: Any) -> Any:
    """`cross_replica_sum(value)` divided by the number of replicas (floating leaves keep their dtype)."""
    replicas = num_replicas()
    summed = cross_replica_sum(value)
    out = [
        leaf / replicas
        if isinstance(leaf, (int, float)) and not isinstance(leaf, bool)
        else (np.asarray(leaf) / replicas).astype(_float_of(leaf))
        for leaf in _leaves(summed)
    ]
    return _rebuild(summed, iter(out))


def _float_of(leaf: Any) -> Any:
    dtype = np.asarray(leaf).dtype
    return dtype if np.issubdtype(dtype, np.floating) else np.float64


def all_gather(value: Any, axis: int = 0) -> Any:
    """Every replica's arrays of `value` (a nest), joined along `axis` in replica order (collective).

    The sizes along `axis` may differ between replicas (the last batch of
    an evaluation); the other dimensions must not. Objects travel pickled:
    for metrics and predictions, not for every step's tensors.

    Raises:
      ValueError: on every replica, when the replicas' structures, dtypes or
        other dimensions differ.
    """
    comm = world()
    leaves = [np.asarray(leaf) for leaf in _leaves(value)]
    if comm.size == 1:
        return _rebuild(value, iter([leaf.copy() for leaf in leaves]))
    parts = comm.allgather_object((_structure(value), leaves))
    layouts = [(structure, [part.dtype.str for part in arrays]) for structure, arrays in parts]
    differ = [rank for rank, layout in enumerate(layouts) if layout != layouts[0]]
    if differ:  # every replica has every part: all of them raise
        raise ValueError(
            f"all_gather needs the same structure and dtypes on every replica. Replicas {differ} differ "
            f"from replica 0: {layouts[differ[0]]!r} instead of {layouts[0]!r}."
        )
    parts = [arrays for _, arrays in parts]
    joined = [np.concatenate([part[i] for part in parts], axis=axis) for i in range(len(leaves))]
    return _rebuild(value, iter(joined))


# Batches -------------------------------------------------------------------------------------------


def replica_rows(batch_size: int, replica: int, replicas: int) -> tuple[int, int]:
    """[start, stop) of `replica`'s rows of a global batch, as TensorFlow's `experimental_distribute_dataset`
    splits one: contiguous runs of ceil(batch_size / replicas) rows, the last replicas what is left (7 rows
    over 3 replicas: 3, 3, 1; 4 over 3: 2, 2, 0)."""
    batch_size = check_int("batch_size", batch_size)
    replica, replicas = _checked_replica(replica, replicas)
    per_replica = -(-batch_size // replicas)
    start = min(replica * per_replica, batch_size)
    return start, min(start + per_replica, batch_size)


def _checked_replica(replica: Any, replicas: Any) -> tuple[int, int]:
    replicas = check_int("replicas", replicas, minimum=1)
    if not (isinstance(replica, (int, np.integer)) and not isinstance(replica, bool) and 0 <= replica < replicas):
        raise fail("replica", f"an int in [0, {replicas})", replica)
    return int(replica), replicas


def replica_slice(batch: Any, *, replica: int | None = None, replicas: int | None = None) -> Any:
    """This replica's rows of `batch`, a global batch (a nest of arrays, lists of rows, SparseTensors or
    RaggedTensors, all with the same number of rows; `replica_rows` says which rows).

    Raises:
      ValueError: the leaves disagree on the number of rows, or one has none
        (a scalar); `replica` is not in [0, replicas).
    """
    replica = replica_id() if replica is None else replica
    replicas = num_replicas() if replicas is None else replicas
    replica, replicas = _checked_replica(replica, replicas)
    if replicas == 1:
        return batch
    leaves = _leaves(batch)
    sizes = {_rows(leaf) for leaf in leaves if leaf is not None}
    if len(sizes) > 1:
        raise ValueError(
            f"A global batch split over {replicas} replicas needs the same number of rows in every tensor. "
            f"Received tensors with {sorted(sizes)} rows."
        )
    start, stop = replica_rows(sizes.pop() if sizes else 0, replica, replicas)
    return _rebuild(batch, iter([None if leaf is None else _take(leaf, start, stop) for leaf in leaves]))


def _rows(leaf: Any) -> int:
    if isinstance(leaf, SparseTensor):
        return int(leaf.dense_shape[0])
    if isinstance(leaf, RaggedTensor):
        return len(leaf.row_splits) - 1
    if isinstance(leaf, list) or np.ndim(leaf) > 0:
        return len(leaf)
    raise ValueError(f"A global batch can't be split over replicas: it holds a scalar ({leaf!r}).")


def _take(leaf: Any, start: int, stop: int) -> Any:
    if isinstance(leaf, SparseTensor):
        rows = leaf.indices[:, 0]
        keep = (rows >= start) & (rows < stop)
        indices = leaf.indices[keep].copy()
        indices[:, 0] -= start
        shape = np.array(leaf.dense_shape).copy()
        shape[0] = stop - start
        return SparseTensor(indices, leaf.values[keep], shape)
    if isinstance(leaf, RaggedTensor):
        splits = leaf.row_splits[start : stop + 1]
        return RaggedTensor.from_row_splits(leaf.values[splits[0] : splits[-1]], splits - splits[0])
    return leaf[start:stop]


# Writing on one replica ----------------------------------------------------------------------------


def on_chief(action: Callable[[], Any], what: str, *, meanwhile: Callable[[], Any] | None = None) -> Any:
    """Runs `action()` on replica 0 only, every replica waiting for it (collective); returns its result
    on every replica (pickled, so keep it small: a path). `meanwhile()` runs on the other replicas while
    replica 0 acts: their side of collectives that `action` runs (sending the rows it writes).

    Raises:
      The chief's error on the chief and `PeerFailedError` naming it on the
      others: a failed write fails the call everywhere.
    """
    comm = world()
    result, error = None, None
    try:
        if comm.rank == 0:
            result = action()
        elif meanwhile is not None:
            meanwhile()
    except Exception as caught:
        error = caught
    agree(comm, error, what)
    return result if comm.size == 1 else comm.bcast_object(result)
