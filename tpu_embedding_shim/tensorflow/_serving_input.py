"""`tf.estimator.export` where TensorFlow has no `tf.estimator`: the receivers and their two builders.

Without tensorflow-estimator (TensorFlow 2.15 without it, TensorFlow 2.16
and later), a TPUEstimator program still writes its
`serving_input_receiver_fn` with these names. They behave as
tensorflow-estimator 2.15's (`export/export.py`): the same namedtuples, the
same wrapping of a lone tensor into a dict (keys `feature` and `input`), the
same checks with the same exception type, `ValueError`, and the placeholders
the builders make have TensorFlow's names. The messages start as
TensorFlow's and add the value received. Two differences: a
`receiver_tensors_alternatives` dict is not rewritten in place, and the
raw builder's function refuses `features` that are not a dict of tensors
with that `ValueError` (TensorFlow's fails on them with an AttributeError).

The export outputs (`PredictOutput`, `ClassificationOutput`,
`RegressionOutput`, ...) are TensorFlow core's own classes, which
tensorflow-estimator only re-exports (`EXPORT_NAMES`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

__all__ = [
    "ServingInputReceiver",
    "TensorServingInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
    "EXPORT_NAMES",
]

# The key a lone tensor gets, per argument (TensorFlow's export_utils constants).
_SINGLE_KEYS = {"feature": "feature", "receiver_tensor": "input", "receiver_tensors_alternative": "input"}


def _is_tensor(value: Any) -> bool:
    if isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
        return True
    if hasattr(value, "tensor"):  # TensorFlow's carve-out: a labeled tensor, which converts to a Tensor
        try:
            tf.convert_to_tensor(value)
        except TypeError:
            return False
        return True
    return False


def _check_key(key: Any, label: str, allow_ints: bool) -> None:
    if isinstance(key, str) or (allow_ints and isinstance(key, int)):
        return
    allowed = "strings or ints" if allow_ints else "strings"
    raise ValueError(f"{label} keys must be {allowed}: {key}.")


def _check_tensor(value: Any, key: Any | None, label: str) -> None:
    if not _is_tensor(value):
        where = f" {key}" if key else ""
        raise ValueError(
            f"{label}{where} must be a Tensor, SparseTensor, or RaggedTensor. Received: {type(value).__name__}."
        )


def _as_checked_dict(tensors: Any, label: str, allow_ints: bool = False) -> dict[Any, Any]:
    """`tensors` as a new `{key: tensor}` dict (a lone tensor under TensorFlow's key for `label`), checked."""
    if tensors is None:
        raise ValueError(f"{label}s must be defined.")
    tensors = dict(tensors) if isinstance(tensors, dict) else {_SINGLE_KEYS[label]: tensors}
    for key, value in tensors.items():
        _check_key(key, label, allow_ints)
        _check_tensor(value, key, label)
    return tensors


class ServingInputReceiver(
    collections.namedtuple("ServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives"])
):
    """What a `serving_input_receiver_fn` returns: the model's features and the tensors a request feeds.

    `features` (str or int keys) and `receiver_tensors` (str keys) are
    tensors or dicts of them; a lone tensor becomes `{'feature': t}` /
    `{'input': t}`. `receiver_tensors_alternatives` names further groups of
    receiver tensors, each an extra serving signature.
    """

    def __new__(cls, features: Any, receiver_tensors: Any, receiver_tensors_alternatives: Any = None):
        features = _as_checked_dict(features, "feature", allow_ints=True)
        receiver_tensors = _as_checked_dict(receiver_tensors, "receiver_tensor")
        if receiver_tensors_alternatives is not None:
            if not isinstance(receiver_tensors_alternatives, dict):
                raise ValueError(f"receiver_tensors_alternatives must be a dict: {receiver_tensors_alternatives}.")
            receiver_tensors_alternatives = {
                name: _as_checked_dict(group, "receiver_tensors_alternative")
                for name, group in receiver_tensors_alternatives.items()
            }
        return super().__new__(cls, features, receiver_tensors, receiver_tensors_alternatives)


class TensorServingInputReceiver(
    collections.namedtuple(
        "TensorServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives"]
    )
):
    """A `ServingInputReceiver` for a model that takes one tensor, not a dict: `features` stays that tensor."""

    def __new__(cls, features: Any, receiver_tensors: Any, receiver_tensors_alternatives: Any = None):
        if features is None:
            raise ValueError("features must be defined.")
        _check_tensor(features, None, "feature")
        receiver = ServingInputReceiver(features, receiver_tensors, receiver_tensors_alternatives)
        return super().__new__(
            cls,
            receiver.features[_SINGLE_KEYS["feature"]],
            receiver.receiver_tensors,
            receiver.receiver_tensors_alternatives,
        )


def build_parsing_serving_input_receiver_fn(
    feature_spec: Mapping[str, Any], default_batch_size: int | None = None
) -> Callable[[], Any]:
    """A `serving_input_receiver_fn` fed serialized `tf.Example`s: the features are `parse_example`'s."""

    def serving_input_receiver_fn() -> ServingInputReceiver:
        examples = tf.compat.v1.placeholder(tf.string, [default_batch_size], name="input_example_tensor")
        features = tf.compat.v1.io.parse_example(examples, feature_spec)
        return ServingInputReceiver(features, {"examples": examples})

    return serving_input_receiver_fn


def _placeholder_like(tensor: Any, default_batch_size: int | None) -> Any:
    """A placeholder of `tensor`'s dtype and per-example shape, named as its op (no name when eager)."""
    shape = tf.TensorShape([default_batch_size]).concatenate(tensor.get_shape()[1:])
    try:
        name = tensor.op.name
    except AttributeError:
        name = None
    return tf.compat.v1.placeholder(dtype=tensor.dtype, shape=shape, name=name)


def build_raw_serving_input_receiver_fn(
    features: Mapping[str, Any], default_batch_size: int | None = None
) -> Callable[[], Any]:
    """A `serving_input_receiver_fn` fed the features themselves: one placeholder per feature, shaped like it."""

    def serving_input_receiver_fn() -> ServingInputReceiver:
        if not isinstance(features, Mapping):
            raise ValueError(f"features must be a dict of string to Tensor. Received: {type(features).__name__}.")
        for key, value in features.items():  # the keys are checked as the receiver's
            _check_tensor(value, key, "feature")
        placeholders = {key: _placeholder_like(value, default_batch_size) for key, value in features.items()}
        return ServingInputReceiver(placeholders, placeholders)

    return serving_input_receiver_fn


def _export_outputs() -> dict[str, Any]:
    """TensorFlow core's export output classes (tensorflow-estimator re-exports these very classes)."""
    from tensorflow.python.saved_model.model_utils import export_output

    names = "ClassificationOutput EvalOutput ExportOutput PredictOutput RegressionOutput"
    return {name: getattr(export_output, name) for name in names.split()}


EXPORT_NAMES: dict[str, Any] = {
    **_export_outputs(),
    "ServingInputReceiver": ServingInputReceiver,
    "TensorServingInputReceiver": TensorServingInputReceiver,
    "build_parsing_serving_input_receiver_fn": build_parsing_serving_input_receiver_fn,
    "build_raw_serving_input_receiver_fn": build_raw_serving_input_receiver_fn,
}
