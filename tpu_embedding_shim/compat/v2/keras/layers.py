"""`tf.keras.layers`: DenseFeatures (and `DenseFeature`, the TPU docs' typo, with a warning)."""

from ....api.feature_layers import DenseFeature, DenseFeatures  # noqa: F401
from ... import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
