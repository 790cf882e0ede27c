"""A small synthetic recommendation problem and a numpy model_fn for the runner tests.

Label = 1 when a hidden user bias plus a hidden item bias is positive, so a
linear model over the learned embeddings can fit it: the loss must go down.
Features: user (own table), item and a 3-long item history (one shared
table), like the MovieLens job's layout.
"""

import numpy as np

import tpu_embedding_shim as tf

V, D, L = 20, 4, 3


def columns(*, tensor_core=False):
    """(pooled columns, sequence columns, all columns) of the problem."""
    user = tf.feature_column.categorical_column_with_identity("user", V)
    item = tf.feature_column.categorical_column_with_identity("item", V)
    hist = tf.feature_column.sequence_categorical_column_with_identity("hist", V)
    init = tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=3)
    extra = {}
    if tensor_core:
        extra = {"embedding_lookup_device": "tpu_tensor_core", "tensor_core_shape": [None, 1]}
    user_col = tf.tpu.experimental.embedding_column(user, D, initializer=init, **extra)
    item_col, hist_col = tf.tpu.experimental.shared_embedding_columns(
        [item, hist], D, initializer=init, max_sequence_lengths=[0, L]
    )
    return [user_col, item_col], [hist_col], [user_col, item_col, hist_col]


def make_data(n=1024, seed=0):
    rng = np.random.default_rng(seed)
    hidden = np.random.default_rng(99)
    bias_user, bias_item = hidden.normal(size=V), hidden.normal(size=V)
    # ids from 1: in a dense input id 0 is padding, as TPUEstimator makes it on a TPU
    user, item = rng.integers(1, V, n), rng.integers(1, V, n)
    hist = rng.integers(1, V, (n, L + 1))
    hist[rng.random((n, L + 1)) < 0.3] = -1  # padding; positions >= L are truncated by the engine
    labels = (bias_user[user] + bias_item[item] > 0).astype(np.float32)
    return {"user": user[:, None], "item": item[:, None], "hist": hist}, labels


def input_fn_for(data, *, limit=None):
    features, labels = data

    def input_fn(params):
        batch = params["batch_size"]
        starts = range(0, len(labels) - batch + 1, batch)
        for start in starts if limit is None else starts[:limit]:
            yield {k: v[start : start + batch] for k, v in features.items()}, labels[start : start + batch]

    return input_fn


def numpy_model_fn(pooled, sequence, *, lr=0.5, record=None, w0=None):
    """A logistic regression over [DenseFeatures, mean of SequenceFeatures], gradients written out.

    The weights start at `w0` (zeros by default), the bias at 0."""

    def model_fn(features, labels, mode, params):
        state = params["dense_state"]
        width = D * (len(pooled) + len(sequence))
        w = state.setdefault("w", np.zeros(width, np.float32) if w0 is None else w0.copy())
        b = state.setdefault("b", np.zeros((), np.float32))
        net = tf.keras.layers.DenseFeatures(pooled)(features)
        seq, lengths = tf.keras.experimental.SequenceFeatures(sequence)(features)
        count = np.maximum(lengths, 1).astype(np.float32)
        z = np.concatenate([net, seq.sum(axis=1) / count[:, None]], axis=1)
        logits = z @ w + b
        p = 1.0 / (1.0 + np.exp(-logits))
        if record is not None:
            record.append((mode, params["context"].global_step))
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"probabilities": p, "logits": logits})
        y = labels
        loss = float(np.mean(np.logaddexp(0.0, logits) - y * logits))
        d_logits = (p - y) / len(y)
        d_z = np.outer(d_logits, w)
        d_net = d_z[:, : net.shape[1]]
        d_seq = np.repeat((d_z[:, net.shape[1] :] / count[:, None])[:, None, :], seq.shape[1], axis=1)
        d_w, d_b = z.T @ d_logits, d_logits.sum()

        def train_op():
            state["w"] = state["w"] - lr * d_w
            state["b"] = state["b"] - lr * d_b

        def metric_fn(labels, probabilities):
            return {
                "auc": tf.compat.v1.metrics.auc(labels, probabilities),
                "accuracy": tf.compat.v1.metrics.accuracy(labels, probabilities > 0.5),
            }

        return tf.estimator.tpu.TPUEstimatorSpec(
            mode,
            loss=loss,
            train_op=train_op,
            embedding_gradients={net: d_net, seq: d_seq},
            eval_metrics=(metric_fn, [y, p]),
            predictions={"probabilities": p},
        )

    return model_fn


def estimator(
    model_dir,
    model_fn,
    cols,
    *,
    optimizer=None,
    seed=0,
    shards=None,
    steps_per_save=None,
    keep=5,
    batch=32,
    **spec_kwargs,
):
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=cols,
        optimization_parameters=optimizer or tf.tpu.experimental.AdagradParameters(0.5),
        **spec_kwargs,
    )
    config = tf.estimator.tpu.RunConfig(
        model_dir=str(model_dir),
        tf_random_seed=seed,
        save_checkpoints_steps=steps_per_save,
        keep_checkpoint_max=keep,
        tpu_config=tf.estimator.tpu.TPUConfig(num_shards=shards),
    )
    return tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=config,
        train_batch_size=batch,
        eval_batch_size=batch,
        predict_batch_size=batch,
        embedding_config_spec=spec,
    )
