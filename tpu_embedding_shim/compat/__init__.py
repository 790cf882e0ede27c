"""TensorFlow-shaped API. `tpu_embedding_shim.compat` is also TensorFlow's `tf.compat`.

The implementation lives in the modules of this package (one idea each);
`v1/` and `v2/` are namespaces that mirror TensorFlow's symbol paths, so
`import tpu_embedding_shim as tf` keeps `tf.compat.v1....` calls working.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """`tf.compat.v1` / `tf.compat.v2`: the namespaces (a higher layer), imported at first use (PEP 562)."""
    if name in ("v1", "v2"):
        return importlib.import_module(f".{name}", __name__)
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .namespaces import missing_name_error  # `tf.compat.as_bytes` & co: TensorFlow's, not here

    raise missing_name_error(f"tf.compat.{name}")
