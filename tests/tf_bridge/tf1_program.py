"""A TensorFlow 1 TPUEstimator program in the style of public TPU model code, run by test_tf_details.py.

Graph mode (`disable_v2_behavior()` at the top of main), a TFRecord input
read by `tf.io.parse_example` and sharded by the input context's four
values, TPU embedding columns with seedless TensorFlow initializers and
`combiner=None`, `tf.compat.v1.layers`, `CrossShardOptimizer` when
`params["use_tpu"]`, recall@k and AUC through `tf.compat.v1.metrics`, a
`TPUClusterResolver` for a TPU that is not there, `TPUConfig(num_shards=None)`,
train / evaluate in cycles, predict and export. Only the import is changed.

    python tf1_program.py MODEL_DIR OUT_JSON
"""

import json
import sys

import numpy as np

import tpu_embedding_shim.tensorflow as tf

VOCAB = 20


def make_records(path):
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(64):
            feature = {
                "user": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % VOCAB])),
                "items": tf.train.Feature(int64_list=tf.train.Int64List(value=rng.integers(0, VOCAB, 3).tolist())),
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i % 2)])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


FEATURES = {"user": tf.io.FixedLenFeature([1], tf.int64), "items": tf.io.VarLenFeature(tf.int64)}


def input_fn_builder(path, training):
    def input_fn(params):
        _, index, count, _ = params["context"].current_input_fn_deployment()
        dataset = tf.data.TFRecordDataset(path).shard(count, index)
        if training:
            dataset = dataset.repeat()
        dataset = dataset.batch(params["batch_size"], drop_remainder=True)

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, {**FEATURES, "label": tf.io.FixedLenFeature([1], tf.float32)})
            return parsed, parsed.pop("label")

        return dataset.map(parse)

    return input_fn


def columns():
    tpu = tf.compat.v1.tpu.experimental
    user = tf.compat.v1.feature_column.categorical_column_with_identity("user", VOCAB)
    items = tf.compat.v1.feature_column.categorical_column_with_identity("items", VOCAB)
    return [
        tpu.embedding_column(user, 4, combiner=None, initializer=tf.random_normal_initializer(0.0, 0.01)),
        tpu.embedding_column(items, 4, initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02)),
    ]


def model_fn(features, labels, mode, params):
    net = tf.compat.v1.feature_column.input_layer(features, columns())
    logits = tf.compat.v1.layers.dense(net, 1, kernel_initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1))
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={"logits": logits})
    loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
    optimizer = tf.compat.v1.train.AdagradOptimizer(0.1)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())

    def metric_fn(labels, logits):
        classes = tf.cast(labels > 0.5, tf.int64)
        return {
            "recall_at_1": tf.compat.v1.metrics.recall_at_k(classes, tf.concat([-logits, logits], 1), k=1),
            "auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits)),
        }

    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=train_op, eval_metrics=(metric_fn, [labels, logits])
    )


def serving_input_fn():
    serialized = tf.compat.v1.placeholder(tf.string, [None], name="examples")
    features = tf.io.parse_example(serialized, FEATURES)
    return tf.estimator.export.ServingInputReceiver(features, {"examples": serialized})


def main(model_dir, out):
    tf.compat.v1.disable_v2_behavior()
    path = model_dir + "/data.tfrecord"
    tf.io.gfile.makedirs(model_dir)
    make_records(path)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-tpu", zone="us-central1-a", project="p")
    config = tf.compat.v1.estimator.tpu.RunConfig(
        cluster=resolver,
        model_dir=model_dir,
        tpu_config=tf.compat.v1.estimator.tpu.TPUConfig(iterations_per_loop=4, num_shards=None),
    )
    estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=config,
        use_tpu=True,
        train_batch_size=8,
        eval_batch_size=8,
        predict_batch_size=8,
        embedding_config_spec=tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=columns(),
            optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(
                0.1, use_gradient_accumulation=True
            ),
            partition_strategy="div",
        ),
    )
    record = {"executing_eagerly": tf.executing_eagerly(), "evaluations": []}
    initial = None
    for _ in range(2):
        estimator.train(input_fn_builder(path, training=True), steps=4)
        if initial is None:
            initial = {name: np.asarray(estimator.engine.table(name)).copy() for name in ("tbl_user", "tbl_items")}
        record["evaluations"].append(estimator.evaluate(input_fn_builder(path, training=False), steps=2))
    record["engine_step"] = int(estimator.engine.global_step)
    record["tables_moved"] = {
        name: bool(np.any(np.asarray(estimator.engine.table(name)) != initial[name])) for name in initial
    }
    batches = list(estimator.predict(input_fn_builder(path, training=False), yield_single_examples=False))
    record["predictions"] = [np.asarray(b["logits"]).shape for b in batches]
    record["export"] = estimator.export_saved_model(model_dir + "/export", serving_input_fn).decode()
    record["num_shards"] = estimator.engine.spec.num_shards
    with open(out, "w") as f:
        json.dump(record, f, default=float)


if __name__ == "__main__":
    main(*sys.argv[1:])
