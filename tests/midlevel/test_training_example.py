"""The full training example of TensorFlow 2.3's TPUEmbedding page, on a CPU, checked against the kernels.

The page's code runs with the import changed and a numpy linear model (its
gradient written out) in place of the Keras model and `tf.GradientTape`.
Every step's updated rows are compared with what the engine's reference
kernels predict: `pooled_lookup` for the activations, `pooled_backward` for
the row gradients and `apply_sparse_update` for the optimizer.

The second half trains one model twice, with and without
`pipeline_execution_with_tensor_core`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.lowering import optimizer_spec
from tpu_embedding_shim.engine.lookup import pooled_backward, pooled_lookup
from tpu_embedding_shim.engine.optimizers import apply_sparse_update, initial_slots
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.spec import FeatureSpec

E = tf.tpu.experimental.embedding
B = 8
V1, V2, D = 24, 12, 4


class LinearModel:
    """`y = concat(activations) @ w + b` with a mean squared error; gradients written out."""

    def __init__(self, width: int, seed: int = 0):
        self.params = {
            "w": np.random.default_rng(seed).normal(0, 0.3, (width, 1)).astype(np.float32),
            "b": np.zeros(1, np.float32),
        }

    def loss_and_gradients(self, activations, labels):
        """(loss, d loss / d activations (same nest), d loss / d params)."""
        keys = sorted(activations)
        x = np.concatenate([activations[k] for k in keys], axis=1)
        error = (x @ self.params["w"])[:, 0] + self.params["b"][0] - labels
        loss = float(np.mean(error**2))
        d_out = (2.0 / len(labels)) * error[:, None].astype(np.float32)
        d_x = d_out @ self.params["w"].T
        splits = np.cumsum([activations[k].shape[1] for k in keys])[:-1]
        d_activations = dict(zip(keys, np.split(d_x, splits, axis=1)))
        return loss, d_activations, {"w": x.T @ d_out, "b": d_out.sum(0)}

    def apply(self, gradients, learning_rate=0.1):
        for key, grad in gradients.items():
            self.params[key] -= learning_rate * grad


def page_feature_config(optimizer_one=None):
    """The page's feature config: features one and two share table one; three has table two."""
    table_config_one = E.TableConfig(
        vocabulary_size=V1, dim=D, optimizer=optimizer_one, initializer=tf.random_uniform_initializer(-0.5, 0.5, seed=1)
    )
    table_config_two = E.TableConfig(
        vocabulary_size=V2, dim=D, initializer=tf.random_uniform_initializer(-0.5, 0.5, seed=2)
    )
    return {
        "feature_one": E.FeatureConfig(table=table_config_one),
        "feature_two": E.FeatureConfig(table=table_config_one),
        "feature_three": E.FeatureConfig(table=table_config_two),
    }


TARGET_ONE = np.random.default_rng(7).normal(0, 1, V1).astype(np.float32)
TARGET_TWO = np.random.default_rng(8).normal(0, 1, V2).astype(np.float32)


def make_batch(rng, *, low=0, high=None):
    """One batch: (embedding_features, labels). One dense, one ragged and one sparse feature."""
    high_one = high or V1
    one = rng.integers(low, high_one, B)
    lengths = rng.integers(1, 4, B)
    two_rows = [list(rng.integers(low, high_one, n)) for n in lengths]
    three_ids = rng.integers(0, V2, (B, 2))
    features = {
        "feature_one": one,
        "feature_two": tf.ragged.constant(two_rows),
        "feature_three": tf.SparseTensor(
            indices=[[b, j] for b in range(B) for j in range(2)], values=three_ids.reshape(-1), dense_shape=[B, 2]
        ),
    }
    labels = (
        TARGET_ONE[one] + np.array([TARGET_ONE[r].mean() for r in two_rows]) + TARGET_TWO[three_ids].mean(1)
    ).astype(np.float32)
    return features, labels


