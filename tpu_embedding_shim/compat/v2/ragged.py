"""`tf.ragged`."""

from ...api.tensors import ragged_constant as constant  # noqa: F401
from .. import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
