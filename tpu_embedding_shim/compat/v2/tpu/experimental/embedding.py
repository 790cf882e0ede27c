"""`tf.tpu.experimental.embedding`: the mid-level API's configuration objects and classes."""

from .....api.tpu_embedding_for_serving import TPUEmbeddingForServing, serving_embedding_lookup  # noqa: F401
from .....api.tpu_embedding_v2 import TPUEmbedding  # noqa: F401
from .....api.tpu_embedding_v2_utils import (  # noqa: F401
    FTRL,
    SGD,
    Adagrad,
    AdagradMomentum,
    Adam,
    CustomCombiner,
    CustomOptimizer,
    FeatureConfig,
    QuantizationConfig,
    RowIdInitializer,
    TableConfig,
)
from .....api.tpu_embedding_v3 import SparseCoreEmbeddingConfig, TPUEmbeddingV2  # noqa: F401
from .... import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
