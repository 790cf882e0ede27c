"""`tf.distribute.experimental`: TF 2.3's name for the (emulated) TPUStrategy."""

from ....api.distribute import TPUStrategy, ValueContext  # noqa: F401
from ... import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
