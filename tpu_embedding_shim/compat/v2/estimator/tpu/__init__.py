"""`tf.estimator.tpu`."""

from .....estimator import (  # noqa: F401
    InputPipelineConfig,
    TPUConfig,
    TPUEstimator,
    TPUEstimatorSpec,
)
from .....estimator import TPURunConfig as RunConfig  # noqa: F401
from . import experimental  # noqa: F401
