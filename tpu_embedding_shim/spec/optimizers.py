"""Optimizer specifications: one frozen, keyword-only dataclass per optimizer.

They hold hyper-parameters only; the update math lives in the engine. Every
optimizer shares the options of TensorFlow's TPU optimizers (`OptimizerSpec`):
a learning rate that is a number or a function of the global step, gradient
clipping, weight decay (optionally times the learning rate), weight clipping
and gradient accumulation. Slot names are TensorFlow's (`accumulators`,
`momenta`, `velocities`, `linears`, `ms`, `mom`), so checkpoints name things
as TensorFlow does.

>>> opt = AdagradSpec(learning_rate=0.1)
>>> opt.slot_initial_values()
{'accumulators': 0.1}
>>> opt.learning_rate_at(step=7)
0.1
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

from .checks import check_bool, check_real, fail, is_real

LearningRate = float | Callable[[int], float]


def _check_learning_rate(value: Any, owner: str) -> None:
    if callable(value):
        return
    check_real(
        "learning_rate",
        value,
        minimum=0.0,
        owner=owner,
        hint="Pass a number >= 0 or a function of the global step.",
    )


def _check_bounds(low_name: str, low: Any, high_name: str, high: Any, owner: str) -> None:
    for name, value in ((low_name, low), (high_name, high)):
        if value is not None and not is_real(value):
            raise fail(
                name,
                "a finite number or None",
                value,
                owner=owner,
                error=TypeError if isinstance(value, (str, bytes)) else ValueError,
            )
    if low is not None and high is not None and low > high:
        raise ValueError(
            f"Argument `{low_name}` of {owner} must be <= `{high_name}`. "
            f"Received: {low_name}={low!r}, {high_name}={high!r}."
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerSpec:
    """Options every TPU embedding optimizer shares.

    Attributes:
      learning_rate: a number >= 0, or a function `step -> float` evaluated at
        every update with the global step.
      use_gradient_accumulation: TensorFlow's flag. The engine always sums a
        step's gradients per row before one update (what the flag turns on);
        it is kept for validation and for the record.
      clip_weight_min: rows are clipped from below after the update (None: no
        limit).
      clip_weight_max: rows are clipped from above after the update.
      weight_decay_factor: decoupled weight decay `w -= factor * w`, applied
        before the optimizer update (None or 0: off).
      multiply_weight_decay_factor_by_learning_rate: decay by
        `factor * learning_rate` instead of `factor`.
      clip_gradient_min: the summed row gradient is clipped from below before
        the update (None: no limit).
      clip_gradient_max: the summed row gradient is clipped from above.
    """

    kind: ClassVar[str] = "base"

    learning_rate: LearningRate
    use_gradient_accumulation: bool = True
    clip_weight_min: float | None = None
    clip_weight_max: float | None = None
    weight_decay_factor: float | None = None
    multiply_weight_decay_factor_by_learning_rate: bool = False
    clip_gradient_min: float | None = None
    clip_gradient_max: float | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        _check_learning_rate(self.learning_rate, owner)
        check_bool("use_gradient_accumulation", self.use_gradient_accumulation, owner=owner)
        check_bool(
            "multiply_weight_decay_factor_by_learning_rate",
            self.multiply_weight_decay_factor_by_learning_rate,
            owner=owner,
        )
        _check_bounds("clip_weight_min", self.clip_weight_min, "clip_weight_max", self.clip_weight_max, owner)
        _check_bounds("clip_gradient_min", self.clip_gradient_min, "clip_gradient_max", self.clip_gradient_max, owner)
        if self.weight_decay_factor is not None:
            check_real("weight_decay_factor", self.weight_decay_factor, minimum=0.0, owner=owner)
        clipping = self.clip_gradient_min is not None or self.clip_gradient_max is not None
        if clipping and not self.use_gradient_accumulation:
            raise ValueError(
                f"{owner}: gradient clipping (clip_gradient_min={self.clip_gradient_min!r}, "
                f"clip_gradient_max={self.clip_gradient_max!r}) requires "
                "`use_gradient_accumulation=True`. Received: use_gradient_accumulation=False."
            )
        self._check()

    def _check(self) -> None:
        """Optimizer-specific checks; subclasses override."""

    def learning_rate_at(self, step: int) -> float:
        """The learning rate for global step `step`."""
        if callable(self.learning_rate):
            value = self.learning_rate(step)
            if not is_real(value) or value < 0:
                raise fail(
                    "learning_rate",
                    "a function returning a finite number >= 0",
                    value,
                    owner=type(self).__name__,
                    hint=f"The function returned this for step {step}.",
                )
            return float(value)
        return float(self.learning_rate)

    def slot_initial_values(self) -> dict[str, float]:
        """Slot name -> the value every entry of that slot starts at."""
        return {}


def bias_corrected_learning_rate(learning_rate: LearningRate, beta1: float, beta2: float) -> Callable[[int], float]:
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
        return float(learning_rate(step)) * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)

    return corrected


@dataclasses.dataclass(frozen=True, kw_only=True)
class SGDSpec(OptimizerSpec):
    """Stochastic gradient descent: `w -= lr * g`. No slots."""

    kind: ClassVar[str] = "sgd"


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdagradSpec(OptimizerSpec):
    """Adagrad: `a += g**2; w -= lr * g / sqrt(a)`.

    Attributes:
      initial_accumulator: starting value of the `accumulators` slot (> 0).
    """

    kind: ClassVar[str] = "adagrad"
    initial_accumulator: float = 0.1

    def _check(self) -> None:
        check_real(
            "initial_accumulator", self.initial_accumulator, minimum=0.0, min_open=True, owner=type(self).__name__
        )

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdagradMomentumSpec(OptimizerSpec):
    """Adagrad with momentum (TensorFlow's v2 `AdagradMomentum`).

    Attributes:
      momentum: momentum coefficient.
      use_nesterov: Nesterov-style update.
      exponent: the accumulator's root (2 = square root), > 0.
      beta2: accumulator decay; 1 means a plain running sum.
      epsilon: added to the accumulator before the root (> 0).
    """

    kind: ClassVar[str] = "adagrad_momentum"
    momentum: float = 0.0
    use_nesterov: bool = False
    exponent: float = 2.0
    beta2: float = 1.0
    epsilon: float = 1e-10

    def _check(self) -> None:
        owner = type(self).__name__
        check_real("momentum", self.momentum, owner=owner)
        check_bool("use_nesterov", self.use_nesterov, owner=owner)
        check_real("exponent", self.exponent, minimum=0.0, min_open=True, owner=owner)
        check_real("beta2", self.beta2, minimum=0.0, maximum=1.0, owner=owner)
        check_real("epsilon", self.epsilon, minimum=0.0, min_open=True, owner=owner)

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": 0.0, "momenta": 0.0}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdamSpec(OptimizerSpec):
    """Adam as a TPU runs it: no bias correction.

    Attributes:
      beta1: first-moment decay, in [0, 1).
      beta2: second-moment decay, in [0, 1).
      epsilon: must be > 0.
      lazy_adam: only rows in the step change (True), or every row's moments
        decay every step (False).
      sum_inside_sqrt: denominator `sqrt(v + eps**2)` (True) or
        `sqrt(v) + eps` (False).
    """

    kind: ClassVar[str] = "adam"
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    lazy_adam: bool = True
    sum_inside_sqrt: bool = True

    def _check(self) -> None:
        owner = type(self).__name__
        check_real("beta1", self.beta1, minimum=0.0, maximum=1.0, max_open=True, owner=owner)
        check_real("beta2", self.beta2, minimum=0.0, maximum=1.0, max_open=True, owner=owner)
        check_real("epsilon", self.epsilon, minimum=0.0, min_open=True, owner=owner)
        check_bool("lazy_adam", self.lazy_adam, owner=owner)
        check_bool("sum_inside_sqrt", self.sum_inside_sqrt, owner=owner)
        if not self.lazy_adam and not self.use_gradient_accumulation:
            raise ValueError(
                f"{owner}: non-lazy Adam (`lazy_adam=False`) requires "
                "`use_gradient_accumulation=True`. Received: use_gradient_accumulation=False."
            )

    def slot_initial_values(self) -> dict[str, float]:
        return {"momenta": 0.0, "velocities": 0.0}


@dataclasses.dataclass(frozen=True, kw_only=True)
class FtrlSpec(OptimizerSpec):
    """FTRL-proximal, TensorFlow's TPU formulation.

    Attributes:
      learning_rate_power: must be <= 0 (-0.5 means a square root).
      initial_accumulator_value: starting `accumulators` (>= 0).
      l1_regularization_strength: must be >= 0.
      l2_regularization_strength: must be >= 0.
      beta: added to the denominator, as `beta / lr` (>= 0).
      multiply_linear_by_learning_rate: the `linears` slot stores linear * lr.
      allow_zero_accumulator: accepted for compatibility; zero accumulators
        are always handled.
      initial_linear_value: starting `linears` (TensorFlow fixes it at 0).
    """

    kind: ClassVar[str] = "ftrl"
    learning_rate_power: float = -0.5
    initial_accumulator_value: float = 0.1
    l1_regularization_strength: float = 0.0
    l2_regularization_strength: float = 0.0
    beta: float = 0.0
    multiply_linear_by_learning_rate: bool = False
    allow_zero_accumulator: bool = False
    initial_linear_value: float = 0.0

    def _check(self) -> None:
        owner = type(self).__name__
        check_real("learning_rate_power", self.learning_rate_power, maximum=0.0, owner=owner)
        check_real("initial_accumulator_value", self.initial_accumulator_value, minimum=0.0, owner=owner)
        check_real("l1_regularization_strength", self.l1_regularization_strength, minimum=0.0, owner=owner)
        check_real("l2_regularization_strength", self.l2_regularization_strength, minimum=0.0, owner=owner)
        check_real("beta", self.beta, minimum=0.0, owner=owner)
        check_bool("multiply_linear_by_learning_rate", self.multiply_linear_by_learning_rate, owner=owner)
        check_bool("allow_zero_accumulator", self.allow_zero_accumulator, owner=owner)
        check_real("initial_linear_value", self.initial_linear_value, owner=owner)

    def slot_initial_values(self) -> dict[str, float]:
        return {
            "accumulators": float(self.initial_accumulator_value),
            "linears": float(self.initial_linear_value),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class MomentumSpec(OptimizerSpec):
    """Momentum: `m = momentum * m + g; w -= lr * m` (Nesterov optional)."""

    kind: ClassVar[str] = "momentum"
    momentum: float = 0.0
    use_nesterov: bool = False

    def _check(self) -> None:
        check_real("momentum", self.momentum, minimum=0.0, owner=type(self).__name__)
        check_bool("use_nesterov", self.use_nesterov, owner=type(self).__name__)

    def slot_initial_values(self) -> dict[str, float]:
        return {"momenta": 0.0}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RMSPropSpec(OptimizerSpec):
    """RMSProp: `ms = rho*ms + (1-rho)*g**2; mom = momentum*mom + lr*g/sqrt(ms+eps); w -= mom`."""

    kind: ClassVar[str] = "rmsprop"
    rho: float = 0.9
    momentum: float = 0.0
    epsilon: float = 1e-10

    def _check(self) -> None:
        owner = type(self).__name__
        check_real("rho", self.rho, minimum=0.0, maximum=1.0, owner=owner)
        check_real("momentum", self.momentum, minimum=0.0, owner=owner)
        check_real("epsilon", self.epsilon, minimum=0.0, min_open=True, owner=owner)

    def slot_initial_values(self) -> dict[str, float]:
        return {"ms": 0.0, "mom": 0.0}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProximalAdagradSpec(OptimizerSpec):
    """Proximal Adagrad: an Adagrad step, then l1 / l2 shrinkage with the adaptive rate lr / sqrt(a)."""

    kind: ClassVar[str] = "proximal_adagrad"
    initial_accumulator: float = 0.1
    l1_regularization_strength: float = 0.0
    l2_regularization_strength: float = 0.0

    def _check(self) -> None:
        owner = type(self).__name__
        check_real("initial_accumulator", self.initial_accumulator, minimum=0.0, min_open=True, owner=owner)
        check_real("l1_regularization_strength", self.l1_regularization_strength, minimum=0.0, owner=owner)
        check_real("l2_regularization_strength", self.l2_regularization_strength, minimum=0.0, owner=owner)

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator)}


OPTIMIZER_SPECS = {
    cls.kind: cls
    for cls in (
        SGDSpec,
        AdagradSpec,
        AdagradMomentumSpec,
        AdamSpec,
        FtrlSpec,
        MomentumSpec,
        RMSPropSpec,
        ProximalAdagradSpec,
    )
}
