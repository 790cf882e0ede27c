"""`to_tf_midlevel` against a real TensorFlow (2.15): the generated model.py runs with `import tensorflow as tf`,
its `serving()` restores the migration's checkpoint into TensorFlow's own `TPUEmbeddingForServing`, and TensorFlow
then holds the EmbeddingConfigSpec engine's tables and slots and gives its lookups.

Runs only where TensorFlow is installed (see __init__.py).
"""

import dataclasses

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow", reason="the TensorFlow interop tests need TensorFlow (tensorflow-cpu==2.15.1 in a separate venv)"
)

from tests.migrate.models import every_option_config, movielens_config, quantized_midlevel_spec  # noqa: E402
from tpu_embedding_shim.engine import Engine  # noqa: E402
from tpu_embedding_shim.migrate import to_tf_midlevel  # noqa: E402


def _trained(config, directory, steps=3):
    """The config's engine after `steps` steps of random gradients, and its checkpoint."""
    spec = dataclasses.replace(config.to_spec(), clipping_limit=None)  # the limit changes nothing
    engine = Engine(spec, seed=2, kernels="numpy")
    rng = np.random.default_rng(0)
    for _ in range(steps):
        features = {
            "user": [[1, 2], [3]],
            "item": [[4], [5]],
            "history": [[1, 2, 3], [6]],
            "tags": [[1, 2], [7]],
            "tag_weights": [[0.5, 2.0], [1.0]],
            "city": [["paris"], ["oslo", "lima"]],
        }
        result = engine.forward(
            {k: v for k, v in features.items() if k in {f.name for f in spec.features} or k == "tag_weights"}
        )
        engine.apply_gradients(
            result, {k: rng.normal(size=v.shape).astype(np.float32) for k, v in result.activations.items()}
        )
    return engine, engine.save(str(directory))


def _run_generated(directory):
    code = (directory / "model.py").read_text()
    namespace = {"__file__": str(directory / "model.py"), "__name__": "migrated_model"}
    exec(compile(code, str(directory / "model.py"), "exec"), namespace)  # imports the real tensorflow
    assert namespace["tf"] is tf
    return namespace


def test_tensorflow_serving_restores_the_migrated_checkpoint_and_looks_up_the_same(tmp_path):
    config = every_option_config(profile=False)
    engine, path = _trained(config, tmp_path / "model")
    migration = to_tf_midlevel(config, path)
    migration.write(tmp_path / "out")
    serving = _run_generated(tmp_path / "out")["serving"]()
    assert isinstance(serving, tf.tpu.experimental.embedding.TPUEmbeddingForServing)
    variables = {t: {s: v.numpy() for s, v in slots.items()} for t, slots in serving._variables.items()}
    for table in engine.spec.tables:
        np.testing.assert_array_equal(variables[table.name]["parameters"], engine.table(table.name))
        for slot, values in engine.slots(table.name).items():
            np.testing.assert_array_equal(variables[table.name][slot], values, err_msg=f"{table.name}/{slot}")
    # Pooled lookups of TensorFlow's serving path against the engine's (sequence features differ in TF's serving
    # path itself: docs/mid_level_api.md "CPU serving").
    ids = {"user": [[1, 2], [3]], "item": [[4], [5]], "tags": [[1, 2], [7]], "city": [[0], [1, 2]]}
    weights = {"tags": [[0.5, 2.0], [1.0]]}
    config_tf = serving._feature_config
    features = {k: tf.ragged.constant(v, dtype=tf.int64) for k, v in ids.items()}
    tf_weights = {k: tf.ragged.constant(weights[k], dtype=tf.float32) if k in weights else None for k in ids}
    looked_up = tf.tpu.experimental.embedding.serving_embedding_lookup(
        features, tf_weights, serving.embedding_tables, {k: config_tf[k] for k in ids}
    )
    engine_features = dict(ids, tag_weights=weights["tags"], city=[["paris"], ["oslo", "lima"]], history=[[1], [2]])
    expected = engine.forward(engine_features, training=False).activations
    for name in ids:
        np.testing.assert_allclose(looked_up[name].numpy(), expected[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_the_movielens_configs_build_in_tensorflow(tmp_path):
    migration = to_tf_midlevel(movielens_config(), seed=1)
    migration.write(tmp_path)
    namespace = _run_generated(tmp_path)
    tables = {f.table.name: f.table for f in namespace["FEATURE_CONFIG"].values()}
    assert sorted(tables) == sorted({f.table.name for f in migration.config["feature_config"].values()})
    serving = namespace["serving"]()
    np.testing.assert_array_equal(
        serving.embedding_tables[tables["tbl_user"]].numpy(),
        migration.weights["embedding/tbl_user/.ATTRIBUTES/VARIABLE_VALUE"],
    )
    assert isinstance(tables["tbl_genres"].optimizer, tf.tpu.experimental.embedding.Adagrad)
    assert tables["tbl_genres"].combiner == "sqrtn"


def test_a_quantized_table_builds_in_tensorflow_with_its_quantization_config(tmp_path):
    """TensorFlow's TableConfig gets the QuantizationConfig; its serving lookup reads the table unquantized, as
    the engine's serving path does (docs/mid_level_api.md "Quantized tables")."""
    spec = quantized_midlevel_spec()
    migration = to_tf_midlevel(spec, seed=1)
    migration.write(tmp_path)
    namespace = _run_generated(tmp_path)
    tables = {f.table.name: f.table for f in namespace["FEATURE_CONFIG"].values()}
    config = tables["q"].quantization_config
    assert isinstance(config, tf.tpu.experimental.embedding.QuantizationConfig)
    assert (config.num_buckets, config.lower, config.upper) == (5, -0.25, 0.25)
    assert tables["p"].quantization_config is None
    serving = namespace["serving"]()
    ids = {"a": [[0, 1], [2]], "b": [[3], [4, 5]]}
    looked_up = tf.tpu.experimental.embedding.serving_embedding_lookup(
        {k: tf.ragged.constant(v, dtype=tf.int64) for k, v in ids.items()},
        None,
        serving.embedding_tables,
        {k: serving._feature_config[k] for k in ids},
    )
    engine = Engine(spec, seed=1, kernels="numpy")  # the migration's fresh tables: the same seed
    tables_q = migration.weights["embedding/q/.ATTRIBUTES/VARIABLE_VALUE"]
    np.testing.assert_array_equal(engine.table("q"), tables_q)
    expected = tables_q[[0, 1]].sum(axis=0)  # unquantized: TensorFlow's CPU lookup ignores quantization_config
    np.testing.assert_allclose(looked_up["a"].numpy()[0], expected, rtol=1e-6)
    assert np.abs(expected).max() > 0.25
