"""The random-row bandwidth bound, measured on this machine in the same run.

A step must at least read each distinct row once (the lookup) and read and
write it once with its optimizer slots (the update). Two minimal numba
kernels do exactly that on arrays the size of the table, with a step's
distinct ids in random order, on every thread:

- `gather`: read U rows of D floats (summed into a per-thread sink);
- `rmw`: read-modify-write U rows of the table and of each slot;
- `rmw_all` (non-lazy Adam, whose step moves every row): read-modify-write
  every row of the table and of each slot, in order.

The kernels run over the same sequence of batches as the timed rounds:
repeat r uses the distinct ids of the batch round r uses (after the batches
the implementations saw before the first round), gather then update, so
the rows are as cache-warm as in a step: a small working set (Zipf ids,
D=16) is not timed on rows the previous repeat just brought in unless the
step also reuses them.

bound(step) = median(gather) + median(update): no implementation can do
the step's memory traffic faster with code this simple. Bytes per second
are reported too. For comparison only (not the bound):

- `same_ids`: the previous definition, one batch's ids repeated (warm);
- `prefetch_gather`: the gather with software prefetch (`prefetch_row`,
  PREFETCH_AHEAD rows ahead per thread): how much lower a gather can go.
"""

from __future__ import annotations

import time
from typing import Dict, List, Sequence

import numpy as np

from tpu_embedding_shim.engine import aligned

try:
    import numba
except ImportError:  # the bound needs numba; without it the report says "not measured"
    numba = None

__all__ = ["measure_bound", "available", "PREFETCH_AHEAD", "SAME_IDS_REPEATS"]

PREFETCH_AHEAD = 16  # rows ahead, per thread
SAME_IDS_REPEATS = 7


def available() -> bool:
    return numba is not None


_gather_prefetch = None

