"""Table-batched kernels for small steps: every feature's lookup in one call, every table's sums in one.

At small batches (the migration guide's program: B = 64, three features on
40-row tables) a step is Python around tiny kernels: each numba call costs
~2.5 us to dispatch, and the per-feature path makes a dozen of them, with
their allocations, thread-count switches and coefficient passes. FBGEMM's
table-batched embeddings avoid this by handing every table and feature of a
step to one operator; these kernels do the same for steps too small for a
parallel launch (below `threads.SERIAL_WORK`, where the per-feature path
runs on the calling thread anyway):

- `lookup_all`: the pooled (sum, mean, sqrtn, weighted or not, safe or not)
  and sequence lookups of every feature, into one flat output, prefetching
  rows ahead as `forward.py` does (a small step over large tables, Criteo's
  26 at B = 256: 0.36 -> 0.23 ms);
- `sum_all`: every feature's gradient turned into entries and summed to one
  gradient per touched row of each table, in one pass: through the table's
  slot map when it is small, else through a hash of the step's ids, which
  stays in cache where the map's slots would miss (the same 26 tables:
  0.24 -> 0.15 ms);
- `sum_entries`: every table's entries (`FastKernels.sum_tables`' input)
  summed in one call, for a process whose numba has one thread (a
  distributed rank's owner: 26 tables' sums, ~25 us of Python each);
- `first_not_finite`: which of the step's gradients holds inf or NaN;
- `ids_in_range`: every feature's dense ids checked against its range.

Each feature's arrays are concatenated into flat arrays with offsets (one
dispatch, one type signature whatever the features). The arithmetic is the
per-feature kernels', in the same order: coefficients in float64 as
`coefficients.py` (the bits of `lookup.pooled_coefficients`), running sums
in float32 term after term in entry order, a table's entries feature after
feature (`lookup.sum_duplicates`'s order). All serial, on the calling thread.
"""

from __future__ import annotations

import numba
import numpy as np

from . import disk_cache  # noqa: F401  (before any cache=True kernel: numba caches them outside the package)
from .forward import AHEAD_ROWS, quantized
from .prefetch import prefetch_row

__all__ = [
    "lookup_all",
    "sum_all",
    "sum_entries",
    "DIRECT_ROWS",
    "first_not_finite",
    "ids_in_range",
    "SUM",
    "MEAN",
    "SQRTN",
]

SUM, MEAN, SQRTN = 0, 1, 2  # a pooled feature's combiner, in `layout[f, MODE]`

# The columns of `layout` (int64 [F, COLUMNS]), one row per feature: the index of its table, its combiner,
# its max_sequence_length (0: pooled), safe (0 / 1), its number of ids N and of examples B, and whether
# its weights and positions are in the flat `weights` / `positions` (0 / 1; else none, and each id's
# index in its row).
TABLE, MODE, LENGTH, SAFE, IDS, EXAMPLES, WEIGHTED, POSITIONED = range(8)
COLUMNS = 8


@numba.njit
def _offsets(layout, dims):
    """Where each feature starts in the flat arrays: (voff [F + 1] ids, soff [F + 1] row splits,
    woff [F] weights or -1, poff [F] positions or -1, ooff [F + 1] activations, loff [F + 1] lengths)."""
    features = layout.shape[0]
    voff = np.zeros(features + 1, np.int64)
    soff = np.zeros(features + 1, np.int64)
    woff = np.full(features, -1, np.int64)
    poff = np.full(features, -1, np.int64)
    ooff = np.zeros(features + 1, np.int64)
    loff = np.zeros(features + 1, np.int64)
    nw = 0
    npos = 0
    for f in range(features):
        n = layout[f, IDS]
        b = layout[f, EXAMPLES]
        length = layout[f, LENGTH]
        voff[f + 1] = voff[f] + n
        soff[f + 1] = soff[f] + b + 1
        if layout[f, WEIGHTED]:
            woff[f] = nw
            nw += n
        if layout[f, POSITIONED]:
            poff[f] = npos
            npos += n
        ooff[f + 1] = ooff[f] + b * max(length, 1) * dims[layout[f, TABLE]]
        loff[f + 1] = loff[f] + (b if length > 0 else 0)
    return voff, soff, woff, poff, ooff, loff


