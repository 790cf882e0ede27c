"""Fused in-place optimizer updates over the rows a step touched.

Each kernel walks the U touched rows (ids unique, gradients summed by
`owner.py`), one segment `starts[r] .. stops[r]` of `unique_ids` / `grads`
per parallel task, prefetching the rows (and slot rows) `AHEAD` ids on, and, per element, does what `optimizers.apply_update`
does, in the same order and the same float32 arithmetic:

    g <- clip(g, gmin, gmax)
    w <- w - decay * w              (when decay is on)
    w, slots <- the optimizer's own update with the step's learning rate
    w <- clip(w, wmin, wmax)

then writes the row and its slots back in place.
Only called after every check of the step has
passed (the engine's failure atomicity): nothing here can fail.

Covered: SGD, Adagrad, lazy Adam (both epsilon placements). Every other
optimizer, and non-lazy Adam (which updates every row of the table), goes
through the numpy reference (`fusable`).

Scalars must be float32 (`np.float32`): a Python float would promote the
arithmetic to float64 and change the rounding.
"""

from __future__ import annotations

from typing import Optional

import numba
import numpy as np

from ...spec import AdagradSpec, AdamSpec, OptimizerSpec, SGDSpec
from .prefetch import AHEAD, prefetch_row

__all__ = ["fusable", "apply", "options", "sgd", "adagrad", "lazy_adam"]

_F32 = np.float32


def fusable(optimizer: Optional[OptimizerSpec]) -> bool:
    """True when a fused kernel implements `optimizer` exactly (subclasses excluded)."""
    if type(optimizer) in (SGDSpec, AdagradSpec):
        return True
    return type(optimizer) is AdamSpec and optimizer.lazy_adam


def apply(optimizer: OptimizerSpec, lr: float, table: np.ndarray, slots, unique_ids: np.ndarray,
          grads: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> None:
    """The fused update of `optimizer` (`fusable(optimizer)` must hold), in place.

    Rows `unique_ids[starts[r]:stops[r]]` (unique) with their summed
    gradients `grads[starts[r]:stops[r]]`, one parallel task per segment r;
    `slots` maps slot name -> [V, D] array; `lr` is the step's learning rate."""
    if int((stops - starts).sum()) == 0:
        return
    shared = options(optimizer, lr)
    lr32 = _F32(lr)
    rows = (unique_ids, grads, starts, stops)
    if type(optimizer) is SGDSpec:
        sgd(table, *rows, lr32, *shared)
    elif type(optimizer) is AdagradSpec:
        adagrad(table, slots["accumulators"], *rows, lr32, *shared)
    elif type(optimizer) is AdamSpec and optimizer.lazy_adam:
        b1, b2 = _F32(optimizer.beta1), _F32(optimizer.beta2)
        lazy_adam(table, slots["momenta"], slots["velocities"], *rows, lr32,
                  b1, _F32(1) - b1, b2, _F32(1) - b2, _F32(optimizer.epsilon),
                  bool(optimizer.sum_inside_sqrt), *shared)
    else:
        raise TypeError(f"No fused update for {type(optimizer).__name__}; use the numpy path.")


def options(optimizer: OptimizerSpec, lr: float):
    """The shared options as float32 kernel arguments: (gmin, gmax, decay, has_decay, wmin, wmax)."""
    low = lambda v: _F32(-np.inf) if v is None else _F32(v)  # noqa: E731
    high = lambda v: _F32(np.inf) if v is None else _F32(v)  # noqa: E731
    factor = optimizer.weight_decay_factor
    has_decay = bool(factor)
    if has_decay and optimizer.multiply_weight_decay_factor_by_learning_rate:
        factor = factor * lr
    return (low(optimizer.clip_gradient_min), high(optimizer.clip_gradient_max),
            _F32(factor if has_decay else 0.0), has_decay,
            low(optimizer.clip_weight_min), high(optimizer.clip_weight_max))


@numba.njit(inline="always")
def _clip(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


@numba.njit(parallel=True, cache=True, nogil=True)
def sgd(table, unique_ids, grads, starts, stops, lr, gmin, gmax, decay, has_decay, wmin, wmax):
    """`w <- w - lr * g`, in place at `unique_ids`."""
    dim = table.shape[1]
    for r in numba.prange(starts.shape[0]):
        lo = starts[r]  # bounds in locals: the in-place writes could alias `stops` for all LLVM knows
        hi = stops[r]
        for s in range(lo, hi):
            if s + AHEAD < hi:
                prefetch_row(table, unique_ids[s + AHEAD])
            i = unique_ids[s]
            w = table[i]
            g = grads[s]
            for j in range(dim):
                gj = _clip(g[j], gmin, gmax)
                wj = w[j]
                if has_decay:
                    wj = wj - decay * wj
                wj = wj - lr * gj
                w[j] = _clip(wj, wmin, wmax)


@numba.njit(parallel=True, cache=True, nogil=True)
def adagrad(table, accumulators, unique_ids, grads, starts, stops, lr, gmin, gmax, decay, has_decay, wmin, wmax):
    """`a <- a + g**2; w <- w - lr * g / sqrt(a)`, in place at `unique_ids`."""
    dim = table.shape[1]
    for r in numba.prange(starts.shape[0]):
        lo = starts[r]  # bounds in locals: the in-place writes could alias `stops` for all LLVM knows
        hi = stops[r]
        for s in range(lo, hi):
            if s + AHEAD < hi:
                ahead = unique_ids[s + AHEAD]
                prefetch_row(table, ahead)
                prefetch_row(accumulators, ahead)
            i = unique_ids[s]
            w = table[i]
            a = accumulators[i]
            g = grads[s]
            for j in range(dim):
                gj = _clip(g[j], gmin, gmax)
                wj = w[j]
                if has_decay:
                    wj = wj - decay * wj
                aj = a[j] + gj * gj
                wj = wj - lr * gj / np.sqrt(aj)
                a[j] = aj
                w[j] = _clip(wj, wmin, wmax)


@numba.njit(parallel=True, cache=True, nogil=True)
def lazy_adam(table, momenta, velocities, unique_ids, grads, starts, stops, lr, beta1, one_minus_beta1, beta2,
              one_minus_beta2, epsilon, sum_inside_sqrt, gmin, gmax, decay, has_decay, wmin, wmax):
    """Adam without bias correction, touched rows only, in place at `unique_ids`."""
    dim = table.shape[1]
    eps2 = epsilon * epsilon
    for r in numba.prange(starts.shape[0]):
        lo = starts[r]  # bounds in locals: the in-place writes could alias `stops` for all LLVM knows
        hi = stops[r]
        for s in range(lo, hi):
            if s + AHEAD < hi:
                ahead = unique_ids[s + AHEAD]
                prefetch_row(table, ahead)
                prefetch_row(momenta, ahead)
                prefetch_row(velocities, ahead)
            i = unique_ids[s]
            w = table[i]
            m = momenta[i]
            v = velocities[i]
            g = grads[s]
            for j in range(dim):
                gj = _clip(g[j], gmin, gmax)
                wj = w[j]
                if has_decay:
                    wj = wj - decay * wj
                mj = beta1 * m[j] + one_minus_beta1 * gj
                vj = beta2 * v[j] + one_minus_beta2 * (gj * gj)
                if sum_inside_sqrt:
                    den = np.sqrt(vj + eps2)
                else:
                    den = np.sqrt(vj) + epsilon
                wj = wj - lr * mj / den
                m[j] = mj
                v[j] = vj
                w[j] = _clip(wj, wmin, wmax)

