"""Table sharding: where row `id` of a `[V, D]` table lives among N shards.

Two layouts, TensorFlow's `partition_strategy` (formulas as in
`tf.compat.v1.nn.embedding_lookup`). With q, r = divmod(V, N), both give
the first r shards q + 1 rows and the others q rows::

    div: contiguous ranges          13 rows, 5 shards: [0 1 2] [3 4 5] [6 7 8] [9 10] [11 12]
         id < r (q+1):  shard = id // (q+1),          row = id % (q+1)
         otherwise:     shard = r + (id - r(q+1)) // q, row = (id - r(q+1)) % q
    mod: round robin                13 rows, 5 shards: [0 5 10] [1 6 11] [2 7 12] [3 8] [4 9]
         shard = id % N, row = id // N

The layout changes where a row is stored, never a number: a lookup, a
gradient or an update gives the same result for every N and both
strategies, and `to_full()` always returns the table in id order.

More shards than rows is allowed (TensorFlow pads tiny tables the same
way): the extra shards are empty, shape [0, D].

Storage: a `ShardedTable` keeps its N shards as consecutive slices of ONE
`[V, D]` array, `storage`, in shard order. For `div` that array is the table
in id order (the shards are contiguous ranges); for `mod` it is shard 0's
rows, then shard 1's, and so on, so row `id` is at storage row
`physical(id) = start[id % N] + id // N`. The engine's fast kernels work on
`storage` with physical ids, whatever the sharding.

>>> import numpy as np
>>> t = ShardedTable(np.arange(13, dtype=np.float32)[:, None], num_shards=5, strategy="mod")
>>> [s[:, 0].astype(int).tolist() for s in t.shards]
[[0, 5, 10], [1, 6, 11], [2, 7, 12], [3, 8], [4, 9]]
>>> t[np.array([12, 0])].tolist()
[[12.0], [0.0]]
>>> t.storage[:, 0].astype(int).tolist()  # the shards, one after another
[0, 5, 10, 1, 6, 11, 2, 7, 12, 3, 8, 4, 9]
>>> t.physical(np.array([12, 0, 4])).tolist(), t.logical(np.array([8, 0, 11])).tolist()
([8, 0, 11], [12, 0, 4])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tpu_embedding_shim.spec import parse_partition_strategy
from tpu_embedding_shim.spec.checks import check_int

from . import aligned

__all__ = ["shard_sizes", "locate", "split_table", "join_shards", "ShardedTable"]


def _check(vocabulary_size: Any, num_shards: Any, strategy: Any) -> tuple[int, int, str]:
    return (
        check_int("vocabulary_size", vocabulary_size, minimum=1),
        check_int("num_shards", num_shards, minimum=1),
        parse_partition_strategy(strategy, name="strategy"),
    )


def shard_sizes(vocabulary_size: int, num_shards: int, strategy: str) -> list[int]:
    """Rows per shard: the first `V % N` shards hold one extra row (both strategies).

    >>> shard_sizes(13, 5, "div"), shard_sizes(3, 5, "mod")
    ([3, 3, 3, 2, 2], [1, 1, 1, 0, 0])
    """
    vocabulary_size, num_shards, _ = _check(vocabulary_size, num_shards, strategy)
    q, r = divmod(vocabulary_size, num_shards)
    return [q + 1] * r + [q] * (num_shards - r)


def locate(ids: Any, vocabulary_size: int, num_shards: int, strategy: str) -> tuple[np.ndarray, np.ndarray]:
    """(shard, row_in_shard) of each global id, both int64 with the shape of `ids`.

    Raises:
      ValueError: an id outside [0, vocabulary_size).
    """
    vocabulary_size, num_shards, strategy = _check(vocabulary_size, num_shards, strategy)
    ids = np.asarray(ids)
    if ids.size and ids.dtype.kind not in "iu":
        raise TypeError(f"Argument `ids` must be integers. Received dtype {ids.dtype}.")
    ids = ids.astype(np.int64)
    bad = (ids < 0) | (ids >= vocabulary_size)
    if bad.any():
        raise ValueError(
            f"Argument `ids` must be row ids in [0, {vocabulary_size}). Received: {int(ids[bad].reshape(-1)[0])}."
        )
    if strategy == "mod":
        return ids % num_shards, ids // num_shards
    q, r = divmod(vocabulary_size, num_shards)
    big = r * (q + 1)  # rows held by the first r (larger) shards
    in_big = ids < big
    rest = ids - big
    q_safe = max(q, 1)  # q == 0 only when N > V, and then every id is in a big shard
    shard = np.where(in_big, ids // (q + 1), r + rest // q_safe)
    row = np.where(in_big, ids % (q + 1), rest % q_safe)
    return shard, row


def split_table(full: Any, num_shards: int, strategy: str) -> list[np.ndarray]:
    """Splits a `[V, D]` table into N shards (copies), in shard order."""
    full = np.asarray(full)
    if full.ndim != 2:
        raise ValueError(f"Argument `full` must be a [vocabulary_size, dim] table. Received shape {full.shape}.")
    vocabulary_size, num_shards, strategy = _check(full.shape[0], num_shards, strategy)
    if strategy == "mod":
        return [full[s::num_shards].copy() for s in range(num_shards)]
    bounds = np.concatenate([[0], np.cumsum(shard_sizes(vocabulary_size, num_shards, strategy))])
    return [full[bounds[s] : bounds[s + 1]].copy() for s in range(num_shards)]


def join_shards(shards: Sequence[Any], vocabulary_size: int, strategy: str) -> np.ndarray:
    """The full `[V, D]` table, in id order, from its N shards."""
    if isinstance(shards, np.ndarray) or not isinstance(shards, (list, tuple)) or not shards:
        raise ValueError("Argument `shards` must be a non-empty list of [rows, dim] arrays.")
    shards = [np.asarray(s) for s in shards]
    vocabulary_size, num_shards, strategy = _check(vocabulary_size, len(shards), strategy)
    expected = shard_sizes(vocabulary_size, num_shards, strategy)
    got = [s.shape[0] if s.ndim == 2 else None for s in shards]
    dims = {s.shape[1] for s in shards if s.ndim == 2}
    if got != expected or len(dims) != 1:
        raise ValueError(
            f"Argument `shards` must hold {expected} rows of one width for vocabulary_size="
            f"{vocabulary_size} over {num_shards} shards ({strategy!r}). Received shapes "
            f"{[s.shape for s in shards]}."
        )
    if strategy == "div":
        return np.concatenate(shards, axis=0)
    full = np.empty((vocabulary_size, dims.pop()), dtype=np.result_type(*shards))
    for s, shard in enumerate(shards):
        full[s::num_shards] = shard
    return full


class ShardedTable:
    """A `[V, D]` table stored as N shards; indexes like the full array.

    Attributes:
      vocabulary_size: V, number of rows.
      dim: D, width of a row.
      num_shards: N.
      strategy: 'div' or 'mod'.
      shards: the N shard arrays; shard s has `shard_sizes(V, N, strategy)[s]` rows.

    `table[ids]` gathers rows by global id (result shape `ids.shape + (D,)`),
    `scatter(ids, rows)` writes them back, `to_full()` gives the table in id
    order. Ids are global row ids in [0, V): negative ids do not wrap around.
    """

    def __init__(self, full: np.ndarray, num_shards: int, strategy: str, *, copy: bool = True):
        """`copy=False` adopts `full` (float32, C-contiguous, writeable) as the storage when the layout
        is the id order (one shard, or `div`): no copy. Otherwise the storage is a cache-line
        aligned copy (`aligned.py`); the engine passes aligned arrays.

        The engine uses it for tables it owns, so that a 10M-row table (or a
        memory-mapped one) is held once.
        """
        full = np.asarray(full)
        if full.ndim != 2:
            raise ValueError(f"Argument `full` must be a [vocabulary_size, dim] table. Received shape {full.shape}.")
        self.vocabulary_size, self.num_shards, self.strategy = _check(full.shape[0], num_shards, strategy)
        self.dim = int(full.shape[1])
        sizes = shard_sizes(self.vocabulary_size, self.num_shards, self.strategy)
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.in_id_order = self.num_shards == 1 or self.strategy == "div"
        adopt = not copy and full.dtype == np.float32 and full.flags.c_contiguous and full.flags.writeable
        if self.in_id_order:
            self.storage = full if adopt else aligned.aligned_copy(full)
        else:  # shard after shard, in one cache-line aligned array
            self.storage = aligned.empty(full.shape, full.dtype)
            for s in range(self.num_shards):
                self.storage[self._starts[s] : self._starts[s + 1]] = full[s :: self.num_shards]
        self.shards: list[np.ndarray] = [
            self.storage[self._starts[s] : self._starts[s + 1]] for s in range(self.num_shards)
        ]

    def physical(self, ids: np.ndarray) -> np.ndarray:
        """The storage rows of global `ids` (int64, in range; no check): `ids` itself in id order."""
        if self.in_id_order:
            return ids
        n = self.num_shards
        if n & (n - 1) == 0:  # a power of two: a mask and a shift instead of two int64 divisions
            return self._starts[ids & (n - 1)] + (ids >> (n.bit_length() - 1))
        return self._starts[ids % n] + ids // n

    def logical(self, rows: np.ndarray) -> np.ndarray:
        """The global ids of storage `rows` (the inverse of `physical`)."""
        if self.in_id_order:
            return rows
        shard = np.searchsorted(self._starts, rows, side="right") - 1
        return (rows - self._starts[shard]) * self.num_shards + shard

    @property
    def shape(self) -> tuple[int, int]:
        return (self.vocabulary_size, self.dim)

    @property
    def dtype(self) -> np.dtype:
        return self.shards[0].dtype

    def __len__(self) -> int:
        return self.vocabulary_size

    def __repr__(self) -> str:
        return (
            f"ShardedTable(vocabulary_size={self.vocabulary_size}, dim={self.dim}, "
            f"num_shards={self.num_shards}, strategy={self.strategy!r})"
        )

    def __array__(self, dtype=None, copy=None):
        full = self.to_full()
        return full if dtype is None else full.astype(dtype)

    def locate(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """(shard, row_in_shard) of each id."""
        return locate(ids, self.vocabulary_size, self.num_shards, self.strategy)

    def gather(self, ids: Any) -> np.ndarray:
        """Rows of the global `ids`: shape `ids.shape + (dim,)`."""
        ids = np.asarray(ids)
        shard, row = self.locate(ids.reshape(-1))
        out = np.empty((shard.shape[0], self.dim), dtype=self.dtype)
        for s, table in enumerate(self.shards):
            here = shard == s
            if here.any():
                out[here] = table[row[here]]
        return out.reshape(ids.shape + (self.dim,))

    __getitem__ = gather

    def scatter(self, ids: Any, rows: Any) -> None:
        """Writes `rows` ([n, dim]) to the global `ids` ([n], no repeats)."""
        ids = np.asarray(ids).reshape(-1)
        rows = np.asarray(rows).reshape(ids.shape[0], self.dim) if ids.size else np.zeros((0, self.dim))
        if np.unique(ids).shape[0] != ids.shape[0]:
            raise ValueError("Argument `ids` of ShardedTable.scatter must not repeat an id; sum duplicates first.")
        shard, row = self.locate(ids)
        for s, table in enumerate(self.shards):
            here = shard == s
            if here.any():
                table[row[here]] = rows[here]

    def to_full(self) -> np.ndarray:
        """The full `[V, D]` table in id order (a copy)."""
        return join_shards(self.shards, self.vocabulary_size, self.strategy)

    def load_per_shard(self, ids: Any) -> np.ndarray:
        """int64 [N]: how many of `ids` each shard serves (for profiling)."""
        shard, _ = self.locate(np.asarray(ids).reshape(-1))
        return np.bincount(shard, minlength=self.num_shards).astype(np.int64)
