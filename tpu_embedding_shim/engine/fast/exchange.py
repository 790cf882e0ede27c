"""The index work of the distributed exchange (`engine/distributed/exchange.py`), compiled: one pass each.

Integers only (no arithmetic on rows or gradients), so the results are the
ones of the numpy code they replace, element for element; that code stays
the fallback without numba. Serial kernels: each rank runs on one core.

- `bucket`: the entries of F features (laid end to end) ordered by (owner,
  feature), stable: a counting sort, two passes, where numpy sorts.
- `runs`: the runs of equal examples within each segment of a list of
  entries (the owner-pooled partial sums), one pass.
- `routes`: for every received entry of every feature at once, its
  feature-major place and the gradient row it reads.
- `requests`: a forward's requests: each table's distinct (owner, local
  row) pairs in the order they first occur, through an open-addressing hash
  table (numpy sorts), bucketed by (owner, table) as `bucket` does, and each
  entry's pair and its send position: three passes where numpy sorts twice.
- `fill`: a send buffer's rows gathered from every feature's source at
  once (numpy: one gather per feature), each times its coefficient when
  there is one: the float32 product numpy makes.
- `locate`: each id's owner rank and local row (`ownership.Ownership`), one
  pass where numpy searches, then subtracts through a gather.
- `sent_entries`: an owner-pooled bag's entries in send order, each with
  its local row, example and coefficient (numpy: three gathers and a stack).
"""

from __future__ import annotations

import numba
import numpy as np

from . import disk_cache  # noqa: F401  (before any cache=True kernel: numba caches them outside the package)
from .prefetch import AHEAD, prefetch_row

__all__ = ["bucket", "runs", "routes", "requests", "fill", "locate", "sent_entries"]


@numba.njit(cache=True, nogil=True)
def _bucket(owner, bases, order, counts):
    features = bases.shape[0] - 1
    for f in range(features):
        for k in range(bases[f], bases[f + 1]):
            counts[owner[k] * features + f] += 1
    position = np.empty(counts.shape[0], np.int64)
    total = 0
    for key in range(counts.shape[0]):
        position[key] = total
        total += counts[key]
    for f in range(features):
        for k in range(bases[f], bases[f + 1]):
            key = owner[k] * features + f
            order[position[key]] = k
            position[key] += 1


def bucket(owner: np.ndarray, bases: np.ndarray, world: int) -> tuple[np.ndarray, np.ndarray]:
    """(order int64 [n], counts int64 [W, F]): `order` = the stable argsort of `owner * F + feature`.

    Args:
      owner: int64 [n], the features' entries end to end: feature f's are `bases[f]:bases[f + 1]`.
      bases: int64 [F + 1].
      world: W (every owner is in [0, W)).
    """
    features = bases.shape[0] - 1
    order = np.empty(owner.shape[0], np.int64)
    counts = np.zeros(world * features, np.int64)
    _bucket(np.ascontiguousarray(owner, np.int64), np.ascontiguousarray(bases, np.int64), order, counts)
    return order, counts.reshape(world, features)


@numba.njit(cache=True, nogil=True)
def _runs(counts, examples, per_segment, group, first, lengths):
    n_runs = 0
    k = 0
    for s in range(counts.shape[0]):
        in_segment = 0
        for j in range(counts[s]):
            if j == 0 or examples[k] != examples[k - 1]:
                first[n_runs] = k
                if n_runs > 0:
                    lengths[n_runs - 1] = k - first[n_runs - 1]
                n_runs += 1
                in_segment += 1
            group[k] = in_segment - 1
            k += 1
        per_segment[s] = in_segment
    if n_runs > 0:
        lengths[n_runs - 1] = k - first[n_runs - 1]
    return n_runs


def runs(counts: np.ndarray, examples: np.ndarray) -> tuple[np.ndarray, ...]:
    """As `owner_pooling._groups`: (runs per segment, each entry's run within its segment, each run's
    first entry, each run's length), for the segments of `counts` (any shape, row-major) laid end to end."""
    n = examples.shape[0]
    per_segment = np.zeros(counts.size, np.int64)
    group = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    lengths = np.empty(n, np.int64)
    flat = np.ascontiguousarray(counts.reshape(-1), np.int64)
    total = _runs(flat, np.ascontiguousarray(examples, np.int64), per_segment, group, first, lengths)
    return per_segment.reshape(counts.shape), group, first[:total], lengths[:total]


@numba.njit(cache=True, nogil=True)
def _routes(entries, rows_got, group, local, coefs, rows, src, coef, bounds):
    world, features = entries.shape
    # where each feature's kept entries start (feature-major), and each (source, feature)'s gradient rows
    before = np.zeros((world, features), np.int64)
    for p in range(features):
        total = 0
        for s in range(world):
            before[s, p] = total
            total += rows_got[s, p]
        kept = 0
        for s in range(world):
            if rows_got[s, p] != 0:
                kept += entries[s, p]
        bounds[p + 1] = bounds[p] + kept
    fill = bounds[:-1].copy()
    k = 0
    for s in range(world):
        for p in range(features):
            if rows_got[s, p] == 0:  # no gradient from s for p: its entries get none
                k += entries[s, p]
                continue
            for _ in range(entries[s, p]):
                j = fill[p]
                rows[j] = local[k]
                src[j] = before[s, p] + group[k]
                coef[j] = coefs[k]
                fill[p] += 1
                k += 1


