"""A mid-level training program, unchanged under `mpiexec -n N` and as one process.

    python midlevel_program.py SCENARIO DIRECTORY [CHECKPOINTS]
    mpiexec -n N python midlevel_program.py SCENARIO DIRECTORY [CHECKPOINTS]

It is written as TensorFlow's mid-level API docs write a training loop: a
`TPUStrategy`, a `TPUEmbedding` created in its scope, global batches
through `strategy.experimental_distribute_dataset`, and `strategy.run(step)`
with `dequeue` / `apply_gradients` inside. Nothing in it depends on the
number of processes. Scenarios:

- `train`: four steps of `TPUEmbedding` (step 2 holds an id outside the
  table in the last example of the global batch: it raises, on every
  replica, and the loop goes on), then three of `TPUEmbeddingV2`;
- `save`: two steps, a `CheckpointManager` save after each (one kept);
- `restore`: restores CHECKPOINTS' latest checkpoint, then one more step;
- `failed_save`: a save whose directory can't be created (a file is in the
  way), on replica 0 alone: the others only wait for it;
- `failed_shard_write`: a save into CHECKPOINTS whose data file can't be
  written on the last replica alone (a full disk there, simulated).

Each replica writes DIRECTORY/rank<r>.npz: what it saw (the full tables and
slots, the dense weight, the activations of the whole global batch, the
errors as JSON). `test_midlevel.py` compares them with the one-process run.
"""

import errno
import json
import os
import sys
from pathlib import Path

import numpy as np

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine.distributed import bundle
from tpu_embedding_shim.engine.tf_bundle import BundleReader

embedding_api = tf.tpu.experimental.embedding

GLOBAL_BATCH = 6  # 3 per replica with 2 processes, 2 with 3
LEARNING_RATE = 0.1


def created_slots(table, slot_names, initializers):
    """Adam's slots, made by the program (`slot_variable_creation_fn`): they depend on the full table."""
    return {name: np.abs(table) * (k + 1) / 10 for k, name in enumerate(slot_names)}


def feature_config():
    """Two tables: `items` shared by a pooled and a sequence feature, `users` looked up with weights (its
    optimizer's slots made by `created_slots`)."""
    items = embedding_api.TableConfig(
        vocabulary_size=13,
        dim=4,
        combiner="mean",
        name="items",
        initializer=tf.random_uniform_initializer(seed=1),
    )
    users = embedding_api.TableConfig(
        vocabulary_size=7,
        dim=3,
        combiner="sqrtn",
        name="users",
        initializer=tf.random_uniform_initializer(seed=2),
        optimizer=embedding_api.Adam(learning_rate=0.05, slot_variable_creation_fn=created_slots),
    )
    return {
        "clicked": embedding_api.FeatureConfig(table=items, name="clicked"),
        "history": embedding_api.FeatureConfig(table=items, max_sequence_length=3, name="history"),
        "viewer": embedding_api.FeatureConfig(table=users, name="viewer"),
    }


def global_batches(steps, seed=0, bad_step=None):
    """`steps` global batches of GLOBAL_BATCH examples: ({feature: ids}, {feature: weights}) as ragged tensors."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):

        def ragged(high, most, step=step):
            rows = [rng.integers(0, high, size=rng.integers(1, most + 1)).tolist() for _ in range(GLOBAL_BATCH)]
            if step == bad_step and high == 13:
                rows[-1][0] = 13  # outside the table, in the last replica's rows
            return rows

        clicked, history, viewer = ragged(13, 3), ragged(13, 4), ragged(7, 2)
        weights = [rng.uniform(0.5, 2.0, size=len(row)).round(2).tolist() for row in viewer]
        features = {
            "clicked": tf.ragged.constant(clicked),
            "history": tf.ragged.constant(history),
            "viewer": tf.ragged.constant(viewer),
        }
        out.append((features, {"clicked": None, "history": None, "viewer": tf.ragged.constant(weights)}))
    return out


def embedding_gradient(activation):
    """d loss / d activation: a fixed function of the activation, scaled by 1 / the global batch."""
    return ((activation - 0.25) / GLOBAL_BATCH).astype(np.float32)


class Model:
    """The dense part: a weight per `clicked` dimension, moved by the replicas' mean gradient."""

    def __init__(self):
        self.weights = {"w": np.full(4, 0.5, np.float32)}

    def update(self, clicked):
        local = (clicked * self.weights["w"]).mean(axis=0).astype(np.float32)  # this replica's gradient
        mean = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, local)
        self.weights["w"] -= np.float32(LEARNING_RATE) * mean


def setup():
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def build_v1(strategy):
    with strategy.scope():
        return embedding_api.TPUEmbedding(
            feature_config=feature_config(), optimizer=embedding_api.Adagrad(learning_rate=LEARNING_RATE)
        )


