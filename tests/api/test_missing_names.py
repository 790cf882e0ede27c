"""TensorFlow names the numpy namespace lacks: an AttributeError that names them as written and points to the bridge.

A legacy program whose model_fn is TensorFlow reaches for `tf.concat`,
`tf.data`, `tf.compat.v1.logging`, ... under `import tpu_embedding_shim as
tf`. Each such name, in every namespace, is an AttributeError (so
`hasattr` / `getattr(default)` keep working) whose message says the full
name the program wrote, that this numpy namespace has no such TensorFlow
op, and where to go: `import tpu_embedding_shim.tensorflow as tf`,
docs/tensorflow_bridge.md. The names the namespaces have are unchanged.
"""

from __future__ import annotations

import functools
import re
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf

# TensorFlow names (all real ones) that the numpy namespace does not have, by the path a program writes.
MISSING = {
    "tf": [
        "concat",
        "data",
        "constant",
        "Variable",
        "matmul",
        "reduce_sum",
        "reshape",
        "cast",
        "logging",
        "layers",
        "losses",
        "metrics",
        "summary",
        "io",
        "math",
        "random",
        "sparse",
        "saved_model",
        "Session",
        "placeholder",
        "expand_dims",
        "zeros",
        "ones",
        "squeeze",
        "Tensor",
        "TensorShape",
        "Module",
    ],
    "tf.compat": ["as_bytes", "as_str", "forward_compatible", "dimension_value"],
    "tf.compat.v1": [
        "logging",
        "layers",
        "Session",
        "placeholder",
        "losses",
        "get_variable",
        "variable_scope",
        "summary",
        "data",
        "global_variables_initializer",
        "concat",
        "to_float",
        "metrics_not_here",
        "sparse_tensor_to_dense",
    ],
    "tf.compat.v1.train": ["AdamOptimizer", "GradientDescentOptimizer", "get_or_create_global_step", "Saver"],
    "tf.compat.v1.nn": ["relu", "sigmoid_cross_entropy_with_logits", "dropout", "softmax"],
    "tf.compat.v1.keras": ["Model", "layers_not_here", "optimizers", "backend"],
    "tf.compat.v1.keras.layers": ["Dense", "Embedding", "Concatenate"],
    "tf.compat.v1.estimator": ["Estimator", "LinearClassifier", "export", "TrainSpec"],
    "tf.compat.v1.estimator.tpu": ["TPUEstimatorPlaceholder"],
    "tf.compat.v1.estimator.tpu.experimental": ["EmbeddingConfigSpecV2"],
    "tf.compat.v1.tpu": ["rewrite", "shard", "replicate", "bfloat16_scope"],
    "tf.compat.v1.tpu.experimental": ["DeviceAssignment", "HardwareFeature"],
    "tf.compat.v1.tpu.experimental.embedding": ["TPUEmbeddingV0"],
    "tf.compat.v1.feature_column": ["indicator_column", "make_parse_example_spec", "linear_model"],
    "tf.compat.v1.distribute": ["MirroredStrategy", "OneDeviceStrategy"],
    "tf.compat.v1.config": ["set_visible_devices", "optimizer"],
    "tf.nn": ["relu", "sigmoid", "softmax", "sigmoid_cross_entropy_with_logits", "dropout", "l2_loss"],
    "tf.train": ["AdamOptimizer", "Example", "Features", "get_global_step", "Saver", "ExponentialMovingAverage"],
    "tf.keras": ["Model", "Sequential", "optimizers", "losses", "Input", "backend", "regularizers"],
    "tf.keras.layers": ["Dense", "Embedding", "Concatenate", "BatchNormalization"],
    "tf.keras.experimental": ["LinearModel", "CosineDecay"],
    "tf.keras.initializers": ["HeNormal", "GlorotUniform", "LecunNormal", "get"],
    "tf.initializers": ["HeNormal", "GlorotUniform", "Orthogonal"],
    "tf.estimator": ["Estimator", "LinearClassifier", "export", "TrainSpec", "train_and_evaluate"],
    "tf.estimator.tpu": ["TPUEstimatorPlaceholder"],
    "tf.estimator.tpu.experimental": ["EmbeddingConfigSpecV2"],
    "tf.feature_column": ["indicator_column", "make_parse_example_spec", "shared_embeddings"],
    "tf.tpu": ["XLAOptions", "replicate"],
    "tf.tpu.experimental": ["DeviceAssignment", "HardwareFeature"],
    "tf.tpu.experimental.embedding": ["TPUEmbeddingV0", "RowIdInitializerV2"],
    "tf.distribute": ["MirroredStrategy", "MultiWorkerMirroredStrategy", "OneDeviceStrategy"],
    "tf.distribute.experimental": ["MultiWorkerMirroredStrategy", "CentralStorageStrategy"],
    "tf.distribute.cluster_resolver": ["SimpleClusterResolver", "KubernetesClusterResolver"],
    "tf.config": ["set_visible_devices", "optimizer", "threading"],
    "tf.ragged": ["stack", "boolean_mask", "range"],
}
CASES = [(path, name) for path, names in MISSING.items() for name in names]


