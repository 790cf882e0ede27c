"""`tf.estimator` (as `tensorflow_estimator` provided it up to TensorFlow 2.15)."""

from ....runner import (  # noqa: F401
    EstimatorSpec,
    ModeKeys,
    NanLossDuringTrainingError,
    RunConfig,
    WarmStartSettings,
)
from ... import namespaces as _namespaces
from . import tpu  # noqa: F401

__getattr__ = _namespaces.missing_names(__name__)
