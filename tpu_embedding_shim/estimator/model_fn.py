"""What a model_fn returns: `EstimatorSpec`, `TPUEstimatorSpec`, and `ModeKeys`; how the runner reads its values.

Both specs are TensorFlow's namedtuples with one field added at the end,
`embedding_gradients`: the numpy stand-in for the backward pass TensorFlow
would derive from the graph.

In TRAIN mode a numpy model_fn returns

- `loss`: a number (or 0-d array, or a torch scalar with the torch bridge);
- `embedding_gradients`: `{layer_output: d(loss)/d(layer_output)}`, keyed by
  the exact arrays DenseFeatures / input_layer / SequenceFeatures returned
  (or by feature key for one feature's activation); the runner splits them
  per feature and the embedding engine applies them with the
  EmbeddingConfigSpec's optimizer;
- `train_op`: a zero-argument callable that updates the dense parameters.
  The runner calls it once per step, after the embedding update.

>>> spec = TPUEstimatorSpec(ModeKeys.TRAIN, loss=0.5, train_op=lambda: None)
>>> spec.mode, spec.loss, spec.embedding_gradients
('train', 0.5, None)
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np


class ModeKeys:
    """`tf.estimator.ModeKeys`."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


_MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)


class NanLossDuringTrainingError(RuntimeError):
    """The loss of a training step is NaN (TensorFlow's `NanTensorHook`); no table or variable was changed."""

    def __str__(self):
        return "NaN loss during training."


def _check_mode(mode: Any, owner: str) -> None:
    if mode not in _MODES:
        raise ValueError(
            f"{owner}: mode must be one of {list(_MODES)} (ModeKeys.TRAIN / EVAL / PREDICT). Received: {mode!r}."
        )


class EstimatorSpec(
    collections.namedtuple(
        "EstimatorSpec",
        (
            "mode",
            "predictions",
            "loss",
            "train_op",
            "eval_metric_ops",
            "export_outputs",
            "training_chief_hooks",
            "training_hooks",
            "scaffold",
            "evaluation_hooks",
            "prediction_hooks",
            "embedding_gradients",
        ),
    )
):
    """`tf.estimator.EstimatorSpec` (+ `embedding_gradients`).

    `eval_metric_ops` is `{name: value or (value, update_op)}` computed on
    one eval batch; the runner reports the mean of each value over the eval
    batches (like `tf.compat.v1.metrics.mean` over per-batch values). For
    metrics that need the whole eval set at once (AUC), return a
    TPUEstimatorSpec with `eval_metrics=(metric_fn, tensors)`.
    TensorFlow's checks: TRAIN needs `loss` and `train_op`, EVAL `loss`,
    PREDICT `predictions`.
    """

    def __new__(
        cls,
        mode,
        predictions=None,
        loss=None,
        train_op=None,
        eval_metric_ops=None,
        export_outputs=None,
        training_chief_hooks=None,
        training_hooks=None,
        scaffold=None,
        evaluation_hooks=None,
        prediction_hooks=None,
        embedding_gradients=None,
    ):
        _check_mode(mode, "EstimatorSpec")
        if mode == ModeKeys.TRAIN and loss is None:
            raise ValueError("Missing loss.")
        if mode == ModeKeys.TRAIN and train_op is None:
            raise ValueError("Missing train_op.")
        if mode == ModeKeys.EVAL and loss is None:
            raise ValueError("Missing loss.")
        if mode == ModeKeys.PREDICT and predictions is None:
            raise ValueError("Missing predictions.")
        if eval_metric_ops is not None and not isinstance(eval_metric_ops, dict):
            raise TypeError(f"eval_metric_ops must be a dict, given: {eval_metric_ops}")
        _check_train_op(train_op)
        return super().__new__(
            cls,
            mode,
            predictions,
            loss,
            train_op,
            eval_metric_ops,
            export_outputs,
            training_chief_hooks,
            training_hooks,
            scaffold,
            evaluation_hooks,
            prediction_hooks,
            embedding_gradients,
        )


class TPUEstimatorSpec(
    collections.namedtuple(
        "TPUEstimatorSpec",
        (
            "mode",
            "predictions",
            "loss",
            "train_op",
            "eval_metrics",
            "export_outputs",
            "scaffold_fn",
            "host_call",
            "training_hooks",
            "evaluation_hooks",
            "prediction_hooks",
            "embedding_gradients",
        ),
    )
):
    """`tf.compat.v1.estimator.tpu.TPUEstimatorSpec` (+ `embedding_gradients`).

    `eval_metrics` is TensorFlow's `(metric_fn, tensors)`: `tensors` a list
    (positional arguments) or dict (keyword arguments) of per-batch arrays.
    The runner concatenates each tensor over all eval batches (along the
    first axis; a 0-d value becomes one entry per batch) and calls
    `metric_fn` ONCE on the whole eval set. `metric_fn` returns
    `{name: value or (value, update_op)}`; the value is reported.
    `host_call` is accepted and ignored; `scaffold_fn` is called if given.
    """

    def __new__(
        cls,
        mode,
        predictions=None,
        loss=None,
        train_op=None,
        eval_metrics=None,
        export_outputs=None,
        scaffold_fn=None,
        host_call=None,
        training_hooks=None,
        evaluation_hooks=None,
        prediction_hooks=None,
        embedding_gradients=None,
    ):
        _check_mode(mode, "TPUEstimatorSpec")
        if eval_metrics is not None:
            if not isinstance(eval_metrics, (tuple, list)):
                raise ValueError("eval_metrics should be tuple or list")
            if len(eval_metrics) != 2:
                raise ValueError("eval_metrics should have two elements.")
            if not callable(eval_metrics[0]):
                raise TypeError("eval_metrics[0] should be callable.")
            if not isinstance(eval_metrics[1], (tuple, list, dict)):
                raise ValueError(
                    "eval_metrics[1] should be a list/tuple or a dict of tensors. "
                    f"Received: {type(eval_metrics[1]).__name__}."
                )
        _check_train_op(train_op)
        return super().__new__(
            cls,
            mode,
            predictions,
            loss,
            train_op,
            eval_metrics,
            export_outputs,
            scaffold_fn,
            host_call,
            training_hooks,
            evaluation_hooks,
            prediction_hooks,
            embedding_gradients,
        )


def _check_train_op(train_op: Any) -> None:
    if type(train_op).__module__.startswith("tensorflow."):  # a TF op: the TensorFlow bridge runs it
        return
    if train_op is not None and not callable(train_op):
        raise TypeError(
            "train_op must be a zero-argument callable that updates the model's dense parameters (the runner "
            f"calls it after the embedding update). Received: {type(train_op).__name__}. With the torch "
            "bridge, use torch_bridge.train_op(optimizer)."
        )


def to_numpy(value: Any) -> Any:
    """A returned value as numpy reads it: a torch tensor detached and copied to the CPU, anything else as is."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def scalar(value: Any, what: str) -> float:
    """A returned scalar (a number, a 0-d or one-element array, a torch scalar) as a float; `what` names it."""
    array = np.asarray(to_numpy(value), dtype=np.float64)
    if array.size != 1:
        raise ValueError(f"{what} must be a scalar. Received an array of shape {list(array.shape)}.")
    return float(array.reshape(()))
