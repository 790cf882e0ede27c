"""`tf.tpu.experimental`: TPU embedding columns, optimizer parameters, and `embedding`."""

from .....api.distribute import initialize_tpu_system, shutdown_tpu_system  # noqa: F401
from .....api.tpu_embedding_v1 import (  # noqa: F401
    AdagradParameters,
    AdamParameters,
    FtrlParameters,
    StochasticGradientDescentParameters,
)
from .....api.tpu_feature_columns import embedding_column, shared_embedding_columns  # noqa: F401
from .... import namespaces as _namespaces
from . import embedding  # noqa: F401

__getattr__ = _namespaces.missing_names(__name__)
