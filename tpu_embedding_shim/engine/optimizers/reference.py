"""The numpy updates: the executable specification of every embedding update.

An update is a pure function of the rows a step touches, their slots, their
summed gradients and the global step. It never mutates its inputs and always
returns new float32 arrays, so a step that fails half-way leaves the tables
as they were.

Per row and per step, in this order (docs/semantics.md, "Optimizers",
numbers the steps the same way):

    1. g  <- gradient multiplier * g          (the engine, before this module)
    2. the gradients of a repeated id summed  (the engine: `lookup.sum_duplicates`)
    3. g  <- clip(g, clip_gradient_min, clip_gradient_max)
    4. w  <- w - lambda' * w                  (decoupled weight decay, if any)
    5. w, slots <- the optimizer's formula with lr = learning_rate_at(step)
    6. w  <- clip(w, clip_weight_min, clip_weight_max)

with `lambda' = weight_decay_factor * lr` when
`multiply_weight_decay_factor_by_learning_rate`, else `weight_decay_factor`.
Step 5 is the optimizer's element-wise formula (`formulas.py`, found through
`registry.py`), here run on whole arrays; `apply_update` runs steps 3 to 6.

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

`apply_sparse_update` (a whole table, duplicates summed) and
`apply_sequentially` (TensorFlow's raw kernels, duplicates one after another)
are the oracles the tests and docs compare the engine with.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...spec.checks import fail, is_int
from ...spec.optimizers import AdagradSpec, OptimizerSpec
from .. import aligned
from ..lookup import sum_duplicates
from . import formulas
from .registry import Optimizer, optimizer_for

Slots = dict[str, np.ndarray]

_F32 = np.float32

__all__ = [
    "apply_update",
    "touches_all_rows",
    "initial_slots",
    "clip_gradients",
    "decay_weights",
    "clip_weights",
    "apply_sparse_update",
    "apply_sequentially",
]


# --------------------------------------------------------------------------
# The options every optimizer shares.
# --------------------------------------------------------------------------


def _clip(values: np.ndarray, low: float | None, high: float | None) -> np.ndarray:
    if low is None and high is None:
        return values
    low = -np.inf if low is None else low
    high = np.inf if high is None else high
    return np.clip(values, _F32(low), _F32(high))


def clip_gradients(optimizer: OptimizerSpec, grads: np.ndarray) -> np.ndarray:
    """`g <- clip(g, clip_gradient_min, clip_gradient_max)`, element-wise (None: no limit)."""
    return _clip(grads, optimizer.clip_gradient_min, optimizer.clip_gradient_max)


def decay_weights(optimizer: OptimizerSpec, rows: np.ndarray, lr: float) -> np.ndarray:
    """Decoupled weight decay, before the optimizer update: `w <- w - lambda' * w`.

    `lambda' = weight_decay_factor * lr` if
    `multiply_weight_decay_factor_by_learning_rate`, else `weight_decay_factor`.
    A factor of None or 0 turns it off (TensorFlow writes it only when truthy),
    and then `w` is untouched: `w - 0 * w` would turn -0.0 into +0.0.
    """
    factor = optimizer.weight_decay_factor
    if not factor:
        return rows
    if optimizer.multiply_weight_decay_factor_by_learning_rate:
        factor = factor * lr
    return rows - _F32(factor) * rows


def clip_weights(optimizer: OptimizerSpec, rows: np.ndarray) -> np.ndarray:
    """`w <- clip(w, clip_weight_min, clip_weight_max)` after the update (None: no limit)."""
    return _clip(rows, optimizer.clip_weight_min, optimizer.clip_weight_max)


# --------------------------------------------------------------------------
# The entry points.
# --------------------------------------------------------------------------


def initial_slots(optimizer: OptimizerSpec | None, shape) -> Slots:
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
        name: aligned.full(shape, value, np.float32) for name, value in optimizer.slot_initial_values().items()
    }


def touches_all_rows(optimizer: OptimizerSpec) -> bool:
    """True when every row of a table is updated every step.

    Only non-lazy Adam (`AdamSpec(lazy_adam=False)`): rows not in the step are
    updated with a zero gradient, so their moments decay and they keep moving
    by `lr * m / denominator`. Every other optimizer updates only the rows a
    step touches.
    """
    return optimizer_for(optimizer).touches_all_rows(optimizer)


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
    optimizer_for(optimizer)  # raises TypeError for an unknown optimizer
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
            "slots",
            f"a dict with exactly the keys {expected} for {type(optimizer).__name__}",
            received,
            error=TypeError if not isinstance(slots, Mapping) else ValueError,
        )
    checked = {}
    for name in expected:
        array = _as_float32(f"slots[{name!r}]", slots[name])
        if array.shape != rows.shape:
            raise fail(f"slots[{name!r}]", f"an array of the shape of `rows` {rows.shape}", f"shape {array.shape}")
        checked[name] = array
    return rows, checked, grads


def _fresh(result: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    """`result` as a float32 array that shares no memory with any input."""
    result = np.asarray(result).astype(np.float32, copy=False)
    if any(np.may_share_memory(result, x) for x in inputs):
        result = result.copy()
    return result


def _powers(row: Optimizer, optimizer: OptimizerSpec, grads: np.ndarray, slots: Slots, hp) -> tuple:
    """The powers the formula takes from outside (`registry.Powers`), with numpy's float32 `np.power`."""
    if row.powers is None:
        return ()
    exponent = row.powers.exponent(optimizer)
    if exponent is None:
        return (_F32(0),) * row.powers.count
    bases = row.powers.bases(grads, *(slots[name] for name in row.powers.slots), hp)
    return tuple(np.power(base, _F32(exponent)) for base in bases)


