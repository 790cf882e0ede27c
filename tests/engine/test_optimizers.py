"""Optimizer kernels: one step on small arrays, numbers worked out by hand.

Each test writes the arithmetic in a comment, with inputs picked so the
result is a short decimal; the kernels compute in float32, hence
`assert_allclose` with float32 tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from tpu_embedding_shim.engine.optimizers import (
    apply_sequentially,
    apply_sparse_update,
    apply_update,
    bias_corrected_learning_rate,
    formulas,
    initial_slots,
    optimizer_for,
    sum_duplicates,
    touches_all_rows,
)
from tpu_embedding_shim.spec import (
    AdagradMomentumSpec,
    AdagradSpec,
    AdamSpec,
    FtrlSpec,
    MomentumSpec,
    ProximalAdagradSpec,
    RMSPropSpec,
    SGDSpec,
)


def f32(*rows):
    return np.array(rows, dtype=np.float32)


def close(actual, expected, rtol=1e-6, atol=1e-7):
    np.testing.assert_allclose(actual, np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- SGD


def test_sgd_one_step():
    # w - lr g = [1 - 0.5*0.5, 2 - 0.5*(-1)] = [0.75, 2.5]
    rows, slots = apply_update(SGDSpec(learning_rate=0.5), f32([1.0, 2.0]), {}, f32([0.5, -1.0]), step=0)
    close(rows, [[0.75, 2.5]])
    assert slots == {}
    assert rows.dtype == np.float32


# ---------------------------------------------------------------- Adagrad


def test_adagrad_one_step_divides_by_the_updated_accumulator():
    # a = 0.75 + 0.5**2 = 1 -> w = 1 - 0.1*0.5/1 = 0.95
    # a = 3 + 1**2 = 4      -> w = 2 - 0.1*1/2 = 1.95
    spec = AdagradSpec(learning_rate=0.1)
    rows, slots = apply_update(spec, f32([1.0, 2.0]), {"accumulators": f32([0.75, 3.0])}, f32([0.5, 1.0]), step=0)
    close(rows, [[0.95, 1.95]])
    close(slots["accumulators"], [[1.0, 4.0]])


def test_adagrad_zero_gradient_changes_nothing():
    spec = AdagradSpec(learning_rate=0.1)
    rows, slots = apply_update(spec, f32([1.0, -2.0]), {"accumulators": f32([0.1, 0.1])}, f32([0.0, 0.0]), step=3)
    close(rows, [[1.0, -2.0]])
    close(slots["accumulators"], [[0.1, 0.1]])


# ---------------------------------------------------------------- AdagradMomentum


def test_adagrad_momentum_plain():
    # beta2 = 1: a = 0 + 2**2 = 4; s = (4 + 1e-10)**-0.5 * 2 = 1 (to 1e-11)
    # m = 0.5*0 + 1 = 1; w = 1 - 0.1*1 = 0.9
    spec = AdagradMomentumSpec(learning_rate=0.1, momentum=0.5)
    slots = initial_slots(spec, (1, 1))
    rows, new = apply_update(spec, f32([1.0]), slots, f32([2.0]), step=0)
    close(rows, [[0.9]])
    close(new["accumulators"], [[4.0]])
    close(new["momenta"], [[1.0]])


def test_adagrad_momentum_nesterov_with_existing_momentum():
    # a = 0 + 4 = 4; s = 1; m = 0.5*2 + 1 = 2; update = 0.5*2 + 1 = 2
    # w = 1 - 0.1*2 = 0.8
    spec = AdagradMomentumSpec(learning_rate=0.1, momentum=0.5, use_nesterov=True)
    rows, new = apply_update(spec, f32([1.0]), {"accumulators": f32([0.0]), "momenta": f32([2.0])}, f32([2.0]), step=0)
    close(rows, [[0.8]])
    close(new["momenta"], [[2.0]])


def test_adagrad_momentum_decaying_accumulator_and_exponent():
    # beta2 = 0.75: a = 0.75*12 + 0.25*2**2 = 10; exponent 4: s = (10+6)**-0.25 * 2 = 0.5*2 = 1
    # m = 0 + 1; w = 1 - 0.25*1 = 0.75
    spec = AdagradMomentumSpec(learning_rate=0.25, beta2=0.75, exponent=4.0, epsilon=6.0)
    rows, new = apply_update(spec, f32([1.0]), {"accumulators": f32([12.0]), "momenta": f32([0.0])}, f32([2.0]), step=0)
    close(new["accumulators"], [[10.0]])
    close(rows, [[0.75]])


# ---------------------------------------------------------------- Adam


def test_adam_sum_inside_sqrt_default():
    # b1 = 0.5, b2 = 0.25: m = 0.5*2 = 1; v = 0.75*2**2 = 3
    # w = 1 - 0.2 * 1 / sqrt(3 + 1**2) = 1 - 0.2/2 = 0.9 (no bias correction)
    spec = AdamSpec(learning_rate=0.2, beta1=0.5, beta2=0.25, epsilon=1.0)
    assert spec.sum_inside_sqrt
    rows, new = apply_update(spec, f32([1.0]), initial_slots(spec, (1, 1)), f32([2.0]), step=0)
    close(new["momenta"], [[1.0]])
    close(new["velocities"], [[3.0]])
    close(rows, [[0.9]])


def test_adam_epsilon_outside_sqrt():
    # b1 = 0.5, b2 = 0.75: m = 0.5*2 = 1; v = 0.25*2**2 = 1
    # w = 1 - 0.2 * 1 / (sqrt(1) + 1) = 0.9
    spec = AdamSpec(learning_rate=0.2, beta1=0.5, beta2=0.75, epsilon=1.0, sum_inside_sqrt=False)
    rows, new = apply_update(spec, f32([1.0]), initial_slots(spec, (1, 1)), f32([2.0]), step=0)
    close(new["velocities"], [[1.0]])
    close(rows, [[0.9]])


def test_adam_zero_gradient_still_moves_a_row_with_momentum():
    # g = 0: m = 0.5*2 = 1; v = 0.75*4 = 3; w = 0 - 1 * 1/(sqrt(3) + 1e-12)
    spec = AdamSpec(learning_rate=1.0, beta1=0.5, beta2=0.75, epsilon=1e-12, sum_inside_sqrt=False)
    rows, new = apply_update(spec, f32([0.0]), {"momenta": f32([2.0]), "velocities": f32([4.0])}, f32([0.0]), step=0)
    close(new["momenta"], [[1.0]])
    close(new["velocities"], [[3.0]])
    close(rows, [[-1.0 / np.sqrt(3.0)]], rtol=1e-6)


def test_touches_all_rows_only_for_non_lazy_adam():
    assert touches_all_rows(AdamSpec(learning_rate=0.1, lazy_adam=False))
    assert not touches_all_rows(AdamSpec(learning_rate=0.1))
    for spec in (SGDSpec(learning_rate=0.1), AdagradSpec(learning_rate=0.1), FtrlSpec(learning_rate=0.1)):
        assert not touches_all_rows(spec)


def test_lazy_and_non_lazy_adam_differ_on_rows_not_in_the_step():
    table = f32([1.0], [1.0])
    slots = {"momenta": f32([0.0], [1.0]), "velocities": f32([0.0], [1.0])}
    lazy = AdamSpec(learning_rate=0.1)
    dense = AdamSpec(learning_rate=0.1, lazy_adam=False)
    lazy_table, lazy_slots = apply_sparse_update(lazy, table, slots, [0], f32([1.0]), 0)
    dense_table, dense_slots = apply_sparse_update(dense, table, slots, [0], f32([1.0]), 0)
    close(lazy_table[0], dense_table[0])
    close(lazy_table[1], [1.0])  # lazy: row 1 not in the step, untouched
    assert dense_table[1, 0] < 1.0  # non-lazy: m decays to 0.9 and row 1 moves
    close(dense_slots["momenta"][1], [0.9])
    close(lazy_slots["momenta"][1], [1.0])


def test_bias_corrected_learning_rate_first_steps():
    fn = bias_corrected_learning_rate(1.0, beta1=0.5, beta2=0.75)
    # t = 1: sqrt(1 - 0.75) / (1 - 0.5) = 0.5/0.5 = 1
    assert fn(0) == pytest.approx(1.0)
    # t = 2: sqrt(1 - 0.5625) / (1 - 0.25) = 0.6614378/0.75
    assert fn(1) == pytest.approx(np.sqrt(0.4375) / 0.75)
    scheduled = bias_corrected_learning_rate(lambda step: 2.0 * (step + 1), 0.5, 0.75)
    assert scheduled(1) == pytest.approx(4.0 * np.sqrt(0.4375) / 0.75)


# ---------------------------------------------------------------- FTRL


@pytest.mark.parametrize(
    "times_learning_rate,linear",
    [
        # a = 0 + 2**2 = 4; P = sqrt: dP = 2 - 0 = 2; lr = 0.5
        # linear = 0 + 2 - (2/0.5)*1 = -2
        # w = (clip(-2, -0.5, 0.5) + 2) / ((2 + 0)/0.5 + 2*0.25) = 1.5 / 4.5 = 1/3
        pytest.param(False, -2.0, id="standard_linear"),
        # linear = 0 + 0.5*2 - 2*1 = -1 (= lr * the standard linear)
        # w = (clip(-1, -0.25, 0.25) + 1) / (2 + 2*0.5*0.25 + 0) = 0.75 / 2.25 = 1/3
        pytest.param(True, -1.0, id="linear_times_learning_rate"),
    ],
)
def test_ftrl_one_step(times_learning_rate, linear):
    spec = FtrlSpec(
        learning_rate=0.5,
        initial_accumulator_value=0.0,
        l1_regularization_strength=0.5,
        l2_regularization_strength=0.25,
        multiply_linear_by_learning_rate=times_learning_rate,
    )
    rows, new = apply_update(spec, f32([1.0]), initial_slots(spec, (1, 1)), f32([2.0]), step=0)
    close(new["accumulators"], [[4.0]])
    close(new["linears"], [[linear]])
    close(rows, [[1.0 / 3.0]])


def test_ftrl_beta_in_the_denominator():
    # a: 0 -> 4, dP = 2, lr = 0.5, w0 = 0: linear = 2; l1 = 0
    # w = -2 / ((2 + 1)/0.5) = -1/3
    spec = FtrlSpec(learning_rate=0.5, initial_accumulator_value=0.0, beta=1.0)
    rows, _ = apply_update(spec, f32([0.0]), initial_slots(spec, (1, 1)), f32([2.0]), step=0)
    close(rows, [[-1.0 / 3.0]])


def test_ftrl_beta_equals_tensorflow_cpu_folding_into_l2():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(4, 3)).astype(np.float32)
    grads = rng.normal(size=(4, 3)).astype(np.float32)
    lr, beta, l2 = 0.3, 0.7, 0.1
    with_beta = FtrlSpec(learning_rate=lr, beta=beta, l2_regularization_strength=l2, l1_regularization_strength=0.05)
    folded = FtrlSpec(
        learning_rate=lr, l2_regularization_strength=l2 + beta / (2 * lr), l1_regularization_strength=0.05
    )
    a, _ = apply_update(with_beta, rows, initial_slots(with_beta, rows.shape), grads, 0)
    b, _ = apply_update(folded, rows, initial_slots(folded, rows.shape), grads, 0)
    close(a, b, rtol=1e-5, atol=1e-6)


def test_ftrl_l1_zeroes_small_linears():
    # a: 0.1 -> 0.11, lr_power 0: dP = 0, linear = 0 + 0.1 = 0.1 <= l1 = 0.5 -> w = 0
    spec = FtrlSpec(learning_rate=0.5, learning_rate_power=0.0, l1_regularization_strength=0.5)
    rows, new = apply_update(spec, f32([3.0]), initial_slots(spec, (1, 1)), f32([0.1]), step=0)
    close(rows, [[0.0]])
    close(new["linears"], [[0.1]])


def test_ftrl_zero_accumulator_and_zero_gradient_gives_zero_not_nan():
    spec = FtrlSpec(learning_rate=0.5, initial_accumulator_value=0.0, learning_rate_power=-0.25)
    with np.errstate(all="raise"):
        rows, new = apply_update(spec, f32([3.0, -1.0]), initial_slots(spec, (1, 2)), f32([0.0, 0.0]), 0)
    close(rows, [[0.0, 0.0]])
    assert np.isfinite(new["linears"]).all()


def test_ftrl_zero_learning_rate_needs_linear_times_learning_rate():
    spec = FtrlSpec(learning_rate=0.0)
    with pytest.raises(ValueError, match="multiply_linear_by_learning_rate=True"):
        apply_update(spec, f32([1.0]), initial_slots(spec, (1, 1)), f32([1.0]), 0)
    ok = FtrlSpec(learning_rate=0.0, multiply_linear_by_learning_rate=True)
    rows, _ = apply_update(ok, f32([1.0]), initial_slots(ok, (1, 1)), f32([1.0]), 0)
    assert np.isfinite(rows).all()


# ---------------------------------------------------------------- Momentum


def test_momentum_plain():
    # m = 0.5*1 + 2 = 2.5; w = 1 - 0.1*2.5 = 0.75
    spec = MomentumSpec(learning_rate=0.1, momentum=0.5)
    rows, new = apply_update(spec, f32([1.0]), {"momenta": f32([1.0])}, f32([2.0]), step=0)
    close(new["momenta"], [[2.5]])
    close(rows, [[0.75]])


def test_momentum_nesterov():
    # m = 2.5; w = 1 - 0.1*2 - 0.1*0.5*2.5 = 1 - 0.2 - 0.125 = 0.675
    spec = MomentumSpec(learning_rate=0.1, momentum=0.5, use_nesterov=True)
    rows, _ = apply_update(spec, f32([1.0]), {"momenta": f32([1.0])}, f32([2.0]), step=0)
    close(rows, [[0.675]])


# ---------------------------------------------------------------- RMSProp


def test_rmsprop_one_step():
    # ms = 0 + (4 - 0)*(1 - 0.75) = 1; mom = 0.5*0.2 + 0.1*2/sqrt(1 + 3) = 0.1 + 0.1 = 0.2
    # w = 1 - 0.2 = 0.8
    spec = RMSPropSpec(learning_rate=0.1, rho=0.75, momentum=0.5, epsilon=3.0)
    rows, new = apply_update(spec, f32([1.0]), {"ms": f32([0.0]), "mom": f32([0.2])}, f32([2.0]), 0)
    close(new["ms"], [[1.0]])
    close(new["mom"], [[0.2]])
    close(rows, [[0.8]])


# ---------------------------------------------------------------- ProximalAdagrad


def test_proximal_adagrad_uses_the_adaptive_rate_in_the_prox_terms():
    # a = 3 + 1 = 4; r = 0.5/sqrt(4) = 0.25; v = 1 - 0.25*1 = 0.75
    # w = sign(v) * max(0.75 - 0.25*1, 0) / (1 + 0.25*2) = 0.5/1.5 = 1/3
    spec = ProximalAdagradSpec(learning_rate=0.5, l1_regularization_strength=1.0, l2_regularization_strength=2.0)
    rows, new = apply_update(spec, f32([1.0]), {"accumulators": f32([3.0])}, f32([1.0]), 0)
    close(new["accumulators"], [[4.0]])
    close(rows, [[1.0 / 3.0]])


def test_proximal_adagrad_l1_shrinks_to_zero_and_keeps_sign():
    # a = 3 + 1 = 4, r = 0.25; v = [-0.1 + 0.25, 0.1 - 0.25] = [0.15, -0.15]
    # l1 = 1: |v| - 0.25*1 < 0 -> both 0
    spec = ProximalAdagradSpec(learning_rate=0.5, l1_regularization_strength=1.0)
    rows, _ = apply_update(spec, f32([-0.1, 0.1]), {"accumulators": f32([3.0, 3.0])}, f32([-1.0, 1.0]), 0)
    close(rows, [[0.0, 0.0]])


def test_proximal_adagrad_without_regularisation_is_adagrad():
    rows = f32([1.0, -2.0], [0.5, 0.25])
    grads = f32([0.3, -0.7], [1.5, 0.0])
    acc = {"accumulators": f32([0.1, 0.2], [0.3, 0.4])}
    a, sa = apply_update(ProximalAdagradSpec(learning_rate=0.3), rows, acc, grads, 0)
    b, sb = apply_update(AdagradSpec(learning_rate=0.3), rows, acc, grads, 0)
    close(a, b, rtol=1e-6)
    close(sa["accumulators"], sb["accumulators"])


# ---------------------------------------------------------------- shared options


def test_gradient_clipping_before_the_update():
    # g = clip([3, -3, 0.5], -1, 2) = [2, -1, 0.5]; w = 0 - 0.5*g
    spec = SGDSpec(learning_rate=0.5, clip_gradient_min=-1.0, clip_gradient_max=2.0)
    rows, _ = apply_update(spec, f32([0.0, 0.0, 0.0]), {}, f32([3.0, -3.0, 0.5]), 0)
    close(rows, [[-1.0, 0.5, -0.25]])


def adagrad_step(accumulator, gradient, **options):
    """One Adagrad step from w = 1 and the given accumulator: (w, accumulator) after it."""
    rows, new = apply_update(
        AdagradSpec(**options), f32([1.0]), {"accumulators": f32([accumulator])}, f32([gradient]), 0
    )
    return rows[0, 0], new["accumulators"][0, 0]


def test_gradient_clipping_feeds_the_clipped_gradient_into_the_slots():
    # g = clip(3, None, 1) = 1: a = 3 + 1 = 4, w = 1 - 0.5*1/2 = 0.75
    close(adagrad_step(3.0, 3.0, learning_rate=0.5, clip_gradient_max=1.0), [0.75, 4.0])


def test_weight_decay_before_the_update():
    # w = 2 - 0.25*2 = 1.5 (decay), then SGD: 1.5 - 0.1*1 = 1.4
    spec = SGDSpec(learning_rate=0.1, weight_decay_factor=0.25)
    rows, _ = apply_update(spec, f32([2.0]), {}, f32([1.0]), 0)
    close(rows, [[1.4]])


def test_weight_decay_times_learning_rate():
    # lambda' = 0.25*0.5 = 0.125: w = 2 - 0.25 = 1.75; SGD: 1.75 - 0.5*1 = 1.25
    spec = SGDSpec(learning_rate=0.5, weight_decay_factor=0.25, multiply_weight_decay_factor_by_learning_rate=True)
    rows, _ = apply_update(spec, f32([2.0]), {}, f32([1.0]), 0)
    close(rows, [[1.25]])


def test_weight_decay_is_decoupled_from_adagrad_slots():
    # decay: w = 1 - 0.5*1 = 0.5; the accumulator sees only g: a = 0.75 + 0.25 = 1
    # w = 0.5 - 0.1*0.5/1 = 0.45
    close(adagrad_step(0.75, 0.5, learning_rate=0.1, weight_decay_factor=0.5), [0.45, 1.0])


def test_weight_clipping_after_the_update():
    # SGD: [0.5, -0.5, 0.05] - 1*[-1, 1, 0] = [1.5, -1.5, 0.05] -> clip to [-1, 1]
    spec = SGDSpec(learning_rate=1.0, clip_weight_min=-1.0, clip_weight_max=1.0)
    rows, _ = apply_update(spec, f32([0.5, -0.5, 0.05]), {}, f32([-1.0, 1.0, 0.0]), 0)
    close(rows, [[1.0, -1.0, 0.05]])


def test_one_sided_weight_clipping():
    spec = SGDSpec(learning_rate=1.0, clip_weight_min=0.0)
    rows, _ = apply_update(spec, f32([0.5, 0.5]), {}, f32([1.0, -1.0]), 0)
    close(rows, [[0.0, 1.5]])


def test_learning_rate_function_gets_the_step():
    seen = []

    def schedule(step):
        seen.append(step)
        return 0.1 * step

    rows, _ = apply_update(SGDSpec(learning_rate=schedule), f32([1.0]), {}, f32([1.0]), step=5)
    assert seen == [5]
    close(rows, [[0.5]])


# ---------------------------------------------------------------- duplicates and sparse steps


def test_sum_duplicates():
    ids, grads = sum_duplicates(np.array([4, 1, 4, 4]), f32([1.0], [2.0], [3.0], [4.0]))
    assert ids.tolist() == [1, 4]
    close(grads, [[2.0], [8.0]])


def test_sparse_update_sums_repeated_ids_into_one_update():
    # Adagrad: row 0 gets g = 0.25 + 0.25 = 0.5 once: a = 0.75 + 0.25 = 1, w = 1 - 0.1*0.5 = 0.95
    # (applied one at a time it would move further; see the raw-kernel test)
    spec = AdagradSpec(learning_rate=0.1)
    table = f32([1.0], [2.0])
    slots = {"accumulators": f32([0.75], [0.1])}
    new_table, new_slots = apply_sparse_update(spec, table, slots, [0, 0], f32([0.25], [0.25]), 0)
    close(new_table, [[0.95], [2.0]])
    close(new_slots["accumulators"], [[1.0], [0.1]])


def test_apply_sequentially_applies_repeated_ids_one_after_another():
    # entry 1: a = 0.75 + 0.0625 = 0.8125, w = 1 - 0.1*0.25/sqrt(0.8125)
    # entry 2: a = 0.875,                  w -= 0.1*0.25/sqrt(0.875)
    spec = AdagradSpec(learning_rate=0.1)
    table = f32([1.0])
    slots = {"accumulators": f32([0.75])}
    new_table, new_slots = apply_sequentially(spec, table, slots, [0, 0], f32([0.25], [0.25]), 0)
    expected = 1.0 - 0.025 / np.sqrt(0.8125) - 0.025 / np.sqrt(0.875)
    close(new_table, [[expected]], rtol=1e-6)
    close(new_slots["accumulators"], [[0.875]])
    summed, _ = apply_sparse_update(spec, table, slots, [0, 0], f32([0.25], [0.25]), 0)
    assert new_table[0, 0] < summed[0, 0]  # the raw kernel moves the row further


def test_apply_sequentially_epsilon_only_for_adagrad():
    # a = 3 + 1 = 4; w = 1 - 0.5*1/(2 + 0.5) = 0.8
    spec = AdagradSpec(learning_rate=0.5)
    table, _ = apply_sequentially(spec, f32([1.0]), {"accumulators": f32([3.0])}, [0], f32([1.0]), 0, epsilon=0.5)
    close(table, [[0.8]])
    with pytest.raises(ValueError, match="epsilon"):
        apply_sequentially(SGDSpec(learning_rate=0.5), f32([1.0]), {}, [0], f32([1.0]), 0, epsilon=0.5)


# ---------------------------------------------------------------- initial slots and dispatch


@pytest.mark.parametrize(
    "spec, expected",
    [
        (None, {}),
        (SGDSpec(learning_rate=0.1), {}),
        (AdagradSpec(learning_rate=0.1, initial_accumulator=0.5), {"accumulators": 0.5}),
        (AdamSpec(learning_rate=0.1), {"momenta": 0.0, "velocities": 0.0}),
        (FtrlSpec(learning_rate=0.1, initial_accumulator_value=0.2), {"accumulators": 0.2, "linears": 0.0}),
        (AdagradMomentumSpec(learning_rate=0.1), {"accumulators": 0.0, "momenta": 0.0}),
        (MomentumSpec(learning_rate=0.1), {"momenta": 0.0}),
        (RMSPropSpec(learning_rate=0.1), {"ms": 0.0, "mom": 0.0}),
        (ProximalAdagradSpec(learning_rate=0.1), {"accumulators": 0.1}),
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, dict) else "",
)
def test_initial_slots(spec, expected):
    slots = initial_slots(spec, (3, 2))
    assert sorted(slots) == sorted(expected)
    for name, value in expected.items():
        assert slots[name].dtype == np.float32
        assert slots[name].shape == (3, 2)
        assert (slots[name] == np.float32(value)).all()


@pytest.mark.parametrize(
    "spec, function",
    [
        (SGDSpec(learning_rate=0.1), formulas.sgd),
        (AdagradSpec(learning_rate=0.1), formulas.adagrad),
        (AdagradMomentumSpec(learning_rate=0.1), formulas.adagrad_momentum),
        (AdamSpec(learning_rate=0.1), formulas.adam),
        (FtrlSpec(learning_rate=0.1), formulas.ftrl),
        (MomentumSpec(learning_rate=0.1), formulas.momentum),
        (RMSPropSpec(learning_rate=0.1), formulas.rmsprop),
        (ProximalAdagradSpec(learning_rate=0.1), formulas.proximal_adagrad),
    ],
    ids=lambda value: getattr(value, "__name__", type(value).__name__),
)
def test_the_registry_names_each_optimizers_formula(spec, function):
    assert optimizer_for(spec).formula is function


# ---------------------------------------------------------------- bad input


def test_unknown_optimizer_is_a_type_error():
    with pytest.raises(TypeError, match="optimizer"):
        apply_update(object(), f32([1.0]), {}, f32([1.0]), 0)


def test_grads_of_another_shape_are_rejected():
    with pytest.raises(ValueError, match="`grads`.*shape"):
        apply_update(SGDSpec(learning_rate=0.1), f32([1.0, 2.0]), {}, f32([1.0]), 0)


def test_rows_must_be_two_dimensional():
    with pytest.raises(ValueError, match="`rows`"):
        apply_update(SGDSpec(learning_rate=0.1), np.ones(3, np.float32), {}, np.ones(3, np.float32), 0)


def test_missing_or_extra_slots_are_rejected():
    spec = AdamSpec(learning_rate=0.1)
    with pytest.raises(ValueError, match="velocities"):
        apply_update(spec, f32([1.0]), {"momenta": f32([0.0])}, f32([1.0]), 0)
    with pytest.raises(ValueError, match="slots"):
        apply_update(SGDSpec(learning_rate=0.1), f32([1.0]), {"momenta": f32([0.0])}, f32([1.0]), 0)


def test_slot_of_another_shape_is_rejected():
    with pytest.raises(ValueError, match="accumulators"):
        apply_update(AdagradSpec(learning_rate=0.1), f32([1.0, 2.0]), {"accumulators": f32([0.1])}, f32([1.0, 1.0]), 0)


@pytest.mark.parametrize("step", [-1, 1.5, "3", True])
def test_step_must_be_a_non_negative_int(step):
    with pytest.raises(ValueError, match="`step`"):
        apply_update(SGDSpec(learning_rate=0.1), f32([1.0]), {}, f32([1.0]), step)


def test_out_of_range_ids_are_rejected_before_any_change():
    table = f32([1.0], [2.0])
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        apply_sparse_update(SGDSpec(learning_rate=0.1), table, {}, [0, 2], f32([1.0], [1.0]), 0)
    close(table, [[1.0], [2.0]])


def test_empty_step_is_fine():
    spec = AdagradSpec(learning_rate=0.1)
    table = f32([1.0], [2.0])
    slots = initial_slots(spec, table.shape)
    new_table, new_slots = apply_sparse_update(
        spec, table, slots, np.zeros(0, np.int64), np.zeros((0, 1), np.float32), 0
    )
    close(new_table, table)
    close(new_slots["accumulators"], slots["accumulators"])
