"""A TPUEstimator program, run by test_estimator.py alone or under `mpiexec -n W`.

`python estimator_program.py MODEL_DIR OUT.json ACTION [BATCH [STRATEGY]]` (MODEL_DIR `none`: None), ACTION one of
`train` (6 steps of global batch BATCH, then evaluate), `evaluate` (the
checkpoint in MODEL_DIR, nothing trained), `train-nan` (replica 1's loss is
NaN at the third step) or `warm:<checkpoint>` (a fresh MODEL_DIR warm-started
from every variable of <checkpoint>, then 2 steps and evaluate). Replica 0 writes OUT.json: the variables, the eval
metrics, what the model_fn saw, or the error each replica raised.

The model: two TPU embedding columns (mean and sqrtn, multivalent ids), a
linear dense part with sigmoid cross-entropy. The model_fn takes the mean
over the GLOBAL batch (each replica holds batch / W of it), so the engine's
sum of the replicas' embedding gradients and `cross_replica_sum` of the
dense ones are the gradients of one process's loss.
"""

import sys

import numpy as np
from report import record_model, write_record  # a sibling module: this file runs as a script

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import replicas
from tpu_embedding_shim.api.tensors import RaggedTensor

fc = tf.compat.v2.feature_column
tpu = tf.compat.v2.tpu.experimental


def global_batches(count, batch, seed):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        a = [list(rng.integers(0, 11, size=rng.integers(1, 4))) for _ in range(batch)]
        b = [list(rng.integers(0, 7, size=rng.integers(1, 3))) for _ in range(batch)]
        labels = rng.integers(0, 2, size=batch).astype(np.float32)
        # RaggedTensors: a replica's slice of a list of lists can come out rectangular, and a rectangular
        # list is a dense input, whose id 0 is padding (TPUEstimator's rule)
        yield {"a": RaggedTensor.from_list(a), "b": RaggedTensor.from_list(b)}, labels


def input_fn_for(count, seed, seen):
    def input_fn(params):
        _, replica, replicas_count, _ = params["context"].current_input_fn_deployment()
        seen.append([params["batch_size"], replica, replicas_count])
        batches = global_batches(count, params["batch_size"] * replicas_count, seed)
        return (replicas.replica_slice(batch, replica=replica, replicas=replicas_count) for batch in batches)

    return input_fn


def estimator(model_dir, batch, nan_at=None, strategy="div", num_shards=6, warm_start_from=None, **run_config):
    """`run_config`: more RunConfig arguments (hosts_program.py saves every 2 steps)."""
    columns = [
        tpu.embedding_column(fc.categorical_column_with_identity("a", 11), 3, combiner="mean"),
        tpu.embedding_column(fc.categorical_column_with_identity("b", 7), 2, combiner="sqrtn"),
    ]

    def model_fn(features, labels, mode, params):
        state = params["dense_state"]
        if "w" not in state:
            state["w"] = np.linspace(-0.3, 0.4, 5).astype(np.float32)
            state["b"] = np.zeros(1, np.float32)
        x = tf.keras.layers.DenseFeatures(columns)(features)
        logits = x @ state["w"] + state["b"][0]
        p = 0.5 * (1 + np.tanh(0.5 * logits))
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"p": p})
        loss = float(np.mean(np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))))
        if nan_at is not None and replicas.replica_id() == 1 and params["context"].global_step == nan_at:
            loss = float("nan")
        if mode == tf.estimator.ModeKeys.EVAL:
            return tf.estimator.tpu.TPUEstimatorSpec(
                mode, loss=loss, eval_metrics=(lambda y, p: {"count": len(y), "mean_p": np.mean(p)}, [labels, p])
            )
        d_logits = ((p - labels) / (len(labels) * params["context"].num_replicas)).astype(np.float32)
        grads = tf.compat.v1.tpu.cross_replica_sum({"w": x.T @ d_logits, "b": d_logits.sum(keepdims=True)})

        def train_op():
            state["w"] = state["w"] - 0.5 * grads["w"]
            state["b"] = state["b"] - 0.5 * grads["b"]

        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=loss, train_op=train_op, embedding_gradients={x: d_logits[:, None] * state["w"][None, :]}
        )

    config = tf.estimator.tpu.RunConfig(
        model_dir=model_dir,
        tf_random_seed=3,
        tpu_config=tf.estimator.tpu.TPUConfig(num_shards=num_shards),
        **run_config,
    )
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=columns,
        optimization_parameters=tf.estimator.tpu.experimental.AdagradParameters(0.3),
        partition_strategy=strategy,
    )
    return tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=config,
        train_batch_size=batch,
        eval_batch_size=batch,
        predict_batch_size=batch,
        embedding_config_spec=spec,
        warm_start_from=warm_start_from,
    )


def main(model_dir, out, action, batch="12", strategy="div", num_shards="6"):
    """`num_shards` "none": TPUConfig's default, one shard per replica."""
    model_dir = None if model_dir == "none" else model_dir
    batch = int(batch)
    num_shards = None if num_shards == "none" else int(num_shards)
    record = {"replicas": replicas.num_replicas(), "seen": []}
    try:
        warm = action[len("warm:") :] if action.startswith("warm:") else None
        est = estimator(
            model_dir,
            batch,
            nan_at=2 if action == "train-nan" else None,
            strategy=strategy,
            num_shards=num_shards,
            warm_start_from=warm,
        )
        if action in ("train", "train-nan"):
            est.train(input_fn_for(6, seed=0, seen=record["seen"]))
        elif warm is not None:
            est.train(input_fn_for(2, seed=2, seen=record["seen"]))
        metrics = est.evaluate(input_fn_for(2, seed=1, seen=record["seen"]))
        record_model(record, est, metrics)
        record["checkpoint"] = est.latest_checkpoint()
        record["num_shards"] = est.engine.spec.num_shards
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
    write_record(record, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
