"""A Keras program with TensorFlow Recommenders' TPU embedding layer, unchanged under `mpiexec -n N` and alone.

    python tf_midlevel_program.py OUT.json
    mpiexec -n N python tf_midlevel_program.py OUT.json

It is written as TFRS's docs write one, in the drop-in mode (`activated()`:
TFRS's `tf.distribute.TPUStrategy` and `tf.tpu.experimental.embedding` are
the bridge's): a `TPUStrategy`, TFRS's `TPUEmbedding` layer and a Keras
model made in its scope, `model.fit` on a `tf.data` dataset of global
batches of 12 examples (a pooled feature of ragged ids and a sequence-less
dense one), the loss Keras's mean squared error; a `tf.train.Checkpoint` saved, one more epoch, restored;
then `evaluate` and `predict` (each replica's rows). Then a custom loop:
`strategy.experimental_distribute_dataset`, `strategy.run`, the replica
context's `all_reduce` and `strategy.reduce`. Nothing in it depends on the
number of processes.

Replica 0 writes OUT.json: the tables, the dense weights, what the strategy
reported and every replica's error (`report.write_record`).
"""

import os
import sys
import tempfile
import traceback

import numpy as np
import tensorflow
from report import write_record  # a sibling module: this file runs as a script

import tpu_embedding_shim.tensorflow as shim
from tpu_embedding_shim.api import replicas

GLOBAL_BATCH = 12  # 6 per replica with 2 processes, 4 with 3
STEPS = 4


def global_batches():
    """STEPS global batches: ragged ids of table `items`, dense ids of table `users`, a label."""
    rng = np.random.default_rng(7)
    items, users, labels = [], [], []
    for _ in range(STEPS * GLOBAL_BATCH):
        items.append(list(rng.integers(0, 16, size=rng.integers(1, 4))))
        users.append(int(rng.integers(0, 8)))
        labels.append(float(rng.normal()))
    features = {
        "items": tensorflow.ragged.constant(items, dtype=tensorflow.int64),
        "users": tensorflow.constant(users, tensorflow.int64),
    }
    labels = tensorflow.constant(labels, tensorflow.float32)[:, None]
    return tensorflow.data.Dataset.from_tensor_slices((features, labels)).batch(GLOBAL_BATCH, drop_remainder=True)


def save_train_restore(tf, model, layer, tables, directory):
    """TensorFlow's checkpoint of the model, as multi-worker TensorFlow programs write one: every replica
    saves (the tables are gathered collectively), replica 0 into the model directory, the others into a
    temporary directory of their own. One more epoch moves the tables; every replica restores replica 0's
    checkpoint: whether the tables are the saved ones again."""
    checkpoint = tf.train.Checkpoint(model=model)
    with tempfile.TemporaryDirectory() as scratch:
        saved = checkpoint.save(os.path.join(directory if replicas.is_chief() else scratch, "ckpt"))
    before = [np.asarray(layer.embedding_tables[t]) for t in tables]
    model.fit(global_batches(), epochs=1, verbose=0)
    moved = not all(np.array_equal(np.asarray(layer.embedding_tables[t]), b) for t, b in zip(tables, before))
    tf.train.Checkpoint(model=model).restore(os.path.join(directory, os.path.basename(saved))).assert_consumed()
    after = [np.asarray(layer.embedding_tables[t]) for t in tables]
    return moved and all(np.array_equal(a, b) for a, b in zip(after, before))


def custom_loop(tf, strategy):
    """The mid-level API in a `tf.function` loop: enqueue, `strategy.run(dequeue, apply_gradients)`, the
    activations of the global batch gathered. The gradient of each example depends on that example alone, so
    the tables and activations are one process's bits."""
    embedding = tf.tpu.experimental.embedding
    items = embedding.TableConfig(
        vocabulary_size=16, dim=4, combiner="sum", name="loop_items",
        initializer=tf.constant_initializer(np.linspace(-1.0, 1.0, 64)),
    )  # fmt: skip
    with strategy.scope():
        mid_level = embedding.TPUEmbedding(
            feature_config={"items": embedding.FeatureConfig(table=items)},
            optimizer=embedding.Adagrad(0.25),
        )

    @tf.function
    def train(iterator):
        features, labels = next(iterator)
        mid_level.enqueue({"items": features["items"]}, training=True)

        def step(labels):
            activations = mid_level.dequeue()
            mid_level.apply_gradients({"items": activations["items"] * labels / GLOBAL_BATCH})
            return activations["items"]

        return strategy.gather(strategy.run(step, args=(labels,)), axis=0)

    iterator = iter(strategy.experimental_distribute_dataset(global_batches()))
    activations = [train(iterator).numpy().tolist() for _ in range(STEPS)]
    return {"loop_activations": activations, "loop_table": np.asarray(mid_level.embedding_tables[items]).tolist()}


