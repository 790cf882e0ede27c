"""Cache-line aligned arrays for tables, slots and the engine's scratch.

numpy aligns array data to 16 bytes. A row of 64 float32 is 256 bytes: at
a 64-byte boundary it is 4 cache lines, at any other 16-byte offset 5. A
lookup or an update reads rows at random, so an unaligned table costs 25%
more memory traffic, and a prefetch of a row's 4 lines misses the fifth.
Measured on the machine of docs/benchmarks.md (2 cores, Zen 5), a pooled
lookup of 81,920 random rows of a 1,000,000 x 64 table: 1.38 ms unaligned,
0.88 ms aligned, for the same kernel (torch's `embedding_bag` 0.92 / 0.75 ms
on the same two tables). So every table and slot the engine owns starts at
a 64-byte boundary.

>>> a = empty((3, 5), np.float32)
>>> a.ctypes.data % ALIGNMENT, a.shape, a.dtype, a.flags.c_contiguous
(0, (3, 5), dtype('float32'), True)
>>> b = aligned_copy(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> b.ctypes.data % ALIGNMENT, b.tolist()
(0, [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ALIGNMENT", "empty", "full", "aligned_copy", "is_aligned"]

ALIGNMENT = 64  # bytes: one cache line


def empty(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of `ALIGNMENT` bytes."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
    # math.prod and the array interface, not np.prod and .ctypes: every lookup allocates its output
    # here, and those two took 16-43 us a call between the peers' calls in the benchmark (~1 us each here)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = (-buffer.__array_interface__["data"][0]) % ALIGNMENT
    return buffer[start : start + nbytes].view(dtype).reshape(shape)


def full(shape: tuple[int, ...], value, dtype=np.float32) -> np.ndarray:
    """`np.full`, aligned."""
    out = empty(shape, dtype)
    out.fill(value)
    return out


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % ALIGNMENT == 0


def aligned_copy(array: np.ndarray, dtype=None) -> np.ndarray:
    """A C-contiguous aligned copy of `array` (as `dtype`, default its own)."""
    array = np.asarray(array)
    out = empty(array.shape, dtype or array.dtype)
    out[...] = array
    return out
