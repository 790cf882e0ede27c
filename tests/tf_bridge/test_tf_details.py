"""TensorFlow's details that real programs rely on, against TensorFlow 2.15 itself.

- every initializer TensorFlow accepts builds a table, in TPU columns and in
  the mid-level API: TF / Keras initializer objects with or without a seed,
  and plain `(shape, dtype)` callables; and the project's own initializers
  are callable by TensorFlow (`initializer(shape, dtype=tf.float32)`);
- a TensorFlow 1 TPUEstimator program (graph mode) trains, evaluates,
  predicts and exports (tf1_program.py, in a process of its own: graph mode
  cannot be left once entered).
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as real_tf

import tpu_embedding_shim.tensorflow as tf
from tpu_embedding_shim.engine import Engine

V, D = 64, 8
HERE = pathlib.Path(__file__).parent


def _std_between(low, high):
    return lambda table: low < float(np.std(table)) < high


def _within(low, high):
    return lambda table: float(table.min()) >= low and float(table.max()) <= high and np.std(table) > 0


def _equal_to(value):
    return lambda table: np.all(table == np.float32(value))


INITIALIZERS = {
    "tf.random_normal_initializer(0., 0.01)": (
        lambda: tf.random_normal_initializer(0.0, 0.01),
        _std_between(0.008, 0.012),
    ),
    "tf.compat.v1.random_normal_initializer()": (
        lambda: tf.compat.v1.random_normal_initializer(),
        _std_between(0.8, 1.2),
    ),
    "tf.keras.initializers.TruncatedNormal(stddev=0.02)": (
        lambda: tf.keras.initializers.TruncatedNormal(stddev=0.02),
        lambda t: _std_between(0.01, 0.02)(t) and np.abs(t).max() <= 0.04 + 1e-6,
    ),
    "tf.compat.v1.truncated_normal_initializer(stddev=0.02)": (
        lambda: tf.compat.v1.truncated_normal_initializer(stddev=0.02),
        lambda t: _std_between(0.01, 0.02)(t) and np.abs(t).max() <= 0.04 + 1e-6,
    ),
    "tf.initializers.TruncatedNormal(seed=3)": (
        lambda: tf.initializers.TruncatedNormal(seed=3),
        _std_between(0.02, 0.05),
    ),
    "tf.compat.v1.random_uniform_initializer(-0.1, 0.1)": (
        lambda: tf.compat.v1.random_uniform_initializer(-0.1, 0.1),
        _within(-0.1, 0.1),
    ),
    "tf.keras.initializers.RandomUniform(-1, 1)": (lambda: tf.keras.initializers.RandomUniform(-1, 1), _within(-1, 1)),
    "tf.zeros_initializer()": (lambda: tf.zeros_initializer(), _equal_to(0)),
    "tf.keras.initializers.Ones()": (lambda: tf.keras.initializers.Ones(), _equal_to(1)),
    "tf.constant_initializer(0.5)": (lambda: tf.constant_initializer(0.5), _equal_to(0.5)),
    "tf.keras.initializers.GlorotUniform()": (
        lambda: tf.keras.initializers.GlorotUniform(),
        _within(-np.sqrt(6 / (V + D)), np.sqrt(6 / (V + D))),
    ),
    "tf.compat.v1.glorot_normal_initializer()": (
        lambda: tf.compat.v1.glorot_normal_initializer(),
        _std_between(0.1, 0.25),  # sqrt(2 / (fan_in + fan_out)) = 0.17
    ),
    "a (shape, dtype) function": (lambda: lambda shape, dtype: tf.fill(shape, tf.cast(0.25, dtype)), _equal_to(0.25)),
}


def _column_table(initializer):
    """The engine's table of a TPU embedding column with `initializer` (the TPUEstimator path)."""
    column = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("ids", V), D, initializer=initializer
    )
    spec = tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[column], optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(0.1)
    ).to_spec()
    return Engine(spec, seed=7).table("tbl_ids")


def _midlevel_table(initializer):
    """The table of a mid-level TPUEmbedding whose TableConfig has `initializer`."""
    E = tf.tpu.experimental.embedding
    table = E.TableConfig(vocabulary_size=V, dim=D, initializer=initializer, name="t")
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=table)}, E.SGD(0.1))
    embedding.build(per_replica_batch_size=2)
    return np.asarray(embedding.embedding_tables[table])


