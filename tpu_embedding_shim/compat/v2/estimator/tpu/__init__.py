"""`tf.estimator.tpu`."""

from .....runner import (  # noqa: F401
    InputPipelineConfig,
    TPUConfig,
    TPUEstimator,
    TPUEstimatorSpec,
)
from .....runner import TPURunConfig as RunConfig  # noqa: F401
from .... import namespaces as _namespaces
from . import experimental  # noqa: F401

__getattr__ = _namespaces.missing_names(__name__)