if numba is not None:

    @numba.njit(parallel=True, cache=True)
    def _gather(table, ids, sink):
        parts = sink.shape[0]
        n = ids.shape[0]
        dim = table.shape[1]
        for p in numba.prange(parts):
            for k in range(p, n, parts):
                row = table[ids[k]]
                for j in range(dim):
                    sink[p, j] += row[j]

    @numba.njit(parallel=True, cache=True)
    def _rmw(arrays, ids):
        n = ids.shape[0]
        dim = arrays.shape[2]
        for s in numba.prange(n):
            i = ids[s]
            for a in range(arrays.shape[0]):
                row = arrays[a, i]
                for j in range(dim):
                    row[j] = row[j] * np.float32(0.5) + np.float32(1.0)

    @numba.njit(parallel=True, cache=True)
    def _rmw_all(arrays):
        dim = arrays.shape[2]
        for i in numba.prange(arrays.shape[1]):
            for a in range(arrays.shape[0]):
                row = arrays[a, i]
                for j in range(dim):
                    row[j] = row[j] * np.float32(0.5) + np.float32(1.0)

    try:
        from tpu_embedding_shim.engine.fast.prefetch import prefetch_row
    except Exception:  # noqa: BLE001 - the prefetching gather is extra information only
        prefetch_row = None

    if prefetch_row is not None:

        @numba.njit(parallel=True, cache=True)
        def _gather_prefetch(table, ids, sink, ahead):
            parts = sink.shape[0]
            n = ids.shape[0]
            dim = table.shape[1]
            for p in numba.prange(parts):
                for k in range(p, n, parts):
                    later = k + ahead * parts  # this thread's row `ahead` rows from now
                    if later < n:
                        prefetch_row(table, ids[later])
                    row = table[ids[k]]
                    for j in range(dim):
                        sink[p, j] += row[j]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_bound(vocab: List[int], dim: int, steps: Sequence[Sequence[np.ndarray]], num_slots: int,
                  update: str = "rows", before: Sequence[Sequence[np.ndarray]] = ()) -> Dict:
    """The bound for a sequence of steps, summed over the tables.

    Args:
      vocab: rows per table.
      steps: `steps[r][t]`: the distinct ids of table t in the batch timed round r uses.
      num_slots: optimizer slot arrays per table.
      update: 'rows' (read-modify-write the distinct rows), 'table' (every row: non-lazy Adam) or
        'none' (forward only: the bound is the gather).
      before: the same, for the batches the implementations ran before the first timed round (the
        agreement check); run untimed first, so the caches start as the step's did.

    Returns:
      {'gather_ms', 'rmw_ms', 'bound_ms', 'gather_gbs', 'rmw_gbs', 'threads', 'update', 'repeats',
      'unique_ids' (mean per step), 'same_ids': {'gather_ms', 'rmw_ms', 'bound_ms'},
      'prefetch_gather_ms', 'prefetch_gather_gbs', 'prefetch_ahead'} (the prefetch keys None when
      `prefetch_row` can't be imported).
    """
    if update not in ("rows", "table", "none"):
        raise ValueError(f"update must be 'rows', 'table' or 'none', not {update!r}")
    threads = numba.get_num_threads()
    rng = np.random.default_rng(7)
    repeats = len(steps)
    gather_s = rmw_s = prefetch_s = same_gather_s = same_rmw_s = 0.0
    gather_bytes = rmw_bytes = 0
    for t, v in enumerate(vocab):
        # Touched (pages resident) and cache-line aligned, like the engine's tables (engine/aligned.py):
        # an unaligned 256-byte row spans 5 cache lines instead of 4.
        arrays = aligned.full((1 + num_slots, v, dim), 1.0, np.float32)
        sink = np.zeros((threads, dim), np.float32)
        # Random order within a batch, one permutation per batch (the same one every time it comes back).
        orders: Dict[int, np.ndarray] = {}

        def order(ids: np.ndarray) -> np.ndarray:
            if id(ids) not in orders:
                orders[id(ids)] = rng.permutation(ids).astype(np.int64)
            return orders[id(ids)]

        sequence = [order(step[t]) for step in steps]
        warm = [order(step[t]) for step in before]

        def do_update(ids: np.ndarray) -> None:
            if update == "rows":
                _rmw(arrays, ids)
            elif update == "table":
                _rmw_all(arrays)

        # Compile (or load from the cache) without touching the table.
        empty = sequence[0][:0]
        _gather(arrays[0], empty, sink)
        _rmw(arrays, empty)
        if update == "table":
            _rmw_all(np.ones((1 + num_slots, 1, dim), np.float32))
        if _gather_prefetch is not None:
            _gather_prefetch(arrays[0], empty, sink, PREFETCH_AHEAD)

        # The bound: the timed rounds' sequence, gather then update, after the batches seen before.
        for ids in warm:
            _gather(arrays[0], ids, sink)
            do_update(ids)
        gathers, updates, prefetches = [], [], []
        for ids in sequence:
            gathers.append(_timed(lambda: _gather(arrays[0], ids, sink)))
            updates.append(_timed(lambda: do_update(ids)))
        # The prefetching gather, over the same sequence (the update still runs, untimed).
        if _gather_prefetch is not None:
            for ids in sequence:
                prefetches.append(_timed(lambda: _gather_prefetch(arrays[0], ids, sink, PREFETCH_AHEAD)))
                do_update(ids)
        gather_s += float(np.median(gathers))
        prefetch_s += float(np.median(prefetches)) if prefetches else 0.0
        if update != "none":
            rmw_s += float(np.median(updates))

        # The previous definition: the first timed batch's ids, repeated (every row warm after the first).
        ids = sequence[0]
        same_gather_s += float(np.median([_timed(lambda: _gather(arrays[0], ids, sink))
                                          for _ in range(SAME_IDS_REPEATS)]))
        if update != "none":
            same_rmw_s += float(np.median([_timed(lambda: do_update(ids)) for _ in range(SAME_IDS_REPEATS)]))

        mean_rows = float(np.mean([s.shape[0] for s in sequence]))
        gather_bytes += mean_rows * dim * 4
        if update == "rows":
            rmw_bytes += 2 * mean_rows * dim * 4 * (1 + num_slots)
        elif update == "table":
            rmw_bytes += 2 * v * dim * 4 * (1 + num_slots)
        del arrays
    unique_ids = float(np.mean([sum(s.shape[0] for s in step) for step in steps]))
    have_prefetch = _gather_prefetch is not None
    return {
        "gather_ms": gather_s * 1e3, "rmw_ms": rmw_s * 1e3, "bound_ms": (gather_s + rmw_s) * 1e3,
        "gather_gbs": gather_bytes / gather_s / 1e9 if gather_s else 0.0,
        "rmw_gbs": rmw_bytes / rmw_s / 1e9 if rmw_s else 0.0,
        "threads": threads, "update": update, "repeats": repeats, "unique_ids": unique_ids,
        "same_ids": {"gather_ms": same_gather_s * 1e3, "rmw_ms": same_rmw_s * 1e3,
                     "bound_ms": (same_gather_s + same_rmw_s) * 1e3},
        "prefetch_gather_ms": prefetch_s * 1e3 if have_prefetch else None,
        "prefetch_gather_gbs": gather_bytes / prefetch_s / 1e9 if have_prefetch and prefetch_s else None,
        "prefetch_ahead": PREFETCH_AHEAD if have_prefetch else None,
    }
