"""A TPU program that sizes its strategy from the TPU system, then trains a Keras model around the mid-level API.

Written as TensorFlow programs on a TPU are (the setup keras-rs's docs and
many TPU scripts show): the `Topology` that `initialize_tpu_system`
returns goes to `tf.tpu.experimental.DeviceAssignment.build`, its replica
count from `resolver.get_tpu_system_metadata().num_cores`, and the
assignment to `TPUStrategy(..., experimental_device_assignment=...)`.
The `TPUEmbedding` is made positionally, `TPUEmbedding(feature_config,
None, False)`: no global optimizer, each table has its own. A Keras layer
enqueues, dequeues and applies the gradients (a custom gradient) in
`fit`, `evaluate` and `predict`. Runs with `tf.keras` as Keras 3 or 2.
Writes result.json into the directory given as its argument.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

out = sys.argv[1]
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
tf.config.experimental_connect_to_cluster(resolver)
topology = tf.tpu.experimental.initialize_tpu_system(resolver)
metadata = resolver.get_tpu_system_metadata()
assignment = tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=metadata.num_cores)
strategy = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)

songs = tf.tpu.experimental.embedding.TableConfig(
    vocabulary_size=30, dim=4, optimizer=tf.tpu.experimental.embedding.Adagrad(0.5), name="songs"
)
moods = tf.tpu.experimental.embedding.TableConfig(
    vocabulary_size=6, dim=2, optimizer=tf.tpu.experimental.embedding.SGD(0.5), name="moods"
)
feature_config = {
    "song": tf.tpu.experimental.embedding.FeatureConfig(table=songs, name="song"),
    "mood": tf.tpu.experimental.embedding.FeatureConfig(table=moods, name="mood"),
}


class Lookups(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.embedding = tf.tpu.experimental.embedding.TPUEmbedding(feature_config, None, False)
        self.anchor = self.add_weight(name="anchor", shape=(), initializer="zeros")

    def call(self, features):
        self.embedding.enqueue(features, training=True, name="lookups")

        @tf.custom_gradient
        def looked_up(anchor):
            activations = self.embedding.dequeue(name="lookups")

            def gradient(d_song, d_mood):
                self.embedding.apply_gradients({"song": d_song, "mood": d_mood}, name="lookups")
                return tf.zeros_like(anchor)

            return [activations["song"], activations["mood"]], gradient

        return tf.concat(looked_up(self.anchor), axis=1)


with strategy.scope():
    lookups = Lookups()
    inputs = {name: tf.keras.Input(shape=(1,), batch_size=8, dtype=tf.int32, name=name) for name in ("song", "mood")}
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(lookups(inputs)))
    model.compile(optimizer="adam", loss="mse")

rng = np.random.default_rng(3)
features = {"song": rng.integers(0, 30, (32, 1)).astype(np.int32), "mood": rng.integers(0, 6, (32, 1)).astype(np.int32)}
labels = (features["song"] % 3 == 0).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(8, drop_remainder=True)
before = {t.name: np.array(v) for t, v in lookups.embedding.embedding_tables.items()}
history = model.fit(dataset, epochs=3, verbose=0)
after = {t.name: np.array(v) for t, v in lookups.embedding.embedding_tables.items()}
report = {
    "topology": [topology.num_tasks, topology.num_tpus_per_task],
    "num_cores": metadata.num_cores,
    "replicas": [assignment.num_replicas, strategy.num_replicas_in_sync],
    "embedding_feature": type(resolver.tpu_hardware_feature).EmbeddingFeature.Name(
        resolver.tpu_hardware_feature.embedding_feature
    ),
    "losses": history.history["loss"],
    "evaluate": float(model.evaluate(dataset, verbose=0)),
    "predict": list(model.predict(dataset, verbose=0).shape),
    "moved": {name: float(np.abs(after[name] - before[name]).max()) for name in after},
    "engine_step": int(lookups.embedding.engine.global_step),
}
with open(os.path.join(out, "result.json"), "w") as file:
    json.dump(report, file)
