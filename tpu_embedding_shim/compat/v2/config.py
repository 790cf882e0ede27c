"""`tf.config`: the TPU set-up call, as an emulated no-op, and the (CPU-only) device lists."""

from ..devices import LogicalDevice, list_logical_devices, list_physical_devices  # noqa: F401
from ..distribute import experimental_connect_to_cluster  # noqa: F401
