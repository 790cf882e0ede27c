"""A TPUEstimator program that configures its tables with TensorFlow's own v1 config dicts.

Written as such programs are: `TableConfig` / `FeatureConfig` from
`tensorflow.python.tpu.tpu_embedding` (the only place TensorFlow keeps
them), a table optimizer from `tf.compat.v1.tpu.experimental`,
`EmbeddingConfigSpec(feature_to_config_dict=..., table_to_config_dict=...)`,
and a TF1 model_fn that reads each feature's activation from
`features[name]`, where TensorFlow's TPUEstimator puts it.

    python -m tpu_embedding_shim.tensorflow estimator_config_dicts.py OUTPUT_DIR

It writes OUTPUT_DIR/result.json with what the test checks.
"""

import json
import os
import sys

import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow.python.tpu import tpu_embedding

tf.disable_v2_behavior()
output_dir = sys.argv[1]
VOCABULARY = {"genre": 9, "artist": 15}
seen_shapes = {}


def configs():
    tables, features = {}, {}
    for name, size in VOCABULARY.items():
        tables[f"{name}_table"] = tpu_embedding.TableConfig(
            vocabulary_size=size,
            dimension=4,
            initializer=tf.random_uniform_initializer(-0.1, 0.1),
            combiner="sum",
            optimization_parameters=tf.tpu.experimental.FtrlParameters(learning_rate=0.5),
        )
        features[name] = tpu_embedding.FeatureConfig(f"{name}_table")
    return features, tables


def input_fn(params):
    rng = np.random.default_rng(7)
    rows = 32

    def ids(size):
        where = np.argwhere(rng.random((rows, 3)) < 0.6)
        where = np.concatenate([where, [[r, 0] for r in range(rows)]])  # every row has an id
        where = np.unique(where, axis=0)
        return tf.SparseTensor(where, rng.integers(0, size, len(where)), [rows, 3])

    features = {name: ids(size) for name, size in VOCABULARY.items()}
    labels = rng.integers(0, 2, (rows, 1)).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def model_fn(features, labels, mode, params):
    seen_shapes.update({name: features[name].shape.as_list() for name in VOCABULARY})
    hidden = tf.layers.dense(tf.concat([features["genre"], features["artist"]], axis=1), 8, tf.nn.relu)
    logits = tf.layers.dense(hidden, 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    optimizer = tf.train.GradientDescentOptimizer(0.1)
    if params["use_tpu"]:
        optimizer = tf.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)


feature_to_config_dict, table_to_config_dict = configs()
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="a-tpu", zone="us-central1-b", project="a-project")
run_config = tf.estimator.tpu.RunConfig(
    cluster=resolver,
    model_dir=os.path.join(output_dir, "model"),
    tpu_config=tf.estimator.tpu.TPUConfig(
        iterations_per_loop=2, per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2
    ),
)
estimator = tf.estimator.tpu.TPUEstimator(
    model_fn=model_fn,
    config=run_config,
    use_tpu=True,
    train_batch_size=8,
    eval_batch_size=8,
    embedding_config_spec=tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_to_config_dict=feature_to_config_dict,
        table_to_config_dict=table_to_config_dict,
        optimization_parameters=tf.tpu.experimental.AdagradParameters(learning_rate=0.1),
        partition_strategy="mod",
    ),
)
estimator.train(input_fn, max_steps=1)
first = estimator.get_variable_value("genre_table")
estimator.train(input_fn, max_steps=5)
metrics = estimator.evaluate(input_fn, steps=2)
with open(os.path.join(output_dir, "result.json"), "w") as f:
    json.dump(
        {
            "global_step": int(estimator.get_variable_value("global_step")),
            "names": estimator.get_variable_names(),
            "genre_table_moved": float(np.abs(estimator.get_variable_value("genre_table") - first).max()),
            "eval_loss": float(metrics["loss"]),
            "shapes": seen_shapes,
        },
        f,
    )
