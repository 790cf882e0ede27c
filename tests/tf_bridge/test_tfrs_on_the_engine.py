"""TensorFlow Recommenders' TPU embedding layer in Keras, unmodified, on the engine (the drop-in mode).

Needs tensorflow-recommenders with Keras 2 (`pip install --no-deps tensorflow-recommenders==0.7.3` on TensorFlow
2.15; `==0.7.7` on TensorFlow 2.21, run with `TF_USE_LEGACY_KERAS=1`); skips without it, and under Keras 3, where
TFRS refuses to import. Runs where TensorFlow is installed:

    python -m pytest tests/tf_bridge/test_tfrs_on_the_engine.py -q
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow

import tpu_embedding_shim.tensorflow as shim

try:
    import tensorflow_recommenders as tfrs
except ImportError as error:  # not installed, or TFRS's own refusal of Keras 3
    pytest.skip(f"needs tensorflow-recommenders with Keras 2: {error}", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unchanged_programs")


def run(*args, env=None, cwd=None):
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=1500, cwd=cwd, env=env)


def test_keras_fit_trains_the_tables_with_the_table_optimizer_on_the_engine_not_with_keras():
    """One `model.fit` step: the tables move exactly as TPU SGD(0.5) moves them, hand-computed; Keras's
    SGD(100) would have moved them elsewhere, and holds no variable of a table's shape."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 8, (4, 1)).astype(np.int32)
    labels = rng.normal(size=(4, 1)).astype(np.float32)
    with shim.activated():
        tf = tensorflow
        strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver(tpu=""))
        table = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=8, dim=2, name="t")
        with strategy.scope():
            inputs = {"f": tf.keras.Input(batch_size=4, shape=(1,), dtype=tf.int32)}
            layer = tfrs.layers.embedding.TPUEmbedding(
                feature_config={"f": tf.tpu.experimental.embedding.FeatureConfig(table=table)},
                optimizer=tf.tpu.experimental.embedding.SGD(0.5),
            )
            dense = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", trainable=False)
            model = tf.keras.Model(inputs, dense(layer(inputs)["f"]))
            model.compile(optimizer=tf.keras.optimizers.SGD(100.0), loss="mse")
        before = np.array(layer.embedding_tables[table])
        model.fit({"f": ids}, labels, batch_size=4, epochs=1, verbose=0)
        after = np.array(layer.embedding_tables[table])
        engine = layer._tpu_embedding.engine
    assert type(layer._tpu_embedding).__module__ == "tpu_embedding_shim.tensorflow._midlevel"
    assert engine.global_step == 1
    predictions = before[ids[:, 0]].sum(axis=1, keepdims=True)
    gradients = 2 * (predictions - labels) / 4 * np.ones((1, 2), np.float32)  # d mean squared error / d activation
    expected = before.copy()
    np.add.at(expected, ids[:, 0], -0.5 * gradients)
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-6)
    assert not any(tuple(v.shape) == (8, 2) for v in model.optimizer.variables())