def train_v1(strategy, embedding, model, batches, record, errors):
    """TensorFlow's loop: enqueue each replica's batch, then `strategy.run` dequeues, updates, applies."""
    options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    iterator = iter(strategy.experimental_distribute_dataset(batches, options))

    def step():
        activations = embedding.dequeue()
        model.update(activations["clicked"])
        embedding.apply_gradients({name: embedding_gradient(value) for name, value in activations.items()})
        return activations

    for index in range(len(batches)):
        features, weights = next(iterator)
        try:
            embedding.enqueue(features, weights, training=True)
        except Exception as error:  # a bad batch raises on every replica; the loop goes on
            errors.append(f"{type(error).__name__}: {error}")
            continue
        activations = strategy.run(step)
        for name, value in activations.items():  # the whole global batch's, on every replica
            record[f"step{index}/activations/{name}"] = strategy.gather(value, axis=0)


def record_state(prefix, embedding, model, record):
    for table, arrays in embedding.variables.items():
        for name, value in arrays.items():
            record[f"{prefix}/{table.name}/{name}"] = value
    for table, value in embedding.embedding_tables.items():  # gathered: the full tables on every replica
        record[f"{prefix}/embedding_tables/{table.name}"] = value
    record[f"{prefix}/w"] = model.weights["w"].copy()
    record[f"{prefix}/global_step"] = np.int64(embedding.engine.global_step)


def train_v2(strategy, record, directory):
    with strategy.scope():
        embedding = embedding_api.TPUEmbeddingV2(
            feature_config=feature_config(),
            optimizer=embedding_api.Adagrad(learning_rate=LEARNING_RATE),
            pipeline_execution_with_tensor_core=True,
        )
    model = Model()
    iterator = iter(strategy.experimental_distribute_dataset(global_batches(3, seed=5)))

    def step(features, weights):
        activations, preserved = embedding(features, weights)
        model.update(activations["clicked"])
        gradients = {name: embedding_gradient(value) for name, value in activations.items()}
        embedding.apply_gradients(gradients, preserved)
        return activations

    for index in range(3):
        activations = strategy.run(step, args=next(iterator))
        for name, value in activations.items():
            record[f"v2/step{index}/activations/{name}"] = strategy.gather(value, axis=0)
    record_state("v2", embedding, model, record)
    shards = embedding.embedding_table_shards
    record["v2/shards/items"] = np.array([shard.shape[0] for shard in shards[next(iter(shards))]])
    prefix = tf.train.Checkpoint(embedding=embedding).write(os.path.join(directory, "v2", "ckpt"))
    entry = BundleReader(prefix).entry("embedding/items/.ATTRIBUTES/VARIABLE_VALUE")
    record["v2/checkpoint/items_slices"] = np.array([extents[0] for extents in entry.slices], np.int64).reshape(-1, 2)


def replica_id(strategy):
    return strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)


def checkpoint_of(embedding, model):
    return tf.train.Checkpoint(embedding=embedding, model=model.weights)


def full_disk(*args, **kwargs):
    """What writing a data file on a full disk raises."""
    raise OSError(errno.ENOSPC, "No space left on device (simulated on this replica)")


def main(scenario, directory, checkpoints=None):
    strategy = setup()
    embedding, model = build_v1(strategy), Model()
    record, errors = {"replicas": np.int64(strategy.num_replicas_in_sync)}, []
    if scenario == "train":
        train_v1(strategy, embedding, model, global_batches(4, bad_step=2), record, errors)
        record_state("v1", embedding, model, record)
        train_v2(strategy, record, directory)
    elif scenario == "save":
        manager = tf.train.CheckpointManager(checkpoint_of(embedding, model), checkpoints, max_to_keep=1)
        for batch in global_batches(2):
            train_v1(strategy, embedding, model, [batch], {}, errors)
            manager.save()
        record_state("saved", embedding, model, record)
        record["checkpoints"] = np.array(json.dumps(manager.checkpoints))
    elif scenario == "restore":
        manager = tf.train.CheckpointManager(checkpoint_of(embedding, model), checkpoints, max_to_keep=1)
        record["restored_from"] = np.array(manager.restore_or_initialize())
        record_state("restored", embedding, model, record)
        train_v1(strategy, embedding, model, global_batches(1, seed=9), {}, errors)
        record_state("after", embedding, model, record)
    elif scenario == "failed_save":
        blocker = Path(directory, "blocker")
        if replica_id(strategy) == 0:
            blocker.write_text("a file where the checkpoint directory should be")
        checkpoint = checkpoint_of(embedding, model)
        try:
            checkpoint.save(str(blocker / "ckpt"))
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
        record["save_counter"] = np.int64(checkpoint.save_counter)
    elif scenario == "failed_shard_write":
        if replica_id(strategy) == strategy.num_replicas_in_sync - 1:
            bundle.write_data_shard = full_disk
        checkpoint = checkpoint_of(embedding, model)
        try:
            checkpoint.save(os.path.join(checkpoints, "ckpt"))
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
        record["save_counter"] = np.int64(checkpoint.save_counter)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    np.savez(os.path.join(directory, f"rank{replica_id(strategy)}.npz"), errors=np.array(json.dumps(errors)), **record)


if __name__ == "__main__":
    main(*sys.argv[1:])
