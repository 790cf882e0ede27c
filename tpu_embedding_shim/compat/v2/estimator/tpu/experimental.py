"""`tf.estimator.tpu.experimental`: EmbeddingConfigSpec and the optimizer parameters."""

from .....api.embedding_config_spec import EmbeddingConfigSpec  # noqa: F401
from .....api.tpu_embedding_v1 import (  # noqa: F401
    AdagradParameters,
    AdamParameters,
    FtrlParameters,
    MomentumParameters,
    ProximalAdagradParameters,
    RMSPropParameters,
    StochasticGradientDescentParameters,
)
from .... import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
