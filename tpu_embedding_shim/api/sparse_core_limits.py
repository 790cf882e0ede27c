"""SparseCore's per-partition limits and its id buffer, as TensorFlow 2.21's input preprocessing applies them.

TensorFlow 2.21's `TPUEmbeddingV2.enqueue` turns each table's batch into the
SparseCores' CSR form with three host ops (`tensorflow/core/tpu/kernels/
sparse_core_preprocess_ops.cc`; the pip wheels register no kernel for them,
so this module is their specification, taken from that source, and checked
against jax-tpu-embedding's CPU preprocessing where the two agree:
tests/migrate/test_sparsecore_preprocessing_oracle.py):

1. `ConvertToListOfSparseCoreCooTensors`, per feature: the samples
   (`prod(output_shape)` of them) are split into 4 equal, contiguous chunks,
   one per SparseCore of the chip; adjacent equal (sample, id) entries merge.
2. `SortListOfSparseCoreCooTensors`, per SparseCore: each id goes to
   partition `(id + rotation) % P` (P = 4 * replicas, the table's shards;
   the rotation of a table stacked with others, `stack_tables`); equal (sample,
   id) pairs merge (their gains add); then, per partition, `ids` = the
   (sample, id) pairs it receives and `unique ids` = the distinct ids. Any
   count above `max_ids_per_table[table]` / `max_unique_ids_per_table[table]`
   (keyed by stacked table name, default 256) is an `InvalidArgumentError`, whatever `allow_id_dropping`
   says: those limits never drop.
3. `ConvertToSparseCoreCsrWrappedCooTensor`: the chip's buffer holds
   `max_ids_per_chip_per_sample * sample_count` entries (sample_count: the
   table's samples per replica, all its features). It is filled SparseCore
   by SparseCore, partition by partition, each partition's entries (sorted
   by id, then sample) followed by padding up to a multiple of 8. The first
   entry that does not fit and everything after it is dropped with
   `allow_id_dropping=True` (a warning on a TPU); without it, an
   `InvalidArgumentError`. A dropped entry's gain is gone; the kept entries
   keep the gains computed from the whole sample (a `mean` sample that lost
   one of two ids gets half of the other's row).

TensorFlow splits by `sample_count // 4`; with a sample count that is not a
multiple of 4 it cannot run (a zero division or an index past the chunk).
Here the chunks are then `ceil(sample_count / 4)` samples, so any batch runs.

>>> stats = table_statistics("t", [(np.array([0, 0, 1, 2, 3]), np.array([1, 5, 1, 2, 9]), 4)],
...                          num_replicas=1, max_ids_per_chip_per_sample=64)
>>> stats.ids.tolist()           # [SparseCore, partition]: sample 0 on SparseCore 0 sends ids 1 and 5 to partition 1
[[0, 2, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]]
>>> stats.max_ids, stats.max_unique_ids, stats.buffer_size, stats.dropped
(2, 2, 256, 0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ..engine import sparsecore_layout

SPARSE_CORES_PER_CHIP = sparsecore_layout.SPARSE_CORES_PER_CHIP
XLA_PAD_SIZE = 8
DEFAULT_MAX_IDS_PER_TABLE = 256
DEFAULT_MAX_UNIQUE_IDS_PER_TABLE = 256

# One feature of a stacked table: (sample of each entry, id of each entry, the feature's sample count, its table's
# position in the stack, that table's shard rotation), entries in input order. A table alone: position 0, rotation 0.
FeatureEntries = tuple[np.ndarray, np.ndarray, int] | tuple[np.ndarray, np.ndarray, int, int, int]


@dataclasses.dataclass(frozen=True)
class Stack:
    """Tables TensorFlow stacks into one SparseCore variable (`SparseCoreLayoutStacker`).

    Attributes:
      name: the stacked table's name, its tables' names joined by "_" (the
        key of `max_ids_per_table` and `max_unique_ids_per_table`).
      tables: the tables, in their order in the stack (by name).
      rotations: per table, its shard rotation: table k's row r goes to
        partition (r + rotations[k]) % P.
    """

    name: str
    tables: tuple[str, ...]
    rotations: tuple[int, ...]


def stack_layouts(
    tables: Sequence[tuple[str, int, int, str, int]], *, num_replicas: int, disabled: bool
) -> list[sparsecore_layout.TableLayout]:
    """Each table's SparseCore layout (`engine.sparsecore_layout.stack_tables`) on `num_replicas` chips of 4
    SparseCores; `tables` as `stack_tables` takes them."""
    return sparsecore_layout.stack_tables(
        [sparsecore_layout.StackRequest(*table) for table in tables],
        num_partitions=num_replicas,
        sparse_cores_per_partition=SPARSE_CORES_PER_CHIP,
        stacking=not disabled,
    )


def stack_tables(tables: Sequence[tuple[str, int, int, str, int]], *, num_replicas: int, disabled: bool) -> list[Stack]:
    """TensorFlow 2.21's table stacks (`engine.sparsecore_layout.stack_tables`, its `SparseCoreLayoutStacker`):
    tables of one padded width (a multiple of 8) and one group (equal optimizers and quantization) share a stack,
    taken in name order, until a stack would reach the stacker's activation or shard-size limit; table k of a
    stack is rotated by `4 * k % P`. With `disabled`, every table is its own stack, named after it.

    Args:
      tables: `(name, rows, dim, group, output_samples)` per table: `group` a string equal for tables that may
        stack, `output_samples` the activation rows it returns a step (0 while the output shapes are unknown).
    """
    stacks: dict[str, list[sparsecore_layout.TableLayout]] = {}
    for layout in stack_layouts(tables, num_replicas=num_replicas, disabled=disabled):
        stacks.setdefault(layout.stacked_table_name, []).append(layout)
    return [
        Stack(
            name=name,
            tables=tuple(x.table_name for x in members),
            rotations=tuple(x.sparse_core_shard_rotation for x in members),
        )
        for name, members in stacks.items()
    ]


@dataclasses.dataclass(frozen=True)
class TableStatistics:
    """One table's batch on the SparseCores of one chip (one replica).

    Attributes:
      table: the (stacked) table's name.
      ids: int64 `[4, P]`: the (sample, id) pairs SparseCore `c` sends to
        partition `p` (what `max_ids_per_table` bounds).
      unique_ids: int64 `[4, P]`: the distinct ids among them (what
        `max_unique_ids_per_table` bounds).
      buffer_size: the chip's buffer, `max_ids_per_chip_per_sample *
        sample_count` entries (padding included).
      buffer_needed: the entries the batch needs, padding included.
      dropped: the entries (merged (sample, id) pairs) that do not fit.
      dropped_entries: `[dropped, 3]` int64 rows `(feature, sample, id)`, the
        feature's index in the stack's features and its sample, of each
        dropped entry, in buffer order.
      entries: `[n, 3]` int64 rows `(feature, sample, id)` of every entry
        (merged (sample, id) pair) in buffer order: SparseCore, partition,
        table in the stack, id, feature, sample. The last `dropped` are
        `dropped_entries`.
      unplaced: the entries from the first partition that does not fit on
        (TensorFlow's "remaining id count" when it refuses to drop).
    """

    table: str
    ids: np.ndarray
    unique_ids: np.ndarray
    buffer_size: int
    buffer_needed: int
    dropped: int
    dropped_entries: np.ndarray
    entries: np.ndarray
    unplaced: int = 0

    @property
    def max_ids(self) -> int:
        """The largest per-partition id count: the smallest `max_ids_per_table` this batch fits."""
        return int(self.ids.max(initial=0))

    @property
    def max_unique_ids(self) -> int:
        """The largest per-partition unique id count: the smallest `max_unique_ids_per_table` it fits."""
        return int(self.unique_ids.max(initial=0))


def _chunk(sample_count: int) -> int:
    """Samples per SparseCore (TensorFlow: `sample_count // 4`; here at least that, see the module doc)."""
    return max(1, math.ceil(sample_count / SPARSE_CORES_PER_CHIP))


