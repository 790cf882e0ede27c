"""keras-rs's `DistributedEmbedding` on its TensorFlow backend, as keras-rs's docs set it up on a TPU.

keras-rs (Keras 3, `KERAS_BACKEND=tensorflow`) reads the strategy's
hardware feature and, finding TPU embeddings, builds TensorFlow's
mid-level `TPUEmbedding(feature_configs, optimizer, pipelining)`
positionally, with each table's own optimizer and none global, and drives
it from its layer: `enqueue` / `dequeue` / `apply_gradients` behind a
custom gradient. The strategy is sized from the TPU system
(`DeviceAssignment.build`). Trains with `fit`, then evaluates and predicts,
then runs the layer in a `strategy.run` loop. Writes result.json into the
directory given as its argument.
"""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import keras_rs
import numpy as np
import tensorflow as tf

out = sys.argv[1]
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
topology = tf.tpu.experimental.initialize_tpu_system(resolver)
assignment = tf.tpu.experimental.DeviceAssignment.build(
    topology, num_replicas=resolver.get_tpu_system_metadata().num_cores
)
strategy = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)

BATCH = 8
tables = {
    "artist": keras_rs.layers.TableConfig(
        name="artist", vocabulary_size=25, embedding_dim=4, optimizer=keras.optimizers.Adagrad(0.2)
    ),
    "city": keras_rs.layers.TableConfig(name="city", vocabulary_size=12, embedding_dim=4, optimizer="sgd"),
}
feature_configs = {
    name: keras_rs.layers.FeatureConfig(name=name, table=tables[name], input_shape=(BATCH, 1), output_shape=(BATCH, 4))
    for name in tables
}


class Recommender(keras.Model):
    def __init__(self):
        super().__init__()
        self.lookups = keras_rs.layers.DistributedEmbedding(feature_configs)
        self.score = keras.layers.Dense(1)

    def call(self, features):
        activations = self.lookups(features)
        return self.score(keras.ops.concatenate([activations["artist"], activations["city"]], axis=1))


rng = np.random.default_rng(5)
features = {
    "artist": rng.integers(0, 25, (32, 1)).astype(np.int32),
    "city": rng.integers(0, 12, (32, 1)).astype(np.int32),
}
labels = (features["artist"] % 2).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(BATCH, drop_remainder=True)

with strategy.scope():
    model = Recommender()
    model.compile(loss=keras.losses.MeanSquaredError(), optimizer="adam")
history = model.fit(dataset, epochs=3, verbose=0)
embedding = model.lookups._tpu_embedding  # what keras-rs built: TensorFlow's mid-level class, in the mode ours
after_fit = {t.name: np.array(v) for t, v in embedding.embedding_tables.items()}
evaluated = model.evaluate(dataset, verbose=0)
predicted = model.predict(dataset, verbose=0)
after_evaluate = {t.name: np.array(v) for t, v in embedding.embedding_tables.items()}
step_after_fit = int(embedding.engine.global_step)

batches = iter(strategy.experimental_distribute_dataset(dataset))


@tf.function
def loop():
    def step(batch):
        inputs, targets = batch
        with tf.GradientTape() as tape:
            activations = model.lookups(inputs)
            loss = keras.ops.mean(keras.ops.square(activations["artist"][:, :1] - targets))
        tape.gradient(loss, model.lookups.trainable_variables)  # applies the tables' gradients on the engine
        return loss

    for _ in tf.range(2):
        loss = strategy.run(step, args=(next(batches),))
    return loss


loop_loss = float(loop())
report = {
    "module": type(embedding).__module__,
    "losses": history.history["loss"],
    "evaluate": float(evaluated),
    "predict": list(predicted.shape),
    "step_after_fit": step_after_fit,
    "step_after_loop": int(embedding.engine.global_step),
    "evaluate_changed_nothing": all(np.array_equal(after_fit[n], after_evaluate[n]) for n in after_fit),
    "loop_loss": loop_loss,
}
with open(os.path.join(out, "result.json"), "w") as file:
    json.dump(report, file)
