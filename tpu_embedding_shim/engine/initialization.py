"""A table's initial rows, any set of them drawn alone: the same values for the whole table or a rank's rows.

A table is initialized in blocks of `BLOCK_ROWS` rows. A built-in random
initializer (`TruncatedNormal`, `RandomNormal`, `RandomUniform`) draws
block b from its own stream, keyed by (the initializer's seed, b); block 0
is the initializer's own stream, so a table of at most `BLOCK_ROWS` rows is
exactly `initializer((V, D))`. So any rows (a rank's `div` range, its `mod`
ids, one block of a memory-mapped file) are drawn without the full table,
and give the values the full table has there: `Engine`, every rank of a
`DistributedEngine` on any number of ranks, and a memory-mapped table all
hold the same numbers for the same seed.

`RowIdInitializer` and `Constant` compute the rows asked for. Any other
callable (TensorFlow's and Keras' initializer objects, a function) is called
once for the whole table, which is then cut to the rows asked for: its
peak memory is the full table.

>>> from tpu_embedding_shim.spec import TableSpec, TruncatedNormal
>>> table = TableSpec(name="t", vocabulary_size=40_000, dim=4, initializer=TruncatedNormal(seed=3))
>>> whole = initial_rows(table, table.initializer)
>>> odd = initial_rows(table, table.initializer, np.arange(1, 40_000, 2))  # rank 1 of 2 under `mod`
>>> bool(np.array_equal(whole[1::2], odd))
True
>>> small = TableSpec(name="s", vocabulary_size=10, dim=2, initializer=TruncatedNormal(seed=3))
>>> bool(np.array_equal(initial_rows(small, small.initializer), TruncatedNormal(seed=3)((10, 2))))
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..spec import EmbeddingSpec, RowIdInitializer, TableSpec
from ..spec.initializers import Constant, Ones, RandomNormal, RandomUniform, TruncatedNormal, Zeros
from . import aligned

__all__ = ["BLOCK_ROWS", "initial_rows", "seeded_initializers", "Rows"]

BLOCK_ROWS = 1 << 14
"""Rows per block of a random draw (4 MiB of float64 at D = 32): part of the values, never change it."""

_RANDOM = (TruncatedNormal, RandomNormal, RandomUniform)

Rows = slice | np.ndarray | None
"""Which rows: a `slice` (a range, step 1), an int array of row indices (sorted or not), None for all."""


def seeded_initializers(spec: EmbeddingSpec, seed: int | None) -> dict[str, Callable[..., Any]]:
    """Table name -> its initializer, a seedless built-in random one given a seed drawn from `seed`
    (table after table, in spec order: the same for every rank and every engine built with `seed`)."""
    rng = np.random.default_rng(seed)
    return {table.name: table.seeded_initializer(rng) for table in spec.tables}


def initial_rows(table: TableSpec, initializer: Callable[..., Any], rows: Rows = None) -> np.ndarray:
    """Rows `rows` of the table's initial values: [len(rows), D] float32, cache-line aligned, finite.

    Raises:
      ValueError: the initializer returned another shape, or NaN or infinite values.
      TypeError: a `Constant` whose values cannot fill the table (as TensorFlow).
    """
    vocabulary, dim = table.vocabulary_size, table.dim
    index = _row_index(rows, vocabulary)
    out = aligned.empty((len(index), dim), np.float32)
    if isinstance(initializer, _RANDOM) and initializer.seed is not None:
        _random_rows(table, initializer, index, out)
        return out
    if not isinstance(initializer, (RowIdInitializer, Zeros, Ones, Constant)):
        whole = _checked(table, initializer((vocabulary, dim), np.float32), (vocabulary, dim))
        out[...] = whole[_as_numpy_index(index)]
        return out
    if isinstance(initializer, Constant):
        initializer.check_shape((vocabulary, dim))  # TensorFlow's TypeError for values that cannot fill the table
        if not np.all(np.isfinite(initializer.value)):
            raise ValueError(f"The initializer of table {table.name!r} returned NaN or infinite values.")
    for start in range(0, len(index), BLOCK_ROWS):  # in blocks: no temporary larger than a block
        out[start : start + BLOCK_ROWS] = _computed_rows(initializer, index[start : start + BLOCK_ROWS], table)
    return out


def _computed_rows(initializer: Any, ids: range | np.ndarray, table: TableSpec) -> np.ndarray:
    """The rows `ids` of an initializer whose values are a formula of the row (no draw)."""
    if isinstance(initializer, RowIdInitializer):
        values = ids if isinstance(ids, np.ndarray) else np.arange(ids.start, ids.stop, ids.step)
        return (values.astype(np.float64) + initializer.offset).astype(np.float32)[:, None]
    if isinstance(initializer, (Zeros, Ones)):
        return np.float32(1.0 if isinstance(initializer, Ones) else 0.0)
    value = initializer.value
    if isinstance(value, float) or value.size == 1:
        return np.float32(np.asarray(value).reshape(-1)[0])
    return value.reshape(table.vocabulary_size, table.dim)[_as_numpy_index(ids)]  # row-major, one value per entry


def _row_index(rows: Rows, vocabulary: int) -> range | np.ndarray:
    """The rows as a range (any step) or an int64 array, checked against the table's rows."""
    if rows is None:
        return range(vocabulary)
    if isinstance(rows, slice):
        if rows.step is not None and rows.step < 1:
            raise ValueError(f"Argument `rows` must be a slice with a step >= 1. Received: {rows!r}.")
        return range(*rows.indices(vocabulary))
    index = np.asarray(rows)
    if index.ndim != 1 or (index.size and index.dtype.kind not in "iu"):
        raise ValueError(f"Argument `rows` must be a slice or a 1-D array of row indices. Received: {rows!r}.")
    index = index.astype(np.int64, copy=False)
    if index.size and (index.min() < 0 or index.max() >= vocabulary):
        raise ValueError(f"Argument `rows` must lie in [0, {vocabulary}). Received rows {index.min()}..{index.max()}.")
    return index


