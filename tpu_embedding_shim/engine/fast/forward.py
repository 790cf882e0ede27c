"""Parallel gather-pool: the forward lookup, one example per loop iteration.

    out[b] = sum_{k in row_splits[b] .. row_splits[b+1]} coef[k] * table[ids[k]]

Examples are split among threads (`prange`, blocks of `_CHUNK`). Each term
`coef[k] * row` is rounded to float32 and added to a running sum, term
after term: the order of `lookup.running_sums`, the reference, so the fast
forward gives exactly the reference's float32 numbers. `table` is trusted:
ids were checked by `to_ragged`.

A quantized table (`quant` = float32 (lower, upper, quantum), not empty)
has each row value go through `quantized` as it is read, the float32
operations of `lookup.quantize` in its order: the same bits.

`pooled` is the entry point: tables of width D <= 256 run a kernel compiled
for their own D (`_fixed_kernel`: the running sum lives in a fixed-size
stack buffer, in registers once LLVM unrolls the row loops; no multiply for
an unweighted sum); wider tables run the generic `pooled_forward`.

Every term read also prefetches the row `AHEAD_ROWS` entries further on
(`prefetch.py`), so a thread has many rows in flight instead of one. Measured
on the machine of docs/benchmarks.md (2 threads, 81,920 random rows of a
1,000,000-row aligned table, interleaved, ms): D=64, 16 rows ahead 0.47,
32 0.38, 48 0.35, 64 0.36 (torch's embedding_bag 0.49); D=16, 16 rows
0.48, 32 0.45, 64 0.44 (torch 0.36); D=256 the same from 4 to 32 rows (2.6,
torch 2.6). A prefetch never changes a value.
"""

from __future__ import annotations

import numba
import numpy as np

from . import disk_cache  # noqa: F401  (before any cache=True kernel: numba caches them outside the package)
from .prefetch import prefetch_row, stack_f32

__all__ = ["pooled", "pooled_forward", "sequence_forward", "quantized", "AHEAD_ROWS", "NO_QUANTIZATION"]

AHEAD_ROWS = 32  # rows prefetched ahead by the gathers of this module
_CHUNK = 64  # examples per parallel task
NO_QUANTIZATION = np.zeros(0, np.float32)  # `quant` of a table that is not quantized


@numba.njit(inline="always")
def quantized(x, lower, upper, quantum):
    """`lookup.quantize` of one float32 value: clipped to [lower, upper] (NaN kept), then rounded to the
    nearest level, each operation in float32."""
    if x < lower:
        x = lower
    elif x > upper:
        x = upper
    return np.floor((x - lower) / quantum + np.float32(0.5)) * quantum + lower


@numba.njit(inline="always")
def _read(row, j, quantize, quant):
    """`row[j]`, quantized when `quantize` (a constant of the kernel, or a flag set once per call)."""
    if quantize:
        return quantized(row[j], quant[0], quant[1], quant[2])
    return row[j]


@numba.njit(inline="always")
def _ahead(table, ids, k):
    if k + AHEAD_ROWS < ids.shape[0]:
        prefetch_row(table, ids[k + AHEAD_ROWS])


@numba.njit(inline="always")
def _pool_chunk(table, ids, row_splits, coef, out, chunk, acc, width, quantize, quant):
    """Fills the rows of `out` of one chunk of examples, each summed in `acc[:width]` then copied out.

    An empty `coef` means "no coefficients" (an unweighted sum: multiplying
    by 1 would change no value, so it is skipped). Row values are read
    through `quantized` when `quantize`. Inlined into the kernels below:
    with `width` a compile-time constant, LLVM unrolls every loop over a row
    and keeps a stack `acc` in registers."""
    num_examples = row_splits.shape[0] - 1
    weighted = coef.shape[0] != 0
    for b in range(chunk * _CHUNK, min(num_examples, (chunk + 1) * _CHUNK)):
        start, stop = row_splits[b], row_splits[b + 1]
        o = out[b]
        if stop == start:
            for j in range(width):
                o[j] = np.float32(0.0)
            continue
        _ahead(table, ids, start)
        row = table[ids[start]]
        if weighted:
            c = coef[start]
            for j in range(width):
                acc[j] = c * _read(row, j, quantize, quant)
        else:
            for j in range(width):
                acc[j] = _read(row, j, quantize, quant)
        for k in range(start + 1, stop):
            _ahead(table, ids, k)
            row = table[ids[k]]
            if weighted:
                c = coef[k]
                for j in range(width):
                    acc[j] += c * _read(row, j, quantize, quant)
            else:
                for j in range(width):
                    acc[j] += _read(row, j, quantize, quant)
        for j in range(width):
            o[j] = acc[j]


