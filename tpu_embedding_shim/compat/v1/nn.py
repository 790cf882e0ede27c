"""`tf.compat.v1.nn`: the embedding lookups with TensorFlow 1's signatures (`partition_strategy`)."""

from ...api.embedding_ops import embedding_lookup, embedding_lookup_sparse, safe_embedding_lookup_sparse  # noqa: F401
from .. import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