def routes(entries: np.ndarray, rows_got: np.ndarray, group: np.ndarray, local: np.ndarray, coefs: np.ndarray):
    """Every feature's received entries at once, feature-major (then source by source, each in entry order),
    those of a (source, feature) that sent gradient rows only.

    Args:
      entries: int64 [W, P], the entries received per (source, feature); they are laid out
        source-major in `group`, `local` and `coefs`.
      rows_got: int64 [W, P], the gradient rows received per (source, feature) (0: none).
      group: int64 [n], each entry's gradient row within its segment.
      local, coefs: per entry, its local row and float32 coefficient.

    Returns:
      (rows, src, coef, bounds): feature p's entries are `bounds[p]:bounds[p + 1]`, with their local rows,
      the index of their gradient row among feature p's received rows (source by source) and coefficients.
    """
    features = entries.shape[1]
    kept = int((entries * (rows_got != 0)).sum())
    rows, src = np.empty(kept, np.int64), np.empty(kept, np.int64)
    coef = np.empty(kept, np.float32)
    bounds = np.zeros(features + 1, np.int64)
    _routes(
        np.ascontiguousarray(entries, np.int64),
        np.ascontiguousarray(rows_got, np.int64),
        np.ascontiguousarray(group, np.int64),
        np.ascontiguousarray(local, np.int64),
        np.ascontiguousarray(coefs, np.float32),
        rows,
        src,
        coef,
        bounds,
    )
    return rows, src, coef, bounds


@numba.njit(cache=True, nogil=True)
def _requests(owner, local, bases, world, slots, keys, first, pair, counts, sizes, order, sent, at):
    golden = np.uint64(11400714819323198485)  # Fibonacci hashing: 2^64 / the golden ratio
    groups = bases.shape[0] - 1
    for t in range(groups):  # each group's distinct pairs, in the order they first occur
        lo, hi = bases[t], bases[t + 1]
        bits = 4
        while (1 << bits) < 2 * (hi - lo):
            bits += 1
        mask = (1 << bits) - 1
        shift = np.uint64(64 - bits)
        slots[: mask + 1] = -1
        count = 0
        for k in range(lo, hi):
            o = owner[k]
            key = local[k] * world + o
            h = np.int64((np.uint64(key) * golden) >> shift)
            while True:
                s = slots[h]
                if s < 0:
                    slots[h] = count
                    keys[h] = key
                    first[lo + count] = k
                    pair[k] = count
                    counts[o * groups + t] += 1
                    count += 1
                    break
                if keys[h] == key:
                    pair[k] = s
                    break
                h = (h + 1) & mask
        sizes[t] = count
    position = np.empty(counts.shape[0], np.int64)  # where each (owner, group) segment starts in send order
    total = 0
    for key in range(counts.shape[0]):
        position[key] = total
        total += counts[key]
    place = np.empty(total, np.int64)  # each pair's send position
    base = 0
    for t in range(groups):  # the pairs in send order, each segment in first-occurrence order
        lo = bases[t]
        for j in range(sizes[t]):
            k = first[lo + j]
            key = owner[k] * groups + t
            p = position[key]
            position[key] = p + 1
            order[p] = base + j
            sent[p] = local[k]
            place[base + j] = p
        for k in range(lo, bases[t + 1]):
            pair[k] += base
            at[k] = place[pair[k]]
        base += sizes[t]


def requests(owner: np.ndarray, local: np.ndarray, bases: np.ndarray, world: int) -> tuple[np.ndarray, ...]:
    """A forward's requests: per group t of entries (`bases[t]:bases[t + 1]`, a table's), its distinct
    (owner, local row) pairs in the order they first occur, laid end to end group after group, then
    ordered by (owner, group) keeping that order.

    Returns:
      (order, counts, sizes, local, pair, at), int64: send position p holds pair `order[p]` and asks for
      local row `local[p]`; `counts` [W, T] pairs per (owner, group); `sizes` [T] pairs per group; entry
      k is pair `pair[k]`, sent at position `at[k]`.
    """
    owner = np.ascontiguousarray(owner, np.int64)
    local = np.ascontiguousarray(local, np.int64)
    bases = np.ascontiguousarray(bases, np.int64)
    n, groups = owner.shape[0], bases.shape[0] - 1
    largest = int(np.diff(bases).max()) if groups else 0
    slots = np.empty(max(16, 1 << int(2 * largest - 1).bit_length()), np.int64)
    first, pair, at = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    counts, sizes = np.zeros(world * groups, np.int64), np.zeros(groups, np.int64)
    order, sent = np.empty(n, np.int64), np.empty(n, np.int64)
    _requests(owner, local, bases, world, slots, np.empty_like(slots), first, pair, counts, sizes, order, sent, at)
    total = int(sizes.sum())
    return order[:total], counts.reshape(world, groups), sizes, sent[:total], pair, at


