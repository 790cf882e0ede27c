"""`tf.compat.v1.estimator`."""

from ....runner import (  # noqa: F401
    EstimatorSpec,
    ModeKeys,
    NanLossDuringTrainingError,
    RunConfig,
    WarmStartSettings,
)
from . import tpu  # noqa: F401