@numba.njit
def _scales(weights, w0, weighted, splits, s0, examples, mode, prune):
    """float64 [B]: each example's 1 (sum), 1 / sum w (mean) or 1 / sqrt(sum w^2) (sqrtn), 0 when that sum
    is 0; the sums in float64, in entry order, pruned entries left out (as `coefficients.py`).

    Called once per feature: helpers that take arrays must stay out of the per-entry loops (numba counts
    the references of every array argument of a call, two atomic operations each)."""
    scales = np.ones(examples, np.float64)
    if mode == SUM:
        return scales
    for b in range(examples):
        total = 0.0
        for k in range(splits[s0 + b], splits[s0 + b + 1]):
            w = np.float64(weights[w0 + k]) if weighted else 1.0
            if prune and not w > 0:
                continue
            total += w if mode == MEAN else w * w
        denominator = total if mode == MEAN else np.sqrt(total)
        scales[b] = 1.0 / denominator if denominator != 0 else 0.0
    return scales


@numba.njit(inline="always")
def _value(table, i, j, quantize, lower, upper, quantum):
    """`table[i, j]`, through `forward.quantized` when `quantize`."""
    if quantize:
        return quantized(table[i, j], lower, upper, quantum)
    return table[i, j]


@numba.njit(cache=True, nogil=True)
def lookup_all(tables, dims, quant, layout, values, splits, weights, positions, out, seq_lengths):
    """Every feature's activations into `out` (flat float32), feature after feature ([B, D] pooled,
    [B, L, D] for a sequence feature), and each sequence feature's capped lengths into `seq_lengths`
    ([B]), feature after feature. The caller allocates both (numba would box each array it returns).

    Feature f (`layout[f]`) reads table `tables[layout[f, TABLE]]` (`dims[t]` wide); its ids, row
    splits (local: from 0), weights and positions are the next ones of the flat arrays (`_offsets`).
    Table t is quantized when `quant[t]` (float32 lower, upper, quantum) has a quantum other than 0:
    its values are read through `forward.quantized`."""
    voff, soff, woff, poff, ooff, loff = _offsets(layout, dims)
    table_of = layout[:, TABLE]
    modes = layout[:, MODE]
    lengths = layout[:, LENGTH]
    safe = layout[:, SAFE]
    zero = np.float32(0.0)
    for f in range(table_of.shape[0]):
        table = tables[table_of[f]]
        dim = table.shape[1]
        lower, upper, quantum = quant[table_of[f], 0], quant[table_of[f], 1], quant[table_of[f], 2]
        quantize = quantum != 0
        v0 = voff[f]
        s0 = soff[f]
        examples = soff[f + 1] - s0 - 1
        o0 = ooff[f]
        length = lengths[f]
        n_ids = voff[f + 1] - v0
        if length > 0:  # a sequence feature
            for x in range(o0, o0 + examples * length * dim):
                out[x] = zero
            p0 = poff[f]
            for b in range(examples):
                lo = splits[s0 + b]
                top = 0
                for k in range(lo, splits[s0 + b + 1]):
                    p = positions[p0 + k] if p0 >= 0 else k - lo
                    if p + 1 > top:
                        top = p + 1
                    if p < length:
                        if k + AHEAD_ROWS < n_ids:
                            prefetch_row(table, values[v0 + k + AHEAD_ROWS])
                        i = values[v0 + k]
                        base = o0 + (b * length + p) * dim
                        for j in range(dim):
                            out[base + j] = _value(table, i, j, quantize, lower, upper, quantum)
                seq_lengths[loff[f] + b] = min(top, length)
            continue
        mode = modes[f]
        weighted = woff[f] >= 0
        w0 = woff[f] if weighted else 0
        prune = safe[f] != 0 and mode != SUM
        plain = mode == SUM and not weighted  # every coefficient 1: no multiply (it would change no value)
        scales = _scales(weights, w0, weighted, splits, s0, examples, mode, prune)
        for b in range(examples):
            scale = scales[b]
            base = o0 + b * dim
            first = True
            for k in range(splits[s0 + b], splits[s0 + b + 1]):
                w = np.float64(weights[w0 + k]) if weighted else 1.0
                if prune and not w > 0:
                    continue
                if k + AHEAD_ROWS < n_ids:  # a few rows in flight, not one (`forward.py`)
                    prefetch_row(table, values[v0 + k + AHEAD_ROWS])
                i = values[v0 + k]  # rows read as table[i, j]: a view per row would count references
                if plain:
                    if first:
                        for j in range(dim):
                            out[base + j] = _value(table, i, j, quantize, lower, upper, quantum)
                    else:
                        for j in range(dim):
                            out[base + j] += _value(table, i, j, quantize, lower, upper, quantum)
                else:
                    c = np.float32(scale * w)
                    if first:
                        for j in range(dim):
                            out[base + j] = c * _value(table, i, j, quantize, lower, upper, quantum)
                    else:
                        for j in range(dim):
                            out[base + j] += c * _value(table, i, j, quantize, lower, upper, quantum)
                first = False
            if first:  # no kept entry
                for j in range(dim):
                    out[base + j] = zero


