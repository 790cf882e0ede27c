"""`params` and `params['context']` as TensorFlow's TPUEstimator fills them (tensorflow_estimator 2.15).

The keys TensorFlow puts in the model_fn's params ('batch_size', 'use_tpu',
'context') and the input_fn's ('batch_size', 'context'), with TensorFlow's
values; the context's methods with TensorFlow's return shapes, and its
RuntimeErrors where TensorFlow allows a method in the input_fn only or in
the model_fn only.
"""

import numpy as np
import pytest

import tpu_embedding_shim as tf

from .problem import D, V

IN_INPUT_FN_ONLY = "This TPUContext instance must not be called from model_fn."
IN_MODEL_FN_ONLY = "This TPUContext instance must not be called from input_fn."


def _estimator(tmp_path, seen, **kwargs):
    """(estimator, input_fn), both recording what they see into `seen`."""
    column = tf.tpu.experimental.embedding_column(tf.feature_column.categorical_column_with_identity("user", V), D)

    def model_fn(features, labels, mode, params):
        context = params["context"]
        record = {"keys": sorted(params), "use_tpu": params["use_tpu"], "batch_size": params.get("batch_size")}
        record["device_assignment"] = context.device_assignment
        with pytest.raises(RuntimeError, match=IN_INPUT_FN_ONLY):
            context.current_input_fn_deployment()
        with pytest.raises(RuntimeError, match=IN_INPUT_FN_ONLY):
            context.current_host
        seen.setdefault(("model_fn", mode), record)
        x = tf.keras.layers.DenseFeatures([column])(features)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"x": x})
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=float(np.sum(x)), train_op=lambda: None, embedding_gradients={x: np.ones_like(x)}
        )

    def input_fn(params, mode, input_context):
        context = params["context"]
        with pytest.raises(RuntimeError, match=IN_MODEL_FN_ONLY):
            context.device_assignment
        seen.setdefault(
            ("input_fn", mode),
            {
                "keys": sorted(params),
                "deployment": context.current_input_fn_deployment(),
                "current_host": context.current_host,
                "counts": (context.num_replicas, context.num_hosts, context.num_of_replicas_per_host),
                "device_for_replica": context.device_for_replica(0),
                "host_placement": context.tpu_host_placement_function(0),
                "input_context": input_context,
            },
        )
        return {"user": np.arange(1, 9)[:, None] % V}

    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path)),
        train_batch_size=8,
        eval_batch_size=8,
        predict_batch_size=8,
        params={"hidden": 3},
        embedding_config_spec=tf.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=[column], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
        ),
        **kwargs,
    )
    return estimator, input_fn


def _run_every_mode(estimator, input_fn):
    estimator.train(input_fn, steps=1)
    estimator.evaluate(input_fn, steps=1)
    list(estimator.predict(input_fn, yield_single_examples=False))


def test_params_and_context_have_tensorflows_keys_and_return_shapes(tmp_path):
    seen = {}
    _run_every_mode(*_estimator(tmp_path, seen))
    device = "/job:worker/replica:0/task:0/device:CPU:0"
    for mode in ("train", "eval", "infer"):
        assert seen[("model_fn", mode)] == {
            "keys": ["batch_size", "context", "dense_state", "hidden", "use_tpu"],
            "use_tpu": True,
            "batch_size": 8,
            "device_assignment": None,
        }
        assert seen[("input_fn", mode)] == {
            "keys": ["batch_size", "context", "hidden"],
            "deployment": (device, 0, 1, 1),  # (host device, invocation index, invocations, replicas it feeds)
            "current_host": 0,
            "counts": (1, 1, 1),
            "device_for_replica": (device, 0),
            "host_placement": device,
            "input_context": None,
        }


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"eval_on_tpu": False}, {"train": True, "eval": False, "infer": True}),
        ({"use_tpu": False}, {"train": False, "eval": False, "infer": False}),
    ],
)
def test_use_tpu_is_false_where_tensorflow_runs_the_model_fn_on_the_cpu(tmp_path, kwargs, expected):
    seen = {}
    _run_every_mode(*_estimator(tmp_path, seen, **kwargs))
    assert {mode: seen[("model_fn", mode)]["use_tpu"] for mode in expected} == expected
