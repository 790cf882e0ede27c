"""Pieces of the small TPUEstimator programs the bridge's tests run: a TensorFlow model_fn, this project's runner."""

import tpu_embedding_shim.tensorflow as tf


def adagrad_estimator(model_fn, columns, model_dir, train_batch_size, **batch_sizes):
    """This project's TPUEstimator running `model_fn`: the tables of `columns` train with Adagrad(0.1).

    `batch_sizes`: eval_batch_size / predict_batch_size, where the test evaluates or predicts.
    """
    tpu = tf.compat.v1.estimator.tpu
    return tpu.TPUEstimator(
        model_fn=model_fn,
        config=tpu.RunConfig(model_dir=str(model_dir)),
        train_batch_size=train_batch_size,
        embedding_config_spec=tpu.experimental.EmbeddingConfigSpec(
            feature_columns=columns, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
        ),
        **batch_sizes,
    )


def linear_model_fn(column):
    """A TensorFlow model_fn: `Dense(1)` over `DenseFeatures([column])`, a squared loss, plain SGD(0.1)."""

    def model_fn(features, labels, mode, params):
        logits = tf.squeeze(tf.keras.layers.Dense(1)(tf.keras.layers.DenseFeatures([column])(features)), -1)
        loss = tf.reduce_mean(tf.square(logits - labels))
        step = tf.compat.v1.train.get_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step)
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return model_fn
