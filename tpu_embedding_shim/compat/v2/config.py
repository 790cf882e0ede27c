"""`tf.config`: the TPU set-up call, as an emulated no-op, and the (CPU-only) device lists."""

from ...api.devices import LogicalDevice, list_logical_devices, list_physical_devices  # noqa: F401
from ...api.distribute import experimental_connect_to_cluster  # noqa: F401
from .. import namespaces as _namespaces

__getattr__ = _namespaces.missing_names(__name__)
