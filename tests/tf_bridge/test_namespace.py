"""`import tpu_embedding_shim.tensorflow as tf`: TensorFlow's names pass through, the override table's are ours.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge -q
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow

import tpu_embedding_shim as shim
import tpu_embedding_shim.tensorflow as tf
from tpu_embedding_shim.tensorflow._namespace import Namespace
from tpu_embedding_shim.tensorflow._overrides import OVERRIDES

from .tf_versions import HAS_ESTIMATOR, KERAS_3


def resolve(root, path):
    value = root
    for part in path.split("."):
        value = getattr(value, part)
    return value


def parents(path):
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


NAMESPACES = sorted({parent for path in OVERRIDES for parent in parents(path)})
ESTIMATOR_NAMESPACES = [p for p in NAMESPACES if p.startswith(("estimator", "compat.v1.estimator"))]
# The overridden namespaces this venv's TensorFlow has no module for: the proxy then holds only the project's names.
MISSING = (
    {"estimator.tpu", "estimator.tpu.experimental"}  # TensorFlow's v2 tf.estimator has no tpu
    | (set() if HAS_ESTIMATOR else set(ESTIMATOR_NAMESPACES))
    | ({"keras.experimental", "compat.v1.keras.experimental"} if KERAS_3 else set())
)


@pytest.mark.parametrize("path", sorted(OVERRIDES))
def test_every_name_of_the_table_resolves_through_the_proxy(path):
    assert resolve(tf, path) is OVERRIDES[path]


def test_the_table_holds_the_projects_tpu_embedding_names():
    assert OVERRIDES["tpu.experimental.embedding.TableConfig"] is shim.tpu.experimental.embedding.TableConfig
    assert OVERRIDES["compat.v1.estimator.tpu.TPUEstimator"] is shim.compat.v1.estimator.tpu.TPUEstimator
    # The v1 spec and parameter classes are the project's, also taking TensorFlow's own v1 configs (_v1_configs.py).
    spec = OVERRIDES["compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec"]
    assert issubclass(spec, shim.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec)
    assert issubclass(
        OVERRIDES["compat.v1.tpu.experimental.AdagradParameters"], shim.compat.v1.tpu.experimental.AdagradParameters
    )
    assert OVERRIDES["compat.v1.tpu.experimental.embedding_column"] is shim.compat.v1.tpu.experimental.embedding_column
    assert OVERRIDES["keras.layers.DenseFeatures"] is shim.keras.layers.DenseFeatures
    assert OVERRIDES["compat.v1.feature_column.input_layer"].__wrapped__ is shim.compat.v1.feature_column.input_layer
    assert OVERRIDES["estimator.ModeKeys"] is shim.estimator.ModeKeys
    assert OVERRIDES["estimator.WarmStartSettings"] is shim.estimator.WarmStartSettings
    # TensorFlow's dense columns, exporters, tensors, lookups and checkpoints are not in it.
    for path in (
        "feature_column.numeric_column",
        "feature_column.bucketized_column",
        "feature_column.indicator_column",
        "estimator.LatestExporter",
        "estimator.BestExporter",
        "SparseTensor",
        "RaggedTensor",
        "constant",
        "nn.embedding_lookup",
        "train.Checkpoint",
        "compat.v1.metrics.auc",
        "function",
    ):
        assert path not in OVERRIDES


@pytest.mark.parametrize("path", NAMESPACES)
def test_every_other_name_of_an_overridden_namespace_is_tensorflows_own(path):
    proxy = resolve(tf, path)
    assert isinstance(proxy, Namespace)
    own = {p.rsplit(".", 1)[1] for p in OVERRIDES if p.rsplit(".", 1)[0] == path}
    own |= {n.split(".")[len(path.split("."))] for n in NAMESPACES if n.startswith(path + ".")}
    try:
        real = resolve(tensorflow, path)
        dir(real)  # a lazy loader (tf.estimator on TensorFlow 2.15) imports its package now
    except (AttributeError, ImportError):
        assert path in MISSING
        assert set(dir(proxy)) == own  # the project's names only, and no other
        with pytest.raises(AttributeError, match=f"module 'tensorflow.{path}' has no attribute 'LatestExporter'"):
            proxy.LatestExporter
        return
    assert path not in MISSING
    for name in sorted(n for n in dir(real) if not n.startswith("_") and n not in own):
        assert getattr(proxy, name) is getattr(real, name), f"tf.{path}.{name}"
    assert set(dir(proxy)) >= {n for n in dir(real) if not n.startswith("_")}


def test_top_level_names_are_tensorflows():
    assert tf.constant is tensorflow.constant and tf.__version__ == tensorflow.__version__
    for name in (
        "Tensor",
        "SparseTensor",
        "RaggedTensor",
        "GradientTape",
        "function",
        "range",
        "data",
        "nn",
        "train",
        "ragged",
        "math",
        "float32",
        "string",
        "Variable",
        "py_function",
        "saved_model",
        "sparse",
        "io",
    ):
        assert getattr(tf, name) is getattr(tensorflow, name), name
    assert set(dir(tf)) >= {n for n in dir(tensorflow) if not n.startswith("_")}
    assert tf.compat.v1.layers is tensorflow.compat.v1.layers  # (Keras 3 refuses to give its `dense`)
    assert tf.compat.v1.metrics.auc is tensorflow.compat.v1.metrics.auc
    assert tf.compat.v2 is tensorflow.compat.v2  # TensorFlow's own, untouched (docs/tensorflow_bridge.md)


def test_missing_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no_such_name"):
        tf.no_such_name
    with pytest.raises(AttributeError, match=r"module 'tensorflow.feature_column' has no attribute 'no_such_column'"):
        tf.feature_column.no_such_column
    why = (
        f"TensorFlow {tensorflow.__version__} has no tf.estimator.tpu"
        if HAS_ESTIMATOR
        else f"TensorFlow {tensorflow.__version__} has no tf.estimator (TensorFlow 2.16 removed it)"
        if tensorflow.__version__ >= "2.16"
        else f"TensorFlow {tensorflow.__version__} has no tf.estimator without tensorflow-estimator, which is not "
        "installed"
    )
    with pytest.raises(AttributeError) as error:
        tf.estimator.tpu.Foo
    assert str(error.value) == (
        f"module 'tensorflow.estimator.tpu' has no attribute 'Foo': {why}; this project's "
        "names there are ['InputPipelineConfig', 'RunConfig', 'TPUConfig', 'TPUEstimator', "
        "'TPUEstimatorSpec', 'experimental']."
    )


def test_from_imports_of_overridden_namespaces_work():
    from tpu_embedding_shim.tensorflow.keras import layers
    from tpu_embedding_shim.tensorflow.tpu.experimental.embedding import TableConfig, TPUEmbedding  # noqa: F401

    assert layers.Dense is tensorflow.keras.layers.Dense and layers.DenseFeatures is shim.keras.layers.DenseFeatures
    assert TableConfig is shim.tpu.experimental.embedding.TableConfig


def test_columns_take_tensorflow_dtypes():
    ours = tf.feature_column.categorical_column_with_vocabulary_list("a", ["x", "y"], dtype=tf.string)
    plain = shim.feature_column.categorical_column_with_vocabulary_list("a", ["x", "y"], dtype=shim.string)
    assert ours == plain
    weighted = tf.compat.v1.feature_column.weighted_categorical_column(
        tf.feature_column.categorical_column_with_identity("a", 4), "w", tf.float32
    )
    assert weighted == shim.feature_column.weighted_categorical_column(
        shim.feature_column.categorical_column_with_identity("a", 4), "w", shim.float32
    )
    assert (
        tf.feature_column.categorical_column_with_identity.__doc__
        == shim.feature_column.categorical_column_with_identity.__doc__
    )


TENSORFLOW_UNCHANGED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow

    namespaces = json.loads(sys.argv[1])

    def resolve(path):
        value = tensorflow
        for part in path.split(".") if path else []:
            value = getattr(value, part)
        return value

    def snapshot():
        out = {}
        for path in namespaces:
            try:
                module = resolve(path)
                dir(module)
            except (AttributeError, ImportError):  # not in this TensorFlow (tf.estimator without its package)
                continue
            out[path] = {name: getattr(module, name) for name in dir(module) if not name.startswith("__")}
        return out

    snapshot()  # loads TensorFlow's lazily loaded modules (tf.keras, tf.estimator...), which replace their loaders
    before = snapshot()
    modules_before = dict(sys.modules)

    import tpu_embedding_shim.tensorflow as tf
    E = tf.tpu.experimental.embedding
    table = E.TableConfig(vocabulary_size=4, dim=2)
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.SGD(0.1))

    @tf.function
    def step():
        embedding.enqueue({"f": tf.constant([1, 2])})
        activations = embedding.dequeue()
        embedding.apply_gradients({"f": tf.ones_like(activations["f"])})

    step()
    tf.feature_column.categorical_column_with_identity("a", 3)
    strategy = tf.distribute.TPUStrategy()
    with strategy.scope():
        tf.distribute.get_strategy()

    after = snapshot()
    changed = sorted(f"{path}.{name}" for path in before for name in set(before[path]) | set(after[path])
                     if before[path].get(name, None) is not after[path].get(name, None))
    replaced = sorted(name for name, module in modules_before.items()
                      if name.startswith("tensorflow") and sys.modules.get(name) is not module)
    ours = sorted(name for name, module in sys.modules.items()
                  if name.startswith("tensorflow") and type(module).__module__.startswith("tpu_embedding_shim"))
    print(json.dumps({"changed": changed, "replaced": replaced, "ours": ours,
                      "TPUEmbedding": tensorflow.tpu.experimental.embedding.TPUEmbedding.__module__,
                      "has_strategy": bool(tensorflow.distribute.has_strategy())}))
""")


def test_tensorflow_itself_is_unchanged_by_importing_and_using_the_bridge():
    namespaces = [""] + NAMESPACES
    result = subprocess.run(
        [sys.executable, "-c", TENSORFLOW_UNCHANGED, json.dumps(namespaces)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {
        "changed": [],
        "replaced": [],
        "ours": [],
        "TPUEmbedding": "tensorflow.python.tpu.tpu_embedding_v2",
        "has_strategy": False,
    }


def test_the_proxy_reads_tensorflow_when_asked_no_copy():
    namespace = tf.feature_column
    assert "numeric_column" not in vars(namespace)  # not copied: looked up on TensorFlow's module each time
    assert namespace.numeric_column is tensorflow.feature_column.numeric_column
    assert np.array_equal(tf.constant([1, 2]).numpy(), [1, 2])
