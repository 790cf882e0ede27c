"""Each optimizer's own update, written once, element by element.

A formula is a function of one row value `w`, the row's summed and clipped
gradient `g`, its slot values (in the registry's slot order), the powers it
takes from outside (see below) and its hyper-parameters `hp`; it returns the
new row value and the new slot values:

    adam(w, g, m, v, hp) -> (w, m, v)

It uses operators, `np.sqrt`, `np.abs`, `np.isnan` and the helpers below
only, so the same code runs two ways, with the same float32 operations in
the same order (the same bits):

- numpy runs it on `[U, D]` arrays (`reference.apply_update`, between the
  options every optimizer shares: gradient clipping, weight decay, weight
  clipping);
- numba compiles it into the fused kernels (`fast/fused.py`), one element at
  a time inside one generic row loop.

So a formula never branches on an array (`a if c else b` only on a flag of
`hp`; `select` for an element-wise choice), never calls `np.clip`,
`np.where`, `np.maximum` or `np.sign` (numba's scalar versions differ from
numpy's at -0.0, or do not exist), and writes every constant as float32
(`_ONE`): a Python number would turn numba's arithmetic into float64.

`<name>_hyperparameters(spec, lr)` packs a spec and the step's learning rate
into the formula's `hp`: float32 scalars, flags and derived constants such as
`1 - beta1`, computed once; it raises for a learning rate the formula
refuses, before any arithmetic. A general power `x ** e` is never taken
inside a formula: numpy's float32 `np.power` (SIMD on some CPUs) and libm's
`powf` differ by an ulp. `<name>_power_bases(g, *slots, hp)` gives the
values to raise (from the slots the registry names),
`<name>_power_exponent(spec)` the exponent (None when the formula takes a
square root or 1 itself), and the caller passes `np.power(base, e)` (or
zeros when there is none) after the slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...spec import optimizers as specs
from ...spec.checks import fail

_F32 = np.float32
_ZERO = _F32(0.0)
_ONE = _F32(1.0)
_TWO = _F32(2.0)

# How a formula gets its power P(x) (FTRL, AdagradMomentum): always 1, a square root, or given (np.power).
POWER_ONE, POWER_SQRT, POWER_GIVEN = 0, 1, 2

Values = tuple[Any, ...]


# --------------------------------------------------------------------------
# Helpers a formula may call: numpy versions here, numba's in fast/fused.py.
# --------------------------------------------------------------------------


def select(condition, x, y):
    """`x` where `condition`, else `y`, element-wise (`np.where`; numba: `x if condition else y`)."""
    return np.where(condition, x, y)


def sign(x):
    """`np.sign`: 1, -1, +0.0 for both zeros, NaN for NaN (numba's keeps -0.0)."""
    return np.sign(x)


def positive_part(x):
    """`max(x, 0)`, NaN kept and -0.0 made +0.0 (numpy's `np.maximum(x, 0)` here; numba's keeps -0.0)."""
    return select((x > _ZERO) | np.isnan(x), x, _ZERO)


# --------------------------------------------------------------------------
# One formula per optimizer, with its hyper-parameters.
# --------------------------------------------------------------------------


def sgd(w, g, hp):
    """SGD: `w <- w - lr * g`. No slots."""
    (lr,) = hp
    return (w - lr * g,)


def sgd_hyperparameters(optimizer: specs.SGDSpec, lr: float) -> Values:
    return (_F32(lr),)


def adagrad(w, g, a, hp):
    """Adagrad: `a <- a + g**2; w <- w - lr * g / sqrt(a)`.

    The square root is of the UPDATED accumulator, and a TPU adds no epsilon
    (the accumulator starts > 0). `with_epsilon` (False but for TensorFlow's
    raw `ResourceSparseApplyAdagradV2` kernel, `reference.apply_sequentially`)
    divides by `sqrt(a) + epsilon` instead. It comes first in `hp`: the fast
    kernels compile one loop for each value, so the TPU's costs nothing.
    """
    with_epsilon, lr, epsilon = hp
    a = a + g * g
    return w - lr * g / (np.sqrt(a) + epsilon if with_epsilon else np.sqrt(a)), a


def adagrad_hyperparameters(optimizer: specs.AdagradSpec, lr: float, *, epsilon: float = 0.0) -> Values:
    return (bool(epsilon), _F32(lr), _F32(epsilon))


def adagrad_momentum(w, g, a, m, power, hp):
    """Adagrad with momentum (TensorFlow's TPU `AdagradMomentum`).

        a <- a + g**2                      if beta2 == 1
        a <- beta2 * a + (1 - beta2) g**2  otherwise
        s  = g / sqrt(a + epsilon)         if exponent == 2
        s  = (a + epsilon) ** (-1 / exponent) * g   otherwise (`power`, given)
        m <- momentum * m + s
        w <- w - lr * (momentum * m + s)   if use_nesterov
        w <- w - lr * m                    otherwise

    `epsilon` is an offset inside the root, not a starting value: both slots
    start at 0.
    """
    lr, momentum, epsilon, square_root, use_nesterov, beta2, one_minus_beta2, plain_sum = hp
    a = _moving_sum(a, g * g, beta2, one_minus_beta2, plain_sum)
    scaled = g / np.sqrt(a + epsilon) if square_root else power * g
    m = momentum * m + scaled
    return w - lr * (momentum * m + scaled if use_nesterov else m), a, m


def _moving_sum(a, g2, beta2, one_minus_beta2, plain_sum):
    """`a + g2` when `plain_sum` (beta2 == 1), else `beta2 a + (1 - beta2) g2`."""
    return a + g2 if plain_sum else beta2 * a + one_minus_beta2 * g2


def adagrad_momentum_hyperparameters(optimizer: specs.AdagradMomentumSpec, lr: float) -> Values:
    beta2 = _F32(optimizer.beta2)
    return (
        _F32(lr),
        _F32(optimizer.momentum),
        _F32(optimizer.epsilon),
        optimizer.exponent == 2.0,
        bool(optimizer.use_nesterov),
        beta2,
        _ONE - beta2,
        optimizer.beta2 == 1.0,
    )


def adagrad_momentum_power_bases(g, a, hp):
    """`a_new + epsilon`, raised to `-1 / exponent`."""
    _, _, epsilon, _, _, beta2, one_minus_beta2, plain_sum = hp
    return (_moving_sum(a, g * g, beta2, one_minus_beta2, plain_sum) + epsilon,)


def adagrad_momentum_power_exponent(optimizer: specs.AdagradMomentumSpec) -> float | None:
    return None if optimizer.exponent == 2.0 else -1.0 / optimizer.exponent


def adam(w, g, m, v, hp):
    """Adam as a TPU runs it: NO bias correction.

        m <- beta1 * m + (1 - beta1) * g
        v <- beta2 * v + (1 - beta2) * g**2
        w <- w - lr * m / sqrt(v + eps**2)    if sum_inside_sqrt (the default)
        w <- w - lr * m / (sqrt(v) + eps)     otherwise

    Bias correction is a learning-rate function of the step
    (`spec.bias_corrected_learning_rate`). Lazy or not is the caller's
    business: this updates exactly the values it is given.
    """
    lr, beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon, sum_inside_sqrt = hp
    m = beta1 * m + one_minus_beta1 * g
    v = beta2 * v + one_minus_beta2 * (g * g)
    denominator = np.sqrt(v + epsilon * epsilon) if sum_inside_sqrt else np.sqrt(v) + epsilon
    return w - lr * m / denominator, m, v


def adam_hyperparameters(optimizer: specs.AdamSpec, lr: float) -> Values:
    beta1, beta2 = _F32(optimizer.beta1), _F32(optimizer.beta2)
    return (
        _F32(lr),
        beta1,
        _ONE - beta1,
        beta2,
        _ONE - beta2,
        _F32(optimizer.epsilon),
        bool(optimizer.sum_inside_sqrt),
    )


def ftrl(w, g, a, n, p_old, p_new, hp):
    """FTRL-proximal, TensorFlow's TPU formulation, both linear conventions.

    With `P(x) = x ** (-learning_rate_power)` (1 for a power of 0, a square
    root for -0.5, else given: `p_old = P(a)`, `p_new = P(a + g**2)`):

        a_new = a + g**2;   dP = P(a_new) - P(a)
        multiply_linear_by_learning_rate=False (linear as in the paper):
          n <- n + g - dP / lr * w
          w <- (clip(n, -l1, l1) - n) / ((P(a_new) + beta) / lr + 2 l2)
        multiply_linear_by_learning_rate=True (the slot holds lr * linear):
          n <- n + lr * g - dP * w
          w <- (clip(n, -lr l1, lr l1) - n) / (P(a_new) + 2 lr l2 + beta)
        a <- a_new

    `clip(n, -t, t) - n` is 0 when `|n| <= t`, else `sign(n) t - n`. Where
    the denominator is 0 (zero accumulator, beta = 0, l2 = 0) the row is set
    to 0 instead of dividing by zero. `beta` in the denominator equals
    TensorFlow's CPU `FtrlOptimizer` rule of folding it into l2:
    `l2 + beta / (2 lr)`. `power` and `by_learning_rate` come first in `hp`:
    the fast kernels compile one loop for each.
    """
    power, by_learning_rate, lr, l1, l2, beta = hp
    a_new = a + g * g
    if power == POWER_ONE:
        p_old = p_new = _ONE
    elif power == POWER_SQRT:
        p_old, p_new = np.sqrt(a), np.sqrt(a_new)
    delta = p_new - p_old
    if by_learning_rate:
        n = n + lr * g - delta * w
        threshold = lr * l1
        denominator = p_new + _TWO * lr * l2 + beta
    else:
        n = n + g - delta / lr * w
        threshold = l1
        denominator = (p_new + beta) / lr + _TWO * l2
    shrink = (np.abs(n) > threshold) & (denominator > _ZERO)
    numerator = select(n > threshold, threshold, -threshold) - n
    return select(shrink, numerator, _ZERO) / select(shrink, denominator, _ONE), a_new, n


def ftrl_hyperparameters(optimizer: specs.FtrlSpec, lr: float) -> Values:
    """Raises ValueError for lr == 0 with `multiply_linear_by_learning_rate=False`: the paper form
    divides by the learning rate (TensorFlow would produce NaN)."""
    by_learning_rate = bool(optimizer.multiply_linear_by_learning_rate)
    if not by_learning_rate and lr == 0.0:
        raise fail(
            "learning_rate",
            "> 0 for specs.FtrlSpec with multiply_linear_by_learning_rate=False",
            lr,
            owner="specs.FtrlSpec",
            hint="That form divides by the learning rate; pass "
            "multiply_linear_by_learning_rate=True to allow a learning rate of 0.",
        )
    power = {0.0: POWER_ONE, -0.5: POWER_SQRT}.get(optimizer.learning_rate_power, POWER_GIVEN)
    return (
        power,
        by_learning_rate,
        _F32(lr),
        _F32(optimizer.l1_regularization_strength),
        _F32(optimizer.l2_regularization_strength),
        _F32(optimizer.beta),
    )


def ftrl_power_bases(g, a, hp):
    """The accumulator before and after the step, raised to `-learning_rate_power`."""
    return a, a + g * g


def ftrl_power_exponent(optimizer: specs.FtrlSpec) -> float | None:
    """`-learning_rate_power` (>= 0: a zero accumulator gives 0, never `0 ** negative = inf`)."""
    power = optimizer.learning_rate_power
    return None if power in (0.0, -0.5) else -power


def momentum(w, g, m, hp):
    """Momentum, TensorFlow's `ApplyMomentum` kernel.

    m <- momentum * m + g
    w <- w - lr * m                          (plain)
    w <- w - lr * g - lr * momentum * m      (use_nesterov)
    """
    lr, momentum, use_nesterov = hp
    m = m * momentum + g
    return (w - (g * lr + m * momentum * lr) if use_nesterov else w - m * lr), m


def momentum_hyperparameters(optimizer: specs.MomentumSpec, lr: float) -> Values:
    return (_F32(lr), _F32(optimizer.momentum), bool(optimizer.use_nesterov))


def rmsprop(w, g, ms, mom, hp):
    """RMSProp, TensorFlow's `ApplyRMSProp` kernel.

    ms  <- ms + (g**2 - ms) * (1 - rho)      (= rho ms + (1 - rho) g**2)
    mom <- momentum * mom + lr * g / sqrt(ms + epsilon)
    w   <- w - mom
    """
    lr, one_minus_rho, momentum, epsilon = hp
    ms = ms + (g * g - ms) * one_minus_rho
    mom = mom * momentum + g * lr / np.sqrt(ms + epsilon)
    return w - mom, ms, mom


def rmsprop_hyperparameters(optimizer: specs.RMSPropSpec, lr: float) -> Values:
    return (_F32(lr), _ONE - _F32(optimizer.rho), _F32(optimizer.momentum), _F32(optimizer.epsilon))


def proximal_adagrad(w, g, a, hp):
    """Proximal Adagrad (FOBOS with the Adagrad rate), TensorFlow's CPU kernel.

        a <- a + g**2
        r  = lr / sqrt(a)                       (the adaptive rate)
        v  = w - r * g
        w <- sign(v) * max(|v| - r * l1, 0) / (1 + r * l2)

    The raw-op documentation writes `lr` in the two prox terms; the kernel
    (`ApplyProximalAdagrad` in training_ops.cc) uses the adaptive rate `r`,
    and so do we.
    """
    lr, l1, l2 = hp
    a = a + g * g
    rate = lr / np.sqrt(a)
    prox = w - rate * g
    return sign(prox) * positive_part(np.abs(prox) - rate * l1) / (_ONE + rate * l2), a


def proximal_adagrad_hyperparameters(optimizer: specs.ProximalAdagradSpec, lr: float) -> Values:
    return (_F32(lr), _F32(optimizer.l1_regularization_strength), _F32(optimizer.l2_regularization_strength))
