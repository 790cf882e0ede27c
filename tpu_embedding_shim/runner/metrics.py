"""`tf.compat.v1.metrics` for a numpy `metric_fn`: each returns `(value, None)`.

TensorFlow's metrics are streaming `(value, update_op)` pairs. The runner
calls a TPUEstimatorSpec's `metric_fn` once, on the eval tensors
concatenated over every eval batch, so a metric here is simply computed on
the whole eval set and returned as `(value, None)`, the shape a metric_fn
hands back. Legacy metric_fns keep working unchanged:

    def metric_fn(labels, probabilities):
        return {"auc": tf.compat.v1.metrics.auc(labels, probabilities)}

`auc` is TensorFlow's: `num_thresholds` (200) evenly spaced thresholds and
a trapezoidal (or minoring / majoring) sum, the same approximation.

>>> round(auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])[0], 4)   # TensorFlow: 0.74999976
0.75
>>> accuracy([1, 0, 1], [1, 1, 1])[0]
0.6666666666666666
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "auc",
    "accuracy",
    "mean",
    "mean_squared_error",
    "root_mean_squared_error",
    "precision",
    "recall",
    "mean_absolute_error",
]


def _weights(weights: Any, shape: tuple[int, ...]) -> np.ndarray:
    if weights is None:
        return np.ones(shape, np.float64)
    return np.broadcast_to(np.asarray(weights, np.float64), shape)


def _div(a: float, b: float) -> float:
    return float(a / b) if b != 0 else 0.0


def mean(
    values: Any,
    weights: Any = None,
    metrics_collections: Any = None,
    updates_collections: Any = None,
    name: str | None = None,
):
    """(weighted mean of `values`, None)."""
    values = np.asarray(values, np.float64)
    w = _weights(weights, values.shape)
    return _div((values * w).sum(), w.sum()), None


def _labels_metric(value: Callable[[Any, Any, Any], float]) -> Callable[..., tuple[float, None]]:
    """The metric `value(labels, predictions, weights)` with TensorFlow's signature, returning `(value, None)`.

    TensorFlow's signature is `(labels, predictions, weights=None,
    metrics_collections=None, updates_collections=None, name=None)`; the
    collections and the name are accepted and have no use here.
    """

    def metric(
        labels: Any,
        predictions: Any,
        weights: Any = None,
        metrics_collections: Any = None,
        updates_collections: Any = None,
        name: str | None = None,
    ) -> tuple[float, None]:
        return value(labels, predictions, weights), None

    metric.__name__ = metric.__qualname__ = value.__name__
    metric.__doc__ = value.__doc__
    metric.__module__ = value.__module__
    return metric


def _float_pair(labels: Any, predictions: Any) -> tuple[np.ndarray, np.ndarray]:
    """(labels, predictions) as float64, labels in the predictions' shape."""
    predictions = np.asarray(predictions, np.float64)
    return np.asarray(labels, np.float64).reshape(predictions.shape), predictions


@_labels_metric
def accuracy(labels: Any, predictions: Any, weights: Any) -> float:
    """(weighted fraction of predictions equal to labels, None)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape:
        labels = labels.reshape(predictions.shape)
    return mean((labels == predictions).astype(np.float64), weights)[0]


@_labels_metric
def mean_squared_error(labels: Any, predictions: Any, weights: Any) -> float:
    """(weighted mean of (labels - predictions) ** 2, None)."""
    labels, predictions = _float_pair(labels, predictions)
    return mean((labels - predictions) ** 2, weights)[0]


@_labels_metric
def mean_absolute_error(labels: Any, predictions: Any, weights: Any) -> float:
    """(weighted mean of |labels - predictions|, None)."""
    labels, predictions = _float_pair(labels, predictions)
    return mean(np.abs(labels - predictions), weights)[0]


@_labels_metric
def root_mean_squared_error(labels: Any, predictions: Any, weights: Any) -> float:
    """(square root of the weighted mean squared error, None)."""
    return float(np.sqrt(mean_squared_error(labels, predictions, weights)[0]))


def _counts(labels: Any, predictions: Any, weights: Any):
    """Weighted (true positives, false positives, false negatives) of boolean labels and predictions."""
    predictions = np.asarray(predictions).astype(bool)
    labels = np.asarray(labels).astype(bool).reshape(predictions.shape)
    w = _weights(weights, predictions.shape)
    return (w * (labels & predictions)).sum(), (w * (~labels & predictions)).sum(), (w * (labels & ~predictions)).sum()


@_labels_metric
def precision(labels: Any, predictions: Any, weights: Any) -> float:
    """(true positives / predicted positives, None); 0 when nothing is predicted positive."""
    tp, fp, _ = _counts(labels, predictions, weights)
    return _div(tp, tp + fp)


@_labels_metric
def recall(labels: Any, predictions: Any, weights: Any) -> float:
    """(true positives / actual positives, None); 0 when there is no positive label."""
    tp, _, fn = _counts(labels, predictions, weights)
    return _div(tp, tp + fn)


def auc(
    labels: Any,
    predictions: Any,
    weights: Any = None,
    num_thresholds: int = 200,
    metrics_collections: Any = None,
    updates_collections: Any = None,
    curve: str = "ROC",
    name: str | None = None,
    summation_method: str = "trapezoidal",
    thresholds: Any = None,
):
    """TensorFlow's approximate AUC (ROC or PR) over `num_thresholds` thresholds; predictions in [0, 1]."""
    if curve not in ("ROC", "PR"):
        raise ValueError(f"curve must be either ROC or PR, {curve} unknown")
    if summation_method not in ("trapezoidal", "careful_interpolation", "minoring", "majoring"):
        raise ValueError(f"Invalid summation_method: {summation_method}")
    predictions = np.asarray(predictions, np.float64).reshape(-1)
    labels = np.asarray(labels).astype(bool).reshape(-1)
    if labels.shape != predictions.shape:
        raise ValueError(
            f"labels and predictions must have the same size. Received {labels.size} labels and "
            f"{predictions.size} predictions."
        )
    if predictions.size and (predictions.min() < 0 or predictions.max() > 1):
        raise ValueError("predictions must be in [0, 1] (probabilities), as TensorFlow's auc asserts.")
    w = _weights(weights, predictions.shape).reshape(-1) if weights is not None else np.ones_like(predictions)
    if thresholds is not None:
        cuts = np.concatenate([[0.0 - 1e-7], np.asarray(thresholds, np.float64), [1.0 + 1e-7]])
    else:
        kepsilon = 1e-7
        cuts = np.array(
            [0.0 - kepsilon] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1.0 + kepsilon]
        )
    positive = predictions[None, :] > cuts[:, None]
    tp = ((positive & labels) * w).sum(axis=1)
    fp = ((positive & ~labels) * w).sum(axis=1)
    fn = ((~positive & labels) * w).sum(axis=1)
    tn = ((~positive & ~labels) * w).sum(axis=1)
    epsilon = 1.0e-6
    recall_ = (tp + epsilon) / (tp + fn + epsilon)
    if curve == "ROC":
        x, y = fp / (fp + tn + epsilon), recall_
    else:
        x, y = recall_, (tp + epsilon) / (tp + fp + epsilon)
    if summation_method == "minoring":
        heights = np.minimum(y[:-1], y[1:])
    elif summation_method == "majoring":
        heights = np.maximum(y[:-1], y[1:])
    else:
        heights = (y[:-1] + y[1:]) / 2.0
    return float(np.sum((x[:-1] - x[1:]) * heights)), None
