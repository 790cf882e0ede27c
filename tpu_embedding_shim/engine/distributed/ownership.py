"""Which rank owns which rows of a table: TensorFlow's host sharding, `div` or `mod`, over W ranks.

The spec's `num_shards` must be W or a multiple W * s. Shard j then lives
on rank `j // s` for `div` (each rank a contiguous run of shards) and on
rank `j % W` for `mod`, so that with s = 1 rank r owns exactly what
TensorFlow's host r owns (`tpu_embedding_configuration.proto`):

    div: contiguous ranges, the first V % W ranks one row more
         10 rows, 3 ranks: [0 1 2 3] [4 5 6] [7 8 9]
    mod: id % W
         10 rows, 3 ranks: [0 3 6 9] [1 4 7] [2 5 8]

A rank keeps its rows in id order: row `id` is local row `id - start[r]`
(`div`) or `id // W` (`mod`). More ranks than rows leaves ranks with no rows.

>>> import numpy as np
>>> own = Ownership(10, num_shards=3, strategy="div", world_size=3)
>>> own.sizes, own.locate(np.array([0, 4, 9]))[0].tolist()
([4, 3, 3], [0, 1, 2])
>>> Ownership(10, 3, "mod", 3).owned_ids(1).tolist(), Ownership(10, 3, "mod", 3).owned(1)
([1, 4, 7], slice(1, 10, 3))
>>> Ownership(10, 6, "div", 3).sizes  # six shards [2 2 2 2 1 1], two per rank
[4, 4, 2]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..sharding import shard_sizes
from .exchange import compiled

__all__ = ["Ownership"]


class Ownership:
    """Where each row of one `[V, D]` table lives among `world_size` ranks.

    Raises:
      ValueError: `num_shards` is not a multiple of `world_size`.
    """

    def __init__(self, vocabulary_size: int, num_shards: int, strategy: str, world_size: int):
        if num_shards % world_size:
            raise ValueError(
                f"Argument `num_shards` must be the number of ranks ({world_size}) or a multiple of it, so that "
                f"each rank owns whole shards. Received: num_shards={num_shards}. Set "
                f"EmbeddingSpec(num_shards={world_size}) when running on {world_size} ranks."
            )
        self.vocabulary_size = vocabulary_size
        self.world_size = world_size
        self.strategy = strategy
        per_rank = num_shards // world_size
        bounds = np.concatenate([[0], np.cumsum(shard_sizes(vocabulary_size, num_shards, strategy))])
        if strategy == "div":  # rank r: shards r*s .. r*s + s - 1, a contiguous range of ids
            self.starts = bounds[::per_rank].astype(np.int64)  # W + 1 values, the last = V
            self.sizes = np.diff(self.starts).tolist()
        else:  # shard j on rank j % W: rank r owns the ids with id % W == r, whatever s
            self.starts = np.zeros(0, np.int64)
            self.sizes = shard_sizes(vocabulary_size, world_size, strategy)

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(owner rank, local row) of each id (int64, ids in range: not checked); one compiled pass when
        numba is there (`fast/exchange.locate`), the same arrays."""
        kernels = compiled()
        if kernels is not None:
            return kernels.locate(ids, self.starts, self.world_size)
        if self.strategy == "mod":
            return ids % self.world_size, ids // self.world_size
        owner = np.searchsorted(self.starts, ids, side="right") - 1
        return owner, ids - self.starts[owner]

    def owned_ids(self, rank: int) -> np.ndarray:
        """The global ids of rank `rank`'s rows, in its local order."""
        if self.strategy == "mod":
            return np.arange(rank, self.vocabulary_size, self.world_size, dtype=np.int64)
        return np.arange(self.starts[rank], self.starts[rank + 1], dtype=np.int64)

    def owned(self, rank: int) -> slice:
        """Rank `rank`'s rows as a slice of the full table (`div`: a range; `mod`: every W-th id)."""
        if self.strategy == "mod":
            return slice(rank, self.vocabulary_size, self.world_size)
        return slice(int(self.starts[rank]), int(self.starts[rank + 1]))

    def take(self, full: np.ndarray, rank: int) -> np.ndarray:
        """Rank `rank`'s rows of the full table (a new C-contiguous array)."""
        if self.strategy == "mod":
            return np.ascontiguousarray(full[rank :: self.world_size])
        return full[self.starts[rank] : self.starts[rank + 1]].copy()

    def join(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The full table in id order from every rank's rows (rank order)."""
        if self.strategy == "div":
            return np.concatenate(parts, axis=0)
        full = np.empty((self.vocabulary_size,) + parts[0].shape[1:], dtype=parts[0].dtype)
        for rank, part in enumerate(parts):
            full[rank :: self.world_size] = part
        return full
