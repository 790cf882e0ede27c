"""The base of TensorFlow's optimizer classes: each declares its signature as data.

A v1 `*Parameters` class or a v2 optimizer (`SGD`, `Adam`, ...) states
TensorFlow's constructor signature, in TensorFlow's order, as
`__signature__ = signature(name=default, ...)`; `REQUIRED` marks an argument
without a default and `SHARED_OPTIONS` holds the options every optimizer
has. `inspect.signature`, `help()`, positional and keyword calls follow it,
and a missing, unknown or repeated argument raises TypeError naming it, as
TensorFlow's own `def` does. As in TensorFlow, every argument becomes the
attribute of its name; then the object is lowered to its spec, so a bad
value fails at the line that wrote it.

>>> class Example(TensorFlowOptimizer):
...     __signature__ = signature(learning_rate=REQUIRED, rho=0.9)
...     def _lower(self):
...         pass
>>> vars(Example(0.1))
{'learning_rate': 0.1, 'rho': 0.9}
>>> Example(rho=0.5)
Traceback (most recent call last):
...
TypeError: Example() missing a required argument: 'learning_rate'
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from .optimizer_lowering import optimizer_spec

REQUIRED = inspect.Parameter.empty  # the default of an argument that has none

# The options of every TensorFlow embedding optimizer (v1 and v2), with TensorFlow's defaults and order.
SHARED_OPTIONS = dict(
    use_gradient_accumulation=True,
    clip_weight_min=None,
    clip_weight_max=None,
    weight_decay_factor=None,
    multiply_weight_decay_factor_by_learning_rate=None,
)


def signature(**defaults: Any) -> inspect.Signature:
    """A constructor signature: positional-or-keyword arguments with these defaults, in this order."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter(name, kind, default=value) for name, value in defaults.items()])


class TensorFlowOptimizer:
    """A TensorFlow optimizer object: the arguments of its `__signature__` as attributes, checked when built."""

    __signature__: inspect.Signature

    if TYPE_CHECKING:  # the attributes are the signature's arguments, set by __init__

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{type(self).__name__}() {error}") from None
        bound.apply_defaults()
        self._store(dict(bound.arguments))
        self._lower()

    def _store(self, arguments: dict[str, Any]) -> None:
        """Sets each argument as the attribute of its name (a subclass checks or converts some first)."""
        vars(self).update(arguments)

    def _lower(self) -> None:
        """Checks every value by lowering the object to its spec (errors in TensorFlow's names)."""
        optimizer_spec(self)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({fields})"
