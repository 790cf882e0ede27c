"""`tf.config`: the TPU set-up calls, as emulated no-ops, and the (CPU-only) device lists."""

from ..distribute import (  # noqa: F401
    LogicalDevice,
    experimental_connect_to_cluster,
    list_logical_devices,
    list_physical_devices,
)