@pytest.mark.parametrize("path", ["column", "midlevel"])
@pytest.mark.parametrize("name", list(INITIALIZERS))
def test_every_initializer_tensorflow_accepts_builds_the_table(name, path):
    make, check = INITIALIZERS[name]
    table = (_column_table if path == "column" else _midlevel_table)(make())
    assert table.shape == (V, D) and table.dtype == np.float32
    assert check(table), f"{name}: std {np.std(table)}, min {table.min()}, max {table.max()}"


def test_a_seedless_tensorflow_initializer_takes_the_engines_seed():
    """A seeded engine builds the same tables on every run, seedless TensorFlow initializers included."""
    first = _column_table(tf.random_normal_initializer(0.0, 0.01))
    again = _column_table(tf.random_normal_initializer(0.0, 0.01))
    np.testing.assert_array_equal(first, again)


def test_the_projects_default_initializer_is_callable_by_tensorflow():
    """TFRS clones a TableConfig into TensorFlow's own class, which calls `initializer(shape, dtype=tf.float32)`."""
    config = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=V, dim=D, name="t")
    values = config.initializer(real_tf.TensorShape([V, D]), dtype=real_tf.float32)
    assert values.shape == (V, D) and values.dtype == np.float32
    E = real_tf.tpu.experimental.embedding
    theirs = E.TableConfig(vocabulary_size=V, dim=D, initializer=config.initializer, name="t")
    serving = E.TPUEmbeddingForServing({"f": E.FeatureConfig(table=theirs)}, E.SGD(0.1))
    serving.build()
    variable = serving.embedding_tables[theirs]
    assert isinstance(variable, real_tf.Variable) and variable.shape == (V, D)
    assert 0.5 / np.sqrt(D) < float(np.std(variable.numpy())) < 1.0 / np.sqrt(D)  # truncated normal, 1/sqrt(D)


@pytest.mark.skipif(
    getattr(real_tf.keras, "__version__", "").startswith("3."),  # tf_keras has no __version__ there
    reason="TensorFlow 2.21 with Keras 3 has no tf.compat.v1.layers (TensorFlow's own AttributeError: `dense` is not "
    "available with Keras 3); CI runs this test again with TF_USE_LEGACY_KERAS=1 (tf_keras)",
)
@pytest.mark.parametrize("form", ["one import changed", "unchanged, in the drop-in mode"])
def test_a_tensorflow_1_program_trains_evaluates_predicts_and_exports_in_graph_mode(tmp_path, form):
    """tf1_program.py as written (`import tpu_embedding_shim.tensorflow as tf`), and with TensorFlow's own import
    run by `python -m tpu_embedding_shim.tensorflow`: on TensorFlow 2.16+ too, where the mode adds tf.estimator."""
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    program, command = HERE / "tf1_program.py", []
    if form.startswith("unchanged"):
        source = program.read_text()
        one_import = "\nimport tpu_embedding_shim.tensorflow as tf\n"
        assert one_import in source
        program = tmp_path / "tf1_program.py"
        program.write_text(source.replace(one_import, "\nimport tensorflow as tf\n"))
        command = ["-m", "tpu_embedding_shim.tensorflow"]
    job = subprocess.run(
        [sys.executable, *command, str(program), str(tmp_path / "model"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert job.returncode == 0, job.stderr[-4000:]
    record = json.loads(out.read_text())
    assert record["executing_eagerly"] is False  # the program ran in TensorFlow 1's graph mode
    assert [e["global_step"] for e in record["evaluations"]] == [4, 8]
    for evaluation in record["evaluations"]:
        assert set(evaluation) == {"recall_at_1", "auc", "loss", "global_step"}
        assert 0.0 <= evaluation["recall_at_1"] <= 1.0 and np.isfinite(evaluation["loss"])
    assert record["engine_step"] == 8 and record["tables_moved"] == {"tbl_user": True, "tbl_items": True}
    assert record["predictions"] == [[8, 1]] * 8  # 64 examples in batches of 8
    assert record["num_shards"] == 1  # TPUConfig(num_shards=None) in one process
    # The SavedModel serves serialized examples.
    example = real_tf.train.Example(
        features=real_tf.train.Features(
            feature={
                "user": real_tf.train.Feature(int64_list=real_tf.train.Int64List(value=[3])),
                "items": real_tf.train.Feature(int64_list=real_tf.train.Int64List(value=[1, 2])),
            }
        )
    )
    served = real_tf.saved_model.load(record["export"]).signatures["serving_default"]
    logits = served(examples=real_tf.constant([example.SerializeToString()]))["logits"]
    assert logits.shape == (1, 1) and np.isfinite(logits.numpy()).all()
