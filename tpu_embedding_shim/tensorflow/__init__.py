"""`import tpu_embedding_shim.tensorflow as tf`: your TensorFlow, with the TPU-embedding names of this project.

Every attribute is the installed TensorFlow's own (`tf.constant is
tensorflow.constant`), read from the real modules when asked for, except the
TPU-embedding names, which are this project's (the table in
`_overrides.py`): the categorical feature columns, TPU `embedding_column` /
`shared_embedding_columns`, the optimizer parameter classes, TPUEstimator and
its configuration, the feature layers, the mid-level
`tf.tpu.experimental.embedding` API (over TensorFlow tensors), the
TPUStrategy stand-in and `CrossShardOptimizer`. TensorFlow keeps the dense
part of the program; the CPU engine holds and trains the embedding tables.
TensorFlow itself is not changed. See docs/tensorflow_bridge.md.

Needs TensorFlow: on Python < 3.12 `pip install tensorflow-cpu==2.15.1
tensorflow-estimator==2.15.0` (the `tensorflow` extra); on Python 3.12 and
later, where TensorFlow 2.15 has no wheels, `pip install
tensorflow-cpu==2.21.0 tf-keras==2.21.0` (the `tensorflow-latest` extra).
TensorFlow 2.15.1 without tensorflow-estimator is covered too
(docs/tensorflow_bridge.md, "Which TensorFlow").
The core (spec, engine, compat) never imports TensorFlow, and nothing
imports this module.
"""

import sys as _sys

try:
    import tensorflow as _tensorflow
except ImportError as _error:
    if _sys.version_info >= (3, 12):
        _install = (
            f"TensorFlow 2.15 has no wheels for Python {_sys.version_info[0]}.{_sys.version_info[1]}: "
            "pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 (the `tensorflow-latest` extra; "
            "in the project's checkout: pip install -e '.[tensorflow-latest]')"
        )
    else:
        _install = (
            "pip install tensorflow-cpu==2.15.1 tensorflow-estimator==2.15.0 (the `tensorflow` extra; "
            "in the project's checkout: pip install -e '.[tensorflow]')"
        )
    raise ImportError(
        f"tpu_embedding_shim.tensorflow needs TensorFlow, which is not installed (or failed to import: {_error}). "
        f"Install it: {_install}. Without TensorFlow, `import tpu_embedding_shim as tf` gives the numpy API for "
        "numpy and PyTorch model_fns (docs/migration.md)."
    ) from _error

from . import _namespace, _overrides

globals().update(_namespace.build(_overrides.OVERRIDES))


def __getattr__(name):
    """TensorFlow's own attribute: every name this module does not override."""
    return getattr(_tensorflow, name)


def __dir__():
    return sorted(set(dir(_tensorflow)) | {name for name in globals() if not name.startswith("_")})
