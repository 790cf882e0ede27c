"""`tf.compat`: TensorFlow's `tf.compat.v1` and `tf.compat.v2` namespaces.

They hold no logic: each name is an object of `tpu_embedding_shim.api`
(or the runner's `TPUEstimator`) at the path TensorFlow gives it.
"""

from . import namespaces as _namespaces
from . import v1, v2  # noqa: F401

__getattr__ = _namespaces.missing_names(__name__)
