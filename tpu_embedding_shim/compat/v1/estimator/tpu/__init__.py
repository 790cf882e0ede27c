"""`tf.compat.v1.estimator.tpu`."""

from .....estimator import (  # noqa: F401
    InputPipelineConfig,
    TPUConfig,
    TPUEstimator,
    TPUEstimatorSpec,
)
from .....estimator import TPURunConfig as RunConfig  # noqa: F401
from ....v2.estimator.tpu import experimental  # noqa: F401  (the same names in TensorFlow's v1 and v2)
