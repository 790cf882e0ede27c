"""The numpy namespace's modules (`tf`, `tf.nn`, `tf.compat.v1`, ...): a TensorFlow name they lack points to the bridge.

`import tpu_embedding_shim as tf` holds TensorFlow's TPU-embedding API for
numpy and PyTorch model_fns, not TensorFlow's ops. A program that asks it
for `tf.concat`, `tf.data` or `tf.compat.v1.layers` is a TensorFlow program:
the AttributeError names what it asked for, as it wrote it, and says to
use `import tpu_embedding_shim.tensorflow as tf` (real TensorFlow with this
project's TPU-embedding names). It stays an AttributeError, so `hasattr`
and `getattr(module, name, default)` work as before.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

PACKAGE = "tpu_embedding_shim"

# Module name prefix -> the path a program writes. compat/v2 is also TensorFlow 2's top level (`tf.nn`).
_TF_PATHS = (
    (f"{PACKAGE}.compat.v2", "tf"),
    (f"{PACKAGE}.compat", "tf.compat"),
    (PACKAGE, "tf"),
)


def tf_path(module_name: str) -> str:
    """The name a program writes for a namespace module: `tf.compat.v1.train` for
    `tpu_embedding_shim.compat.v1.train`, `tf.nn` for `tpu_embedding_shim.compat.v2.nn`.

    >>> tf_path("tpu_embedding_shim.compat.v1.train"), tf_path("tpu_embedding_shim.compat.v2.nn")
    ('tf.compat.v1.train', 'tf.nn')
    """
    for prefix, path in _TF_PATHS:
        if module_name == prefix or module_name.startswith(prefix + "."):
            return path + module_name[len(prefix) :]
    raise ValueError(f"Argument `module_name` must be a module of {PACKAGE}. Received: {module_name!r}")


def missing_name_error(path: str) -> AttributeError:
    """The error for `path` (`tf.compat.v1.logging`), a name the numpy namespace does not have."""
    namespace, _, name = path.rpartition(".")
    return AttributeError(
        f"module {namespace!r} has no attribute {name!r}: this numpy namespace (`import tpu_embedding_shim as tf`) "
        f"has no TensorFlow op `{path}`. It holds TensorFlow's TPU-embedding API (feature columns, "
        "EmbeddingConfigSpec, TPUEstimator, the mid-level API) for numpy and PyTorch model_fns. A model_fn written "
        "in TensorFlow wants the bridge, `import tpu_embedding_shim.tensorflow as tf`: real TensorFlow with this "
        "project's TPU-embedding names (docs/tensorflow_bridge.md)."
    )


def missing_names(module_name: str) -> Callable[[str], Any]:
    """The `__getattr__` (PEP 562) of the namespace module `module_name`: a missing public name raises
    `missing_name_error` with the path the program wrote. Each namespace module sets it as its `__getattr__`."""

    def missing(name: str) -> Any:
        if name.startswith("_"):  # Python's and tools' own probes (`__wrapped__`, `_pytestfixturefunction`)
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        raise missing_name_error(f"{tf_path(module_name)}.{name}")

    return missing


def alias(module: types.ModuleType, name: str) -> types.ModuleType:
    """`module`'s names (the same objects; its sub-namespaces aliased too) as the namespace module `name`.

    TensorFlow has the same names at two paths (`tf.train` and
    `tf.compat.v1.train`): each path gets its own module, so that a name
    missing from it is reported at the path the program wrote. Registered in
    `sys.modules`, so `from <name> import ...` works.
    """
    copy = types.ModuleType(name, module.__doc__)
    for key, value in vars(module).items():
        if key.startswith("__"):
            continue
        if isinstance(value, types.ModuleType) and value.__name__.startswith(module.__name__ + "."):
            value = alias(value, name + value.__name__[len(module.__name__) :])
        copy.__dict__[key] = value
    copy.__dict__["__getattr__"] = missing_names(name)
    sys.modules[name] = copy
    return copy
