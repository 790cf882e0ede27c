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

The drop-in mode runs a program with no change at all: `python -m
tpu_embedding_shim.tensorflow program.py`, or `activate()` / `deactivate()` /
`with activated():` (`%load_ext tpu_embedding_shim.tensorflow` in a
notebook). While it is on, TensorFlow's own TPU names are the same objects,
for every importer (`_mode.py`, docs/run_unchanged.md).

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
from ._mode import activate, activated, active, deactivate, replaced_names  # noqa: F401 (the mode's API)

globals().update(_namespace.build(_overrides.OVERRIDES))

ACTIVE_MESSAGE = (
    "tpu_embedding_shim: TensorFlow's TPU-embedding names run on the CPU engine ({count} names replaced; "
    "docs/run_unchanged.md)."
)


def load_ipython_extension(ipython):
    """`%load_ext tpu_embedding_shim.tensorflow`: the drop-in mode on for the notebook (`activate()`)."""
    activate()
    print(ACTIVE_MESSAGE.format(count=len(replaced_names())), file=_sys.stderr)


def unload_ipython_extension(ipython):
    """`%unload_ext tpu_embedding_shim.tensorflow`: TensorFlow's own names again (`deactivate()`)."""
    deactivate()


def __getattr__(name):
    """TensorFlow's own attribute: every name this module does not override."""
    return getattr(_tensorflow, name)


def __dir__():
    return sorted(set(dir(_tensorflow)) | {name for name in globals() if not name.startswith("_")})