def reference_step(tables, slots, features, model, labels, optimizers, step):
    """What one training step must do, from the kernels alone: new tables, new slots, loss."""
    specs = {"feature_one": ("one", V1), "feature_two": ("one", V1), "feature_three": ("two", V2)}
    batches, activations = {}, {}
    for name, (table, vocabulary) in specs.items():
        ids = features[name]
        ids = ids.reshape(-1, 1) if isinstance(ids, np.ndarray) else ids
        batches[name] = to_ragged(ids, feature=FeatureSpec(name=name, table=table, num_buckets=vocabulary))
        activations[name] = pooled_lookup(tables[table], batches[name], "mean")
    loss, d_activations, _ = model.loss_and_gradients(activations, labels)
    new_tables, new_slots = {}, {}
    for table in ("one", "two"):
        ids, grads = zip(
            *[pooled_backward(batches[n], "mean", d_activations[n]) for n, (t, _) in specs.items() if t == table]
        )
        new_tables[table], new_slots[table] = apply_sparse_update(
            optimizers[table], tables[table], slots[table], np.concatenate(ids), np.concatenate(grads), step
        )
    return new_tables, new_slots, loss


def test_the_tpu_embedding_page_example_trains_and_matches_the_reference_kernels(tmp_path, page_004_loop):
    feature_config = page_feature_config(optimizer_one=E.Adagrad(learning_rate=0.2))
    model = LinearModel(3 * D)

    # "Initial setup" (the page: strategy = tf.distribute.TPUStrategy(...)).
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    with strategy.scope():
        embedding = tf.tpu.experimental.embedding.TPUEmbedding(
            feature_config=feature_config, batch_size=B, optimizer=tf.tpu.experimental.embedding.SGD(0.1)
        )

    def dataset_fn(context):  # (embedding features, tpu features): the labels, and the ids again for the reference
        rng = np.random.default_rng(context.input_pipeline_id)
        return [(features, (labels, features)) for features, labels in (make_batch(rng) for _ in range(40))]

    distributed_dataset = strategy.experimental_distribute_datasets_from_function(
        dataset_fn=dataset_fn, options=tf.distribute.InputOptions(experimental_prefetch_to_device=False)
    )
    dataset_iterator = iter(distributed_dataset)

    tables_by_name = {t.name: t for t in embedding.embedding_tables}
    optimizers = {"one": optimizer_spec(E.Adagrad(learning_rate=0.2)), "two": optimizer_spec(E.SGD(0.1))}
    losses, eval_losses = [], []

    def training_tpu_step(tpu_features):
        labels, embedding_features = tpu_features
        # Reference first, from the tables and slots before the step.
        variables = embedding.variables
        tables = {
            "one": variables[tables_by_name["table_0"]]["parameters"],
            "two": variables[tables_by_name["table_1"]]["parameters"],
        }
        slots = {"one": {"accumulators": variables[tables_by_name["table_0"]]["accumulators"]}, "two": {}}
        want_tables, want_slots, want_loss = reference_step(
            tables, slots, embedding_features, model, labels, optimizers, step=embedding.engine.global_step
        )

        activations = embedding.dequeue()  # with tf.GradientTape() as tape: ...
        loss, embedding_gradients, model_gradients = model.loss_and_gradients(activations, labels)
        embedding.apply_gradients(embedding_gradients)
        model.apply(model_gradients)  # "your model gradient and optimizer"
        losses.append(loss)

        assert loss == pytest.approx(want_loss, rel=1e-5)
        after = embedding.variables
        np.testing.assert_allclose(
            after[tables_by_name["table_0"]]["parameters"], want_tables["one"], rtol=1e-6, atol=1e-7
        )
        np.testing.assert_allclose(
            after[tables_by_name["table_0"]]["accumulators"], want_slots["one"]["accumulators"], rtol=1e-6
        )
        np.testing.assert_allclose(
            after[tables_by_name["table_1"]]["parameters"], want_tables["two"], rtol=1e-6, atol=1e-7
        )

    def evaluation_tpu_step(tpu_features):
        labels, _ = tpu_features
        eval_losses.append(model.loss_and_gradients(embedding.dequeue(), labels)[0])

    training_step = tf.function(page_004_loop(tf, strategy, embedding, training_tpu_step, training=True))
    evalution_step = tf.function(page_004_loop(tf, strategy, embedding, evaluation_tpu_step, training=False))  # sic

    before = {t: v.copy() for t, v in embedding.embedding_tables.items()}
    training_step(dataset_iterator, 30)
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])
    assert embedding.engine.global_step == 30

    tables_after_training = embedding.embedding_tables
    evalution_step(dataset_iterator, 5)
    assert len(eval_losses) == 5 and all(np.isfinite(eval_losses))
    for table, values in embedding.embedding_tables.items():  # evaluation changes nothing
        np.testing.assert_array_equal(values, tables_after_training[table])
        assert not np.array_equal(values, before[table])

    # Checkpointing, then the page's CPU part: restore into an object made outside any strategy.
    checkpoint = tf.train.Checkpoint(model=model.params, embedding=embedding)
    path = checkpoint.save(os.path.join(str(tmp_path), "ckpt"))
    assert tf.train.latest_checkpoint(str(tmp_path)) == path
    cpu_model = LinearModel(3 * D, seed=99)
    cpu_embedding = tf.tpu.experimental.embedding.TPUEmbedding(
        feature_config=page_feature_config(optimizer_one=E.Adagrad(learning_rate=0.2)),
        batch_size=B,
        optimizer=tf.tpu.experimental.embedding.SGD(0.1),
    )
    checkpoint = tf.train.Checkpoint(model=cpu_model.params, embedding=cpu_embedding)
    checkpoint.restore(tf.train.latest_checkpoint(str(tmp_path))).assert_consumed()
    tables = cpu_embedding.embedding_tables
    for values, trained in zip(tables.values(), tables_after_training.values()):
        np.testing.assert_array_equal(values, trained)
    np.testing.assert_array_equal(cpu_model.params["w"], model.params["w"])

    # "You can now use table in functions like tf.nn.embedding_lookup": the serving lookup.
    features, _labels = make_batch(np.random.default_rng(123))
    served = tf.tpu.experimental.embedding.serving_embedding_lookup(
        features, None, tables, cpu_embedding._feature_config
    )
    embedding.enqueue(features, training=False)
    trained = embedding.dequeue()
    for key in trained:
        np.testing.assert_array_equal(served[key], trained[key])


