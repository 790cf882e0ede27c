"""A TPUEstimator program with the mechanics public TPU model code uses beside its embeddings.

Written as such programs are (a recommendation model_fn over a TPU
`embedding_column` and a numeric column read with `input_layer`):

- `TPUEstimatorSpec(host_call=(host_call_fn, [global_step, loss]))` whose
  function writes `tf.summary` scalars with a v2 summary writer into
  model_dir and returns `tf.compat.v1.summary.all_v2_summary_ops()`;
- `tf.compat.v1.summary.scalar` in the model_fn, `RunConfig(save_summary_steps,
  keep_checkpoint_max, log_step_count_steps)`;
- `training_hooks=[LoggingTensorHook]` in the spec, `train(hooks=[StopAtStepHook],
  saving_listeners=[a CheckpointSaverListener])`, then `train()` with no
  steps on a finite dataset (its end ends training);
- `eval_metrics=(metric_fn, {dict of tensors})`, `predict(yield_single_examples=...)`;
- a second estimator warm-started by `scaffold_fn` calling
  `tf.compat.v1.train.init_from_checkpoint` on the first one's model_dir.

    python -m tpu_embedding_shim.tensorflow estimator_hooks_host_call.py OUTPUT_DIR

It writes OUTPUT_DIR/result.json with what the test checks.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf2
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()
output_dir = sys.argv[1]
VOCABULARY, ROWS, BATCH = 20, 64, 8
item = tf.feature_column.categorical_column_with_identity("item", VOCABULARY)
item_embedding = tf.tpu.experimental.embedding_column(item, 4, initializer=tf.random_normal_initializer(0.0, 0.01))
columns = [item_embedding, tf.feature_column.numeric_column("price", shape=(3,))]
logged = []


def input_fn(params):
    rng = np.random.default_rng(1)
    features = {
        "item": rng.integers(1, VOCABULARY, (ROWS, 1)).astype(np.int64),
        "price": rng.random((ROWS, 3)).astype(np.float32),
    }
    labels = rng.integers(0, 2, (ROWS, 1)).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.batch(params["batch_size"], drop_remainder=True)


class RecordingHook(tf.train.LoggingTensorHook):
    """LoggingTensorHook that also keeps the steps it logged."""

    def _log_tensors(self, tensor_values):
        logged.append(int(tensor_values["step"]))
        super()._log_tensors(tensor_values)


def model_fn(features, labels, mode, params):
    net = tf.feature_column.input_layer(features, columns)
    logits = tf.layers.dense(net, 1, name="out")
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"probability": tf.sigmoid(logits), "item": features["item"]}
        return tf.estimator.tpu.TPUEstimatorSpec(mode=mode, predictions=predictions)
    loss = tf.losses.sigmoid_cross_entropy(labels, logits)
    global_step = tf.train.get_global_step()
    scaffold_fn = None
    if params.get("init_checkpoint"):
        assignment = {v.op.name: v.op.name for v in tf.trainable_variables() if v.op.name.startswith("out/")}

        def tpu_scaffold():
            tf.train.init_from_checkpoint(params["init_checkpoint"], assignment)
            return tf.train.Scaffold()

        scaffold_fn = tpu_scaffold
    if mode == tf.estimator.ModeKeys.TRAIN:
        optimizer = tf.train.AdagradOptimizer(0.1)
        if params["use_tpu"]:
            optimizer = tf.tpu.CrossShardOptimizer(optimizer)
        train_op = optimizer.minimize(loss, global_step)
        tf.summary.scalar("graph_loss", loss)

        def host_call_fn(step, loss):
            with tf2.summary.create_file_writer(params["summary_dir"], max_queue=10).as_default():
                with tf2.summary.record_if(True):
                    tf2.summary.scalar("host_loss", loss[0], step=step[0])
                return tf.summary.all_v2_summary_ops()

        host_call = (host_call_fn, [tf.reshape(global_step, [1]), tf.reshape(loss, [1])])
        hooks = [RecordingHook({"loss": loss, "step": global_step}, every_n_iter=2)]
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode=mode, loss=loss, train_op=train_op, host_call=host_call, scaffold_fn=scaffold_fn, training_hooks=hooks
        )

    def metric_fn(labels, logits):
        return {
            "auc": tf.metrics.auc(labels, tf.sigmoid(logits)),
            "accuracy": tf.metrics.accuracy(labels, tf.cast(logits > 0, tf.float32)),
        }

    return tf.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, {"labels": labels, "logits": logits}), scaffold_fn=scaffold_fn
    )


def make(name, **params):
    model_dir = os.path.join(output_dir, name)
    config = tf.estimator.tpu.RunConfig(
        model_dir=model_dir,
        save_summary_steps=2,
        keep_checkpoint_max=2,
        log_step_count_steps=2,
        save_checkpoints_steps=4,
        tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=2),
    )
    return tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=config,
        use_tpu=True,
        params={"summary_dir": os.path.join(model_dir, "host"), **params},
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        predict_batch_size=BATCH,
        embedding_config_spec=tf.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=[item_embedding], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
        ),
    )


listened = []


class Listener(tf.train.CheckpointSaverListener):
    def begin(self):
        listened.append("begin")

    def after_save(self, session, global_step_value):
        listened.append(int(global_step_value))

    def end(self, session, global_step_value):
        listened.append(f"end {global_step_value}")


def event_tags(directory):
    tags = set()
    for name in os.listdir(directory):
        if name.startswith("events."):
            for event in tf.train.summary_iterator(os.path.join(directory, name)):
                tags.update(value.tag for value in event.summary.value)
    return sorted(tags)


report = {}
first = make("first")
try:
    first.train(input_fn, hooks=["not a hook"], steps=1)
except TypeError as error:
    report["bad_hook"] = str(error)
first.train(input_fn, hooks=[tf.train.StopAtStepHook(last_step=6)], saving_listeners=[Listener()])
report["step_after_stop_hook"] = int(first.get_variable_value("global_step"))
report["listener"] = listened
first.train(input_fn)  # no steps: the dataset's end ends training
report["step_after_dataset"] = int(first.get_variable_value("global_step"))
report["logged_steps"] = logged
report["checkpoints"] = sorted(n for n in os.listdir(first.model_dir) if n.endswith(".index"))
report["tags"] = event_tags(first.model_dir)
report["host_tags"] = event_tags(os.path.join(first.model_dir, "host"))
report["metrics"] = {k: float(v) for k, v in first.evaluate(input_fn).items()}
report["examples"] = [sorted(p) for p in first.predict(input_fn)]
report["batches"] = [len(p["probability"]) for p in first.predict(input_fn, yield_single_examples=False)]
second = make("second", init_checkpoint=first.model_dir)
second.train(input_fn, steps=1)
report["warm_started_kernel"] = second.get_variable_value("out/kernel").tolist()
report["first_kernel"] = first.get_variable_value("out/kernel").tolist()
with open(os.path.join(output_dir, "result.json"), "w") as f:
    json.dump(report, f)
