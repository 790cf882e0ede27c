"""`tf.initializers` / `tf.keras.initializers` in the numpy namespace: Keras' classes with TensorFlow 2's arguments.

The generated tf-midlevel `model.py` names its tables' initializers as
`tf.initializers.TruncatedNormal(...)` & co; with its one import changed
to `import tpu_embedding_shim as tf` (as docs/migrate.md says) it runs here,
and each table is built with the initializer of the source spec.
"""

from __future__ import annotations

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.migrate import to_tf_midlevel
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec
from tpu_embedding_shim.spec import initializers as spec_initializers

KERAS_NAMES = ["TruncatedNormal", "RandomNormal", "RandomUniform", "Constant", "Zeros", "Ones"]


@pytest.mark.parametrize("namespace", ["initializers", "keras.initializers", "compat.v1.keras.initializers"])
def test_the_keras_initializers_have_tensorflows_defaults(namespace):
    module = tf
    for part in namespace.split("."):
        module = getattr(module, part)
    assert module.TruncatedNormal() == spec_initializers.TruncatedNormal(0.0, 0.05, None)
    assert module.RandomNormal() == spec_initializers.RandomNormal(0.0, 0.05, None)
    assert module.RandomUniform() == spec_initializers.RandomUniform(-0.05, 0.05, None)
    assert module.TruncatedNormal(mean=1.0, stddev=0.5, seed=3) == spec_initializers.TruncatedNormal(1.0, 0.5, 3)
    assert module.RandomUniform(minval=0.0, maxval=2.0, seed=1) == spec_initializers.RandomUniform(0.0, 2.0, 1)
    assert module.Constant(value=2.5)((2, 3)).tolist() == [[2.5] * 3] * 2
    assert module.Constant()((1,)).tolist() == [0.0]
    assert module.Zeros()((2,)).tolist() == [0.0, 0.0] and module.Ones()((2,)).tolist() == [1.0, 1.0]
    assert module.zeros is module.Zeros and module.truncated_normal is module.TruncatedNormal


def test_a_keras_initializer_draws_its_distribution():
    values = tf.initializers.TruncatedNormal(mean=1.0, stddev=0.1, seed=0)((400, 5))
    assert values.dtype == np.float32 and values.shape == (400, 5)
    assert np.all(np.abs(values - 1.0) <= 0.2) and abs(values.mean() - 1.0) < 0.01
    uniform = tf.keras.initializers.RandomUniform(minval=2.0, maxval=3.0, seed=0)((1000,))
    assert uniform.min() >= 2.0 and uniform.max() < 3.0


def test_a_bad_argument_names_itself():
    with pytest.raises(ValueError, match="stddev"):
        tf.initializers.TruncatedNormal(stddev=-1.0)


SOURCE_INITIALIZERS = {
    "tn": spec_initializers.TruncatedNormal(0.0, 0.3),
    "rn": spec_initializers.RandomNormal(0.1, 0.2),
    "ru": spec_initializers.RandomUniform(-0.5, 0.5),
    "z": spec_initializers.Zeros(),
    "o": spec_initializers.Ones(),
}


def _migrated_model(directory):
    """tf-midlevel's model.py of a spec with one table per initializer, run with `import tpu_embedding_shim as tf`."""
    tables = tuple(TableSpec(name=n, vocabulary_size=10, dim=4, initializer=i) for n, i in SOURCE_INITIALIZERS.items())
    features = tuple(FeatureSpec(name=f"f_{n}", table=n, num_buckets=10) for n in SOURCE_INITIALIZERS)
    spec = EmbeddingSpec(tables=tables, features=features, optimizer=AdagradSpec(learning_rate=0.1))
    migration = to_tf_midlevel(spec, seed=4)
    migration.write(directory)
    code = (directory / "model.py").read_text()
    assert "import tensorflow as tf\n" in code and "tf.initializers.RandomUniform(minval=-0.5, maxval=0.5)" in code
    namespace = {"__file__": str(directory / "model.py"), "__name__": "migrated_model"}
    exec(
        compile(code.replace("import tensorflow as tf\n", "import tpu_embedding_shim as tf\n"), "model.py", "exec"),
        namespace,
    )
    return migration, namespace


def test_a_migrated_tf_midlevel_model_runs_in_the_numpy_namespace(tmp_path):
    migration, model = _migrated_model(tmp_path)
    for name, initializer in SOURCE_INITIALIZERS.items():
        assert model["FEATURE_CONFIG"][f"f_{name}"].table.initializer == initializer, name
    embedding = model["tpu_embedding"]()  # built and restored from the migration's checkpoint
    tables = {table.name: np.asarray(variables["parameters"]) for table, variables in embedding.variables.items()}
    for name in SOURCE_INITIALIZERS:
        np.testing.assert_array_equal(tables[name], migration.weights[f"embedding/{name}/.ATTRIBUTES/VARIABLE_VALUE"])
    assert tables["z"].tolist() == [[0.0] * 4] * 10 and tables["o"].tolist() == [[1.0] * 4] * 10
    embedding.enqueue({f"f_{n}": tf.ragged.constant([[1, 2], [3]]) for n in SOURCE_INITIALIZERS}, training=False)
    activations = embedding.dequeue()
    np.testing.assert_allclose(activations["f_o"], np.ones((2, 4)))
    np.testing.assert_allclose(activations["f_ru"][1], tables["ru"][3])
