"""`tf.nn` (and `tf.compat.v2.nn`): the embedding lookups with TensorFlow 2's signatures ('div' shards)."""

from ...api.embedding_ops import embedding_lookup_sparse_v2 as embedding_lookup_sparse  # noqa: F401
from ...api.embedding_ops import embedding_lookup_v2 as embedding_lookup  # noqa: F401
from ...api.embedding_ops import safe_embedding_lookup_sparse_v2 as safe_embedding_lookup_sparse  # noqa: F401
from .. import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
