"""TFRS's "TPUEmbeddingLayer: Quick Start" notebook's code cells, as a program written for a TPU (no project import).

The cells are reproduced in order, on synthetic data shaped like the
notebook's MovieLens 100K input (`movie_id`, `user_id`, `user_rating`)
instead of `tensorflow_datasets`, with a local directory for the GCS bucket.
Two details follow what the notebook needs on TensorFlow 2.15 itself: the
Keras optimizer is `tf.keras.optimizers.legacy.Adagrad` (TFRS translates
only the legacy optimizers there) and the ids are integers. Run it with
`python -m tpu_embedding_shim.tensorflow tfrs_quick_start.py OUTPUT_DIR`;
it writes OUTPUT_DIR/result.json with what the test checks.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

output_dir = sys.argv[1]

resolver = tf.distribute.cluster_resolver.TPUClusterResolver("").connect("")
strategy = tf.distribute.TPUStrategy(resolver)
embedding_feature = strategy.extended.tpu_hardware_feature.embedding_feature
assert embedding_feature == tf.tpu.experimental.HardwareFeature.EmbeddingFeature.V1, (
    "Make sure that you have the right TPU Hardware"
)

# TPUEmbedding API break down: feature and table configuration, optimizer, the two model styles.
table_config_one = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=8, dim=8)
table_config_two = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=16, dim=4)
feature_config = {
    "feature_one": tf.tpu.experimental.embedding.FeatureConfig(table=table_config_one),
    "feature_two": tf.tpu.experimental.embedding.FeatureConfig(table=table_config_one),
    "feature_three": tf.tpu.experimental.embedding.FeatureConfig(table=table_config_two),
}
optimizer = tf.tpu.experimental.embedding.SGD(0.1)

with strategy.scope():
    embedding_inputs = {
        "feature_one": tf.keras.Input(batch_size=1024, shape=(1,), dtype=tf.int32),
        "feature_two": tf.keras.Input(batch_size=1024, shape=(1,), dtype=tf.int32, ragged=True),
        "feature_three": tf.keras.Input(batch_size=1024, shape=(1,), dtype=tf.int32),
    }
    embedding = tfrs.layers.embedding.TPUEmbedding(feature_config=feature_config, optimizer=optimizer)(embedding_inputs)
    logits = tf.keras.layers.Dense(1)(tf.concat(tf.nest.flatten(embedding), axis=1))
    model = tf.keras.Model(embedding_inputs, logits)


class ModelWithEmbeddings(tf.keras.Model):
    def __init__(self):
        super(ModelWithEmbeddings, self).__init__()  # noqa: UP008 (as the notebook writes it)
        self.embedding_layer = tfrs.layers.embedding.TPUEmbedding(feature_config=feature_config, optimizer=optimizer)
        self.dense = tf.keras.layers.Dense(1)

    def call(self, inputs):
        embedding = self.embedding_layer(inputs)
        logits = self.dense(tf.concat(tf.nest.flatten(embedding), axis=1))
        return logits


tf.tpu.experimental.initialize_tpu_system(resolver)
with strategy.scope():
    model = ModelWithEmbeddings()
tf.tpu.experimental.initialize_tpu_system(resolver)

# Simple TPUEmbeddingLayer example: synthetic ratings shaped like MovieLens 100K's.
rng = np.random.default_rng(0)
count = 2_500  # 80% of them: 125 batches of 16, for 10 epochs of 10 steps
ratings = tf.data.Dataset.from_tensor_slices(
    {
        "movie_id": rng.integers(1, 1683, count).astype(np.int32),
        "user_id": rng.integers(1, 944, count).astype(np.int32),
        "user_rating": rng.integers(1, 6, count).astype(np.float32),
    }
)

per_replica_batch_size = 16
movie_vocabulary_size = 2048
movie_embedding_size = 64
user_vocabulary_size = 2048
user_embedding_size = 64

shuffled = ratings.shuffle(100_000, seed=42, reshuffle_each_iteration=False)
train = shuffled.take(2_000)
test = shuffled.skip(2_000).take(500)
train_dataset = train.batch(per_replica_batch_size * strategy.num_replicas_in_sync, drop_remainder=True).cache()
test_dataset = test.batch(per_replica_batch_size * strategy.num_replicas_in_sync, drop_remainder=True).cache()
distribute_train_dataset = strategy.experimental_distribute_dataset(
    train_dataset, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
)
distribute_test_dataset = strategy.experimental_distribute_dataset(
    test_dataset, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
)

optimizer = tf.keras.optimizers.legacy.Adagrad(learning_rate=0.1)
user_table = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=user_vocabulary_size, dim=user_embedding_size)
movie_table = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=movie_vocabulary_size, dim=movie_embedding_size)
feature_config = {
    "movie_id": tf.tpu.experimental.embedding.FeatureConfig(table=movie_table),
    "user_id": tf.tpu.experimental.embedding.FeatureConfig(table=user_table),
}


class EmbeddingModel(tfrs.models.Model):
    def __init__(self):
        super().__init__()
        self.embedding_layer = tfrs.layers.embedding.TPUEmbedding(feature_config=feature_config, optimizer=optimizer)
        self.ratings = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(256, activation="relu"),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(1),
            ]
        )
        self.task: tf.keras.layers.Layer = tfrs.tasks.Ranking(
            loss=tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.NONE),
            metrics=[tf.keras.metrics.RootMeanSquaredError()],
        )

    def compute_loss(self, features, training=False):
        embedding = self.embedding_layer({"user_id": features["user_id"], "movie_id": features["movie_id"]})
        rating_predictions = self.ratings(tf.concat([embedding["user_id"], embedding["movie_id"]], axis=1))
        return tf.reduce_sum(self.task(labels=features["user_rating"], predictions=rating_predictions)) * (
            1 / (per_replica_batch_size * strategy.num_replicas_in_sync)
        )

    def call(self, features, serving_config=None):
        embedding = self.embedding_layer(
            {"user_id": features["user_id"], "movie_id": features["movie_id"]}, serving_config=serving_config
        )
        return self.ratings(tf.concat([embedding["user_id"], embedding["movie_id"]], axis=1))


with strategy.scope():
    model = EmbeddingModel()
    model.compile(optimizer=optimizer)

history = model.fit(distribute_train_dataset, steps_per_epoch=10, epochs=10, verbose=0)
evaluation = model.evaluate(distribute_test_dataset, steps=10, verbose=0)

# Save and restore the checkpoint (a local directory stands for the bucket).
model_dir = os.path.join(output_dir, "saved_model")
checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)
saved_tpu_model_path = checkpoint.save(os.path.join(model_dir, "ckpt"))
variables = tf.train.list_variables(saved_tpu_model_path)
with strategy.scope():
    checkpoint.restore(saved_tpu_model_path)

cpu_model = EmbeddingModel()
cpu_checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=cpu_model)
cpu_checkpoint.restore(saved_tpu_model_path)

embedding_checkpoint = tf.train.Checkpoint(embedding=model.embedding_layer)
saved_embedding_path = embedding_checkpoint.save(os.path.join(model_dir, "tpu-embedding"))
cpu_embedding_checkpoint = tf.train.Checkpoint(embeddign=cpu_model.embedding_layer)
cpu_embedding_checkpoint.restore(saved_embedding_path)
saved_cpu_embedding_path = embedding_checkpoint.save(os.path.join(model_dir, "cpu-embedding"))
with strategy.scope():
    embedding_checkpoint.restore(saved_cpu_embedding_path)


# Serving: export the CPU model with a serving signature, load it back and predict.
input_batch = {
    "movie_id": tf.constant(np.array([100]), dtype=tf.int32),
    "user_id": tf.constant(np.array([30]), dtype=tf.int32),
}
direct_prediction = cpu_model(input_batch).numpy().tolist()  # not a cell: what the served model should give


@tf.function
def serve_tensors(features):
    return cpu_model(features)


signatures = {
    "serving": serve_tensors.get_concrete_function(
        features={
            "movie_id": tf.TensorSpec(shape=(1,), dtype=tf.int32, name="movie_id"),
            "user_id": tf.TensorSpec(shape=(1,), dtype=tf.int32, name="user_id"),
        }
    ),
}
tf.saved_model.save(cpu_model, export_dir=os.path.join(model_dir, "exported_model"), signatures=signatures)
imported = tf.saved_model.load(os.path.join(model_dir, "exported_model"))
predict_fn = imported.signatures["serving"]
prediction = predict_fn(**input_batch)["output_0"]

# What the test checks (not a cell of the notebook).
tpu_embedding = model.embedding_layer._tpu_embedding
with open(os.path.join(output_dir, "result.json"), "w") as file:
    json.dump(
        {
            "strategy": type(strategy).__module__,
            "embedding": type(tpu_embedding).__module__,
            "engine_step": getattr(getattr(tpu_embedding, "engine", None), "global_step", None),
            "losses": history.history["loss"],
            "evaluation": evaluation,
            "checkpoint_keys": [name for name, _ in variables],
            "prediction": prediction.numpy().tolist(),
            "direct_prediction": direct_prediction,
            "cpu_model_has_the_trained_tables": all(
                np.array_equal(np.asarray(model.embedding_layer.embedding_tables[table]), np.asarray(cpu_table))
                for table, cpu_table in cpu_model.embedding_layer.embedding_tables.items()
            ),
        },
        file,
    )