def test_the_layer_made_outside_a_tpu_strategy_trains_with_keras_as_on_tensorflows_cpu_path():
    """TFRS's layer outside a TPU strategy is TensorFlow's CPU path: a TPUEmbeddingForServing whose tables Keras's
    optimizer trains. In the drop-in mode it is the bridge's, with tf.Variable tables: `fit` gives the same
    tables and predictions as the same program without the mode."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 8, (8,)).astype(np.int64)
    labels = rng.normal(size=(8, 1)).astype(np.float32)

    def fit():
        tf = tensorflow
        tf.keras.utils.set_random_seed(3)
        table = tf.tpu.experimental.embedding.TableConfig(
            vocabulary_size=8, dim=2, name="t", initializer=tf.constant_initializer(np.linspace(-1.0, 1.0, 16))
        )
        layer = tfrs.layers.embedding.TPUEmbedding(
            feature_config={"f": tf.tpu.experimental.embedding.FeatureConfig(table=table)},
            optimizer=tf.tpu.experimental.embedding.SGD(0.5),
        )
        inputs = {"f": tf.keras.Input(shape=(), dtype=tf.int64)}
        model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(layer(inputs)["f"]))
        model.compile(optimizer=tf.keras.optimizers.Adam(0.1), loss="mse")
        model.fit({"f": ids}, labels, batch_size=4, epochs=3, verbose=0)
        served = type(layer._tpu_embedding).__module__
        return np.array(layer.embedding_tables[table]), model.predict({"f": ids}, verbose=0), served

    with shim.activated():
        mine, mine_predictions, module = fit()
    theirs, their_predictions, their_module = fit()
    assert module == "tpu_embedding_shim.tensorflow._serving" and their_module.startswith("tensorflow.")
    assert not np.allclose(theirs, np.linspace(-1.0, 1.0, 16).reshape(8, 2))  # Keras's Adam moved the tables
    np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mine_predictions, their_predictions, rtol=1e-6, atol=1e-7)


def test_the_quick_start_notebooks_cells_run_on_the_engine(tmp_path):
    result = run("-m", "tpu_embedding_shim.tensorflow", os.path.join(PROGRAMS, "tfrs_quick_start.py"), str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["strategy"] == "tpu_embedding_shim.tensorflow._distribute"
    assert report["embedding"] == "tpu_embedding_shim.tensorflow._midlevel"
    assert report["engine_step"] == 100  # fit: 10 epochs of 10 steps, each one engine step; evaluate: none
    assert len(report["losses"]) == 10 and len(report["evaluation"]) == 4
    keys = report["checkpoint_keys"]
    assert "model/embedding_layer/_tpu_embedding/table_0/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert "model/embedding_layer/_tpu_embedding/table_0.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert report["cpu_model_has_the_trained_tables"] is True
    np.testing.assert_allclose(report["prediction"], report["direct_prediction"], rtol=1e-5)  # the SavedModel serves


TFRS_TESTS = [
    "layers/embedding/tpu_embedding_layer_test.py",
    "experimental/layers/embedding/partial_tpu_embedding_test.py",
    "experimental/models/ranking_test.py",
]


TENSORFLOWS_RANK_REFUSALS = {  # TensorFlow's own messages (tensorflow/python/tpu/tpu_embedding_v2.py)
    "TPUEmbeddingLayerTest": "Only rank 2 and above sparse tensor is supported, find rank 1 sparse tensor for input",
    "PartialTPUEmbeddingTest": "Received input tensor of shape (). Rank must be 1 and above",
}


def test_tfrs_own_tests_of_its_tpu_layers_run_on_the_engine(tmp_path):
    """TFRS's shipped tests, each inside the stand-in TPUStrategy's scope (as on a TPU), in the drop-in mode."""
    package = os.path.dirname(tfrs.__file__)
    report_file = tmp_path / "report.json"
    result = run(
        "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.tf_bridge.unchanged_programs.drop_in_plugin", "-q",
        *[os.path.join(package, path) for path in TFRS_TESTS],
        env={"DROP_IN_REPORT": str(report_file), "DROP_IN_TPU_SCOPE": "1"},
        cwd=ROOT,
    )  # fmt: skip
    report = json.loads(report_file.read_text())
    assert report["active"] is True
    tests = report["tests"]
    through_engine = [t for t in tests.values() if t.get("outcome") == "passed" and "TPUEmbedding" in t["objects"]]
    trained = [t for t in through_engine if t["engine_steps"] > 0]
    assert not any("TPUEmbeddingForServing" in t["objects"] for t in tests.values())  # every layer took the TPU path
    # TensorFlow 2.15.1 + TFRS 0.7.3: 38 of the 66 pass through the engine, 35 of them with engine steps.
    # TensorFlow 2.21.0 + tf_keras + TFRS 0.7.7: 70 of its 115 pass through the engine, 67 with engine steps.
    assert len(through_engine) >= 38 and len(trained) >= 35, result.stdout[-3000:]
    # The others (8 on 2.15, 9 on 2.21) are tests of TFRS's CPU path: they feed rank-0 dense inputs
    # (PartialTPUEmbedding's) or rank-1 sparse ones (a sparse tf.keras.Input(shape=())), which TensorFlow's
    # TPUEmbedding refuses on a TPU in `build` and `enqueue`. Each fails with TensorFlow's message, as it would
    # on a TPU (docs/run_unchanged.md).
    failed = {name.split("::", 1)[1]: t["error"] for name, t in tests.items() if t.get("outcome") == "failed"}
    for name, error in failed.items():
        assert TENSORFLOWS_RANK_REFUSALS[name.split("::")[0]] in error, (name, error)
