"""The drop-in mode: while it is on, TensorFlow's own TPU names are this project's, for every importer.

`activate()` sets, on TensorFlow's own API modules, each name of the one
table (`_overrides.py`) that TensorFlow has there: `tf.distribute.TPUStrategy`,
`tf.tpu.experimental.embedding.TPUEmbedding`, `tf.compat.v1.estimator.tpu.TPUEstimator`...
So a library that does `import tensorflow as tf` (TensorFlow Recommenders,
Keras, tensorflow_estimator) reads the project's classes, and its
`isinstance` checks against TensorFlow's names hold for the project's
objects. The same name is set in `tf.compat.v2` (Keras reads TensorFlow
there) and on a lazily loaded module both on the loader and on the module
behind it (`tf.estimator`, `tf.keras`). Names of the table that TensorFlow
does not have are not added: the mode only replaces. Every other attribute
of TensorFlow is untouched. `deactivate()` puts back exactly what was there.

TensorFlow's internal modules (`tensorflow.python...`) are not changed: a
program that imports TPU classes from there gets TensorFlow's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import tensorflow

from ._overrides import OVERRIDES

__all__ = ["activate", "deactivate", "active", "activated", "replaced_names"]

_ABSENT = object()
_lock = threading.RLock()
_saved: list[tuple[Any, str, Any]] | None = None  # while active: (module object, name, TensorFlow's value)


def _modules(path: str) -> list[Any]:
    """TensorFlow's module objects for `tf.<path>`: the module, and the lazy loader in front of it if any.

    Empty where TensorFlow has no such namespace (a lazy loader whose package
    is not installed counts as none).
    """
    value: Any = tensorflow
    for part in path.split("."):
        try:
            value = getattr(value, part)
        except (AttributeError, ImportError):
            return []
    objects = [value]
    if type(value).__name__.endswith("LazyLoader"):  # TensorFlow's LazyLoader / KerasLazyLoader: load it
        try:
            dir(value)
        except ImportError:
            return []
        module = sys.modules.get(value.__name__)
        if module is not None and module is not value:
            objects.append(module)
    return objects


def _targets() -> list[tuple[Any, str, str, Any]]:
    """`(module object, name, tf path, the project's object)` for every name of the table TensorFlow has.

    A top-level path (`distribute.TPUStrategy`) also names `tf.compat.v2.<path>`.
    """
    targets = []
    for path, value in OVERRIDES.items():
        paths = [path] if path.startswith("compat.") else [path, f"compat.v2.{path}"]
        for tf_path in paths:
            namespace, _, name = tf_path.rpartition(".")
            for module in _modules(namespace):
                if _has(module, name):
                    targets.append((module, name, tf_path, value))
    return targets


def _has(module: Any, name: str) -> bool:
    """Whether TensorFlow's module has `name` (read from `dir`: reading the attribute may log a deprecation)."""
    try:
        return name in dir(module)
    except ImportError:
        return False


def activate() -> None:
    """Turns the mode on (again: nothing happens): TensorFlow's TPU names are this project's until `deactivate()`."""
    global _saved
    with _lock:
        if _saved is not None:
            return
        saved = []
        for module, name, _, value in _targets():
            saved.append((module, name, module.__dict__.get(name, _ABSENT)))
            setattr(module, name, value)
        _saved = saved


def deactivate() -> None:
    """Turns the mode off: every attribute it set is TensorFlow's again (or absent, as it was)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        for module, name, original in reversed(_saved):
            if original is _ABSENT:
                module.__dict__.pop(name, None)
            else:
                setattr(module, name, original)
        _saved = None


def active() -> bool:
    """Whether the mode is on."""
    return _saved is not None


@contextlib.contextmanager
def activated() -> Iterator[None]:
    """The mode on for the `with` block; afterwards as it was before (still on if it was)."""
    with _lock:
        was_active = active()
        activate()
    try:
        yield
    finally:
        if not was_active:
            deactivate()


def replaced_names() -> list[str]:
    """The `tf.` paths the mode replaces with the installed TensorFlow (sorted, without duplicates)."""
    return sorted({f"tf.{tf_path}" for _, _, tf_path, _ in _targets()})
