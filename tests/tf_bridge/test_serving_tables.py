"""The bridge's tables as TensorFlow sees them: `TPUEmbeddingForServing`'s `tf.Variable`s and ops (a SavedModel
serves in another process, Keras trains the tables), and the engine's tables as `EngineArray`s.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge/test_serving_tables.py -q
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as real_tf

import tpu_embedding_shim.tensorflow as tf

E = tf.tpu.experimental.embedding

SERVE = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    loaded = tf.saved_model.load(sys.argv[1])
    features = {"clicked": tf.ragged.constant([[1, 2], [5], []], tf.int64),
                "history": tf.ragged.constant([[3, 4, 6], [7], [0]], tf.int64)}
    scores = loaded.serve(features)["score"].numpy()
    by_signature = loaded.signatures["serving_default"](ids=tf.constant([1, 7, -1], tf.int64))["rows"].numpy()
    print(json.dumps({"scores": scores.tolist(), "rows": by_signature.tolist(),
                      "project_imported": any(name.startswith("tpu_embedding_shim") for name in sys.modules)}))
    """
)


def test_a_saved_model_of_a_keras_model_serves_in_another_process_without_the_project(tmp_path):
    table = E.TableConfig(
        vocabulary_size=8,
        dim=2,
        combiner="mean",
        name="items",
        initializer=real_tf.constant_initializer(np.arange(16) / 8.0),
    )
    config = {"clicked": E.FeatureConfig(table=table), "history": E.FeatureConfig(table=table, max_sequence_length=2)}
    embedding = E.TPUEmbeddingForServing(feature_config=config, optimizer=None)
    inputs = real_tf.keras.Input(shape=(6,))
    model = real_tf.keras.Model(inputs, real_tf.keras.layers.Dense(1, kernel_initializer="glorot_uniform")(inputs))
    ragged = real_tf.RaggedTensorSpec([None, None], real_tf.int64)

    @real_tf.function(input_signature=[{"clicked": ragged, "history": ragged}])
    def serve(features):
        activations = embedding(features)
        flat = real_tf.concat([activations["clicked"], real_tf.reshape(activations["history"], [-1, 4])], axis=1)
        return {"score": model(flat)}

    @real_tf.function(input_signature=[real_tf.TensorSpec([None], real_tf.int64, name="ids")])
    def rows(ids):
        history = real_tf.ragged.constant([[0]] * 3, real_tf.int64)
        return {"rows": embedding({"clicked": ids, "history": history})["clicked"]}

    module = real_tf.Module()
    module.embedding, module.model, module.serve = embedding, model, serve
    export = str(tmp_path / "export")
    real_tf.saved_model.save(module, export, signatures={"serving_default": rows})
    features = {
        "clicked": real_tf.ragged.constant([[1, 2], [5], []], real_tf.int64),
        "history": real_tf.ragged.constant([[3, 4, 6], [7], [0]], real_tf.int64),
    }
    expected = serve(features)["score"].numpy()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    job = subprocess.run(
        [sys.executable, "-c", SERVE, export],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert job.returncode == 0, job.stderr[-3000:]
    served = json.loads(job.stdout.strip().splitlines()[-1])
    assert served["project_imported"] is False
    np.testing.assert_array_equal(np.array(served["scores"], np.float32), expected)
    table_values = (np.arange(16) / 8.0).reshape(8, 2)
    np.testing.assert_array_equal(served["rows"], [table_values[1], table_values[7], [0.0, 0.0]])  # -1: padding


def test_keras_trains_the_serving_tables_as_tensorflows_own_serving_class_does():
    """The same model and steps on the bridge's TPUEmbeddingForServing and on TensorFlow's: the same tables and
    predictions after Keras's Adam trained them (dense ids and sparse ids with the mean combiner)."""
    ids = np.array([1, 3, 3, 6], np.int64)
    bags = real_tf.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 0], [2, 2], [3, 1]], [2, 5, 7, 2, 2, 0], [4, 3])
    labels = np.array([[1.0], [-1.0], [0.5], [2.0]], np.float32)

    def train(module):
        real_tf.keras.utils.set_random_seed(1)
        table = module.TableConfig(
            vocabulary_size=8,
            dim=2,
            combiner="mean",
            name="t",
            initializer=real_tf.constant_initializer(np.linspace(-1, 1, 16)),
        )
        config = {"d": module.FeatureConfig(table=table), "s": module.FeatureConfig(table=table)}
        embedding = module.TPUEmbeddingForServing(config, optimizer=None)
        dense = real_tf.keras.layers.Dense(1)
        dense.build((None, 4))
        variables = [*embedding.embedding_tables.values(), *dense.trainable_variables]
        optimizer = real_tf.keras.optimizers.Adam(0.05)
        for _ in range(5):
            with real_tf.GradientTape() as tape:
                activations = embedding({"d": real_tf.constant(ids), "s": bags})
                predictions = dense(real_tf.concat([activations["d"], activations["s"]], axis=1))
                loss = real_tf.reduce_mean((predictions - labels) ** 2)
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return embedding.embedding_tables[table].numpy(), predictions.numpy(), type(embedding).__module__

    mine, mine_predictions, module = train(E)
    theirs, their_predictions, their_module = train(real_tf.tpu.experimental.embedding)
    assert module == "tpu_embedding_shim.tensorflow._serving" and their_module.startswith("tensorflow.")
    np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mine_predictions, their_predictions, rtol=1e-6, atol=1e-7)
    assert not np.allclose(mine, np.linspace(-1, 1, 16).reshape(8, 2))  # Adam moved the rows looked up