def _as_numpy_index(index: range | np.ndarray) -> slice | np.ndarray:
    return slice(index.start, index.stop, index.step) if isinstance(index, range) else index


def _random_rows(table: TableSpec, initializer: Any, index: range | np.ndarray, out: np.ndarray) -> None:
    """Block by block: each block holding a wanted row drawn whole from its stream, its wanted rows kept."""
    vocabulary = table.vocabulary_size
    if isinstance(index, np.ndarray):
        blocks = index // BLOCK_ROWS
        for block in np.unique(blocks):
            start = int(block) * BLOCK_ROWS
            values = _block(table, initializer, int(block), min(BLOCK_ROWS, vocabulary - start))
            where = np.flatnonzero(blocks == block)
            out[where] = values[index[where] - start]
        return
    if not len(index):
        return
    step = index.step
    for block in range(index[0] // BLOCK_ROWS, index[-1] // BLOCK_ROWS + 1):
        start, stop = block * BLOCK_ROWS, min(block * BLOCK_ROWS + BLOCK_ROWS, vocabulary)
        first = max(0, -(-(start - index.start) // step))  # the first position k with index[k] >= start
        last = min(len(index), -(-(stop - index.start) // step))
        if first >= last:
            continue
        values = _block(table, initializer, block, stop - start)
        out[first:last] = values[index[first] - start : stop - start : step][: last - first]


def _block(table: TableSpec, initializer: Any, block: int, rows: int) -> np.ndarray:
    """Block `block` of a seeded random table: its own stream (block 0: the initializer's seed itself)."""
    seed = initializer.seed
    if block:  # shifted as a Python int: numpy 1.x (TensorFlow 2.15's) refuses np.uint64 >> int
        seed = int(np.random.SeedSequence([int(initializer.seed), block]).generate_state(1, np.uint64)[0]) >> 1
    return _checked(
        table, dataclasses.replace(initializer, seed=seed)((rows, table.dim), np.float32), (rows, table.dim)
    )


def _checked(table: TableSpec, values: Any, shape: tuple[int, int]) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    if values.shape != shape:
        raise ValueError(f"The initializer of table {table.name!r} returned shape {values.shape}; expected {shape}.")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"The initializer of table {table.name!r} returned NaN or infinite values.")
    return values
