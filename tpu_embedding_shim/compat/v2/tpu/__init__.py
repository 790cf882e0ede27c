"""`tf.tpu`."""

from ... import namespaces as _namespaces
from . import experimental  # noqa: F401

__getattr__ = _namespaces.missing_names(__name__)
