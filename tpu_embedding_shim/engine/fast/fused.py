"""Fused in-place optimizer updates over the rows a step touched: the drivers.

No optimizer's arithmetic is written here. Each optimizer's formula
(`optimizers/formulas.py`, found through `optimizers/registry.py`) is
compiled by numba and inlined, element by element, into one generic row loop
that does what `optimizers.apply_update` does, in the same order and the
same float32 arithmetic:

    g <- clip(g, gmin, gmax)
    w <- w - decay * w              (when decay is on)
    w, slots <- the optimizer's formula with the step's learning rate
    w <- clip(w, wmin, wmax)

then writes the row and its slots back in place. `lazy` walks the U touched
rows (ids unique, gradients summed by `owner.py`), one segment
`starts[r] .. stops[r]` of `unique_ids` / `grads` per parallel task,
prefetching the rows (and slot rows) `AHEAD` ids on. Two special cases:

- an optimizer that `touches_all_rows` (non-lazy Adam) updates EVERY row of
  the table: `dense` walks all V rows in parallel blocks, with the row's
  summed gradient when it is in the step and a zero gradient otherwise
  (clipped, decayed and weight-clipped like any row, as the numpy engine
  does), through an int32 id -> position map of size V (no [V, D]
  temporary);
- a formula's powers (`registry.Powers`: AdagradMomentum with exponent != 2,
  FTRL with learning_rate_power not in {-0.5, 0}) are taken with numpy's
  `np.power` on compact [U, D] buffers that `bases` fills first, because
  numpy's float32 power (SIMD on some CPUs) and libm's `powf` differ by an
  ulp.

Only called after every check of the step has passed (the engine's failure
atomicity): nothing here can fail, so an optimizer whose update may refuse
the step's learning rate is not `fusable`.

Each kernel is compiled once per (formula, the `constants` leading
hyper-parameters, whether powers are given) and cached on disk. numba's cache
key hashes a closure's cells, not the code of the functions they name: a
kernel's cells hold the formula's module source hash, so an edited formula is
compiled anew.

Scalars must be float32 (`np.float32`): a Python float would promote the
arithmetic to float64 and change the rounding.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic, overload, register_jitable

from ...spec import OptimizerSpec
from ..optimizers import formulas
from ..optimizers.registry import OPTIMIZERS, Powers
from . import disk_cache  # noqa: F401  (before any cache=True kernel: numba caches them outside the package)
from .prefetch import AHEAD, prefetch_row
from .threads import on_one_thread

__all__ = ["fusable", "apply", "apply_tables", "batchable", "options", "reads_refs", "slot_names"]

_F32 = np.float32
BLOCK = 1024  # rows per parallel task of `dense`


def fusable(optimizer: OptimizerSpec | None) -> bool:
    """True when a fused kernel implements `optimizer` exactly (subclasses excluded).

    The registry's `fusable` says no when the update could refuse the step's
    learning rate (FTRL's paper form with a schedule or lr 0): a fused update
    runs after the step's checks."""
    row = OPTIMIZERS.get(type(optimizer))
    if row is None or (row.powers is not None and row.touches_all_rows(optimizer)):  # `dense` takes no powers
        return False
    return bool(row.fusable(optimizer))


def apply(
    optimizer: OptimizerSpec,
    lr: float,
    table: np.ndarray,
    slots,
    unique_ids: np.ndarray,
    grads: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    refs: tuple | None = None,
) -> None:
    """The fused update of `optimizer` (`fusable(optimizer)` must hold), in place.

    Rows `unique_ids[starts[r]:stops[r]]` (unique) with their summed
    gradients `grads[starts[r]:stops[r]]`, one parallel task per segment r;
    `refs` (`reads_refs(optimizer)` must hold): the rows the sums left
    unwritten, `(opened, src, coef, entry_grads)` of `owner.sum_owned`;
    `slots` maps slot name -> [V, D] array; `lr` is the step's learning rate.
    An optimizer that touches all rows (non-lazy Adam) updates every row of
    `table`, even when no row is in the step."""
    row = OPTIMIZERS[type(optimizer)]
    dense = row.touches_all_rows(optimizer)
    if not dense and starts.tolist() == stops.tolist():  # no row in the step
        return
    hp = row.hyperparameters(optimizer, lr)
    constants, hp = hp[: row.constants], hp[row.constants :]
    arrays = tuple([slots[name] for name in row.slots])
    shared = options(optimizer, lr)
    if dense:
        position = np.empty(table.shape[0], np.int32 if grads.shape[0] < 2**31 else np.int64)
        _positions(position, unique_ids, starts, stops)
        _kernel(_dense, row.formula, constants)(table, arrays, grads, position, hp, *shared)
        return
    offsets, powers, given = starts, (), False
    if row.powers is not None:
        offsets, powers, given = _powers(
            row.powers, optimizer, slots, unique_ids, grads, starts, stops, constants, hp, shared
        )
    _kernel(_lazy, row.formula, constants, len(powers), given, refs is not None)(
        table, arrays, unique_ids, grads, starts, stops, offsets, powers, *(refs or _NO_REFS), hp, *shared
    )


def reads_refs(optimizer: OptimizerSpec) -> bool:
    """True when `apply` reads rows the sums left unwritten (`refs`) in place: the lazy update with no
    power taken by numpy (the other paths read `grads` whole: the caller writes those rows first)."""
    row = OPTIMIZERS[type(optimizer)]
    return not row.touches_all_rows(optimizer) and (row.powers is None or row.powers.exponent(optimizer) is None)


_NO_REFS = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, _F32), np.zeros((0, 1), _F32))