@numba.njit(cache=True, nogil=True)
def fill(flat, sources, counts, dims, rows, coef, present):
    """Writes the rows of W x F segments (rank-major, feature-minor) into `flat`, one after another.

    Args:
      flat: float32 [n]: the buffer, segment (r, f) an [m, dims[f]] block where m is `counts[r, f]` for
        a `present` feature f and 0 for the others.
      sources: a tuple of F float32 [R_f, dims[f]] arrays (plain, C-contiguous, writable: one type).
      counts: int64 [W, F]: the entries of `rows` per segment, laid out the same way.
      rows: int64: each entry's row in its feature's source.
      coef: float32, one per entry of `rows`, or empty (every coefficient 1: the row as it is).
      present: bool [F]: False: the feature's entries are skipped (no block in `flat`).
    """
    world, features = counts.shape
    weighted = coef.shape[0] != 0
    k = 0
    o = 0
    for r in range(world):
        for f in range(features):
            n = counts[r, f]
            if not present[f]:
                k += n
                continue
            source = sources[f]
            dim = dims[f]
            last = k + n
            for _ in range(n):
                if k + AHEAD < last:
                    prefetch_row(source, rows[k + AHEAD])
                row = source[rows[k]]
                if weighted:
                    c = coef[k]
                    for j in range(dim):
                        flat[o + j] = row[j] * c
                else:
                    for j in range(dim):
                        flat[o + j] = row[j]
                o += dim
                k += 1


_LINEAR_RANKS = 16  # `locate` counts up to this many ranks' starts (random ids: 0.03 ms for 40,960 ids at W = 2,
# against 0.18 for a binary search, whose jumps the ids send either way, and numpy's searchsorted 0.4)


@numba.njit(cache=True, nogil=True)
def _locate(ids, starts, world, owner, local):
    if starts.shape[0] == 0:  # mod: rank id % W, local row id // W
        for k in range(ids.shape[0]):
            i = ids[k]
            owner[k] = i % world
            local[k] = i // world
        return
    for k in range(ids.shape[0]):  # div: the last rank whose first id is <= i
        i = ids[k]
        if world <= _LINEAR_RANKS:  # count the later ranks' starts at or below i: no branch to mispredict
            base = 0
            for r in range(1, world):
                base += starts[r] <= i
        else:  # a binary search
            base, n = 0, world
            while n > 1:
                half = n >> 1
                base = base + half if starts[base + half] <= i else base
                n -= half
        owner[k] = base
        local[k] = i - starts[base]


def locate(ids: np.ndarray, starts: np.ndarray, world: int) -> tuple[np.ndarray, np.ndarray]:
    """(owner int64 [n], local row int64 [n]) of each id (int64, in range), as `Ownership.locate`.

    Args:
      ids: int64 [n], each in [0, V).
      starts: int64 [W + 1], each rank's first id then V (`div`), or empty (`mod`: id % W, id // W).
      world: W.
    """
    ids = np.ascontiguousarray(ids, np.int64)
    owner, local = np.empty(ids.shape[0], np.int64), np.empty(ids.shape[0], np.int64)
    _locate(ids, np.ascontiguousarray(starts, np.int64), world, owner, local)
    return owner, local


@numba.njit(cache=True, nogil=True)
def _sent_entries(order, local, example, coef, pairs, coefs):
    weighted = coef.shape[0] != 0
    one = np.float32(1.0)
    for p in range(order.shape[0]):
        k = order[p]
        pairs[2 * p] = local[p]
        pairs[2 * p + 1] = example[k]
        coefs[p] = coef[k] if weighted else one


def sent_entries(order: np.ndarray, local: np.ndarray, example: np.ndarray, coef: np.ndarray):
    """(pairs int64 [2n], coefs float32 [n]): send position p's local row and example, `local[p]`,
    `example[order[p]]`, one after the other, and its coefficient `coef[order[p]]` (empty `coef`: 1).

    Args:
      order: int64 [n], an `Outbox`'s order; `local` int64 [n], its local rows (in send order);
      example: int64 [n], each entry's example (entry order); coef: float32 [n] or empty.
    """
    n = order.shape[0]
    pairs, coefs = np.empty(2 * n, np.int64), np.empty(n, np.float32)
    _sent_entries(
        np.ascontiguousarray(order, np.int64),
        np.ascontiguousarray(local, np.int64),
        np.ascontiguousarray(example, np.int64),
        np.ascontiguousarray(coef, np.float32),
        pairs,
        coefs,
    )
    return pairs, coefs