@numba.njit
def _entries(f, modes, lengths, safe, values, voff, splits, soff, weights, woff, positions, poff, dim, ids, src,
             coef):  # fmt: skip
    """Feature f's kept entries into `ids`, `src` (the element where its gradient row starts, relative to
    the feature's gradient) and `coef`; returns their count. Once per feature (see `_scales`)."""
    v0 = voff[f]
    s0 = soff[f]
    examples = soff[f + 1] - s0 - 1
    length = lengths[f]
    n = 0
    if length > 0:  # a sequence feature: the id at position p < L gets grad[b, p]
        p0 = poff[f]
        for b in range(examples):
            lo = splits[s0 + b]
            for k in range(lo, splits[s0 + b + 1]):
                p = positions[p0 + k] if p0 >= 0 else k - lo
                if p < length:
                    ids[n] = values[v0 + k]
                    src[n] = (b * length + p) * dim
                    coef[n] = np.float32(1.0)
                    n += 1
        return n
    mode = modes[f]
    weighted = woff[f] >= 0
    w0 = woff[f] if weighted else 0
    prune = safe[f] != 0 and mode != SUM
    scales = _scales(weights, w0, weighted, splits, s0, examples, mode, prune)
    for b in range(examples):
        for k in range(splits[s0 + b], splits[s0 + b + 1]):
            w = np.float64(weights[w0 + k]) if weighted else 1.0
            if prune and not w > 0:
                continue
            ids[n] = values[v0 + k]
            src[n] = b * dim
            coef[n] = np.float32(scales[b] * w)
            n += 1
    return n


DIRECT_ROWS = 1 << 16
"""`sum_all` sums a table of at most this many rows through its slot map (256 KB, in cache), a larger one
through a hash of the step's ids (`_hash_bits`)."""
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / the golden ratio: Fibonacci hashing's multiplier


@numba.njit(inline="always")
def _hash_bits(capacity, rows, direct_rows):
    """log2 of a table's hash buckets in `sum_all`, or 0 for its slot map (`rows` <= `direct_rows`).

    The slot map has a slot per row of the table: for a table of millions of rows each entry's slot is
    a cache miss (a small step touches a few hundred ids scattered over megabytes of map), measured at
    a third of a small step's summing pass. A hash of the step's ids (a power of two >= 2 x `capacity`
    buckets, the table's entries: a bound on its distinct ids) stays in cache."""
    if capacity == 0 or rows <= direct_rows:
        return 0
    bits = 1
    while (1 << bits) < 2 * capacity:
        bits += 1
    return bits


@numba.njit(inline="always")
def _first_bucket(i, bits):
    """Id i's first bucket of 2^bits: the top bits of i x `_GOLDEN` (Fibonacci hashing)."""
    return np.int64((np.uint64(i) * _GOLDEN) >> np.uint64(64 - bits))


