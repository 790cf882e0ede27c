"""tf.compat.v1.metrics for a numpy metric_fn."""

import inspect

import numpy as np
import pytest

import tpu_embedding_shim as tf


def exact_auc(labels, scores):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))


def test_auc_is_tensorflows_thresholded_approximation():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 2000)
    scores = np.clip(0.5 + 0.2 * (labels - 0.5) + 0.2 * rng.normal(size=2000), 0, 1)
    value, update = tf.compat.v1.metrics.auc(labels, scores)
    assert update is None
    assert value == pytest.approx(exact_auc(labels, scores), abs=2e-3)
    fine = tf.compat.v1.metrics.auc(labels, scores, num_thresholds=4000)[0]
    assert fine == pytest.approx(exact_auc(labels, scores), abs=5e-4)
    assert tf.compat.v1.metrics.auc(labels, scores, curve="PR")[0] > 0.5
    with pytest.raises(ValueError, match="predictions must be in"):
        tf.compat.v1.metrics.auc([0, 1], [0.5, 2.0])


def test_simple_metrics():
    assert tf.compat.v1.metrics.mean([1.0, 3.0], weights=[1, 3])[0] == 2.5
    assert tf.compat.v1.metrics.precision([1, 0, 1, 1], [1, 1, 0, 1])[0] == pytest.approx(2 / 3)
    assert tf.compat.v1.metrics.recall([1, 0, 1, 1], [1, 1, 0, 1])[0] == pytest.approx(2 / 3)
    assert tf.compat.v1.metrics.root_mean_squared_error([0.0, 0.0], [3.0, 4.0])[0] == pytest.approx(np.sqrt(12.5))


# str(inspect.signature(tf.compat.v1.metrics.<name>)) of TensorFlow 2.15.1 (the oracle venv).
_LABELS_SIGNATURE = "(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None)"
TF_SIGNATURES = {
    "accuracy": _LABELS_SIGNATURE,
    "mean_squared_error": _LABELS_SIGNATURE,
    "mean_absolute_error": _LABELS_SIGNATURE,
    "root_mean_squared_error": _LABELS_SIGNATURE,
    "precision": _LABELS_SIGNATURE,
    "recall": _LABELS_SIGNATURE,
    "mean": "(values, weights=None, metrics_collections=None, updates_collections=None, name=None)",
    "auc": "(labels, predictions, weights=None, num_thresholds=200, metrics_collections=None, "
    "updates_collections=None, curve='ROC', name=None, summation_method='trapezoidal', thresholds=None)",
}


@pytest.mark.parametrize("name", sorted(TF_SIGNATURES))
def test_each_metric_has_tensorflows_signature_and_name(name):
    metric = getattr(tf.compat.v1.metrics, name)
    signature = inspect.signature(metric)
    bare = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    assert str(bare) == TF_SIGNATURES[name]
    assert metric.__name__ == name and metric.__doc__
    # every argument by keyword, as TensorFlow takes them; the collections and the name change nothing
    kwargs = {"values": [1.0, 0.0]} if name == "mean" else {"labels": [1, 0], "predictions": [1.0, 0.0]}
    plain = metric(**kwargs)
    assert metric(**kwargs, weights=None, metrics_collections=["c"], updates_collections=["u"], name="m") == plain
