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

pytest.importorskip("numba", reason="needs numba: the `fast` extra, pip install -e '.[fast]'")

from tpu_embedding_shim.engine import fast as _fast

if not _fast.available():
    pytest.skip(f"fast kernels off: {_fast.unavailable_reason()}", allow_module_level=True)
from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.engine.fast import fused
from tpu_embedding_shim.engine.optimizers import apply_update, initial_slots, touches_all_rows
from tpu_embedding_shim.spec import (
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

from .strategies import assert_same_bits as _assert_same_bits
from .strategies import shared_options, step_both, step_inputs

SETTINGS = settings(max_examples=100, deadline=None)
KINDS = ["adagrad_momentum", "ftrl", "momentum", "rmsprop", "proximal_adagrad", "dense_adam"]


def _schedule(step):
    return 0.3 / (1 + step)


@st.composite
def optimizers(draw, kind=None):
    """One of the newly fused optimizers, over its own options, the shared ones, and a constant or
    scheduled learning rate."""
    kind = kind or draw(st.sampled_from(KINDS))
    lr = draw(st.sampled_from([0.1, 0.5, 0.0, _schedule]))
    opts = dict(learning_rate=lr, **shared_options(draw))
    if kind == "adagrad_momentum":
        return AdagradMomentumSpec(
            momentum=draw(st.sampled_from([0.0, 0.5, 0.9])),
            use_nesterov=draw(st.booleans()),
            exponent=draw(st.sampled_from([2.0, 2.0, 1.0, 1.7, 3.0])),
            beta2=draw(st.sampled_from([1.0, 0.9, 0.0])),
            epsilon=draw(st.sampled_from([1e-10, 1e-3, 0.5])),
            **opts,
        )
    if kind == "ftrl":
        by_lr = draw(st.booleans())
        if not by_lr and (lr == 0.0 or callable(lr)):  # the paper form: a constant lr > 0 (see `fusable`)
            opts["learning_rate"] = 0.2
        return FtrlSpec(
            learning_rate_power=draw(st.sampled_from([-0.5, -0.5, 0.0, -0.25, -1.0, -0.7])),
            initial_accumulator_value=draw(st.sampled_from([0.0, 0.1, 1.0])),
            l1_regularization_strength=draw(st.sampled_from([0.0, 0.01, 0.5])),
            l2_regularization_strength=draw(st.sampled_from([0.0, 0.1])),
            beta=draw(st.sampled_from([0.0, 0.5])),
            multiply_linear_by_learning_rate=by_lr,
            allow_zero_accumulator=draw(st.booleans()),
            initial_linear_value=draw(st.sampled_from([0.0, 0.2])),
            **opts,
        )
    if kind == "momentum":
        return MomentumSpec(momentum=draw(st.sampled_from([0.0, 0.5, 0.9])), use_nesterov=draw(st.booleans()), **opts)
    if kind == "rmsprop":
        return RMSPropSpec(
            rho=draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])),
            momentum=draw(st.sampled_from([0.0, 0.7])),
            epsilon=draw(st.sampled_from([1e-10, 1e-3])),
            **opts,
        )
    if kind == "proximal_adagrad":
        return ProximalAdagradSpec(
            initial_accumulator=draw(st.sampled_from([0.1, 1.0])),
            l1_regularization_strength=draw(st.sampled_from([0.0, 0.05, 1.0])),
            l2_regularization_strength=draw(st.sampled_from([0.0, 0.3])),
            **opts,
        )
    return AdamSpec(
        lazy_adam=False,
        beta1=draw(st.sampled_from([0.9, 0.0, 0.5])),
        beta2=draw(st.sampled_from([0.999, 0.9])),
        epsilon=draw(st.sampled_from([1e-8, 1e-3])),
        sum_inside_sqrt=draw(st.booleans()),
        **opts,
    )


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
    optimizer=optimizers(),
    vocab=st.integers(1, 60),
    dim=st.integers(1, 9),
    touched=st.floats(0, 1),
    parts=st.integers(1, 4),
    step=st.integers(0, 5),
    fresh=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_each_new_fused_optimizer_gives_the_reference_bits(optimizer, vocab, dim, touched, parts, step, fresh, seed):
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
        learning_rate=_schedule, momentum=0.5, use_nesterov=True, exponent=1.7, beta2=0.9, epsilon=1e-3, **_SHARED
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
        learning_rate=_schedule,
        learning_rate_power=-0.7,
        initial_accumulator_value=0.0,
        l1_regularization_strength=0.01,
        multiply_linear_by_learning_rate=True,
        allow_zero_accumulator=True,
        **_SHARED,
    ),
    "momentum": MomentumSpec(learning_rate=0.1, momentum=0.9, **_SHARED),
    "momentum_nesterov": MomentumSpec(learning_rate=_schedule, momentum=0.5, use_nesterov=True, **_SHARED),
    "rmsprop": RMSPropSpec(learning_rate=_schedule, rho=0.9, momentum=0.7, epsilon=1e-3, **_SHARED),
    "proximal_adagrad": ProximalAdagradSpec(
        learning_rate=0.3, l1_regularization_strength=0.05, l2_regularization_strength=0.3, **_SHARED
    ),
    "dense_adam": AdamSpec(learning_rate=_schedule, lazy_adam=False, **_SHARED),
    "dense_adam_outside": AdamSpec(
        learning_rate=0.1, lazy_adam=False, sum_inside_sqrt=False, beta1=0.5, **dict(_SHARED, clip_gradient_min=0.01)
    ),
}


