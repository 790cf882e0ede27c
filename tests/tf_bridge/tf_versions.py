"""Which TensorFlow this venv has, read independently of the bridge: the tests' expectations depend on it.

CI runs tests/tf_bridge in three venvs (docs/tensorflow_bridge.md, "Which
TensorFlow"): TensorFlow 2.15.1 with tensorflow-estimator, 2.15.1 without it,
and the newest TensorFlow with tf_keras (with TF_USE_LEGACY_KERAS=1: Keras 2;
without: Keras 3).
"""

import importlib.util

import pytest
import tensorflow

VERSION = tuple(int(part) for part in tensorflow.__version__.split(".")[:2])
HAS_ESTIMATOR = VERSION < (2, 16) and importlib.util.find_spec("tensorflow_estimator") is not None
KERAS_3 = str(getattr(tensorflow.keras, "__version__", "") or "").startswith("3.")

needs_estimator = pytest.mark.skipif(
    not HAS_ESTIMATOR,
    reason="this venv does not have tensorflow-estimator, whose TPUEstimator is the oracle here "
    "(CI runs this test in the TensorFlow 2.15 venv that has it)",
)
needs_keras_2 = pytest.mark.skipif(
    KERAS_3,
    reason="this venv's tf.keras is Keras 3 (TensorFlow >= 2.16 without TF_USE_LEGACY_KERAS=1), which "
    "builds no tf.compat.v1 graph; CI runs this test again with TF_USE_LEGACY_KERAS=1 and tf_keras",
)