def resolve(path: str):
    """The module a program reaches at `path` (`tf.compat.v1.train`) through `tf`."""
    return functools.reduce(getattr, path.split(".")[1:], tf)


def assert_points_to_the_bridge(message: str, path: str, name: str) -> None:
    assert message.startswith(f"module {path!r} has no attribute {name!r}: "), message
    assert f"this numpy namespace (`import tpu_embedding_shim as tf`) has no TensorFlow op `{path}.{name}`" in message
    assert "`import tpu_embedding_shim.tensorflow as tf`" in message and "docs/tensorflow_bridge.md" in message


@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{p}.{n}" for p, n in CASES])
def test_a_missing_tensorflow_name_is_an_attribute_error_that_names_it_and_the_bridge(path, name):
    module = resolve(path)
    assert not hasattr(module, name)
    sentinel = object()
    assert getattr(module, name, sentinel) is sentinel
    with pytest.raises(AttributeError) as error:
        getattr(module, name)
    assert_points_to_the_bridge(str(error.value), path, name)


def test_the_programs_spelling_of_a_name_is_kept_through_every_path():
    """tf.compat.v1.train.X is reported as tf.compat.v1.train (not tf.train), tf.train.X as tf.train."""
    with pytest.raises(AttributeError, match=re.escape("module 'tf.compat.v1.train' has no attribute 'Saver'")):
        tf.compat.v1.train.Saver
    with pytest.raises(AttributeError, match=re.escape("module 'tf.train' has no attribute 'Saver'")):
        tf.train.Saver
    with pytest.raises(AttributeError, match=re.escape("module 'tf.compat.v1.keras.initializers' has no attribute")):
        tf.compat.v1.keras.initializers.HeNormal


NAMESPACES = sorted(MISSING)
# TF1 paths that hold TensorFlow 2's names: their own modules, the same objects.
SAME_NAMES = [
    "train",
    "config",
    "keras",
    "keras.layers",
    "keras.experimental",
    "keras.initializers",
    "distribute",
    "distribute.experimental",
    "distribute.cluster_resolver",
    "tpu.experimental.embedding",
    "estimator.tpu.experimental",
]


@pytest.mark.parametrize("path", NAMESPACES)
def test_the_names_a_namespace_has_read_as_they_are(path):
    module = resolve(path)
    names = [n for n in vars(module) if not n.startswith("_")]
    assert names, path
    for name in names:
        assert getattr(module, name) is vars(module)[name]
        assert hasattr(module, name) and name in dir(module)


@pytest.mark.parametrize("path", SAME_NAMES)
def test_a_tf1_path_has_the_objects_of_the_tf2_path(path):
    v1, v2 = resolve(f"tf.compat.v1.{path}"), resolve(f"tf.{path}")
    assert v1 is not v2 and v1.__name__ == f"tpu_embedding_shim.compat.v1.{path}"
    public = sorted(n for n in vars(v2) if not n.startswith("_"))
    assert sorted(n for n in vars(v1) if not n.startswith("_")) == public
    for name in public:
        if not isinstance(getattr(v2, name), types.ModuleType):
            assert getattr(v1, name) is getattr(v2, name), name
    assert sys.modules[v1.__name__] is v1  # `from tpu_embedding_shim.compat.v1.train import Checkpoint` works


def test_tools_probing_private_names_get_a_plain_attribute_error():
    for module in (tf, tf.compat, tf.nn, tf.compat.v1.train):
        with pytest.raises(AttributeError) as error:
            module.__wrapped__
        assert "tensorflow" not in str(error.value)


def test_gradient_tape_keeps_its_own_explanation():
    with pytest.raises(AttributeError, match="this numpy package has no automatic differentiation"):
        tf.GradientTape


@settings(max_examples=60, deadline=None)
@given(path=st.sampled_from(NAMESPACES), name=st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}", fullmatch=True))
def test_any_name_a_namespace_lacks_points_to_the_bridge(path, name):
    module = resolve(path)
    if name in dir(module) or (path == "tf" and name == "GradientTape"):
        return
    with pytest.raises(AttributeError) as error:
        getattr(module, name)
    assert_points_to_the_bridge(str(error.value), path, name)