def main(out):
    import tensorflow_recommenders as tfrs

    record = {}
    try:
        with shim.activated():
            tf = tensorflow
            embedding = tf.tpu.experimental.embedding
            strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver(tpu=""))
            items = embedding.TableConfig(
                vocabulary_size=16, dim=4, combiner="mean", name="items",
                initializer=tf.constant_initializer(np.linspace(-1.0, 1.0, 64)),
            )  # fmt: skip
            users = embedding.TableConfig(
                vocabulary_size=8, dim=4, name="users", initializer=tf.constant_initializer(np.linspace(1.0, -1.0, 32))
            )
            with strategy.scope():
                layer = tfrs.layers.embedding.TPUEmbedding(
                    feature_config={
                        "items": embedding.FeatureConfig(table=items),
                        "users": embedding.FeatureConfig(table=users),
                    },
                    optimizer=embedding.Adagrad(0.5),
                )
                inputs = {  # the global batch size: Keras divides it by num_replicas_in_sync, as on a TPU
                    "items": tf.keras.Input(batch_size=GLOBAL_BATCH, shape=(None,), dtype=tf.int64, ragged=True),
                    "users": tf.keras.Input(batch_size=GLOBAL_BATCH, shape=(), dtype=tf.int64),
                }
                activations = layer(inputs)
                joined = tf.concat([activations["items"], activations["users"]], axis=1)
                hidden = tf.keras.layers.Dense(3, activation="tanh", kernel_initializer="glorot_uniform")(joined)
                model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(hidden))
                model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
            tf.keras.utils.set_random_seed(0)  # the dense weights: the same on every replica
            model.set_weights(
                [np.linspace(-0.5, 0.5, w.size, dtype=np.float32).reshape(w.shape) for w in model.get_weights()]
            )
            model.fit(global_batches(), epochs=2, verbose=0)
            record["fit_tables"] = {t.name: np.asarray(layer.embedding_tables[t]).tolist() for t in (items, users)}
            record["fit_dense"] = [w.tolist() for w in model.get_weights()]
            record["restored_equal"] = save_train_restore(tf, model, layer, (items, users), os.path.dirname(out))
            record["evaluate_loss"] = float(model.evaluate(global_batches(), verbose=0))  # this replica's rows
            record["predict_rows"] = int(model.predict(global_batches(), verbose=0).shape[0])
            record["engine_step"] = int(layer._tpu_embedding.engine.global_step)
            record["replicas"] = strategy.num_replicas_in_sync

            @tf.function
            def examples_and_sum(features, labels):
                def step(features, labels):
                    context = tf.distribute.get_replica_context()
                    rows = tf.shape(labels)[0]
                    return rows, context.all_reduce("SUM", tf.reduce_sum(labels))

                rows, total = strategy.run(step, args=(features, labels))
                return strategy.reduce("SUM", rows, axis=None), total, strategy.reduce("MEAN", labels, axis=0)

            seen = []
            for features, labels in strategy.experimental_distribute_dataset(global_batches()):
                rows, total, mean = examples_and_sum(features, labels)
                seen.append([int(rows), float(total), float(mean[0])])
            record["seen"] = seen
            record["local_rows"] = [
                int(labels.shape[0]) for _, labels in strategy.experimental_distribute_dataset(global_batches())
            ]
            record.update(custom_loop(tf, strategy))
    except Exception as error:  # every replica's error reaches the report
        traceback.print_exc()
        record["error"] = f"{type(error).__name__}: {error}"
    write_record(record, out)


if __name__ == "__main__":
    main(sys.argv[1])
