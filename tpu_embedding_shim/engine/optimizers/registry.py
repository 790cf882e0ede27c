"""The one list of optimizers: spec class -> how the engine runs it.

Both engines read it: the numpy reference (`reference.py`) and the fused
kernels (`fast/fused.py`). Adding an optimizer is a spec class
(`spec/optimizers.py`), a formula with its hyper-parameters
(`formulas.py`) and one row here; see docs/contributing_optimizer.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from ...spec import optimizers as specs
from ...spec.checks import fail
from . import formulas as f

__all__ = ["Optimizer", "Powers", "Formula", "Hyperparameters", "OPTIMIZERS", "optimizer_for", "register"]

S = TypeVar("S", bound=specs.OptimizerSpec)
S_contra = TypeVar("S_contra", bound=specs.OptimizerSpec, contravariant=True)


class Formula(Protocol):
    """`formula(w, g, *slots, *powers, hp) -> (w, *slots)`, element-wise (see `formulas`)."""

    def __call__(self, *values: Any) -> tuple[Any, ...]: ...


class Hyperparameters(Protocol[S_contra]):
    """`(spec, lr) -> hp`: the formula's float32 hyper-parameters for one step; raises for an lr it refuses."""

    def __call__(self, optimizer: S_contra, lr: float) -> tuple[Any, ...]: ...


def _never(optimizer: Any) -> bool:
    return False


def _always(optimizer: Any) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Powers:
    """Inputs `x ** e` a formula takes from outside, after its slots (see `formulas`).

    `bases(g, *slots, hp)`, over the slots named in `slots`, gives the `count`
    values to raise; `exponent(spec)` gives `e`, or None when the formula
    needs none for this spec (it takes a square root or 1 itself and is
    passed zeros)."""

    bases: Formula
    exponent: Callable[[Any], float | None]
    count: int
    slots: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Optimizer(Generic[S]):
    """How the engine runs one spec class.

    Attributes:
      spec: the spec class (exactly this class; a subclass is looked up by its bases).
      formula: the element-wise update (`formulas`).
      slots: the formula's slot arguments, in order: the keys of `spec.slot_initial_values()`.
      hyperparameters: `(spec, lr) -> hp`.
      constants: how many leading entries of `hp` depend on the spec only (flags that pick a
        branch): the fused kernel is compiled for each value, so the branch costs nothing.
      powers: the formula's powers taken outside it, if any.
      touches_all_rows: `spec -> bool`, True when every row is updated every step (non-lazy Adam).
      fusable: `spec -> bool`, False when the fused kernel may not run it: the update runs after
        the step's checks and cannot fail then (FTRL's paper form refuses a learning rate of 0).
    """

    spec: type[S]
    formula: Formula
    slots: tuple[str, ...]
    hyperparameters: Hyperparameters[S]
    constants: int = 0
    powers: Powers | None = None
    touches_all_rows: Callable[[S], bool] = _never
    fusable: Callable[[S], bool] = _always


def _ftrl_fusable(optimizer: specs.FtrlSpec) -> bool:
    """The paper form divides by lr: only a constant lr > 0 (a schedule could return 0)."""
    lr = optimizer.learning_rate
    return optimizer.multiply_linear_by_learning_rate or (not callable(lr) and lr > 0)


OPTIMIZERS: dict[type, Optimizer[Any]] = {
    row.spec: row
    for row in (
        Optimizer(specs.SGDSpec, f.sgd, (), f.sgd_hyperparameters),
        Optimizer(specs.AdagradSpec, f.adagrad, ("accumulators",), f.adagrad_hyperparameters, constants=1),
        Optimizer(
            specs.AdagradMomentumSpec,
            f.adagrad_momentum,
            ("accumulators", "momenta"),
            f.adagrad_momentum_hyperparameters,
            powers=Powers(f.adagrad_momentum_power_bases, f.adagrad_momentum_power_exponent, 1, ("accumulators",)),
        ),
        Optimizer(
            specs.AdamSpec,
            f.adam,
            ("momenta", "velocities"),
            f.adam_hyperparameters,
            touches_all_rows=lambda optimizer: not optimizer.lazy_adam,
        ),
        Optimizer(
            specs.FtrlSpec,
            f.ftrl,
            ("accumulators", "linears"),
            f.ftrl_hyperparameters,
            constants=2,
            powers=Powers(f.ftrl_power_bases, f.ftrl_power_exponent, 2, ("accumulators",)),
            fusable=_ftrl_fusable,
        ),
        Optimizer(specs.MomentumSpec, f.momentum, ("momenta",), f.momentum_hyperparameters),
        Optimizer(specs.RMSPropSpec, f.rmsprop, ("ms", "mom"), f.rmsprop_hyperparameters),
        Optimizer(specs.ProximalAdagradSpec, f.proximal_adagrad, ("accumulators",), f.proximal_adagrad_hyperparameters),
    )
}


def register(optimizer: Optimizer[Any]) -> Optimizer[Any]:
    """Adds (or replaces) the row of `optimizer.spec`, for an optimizer defined outside the package."""
    OPTIMIZERS[optimizer.spec] = optimizer
    return optimizer


def optimizer_for(optimizer: Any) -> Optimizer[Any]:
    """The row of `optimizer`'s class, or of its nearest registered base class.

    Raises:
      TypeError: `optimizer` is not an instance of a registered spec class.
    """
    for cls in type(optimizer).__mro__:
        if cls in OPTIMIZERS:
            return OPTIMIZERS[cls]
    names = ", ".join(cls.__name__ for cls in OPTIMIZERS)
    raise fail("optimizer", f"one of {names}", optimizer, error=TypeError)