def batchable(optimizer: OptimizerSpec | None) -> bool:
    """True when `apply_tables` takes `optimizer`: fusable, lazy (not non-lazy Adam), and no power
    taken with numpy's `np.power` (the formula takes its own square root, or none)."""
    if not fusable(optimizer):
        return False
    row = OPTIMIZERS[type(optimizer)]
    return not row.touches_all_rows(optimizer) and (row.powers is None or row.powers.exponent(optimizer) is None)


def slot_names(optimizer: OptimizerSpec) -> tuple[str, ...]:
    """The slots of `optimizer` in the order its formula takes them."""
    return tuple(OPTIMIZERS[type(optimizer)].slots)


def apply_tables(optimizer: OptimizerSpec, lr: float, tables, slots, uniques, grads, starts, stops) -> None:
    """`apply` for several tables with one `optimizer` (`batchable`) and learning rate, in one serial call.

    Tuples, one item per table: `tables` [V, D] arrays, `slots` tuples of the
    optimizer's slot arrays (registry order), `uniques` / `grads` the summed
    rows and `starts` / `stops` their segments, as `apply` takes them."""
    known = _TABLES_CALLS.get(id(optimizer))
    if known is None or known[0] is not optimizer or known[1] != lr:
        if len(_TABLES_CALLS) > 64:
            _TABLES_CALLS.clear()
        known = _TABLES_CALLS[id(optimizer)] = (optimizer, lr, *_tables_call(optimizer, lr))
    _, _, kernel, hp, shared = known
    on_one_thread(lambda: kernel(tables, slots, uniques, grads, starts, stops, hp, *shared))


_TABLES_CALLS: dict[int, tuple] = {}  # id(spec) -> (spec, lr, kernel, hp, options): the last lr's call


def _tables_call(optimizer: OptimizerSpec, lr: float):
    """(kernel, hyper-parameters, shared options) of `apply_tables` (kept per spec object and learning rate
    by `apply_tables`: hashing a spec dataclass hashes every field)."""
    row = OPTIMIZERS[type(optimizer)]
    hp = row.hyperparameters(optimizer, lr)
    constants, hp = hp[: row.constants], hp[row.constants :]
    count = 0 if row.powers is None else row.powers.count
    return _kernel(_lazy_tables, row.formula, constants, count), hp, options(optimizer, lr)


def options(optimizer: OptimizerSpec, lr: float):
    """The shared options as float32 kernel arguments: (gmin, gmax, decay, has_decay, wmin, wmax)."""
    factor = optimizer.weight_decay_factor or 0.0
    has_decay = bool(factor)
    if has_decay and optimizer.multiply_weight_decay_factor_by_learning_rate:
        factor = factor * lr
    return (
        _bound(optimizer.clip_gradient_min, _LOWEST),
        _bound(optimizer.clip_gradient_max, _HIGHEST),
        _F32(factor),
        has_decay,
        _bound(optimizer.clip_weight_min, _LOWEST),
        _bound(optimizer.clip_weight_max, _HIGHEST),
    )


_LOWEST, _HIGHEST = _F32(-np.inf), _F32(np.inf)


def _bound(value: float | None, none: np.float32) -> np.float32:
    return none if value is None else _F32(value)


