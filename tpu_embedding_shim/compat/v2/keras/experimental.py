"""`tf.keras.experimental`: SequenceFeatures."""

from ....api.feature_layers import SequenceFeatures  # noqa: F401
from ... import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
