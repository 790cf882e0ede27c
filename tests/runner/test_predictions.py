"""What `TPUEstimator.predict` yields per batch (runner/predictions.py), with TensorFlow's errors."""

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.runner.predictions import as_arrays, examples


def test_a_dict_keeps_the_keys_asked_for_and_splits_into_examples():
    batch = as_arrays({"p": [0.25, 0.75], "id": [[1, 2], [3, 4]]}, predict_keys=None)
    assert [{k: v.tolist() for k, v in e.items()} for e in examples(batch)] == [
        {"p": 0.25, "id": [1, 2]},
        {"p": 0.75, "id": [3, 4]},
    ]
    assert list(as_arrays({"p": [1.0], "id": [7]}, predict_keys=["id"])) == ["id"]


def test_an_array_is_split_into_its_rows():
    assert [row.tolist() for row in examples(as_arrays([[1, 2], [3, 4]], None))] == [[1, 2], [3, 4]]


def test_a_missing_key_and_unequal_batch_lengths_are_value_errors():
    # the wording of tensorflow_estimator's Estimator._extract_keys / _extract_batch_length
    with pytest.raises(ValueError, match=r"Expected to run at least one output from \['p'\], provided \['q'\]\."):
        as_arrays({"p": [1.0]}, predict_keys=["q"])
    with pytest.raises(ValueError, match="Batch length of predictions should be same. b has different batch length"):
        list(examples(as_arrays({"a": [1, 2], "b": [1]}, None)))


def test_predict_yields_them(tmp_path):
    def model_fn(features, labels, mode, params):
        x = np.asarray(features["x"], np.float32)
        if mode == tf.estimator.ModeKeys.TRAIN:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=0.0, train_op=lambda: None)
        return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"double": 2 * x, "first": x[:1]})

    est = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path)),
        use_tpu=False,
    )

    def input_fn(params):
        return iter([{"x": np.array([1.0, 2.0])}])

    est.train(input_fn)  # a model to predict with (one step)
    assert [p["double"].item() for p in est.predict(input_fn, predict_keys="double")] == [2.0, 4.0]
    with pytest.raises(ValueError, match="Batch length of predictions should be same. first has"):
        list(est.predict(input_fn))
