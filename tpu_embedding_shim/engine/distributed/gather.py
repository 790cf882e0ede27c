"""A table gathered on rank 0 block by block: rows in id order, never the whole table on any rank.

`blocks_on_root(comm, ownership, local)` is a collective generator: for
each run of `block_rows` ids, every rank sends the rows it owns in that run
(a contiguous piece of its local array under `div` and `mod` alike) to
rank 0, which yields the run's rows in id order; the other ranks yield None
at the same pace. An export that writes each block as it comes holds one
block, not the table (`runner/export.py`).

>>> import numpy as np
>>> from tpu_embedding_shim.engine.distributed import Ownership, SingleProcess
>>> owner = Ownership(5, 1, "mod", 1)
>>> [block.tolist() for block in blocks_on_root(SingleProcess(), owner, np.arange(5.0)[:, None], block_rows=2)]
[[[0.0], [1.0]], [[2.0], [3.0]], [[4.0]]]
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .communicator import Communicator
from .ownership import Ownership

__all__ = ["blocks_on_root", "BLOCK_ROWS"]

BLOCK_ROWS = 1 << 16
"""Rows per block (8 MiB at D = 32)."""


def _local_run(owner: Ownership, rank: int, start: int, stop: int) -> tuple[int, int]:
    """[lo, hi) of rank `rank`'s local rows whose ids lie in [start, stop)."""
    if owner.strategy == "mod":  # local row k is id rank + k * W
        width = owner.world_size
        return max(0, -(-(start - rank) // width)), max(0, -(-(stop - rank) // width))
    first, last = int(owner.starts[rank]), int(owner.starts[rank + 1])
    lo, hi = max(start, first), min(stop, last)
    return (lo - first, hi - first) if lo < hi else (0, 0)


def blocks_on_root(
    comm: Communicator, owner: Ownership, local: np.ndarray, *, block_rows: int = BLOCK_ROWS
) -> Iterator[np.ndarray | None]:
    """Collective: the full array's rows in id order, `block_rows` at a time, on rank 0; None on the others.

    Every rank must draw every block (the generator runs one all-to-all per block).
    """
    width = int(np.prod(local.shape[1:], dtype=np.int64))
    for start in range(0, owner.vocabulary_size, block_rows):
        stop = min(start + block_rows, owner.vocabulary_size)
        runs = [_local_run(owner, rank, start, stop) for rank in range(comm.size)]
        lo, hi = runs[comm.rank]
        send = np.ascontiguousarray(local[lo:hi], dtype=local.dtype).reshape(-1)
        to_root = [send.size if rank == 0 else 0 for rank in range(comm.size)]
        from_ranks = [(last - first) * width if comm.rank == 0 else 0 for first, last in runs]
        received = comm.alltoallv(send, to_root, from_ranks)
        if comm.rank != 0:
            yield None
            continue
        block = np.empty((stop - start, *local.shape[1:]), local.dtype)
        offset = 0
        for rank, (first, last) in enumerate(runs):
            count = last - first
            piece = received[offset : offset + count * width].reshape(count, *local.shape[1:])
            offset += count * width
            if owner.strategy == "mod":  # local row k is id rank + k * W
                block[rank + first * owner.world_size - start :: owner.world_size][:count] = piece
            else:  # local row k is id starts[rank] + k
                block[int(owner.starts[rank]) + first - start :][:count] = piece
        yield block