@numba.njit(cache=True, nogil=True)
def sum_all(dims, slot_map, moff, layout, values, splits, weights, positions, grads, given, check, direct_rows):
    """Every feature's gradient as entries, summed per table to one row per touched id, in one pass.

    Feature f (`layout[f]`, its arrays as `lookup_all` reads them) has a gradient when `given[f]`: the
    next [B, D] or [B, L, D] of the flat `grads`. It adds to table t = `layout[f, TABLE]` (`dims[t]`
    wide). A row's slot comes from the id -> slot map `slot_map[moff[t] + id]` (-1 everywhere before,
    and again when this returns), or, for a table of more than `direct_rows` rows, from a hash of the
    step's ids (`_hash_bits`): the same slots either way. Entry k adds `coef[k] * grad row` (a multiply
    by 1 changes no value), the first entry of a row writes it. Returns (unique, summed, ustart, gstart,
    counts): table t's touched ids `unique[ustart[t]:ustart[t] + counts[t]]`, their sums the rows of
    `summed[gstart[t]:]` ([counts[t], dims[t]], flat), in first-seen order.

    With `check`, every given gradient is first checked whole for inf or NaN: if one holds any, nothing
    is summed and `counts` is [-1 - f] for the first such feature f."""
    voff, soff, woff, poff, ooff, _ = _offsets(layout, dims)
    table_of = layout[:, TABLE]
    modes = layout[:, MODE]
    lengths = layout[:, LENGTH]
    safe = layout[:, SAFE]
    tables = dims.shape[0]
    features = table_of.shape[0]
    goff = np.zeros(features + 1, np.int64)  # each feature's gradient in `grads`: its activation's size
    for f in range(features):
        goff[f + 1] = goff[f] + (ooff[f + 1] - ooff[f] if given[f] else 0)
    if check:
        bad = first_not_finite(grads.view(np.int32), goff)  # goff: a feature without gradient is empty
        if bad >= 0:
            nothing = np.zeros(0, np.int64)
            return nothing, np.zeros(0, np.float32), nothing, nothing, np.full(1, -1 - bad, np.int64)
    capacity = np.zeros(tables, np.int64)  # entries per table: a bound on its distinct ids
    most = 0
    for f in range(features):
        if given[f]:
            capacity[table_of[f]] += voff[f + 1] - voff[f]
            most = max(most, voff[f + 1] - voff[f])
    ustart = np.zeros(tables + 1, np.int64)
    gstart = np.zeros(tables + 1, np.int64)
    hstart = np.zeros(tables + 1, np.int64)  # each hashed table's buckets in `keys` / `slots` (none: direct)
    hbits = np.zeros(tables, np.int64)  # log2 of each table's buckets, 0 for its slot map
    for t in range(tables):
        ustart[t + 1] = ustart[t] + capacity[t]
        gstart[t + 1] = gstart[t] + capacity[t] * dims[t]
        rows = (moff[t + 1] if t + 1 < tables else slot_map.shape[0]) - moff[t]
        hbits[t] = _hash_bits(capacity[t], rows, direct_rows)
        hstart[t + 1] = hstart[t] + (1 << hbits[t] if hbits[t] else 0)
    unique = np.empty(ustart[tables], np.int64)
    summed = np.empty(gstart[tables], np.float32)
    counts = np.zeros(tables, np.int64)
    keys = np.full(hstart[tables], -1, np.int64)
    slots = np.empty(hstart[tables], np.int64)
    ids = np.empty(most, np.int64)
    src = np.empty(most, np.int64)
    coef = np.empty(most, np.float32)
    for f in range(features):
        g0 = goff[f]
        if not given[f]:
            continue
        t = table_of[f]
        dim = dims[t]
        m0 = moff[t]
        h0 = hstart[t]
        buckets = hstart[t + 1] - h0
        bits = hbits[t]
        u0 = ustart[t]
        s0 = gstart[t]
        count = counts[t]
        n = _entries(f, modes, lengths, safe, values, voff, splits, soff, weights, woff, positions, poff, dim, ids,
                     src, coef)  # fmt: skip
        for e in range(n):
            i = ids[e]
            g = g0 + src[e]
            c = coef[e]
            if buckets:
                h = h0 + _first_bucket(i, bits)
                while keys[h] >= 0 and keys[h] != i:  # linear probing; half the buckets at most are taken
                    h = h + 1 if h + 1 < h0 + buckets else h0
                s = slots[h] if keys[h] >= 0 else -1
            else:
                h = m0 + i
                s = slot_map[h]
            if s < 0:
                s = count
                if buckets:
                    keys[h] = i
                    slots[h] = s
                else:
                    slot_map[h] = s
                count += 1
                unique[u0 + s] = i
                base = s0 + s * dim
                for j in range(dim):
                    summed[base + j] = grads[g + j] * c
            else:
                base = s0 + s * dim
                for j in range(dim):
                    summed[base + j] += grads[g + j] * c
        counts[t] = count
    for t in range(tables):  # the map clean again, for the next step
        if hstart[t + 1] == hstart[t]:
            for s in range(ustart[t], ustart[t] + counts[t]):
                slot_map[moff[t] + unique[s]] = -1
    return unique, summed, ustart, gstart, counts


