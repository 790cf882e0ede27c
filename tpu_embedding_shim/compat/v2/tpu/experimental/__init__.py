"""`tf.tpu.experimental`: TPU embedding columns, optimizer parameters, and `embedding`."""

from ....distribute import initialize_tpu_system, shutdown_tpu_system  # noqa: F401
from ....tpu_embedding_v1 import (  # noqa: F401
    AdagradParameters,
    AdamParameters,
    FtrlParameters,
    StochasticGradientDescentParameters,
)
from ....tpu_feature_columns import embedding_column, shared_embedding_columns  # noqa: F401
from . import embedding  # noqa: F401
