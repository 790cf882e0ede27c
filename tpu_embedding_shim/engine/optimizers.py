"""Optimizer kernels: the executable specification of every embedding update.

An update is a pure function of the rows a step touches, their slots, their
summed gradients and the global step. It never mutates its inputs and always
returns new float32 arrays, so a step that fails half-way leaves the tables
as they were.

Per row and per step, in this order (docs/semantics.md, "Optimizers"):

    g  <- gradient multiplier * g          (the engine, before this module)
    g  <- clip(g, clip_gradient_min, clip_gradient_max)
    w  <- w - lambda' * w                  (decoupled weight decay, if any)
    w, slots <- the optimizer's own update with lr = learning_rate_at(step)
    w  <- clip(w, clip_weight_min, clip_weight_max)

with `lambda' = weight_decay_factor * lr` when
`multiply_weight_decay_factor_by_learning_rate`, else `weight_decay_factor`.

Shapes: `rows`, `grads` and every slot are `[U, D]`: U touched rows (ids
unique, duplicates already summed), D the embedding dimension. Slot names are
TensorFlow's (`accumulators`, `momenta`, `velocities`, `linears`, `ms`, `mom`):
exactly the keys of `optimizer.slot_initial_values()`.

Arithmetic is float32 throughout, hyper-parameters included, as on
TensorFlow's own kernels.

>>> import numpy as np
>>> from tpu_embedding_shim.spec import SGDSpec
>>> rows = np.array([[1.0, 2.0]], np.float32)
>>> grads = np.array([[0.5, -1.0]], np.float32)
>>> new_rows, new_slots = apply_update(SGDSpec(learning_rate=0.5), rows, {}, grads, step=0)
>>> new_rows
array([[0.75, 2.5 ]], dtype=float32)

The per-optimizer functions (`sgd_update`, `adagrad_update`, ...) are the
readable form of each formula. They take the learning rate already evaluated
for the step and see only the optimizer's own update (no clipping, no decay);
`apply_update` wraps them with the options every optimizer shares.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from ..spec.checks import fail, is_int
from ..spec.optimizers import (
    AdagradMomentumSpec,
    AdagradSpec,
    AdamSpec,
    FtrlSpec,
    MomentumSpec,
    OptimizerSpec,
    ProximalAdagradSpec,
    RMSPropSpec,
    SGDSpec,
)
from . import aligned

Slots = Dict[str, np.ndarray]
Update = Callable[[OptimizerSpec, np.ndarray, Mapping[str, np.ndarray], np.ndarray, float],
                  Tuple[np.ndarray, Slots]]

_F32 = np.float32

__all__ = [
    "apply_update", "touches_all_rows", "initial_slots", "reference_update",
    "apply_sequentially", "apply_sparse_update", "sum_duplicates",
    "bias_corrected_learning_rate", "clip_gradients", "decay_weights", "clip_weights",
    "sgd_update", "adagrad_update", "adagrad_momentum_update", "adam_update",
    "ftrl_update", "momentum_update", "rmsprop_update", "proximal_adagrad_update",
]


def _f32(value: float) -> np.float32:
    """A hyper-parameter as a float32 scalar, so arithmetic stays float32."""
    return _F32(value)


# --------------------------------------------------------------------------
# One function per optimizer: the optimizer's own update, step 5 of the
# pipeline. `rows`, `grads` and the slots are float32 [U, D]; `lr` is the
# learning rate already evaluated for this step.
# --------------------------------------------------------------------------


def sgd_update(optimizer: SGDSpec, rows, slots, grads, lr):
    """SGD: `w <- w - lr * g`. No slots."""
    del optimizer, slots
    return rows - _f32(lr) * grads, {}


def adagrad_update(optimizer: AdagradSpec, rows, slots, grads, lr, *, epsilon: float = 0.0):
    """Adagrad: `a <- a + g**2; w <- w - lr * g / sqrt(a)`.

    The square root is of the UPDATED accumulator, and a TPU adds no epsilon
    (the accumulator starts > 0). `epsilon` exists only to reproduce
    TensorFlow's raw `ResourceSparseApplyAdagradV2` kernel, which divides by
    `sqrt(a) + epsilon` (see `apply_sequentially`).
    """
    del optimizer
    accumulators = slots["accumulators"] + grads * grads
    denominator = np.sqrt(accumulators)
    if epsilon:
        denominator = denominator + _f32(epsilon)
    rows = rows - _f32(lr) * grads / denominator
    return rows, {"accumulators": accumulators}


def adagrad_momentum_update(optimizer: AdagradMomentumSpec, rows, slots, grads, lr):
    """Adagrad with momentum (TensorFlow's TPU `AdagradMomentum`).

        a <- a + g**2                      if beta2 == 1
        a <- beta2 * a + (1 - beta2) g**2  otherwise
        s  = (a + epsilon) ** (-1 / exponent) * g
        m <- momentum * m + s
        w <- w - lr * (momentum * m + s)   if use_nesterov
        w <- w - lr * m                    otherwise

    `epsilon` is an offset inside the root, not a starting value: both slots
    start at 0.
    """
    momentum = _f32(optimizer.momentum)
    g2 = grads * grads
    if optimizer.beta2 == 1.0:
        accumulators = slots["accumulators"] + g2
    else:
        beta2 = _f32(optimizer.beta2)
        accumulators = beta2 * slots["accumulators"] + (_F32(1) - beta2) * g2
    shifted = accumulators + _f32(optimizer.epsilon)
    if optimizer.exponent == 2.0:
        scaled = grads / np.sqrt(shifted)
    else:
        scaled = np.power(shifted, _f32(-1.0 / optimizer.exponent)) * grads
    momenta = momentum * slots["momenta"] + scaled
    step = momentum * momenta + scaled if optimizer.use_nesterov else momenta
    rows = rows - _f32(lr) * step
    return rows, {"accumulators": accumulators, "momenta": momenta}


def adam_update(optimizer: AdamSpec, rows, slots, grads, lr):
    """Adam as a TPU runs it: NO bias correction.

        m <- beta1 * m + (1 - beta1) * g
        v <- beta2 * v + (1 - beta2) * g**2
        w <- w - lr * m / sqrt(v + eps**2)    if sum_inside_sqrt (the default)
        w <- w - lr * m / (sqrt(v) + eps)     otherwise

    Bias correction is a learning-rate function of the step; see
    `bias_corrected_learning_rate`. Lazy or not is decided by the caller:
    this function updates exactly the rows it is given (`touches_all_rows`).
    """
    beta1 = _f32(optimizer.beta1)
    beta2 = _f32(optimizer.beta2)
    epsilon = _f32(optimizer.epsilon)
    momenta = beta1 * slots["momenta"] + (_F32(1) - beta1) * grads
    velocities = beta2 * slots["velocities"] + (_F32(1) - beta2) * (grads * grads)
    if optimizer.sum_inside_sqrt:
        denominator = np.sqrt(velocities + epsilon * epsilon)
    else:
        denominator = np.sqrt(velocities) + epsilon
    rows = rows - _f32(lr) * momenta / denominator
    return rows, {"momenta": momenta, "velocities": velocities}


def _ftrl_power(accumulators: np.ndarray, learning_rate_power: float) -> np.ndarray:
    """`P(a) = a ** (-learning_rate_power)`, with -learning_rate_power >= 0.

    Written with a non-negative exponent, a zero accumulator gives
    `P(0) = 0` (or 1 when the power is 0, as `0 ** 0 = 1` in TensorFlow too)
    and never `0 ** negative = inf`.
    """
    if learning_rate_power == -0.5:
        return np.sqrt(accumulators)
    if learning_rate_power == 0.0:
        return np.ones_like(accumulators)
    return np.power(accumulators, _f32(-learning_rate_power))


def ftrl_update(optimizer: FtrlSpec, rows, slots, grads, lr):
    """FTRL-proximal, TensorFlow's TPU formulation, both linear conventions.

    With `P(x) = x ** (-learning_rate_power)`:

        a_new = a + g**2;   dP = P(a_new) - P(a)
        multiply_linear_by_learning_rate=False (linear as in the paper):
          linear <- linear + g - dP / lr * w
          w <- (clip(linear, -l1, l1) - linear) / ((P(a_new) + beta) / lr + 2 l2)
        multiply_linear_by_learning_rate=True (the slot holds lr * linear):
          linear <- linear + lr * g - dP * w
          w <- (clip(linear, -lr l1, lr l1) - linear) / (P(a_new) + 2 lr l2 + beta)
        a <- a_new

    `clip(x, -t, t) - x` is 0 when `|x| <= t`, else `sign(x) t - x`. Where the
    denominator is 0 (zero accumulator, beta = 0, l2 = 0) the row is set to 0
    instead of dividing by zero. `beta` in the denominator equals TensorFlow's
    CPU `FtrlOptimizer` rule of folding it into l2: `l2 + beta / (2 lr)`.

    Raises:
      ValueError: lr == 0 with `multiply_linear_by_learning_rate=False`: the
        paper form divides by the learning rate (TensorFlow would produce
        NaN). Use `multiply_linear_by_learning_rate=True`.
    """
    if not optimizer.multiply_linear_by_learning_rate and lr == 0.0:
        raise fail(
            "learning_rate", "> 0 for FtrlSpec with multiply_linear_by_learning_rate=False",
            lr, owner="FtrlSpec",
            hint="That form divides by the learning rate; pass "
                 "multiply_linear_by_learning_rate=True to allow a learning rate of 0.",
        )
    power = optimizer.learning_rate_power
    lr32 = _f32(lr)
    l1 = _f32(optimizer.l1_regularization_strength)
    l2 = _f32(optimizer.l2_regularization_strength)
    beta = _f32(optimizer.beta)
    accumulators = slots["accumulators"]
    new_accumulators = accumulators + grads * grads
    p_new = _ftrl_power(new_accumulators, power)
    delta_p = p_new - _ftrl_power(accumulators, power)
    if optimizer.multiply_linear_by_learning_rate:
        linears = slots["linears"] + lr32 * grads - delta_p * rows
        threshold = lr32 * l1
        denominator = p_new + _F32(2) * lr32 * l2 + beta
    else:
        linears = slots["linears"] + grads - delta_p / lr32 * rows
        threshold = l1
        denominator = (p_new + beta) / lr32 + _F32(2) * l2
    numerator = np.clip(linears, -threshold, threshold) - linears
    rows = np.zeros_like(rows)
    np.divide(numerator, denominator, out=rows,
              where=(np.abs(linears) > threshold) & (denominator > 0))
    return rows, {"accumulators": new_accumulators, "linears": linears}


def momentum_update(optimizer: MomentumSpec, rows, slots, grads, lr):
    """Momentum, TensorFlow's `ApplyMomentum` kernel.

        m <- momentum * m + g
        w <- w - lr * m                          (plain)
        w <- w - lr * g - lr * momentum * m      (use_nesterov)
    """
    momentum = _f32(optimizer.momentum)
    lr32 = _f32(lr)
    momenta = slots["momenta"] * momentum + grads
    if optimizer.use_nesterov:
        rows = rows - (grads * lr32 + momenta * momentum * lr32)
    else:
        rows = rows - momenta * lr32
    return rows, {"momenta": momenta}


def rmsprop_update(optimizer: RMSPropSpec, rows, slots, grads, lr):
    """RMSProp, TensorFlow's `ApplyRMSProp` kernel.

        ms  <- ms + (g**2 - ms) * (1 - rho)      (= rho ms + (1 - rho) g**2)
        mom <- momentum * mom + lr * g / sqrt(ms + epsilon)
        w   <- w - mom
    """
    rho = _f32(optimizer.rho)
    ms = slots["ms"] + (grads * grads - slots["ms"]) * (_F32(1) - rho)
    mom = slots["mom"] * _f32(optimizer.momentum) + (grads * _f32(lr)) / np.sqrt(ms + _f32(optimizer.epsilon))
    return rows - mom, {"ms": ms, "mom": mom}


def proximal_adagrad_update(optimizer: ProximalAdagradSpec, rows, slots, grads, lr):
    """Proximal Adagrad (FOBOS with the Adagrad rate), TensorFlow's CPU kernel.

        a <- a + g**2
        r  = lr / sqrt(a)                       (the adaptive rate)
        v  = w - r * g
        w <- sign(v) * max(|v| - r * l1, 0) / (1 + r * l2)

    The raw-op documentation writes `lr` in the two prox terms; the kernel
    (`ApplyProximalAdagrad` in training_ops.cc) uses the adaptive rate `r`,
    and so do we.
    """
    accumulators = slots["accumulators"] + grads * grads
    rate = _f32(lr) / np.sqrt(accumulators)
    prox = rows - rate * grads
    shrunk = np.maximum(np.abs(prox) - rate * _f32(optimizer.l1_regularization_strength), _F32(0))
    rows = np.sign(prox) * shrunk / (_F32(1) + rate * _f32(optimizer.l2_regularization_strength))
    return rows, {"accumulators": accumulators}


_UPDATES: Dict[type, Update] = {
    SGDSpec: sgd_update,
    AdagradSpec: adagrad_update,
    AdagradMomentumSpec: adagrad_momentum_update,
    AdamSpec: adam_update,
    FtrlSpec: ftrl_update,
    MomentumSpec: momentum_update,
    RMSPropSpec: rmsprop_update,
    ProximalAdagradSpec: proximal_adagrad_update,
}


def reference_update(optimizer: OptimizerSpec) -> Update:
    """The per-optimizer function (`sgd_update`, ...) that implements `optimizer`.

    Raises:
      TypeError: `optimizer` is not one of the spec classes (or a subclass).
    """
    for cls in type(optimizer).__mro__:
        if cls in _UPDATES:
            return _UPDATES[cls]
    names = ", ".join(cls.__name__ for cls in _UPDATES)
    raise fail("optimizer", f"one of {names}", optimizer, error=TypeError)


# --------------------------------------------------------------------------
# The options every optimizer shares.
# --------------------------------------------------------------------------


def _clip(values: np.ndarray, low: Optional[float], high: Optional[float]) -> np.ndarray:
    if low is None and high is None:
        return values
    low = -np.inf if low is None else low
    high = np.inf if high is None else high
    return np.clip(values, _f32(low), _f32(high))


def clip_gradients(optimizer: OptimizerSpec, grads: np.ndarray) -> np.ndarray:
    """`g <- clip(g, clip_gradient_min, clip_gradient_max)`, element-wise (None: no limit)."""
    return _clip(grads, optimizer.clip_gradient_min, optimizer.clip_gradient_max)


def decay_weights(optimizer: OptimizerSpec, rows: np.ndarray, lr: float) -> np.ndarray:
    """Decoupled weight decay, before the optimizer update: `w <- w - lambda' * w`.

    `lambda' = weight_decay_factor * lr` if
    `multiply_weight_decay_factor_by_learning_rate`, else `weight_decay_factor`.
    A factor of None or 0 turns it off (TensorFlow writes it only when truthy).
    """
    factor = optimizer.weight_decay_factor
    if not factor:
        return rows
    if optimizer.multiply_weight_decay_factor_by_learning_rate:
        factor = factor * lr
    return rows - _f32(factor) * rows


def clip_weights(optimizer: OptimizerSpec, rows: np.ndarray) -> np.ndarray:
    """`w <- clip(w, clip_weight_min, clip_weight_max)` after the update (None: no limit)."""
    return _clip(rows, optimizer.clip_weight_min, optimizer.clip_weight_max)


# --------------------------------------------------------------------------
# The entry points.
# --------------------------------------------------------------------------


def initial_slots(optimizer: Optional[OptimizerSpec], shape) -> Slots:
    """float32 slot arrays of `shape`, each filled with its initial value.

    >>> from tpu_embedding_shim.spec import FtrlSpec
    >>> sorted(initial_slots(FtrlSpec(learning_rate=0.1), (2, 3)))
    ['accumulators', 'linears']
    >>> initial_slots(None, (2, 3))
    {}
    """
    if optimizer is None:
        return {}
    return {  # cache-line aligned, like the tables (see aligned.py)
        name: aligned.full(shape, value, np.float32)
        for name, value in optimizer.slot_initial_values().items()
    }


def touches_all_rows(optimizer: OptimizerSpec) -> bool:
    """True when every row of a table is updated every step.

    Only non-lazy Adam (`AdamSpec(lazy_adam=False)`): rows not in the step are
    updated with a zero gradient, so their moments decay and they keep moving
    by `lr * m / denominator`. Every other optimizer updates only the rows a
    step touches.
    """
    return isinstance(optimizer, AdamSpec) and not optimizer.lazy_adam


def _as_float32(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "fiu":
        raise fail(name, "a real-valued array", f"an array of dtype {array.dtype}", error=TypeError)
    return array.astype(np.float32, copy=False)


def _check_step(step) -> int:
    if not is_int(step) or step < 0:
        raise fail("step", "an int >= 0 (the global step)", step)
    return int(step)


def _check_inputs(optimizer, rows, slots, grads):
    reference_update(optimizer)  # raises TypeError for an unknown optimizer
    rows = _as_float32("rows", rows)
    grads = _as_float32("grads", grads)
    if rows.ndim != 2:
        raise fail("rows", "a 2-D array [U, D]", f"shape {rows.shape}")
    if grads.shape != rows.shape:
        raise fail("grads", f"an array of the shape of `rows` {rows.shape}", f"shape {grads.shape}")
    expected = sorted(optimizer.slot_initial_values())
    if not isinstance(slots, Mapping) or sorted(slots) != expected:
        received = sorted(slots) if isinstance(slots, Mapping) else slots
        raise fail(
            "slots", f"a dict with exactly the keys {expected} for {type(optimizer).__name__}",
            received, error=TypeError if not isinstance(slots, Mapping) else ValueError,
        )
    checked = {}
    for name in expected:
        array = _as_float32(f"slots[{name!r}]", slots[name])
        if array.shape != rows.shape:
            raise fail(f"slots[{name!r}]", f"an array of the shape of `rows` {rows.shape}",
                       f"shape {array.shape}")
        checked[name] = array
    return rows, checked, grads


def _fresh(result: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    """`result` as a float32 array that shares no memory with any input."""
    result = np.asarray(result).astype(np.float32, copy=False)
    if any(np.may_share_memory(result, x) for x in inputs):
        result = result.copy()
    return result


def _apply(optimizer, rows, slots, grads, lr, update: Update):
    """The shared pipeline around one optimizer update; inputs already checked."""
    clipped = clip_gradients(optimizer, grads)
    decayed = decay_weights(optimizer, rows, lr)
    new_rows, new_slots = update(optimizer, decayed, slots, clipped, lr)
    new_rows = clip_weights(optimizer, new_rows)
    inputs = (rows, grads, *slots.values())
    return (
        _fresh(new_rows, *inputs),
        {name: _fresh(new_slots[name], *inputs) for name in slots},
    )


def apply_update(
    optimizer: OptimizerSpec,
    rows: np.ndarray,
    slots: Dict[str, np.ndarray],
    grads: np.ndarray,
    step: int,
) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """One optimizer step on the rows a step touched.

    Args:
      optimizer: any `spec` optimizer.
      rows: [U, D] the touched rows (gathered, ids unique).
      slots: slot name -> [U, D], exactly the keys of
        `optimizer.slot_initial_values()`.
      grads: [U, D] the SUMMED gradient of each row for this step (duplicate
        ids already added up; see `sum_duplicates`).
      step: the global step; the learning rate is
        `optimizer.learning_rate_at(step)`.

    Returns:
      `(new_rows, new_slots)`: new float32 arrays; the inputs are untouched.

    Raises:
      TypeError: an unknown optimizer, or slots that are not a dict.
      ValueError: shapes that disagree, missing or extra slots, a bad step.
        Nothing is computed before the checks pass.
    """
    rows, slots, grads = _check_inputs(optimizer, rows, slots, grads)
    step = _check_step(step)
    lr = optimizer.learning_rate_at(step)
    return _apply(optimizer, rows, slots, grads, lr, reference_update(optimizer))


# --------------------------------------------------------------------------
# Helpers around apply_update: duplicates, sparse steps, TF's raw kernel and
# the Adam bias-correction recipe.
# --------------------------------------------------------------------------


def _check_ids(ids, grads, num_rows: int):
    ids = np.asarray(ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise fail("ids", "a 1-D integer array", f"shape {ids.shape}, dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    grads = _as_float32("grads", grads)
    if grads.ndim != 2 or grads.shape[0] != ids.shape[0]:
        raise fail("grads", f"a 2-D array with one row per id ({ids.shape[0]})", f"shape {grads.shape}")
    bad = (ids < 0) | (ids >= num_rows)
    if bad.any():
        raise fail("ids", f"ids in [0, {num_rows})", ids[bad][:5].tolist())
    return ids, grads


def sum_duplicates(ids, grads) -> Tuple[np.ndarray, np.ndarray]:
    """Sums the gradients of repeated ids: the TPU rule, one update per row.

    Args:
      ids: [N] integer row ids, in any order, possibly repeated.
      grads: [N, D] one gradient per id.

    Returns:
      `(unique_ids, summed)`: [U] sorted unique ids and [U, D] float32 sums.

    >>> sum_duplicates(np.array([3, 1, 3]), np.array([[1.0], [2.0], [4.0]]))
    (array([1, 3]), array([[2.],
           [5.]], dtype=float32))
    """
    ids = np.asarray(ids).astype(np.int64, copy=False)
    grads = _as_float32("grads", grads)
    unique_ids, inverse = np.unique(ids, return_inverse=True)
    summed = np.zeros((unique_ids.shape[0],) + grads.shape[1:], dtype=np.float32)
    np.add.at(summed, inverse.reshape(-1), grads)
    return unique_ids, summed


def apply_sparse_update(
    optimizer: OptimizerSpec,
    table: np.ndarray,
    slots: Dict[str, np.ndarray],
    ids,
    grads,
    step: int,
) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """One training step on a whole table: sum duplicates, update, scatter.

    The reference for what the engine does per table: duplicate ids are summed
    (`sum_duplicates`), each touched row gets one `apply_update`; rows not in
    the step are left alone, except for optimizers that `touches_all_rows`
    (non-lazy Adam), where the whole table is updated with a zero gradient for
    the rows not in the step.

    Args:
      table: [V, D] the full table; slots: name -> [V, D].
      ids: [N] row ids of this step (repeats allowed); grads: [N, D].

    Returns:
      New `(table, slots)`; the inputs are untouched.
    """
    table = _as_float32("table", table)
    if table.ndim != 2:
        raise fail("table", "a 2-D array [V, D]", f"shape {table.shape}")
    ids, grads = _check_ids(ids, grads, table.shape[0])
    if grads.shape[1] != table.shape[1]:
        raise fail("grads", f"rows of width {table.shape[1]} (the table's dimension)",
                   f"shape {grads.shape}")
    unique_ids, summed = sum_duplicates(ids, grads)
    if touches_all_rows(optimizer):
        dense = np.zeros_like(table)
        dense[unique_ids] = summed
        return apply_update(optimizer, table, slots, dense, step)
    _, checked_slots, _ = _check_inputs(optimizer, table, slots, table)
    new_rows, new_slot_rows = apply_update(
        optimizer, table[unique_ids], {k: v[unique_ids] for k, v in checked_slots.items()}, summed, step
    )
    new_table = table.copy()
    new_table[unique_ids] = new_rows
    new_slots = {}
    for name, values in checked_slots.items():
        new_slots[name] = values.copy()
        new_slots[name][unique_ids] = new_slot_rows[name]
    return new_table, new_slots


def apply_sequentially(
    optimizer: OptimizerSpec,
    rows: np.ndarray,
    slots: Dict[str, np.ndarray],
    ids,
    grads,
    step: int,
    *,
    epsilon: float = 0.0,
) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """Duplicates applied one after another: TensorFlow's raw-kernel behaviour.

    NOT the TPU rule. `tf.raw_ops.ResourceSparseApplyAdagradV2` does not sum
    repeated ids: it walks the (id, gradient) entries in order and updates the
    row for each (`a += g**2; w -= lr * g / (sqrt(a) + epsilon)`), so an id
    seen twice is updated twice, the second time with the first update's
    accumulator. With Adagrad this moves a row further than one update with
    the summed gradient. Here for the conformance data that shows the
    difference; the engine uses `apply_sparse_update`.

    Args:
      rows: [V, D] the table; slots: name -> [V, D].
      ids: [N] row ids in application order; grads: [N, D].
      epsilon: the raw kernel's epsilon, added to `sqrt(a)`; only for
        `AdagradSpec` (a TPU Adagrad has none).
    """
    table = _as_float32("rows", rows)
    table, checked_slots, _ = _check_inputs(optimizer, table, slots, table)
    ids, grads = _check_ids(ids, grads, table.shape[0])
    step = _check_step(step)
    update = reference_update(optimizer)
    if epsilon:
        if update is not adagrad_update:
            raise fail("epsilon", "0 unless the optimizer is an AdagradSpec", epsilon,
                       hint=f"Received optimizer {type(optimizer).__name__}.")
        update = functools.partial(adagrad_update, epsilon=epsilon)
    lr = optimizer.learning_rate_at(step)
    table = table.copy()
    new_slots = {name: values.copy() for name, values in checked_slots.items()}
    for position, row_id in enumerate(ids):
        one_row = table[row_id:row_id + 1]
        one_slots = {name: values[row_id:row_id + 1] for name, values in new_slots.items()}
        new_row, new_slot_row = _apply(optimizer, one_row, one_slots,
                                       grads[position:position + 1], lr, update)
        table[row_id] = new_row[0]
        for name in new_slots:
            new_slots[name][row_id] = new_slot_row[name][0]
    return table, new_slots


LearningRate = Union[float, Callable[[int], float]]


def bias_corrected_learning_rate(
    learning_rate: LearningRate, beta1: float, beta2: float
) -> Callable[[int], float]:
    """A learning-rate function that folds Adam's bias correction in.

    A TPU's Adam has no bias correction; TensorFlow's answer is to feed

        lr_t = lr * sqrt(1 - beta2**t) / (1 - beta1**t),   t = step + 1

    as the learning rate (the global step is 0 at the first update, and t
    counts updates from 1). With `AdamSpec(sum_inside_sqrt=False)` this gives
    exactly `tf.compat.v1.train.AdamOptimizer` (whose epsilon is the "epsilon
    hat" of the Adam paper: added to sqrt(v) of the uncorrected v).

    >>> fn = bias_corrected_learning_rate(0.1, beta1=0.9, beta2=0.999)
    >>> round(fn(0), 6)   # 0.1 * sqrt(0.001) / 0.1
    0.031623
    """
    if not callable(learning_rate):
        base = float(learning_rate)
        learning_rate = lambda step: base  # noqa: E731

    def corrected(step: int) -> float:
        t = step + 1
        return float(learning_rate(step)) * math.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t)

    return corrected
