"""`tf.compat.v1.tpu.experimental`: TPU embedding columns and the v1 optimizer parameters."""

from ....api.tpu_embedding_v1 import (  # noqa: F401
    AdagradParameters,
    AdamParameters,
    FtrlParameters,
    StochasticGradientDescentParameters,
)
from ....api.tpu_feature_columns import embedding_column, shared_embedding_columns  # noqa: F401
from ... import namespaces as _namespaces
from ...v2.tpu.experimental import embedding as _embedding

embedding = _namespaces.alias(_embedding, f"{__name__}.embedding")  # TensorFlow 2's classes at the TF1 path

__getattr__ = _namespaces.missing_names(__name__)
