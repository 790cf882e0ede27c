"""One tiny TPUEstimator program, written twice: for TensorFlow 2.15 and ported to this runner.

Both have the same columns, read by the same feature layers, and the same
dense variables (`dense/kernel`, `dense/bias`: a `tf.keras.layers.Dense(1)`
in TensorFlow, dense_state entries of those names here), so their
checkpoints hold the same names:

    dense_features/user_embedding/embedding_weights      [6, 2]   tf.keras.layers.DenseFeatures
    q1_q2_shared_embedding                               [4, 2]   shared_embedding_columns, same layer
    input_layer/item_embedding/embedding_weights         [5, 2]   tf.compat.v1.feature_column.input_layer
    sequence_features/hist_embedding/embedding_weights   [5, 2]   tf.keras.experimental.SequenceFeatures
    dense/kernel [10, 1], dense/bias [1], global_step, and the optimizers' slots

logits = [DenseFeatures(user, q1, q2), input_layer(item), sum over time of
SequenceFeatures(hist)] @ kernel + bias; loss = mean squared error.

`tf_estimator(tf, ...)` takes the `tensorflow` module as an argument: this
file never imports TensorFlow (the fixture generator and tests/tf_interop
pass it). `shim_estimator(...)` is the port: the embeddings train with the
EmbeddingConfigSpec's optimizer, the dense part with plain SGD in numpy.
"""

import numpy as np

V_USER, V_ITEM, V_HIST, V_Q, D, L = 6, 5, 5, 4, 2, 2
WIDTH = 5 * D  # user, q1, q2 (DenseFeatures) + item (input_layer) + hist (summed)
BATCH = 4
FEATURES = {
    "user": np.array([[1], [2], [5], [3]], np.int64),
    "item": np.array([[4], [1], [2], [1]], np.int64),
    "hist": np.array([[1, 2], [3, -1], [4, 4], [2, -1]], np.int64),  # -1 pads a sequence
    "q1": np.array([[1], [3], [2], [1]], np.int64),
    "q2": np.array([[2], [2], [1], [3]], np.int64),  # no dense id 0: it is padding on a TPU (and here)
}
LABELS = np.array([1.0, -0.5, 0.25, 2.0], np.float32)


# TensorFlow 2.15 -----------------------------------------------------------------------------------------


def columns(tf):
    """The program's columns, built with the module `tf`: TensorFlow 2.15 or this package (the same calls)."""
    fc, tpu = tf.feature_column, tf.compat.v1.tpu.experimental
    init = tf.compat.v1.truncated_normal_initializer(stddev=0.5, seed=7)
    user = tpu.embedding_column(fc.categorical_column_with_identity("user", V_USER), D, initializer=init)
    item = tpu.embedding_column(fc.categorical_column_with_identity("item", V_ITEM), D, initializer=init)
    hist = tpu.embedding_column(
        fc.sequence_categorical_column_with_identity("hist", V_HIST), D, max_sequence_length=L, initializer=init
    )
    shared = tpu.shared_embedding_columns(
        [fc.categorical_column_with_identity("q2", V_Q), fc.categorical_column_with_identity("q1", V_Q)],
        D,
        initializer=init,
    )
    return user, item, hist, shared


# name -> (TensorFlow's tf.compat.v1.train optimizer, the port's TPU optimization parameters, their arguments after
# the learning rate): the same optimizer in both programs.
OPTIMIZERS = {
    "sgd": ("GradientDescentOptimizer", "StochasticGradientDescentParameters", ()),
    "adagrad": ("AdagradOptimizer", "AdagradParameters", ()),
    "adam": ("AdamOptimizer", "AdamParameters", ()),
    "ftrl": ("FtrlOptimizer", "FtrlParameters", ()),
    "momentum": ("MomentumOptimizer", "MomentumParameters", (0.9,)),  # momentum
    "rmsprop": ("RMSPropOptimizer", "RMSPropParameters", (0.9, 0.5, 1e-10)),  # rho (decay), momentum, epsilon
    "proximal_adagrad": ("ProximalAdagradOptimizer", "ProximalAdagradParameters", ()),
}


def tf_optimizer(tf, name, lr):
    optimizer, _, args = OPTIMIZERS[name]
    return getattr(tf.compat.v1.train, optimizer)(lr, *args)


