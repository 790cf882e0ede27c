"""Train tables under a TPUStrategy, then serve them on a CPU from the checkpoint, as TensorFlow's docs show.

Written as a TensorFlow program: the mid-level `TPUEmbedding` trains in a
`strategy.run` loop, `tf.train.Checkpoint` saves it, a
`TPUEmbeddingForServing` made outside the strategy restores it and
`status.assert_consumed()` checks that every value of the checkpoint was
used; a `tf.Module` serving it is saved as a SavedModel and reloaded.
Writes result.json into the directory given as its argument.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

out = sys.argv[1]
strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver(tpu=""))
shows = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=12, dim=3, combiner="sum", name="shows")
feature_config = {"seen": tf.tpu.experimental.embedding.FeatureConfig(table=shows, name="seen")}
optimizer = tf.tpu.experimental.embedding.Adagrad(learning_rate=0.2)
with strategy.scope():
    embedding = tf.tpu.experimental.embedding.TPUEmbedding(feature_config=feature_config, optimizer=optimizer)

seen = tf.sparse.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 1]], tf.constant([2, 5, 7, 9], tf.int64), [3, 2])
dataset = tf.data.Dataset.from_tensors({"seen": seen}).repeat(4)
options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
batches = iter(strategy.experimental_distribute_dataset(dataset, options=options))


@tf.function
def train_step():
    embedding.enqueue(next(batches), training=True)

    def on_replica():
        with tf.GradientTape() as tape:
            activations = embedding.dequeue()
            tape.watch(activations)
            loss = tf.reduce_sum(tf.square(activations["seen"] - 1.0))
        embedding.apply_gradients(tape.gradient(loss, activations))
        return loss

    return strategy.run(on_replica)


losses = [float(train_step()) for _ in range(4)]
path = tf.train.Checkpoint(embedding=embedding).save(os.path.join(out, "ckpt"))
trained = np.array(embedding.embedding_tables[shows])

server = tf.tpu.experimental.embedding.TPUEmbeddingForServing(feature_config=feature_config, optimizer=optimizer)
status = tf.train.Checkpoint(embedding=server).restore(path)
served = server({"seen": seen})["seen"].numpy()  # builds the variables, restored as they are made
status.assert_consumed()


class Serving(tf.Module):
    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    @tf.function(input_signature=[tf.SparseTensorSpec([None, 2], tf.int64)])
    def lookup(self, ids):
        return self.embedding({"seen": ids})["seen"]


tf.saved_model.save(Serving(server), os.path.join(out, "saved_model"))
loaded = tf.saved_model.load(os.path.join(out, "saved_model"))
reloaded = loaded.lookup(seen).numpy()
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump(
        {
            "losses": losses,
            "trained": trained.tolist(),
            "served_table": server.embedding_tables[shows].numpy().tolist(),
            "served": served.tolist(),
            "reloaded": reloaded.tolist(),
        },
        f,
    )
