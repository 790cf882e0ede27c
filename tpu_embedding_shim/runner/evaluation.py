"""What `TPUEstimator.evaluate` collects from each eval batch, and the metrics dict it returns.

Per batch, the model_fn's spec gives a loss and, as TensorFlow has them,

- `TPUEstimatorSpec.eval_metrics = (metric_fn, tensors)`: the tensors are
  kept, concatenated over all batches at the end (along the first axis; a
  0-d value is one entry per batch), and `metric_fn` is called ONCE on the
  whole eval set: an AUC over every example, not a mean of per-batch AUCs;
- `EstimatorSpec.eval_metric_ops = {name: value or (value, update_op)}`:
  each value is one batch's, and the result is their mean over batches.

'loss' is the mean of the per-batch losses (TensorFlow's
`metrics.mean(loss)`).

Under `mpiexec -n N` each replica evaluates its batches; `results` first
joins every replica's losses and tensors (replica order), so `metric_fn`
sees the whole eval set on every replica, as TensorFlow's TPUEstimator
concatenates the eval tensors of all shards.

>>> from tpu_embedding_shim.runner.model_fn import ModeKeys, TPUEstimatorSpec
>>> metrics = EvalMetrics()
>>> for loss, labels in ((0.5, [1, 0]), (1.5, [1])):
...     _ = metrics.add(TPUEstimatorSpec(ModeKeys.EVAL, loss=loss,
...                                      eval_metrics=(lambda y: {"positives": y.sum()}, [labels])))
>>> metrics.results({})
{'positives': 2.0, 'loss': 1.0}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..api import replicas
from .model_fn import EstimatorSpec, TPUEstimatorSpec, scalar, to_numpy

__all__ = ["EvalMetrics"]


class EvalMetrics:
    """The losses and metric inputs of the eval batches seen so far (module docstring)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self._metric_fn: Any = None
        self._by_name = False  # eval_metrics tensors as a dict (keyword arguments) or a list (positional)
        self._tensors: Any = None  # per tensor, its value of each batch
        self._op_values: dict[str, list[float]] = {}

    def add(self, spec: Any) -> float:
        """Records one batch's spec; returns the mean loss so far."""
        self.losses.append(scalar(spec.loss, "The loss"))
        if isinstance(spec, TPUEstimatorSpec) and spec.eval_metrics is not None:
            self._metric_fn, tensors = spec.eval_metrics
            if self._tensors is None:
                self._by_name = isinstance(tensors, dict)
                self._tensors = {k: [] for k in tensors} if self._by_name else [[] for _ in tensors]
            items = tensors.items() if self._by_name else enumerate(tensors)
            for key, value in items:
                self._tensors[key].append(np.asarray(to_numpy(value)))
        if isinstance(spec, EstimatorSpec) and spec.eval_metric_ops:
            for key, value in spec.eval_metric_ops.items():
                value = value[0] if isinstance(value, tuple) else value
                self._op_values.setdefault(key, []).append(scalar(value, f"eval_metric_ops[{key!r}]"))
        return float(np.mean(self.losses))

    def results(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """`metrics` (the TensorFlow graph's own, if any) with `metric_fn`'s values, the ops' means and 'loss'.

        Raises:
          ValueError: no batch was seen.
          TypeError: `metric_fn` returned something other than a dict.
        """
        if not self.losses:
            raise ValueError("evaluate: input_fn produced no batch.")
        losses, op_values = self.losses, self._op_values
        if replicas.num_replicas() > 1:  # every replica's batches, in replica order
            losses = [loss for part in replicas.world().allgather_object(self.losses) for loss in part]
            parts = replicas.world().allgather_object(self._op_values)
            op_values = {key: [v for part in parts for v in part[key]] for key in self._op_values}
        if self._metric_fn is not None:

            def join(parts: list[np.ndarray]) -> np.ndarray:
                return replicas.all_gather(np.concatenate([np.atleast_1d(p) for p in parts], axis=0))

            if self._by_name:
                out = self._metric_fn(**{k: join(v) for k, v in self._tensors.items()})
            else:
                out = self._metric_fn(*[join(v) for v in self._tensors])
            if not isinstance(out, Mapping):
                raise TypeError(
                    f"metric_fn must return a dict {{name: value or (value, update_op)}}. Received: "
                    f"{type(out).__name__}."
                )
            for key, value in out.items():
                value = to_numpy(value[0] if isinstance(value, tuple) else value)
                array = np.asarray(value)
                metrics[key] = float(array) if array.size == 1 and array.dtype.kind in "biuf" else array
        for key, values in op_values.items():
            metrics[key] = float(np.mean(values))
        metrics["loss"] = float(np.mean(losses))
        return metrics