def tf_estimator(tf, model_dir, *, optimizer="adagrad", lr=0.1, warm_start_from=None, keep=1):
    """TensorFlow's TPUEstimator(use_tpu=False) running the program (tables trained by `optimizer`, as on a CPU)."""
    user, item, hist, shared = columns(tf)

    def input_fn(params):
        features = {k: tf.constant(v) for k, v in FEATURES.items()}
        hist = FEATURES["hist"]
        features["hist"] = tf.SparseTensor(np.argwhere(hist >= 0), hist[hist >= 0], hist.shape)
        return tf.data.Dataset.from_tensors((features, tf.constant(LABELS))).repeat()

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([user] + shared)(features)
        items = tf.compat.v1.feature_column.input_layer(features, [item])
        sequence, _ = tf.keras.experimental.SequenceFeatures([hist])(features)
        x = tf.concat([net, items, tf.reduce_sum(sequence, axis=1)], axis=1)
        logits = tf.keras.layers.Dense(1)(x)[:, 0]
        loss = tf.reduce_mean(tf.square(logits - labels))
        train_op = None
        if mode == tf.estimator.ModeKeys.TRAIN:
            train_op = tf_optimizer(tf, optimizer, lr).minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    spec = tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item, hist] + shared,
        optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(lr),
    )
    config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(model_dir), tf_random_seed=3, keep_checkpoint_max=keep)
    estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=config,
        use_tpu=False,
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        embedding_config_spec=spec,
        warm_start_from=warm_start_from,
    )
    return estimator, input_fn


# The port to this runner ----------------------------------------------------------------------------------


def shim_columns():
    import tpu_embedding_shim as tf

    return columns(tf)


def shim_optimizer(name, lr):
    import tpu_embedding_shim as tf

    _, parameters, args = OPTIMIZERS[name]
    return getattr(tf.estimator.tpu.experimental, parameters)(lr, *args)


def shim_model_fn(user, item, hist, shared, *, dense_lr=0.1):
    import tpu_embedding_shim as tf

    def model_fn(features, labels, mode, params):
        state = params["dense_state"]
        kernel = state.setdefault("dense/kernel", np.full((WIDTH, 1), 0.1, np.float32))
        bias = state.setdefault("dense/bias", np.zeros(1, np.float32))
        net = tf.keras.layers.DenseFeatures([user] + shared)(features)
        items = tf.compat.v1.feature_column.input_layer(features, [item])
        sequence, _ = tf.keras.experimental.SequenceFeatures([hist])(features)
        x = np.concatenate([net, items, sequence.sum(axis=1)], axis=1)
        logits = (x @ kernel + bias)[:, 0]
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"logits": logits})
        loss = float(np.mean(np.square(logits - labels)))
        d_logits = (2.0 * (logits - labels) / len(labels)).astype(np.float32)
        d_x = np.outer(d_logits, kernel[:, 0])
        d_sequence = np.repeat(d_x[:, None, 4 * D :], sequence.shape[1], axis=1)

        def train_op():
            state["dense/kernel"] = kernel - dense_lr * (x.T @ d_logits)[:, None]
            state["dense/bias"] = bias - dense_lr * d_logits.sum(keepdims=True)

        return tf.estimator.tpu.TPUEstimatorSpec(
            mode,
            loss=loss,
            train_op=train_op,
            embedding_gradients={net: d_x[:, : 3 * D], items: d_x[:, 3 * D : 4 * D], sequence: d_sequence},
        )

    return model_fn


def shim_input_fn(params):
    return dict(FEATURES), LABELS


def shim_estimator(
    model_dir,
    *,
    optimizer="adagrad",
    lr=0.1,
    warm_start_from=None,
    partition_strategy="div",
    num_shards=None,
    keep=5,
    seed=0,
    **run_config,
):
    """The shim's TPUEstimator of this program; `run_config`: more RunConfig arguments."""
    import tpu_embedding_shim as tf

    user, item, hist, shared = shim_columns()
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item, hist] + shared,
        optimization_parameters=shim_optimizer(optimizer, lr),
        partition_strategy=partition_strategy,
    )
    config = tf.estimator.tpu.RunConfig(
        model_dir=str(model_dir),
        tf_random_seed=seed,
        keep_checkpoint_max=keep,
        tpu_config=tf.estimator.tpu.TPUConfig(num_shards=num_shards),
        **run_config,
    )
    return tf.estimator.tpu.TPUEstimator(
        model_fn=shim_model_fn(user, item, hist, shared),
        config=config,
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        predict_batch_size=BATCH,
        embedding_config_spec=spec,
        warm_start_from=warm_start_from,
    )


TABLES = {  # checkpoint name -> shape, in both programs
    "dense_features/user_embedding/embedding_weights": (V_USER, D),
    "q1_q2_shared_embedding": (V_Q, D),
    "input_layer/item_embedding/embedding_weights": (V_ITEM, D),
    "sequence_features/hist_embedding/embedding_weights": (V_HIST, D),
}
ENGINE_TABLES = {  # checkpoint name -> this runner's engine table
    "dense_features/user_embedding/embedding_weights": "tbl_user",
    "q1_q2_shared_embedding": "tbl_q1_q2_shared_embedding",
    "input_layer/item_embedding/embedding_weights": "tbl_item",
    "sequence_features/hist_embedding/embedding_weights": "tbl_hist",
}
