"""The mid-level `tf.tpu.experimental.embedding.TPUEmbedding` in a TF1 graph program: sessions, no eager.

Written as such a program is written for a TPU: `disable_v2_behavior()` at
the top, the TPU strategy from a `TPUClusterResolver`, a seedless TF1
initializer, a one-shot iterator over ragged ids, the step in a
`tf.function` (TensorFlow runs the embedding's enqueue / apply ops there;
outside one, a graph runs only the ops a fetch depends on), a dense layer
of TF1 variables trained by a TF1 optimizer, `session.run` in a loop and a TF1
checkpoint of the graph's variables.

    python -m tpu_embedding_shim.tensorflow tf1_midlevel_graph.py OUTPUT_DIR

It writes OUTPUT_DIR/result.json with what the test checks.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_v2_behavior()

output_dir = sys.argv[1]
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)

table = tf.tpu.experimental.embedding.TableConfig(
    vocabulary_size=50,
    dim=4,
    initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.05),
    combiner="mean",
    name="video",
)
feature_config = {"watched": tf.tpu.experimental.embedding.FeatureConfig(table=table, name="watched")}
with strategy.scope():
    embedding = tf.tpu.experimental.embedding.TPUEmbedding(
        feature_config=feature_config, optimizer=tf.tpu.experimental.embedding.Adagrad(learning_rate=0.1)
    )
    weights = tf.compat.v1.get_variable("weights", [4, 1], initializer=tf.compat.v1.glorot_uniform_initializer())
    bias = tf.compat.v1.get_variable("bias", [1], initializer=tf.compat.v1.zeros_initializer())
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)

rng = np.random.default_rng(0)
ids = rng.integers(0, 50, size=(64, 3)).astype(np.int32)
labels = (ids.sum(axis=1, keepdims=True) % 2).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices(({"watched": ids}, labels)).repeat().batch(8, drop_remainder=True)
dataset = dataset.map(lambda features, label: ({"watched": tf.RaggedTensor.from_tensor(features["watched"])}, label))
dataset = strategy.experimental_distribute_dataset(
    dataset, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
)
features, label = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()


def step(label):
    activations = embedding.dequeue()
    with tf.GradientTape() as tape:
        tape.watch(activations)
        logits = tf.matmul(activations["watched"], weights) + bias
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
    activation_gradients, dense_gradients = tape.gradient(loss, [activations, [weights, bias]])
    embedding.apply_gradients(activation_gradients)
    train_op = optimizer.apply_gradients(zip(dense_gradients, [weights, bias]))
    with tf.control_dependencies([train_op]):
        return tf.identity(loss)


@tf.function
def train_step(features, label):
    embedding.enqueue(features, training=True)
    return strategy.run(step, args=(label,))


loss = train_step(features, label)
saver = tf.compat.v1.train.Saver()
with tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    losses = [float(session.run(loss)) for _ in range(5)]
    checkpoint = saver.save(session, os.path.join(output_dir, "model.ckpt"))

with open(os.path.join(output_dir, "result.json"), "w") as file:
    json.dump(
        {
            "strategy": type(strategy).__module__,
            "embedding": type(embedding).__module__,
            "engine_step": getattr(getattr(embedding, "engine", None), "global_step", None),
            "losses": losses,
            "checkpoint_keys": sorted(tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()),
        },
        file,
    )
