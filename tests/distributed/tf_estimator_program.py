"""A TPUEstimator program with a TensorFlow model_fn, one import changed; run by test_tf_estimator.py.

`python tf_estimator_program.py MODEL_DIR OUT.json ACTION`, ACTION `train`
(6 steps of global batch 12, then evaluate), `train-plain` (the optimizer
not wrapped in CrossShardOptimizer) or `evaluate`. Replica 0 writes
OUT.json: the variables, the eval metrics, and every replica's error.

The loss is the mean over the GLOBAL batch and CrossShardOptimizer sums
(`reduction=SUM`), so any number of replicas trains one process's numbers.
"""

import sys

import numpy as np
from report import record_model, write_record  # a sibling module: this file runs as a script

import tpu_embedding_shim.tensorflow as tf  # was: import tensorflow as tf
from tpu_embedding_shim.api import replicas
from tpu_embedding_shim.api.tensors import RaggedTensor

BATCH = 12


def input_fn_for(count, seed):
    def input_fn(params):
        _, replica, replicas_count, _ = params["context"].current_input_fn_deployment()
        rng = np.random.default_rng(seed)
        for _ in range(count):
            rows = [list(rng.integers(0, 11, size=rng.integers(1, 4))) for _ in range(BATCH)]
            labels = rng.integers(0, 2, size=BATCH).astype(np.float32)
            batch = ({"a": RaggedTensor.from_list(rows)}, labels)
            yield replicas.replica_slice(batch, replica=replica, replicas=replicas_count)

    return input_fn


def estimator(model_dir, wrapped=True):
    column = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("a", 11), 3, combiner="mean"
    )

    def model_fn(features, labels, mode, params):
        x = tf.compat.v1.feature_column.input_layer(features, [column])
        logits = tf.squeeze(tf.compat.v1.layers.dense(x, 1, kernel_initializer=tf.compat.v1.ones_initializer()), 1)
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        if mode == tf.estimator.ModeKeys.EVAL:

            def metric_fn(labels, logits):
                return {
                    "mean_label": tf.compat.v1.metrics.mean(labels),
                    "count": tf.compat.v1.metrics.mean(tf.cast(tf.size(labels), tf.float32)),
                }

            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
                mode, loss=tf.reduce_mean(losses), eval_metrics=(metric_fn, [labels, logits])
            )
        loss = tf.reduce_sum(losses) / (tf.cast(tf.size(labels), tf.float32) * params["context"].num_replicas)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.5)
        if wrapped:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer, reduction=tf.compat.v1.losses.Reduction.SUM)
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.compat.v1.estimator.tpu.RunConfig(
            model_dir=model_dir, tf_random_seed=3, tpu_config=tf.compat.v1.estimator.tpu.TPUConfig(num_shards=6)
        ),
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        embedding_config_spec=tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=[column],
            optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(0.3),
        ),
    )


def main(model_dir, out, action):
    record = {"replicas": replicas.num_replicas()}
    try:
        est = estimator(model_dir, wrapped=action != "train-plain")
        if action != "evaluate":
            est.train(input_fn_for(6, seed=0))
        metrics = est.evaluate(input_fn_for(2, seed=1))
        record_model(record, est, metrics)
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
    write_record(record, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
