"""A TensorFlow optimizer object -> its `OptimizerSpec`: the one lowering of optimizers.

Every TensorFlow optimizer class (v1 `*Parameters`, v2 `SGD` / `Adagrad` /
...) names its spec class with `@lowers_to(SpecClass)`, next to its own
definition: each of the spec's own fields is filled from the constructor
argument of the same name, or of the name the decorator gives it
(`@lowers_to(AdamSpec, beta1="beta_1")`). `optimizer_spec(obj)` builds the
spec. The options every optimizer has (`COMMON`) need no row. Errors come
out in the user's terms: the TensorFlow class and argument names, not the
spec's.

This module imports only `spec/`, so the optimizer classes can lower
themselves when built (a bad value fails at the line that wrote it) without
an import cycle with `lowering.py`, which imports the classes.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..spec import OptimizerSpec

COMMON = (
    "learning_rate",
    "use_gradient_accumulation",
    "clip_weight_min",
    "clip_weight_max",
    "weight_decay_factor",
    "clip_gradient_min",
    "clip_gradient_max",
)

# Filled by optimizer_spec itself (None, TensorFlow's default, is False).
_MULTIPLY = "multiply_weight_decay_factor_by_learning_rate"

# TensorFlow's optimizer class -> (its spec class, {spec field: TF attribute} beyond COMMON): one row each.
LOWERINGS: dict[type, tuple[type, dict[str, str]]] = {}

_Class = TypeVar("_Class", bound=type)


def lowers_to(spec_class: type, **renamed: str) -> Callable[[_Class], _Class]:
    """Class decorator: this TensorFlow optimizer class lowers to `spec_class`.

    The spec's own fields take the constructor arguments of their names;
    `renamed` maps a spec field to the argument of another name.
    """

    def register(cls: _Class) -> _Class:
        arguments = inspect.signature(cls).parameters
        names = [field.name for field in dataclasses.fields(spec_class)]
        unknown = sorted(set(renamed) - set(names))
        if unknown:
            raise TypeError(f"lowers_to({spec_class.__name__}): {unknown} are not fields of it.")
        fields = {}
        for name in names:
            argument = renamed.get(name, name)
            if name not in (*COMMON, _MULTIPLY) and argument in arguments:
                fields[name] = argument
        LOWERINGS[cls] = (spec_class, fields)
        return cls

    return register


class LearningRateMemo:
    """Evaluates each v2 callable learning rate once per `apply_gradients`, as TensorFlow does.

    TensorFlow's `TPUEmbedding.apply_gradients` calls every distinct
    learning-rate callable once and sends the values with the gradients,
    however many tables share it. The mid-level classes call `evaluate`
    before an update and `clear` after it; in between, every
    `ZeroArgumentLearningRate` holding this memo reads the stored value.
    Outside that window a learning rate calls its function directly.
    """

    def __init__(self) -> None:
        self._values: dict[int, float] | None = None

    def evaluate(self, functions: list[Callable[[], Any]]) -> None:
        values: dict[int, float] = {}
        for function in functions:
            if id(function) not in values:
                values[id(function)] = function()
        self._values = values

    def clear(self) -> None:
        self._values = None

    def value(self, function: Callable[[], Any]) -> Any:
        if self._values is not None and id(function) in self._values:
            return self._values[id(function)]
        return function()


@dataclasses.dataclass(frozen=True)
class ZeroArgumentLearningRate:
    """A v2 learning rate (a zero-argument callable) seen as a function of the step."""

    function: Callable[[], float]
    memo: LearningRateMemo | None = dataclasses.field(default=None, compare=False, repr=False)

    def __call__(self, step: int) -> float:
        value = self.memo.value(self.function) if self.memo is not None else self.function()
        return _scalar(value)


def _scalar(value: Any) -> Any:
    """A 0-d number array (TensorFlow's callables return a 0-d tensor, which numpy reads) as a Python number.

    Anything else comes back as it is, for the spec's check to name it.
    """
    if isinstance(value, (int, float)):
        return value
    try:
        array = np.asarray(value)
    except Exception:  # not array-like: the spec's check names what it received
        return value
    return array.item() if array.shape == () and array.dtype.kind in "fiu" else value


def optimizer_spec(params: Any, *, learning_rate_memo: LearningRateMemo | None = None) -> OptimizerSpec:
    """The spec of a v1 `*Parameters` or v2 optimizer object.

    A v2 callable learning rate (its class says
    `zero_argument_learning_rate = True`) reads its value through
    `learning_rate_memo` when one is given.
    """
    entry = next((LOWERINGS[c] for c in type(params).__mro__ if c in LOWERINGS), None)  # a subclass lowers as its base
    if entry is None:
        names = ", ".join(sorted(c.__name__ for c in LOWERINGS))
        raise ValueError(f"Unsupported optimizer {params!r}: expected an instance of one of {names}.")
    spec_class, specific = entry
    kwargs = {name: getattr(params, name) for name in COMMON}
    multiply = getattr(params, _MULTIPLY)
    kwargs[_MULTIPLY] = False if multiply is None else multiply
    if getattr(params, "zero_argument_learning_rate", False) and callable(params.learning_rate):
        kwargs["learning_rate"] = ZeroArgumentLearningRate(params.learning_rate, learning_rate_memo)
    kwargs.update({field: getattr(params, attribute) for field, attribute in specific.items()})
    renames = {field: attribute for field, attribute in specific.items() if field != attribute}
    spec: OptimizerSpec = build(spec_class, type(params).__name__, renames, **kwargs)
    return spec


def build(spec_class: type, owner: str, renames: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """`spec_class(**kwargs)`, with errors renamed to the TensorFlow object the user wrote."""
    try:
        return spec_class(**kwargs)
    except (ValueError, TypeError) as error:
        message = str(error).replace(spec_class.__name__, owner)
        for field, attribute in (renames or {}).items():
            message = message.replace(f"`{field}`", f"`{attribute}`")
        raise type(error)(message) from None