def _powers(spec: Powers, optimizer, slots, unique_ids, grads, starts, stops, constants, hp, shared):
    """(offsets, powers, given): the formula's powers of the touched rows, numpy's `np.power` of its
    power bases, in compact [U, D] buffers (segment r's rows from row `offsets[r]`); not `given`
    (empty buffers, never read) when the formula takes its own square root or 1 for this spec."""
    exponent = spec.exponent(optimizer)
    if exponent is None:
        return starts, _unread(spec.count), False
    lengths = stops - starts
    offsets = np.zeros(starts.shape[0], dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    powers = tuple(np.empty((int(lengths.sum()), grads.shape[1]), _F32) for _ in range(spec.count))
    read = tuple(slots[name] for name in spec.slots)
    _kernel(_bases, spec.bases, constants)(read, unique_ids, grads, starts, stops, offsets, powers, hp, *shared[:2])
    with np.errstate(all="ignore"):  # never raises, whatever `np.seterr` says: the update runs after the checks
        for values in powers:
            np.power(values, _F32(exponent), out=values)
    return offsets, powers, True


@functools.cache
def _unread(count: int) -> tuple[np.ndarray, ...]:
    """`count` empty power buffers, for a kernel that is compiled not to read them."""
    return tuple(np.empty((0, 1), _F32) for _ in range(count))


# --------------------------------------------------------------------------
# The drivers: one generic loop each, compiled per formula.
# --------------------------------------------------------------------------


def _lazy(formula, source, constants, count, given, reads_refs):
    """The update of the touched rows, `formula` inlined (`count` powers, `given` or zeros); with
    `reads_refs`, a row that `opened` marks with entry k >= 0 is read in place, `coef[k] * entry_grads[src[k]]`
    (compiled apart: without it the row loop is the one that reads `grads` alone; one kernel for both,
    testing each row and multiplying every gradient by 1, made the updates of `criteo26`'s 26 tables
    3.8-3.9 ms a step against 3.2-3.3, one thread)."""
    no_powers = (_F32(0.0),) * count

    @numba.njit(parallel=True, cache=True, nogil=True)
    def lazy(
        table,
        slots,
        unique_ids,
        grads,
        starts,
        stops,
        offsets,
        powers,
        opened,
        src,
        coef,
        entry_grads,
        hp,
        gmin,
        gmax,
        decay,
        has_decay,
        wmin,
        wmax,
    ):
        _cache_key(source)
        weighted = coef.shape[0] != 0
        one = np.float32(1.0)
        for r in numba.prange(starts.shape[0]):
            full = constants + hp  # inside the parallel loop: its outlined body sees the constants as such
            lo = starts[r]  # bounds in locals: the in-place writes could alias `stops` for all LLVM knows
            hi = stops[r]
            base = offsets[r] - lo
            for s in range(lo, hi):
                if s + AHEAD < hi:
                    ahead = unique_ids[s + AHEAD]
                    prefetch_row(table, ahead)
                    _prefetch(slots, ahead)
                i = unique_ids[s]
                w = table[i]
                rows = _items(slots, i)
                power_rows = _items(powers, base + s)
                g = grads[s]
                if reads_refs:
                    k = opened[s]
                    if k >= 0:  # a row of one entry: its sum is the entry's term, read in place
                        _update_row(formula, w, rows, entry_grads[src[k]], coef[k] if weighted else one, power_rows,
                                    given, no_powers, full, decay, has_decay, gmin, gmax, wmin, wmax)  # fmt: skip
                        continue
                for j in range(w.shape[0]):
                    p = _items(power_rows, j) if given else no_powers
                    _update(formula, w, rows, j, _clip(g[j], gmin, gmax), p, full, decay, has_decay, wmin, wmax)

    return lazy


def _lazy_tables(formula, source, constants, count):
    """`_lazy` over a tuple of tables with one optimizer (`apply_tables`): no powers given, one thread.

    Each table's rows are a parallel loop, which `apply_tables` runs on the calling thread alone (numba's
    thread count set to 1): in a serial loop numba counts the references of every row view and slot tuple
    it makes, which made the same update ~20x slower (70 rows of 8: ~80 against ~3.5 us). The loops are
    in the one cached function: a kernel that called another kernel built here would hold it in its
    closure, whose pickle carries a new id in every process, so numba's disk cache would never find it
    and every process would compile it (3.5-13 s at a program's first step)."""
    no_powers = (_F32(0.0),) * count

    @numba.njit(cache=True, nogil=True, parallel=True)
    def lazy_tables(tables, slots, uniques, grads, starts, stops, hp, gmin, gmax, decay, has_decay, wmin, wmax):
        _cache_key(source)
        for t in range(len(tables)):
            table, table_slots, unique_ids, table_grads = tables[t], slots[t], uniques[t], grads[t]
            lows, highs = starts[t], stops[t]
            for r in numba.prange(lows.shape[0]):
                full = constants + hp  # inside the parallel loop, as in `_lazy`
                for s in range(lows[r], highs[r]):
                    i = unique_ids[s]
                    w = table[i]
                    rows = _items(table_slots, i)
                    g = table_grads[s]
                    for j in range(w.shape[0]):
                        _update(formula, w, rows, j, _clip(g[j], gmin, gmax), no_powers, full, decay, has_decay,
                                wmin, wmax)  # fmt: skip

    return lazy_tables


def _dense(formula, source, constants):
    """The update of EVERY row of the table, `formula` inlined: row i's summed gradient is
    `grads[position[i]]` when it is in the step, else zero (clipped like any other), as the numpy
    engine's dense gradient. `position` comes from `_positions`."""

    @numba.njit(parallel=True, cache=True, nogil=True)
    def dense(table, slots, grads, position, hp, gmin, gmax, decay, has_decay, wmin, wmax):
        _cache_key(source)
        count = table.shape[0]
        zero = _clip(np.float32(0.0), gmin, gmax)  # the clipped gradient of a row not in the step
        for b in numba.prange((count + BLOCK - 1) // BLOCK):
            full = constants + hp
            hi = min(count, (b + 1) * BLOCK)
            for i in range(b * BLOCK, hi):  # table and slots stream in order; only gradient rows are random
                if i + AHEAD < hi and position[i + AHEAD] >= 0:
                    prefetch_row(grads, position[i + AHEAD])
                p = position[i]
                w = table[i]
                rows = _items(slots, i)
                for j in range(w.shape[0]):
                    g = zero if p < 0 else _clip(grads[p, j], gmin, gmax)
                    _update(formula, w, rows, j, g, (), full, decay, has_decay, wmin, wmax)

    return dense


def _bases(bases, source, constants):
    """The power bases of the touched rows (`registry.Powers.bases`, inlined) into compact `out`
    (segment r from row `offsets[r]`), for numpy's power; the formula then recomputes what it shares
    with them bit for bit."""

    @numba.njit(parallel=True, cache=True, nogil=True)
    def fill(slots, unique_ids, grads, starts, stops, offsets, out, hp, gmin, gmax):
        _cache_key(source)
        for r in numba.prange(starts.shape[0]):
            full = constants + hp
            lo = starts[r]
            hi = stops[r]
            base = offsets[r] - lo
            for s in range(lo, hi):
                if s + AHEAD < hi:
                    _prefetch(slots, unique_ids[s + AHEAD])
                rows = _items(slots, unique_ids[s])
                out_rows = _items(out, base + s)
                g = grads[s]
                for j in range(g.shape[0]):
                    _put(out_rows, j, _spread(bases, (_clip(g[j], gmin, gmax),) + _items(rows, j), full))

    return fill


@numba.njit(parallel=True, cache=True, nogil=True)
def _positions(position, unique_ids, starts, stops):
    """`position[i]` <- the index s of row i in `unique_ids` / `grads`, or -1 when row i is not in the step."""
    for b in numba.prange((position.shape[0] + BLOCK - 1) // BLOCK):
        for i in range(b * BLOCK, min(position.shape[0], (b + 1) * BLOCK)):
            position[i] = -1
    for r in numba.prange(starts.shape[0]):
        for s in range(starts[r], stops[r]):
            position[unique_ids[s]] = s


_KERNELS: dict[tuple[Any, ...], Callable] = {}
_COMPILABLE: dict[str, str] = {}  # module name -> its source hash
_LOCK = threading.Lock()


def _kernel(build: Callable, function: Callable, *key: Any) -> Callable:
    """`build(function, source, *key)`, built once per process; `function`'s module compilable first."""
    index = (build, function, *key)
    kernel = _KERNELS.get(index)
    if kernel is None:
        with _LOCK:
            if index not in _KERNELS:
                _KERNELS[index] = build(function, _compilable(function), *key)
            kernel = _KERNELS[index]
    return kernel


def _compilable(function: Callable) -> str:
    """Lets numba compile and inline every function of `function`'s module (numba's twins below stand
    in for `formulas.select` and `formulas.sign`); returns the module's source hash."""
    module = sys.modules[function.__module__]
    if module.__name__ not in _COMPILABLE:
        for value in vars(module).values():
            if inspect.isfunction(value) and value.__module__ == module.__name__ and value not in _TWINS:
                register_jitable(inline="always")(value)
        _COMPILABLE[module.__name__] = hashlib.sha256(inspect.getsource(module).encode()).hexdigest()
    return _COMPILABLE[module.__name__]


# --------------------------------------------------------------------------
# Element-wise pieces of the drivers.
# --------------------------------------------------------------------------


@numba.njit(inline="always")
def _clip(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


@numba.njit(inline="always")
def _cache_key(source):
    """Nothing: `source` is a cell of the kernel's closure, hence in numba's cache key."""


@numba.njit(inline="always")
def _update_row(formula, w, rows, g, f, power_rows, given, no_powers, hp, decay, has_decay, gmin, gmax, wmin, wmax):
    """`_update` of every element of row `w` with the gradient `g * f` (one entry's float32 term)."""
    for j in range(w.shape[0]):
        p = _items(power_rows, j) if given else no_powers
        _update(formula, w, rows, j, _clip(g[j] * f, gmin, gmax), p, hp, decay, has_decay, wmin, wmax)


@numba.njit(inline="always")
def _update(formula, w, rows, j, g, powers, hp, decay, has_decay, wmin, wmax):
    """Element j of row `w` (its slot rows `rows`): weight decay, the formula, the slots written back,
    the row value clipped and written back. `g` is the clipped gradient."""
    wj = w[j]
    if has_decay:
        wj = wj - decay * wj
    out = _spread(formula, (wj, g) + _items(rows, j) + powers, hp)
    _put(rows, j, out[1:])
    w[j] = _clip(out[0], wmin, wmax)


# Tuple helpers, for numba only: each overload below is the body. Up to 3 slots, 7 formula arguments.


def _items(arrays, index):
    """`(arrays[0][index], arrays[1][index], ...)`: a row of each array, or an element of each row."""


def _put(arrays, index, values):
    """`arrays[k][index] = values[k]` for each k."""


def _prefetch(arrays, index):
    """`prefetch_row(array, index)` for each array."""


def _spread(function, args, hp):
    """`function(*args, hp)`: numba inlines no call with `*args`, so each length is written out."""


_ITEMS = (
    lambda arrays, index: (),
    lambda arrays, index: (arrays[0][index],),
    lambda arrays, index: (arrays[0][index], arrays[1][index]),
    lambda arrays, index: (arrays[0][index], arrays[1][index], arrays[2][index]),
)
_SPREAD = (
    lambda function, args, hp: function(hp),
    lambda function, args, hp: function(args[0], hp),
    lambda function, args, hp: function(args[0], args[1], hp),
    lambda function, args, hp: function(args[0], args[1], args[2], hp),
    lambda function, args, hp: function(args[0], args[1], args[2], args[3], hp),
    lambda function, args, hp: function(args[0], args[1], args[2], args[3], args[4], hp),
    lambda function, args, hp: function(args[0], args[1], args[2], args[3], args[4], args[5], hp),
    lambda function, args, hp: function(args[0], args[1], args[2], args[3], args[4], args[5], args[6], hp),
)


@overload(_items, inline="always")
def _items_numba(arrays, index):
    return _ITEMS[len(arrays)]


@overload(_spread, inline="always")
def _spread_numba(function, args, hp):
    return _SPREAD[len(args)]


@overload(_put, inline="always")
def _put_numba(arrays, index, values):
    if len(arrays) == 0:
        return lambda arrays, index, values: None

    def put(arrays, index, values):
        for k in range(len(arrays)):
            arrays[k][index] = values[k]

    return put


@overload(_prefetch, inline="always")
def _prefetch_numba(arrays, index):
    if len(arrays) == 0:
        return lambda arrays, index: None

    def prefetch(arrays, index):
        for k in range(len(arrays)):
            prefetch_row(arrays[k], index)

    return prefetch


@intrinsic
def _choose(typingctx, condition, x, y):
    """`x if condition else y` as one LLVM `select`: no branch, so the loop around it vectorizes."""
    if not isinstance(condition, types.Boolean):
        return None
    result = typingctx.unify_types(x, y)
    if result is None:
        return None

    def codegen(context, builder, signature, args):
        chosen, a, b = args
        a = context.cast(builder, a, signature.args[1], result)
        b = context.cast(builder, b, signature.args[2], result)
        return builder.select(chosen, a, b)

    return result(condition, x, y), codegen


@overload(formulas.select, inline="always")
def _select(condition, x, y):
    return lambda condition, x, y: _choose(condition, x, y)


@overload(formulas.sign, inline="always")
def _sign(x):
    def sign(x):  # np.sign: +0.0 for both zeros, NaN kept
        one = np.float32(1.0)
        return _choose(x > 0, one, _choose(x < 0, -one, _choose(x == 0, np.float32(0.0), x)))

    return sign


_TWINS = (formulas.select, formulas.sign)