@numba.njit
def _sum_piece(ids, src, coef, grads, lo, hi, weighted, slot_map, epoch, unique, summed, dim, count):
    """One piece's entries `lo:hi` into its table's rows (see `sum_entries`); returns the table's new count.
    Rows are read and written as `array[i, j]`: a view per row would count references in a serial loop."""
    one = np.float32(1.0)
    for k in range(lo, hi):
        i = ids[k]
        r = src[k]
        f = coef[k] if weighted else one
        s = slot_map[i] - epoch
        if s < 0:
            s = count
            slot_map[i] = np.int32(epoch + count)
            count += 1
            unique[s] = i
            for j in range(dim):
                summed[s, j] = grads[r, j] * f
        else:
            for j in range(dim):
                summed[s, j] += grads[r, j] * f
    return count


@numba.njit(cache=True, nogil=True)
def sum_entries(ids, src, coef, bounds, weighted, table_of, grads, slot_maps, epochs, uniques, sums, counts):
    """Pieces of entries (a feature's, as `FastKernels.sum_tables` takes them) summed into their tables'
    rows, piece after piece, each in entry order: `owner.sum_owned`'s sums with one partition, the same
    bits.

    Piece p's entries are `bounds[p]:bounds[p + 1]` of `ids` (its table's rows), `src` (rows of
    `grads[p]`) and `coef` (read when `weighted[p]`, else 1); it adds to table t = `table_of[p]`, through
    the id -> slot map `slot_maps[t]` with epoch `epochs[t]` (as `sum_owned`), into `uniques[t]` /
    `sums[t]`, which have room for every entry of the table; `counts[t]` (0 before) is its rows."""
    for p in range(table_of.shape[0]):
        t = table_of[p]
        g = grads[p]
        counts[t] = _sum_piece(ids, src, coef, g, bounds[p], bounds[p + 1], weighted[p], slot_maps[t], epochs[t],
                               uniques[t], sums[t], g.shape[1], counts[t])  # fmt: skip


_EXPONENT = np.int32(0x7F800000)


@numba.njit(cache=True, nogil=True)
def first_not_finite(bits, offsets):
    """The first f whose float32 values `bits[offsets[f]:offsets[f + 1]]` (an int32 view) hold inf or NaN,
    or -1 (an exponent with every bit set, as `kernels._no_full_exponent`)."""
    for f in range(offsets.shape[0] - 1):
        smallest = _EXPONENT
        for k in range(offsets[f], offsets[f + 1]):
            v = (bits[k] & _EXPONENT) ^ _EXPONENT
            smallest = v if v < smallest else smallest
        if smallest == 0:
            return f
    return -1


@numba.njit(cache=True, nogil=True)
def ids_in_range(values, offsets, lowest, highest):
    """True when every id of feature f, `values[offsets[f]:offsets[f + 1]]`, is in [lowest[f], highest[f]).

    No early exit in the inner loop, so LLVM vectorizes it (as `kernels._checked_ids`)."""
    for f in range(offsets.shape[0] - 1):
        low = lowest[f]
        high = highest[f]
        bad = False
        for k in range(offsets[f], offsets[f + 1]):
            v = values[k]
            bad |= (v < low) | (v >= high)
        if bad:
            return False
    return True
