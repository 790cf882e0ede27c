"""What the installed TensorFlow has that the bridge depends on: `tf.estimator`, and which Keras `tf.keras` is.

- `tf.estimator` is TensorFlow's when tensorflow-estimator is installed and
  TensorFlow is older than 2.16 (TensorFlow 2.15 lists it as a dependency,
  yet runs without it; 2.16 removed `tf.estimator`).
- On TensorFlow 2.16 and later, `tf.keras` is Keras 3, unless
  `TF_USE_LEGACY_KERAS=1` was set before TensorFlow was imported and
  tf_keras is installed: then it is tf_keras (Keras 2). That is
  TensorFlow's convention for Keras 2 programs; the bridge follows it and
  never sets the variable itself.
"""

from __future__ import annotations

import importlib.util

import tensorflow

__all__ = ["has_estimator", "keras_is_keras_3", "why_missing"]


def has_estimator() -> bool:
    """Whether TensorFlow has `tf.estimator` (without importing it: it is loaded on first use)."""
    return hasattr(tensorflow, "estimator") and importlib.util.find_spec("tensorflow_estimator") is not None


def keras_is_keras_3() -> bool:
    """Whether `tf.keras` is Keras 3 (its `__version__`; Keras 2's `tf.keras` has none)."""
    version = str(getattr(tensorflow.keras, "__version__", "") or "")
    return version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 3


def _major_minor() -> tuple:
    return tuple(int(part) for part in tensorflow.__version__.split(".")[:2])


def why_missing(path: str) -> str:
    """Why TensorFlow has no `tf.<path>`, for the AttributeError of a name the bridge does not provide there."""
    version = tensorflow.__version__
    parts = path.split(".")
    if "estimator" in parts and not has_estimator():
        if _major_minor() >= (2, 16):
            return f"TensorFlow {version} has no tf.estimator (TensorFlow 2.16 removed it)"
        return f"TensorFlow {version} has no tf.estimator without tensorflow-estimator, which is not installed"
    if "keras" in parts and keras_is_keras_3():
        return (
            f"TensorFlow {version}'s tf.keras is Keras 3, which has no tf.{path} (for Keras 2: install tf_keras "
            "and set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported)"
        )
    return f"TensorFlow {version} has no tf.{path}"
