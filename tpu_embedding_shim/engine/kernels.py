"""The kernels a training step runs, behind one interface: numpy's here, numba's in `fast/kernels.py`.

`Engine` runs one path whatever the kernels: it converts each feature's ids
(`to_batch`), looks every feature up (`lookups`), turns each feature's
gradient into entries (`pooled_entries` / `sequence_entries`), sums each
table's entries to one gradient per touched row (`sum_tables`), and applies
the optimizer: with a fused in-place kernel where the kernels have one
(`fuses`, `apply_all`), else with `optimizers.apply_update` on the summed
rows. Both kernel sets give the same bits (tests/engine/test_kernels.py runs
the same cases on each).

`FastKernels` also runs a small step table-batched (`fast/batched.py`:
`dense_batches`, `pack`, `lookup_packed`, `sum_packed`), which `Engine`
uses when its kernels have those methods; they are not part of this
interface, and the numpy kernels have none.

Tables are the `storage` array of a `ShardedTable` (every shard, one after
another) and ids are rows of it: the engine maps ids first for `mod`
sharding (`ShardedTable.physical`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..spec import EmbeddingSpec, FeatureSpec, OptimizerSpec
from . import lookup
from .ragged import Ragged, to_ragged

__all__ = ["Kernels", "Lookup", "NumpyKernels", "SummedRows", "Update"]


@dataclasses.dataclass(frozen=True)
class Lookup:
    """One feature's lookup: pooled by `combiner`, or a sequence when `max_sequence_length` is set;
    `quantization`: its table's `lookup.quantization_parameters` (None: not quantized)."""

    table: np.ndarray
    batch: Ragged
    combiner: str = "sum"
    safe: bool = True
    max_sequence_length: int | None = None
    quantization: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class Update:
    """One table's fused update: `summed` (from `sum_tables`) applied in place to `table` and `slots`."""

    optimizer: OptimizerSpec
    lr: float
    table: np.ndarray
    slots: Mapping[str, np.ndarray]
    summed: Any


@dataclasses.dataclass(frozen=True)
class SummedRows:
    """One table's summed gradients: (ids int64 [U], grads float32 [U, D]), one row per touched id."""

    ids: np.ndarray
    grads: np.ndarray

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ids, self.grads


@runtime_checkable
class Kernels(Protocol):
    """What `Engine` asks of a kernel set, once per step."""

    def describe(self, spec: EmbeddingSpec) -> str:
        """One line for `Engine.describe()`: which kernels, and how they run."""
        ...

    def to_batch(self, ids: Any, feature: FeatureSpec, weights: Any, *, copy: bool) -> Ragged:
        """`to_ragged(ids, weights, feature=feature)`: the same batch or the same error.

        `copy`: the batch outlives the call (a training lookup), so it must
        not share an array the caller can still write (read-only arrays that
        own their data, such as a `tf.RaggedTensor`'s, may be kept)."""
        ...

    def all_finite(self, array: np.ndarray) -> bool:
        """`np.isfinite(array).all()`."""
        ...

    def lookups(self, requests: Sequence[Lookup]) -> list:
        """Each request's activations [B, D], or (activations [B, L, D], lengths [B]) for a sequence."""
        ...

    def pooled_entries(self, batch: Ragged, combiner: str, grad: np.ndarray, *, safe: bool) -> Any:
        """A pooled feature's gradient [B, D] as entries (one per kept id), for `sum_tables`."""
        ...

    def sequence_entries(self, batch: Ragged, max_sequence_length: int, grad: np.ndarray) -> Any:
        """A sequence feature's gradient [B, L, D] as entries (truncated positions dropped)."""
        ...

    def sum_tables(self, requests: Sequence[tuple[str, int, int, list[Any]]]) -> list:
        """For each (table name, rows, dim, entries of its features): one gradient per touched row.

        Each result has `compact() -> (ids, grads)`; an id's entries are summed
        in entry order, features in the order given."""
        ...

    def fuses(self, optimizer: OptimizerSpec) -> bool:
        """True when `apply_all` can apply `optimizer` in place."""
        ...

    def apply_all(self, updates: Sequence[Update]) -> None:
        """The fused updates (different tables), written in place; only for optimizers that `fuses`."""
        ...


class NumpyKernels:
    """The reference kernels (`lookup.py`, `optimizers/`): the executable specification, no numba needed."""

    def describe(self, spec: EmbeddingSpec) -> str:
        from . import fast  # `fast/__init__` only: numba is not imported

        return f"  kernels: numpy reference ({fast.unavailable_reason() or 'kernels=numpy'})."

    def to_batch(self, ids: Any, feature: FeatureSpec, weights: Any, *, copy: bool) -> Ragged:
        return to_ragged(ids, weights, feature=feature)  # always new arrays

    def all_finite(self, array: np.ndarray) -> bool:
        return bool(np.isfinite(array).all())

    def lookups(self, requests: Sequence[Lookup]) -> list:
        return [self._lookup(r) for r in requests]

    @staticmethod
    def _lookup(r: Lookup):
        if r.max_sequence_length is not None:
            return lookup.sequence_lookup(r.table, r.batch, r.max_sequence_length, r.quantization)
        return lookup.pooled_lookup(r.table, r.batch, r.combiner, safe=r.safe, quantization=r.quantization)

    def pooled_entries(self, batch: Ragged, combiner: str, grad: np.ndarray, *, safe: bool) -> Any:
        return lookup.pooled_entries(batch, combiner, grad, safe=safe)

    def sequence_entries(self, batch: Ragged, max_sequence_length: int, grad: np.ndarray) -> Any:
        return lookup.sequence_entries(batch, max_sequence_length, grad)

    def sum_tables(self, requests: Sequence[tuple[str, int, int, list[Any]]]) -> list:
        summed = []
        for _, _, dim, entries in requests:
            if not entries:
                summed.append(SummedRows(np.zeros(0, np.int64), np.zeros((0, dim), np.float32)))
                continue
            ids = np.concatenate([e[0] for e in entries])
            grads = np.concatenate([e[1] for e in entries])
            summed.append(SummedRows(*lookup.sum_duplicates(ids, grads)))
        return summed

    def fuses(self, optimizer: OptimizerSpec) -> bool:
        return False

    def apply_all(self, updates: Sequence[Update]) -> None:
        if updates:
            raise RuntimeError("NumpyKernels fuse no optimizer: apply_all takes no updates.")