# ---------------------------------------------------------------------------------------------
# Pipelining: the same model trained twice
# ---------------------------------------------------------------------------------------------


def train(batches, *, pipelining, optimizer=None):
    embedding = E.TPUEmbedding(
        feature_config=page_feature_config(),
        optimizer=optimizer or E.SGD(0.5),
        pipeline_execution_with_tensor_core=pipelining,
    )
    model = LinearModel(3 * D)
    for features, labels in batches:
        embedding.enqueue(features, training=True)
        activations = embedding.dequeue()
        _, d_activations, d_params = model.loss_and_gradients(activations, labels)
        embedding.apply_gradients(d_activations)
        model.apply(d_params)
    return {t.name: v for t, v in embedding.embedding_tables.items()}, model.params


def disjoint_batches(steps):
    """Consecutive steps share no id: even steps use ids [0, 12) of table one and [0, 6) of table two,
    odd steps the upper halves."""
    rng = np.random.default_rng(5)
    out = []
    for step in range(steps):
        low = (step % 2) * (V1 // 2)
        one = rng.integers(low, low + V1 // 2, B)
        two = [list(rng.integers(low, low + V1 // 2, n)) for n in rng.integers(1, 4, B)]
        three = rng.integers(0, V2 // 2, B) + (step % 2) * (V2 // 2)
        features = {
            "feature_one": one,
            "feature_two": tf.ragged.constant(two),
            "feature_three": tf.ragged.constant([[int(i)] for i in three]),
        }
        out.append((features, rng.normal(0, 1, B).astype(np.float32)))
    return out


@pytest.mark.parametrize("optimizer", [E.SGD(0.5), E.Adagrad(0.5), E.Adam(0.05)], ids=["sgd", "adagrad", "adam"])
def test_pipelining_changes_nothing_when_consecutive_steps_share_no_id(optimizer):
    batches = disjoint_batches(8)
    plain, plain_model = train(batches, pipelining=False, optimizer=optimizer)
    piped, piped_model = train(batches, pipelining=True, optimizer=optimizer)
    for name in plain:
        np.testing.assert_array_equal(piped[name], plain[name])
    np.testing.assert_array_equal(piped_model["w"], plain_model["w"])


def test_pipelining_gives_one_step_stale_lookups_when_ids_repeat():
    rng = np.random.default_rng(11)
    batches = [make_batch(rng) for _ in range(6)]  # ids repeat across steps
    plain, _ = train(batches, pipelining=False)
    piped, _ = train(batches, pipelining=True)
    assert not np.allclose(piped["table_0"], plain["table_0"])

    # The documented rule, from the kernels: the lookup of step n reads the tables as they were
    # after n - 1 updates (step 0 reads the initial tables), while update n is applied to the
    # tables after all n earlier updates.
    config = page_feature_config()
    engine = E.TPUEmbedding(feature_config=config, optimizer=E.SGD(0.5)).engine
    states = [{"one": engine.table("table_0"), "two": engine.table("table_1")}]
    model = LinearModel(3 * D)
    sgd = optimizer_spec(E.SGD(0.5))
    for step, (features, labels) in enumerate(batches):
        seen = states[max(step - 1, 0)]
        specs = {"feature_one": ("one", V1), "feature_two": ("one", V1), "feature_three": ("two", V2)}
        batch = {
            n: to_ragged(
                features[n].reshape(-1, 1) if isinstance(features[n], np.ndarray) else features[n],
                feature=FeatureSpec(name=n, table=t, num_buckets=v),
            )
            for n, (t, v) in specs.items()
        }
        activations = {n: pooled_lookup(seen[t], batch[n], "mean") for n, (t, _) in specs.items()}
        _, d_activations, d_params = model.loss_and_gradients(activations, labels)
        model.apply(d_params)
        new = {}
        for table in ("one", "two"):
            ids, grads = zip(
                *[pooled_backward(batch[n], "mean", d_activations[n]) for n, (t, _) in specs.items() if t == table]
            )
            new[table], _ = apply_sparse_update(
                sgd, states[-1][table], initial_slots(sgd, (1, D)), np.concatenate(ids), np.concatenate(grads), step
            )
        states.append(new)
    np.testing.assert_allclose(piped["table_0"], states[-1]["one"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(piped["table_1"], states[-1]["two"], rtol=1e-6, atol=1e-7)


def test_pipelined_lookup_reads_the_tables_before_the_previous_update():
    table = E.TableConfig(vocabulary_size=4, dim=1, combiner="sum", initializer=E.RowIdInitializer())
    embedding = E.TPUEmbedding(
        feature_config=E.FeatureConfig(table=table), optimizer=E.SGD(1.0), pipeline_execution_with_tensor_core=True
    )
    seen = []
    for _ in range(3):
        embedding.enqueue(np.array([2]))
        seen.append(float(embedding.dequeue()[0, 0]))
        embedding.apply_gradients(np.ones((1, 1), np.float32))
    assert seen == [2.0, 2.0, 1.0]  # step 1 does not see step 0's update; step 2 sees it, not step 1's
    embedding.enqueue(np.array([2]), training=False)  # an inference lookup sees every update
    assert float(embedding.dequeue()[0, 0]) == -1.0