@numba.njit(parallel=True, cache=True, nogil=True)
def pooled_forward(table, ids, row_splits, coef, out, quant):
    """Fills `out` [B, D] float32, any D; `coef` [N] float32, or empty for an unweighted sum; `quant`
    float32 (lower, upper, quantum) of a quantized table, or empty (`NO_QUANTIZATION`)."""
    dim = table.shape[1]
    quantize = quant.shape[0] != 0
    for chunk in numba.prange((row_splits.shape[0] - 1 + _CHUNK - 1) // _CHUNK):
        _pool_chunk(table, ids, row_splits, coef, out, chunk, np.empty(dim, np.float32), dim, quantize, quant)


_FIXED_MAX_DIM = 256  # widths up to this get a kernel compiled for their own D (stack accumulator)
_FIXED: dict = {}


def _fixed_kernel(DIM, QUANTIZED):  # noqa: N803 - upper case: numba compiles them in as constants
    """`pooled_forward` for tables of width DIM (a compile-time constant), same numbers, same order;
    QUANTIZED (a constant too) says whether it reads rows through `quantized`.

    With D known, LLVM unrolls every loop over a row and keeps the running
    sum in a stack buffer (registers where it fits) instead of a heap one.
    The constant QUANTIZED leaves no test in the loops of a plain table."""

    @numba.njit(parallel=True, cache=True, nogil=True)
    def kernel(table, ids, row_splits, coef, out, quant):
        for chunk in numba.prange((row_splits.shape[0] - 1 + _CHUNK - 1) // _CHUNK):
            acc = numba.carray(stack_f32(DIM), DIM)
            _pool_chunk(table, ids, row_splits, coef, out, chunk, acc, DIM, QUANTIZED, quant)

    return kernel


def pooled(table, ids, row_splits, coef, out, quant=NO_QUANTIZATION):
    """`pooled_forward`, through a kernel compiled for the table's width when D <= 256.

    `coef` may be empty: an unweighted sum (every coefficient 1); `quant`
    empty: a table that is not quantized."""
    dim = table.shape[1]
    if 0 < dim <= _FIXED_MAX_DIM and table.dtype == np.float32:
        key = (dim, quant.shape[0] != 0)
        kernel = _FIXED.get(key)
        if kernel is None:
            kernel = _FIXED[key] = _fixed_kernel(*key)
        kernel(table, ids, row_splits, coef, out, quant)
        return
    pooled_forward(table, ids, row_splits, coef, out, quant)


@numba.njit(parallel=True, cache=True, nogil=True)
def sequence_forward(table, ids, row_splits, positions, out, lengths, quant):
    """Fills `out` [B, L, D]: `out[b, p] = table[id]` for positions p < L (through `quantized` when
    `quant` is not empty), zeros elsewhere; and `lengths[b]` = min(1 + the last position of example b,
    L) (0 for an empty example).

    Each example's [L, D] block is zeroed right before its rows are written,
    while it is in cache: a separate fill of the whole output first (21 MB
    for B = 4096, L = 20, D = 64) wrote every byte to memory twice."""
    num_examples = row_splits.shape[0] - 1
    length = out.shape[1]
    dim = table.shape[1]
    zero = np.float32(0.0)
    quantize = quant.shape[0] != 0
    for b in numba.prange(num_examples):
        block = out[b]
        for p in range(length):
            for j in range(dim):
                block[p, j] = zero
        top = 0
        for k in range(row_splits[b], row_splits[b + 1]):
            p = positions[k]
            if p + 1 > top:
                top = p + 1
            if p < length:
                _ahead(table, ids, k)
                row = table[ids[k]]
                if quantize:
                    for j in range(dim):
                        block[p, j] = quantized(row[j], quant[0], quant[1], quant[2])
                else:
                    for j in range(dim):
                        block[p, j] = row[j]
        lengths[b] = min(top, length)
