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
does not have are not added: the mode only replaces. The exception is what
TensorFlow 2.16 removed with `tf.estimator` (`ADDED_WHERE_MISSING`): where
TensorFlow has no `tf.estimator` (2.16 and later, or 2.15 without
tensorflow-estimator), `tf.estimator`, `tf.compat.v1.estimator` and
`tf.compat.v2.estimator` are the bridge's namespaces, and the TPU optimizer
parameter classes of `tf.compat.v1.tpu.experimental` are added where
missing, so a TPUEstimator program runs there unchanged. Every other
attribute of TensorFlow is untouched. `deactivate()` puts back exactly what
was there.

TensorFlow's internal modules (`tensorflow.python...`) are not changed: a
program that imports TPU classes from there gets TensorFlow's.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import tensorflow

from . import _namespace, _versions
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
    imported = _imported_as(path)
    if imported is not None and all(imported is not o for o in objects):
        objects.append(imported)
    return objects


def _imported_as(path: str) -> Any:
    """The module `import tensorflow.<path>` gives, where that is another object than `tf.<path>`: from
    TensorFlow 2.16 on, `import tensorflow.compat.v1` runs the namespace's `__init__` again as a module of its
    own (its submodules are shared), so a name set on `tf.compat.v1` alone is missing from it."""
    name = f"tensorflow.{path}"
    if path in ("compat.v1", "compat.v2"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    return sys.modules.get(name)


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


# What TensorFlow 2.16 removed with tf.estimator, which a TPUEstimator program reads: added where missing.
ADDED_WHERE_MISSING = (
    "estimator",
    "compat.v1.estimator",
    "compat.v2.estimator",
    *(
        f"compat.v1.tpu.experimental.{kind}Parameters"
        for kind in ("Adagrad", "Adam", "Ftrl", "StochasticGradientDescent")
    ),
)


def _added_targets() -> list[tuple[Any, str, str, Any]]:
    """`(module object, name, tf path, the bridge's object)` for each of `ADDED_WHERE_MISSING` TensorFlow lacks."""
    targets = []
    for tf_path in ADDED_WHERE_MISSING:
        parent, _, name = tf_path.rpartition(".")
        if name == "estimator":
            value = sys.modules.get(f"{_namespace.PACKAGE}.{tf_path}")
            missing = not _versions.has_estimator()
        else:
            value = OVERRIDES.get(tf_path)
            missing = _namespace.real_attribute(tf_path) is _namespace.MISSING
        if value is None or not missing:
            continue
        for module in _modules(parent) if parent else [tensorflow]:
            targets.append((module, name, tf_path, value))
    return targets


def _has(module: Any, name: str) -> bool:
    """Whether TensorFlow's module has `name` (read from `dir`: reading the attribute may log a deprecation)."""
    try:
        return name in dir(module)
    except ImportError:
        return False


def _original(module: Any, name: str) -> Any:
    """What `module.name` is before the mode sets it: its own entry, or (a TensorFlow module wrapper, which
    forwards to the module it wraps) the wrapped module's; `_ABSENT` where neither has one."""
    original = module.__dict__.get(name, _ABSENT)
    wrapped = module.__dict__.get("_tfmw_wrapped_module")
    if original is _ABSENT and wrapped is not None:
        original = wrapped.__dict__.get(name, _ABSENT)
    return original


def _restore(module: Any, name: str, original: Any) -> None:
    """`module.name` as it was: set back, or deleted where it was absent (a TensorFlow module wrapper's
    `__delattr__` also removes it from the wrapped module, `__all__` and its lookup cache)."""
    if original is not _ABSENT:
        setattr(module, name, original)
    elif "_tfmw_wrapped_module" in module.__dict__:
        delattr(module, name)
    else:
        module.__dict__.pop(name, None)


def activate() -> None:
    """Turns the mode on (again: nothing happens): TensorFlow's TPU names are this project's until `deactivate()`."""
    global _saved
    with _lock:
        if _saved is not None:
            return
        saved = []
        for module, name, _, value in _targets() + _added_targets():
            saved.append((module, name, _original(module, name)))
            setattr(module, name, value)
        _saved = saved


def deactivate() -> None:
    """Turns the mode off: every attribute it set is TensorFlow's again (or absent, as it was)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        for module, name, original in reversed(_saved):
            _restore(module, name, original)
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
    """The `tf.` paths the mode replaces with the installed TensorFlow (sorted, without duplicates); where
    TensorFlow has no `tf.estimator`, the names it adds (`ADDED_WHERE_MISSING`)."""
    return sorted({f"tf.{tf_path}" for _, _, tf_path, _ in _targets() + _added_targets()})
