"""A TensorFlow module with a few names replaced: every other attribute is read from the real module.

`Namespace("tpu.experimental", own)` stands for `tf.tpu.experimental`: its
own names (`embedding_column`, the child namespace `embedding`) are this
project's; any other attribute is looked up on TensorFlow's own
`tf.tpu.experimental` at the moment it is asked for. Nothing of TensorFlow
is copied and nothing is patched; the real module is found (and, for lazily
loaded ones such as `tf.keras` and `tf.estimator`, imported) on first use.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import Any

import tensorflow

from . import _versions

PACKAGE = "tpu_embedding_shim.tensorflow"
MISSING = object()  # real_attribute's answer for a name TensorFlow does not have


def real_attribute(path: str) -> Any:
    """`tensorflow.<path>` (dotted), or `MISSING` where TensorFlow has no such name.

    TensorFlow 2.15 keeps `tf.estimator` as a lazy loader even without
    tensorflow-estimator installed: reading it is then an ImportError, which
    means the same as a missing name. So does one of the bridge's own
    namespaces, which the drop-in mode sets where TensorFlow has none.
    """
    value: Any = tensorflow
    for part in path.split("."):
        try:
            value = getattr(value, part, MISSING)
        except ImportError:
            return MISSING
        if value is MISSING or isinstance(value, Namespace):  # the drop-in mode's tf.estimator is the bridge's
            return MISSING
    return value


class Namespace(types.ModuleType):
    """`tf.<path>`: this project's names where it has them, TensorFlow's `tf.<path>` for the rest."""

    def __init__(self, path: str, own: Mapping[str, Any]):
        super().__init__(
            f"{PACKAGE}.{path}",
            f"TensorFlow's `tf.{path}`, with the TPU-embedding names of "
            "tpu_embedding_shim (see docs/tensorflow_bridge.md).",
        )
        self.__dict__.update(own)
        self.__dict__["_own_names"] = frozenset(own)
        self.__dict__["_tf_path"] = path

    def __getattr__(self, name: str) -> Any:
        """Only called for names this namespace does not own: TensorFlow's attribute, read now."""
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        real = real_attribute(self._tf_path)
        if real is not MISSING:
            try:
                return getattr(real, name)
            except AttributeError:
                raise AttributeError(f"module 'tensorflow.{self._tf_path}' has no attribute {name!r}") from None
            except ImportError:  # a lazy loader whose package is not installed: tf.estimator on TensorFlow 2.15
                pass
        raise AttributeError(
            f"module 'tensorflow.{self._tf_path}' has no attribute {name!r}: "
            f"{_versions.why_missing(self._tf_path)}; this project's names there are "
            f"{sorted(self._own_names)}."
        )

    def __dir__(self):
        real = real_attribute(self._tf_path)
        try:
            theirs = set(dir(real)) if real is not MISSING else set()
        except ImportError:
            theirs = set()
        return sorted(set(self._own_names) | theirs)

    def __repr__(self) -> str:
        return f"<module 'tensorflow.{self._tf_path}' (TensorFlow, with tpu_embedding_shim's TPU-embedding names)>"


def build(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level names of the proxy: `{name: object or Namespace}` from a table of dotted paths.

    Every namespace on the way to an overridden name becomes a `Namespace`
    (registered in `sys.modules`, so `from tpu_embedding_shim.tensorflow.keras
    import layers` works); the leaves are the table's objects.
    """
    tree: dict[str, Any] = {}
    for path, value in overrides.items():
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"The override table gives {path!r} inside a name that is not a namespace.")
        if leaf in node:
            raise ValueError(f"The override table names {path!r} twice (or as a name and a namespace).")
        node[leaf] = value

    def make(path: str | None, node: dict[str, Any]) -> dict[str, Any]:
        own = {}
        for name, value in node.items():
            child = name if path is None else f"{path}.{name}"
            if isinstance(value, dict):
                value = Namespace(child, make(child, value))
                sys.modules[f"{PACKAGE}.{child}"] = value
            own[name] = value
        return own

    return make(None, tree)