def _apply(optimizer, rows, slots, grads, lr, hp):
    """Steps 3 to 6 around the optimizer's formula; inputs already checked, `hp` already packed."""
    row = optimizer_for(optimizer)
    clipped = clip_gradients(optimizer, grads)
    decayed = decay_weights(optimizer, rows, lr)
    powers = _powers(row, optimizer, clipped, slots, hp)
    new_rows, *new_slots = row.formula(decayed, clipped, *(slots[name] for name in row.slots), *powers, hp)
    new_rows = clip_weights(optimizer, new_rows)
    inputs = (rows, grads, *slots.values())
    return (
        _fresh(new_rows, *inputs),
        {name: _fresh(values, *inputs) for name, values in zip(row.slots, new_slots)},
    )


def apply_update(
    optimizer: OptimizerSpec, rows: np.ndarray, slots: Slots, grads: np.ndarray, step: int
) -> tuple[np.ndarray, Slots]:
    """One optimizer step on the rows a step touched.

    Args:
      optimizer: any `spec` optimizer.
      rows: [U, D] the touched rows (gathered, ids unique).
      slots: slot name -> [U, D], exactly the keys of
        `optimizer.slot_initial_values()`.
      grads: [U, D] the SUMMED gradient of each row for this step (duplicate
        ids already added up; see `lookup.sum_duplicates`).
      step: the global step; the learning rate is
        `optimizer.learning_rate_at(step)`.

    Returns:
      `(new_rows, new_slots)`: new float32 arrays; the inputs are untouched.

    Raises:
      TypeError: an unknown optimizer, or slots that are not a dict.
      ValueError: shapes that disagree, missing or extra slots, a bad step,
        a learning rate the optimizer refuses. Nothing is computed before the
        checks pass.
    """
    rows, slots, grads = _check_inputs(optimizer, rows, slots, grads)
    lr = optimizer.learning_rate_at(_check_step(step))
    hp = optimizer_for(optimizer).hyperparameters(optimizer, lr)  # may refuse lr
    return _apply(optimizer, rows, slots, grads, lr, hp)


# --------------------------------------------------------------------------
# The oracles: a whole table, and TensorFlow's raw kernel.
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


def apply_sparse_update(
    optimizer: OptimizerSpec, table: np.ndarray, slots: Slots, ids, grads, step: int
) -> tuple[np.ndarray, Slots]:
    """One training step on a whole table: sum duplicates, update, scatter.

    The reference for what the engine does per table: duplicate ids are summed
    (`lookup.sum_duplicates`), each touched row gets one `apply_update`; rows
    not in the step are left alone, except for optimizers that
    `touches_all_rows` (non-lazy Adam), where the whole table is updated with
    a zero gradient for the rows not in the step.

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
        raise fail("grads", f"rows of width {table.shape[1]} (the table's dimension)", f"shape {grads.shape}")
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
    optimizer: OptimizerSpec, rows: np.ndarray, slots: Slots, ids, grads, step: int, *, epsilon: float = 0.0
) -> tuple[np.ndarray, Slots]:
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
    if epsilon and not isinstance(optimizer, AdagradSpec):
        raise fail(
            "epsilon",
            "0 unless the optimizer is an AdagradSpec",
            epsilon,
            hint=f"Received optimizer {type(optimizer).__name__}.",
        )
    lr = optimizer.learning_rate_at(step)
    if isinstance(optimizer, AdagradSpec):
        hp = formulas.adagrad_hyperparameters(optimizer, lr, epsilon=epsilon)
    else:
        hp = optimizer_for(optimizer).hyperparameters(optimizer, lr)
    table = table.copy()
    new_slots = {name: values.copy() for name, values in checked_slots.items()}
    for position, row_id in enumerate(ids):
        one_row = table[row_id : row_id + 1]
        one_slots = {name: values[row_id : row_id + 1] for name, values in new_slots.items()}
        new_row, new_slot_row = _apply(optimizer, one_row, one_slots, grads[position : position + 1], lr, hp)
        table[row_id] = new_row[0]
        for name in new_slots:
            new_slots[name][row_id] = new_slot_row[name][0]
    return table, new_slots
