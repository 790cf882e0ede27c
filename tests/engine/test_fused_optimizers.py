"""The fused kernels of AdagradMomentum, FTRL, Momentum, RMSProp, ProximalAdagrad and non-lazy Adam
give the numpy reference's bits (hypothesis).

`optimizers.apply_update` is the specification. Each fused kernel does the
same float32 operations in the same order, so the rows and slots it writes
in place are compared bit for bit (`_assert_same_bits`), not to a
tolerance. Rows outside the step must not change, except under non-lazy
Adam, where every row is updated with a zero gradient as the numpy engine
does. Skipped when numba is not installed (CI installs the `fast` extra).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .fast_only import require_fast_kernels

require_fast_kernels()
from tpu_embedding_shim.engine.engine import Engine  # noqa: E402
from tpu_embedding_shim.engine.fast import fused  # noqa: E402
from tpu_embedding_shim.engine.optimizers import apply_update, initial_slots, touches_all_rows  # noqa: E402
from tpu_embedding_shim.spec import (  # noqa: E402
    AdagradMomentumSpec,
    AdagradSpec,
    AdamSpec,
    EmbeddingSpec,
    FeatureSpec,
    FtrlSpec,
    MomentumSpec,
    ProximalAdagradSpec,
    RMSPropSpec,
    RowIdInitializer,
    TableSpec,
)

from .strategies import assert_same_bits as _assert_same_bits  # noqa: E402
from .strategies import fused_optimizers, row_id_spec, schedule, step_both  # noqa: E402

SETTINGS = settings(max_examples=100, deadline=None)
_NON_NEGATIVE = ("accumulators", "ms", "velocities")


def _slots(optimizer, shape, rng, fresh):
    """Valid slots: the initial values (`fresh`), or random ones; accumulators, `ms` and velocities >= 0
    (> 0 for the Adagrad kinds, whose update divides by the root; FTRL keeps a few zeros)."""
    slots = initial_slots(optimizer, shape)
    if fresh:
        return slots
    for name in slots:
        values = rng.standard_normal(shape).astype(np.float32)
        if name in _NON_NEGATIVE:
            values = np.abs(values) + np.float32(0.01)
            if isinstance(optimizer, (FtrlSpec, AdagradMomentumSpec)):
                values[rng.random(shape) < 0.1] = 0.0
        slots[name] = values
    return slots


def _segments(rng, ids, grads, parts):
    """`ids` / `grads` split into `parts` segments laid out as the engine's scratch: each in its own
    region, with unused rows between them (ids -1, gradients NaN: reading one would show)."""
    cuts = np.sort(rng.integers(0, ids.shape[0] + 1, parts - 1))
    bounds = np.concatenate([[0], cuts, [ids.shape[0]]])
    gaps = rng.integers(0, 3, parts)
    size = ids.shape[0] + int(gaps.sum())
    buffer_ids = np.full(size, -1, np.int64)
    buffer_grads = np.full((size, grads.shape[1]), np.nan, np.float32)
    starts, stops = np.zeros(parts, np.int64), np.zeros(parts, np.int64)
    at = 0
    for r in range(parts):
        at += int(gaps[r])
        n = int(bounds[r + 1] - bounds[r])
        buffer_ids[at : at + n] = ids[bounds[r] : bounds[r + 1]]
        buffer_grads[at : at + n] = grads[bounds[r] : bounds[r + 1]]
        starts[r], stops[r] = at, at + n
        at += n
    return buffer_ids, buffer_grads, starts, stops


def _numpy_engine_update(optimizer, table, slots, ids, grads, step):
    """What the numpy engine writes (`Engine._plan_update`): the touched rows, or the whole table with
    a zero gradient for the rows not in the step (non-lazy Adam)."""
    table, slots = table.copy(), {k: v.copy() for k, v in slots.items()}
    if touches_all_rows(optimizer):
        dense = np.zeros_like(table)
        dense[ids] = grads
        ids, grads = np.arange(table.shape[0]), dense
    if ids.size:
        rows, new_slots = apply_update(optimizer, table[ids], {k: v[ids] for k, v in slots.items()}, grads, step)
        table[ids] = rows
        for name, values in new_slots.items():
            slots[name][ids] = values
    return table, slots


@SETTINGS
@given(
    optimizer=fused_optimizers(),
    vocab=st.integers(1, 60),
    dim=st.integers(1, 9),
    touched=st.floats(0, 1),
    parts=st.integers(1, 4),
    step=st.integers(0, 5),
    fresh=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_each_fused_optimizer_gives_the_reference_bits(optimizer, vocab, dim, touched, parts, step, fresh, seed):
    assert fused.fusable(optimizer)
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    slots = _slots(optimizer, table.shape, rng, fresh)
    ids = rng.permutation(vocab)[: round(touched * vocab)].astype(np.int64)
    grads = rng.standard_normal((ids.shape[0], dim)) * rng.choice([1e-4, 1.0, 3.0], (ids.shape[0], 1))
    grads = grads.astype(np.float32)
    grads[rng.random(grads.shape) < 0.1] = 0.0  # zero gradients (clipping may move them)
    want_table, want_slots = _numpy_engine_update(optimizer, table, slots, ids, grads, step)
    got_table, got_slots = table.copy(), {k: v.copy() for k, v in slots.items()}
    fused.apply(optimizer, optimizer.learning_rate_at(step), got_table, got_slots, *_segments(rng, ids, grads, parts))
    _assert_same_bits(got_table, want_table)  # the whole table: untouched rows unchanged (or all updated)
    for name in slots:
        _assert_same_bits(got_slots[name], want_slots[name])


def test_non_lazy_adam_moves_every_row_even_in_an_empty_step():
    optimizer = AdamSpec(
        learning_rate=0.1,
        lazy_adam=False,
        clip_gradient_min=0.05,
        clip_gradient_max=1.0,
        weight_decay_factor=0.1,
        clip_weight_max=4.5,
    )
    rng = np.random.default_rng(0)
    table = rng.standard_normal((5000, 4)).astype(np.float32) * 3  # more rows than one block of `dense_adam`
    slots = _slots(optimizer, table.shape, rng, fresh=False)
    none = np.zeros(0, np.int64)
    want_table, want_slots = _numpy_engine_update(optimizer, table, slots, none, np.zeros((0, 4), np.float32), 0)
    got_table, got_slots = table.copy(), {k: v.copy() for k, v in slots.items()}
    fused.apply(
        optimizer,
        0.1,
        got_table,
        got_slots,
        none,
        np.zeros((1, 4), np.float32),
        np.zeros(2, np.int64),
        np.zeros(2, np.int64),
    )
    assert np.all(got_table != table)
    _assert_same_bits(got_table, want_table)
    for name in slots:
        _assert_same_bits(got_slots[name], want_slots[name])


# Per optimizer, its special cases: options that change the formula, and every shared option.
_SHARED = dict(
    clip_gradient_min=-0.5,
    clip_gradient_max=0.6,
    weight_decay_factor=0.05,
    multiply_weight_decay_factor_by_learning_rate=True,
    clip_weight_min=-20.0,
    clip_weight_max=20.0,
)
REPRESENTATIVES = {
    "adagrad_momentum": AdagradMomentumSpec(learning_rate=0.1, momentum=0.9, epsilon=1e-3, **_SHARED),
    "adagrad_momentum_power": AdagradMomentumSpec(
        learning_rate=schedule, momentum=0.5, use_nesterov=True, exponent=1.7, beta2=0.9, epsilon=1e-3, **_SHARED
    ),
    "ftrl": FtrlSpec(
        learning_rate=0.2,
        l1_regularization_strength=0.01,
        l2_regularization_strength=0.1,
        beta=0.5,
        initial_linear_value=0.1,
        **_SHARED,
    ),
    "ftrl_power_by_lr": FtrlSpec(
        learning_rate=schedule,
        learning_rate_power=-0.7,
        initial_accumulator_value=0.0,
        l1_regularization_strength=0.01,
        multiply_linear_by_learning_rate=True,
        allow_zero_accumulator=True,
        **_SHARED,
    ),
    "momentum": MomentumSpec(learning_rate=0.1, momentum=0.9, **_SHARED),
    "momentum_nesterov": MomentumSpec(learning_rate=schedule, momentum=0.5, use_nesterov=True, **_SHARED),
    "rmsprop": RMSPropSpec(learning_rate=schedule, rho=0.9, momentum=0.7, epsilon=1e-3, **_SHARED),
    "proximal_adagrad": ProximalAdagradSpec(
        learning_rate=0.3, l1_regularization_strength=0.05, l2_regularization_strength=0.3, **_SHARED
    ),
    "dense_adam": AdamSpec(learning_rate=schedule, lazy_adam=False, **_SHARED),
    "dense_adam_outside": AdamSpec(
        learning_rate=0.1, lazy_adam=False, sum_inside_sqrt=False, beta1=0.5, **dict(_SHARED, clip_gradient_min=0.01)
    ),
}


def test_fused_optimizers_and_what_stays_on_the_numpy_path():
    for optimizer in REPRESENTATIVES.values():
        assert fused.fusable(optimizer)
    assert fused.fusable(AdamSpec(learning_rate=0.1, lazy_adam=True))
    assert fused.fusable(FtrlSpec(learning_rate=schedule, multiply_linear_by_learning_rate=True))
    assert fused.fusable(FtrlSpec(learning_rate=0.1))
    # The paper form of FTRL raises for lr == 0 before any write; a fused update runs after the checks.
    assert not fused.fusable(FtrlSpec(learning_rate=schedule))
    assert not fused.fusable(FtrlSpec(learning_rate=0.0))
    assert not fused.fusable(None)

    class MyAdagrad(AdagradSpec):
        pass

    assert not fused.fusable(MyAdagrad(learning_rate=0.1))


def test_a_power_is_numpys_float32_power():
    """FTRL with learning_rate_power -0.7 on many values: numpy's float32 power (SIMD on some CPUs)
    and libm's powf differ by an ulp on some inputs; the fused update takes numpy's."""
    optimizer = FtrlSpec(learning_rate=0.3, learning_rate_power=-0.7, l1_regularization_strength=0.01)
    rng = np.random.default_rng(1)
    table = rng.standard_normal((20000, 8)).astype(np.float32)
    slots = _slots(optimizer, table.shape, rng, fresh=False)
    ids = rng.permutation(20000)[:15000].astype(np.int64)
    grads = rng.standard_normal((15000, 8)).astype(np.float32)
    want_table, want_slots = _numpy_engine_update(optimizer, table, slots, ids, grads, 0)
    fused.apply(optimizer, 0.3, table, slots, ids, grads, np.array([0, 7000]), np.array([7000, 15000]))
    _assert_same_bits(table, want_table)
    _assert_same_bits(slots["linears"], want_slots["linears"])


# Engine level: the fast engine and the numpy engine, step by step.


def _assert_engines_agree(fast, slow):
    _assert_same_bits(fast.table("t"), slow.table("t"))
    for name, values in slow.slots("t").items():
        _assert_same_bits(fast.slots("t")[name], values)


@pytest.mark.parametrize("pipelining", [False, True])
@pytest.mark.parametrize("name", sorted(REPRESENTATIVES))
def test_fast_engine_gives_the_numpy_engines_bits_when_ids_do_not_repeat(name, pipelining):
    """Each id at most once per step (one feature, `sum`): the summed gradients are the same bits on
    both engines, so, step after step, the tables and slots must be too (with pipelining the fast
    engine updates through numpy)."""
    vocab, dim = 40, 5
    spec = row_id_spec(
        REPRESENTATIVES[name], vocab=vocab, dim=dim, features="a", pipeline_execution_with_tensor_core=pipelining
    )
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(7)
    for _ in range(4):
        ids = rng.permutation(vocab)[:9]
        step_both(fast, slow, {"a": [list(ids[:6]), list(ids[6:9])]}, {"a": rng.standard_normal((2, dim))})
        _assert_engines_agree(fast, slow)


def test_fast_engine_refuses_ftrl_learning_rate_zero_before_any_change():
    """FTRL's paper form with a schedule that returns 0 stays on the numpy path, which raises before
    writing: no table of the step changes (a fused update could not raise in time)."""
    optimizer = FtrlSpec(learning_rate=lambda step: 0.1 if step == 0 else 0.0)
    spec = EmbeddingSpec(
        tables=(
            TableSpec(name="t", vocabulary_size=8, dim=2, combiner="sum", initializer=RowIdInitializer()),
            TableSpec(
                name="u",
                vocabulary_size=8,
                dim=2,
                combiner="sum",
                initializer=RowIdInitializer(),
                optimizer=AdagradSpec(learning_rate=0.1),
            ),
        ),
        features=(FeatureSpec(name="f", table="u", num_buckets=8), FeatureSpec(name="g", table="t", num_buckets=8)),
        optimizer=optimizer,
    )
    engine = Engine(spec, kernels="fast")
    for step in range(2):
        result = engine.forward({"f": [[1, 2]], "g": [[3]]})
        before = engine.state()
        if step == 0:
            engine.apply_gradients(result, {"f": np.ones((1, 2)), "g": np.ones((1, 2))})
            continue
        with pytest.raises(ValueError, match="learning_rate"):
            engine.apply_gradients(result, {"f": np.ones((1, 2)), "g": np.ones((1, 2))})
        for name, arrays in engine.state().items():
            for key, values in arrays.items():
                _assert_same_bits(values, before[name][key])
