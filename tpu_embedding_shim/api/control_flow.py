"""`tf.function` and `tf.range` as plain Python: the control flow of TensorFlow's mid-level training loops.

The training loops on TensorFlow's pages wrap the step in `@tf.function`
and loop with `for _ in tf.range(steps)`. Here there is no graph to trace:
`function` returns the Python function itself and `range` is `np.arange`,
so the same loop runs eagerly, step by step.

>>> @function(jit_compile=True)
... def step(x):
...     return x + 1
>>> step(1), range(3).tolist()   # the function itself; np.arange(3)
(2, [0, 1, 2])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["function", "range"]


def function(func: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """`tf.function`: returns the Python function unchanged (nothing is traced or compiled).

    Works bare (`@tf.function`) and with arguments (`@tf.function(jit_compile=True)`).
    """
    if func is None:
        return lambda f: f
    return func


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None, name: Any = None) -> np.ndarray:
    """`tf.range`: `np.arange`, so `for _ in tf.range(n)` loops in Python."""
    if limit is None:
        start, limit = 0, start
    return np.arange(start, limit, delta)
