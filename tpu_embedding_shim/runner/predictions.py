"""What `TPUEstimator.predict` yields from each batch's predictions: the keys asked for, one example at a time.

>>> batch = as_arrays({"p": [0.1, 0.9], "id": [3, 4]}, predict_keys=["p"])
>>> batch
{'p': array([0.1, 0.9])}
>>> [float(example["p"]) for example in examples(batch)]
[0.1, 0.9]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .model_fn import to_numpy

__all__ = ["as_arrays", "examples"]


def as_arrays(predictions: Any, predict_keys: Sequence[str] | None) -> Any:
    """A batch's predictions as numpy: a dict of arrays (only `predict_keys`, if given), or one array."""
    if not isinstance(predictions, Mapping):
        return np.asarray(to_numpy(predictions))
    arrays = {k: np.asarray(to_numpy(v)) for k, v in predictions.items()}
    if predict_keys is None:
        return arrays
    if any(k not in arrays for k in predict_keys):
        raise ValueError(f"Expected to run at least one output from {list(arrays)}, provided {predict_keys}.")
    return {k: arrays[k] for k in predict_keys}


def examples(predictions: Any) -> Iterator[Any]:
    """The batch's examples: one dict per example of a dict (all values of one batch length), else the rows."""
    if not isinstance(predictions, dict):
        yield from predictions
        return
    sizes = {k: v.shape[0] if v.ndim else None for k, v in predictions.items()}
    batch = next(iter(sizes.values()), 0)
    for key, size in sizes.items():
        if size != batch:
            raise ValueError(
                f"Batch length of predictions should be same. {key} has different batch length than others."
            )
    for i in range(batch or 0):
        yield {k: v[i] for k, v in predictions.items()}
