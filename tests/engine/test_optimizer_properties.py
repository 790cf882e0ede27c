"""Optimizer identities that hold for any input (hypothesis).

Each property is one test with the identity in its name. Inputs are small
float32 tables and gradients; optimizers are drawn with random
hyper-parameters and random shared options (clipping, weight decay).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tpu_embedding_shim.engine.optimizers import (
    apply_sparse_update,
    apply_update,
    initial_slots,
)
from tpu_embedding_shim.spec import OPTIMIZER_SPECS, AdagradSpec, SGDSpec

PROPERTY = settings(max_examples=40, deadline=None)

# Slots that hold running sums of squares: never negative.
NON_NEGATIVE_SLOTS = {"accumulators", "velocities", "ms"}


def values(low=-5.0, high=5.0):
    return st.floats(low, high, width=32, allow_subnormal=False)


def matrices(shape, low=-5.0, high=5.0):
    return hnp.arrays(np.float32, shape, elements=values(low, high))


shapes = st.tuples(st.integers(1, 5), st.integers(1, 3))
learning_rates = st.floats(0.0, 1.0)


@st.composite
def shared_options(draw):
    """Random gradient clipping, weight decay and weight clipping (each maybe off)."""
    options = {}
    if draw(st.booleans()):
        options["clip_gradient_min"] = draw(st.none() | st.floats(-3.0, 0.0))
        options["clip_gradient_max"] = draw(st.none() | st.floats(0.0, 3.0))
    if draw(st.booleans()):
        options["weight_decay_factor"] = draw(st.floats(0.0, 0.5))
        options["multiply_weight_decay_factor_by_learning_rate"] = draw(st.booleans())
    if draw(st.booleans()):
        options["clip_weight_min"] = draw(st.none() | st.floats(-3.0, 0.0))
        options["clip_weight_max"] = draw(st.none() | st.floats(0.0, 3.0))
    return options


# Each optimizer's own hyper-parameters: name -> strategy (its kind in OPTIMIZER_SPECS -> these).
HYPERPARAMETERS = {
    "sgd": {},
    "adagrad": {"initial_accumulator": st.floats(0.01, 2.0)},
    "adagrad_momentum": {
        "momentum": st.floats(0.0, 0.99),
        "use_nesterov": st.booleans(),
        "exponent": st.sampled_from([2.0, 1.0, 3.0, 4.0]),
        "beta2": st.sampled_from([1.0, 0.9, 0.5]),
        "epsilon": st.sampled_from([1e-10, 1e-3]),
    },
    "adam": {
        "beta1": st.floats(0.0, 0.99),
        "beta2": st.floats(0.0, 0.999),
        "epsilon": st.sampled_from([1e-8, 1e-3, 0.1]),
        "lazy_adam": st.booleans(),
        "sum_inside_sqrt": st.booleans(),
    },
    "ftrl": {
        "learning_rate_power": st.sampled_from([-0.5, -0.25, 0.0, -1.0]),
        "initial_accumulator_value": st.sampled_from([0.1, 1.0]),
        "l1_regularization_strength": st.sampled_from([0.0, 0.01, 0.5]),
        "l2_regularization_strength": st.sampled_from([0.0, 0.1]),
        "beta": st.sampled_from([0.0, 0.5]),
        "multiply_linear_by_learning_rate": st.booleans(),
    },
    "momentum": {"momentum": st.floats(0.0, 0.99), "use_nesterov": st.booleans()},
    "rmsprop": {
        "rho": st.floats(0.0, 1.0),
        "momentum": st.floats(0.0, 0.99),
        "epsilon": st.sampled_from([1e-10, 1e-3]),
    },
    "proximal_adagrad": {
        "initial_accumulator": st.floats(0.01, 2.0),
        "l1_regularization_strength": st.sampled_from([0.0, 0.01, 0.5]),
        "l2_regularization_strength": st.sampled_from([0.0, 0.1]),
    },
}


@st.composite
def optimizers(draw, kinds=None, with_shared_options=True, learning_rate=None):
    """Any optimizer spec, random hyper-parameters, optionally random shared options."""
    kind = draw(st.sampled_from(kinds or list(HYPERPARAMETERS)))
    lr = (
        learning_rate if learning_rate is not None else draw(st.floats(0.01, 1.0) if kind == "ftrl" else learning_rates)
    )
    common = dict(learning_rate=lr)
    if with_shared_options:
        common.update(draw(shared_options()))
    return OPTIMIZER_SPECS[kind](**draw(st.fixed_dictionaries(HYPERPARAMETERS[kind])), **common)


@st.composite
def slot_states(draw, spec, shape):
    """A plausible mid-training state: initial value plus a random offset."""
    slots = initial_slots(spec, shape)
    for name in slots:
        if name in NON_NEGATIVE_SLOTS:
            slots[name] = slots[name] + draw(matrices(shape, 0.0, 5.0))
        else:
            slots[name] = slots[name] + draw(matrices(shape))
    return slots


@st.composite
def steps_over(draw, num_rows, dim, max_steps=4, every_row=False):
    """A list of (ids, grads) steps; ids repeat; `every_row` puts every row in every step."""
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        ids = draw(st.lists(st.integers(0, num_rows - 1), max_size=2 * num_rows))  # may be empty
        if every_row:
            ids = list(draw(st.permutations(range(num_rows)))) + ids
        ids = np.array(ids, dtype=np.int64)
        grads = draw(matrices((len(ids), dim)))
        steps.append((ids, grads))
    return steps


def _train(spec, table, slots, steps):
    for step, (ids, grads) in enumerate(steps):
        table, slots = apply_sparse_update(spec, table, slots, ids, grads, step)
    return table, slots


# --------------------------------------------------------------------------


@PROPERTY
@given(data=st.data(), shape=shapes)
def test_lazy_adam_equals_non_lazy_adam_when_every_row_is_in_every_step(data, shape):
    lazy = data.draw(optimizers(kinds=["adam"]))
    lazy = dataclasses.replace(lazy, lazy_adam=True)
    dense = dataclasses.replace(lazy, lazy_adam=False)
    table = data.draw(matrices(shape))
    slots = data.draw(slot_states(lazy, shape))
    steps = data.draw(steps_over(shape[0], shape[1], every_row=True))
    lazy_table, lazy_slots = _train(lazy, table, slots, steps)
    dense_table, dense_slots = _train(dense, table, slots, steps)
    np.testing.assert_allclose(lazy_table, dense_table, rtol=1e-6, atol=1e-7)
    for name in slots:
        np.testing.assert_allclose(lazy_slots[name], dense_slots[name], rtol=1e-6, atol=1e-7)


@PROPERTY
@given(data=st.data(), shape=shapes, lr=learning_rates, step=st.integers(0, 10**6))
def test_sgd_step_is_exactly_minus_lr_times_gradient(data, shape, lr, step):
    rows = data.draw(matrices(shape))
    grads = data.draw(matrices(shape))
    new_rows, slots = apply_update(SGDSpec(learning_rate=lr), rows, {}, grads, step)
    np.testing.assert_array_equal(new_rows, rows - np.float32(lr) * grads)
    assert slots == {}


@PROPERTY
@given(data=st.data(), shape=shapes, lr=learning_rates, accumulator=st.floats(1e8, 1e12))
def test_adagrad_with_a_huge_initial_accumulator_barely_moves(data, shape, lr, accumulator):
    spec = AdagradSpec(learning_rate=lr, initial_accumulator=accumulator)
    rows = data.draw(matrices(shape))
    grads = data.draw(matrices(shape))
    new_rows, _ = apply_update(spec, rows, initial_slots(spec, shape), grads, 0)
    moved = np.abs(new_rows.astype(np.float64) - rows)
    bound = lr * np.abs(grads.astype(np.float64)) / np.sqrt(accumulator)  # <= 5e-4
    assert (moved <= bound * 1.001 + np.spacing(np.abs(rows))).all()


@PROPERTY
@given(
    data=st.data(),
    shape=shapes,
    low=st.floats(-3.0, 0.0),
    high=st.floats(0.0, 3.0),
    sides=st.sampled_from(["both", "min", "max"]),
)
def test_weight_clipping_bounds_every_row(data, shape, low, high, sides):
    spec = data.draw(optimizers())
    spec = dataclasses.replace(
        spec, clip_weight_min=None if sides == "max" else low, clip_weight_max=None if sides == "min" else high
    )
    rows = data.draw(matrices(shape))
    grads = data.draw(matrices(shape))
    slots = data.draw(slot_states(spec, shape))
    new_rows, _ = apply_update(spec, rows, slots, grads, data.draw(st.integers(0, 100)))
    if sides != "max":
        assert (new_rows >= np.float32(low)).all()
    if sides != "min":
        assert (new_rows <= np.float32(high)).all()


@PROPERTY
@given(data=st.data(), shape=shapes, lr=learning_rates, low=st.floats(-3.0, 0.0), high=st.floats(0.0, 3.0))
def test_gradient_clipping_bounds_every_applied_gradient(data, shape, lr, low, high):
    rows = data.draw(matrices(shape))
    grads = data.draw(matrices(shape, -10.0, 10.0))
    # SGD: each entry moves by exactly lr * clip(g), so by at most lr * max(|low|, |high|).
    sgd = SGDSpec(learning_rate=lr, clip_gradient_min=low, clip_gradient_max=high)
    new_rows, _ = apply_update(sgd, rows, {}, grads, 0)
    limit = np.float32(lr) * np.float32(max(abs(low), abs(high)))
    moved = np.abs(new_rows.astype(np.float64) - rows)
    assert (moved <= limit * (1 + 1e-6) + np.spacing(np.abs(rows))).all()
    clipped = np.clip(grads, np.float32(low), np.float32(high))
    np.testing.assert_array_equal(new_rows, rows - np.float32(lr) * clipped)
    # Adagrad: the accumulator grows by the clipped gradient squared.
    adagrad = AdagradSpec(learning_rate=lr, clip_gradient_min=low, clip_gradient_max=high)
    _, slots = apply_update(adagrad, rows, initial_slots(adagrad, shape), grads, 0)
    growth = slots["accumulators"].astype(np.float64) - np.float32(0.1)
    assert (growth <= max(low * low, high * high) * (1 + 1e-5) + 1e-6).all()


@PROPERTY
@given(
    data=st.data(),
    shape=shapes,
    lr=learning_rates,
    factor=st.floats(0.0, 0.9),
    times_lr=st.booleans(),
    n_steps=st.integers(1, 8),
)
def test_weight_decay_with_zero_gradient_shrinks_rows_geometrically(data, shape, lr, factor, times_lr, n_steps):
    spec = SGDSpec(learning_rate=lr, weight_decay_factor=factor, multiply_weight_decay_factor_by_learning_rate=times_lr)
    decay = factor * lr if times_lr else factor
    rows0 = data.draw(matrices(shape))
    rows = rows0
    zeros = np.zeros(shape, np.float32)
    for step in range(n_steps):
        rows, _ = apply_update(spec, rows, {}, zeros, step)
    expected = (1.0 - decay) ** n_steps * rows0.astype(np.float64)
    np.testing.assert_allclose(rows, expected, rtol=1e-5, atol=1e-30)


@PROPERTY
@given(data=st.data(), shape=shapes)
def test_duplicate_ids_equal_one_id_with_the_summed_gradient(data, shape):
    spec = data.draw(optimizers())
    num_rows, dim = shape
    table = data.draw(matrices(shape))
    slots = data.draw(slot_states(spec, shape))
    ids = np.array(data.draw(st.lists(st.integers(0, num_rows - 1), min_size=1, max_size=8)))
    grads = data.draw(matrices((len(ids), dim)))
    with_duplicates = apply_sparse_update(spec, table, slots, ids, grads, 3)
    # The same gradients added up per id by hand (in order of appearance, float32).
    summed = {}
    for row_id, grad in zip(ids.tolist(), grads):
        summed[row_id] = summed[row_id] + grad if row_id in summed else grad.copy()
    unique = np.array(list(summed), dtype=np.int64)
    once_each = apply_sparse_update(spec, table, slots, unique, np.stack(list(summed.values())), 3)
    np.testing.assert_allclose(with_duplicates[0], once_each[0], rtol=1e-6, atol=1e-7)
    for name in slots:
        np.testing.assert_allclose(with_duplicates[1][name], once_each[1][name], rtol=1e-6, atol=1e-7)


@PROPERTY
@given(data=st.data(), shape=shapes, rates=st.lists(learning_rates, min_size=1, max_size=5))
def test_learning_rate_function_of_the_step_is_honoured_per_step(data, shape, rates):
    scheduled = data.draw(optimizers(learning_rate=lambda step: rates[step]))
    if scheduled.kind == "ftrl":
        scheduled = dataclasses.replace(scheduled, multiply_linear_by_learning_rate=True)
    table = data.draw(matrices(shape))
    slots = data.draw(slot_states(scheduled, shape))
    fixed_table, fixed_slots = table, slots
    for step, rate in enumerate(rates):
        grads = data.draw(matrices(shape))
        table, slots = apply_update(scheduled, table, slots, grads, step)
        fixed = dataclasses.replace(scheduled, learning_rate=rate)
        fixed_table, fixed_slots = apply_update(fixed, fixed_table, fixed_slots, grads, step)
        np.testing.assert_array_equal(table, fixed_table)
        for name in slots:
            np.testing.assert_array_equal(slots[name], fixed_slots[name])


@PROPERTY
@given(data=st.data(), shape=shapes, step=st.integers(0, 100))
def test_apply_update_never_mutates_its_inputs(data, shape, step):
    spec = data.draw(optimizers())
    rows = data.draw(matrices(shape))
    grads = data.draw(matrices(shape))
    slots = data.draw(slot_states(spec, shape))
    originals = (rows.copy(), grads.copy(), {k: v.copy() for k, v in slots.items()})
    for array in (rows, grads, *slots.values()):
        array.flags.writeable = False  # any in-place write would raise
    new_rows, new_slots = apply_update(spec, rows, slots, grads, step)
    np.testing.assert_array_equal(rows, originals[0])
    np.testing.assert_array_equal(grads, originals[1])
    assert sorted(new_slots) == sorted(slots)
    for name in slots:
        np.testing.assert_array_equal(slots[name], originals[2][name])
    inputs = (rows, grads, *slots.values())
    for output in (new_rows, *new_slots.values()):
        assert output.dtype == np.float32 and output.shape == shape
        assert not any(np.shares_memory(output, x) for x in inputs)


@PROPERTY
@given(data=st.data(), shape=shapes, lr=st.floats(0.05, 1.0))
def test_ftrl_linear_times_learning_rate_agrees_with_standard_for_a_constant_lr(data, shape, lr):
    standard = data.draw(optimizers(kinds=["ftrl"], with_shared_options=False, learning_rate=lr))
    standard = dataclasses.replace(standard, multiply_linear_by_learning_rate=False)
    scaled = dataclasses.replace(standard, multiply_linear_by_learning_rate=True)
    table = data.draw(matrices(shape))
    steps = data.draw(steps_over(shape[0], shape[1]))
    table_a, slots_a = _train(standard, table, initial_slots(standard, shape), steps)
    table_b, slots_b = _train(scaled, table, initial_slots(scaled, shape), steps)
    np.testing.assert_allclose(table_a, table_b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(slots_a["accumulators"], slots_b["accumulators"], rtol=1e-6)
    np.testing.assert_allclose(np.float32(lr) * slots_a["linears"], slots_b["linears"], rtol=1e-4, atol=1e-5)
