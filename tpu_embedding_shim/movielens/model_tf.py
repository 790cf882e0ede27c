"""The MovieLens model with its dense part in TensorFlow: a legacy TPUEstimator model_fn, one import changed.

`tpu-embedding-shim movielens --dense tf` trains this model_fn instead of
the numpy one of `model.py`. It is the same model: the job's TPU embedding
columns (the engine looks them up and trains them with the
EmbeddingConfigSpec's Adagrad), the history mean-pooled over its valid
positions, the movie's dot products with the user and with the pooled
history, one hidden ReLU layer, one logit, sigmoid cross-entropy, Adam on
the dense weights. Here TensorFlow builds it as a `tf.compat.v1` graph,
and the runner feeds the engine's activations into it (see
docs/tensorflow_estimator.md).

Importing this module imports TensorFlow: the job imports it only for
`--dense tf`. Without TensorFlow it is an ImportError naming the
`tensorflow` extra.
"""

from __future__ import annotations

import tpu_embedding_shim.tensorflow as tf  # was: import tensorflow as tf

from .model import Dims


def model_fn_for(
    pooled_columns: list,
    sequence_columns: list,
    layout: dict[str, tuple[int, int]],
    dims: Dims = Dims(),
    *,
    learning_rate: float = 3e-3,
    seed: int = 0,
    train_losses: list[float] | None = None,
):
    """The model_fn over the job's columns (`model.feature_columns`); `layout` is `model.pooled_layout`'s.

    `train_losses`, when given, receives each training step's loss: the
    job's per-epoch train loss, as the numpy model_fn records it.
    """
    user_start, user_width = layout["user_embedding"]
    item_start, item_width = layout["item_shared_embedding"]

    def model_fn(features, labels, mode, params):
        pooled = tf.keras.layers.DenseFeatures(pooled_columns)(features)  # [B, P], columns in name order
        sequence, lengths = tf.keras.experimental.SequenceFeatures(sequence_columns)(features)  # [B, L, D], [B]
        user = pooled[:, user_start : user_start + user_width]
        item = pooled[:, item_start : item_start + item_width]
        mask = tf.sequence_mask(lengths, tf.shape(sequence)[1], dtype=tf.float32)[:, :, None]
        history = tf.reduce_sum(sequence * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        dot_user = tf.reduce_sum(user * item, axis=1, keepdims=True)
        dot_history = tf.reduce_sum(history * item, axis=1, keepdims=True)
        net = tf.concat([pooled, history, dot_user, dot_history], axis=1)
        hidden = tf.keras.layers.Dense(
            dims.hidden, activation="relu", kernel_initializer=tf.keras.initializers.HeNormal(seed)
        )(net)
        output = tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.LecunNormal(seed + 1))
        logits = tf.squeeze(output(hidden), axis=1)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={"probability": tf.sigmoid(logits)})

        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        loss = tf.reduce_mean(losses)
        if mode == tf.estimator.ModeKeys.EVAL:

            def metric_fn(labels, logits):
                return {
                    # 2000 thresholds: within 1e-5 of the exact AUC the numpy job reports (measured)
                    "auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits), num_thresholds=2000),
                    "log_loss": tf.compat.v1.metrics.mean(
                        tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
                    ),
                }

            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
                mode, loss=loss, eval_metrics=(metric_fn, [labels, logits])
            )

        # The mean over the GLOBAL batch (this replica holds 1 / num_replicas of it): the engine's sum of the
        # replicas' embedding gradients and the optimizer's SUM of the dense ones are one process's gradients.
        # One process: the batch's mean.
        global_batch = tf.cast(tf.size(labels), tf.float32) * params["context"].num_replicas
        global_loss = tf.reduce_sum(losses) / global_batch
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(
            tf.compat.v1.train.AdamOptimizer(learning_rate), reduction=tf.compat.v1.losses.Reduction.SUM
        )
        train_op = optimizer.minimize(global_loss, global_step=tf.compat.v1.train.get_global_step())
        if train_losses is not None:
            record = tf.numpy_function(lambda value: train_losses.append(float(value)) or value, [loss], tf.float32)
            train_op = tf.group(train_op, record)
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=global_loss, train_op=train_op)

    return model_fn
