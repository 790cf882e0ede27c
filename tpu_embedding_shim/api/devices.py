"""`tf.config`'s device lists: the one CPU of this process; no TPU or GPU is ever listed.

>>> [d.device_type for d in list_logical_devices()], list_logical_devices("TPU")
(['CPU'], [])
"""

from __future__ import annotations

import dataclasses

__all__ = ["LogicalDevice", "list_logical_devices", "list_physical_devices"]


@dataclasses.dataclass(frozen=True)
class LogicalDevice:
    """`tf.config.LogicalDevice`."""

    name: str
    device_type: str


def _of_type(devices: list[LogicalDevice], device_type: str | None) -> list[LogicalDevice]:
    return [d for d in devices if device_type is None or d.device_type == str(device_type).upper()]


def list_logical_devices(device_type: str | None = None) -> list[LogicalDevice]:
    """`tf.config.list_logical_devices`: the one CPU."""
    return _of_type([LogicalDevice("/job:localhost/replica:0/task:0/device:CPU:0", "CPU")], device_type)


def list_physical_devices(device_type: str | None = None) -> list[LogicalDevice]:
    """`tf.config.list_physical_devices`: the one CPU."""
    return _of_type([LogicalDevice("/physical_device:CPU:0", "CPU")], device_type)
