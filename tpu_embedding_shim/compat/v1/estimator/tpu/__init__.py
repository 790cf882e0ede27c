"""`tf.compat.v1.estimator.tpu`."""

from .....runner import (  # noqa: F401
    InputPipelineConfig,
    TPUConfig,
    TPUEstimator,
    TPUEstimatorSpec,
)
from .....runner import TPURunConfig as RunConfig  # noqa: F401
from .... import namespaces as _namespaces
from ....v2.estimator.tpu import experimental as _experimental

experimental = _namespaces.alias(_experimental, f"{__name__}.experimental")  # the same names in TF's v1 and v2

__getattr__ = _namespaces.missing_names(__name__)
