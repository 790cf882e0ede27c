"""The model_fn's contract: how the runner calls it, what it returns (`EstimatorSpec`, `TPUEstimatorSpec`).

The runner calls `model_fn(features, labels, mode, params[, config])` as
TensorFlow's TPUEstimator does, with TensorFlow's checks of its arguments
(`verify_model_fn` when the estimator is built, `call_model_fn` at each
call), and reads the values of the spec it returns.

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
import inspect
from typing import Any

import numpy as np

from .inputs import fn_args


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


def fields_signature(cls: Any) -> Any:
    """Class decorator: `inspect.signature(cls)` shows its namedtuple's fields (TensorFlow's arguments), not the
    `*args, **kwargs` of the `__new__` that checks them."""
    cls.__signature__ = inspect.signature(cls.__bases__[0])
    return cls


# TensorFlow's namedtuples, in its field order: `mode` is required, every other field is None by default.
@fields_signature
class EstimatorSpec(
    collections.namedtuple(
        "EstimatorSpec",
        "mode predictions loss train_op eval_metric_ops export_outputs training_chief_hooks training_hooks scaffold "
        "evaluation_hooks prediction_hooks embedding_gradients",
        defaults=(None, None, None, None, None, None, None, None, None, None, None),
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

    def __new__(cls, *args: Any, **kwargs: Any) -> EstimatorSpec:
        spec = super().__new__(cls, *args, **kwargs)
        _check_mode(spec.mode, "EstimatorSpec")
        if spec.mode == ModeKeys.TRAIN and spec.loss is None:
            raise ValueError("Missing loss.")
        if spec.mode == ModeKeys.TRAIN and spec.train_op is None:
            raise ValueError("Missing train_op.")
        if spec.mode == ModeKeys.EVAL and spec.loss is None:
            raise ValueError("Missing loss.")
        if spec.mode == ModeKeys.PREDICT and spec.predictions is None:
            raise ValueError("Missing predictions.")
        if spec.eval_metric_ops is not None and not isinstance(spec.eval_metric_ops, dict):
            raise TypeError(f"eval_metric_ops must be a dict, given: {spec.eval_metric_ops}")
        _check_train_op(spec.train_op)
        return spec


@fields_signature
class TPUEstimatorSpec(
    collections.namedtuple(
        "TPUEstimatorSpec",
        "mode predictions loss train_op eval_metrics export_outputs scaffold_fn host_call training_hooks "
        "evaluation_hooks prediction_hooks embedding_gradients",
        defaults=(None, None, None, None, None, None, None, None, None, None, None),
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

    def __new__(cls, *args: Any, **kwargs: Any) -> TPUEstimatorSpec:
        spec = super().__new__(cls, *args, **kwargs)
        _check_mode(spec.mode, "TPUEstimatorSpec")
        eval_metrics = spec.eval_metrics
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
        _check_train_op(spec.train_op)
        return spec


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


# How the runner calls a model_fn ----------------------------------------------------------------------

_MODEL_FN_ARGS = {"features", "labels", "mode", "params", "self", "config"}
_MODEL_FN_FIX = (
    "TPUEstimator calls model_fn(features, labels, mode, params[, config]): define it as "
    "`def model_fn(features, labels, mode, params):` (the examples of TensorFlow's EmbeddingConfigSpec "
    "and embedding_column pages write `def model_fn(features):`, which TensorFlow refuses too)."
)


def verify_model_fn(model_fn: Any, params: dict | None) -> None:
    """TensorFlow's construction checks of the model_fn's arguments (`_verify_model_fn_args`).

    A model_fn without `params` is refused here only when params are
    given; otherwise, as in TensorFlow, when it is first called.
    """
    if model_fn is None or not callable(model_fn):
        raise ValueError(f"model_fn must be provided (a callable). Received: {model_fn!r}.")
    args = set(fn_args(model_fn))
    if "features" not in args:
        raise ValueError(f"model_fn ({model_fn}) must include features argument.")
    if params is not None and "params" not in args:
        raise ValueError(
            f"model_fn ({model_fn}) does not include params argument, but params ({params}) is "
            f"passed to Estimator. {_MODEL_FN_FIX}"
        )
    unexpected = sorted(args - _MODEL_FN_ARGS)
    if unexpected:
        raise ValueError(f"model_fn ({model_fn}) has following not expected args: {unexpected}")


def call_model_fn(
    model_fn: Any, features: Any, labels: Any, mode: str, params: dict, config: Any, args: tuple[str, ...] | None = None
) -> EstimatorSpec | TPUEstimatorSpec:
    """Calls `model_fn` with the arguments it takes and checks the spec it returns for `mode`, as TensorFlow does.

    `args`: `fn_args(model_fn)` when the caller knows them (an estimator reads them once, not at every step)."""
    args = fn_args(model_fn) if args is None else args
    kwargs = {}
    if "labels" in args:
        kwargs["labels"] = labels
    elif labels is not None:
        raise ValueError(f"model_fn does not take labels, but input_fn returns labels. {_MODEL_FN_FIX}")
    if "mode" in args:
        kwargs["mode"] = mode
    if "params" not in args:  # TensorFlow's TPUEstimator raises here too, when it first calls the model_fn
        raise ValueError(
            f"model_fn ({model_fn}) does not include params argument, required by "
            f"TPUEstimator to pass batch size as params['batch_size']. {_MODEL_FN_FIX}"
        )
    kwargs["params"] = params
    if "config" in args:
        kwargs["config"] = config
    spec = model_fn(features=features, **kwargs)
    if not isinstance(spec, (EstimatorSpec, TPUEstimatorSpec)):
        raise ValueError(f"model_fn should return an EstimatorSpec or a TPUEstimatorSpec. Given: {spec!r}")
    if spec.mode != mode:
        raise ValueError(f"model_fn returned a spec for mode {spec.mode!r} while running mode {mode!r}.")
    if mode == ModeKeys.TRAIN and (spec.loss is None or spec.train_op is None):
        raise ValueError("Missing loss." if spec.loss is None else "Missing train_op.")
    if mode == ModeKeys.EVAL and spec.loss is None:
        raise ValueError("Missing loss.")
    if mode == ModeKeys.PREDICT and spec.predictions is None:
        raise ValueError("Missing predictions.")
    if isinstance(spec, TPUEstimatorSpec) and spec.scaffold_fn is not None:
        spec.scaffold_fn()
    return spec
