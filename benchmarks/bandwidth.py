"""The random-row bandwidth bound, measured on this machine in the same run.

A step must at least read each distinct row once (the lookup) and read and
write it once with its optimizer slots (the update). Two minimal numba
kernels do exactly that on arrays the size of the tables, with a step's
distinct ids in random order, on every thread:

- `gather`: read U rows of D floats (summed into a per-thread sink);
- `rmw`: read-modify-write U rows of the table and of each slot;
- `rmw_all` (non-lazy Adam, whose step moves every row): read-modify-write
  every row of the table and of each slot, in order.

`Bound` holds every table's arrays at once, so the harness can alternate
its repeats with the engine's steps in one process: this machine's memory
speed drifts by up to 50% from one second to the next, and a bound timed
in another block than the steps it is compared with sees another machine.
One repeat is one step's traffic: the gather over every table, then the
update over every table (a multi-table workload such as criteo26 is timed
all tables per repeat, as a step runs them, not one table at a time).

The repeats run over the same sequence of batches as the timed rounds:
repeat r uses the distinct ids of the batch round r uses (after an untimed
pass over the batches the implementations saw before the first round), so
the rows are as cache-warm as in a step: a small working set (Zipf ids,
D=16) is not timed on rows the previous repeat just brought in unless the
step also reuses them.

bound(step) = median(gather) + median(update), each summed over the tables:
no implementation can do the step's memory traffic faster with code this
simple. Bytes per second are reported too. For comparison only (not the
bound), timed once after the repeats:

- `same_ids`: the previous definition, one batch's ids repeated (warm);
- `prefetch_gather`: the gather with software prefetch (`prefetch_row`,
  PREFETCH_AHEAD rows ahead per thread): how much lower a gather can go.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from tpu_embedding_shim.engine import aligned

try:
    import numba
except ImportError:  # the bound needs numba; without it the report says "not measured"
    numba = None

__all__ = ["Bound", "measure_bound", "available", "PREFETCH_AHEAD", "SAME_IDS_REPEATS"]

PREFETCH_AHEAD = 16  # rows ahead, per thread
SAME_IDS_REPEATS = 7
UPDATES = ("rows", "table", "none")


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
    except Exception:
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


class Bound:
    """Every table's bound arrays, timed one repeat (one step's distinct ids, all tables) at a time.

    Args:
      vocab: rows per table.
      num_slots: optimizer slot arrays per table.
      update: 'rows' (read-modify-write the distinct rows), 'table' (every row: non-lazy Adam) or
        'none' (forward only: the bound is the gather).

    A step is `step[t]`: the distinct ids of table t in one batch. Each batch gets one random order
    (the same one every time it comes back), keyed by the arrays' identity.
    """

    def __init__(self, vocab: list[int], dim: int, num_slots: int, update: str = "rows"):
        if update not in UPDATES:
            raise ValueError(f"update must be 'rows', 'table' or 'none', not {update!r}")
        self.vocab, self.dim, self.num_slots, self.update = list(vocab), dim, num_slots, update
        self.threads = numba.get_num_threads()
        # Touched (pages resident) and cache-line aligned, like the engine's tables (engine/aligned.py):
        # an unaligned 256-byte row spans 5 cache lines instead of 4.
        self.arrays = [aligned.full((1 + num_slots, v, dim), 1.0, np.float32) for v in self.vocab]
        self.sink = np.zeros((self.threads, dim), np.float32)
        self.gathers: list[float] = []  # seconds per timed repeat, summed over the tables
        self.updates: list[float] = []
        self.rows: list[int] = []  # distinct ids per timed repeat, summed over the tables
        self._rng = np.random.default_rng(7)
        self._orders: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # Compile (or load from the cache) without touching the tables.
        empty = np.zeros(0, np.int64)
        _gather(self.arrays[0][0], empty, self.sink)
        _rmw(self.arrays[0], empty)
        if update == "table":
            _rmw_all(np.ones((1 + num_slots, 1, dim), np.float32))
        if _gather_prefetch is not None:
            _gather_prefetch(self.arrays[0][0], empty, self.sink, PREFETCH_AHEAD)

    def _order(self, ids: np.ndarray) -> np.ndarray:
        """This batch's ids in its random order (kept with the ids, so an id() is never reused)."""
        if id(ids) not in self._orders:
            self._orders[id(ids)] = (ids, self._rng.permutation(ids).astype(np.int64))
        return self._orders[id(ids)][1]

    def _gather_all(self, step: Sequence[np.ndarray]) -> None:
        for arrays, ids in zip(self.arrays, step):
            _gather(arrays[0], self._order(ids), self.sink)

    def _update_all(self, step: Sequence[np.ndarray]) -> None:
        for arrays, ids in zip(self.arrays, step):
            if self.update == "rows":
                _rmw(arrays, self._order(ids))
            elif self.update == "table":
                _rmw_all(arrays)

    def warm(self, steps: Sequence[Sequence[np.ndarray]]) -> None:
        """Untimed gather and update over the batches seen before the first timed round, so the caches start as
        the step's did."""
        for step in steps:
            self._gather_all(step)
            self._update_all(step)

    def repeat(self, step: Sequence[np.ndarray]) -> tuple[float, float]:
        """Times one repeat: the gather over every table, then the update; returns (gather s, update s)."""
        gather = _timed(lambda: self._gather_all(step))
        update = _timed(lambda: self._update_all(step)) if self.update != "none" else 0.0
        self.gathers.append(gather)
        self.updates.append(update)
        self.rows.append(sum(ids.shape[0] for ids in step))
        return gather, update

    def compare(self, steps: Sequence[Sequence[np.ndarray]]) -> None:
        """The comparison figures: the prefetching gather over `steps` (the update still runs, untimed), then
        the first step's ids repeated (the old bound)."""
        prefetches = []
        if _gather_prefetch is not None:
            for step in steps:

                def gather(step=step):
                    for arrays, ids in zip(self.arrays, step):
                        _gather_prefetch(arrays[0], self._order(ids), self.sink, PREFETCH_AHEAD)

                prefetches.append(_timed(gather))
                self._update_all(step)
        self._prefetch_s = float(np.median(prefetches)) if prefetches else None
        step = steps[0]
        self._same_gather_s = float(
            np.median([_timed(lambda: self._gather_all(step)) for _ in range(SAME_IDS_REPEATS)])
        )
        self._same_rmw_s = 0.0
        if self.update != "none":
            self._same_rmw_s = float(
                np.median([_timed(lambda: self._update_all(step)) for _ in range(SAME_IDS_REPEATS)])
            )

    def summary(self) -> dict:
        """The result record over every timed repeat (call `compare` first).

        Returns:
          {'gather_ms', 'rmw_ms', 'bound_ms', 'gather_gbs', 'rmw_gbs', 'threads', 'update', 'repeats',
          'unique_ids' (mean per step), 'same_ids': {'gather_ms', 'rmw_ms', 'bound_ms'},
          'prefetch_gather_ms', 'prefetch_gather_gbs', 'prefetch_ahead'} (the prefetch keys None when
          `prefetch_row` can't be imported).
        """
        gather_s = float(np.median(self.gathers))
        rmw_s = float(np.median(self.updates)) if self.update != "none" else 0.0
        unique_ids = float(np.mean(self.rows))
        gather_bytes = unique_ids * self.dim * 4
        rmw_bytes = {
            "rows": 2 * unique_ids * self.dim * 4 * (1 + self.num_slots),
            "table": 2 * sum(self.vocab) * self.dim * 4 * (1 + self.num_slots),
            "none": 0,
        }[self.update]
        prefetch_s = self._prefetch_s
        return {
            "gather_ms": gather_s * 1e3,
            "rmw_ms": rmw_s * 1e3,
            "bound_ms": (gather_s + rmw_s) * 1e3,
            "gather_gbs": gather_bytes / gather_s / 1e9 if gather_s else 0.0,
            "rmw_gbs": rmw_bytes / rmw_s / 1e9 if rmw_s else 0.0,
            "threads": self.threads,
            "update": self.update,
            "repeats": len(self.gathers),
            "unique_ids": unique_ids,
            "same_ids": {
                "gather_ms": self._same_gather_s * 1e3,
                "rmw_ms": self._same_rmw_s * 1e3,
                "bound_ms": (self._same_gather_s + self._same_rmw_s) * 1e3,
            },
            "prefetch_gather_ms": prefetch_s * 1e3 if prefetch_s is not None else None,
            "prefetch_gather_gbs": gather_bytes / prefetch_s / 1e9 if prefetch_s else None,
            "prefetch_ahead": PREFETCH_AHEAD if prefetch_s is not None else None,
        }


def measure_bound(
    vocab: list[int],
    dim: int,
    steps: Sequence[Sequence[np.ndarray]],
    num_slots: int,
    update: str = "rows",
    before: Sequence[Sequence[np.ndarray]] = (),
) -> dict:
    """The bound alone (nothing alternating with it): `before` untimed, then one repeat per step in `steps`.

    `steps[r][t]` holds the distinct ids of table t in the batch timed round r uses; see `Bound.summary`.
    """
    bound = Bound(vocab, dim, num_slots, update)
    bound.warm(before)
    for step in steps:
        bound.repeat(step)
    bound.compare(steps)
    return bound.summary()
