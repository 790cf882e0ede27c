"""TensorFlow's TPU-embedding API on a CPU, with numpy.

`import tpu_embedding_shim as tf` (the numpy namespace) has TensorFlow's TPU-embedding names:
`tf.feature_column.*`, `tf.tpu.experimental.*`, `tf.estimator.tpu.experimental.*`,
`tf.nn.embedding_lookup*`, `tf.initializers.*`, their `tf.compat.v1.*` paths, `tf.SparseTensor`,
`tf.RaggedTensor`; for numpy and PyTorch model_fns. It has no TensorFlow ops: a model_fn written in
TensorFlow wants `import tpu_embedding_shim.tensorflow as tf` (docs/tensorflow_bridge.md).

>>> import tpu_embedding_shim as tf
>>> column = tf.feature_column.categorical_column_with_identity("movie", 1682)
>>> tf.tpu.experimental.embedding_column(column, 16).name
'movie_embedding'
"""

__version__ = "0.1.0"

import importlib
from typing import Any

# The TF-shaped names (TensorFlow's `tf.<name>`), read from compat/v2 at first use, so that importing a lower
# layer (`tpu_embedding_shim.spec`, `tpu_embedding_shim.engine`) does not load the namespaces (PEP 562).
_V2_NAMES = frozenset(
    [
        "keras",
        "config",
        "distribute",
        "function",
        "initializers",
        "nn",
        "range",
        "train",
        "RaggedTensor",
        "SparseTensor",
        "constant_initializer",
        "estimator",
        "feature_column",
        "float32",
        "float64",
        "int32",
        "int64",
        "ones_initializer",
        "ragged",
        "random_normal_initializer",
        "random_uniform_initializer",
        "string",
        "tpu",
        "zeros_initializer",
    ]
)
_SUBPACKAGES = frozenset({"compat", "spec", "engine"})


def __dir__() -> list[str]:
    return sorted(set(globals()) | _V2_NAMES | _SUBPACKAGES)


def __getattr__(name: str) -> Any:
    """A TF-shaped name or a subpackage, imported at first use; another TensorFlow name (`tf.concat`,
    `tf.GradientTape`) is an AttributeError that says what to use instead."""
    if name in _V2_NAMES:
        value = getattr(importlib.import_module(".compat.v2", __name__), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    if name == "GradientTape":
        raise AttributeError(
            "module 'tpu_embedding_shim' has no attribute 'GradientTape': this numpy package has no automatic "
            "differentiation. Compute d loss / d activations yourself (numpy by hand, JAX or PyTorch) and pass them "
            "to apply_gradients; docs/mid_level_api.md ('The training loop of TensorFlow's page') shows TensorFlow's "
            "tf.GradientTape loop in numpy. With TensorFlow installed, `import tpu_embedding_shim.tensorflow as tf` "
            "runs the loop as written (docs/tensorflow_bridge.md)."
        )
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .compat import namespaces  # a TensorFlow name this numpy namespace lacks: point to the bridge

    raise namespaces.missing_name_error(f"tf.{name}")
