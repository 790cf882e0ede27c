"""Calling `input_fn(params)` and turning what it returns into a stream of batches.

An input_fn returns one of

- one batch: `(features, labels)` or `features` alone, where `features` is
  a dict of numpy arrays / nested lists / SparseTensor / RaggedTensor;
  TensorFlow would feed the same tensors at every step, and so does the
  runner (training then needs `steps` or `max_steps`; evaluate and predict
  use it once unless `steps` says otherwise);
- an iterable of such batches -- a generator is the numpy world's
  `tf.data.Dataset`. Training stops when it is exhausted, as TensorFlow
  stops at `OutOfRangeError`.

>>> def input_fn(params):
...     for start in range(0, 6, params["batch_size"]):
...         yield {"x": np.arange(start, start + params["batch_size"])}, np.zeros(params["batch_size"])
>>> stream = BatchStream(call_input_fn(input_fn, "train", {"batch_size": 3}, None), "train")
>>> [f["x"].tolist() for f, _ in stream]
[[0, 1, 2], [3, 4, 5]]
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np


def fn_args(fn: Any) -> tuple[str, ...]:
    """The names of the arguments `fn` takes (functools.partial aware)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    return tuple(
        name for name, p in signature.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def verify_input_fn(input_fn: Any) -> None:
    if not callable(input_fn):
        raise TypeError(f"input_fn must be callable. Received: {type(input_fn).__name__}.")
    if "params" not in fn_args(input_fn):
        raise ValueError(
            f"input_fn ({input_fn}) does not include params argument, required by TPUEstimator to "
            'pass batch size as params["batch_size"]'
        )


def call_input_fn(input_fn: Any, mode: str, params: dict, config: Any) -> Any:
    """`input_fn` called with the arguments it takes, as Estimator does."""
    verify_input_fn(input_fn)
    names = fn_args(input_fn)
    kwargs: dict[str, Any] = {"params": params}
    if "mode" in names:
        kwargs["mode"] = mode
    if "config" in names:
        kwargs["config"] = config
    if "input_context" in names:  # a tf.distribute input context: TPUEstimator passes None
        kwargs["input_context"] = None
    return input_fn(**kwargs)


def _is_single_batch(value: Any) -> bool:
    if isinstance(value, Mapping):
        return True
    return bool(isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Mapping))


def split_batch(item: Any, where: str) -> tuple[Any, Any]:
    """(features, labels) of one batch; labels None when the batch is features alone."""
    if isinstance(item, Mapping):
        return item, None
    if isinstance(item, tuple) and len(item) == 2:
        return item[0], item[1]
    if isinstance(item, (np.ndarray, list)):
        return item, None
    raise ValueError(
        f"{where}: each batch must be `features` (a dict) or a `(features, labels)` tuple. "
        f"Received: {type(item).__name__}" + (f" of length {len(item)}" if isinstance(item, tuple) else "") + "."
    )


class BatchStream:
    """Iterates (features, labels) over what an input_fn returned.

    Attributes:
      single: True when the input_fn returned one batch (repeated as asked).
      length: the number of batches when known (a list), else None.
    """

    def __init__(self, result: Any, mode: str, repeat: int | None = None):
        self.mode = mode
        self.single = _is_single_batch(result)
        self._result = result
        self._repeat = repeat
        if self.single:
            self.length = repeat
        else:
            if isinstance(result, (str, bytes, np.ndarray)) or not hasattr(result, "__iter__"):
                raise ValueError(
                    f"input_fn ({mode}) must return `features`, `(features, labels)`, or an iterable (e.g. a "
                    f"generator) of such batches. Received: {type(result).__name__}."
                )
            self.length = len(result) if hasattr(result, "__len__") else None

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        where = f"input_fn ({self.mode})"
        if self.single:
            batch = split_batch(self._result, where)
            count = 0
            while self._repeat is None or count < self._repeat:
                yield batch
                count += 1
            return
        for item in self._result:
            yield split_batch(item, where)