def test_a_checkpoint_of_the_training_object_restores_into_the_serving_variables_and_back(tmp_path):
    table = E.TableConfig(vocabulary_size=6, dim=3, name="items")
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.Adagrad(0.1))
    embedding.enqueue({"f": real_tf.constant([1, 4])})
    embedding.dequeue()
    embedding.apply_gradients({"f": real_tf.ones((2, 3))})
    path = real_tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "train" / "ckpt"))

    serving_table = E.TableConfig(vocabulary_size=6, dim=3, name="items")
    served = E.TPUEmbeddingForServing({"f": E.FeatureConfig(table=serving_table)}, E.Adagrad(0.1))
    real_tf.train.Checkpoint(embedding=served).restore(path).expect_partial()  # restored as the variables are made
    np.testing.assert_array_equal(served.embedding_tables[serving_table].numpy(), embedding.embedding_tables[table])
    np.testing.assert_array_equal(
        served.variables[serving_table]["accumulators"].numpy(), embedding.variables[table]["accumulators"]
    )
    served.embedding_tables[serving_table].assign(np.full((6, 3), 2.0, np.float32))
    back = real_tf.train.Checkpoint(embedding=served).save(str(tmp_path / "serving" / "ckpt"))
    keys = dict(real_tf.train.list_variables(back))
    assert keys["embedding/items/.ATTRIBUTES/VARIABLE_VALUE"] == [6, 3]
    assert keys["embedding/items.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE"] == [6, 3]
    real_tf.train.Checkpoint(embedding=embedding).restore(back).expect_partial()
    assert np.all(embedding.embedding_tables[table] == 2.0)


def test_a_checkpoint_of_other_shapes_is_refused_by_the_serving_object(tmp_path):
    table = E.TableConfig(vocabulary_size=6, dim=3, name="items")
    served = E.TPUEmbeddingForServing({"f": E.FeatureConfig(table=table)}, None)
    served.build()
    path = real_tf.train.Checkpoint(embedding=served).save(str(tmp_path / "ckpt"))
    larger = E.TableConfig(vocabulary_size=7, dim=3, name="items")
    other = E.TPUEmbeddingForServing({"f": E.FeatureConfig(table=larger)}, None)
    real_tf.train.Checkpoint(embedding=other).restore(path)
    with pytest.raises(ValueError, match=r"'items' has shape \[6, 3\]; this embedding's is \[7, 3\]"):
        other.build()


@pytest.mark.parametrize("version", ["TPUEmbedding", "TPUEmbeddingV2"])
def test_the_engines_tables_read_and_assign_as_tensorflow_variables(version):
    """`embedding_tables` / `variables` of the engine-backed classes: `.numpy()`, `.shape`, `.dtype`, and
    `.assign()` that the engine's next lookup reads (the step and the other slots stay)."""
    table = E.TableConfig(vocabulary_size=5, dim=2, name="items", combiner="sum")
    config = {"f": E.FeatureConfig(table=table)}
    with tf.distribute.TPUStrategy().scope():
        embedding = getattr(E, version)(config, optimizer=E.Adagrad(0.1))
    embedding.build({"f": real_tf.TensorShape([2])}) if version == "TPUEmbedding" else embedding.build()
    values = embedding.embedding_tables[table]
    assert values.shape == (5, 2) and values.dtype == real_tf.float32 and isinstance(values.numpy(), np.ndarray)
    assert type(values.numpy()) is np.ndarray and type(values[0]) is np.ndarray
    values.assign(np.arange(10, dtype=np.float32).reshape(5, 2))
    np.testing.assert_array_equal(values, np.arange(10).reshape(5, 2))
    np.testing.assert_array_equal(embedding.embedding_tables[table].numpy(), np.arange(10).reshape(5, 2))
    accumulators = embedding.variables[table]["accumulators"]
    accumulators.assign(real_tf.fill((5, 2), 3.0))
    assert np.all(embedding.variables[table]["accumulators"] == 3.0)
    np.testing.assert_array_equal(embedding.variables[table]["parameters"], np.arange(10).reshape(5, 2))
    assert embedding.engine.global_step == 0
    with pytest.raises(ValueError, match=r"a table of shape \[5, 2\] a value of shape \[2, 2\]"):
        values.assign(np.zeros((2, 2)))
    assert type(values.copy()) is np.ndarray  # copies and slices are plain arrays
    with pytest.raises(TypeError, match="not on a copy or slice"):
        values.reshape(10).assign(np.zeros(10))  # a view of another shape writes nowhere