def test_fused_optimizers_and_what_stays_on_the_numpy_path():
    for optimizer in REPRESENTATIVES.values():
        assert fused.fusable(optimizer)
    assert fused.fusable(AdamSpec(learning_rate=0.1, lazy_adam=True))
    assert fused.fusable(FtrlSpec(learning_rate=_schedule, multiply_linear_by_learning_rate=True))
    assert fused.fusable(FtrlSpec(learning_rate=0.1))
    # The paper form of FTRL raises for lr == 0 before any write; a fused update runs after the checks.
    assert not fused.fusable(FtrlSpec(learning_rate=_schedule))
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


def _spec(optimizer, vocab, dim, combiner="sum", pipelining=False, num_shards=1, strategy="div", only_a=False):
    features = [FeatureSpec(name="a", table="t", num_buckets=vocab)]
    if not only_a:
        features += [
            FeatureSpec(name="b", table="t", num_buckets=vocab, weight_key="b_w"),
            FeatureSpec(name="s", table="t", num_buckets=vocab, max_sequence_length=3),
        ]
    return EmbeddingSpec(
        tables=(
            TableSpec(name="t", vocabulary_size=vocab, dim=dim, combiner=combiner, initializer=RowIdInitializer()),
        ),
        features=tuple(features),
        optimizer=optimizer,
        pipeline_execution_with_tensor_core=pipelining,
        num_shards=num_shards,
        partition_strategy=strategy,
    )


def _assert_engines_agree(fast, slow):
    _assert_same_bits(fast.table("t"), slow.table("t"))
    for name, values in slow.slots("t").items():
        _assert_same_bits(fast.slots("t")[name], values)


@st.composite
def engine_cases(draw):
    optimizer = draw(optimizers())
    vocab, dim = draw(st.integers(2, 25)), draw(st.integers(1, 6))
    spec = _spec(
        optimizer,
        vocab,
        dim,
        combiner=draw(st.sampled_from(["sum", "mean", "sqrtn"])),
        pipelining=draw(st.booleans()),
        num_shards=draw(st.sampled_from([1, 1, 2, 3])),
        strategy=draw(st.sampled_from(["div", "mod"])),
    )
    return spec, draw(st.integers(0, 999))


@settings(max_examples=30, deadline=None)
@given(case=engine_cases())
def test_fast_engine_equals_numpy_engine_for_the_new_fused_optimizers(case):
    """Duplicate ids, two features and a sequence feature on one table: both engines sum a table's
    entries in the same order (running sums, feature after feature), so they agree bit for bit."""
    spec, seed = case
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(seed)
    table = spec.tables[0]
    for _ in range(3):
        step_both(fast, slow, *step_inputs(rng, table.vocabulary_size, table.dim))
    _assert_engines_agree(fast, slow)


@pytest.mark.parametrize("pipelining", [False, True])
@pytest.mark.parametrize("name", sorted(REPRESENTATIVES))
def test_fast_engine_gives_the_numpy_engines_bits_when_ids_do_not_repeat(name, pipelining):
    """Each id at most once per step (one feature, `sum`): the summed gradients are the same bits on
    both engines, so, step after step, the tables and slots must be too (with pipelining the fast
    engine updates through numpy)."""
    vocab, dim = 40, 5
    spec = _spec(REPRESENTATIVES[name], vocab, dim, pipelining=pipelining, only_a=True)
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