def table_statistics(
    table: str,
    features: Sequence[FeatureEntries],
    *,
    num_replicas: int,
    max_ids_per_chip_per_sample: int,
) -> TableStatistics:
    """The per-partition counts and the buffer of one table's batch (one replica).

    Args:
      table: its name (for the statistics).
      features: per feature of the table, in TensorFlow's flattening order:
        `(samples, ids, sample_count)`, one sample and one id per entry, in
        input order (samples non-decreasing).
      num_replicas: replicas in sync (partitions P = 4 * replicas).
      max_ids_per_chip_per_sample: `SparseCoreEmbeddingConfig`'s.
    """
    partitions = SPARSE_CORES_PER_CHIP * num_replicas
    rows: list[np.ndarray] = []  # per feature: (core, partition, id, feature, sample, order) of each merged entry
    table_samples = 0
    for index, feature in enumerate(features):
        samples, ids, sample_count = feature[:3]
        position, rotation = feature[3:] if len(feature) == 5 else (0, 0)
        samples = np.asarray(samples, np.int64)
        ids = np.asarray(ids, np.int64)
        table_samples += sample_count
        if ids.size == 0:
            continue
        # Equal (sample, id) pairs merge into one entry (the sort's merge sees them adjacent: samples never decrease).
        pairs = np.unique(np.stack([samples, ids], 1), axis=0)
        samples, ids = pairs[:, 0], pairs[:, 1]
        core = samples // _chunk(sample_count)
        rows.append(
            np.stack(
                [
                    core,
                    (ids + rotation) % partitions,
                    np.full_like(ids, position),
                    ids,
                    np.full_like(ids, index),
                    samples,
                ],
                1,
            )
        )
    entries = np.concatenate(rows) if rows else np.zeros((0, 6), np.int64)
    # The buffer's order: SparseCore, partition, table in the stack, id, then feature and sample (the input order).
    entries = entries[np.lexsort(entries[:, ::-1].T)]
    counts = np.zeros((SPARSE_CORES_PER_CHIP, partitions), np.int64)
    np.add.at(counts, (entries[:, 0], entries[:, 1]), 1)
    unique = np.zeros_like(counts)
    distinct = np.unique(entries[:, [0, 1, 2, 3]], axis=0)
    np.add.at(unique, (distinct[:, 0], distinct[:, 1]), 1)

    buffer_size = max_ids_per_chip_per_sample * _chunk(table_samples) * SPARSE_CORES_PER_CHIP
    total = entries.shape[0]
    filled, needed, start, first_dropped, unplaced = 0, 0, 0, total, 0
    for count in counts.reshape(-1).tolist():
        if first_dropped == total and filled + count > buffer_size:  # the first partition that does not fit
            first_dropped, unplaced = start + (buffer_size - filled), total - start
            filled = buffer_size
        elif first_dropped == total:
            filled = -(-(filled + count) // XLA_PAD_SIZE) * XLA_PAD_SIZE
        needed = -(-(needed + count) // XLA_PAD_SIZE) * XLA_PAD_SIZE
        start += count
    dropped = entries[first_dropped:]
    return TableStatistics(
        table=table,
        ids=counts,
        unique_ids=unique,
        buffer_size=buffer_size,
        buffer_needed=needed,
        dropped=int(dropped.shape[0]),
        dropped_entries=dropped[:, [4, 5, 3]].copy(),
        entries=entries[:, [4, 5, 3]].copy(),
        unplaced=unplaced,
    )


def check_limits(stats: TableStatistics, *, max_ids: int, max_unique_ids: int, allow_id_dropping: bool) -> None:
    """TensorFlow 2.21's errors, in its order: the per-partition limits (SparseCore by SparseCore), then the buffer.

    Raises:
      ValueError (TensorFlow: InvalidArgumentError): a partition over a
        limit; the buffer size not a multiple of 8; ids that do not fit
        without `allow_id_dropping`.
    """
    for core in range(stats.ids.shape[0]):
        for partition in range(stats.ids.shape[1]):
            got = int(stats.ids[core, partition])
            if got > max_ids:
                raise ValueError(
                    f"Sparse core {partition} gets {got} ids while the max ids per sparse core is set to be "
                    f"{max_ids} for table {stats.table}. (SparseCore {core} of the chip sends {got} (sample, id) "
                    f"pairs to partition {partition}; raise max_ids_per_table[{stats.table!r}] to at least "
                    f"{stats.max_ids} for this batch.)"
                )
            got = int(stats.unique_ids[core, partition])
            if got > max_unique_ids:
                raise ValueError(
                    f"Sparse core {partition} gets {got} unique ids while the max unique ids per sparse core is set "
                    f"to be {max_unique_ids} for table {stats.table}. (Raise max_unique_ids_per_table"
                    f"[{stats.table!r}] to at least {stats.max_unique_ids} for this batch.)"
                )
    if stats.buffer_size % XLA_PAD_SIZE:
        raise ValueError(
            f"The max_ids_per_chip is set to be {stats.buffer_size} which is not divisible by the xla_pad_size "
            f"{XLA_PAD_SIZE} ."
        )
    if stats.dropped and not allow_id_dropping:
        raise ValueError(
            f"The max_ids_per_chip is set to be {stats.buffer_size} which is not going to fit all ids. The remaining "
            f"id count is {stats.unplaced} . Please consider setting the allow_id_dropping to be true. (Table "
            f"{stats.table}: the batch needs {stats.buffer_needed} buffer entries, padding included; raise "
            "max_ids_per_chip_per_sample.)"
        )
