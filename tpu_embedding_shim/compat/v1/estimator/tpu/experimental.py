"""`tf.compat.v1.estimator.tpu.experimental`: EmbeddingConfigSpec and the optimizer parameters."""

from ....embedding_config_spec import EmbeddingConfigSpec  # noqa: F401
from ....tpu_embedding_v1 import (  # noqa: F401
    AdagradParameters,
    AdamParameters,
    FtrlParameters,
    MomentumParameters,
    ProximalAdagradParameters,
    RMSPropParameters,
    StochasticGradientDescentParameters,
)
