"""The part of `tf.nest` the mid-level API needs: walk a `feature_config` nest, match other nests to it.

TensorFlow's mid-level classes take `feature_config` as any nest of dicts,
lists and tuples whose leaves are `FeatureConfig`s, and visit the leaves in
`tf.nest` order: dict keys sorted, lists and tuples in order. A leaf is
named by its path, the keys and indices down to it joined by '/' ('a/0').
Every nest the user passes back (features, weights, gradients) must have
the structure of `feature_config`, or TensorFlow's `tf.nest` errors are
raised: a `ValueError` when the nesting, a length or a set of dict keys
differs, a `TypeError` when a sequence type does (list vs tuple, dict vs
list).

>>> config = {"b": "B", "a": ["A0", "A1"]}
>>> [(path_string(path), leaf) for path, leaf in flatten_with_paths(config)]
[('a/0', 'A0'), ('a/1', 'A1'), ('b', 'B')]
>>> flatten_up_to(config, {"a": [[1, 2], [3]], "b": [4]}, "features")
[[1, 2], [3], [4]]
>>> pack_as(config, [10, 11, 20])
{'b': 20, 'a': [10, 11]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "Path",
    "path_string",
    "path_name",
    "is_nest",
    "flatten_with_paths",
    "flatten_up_to",
    "pack_as",
    "short_repr",
]

Path = tuple[Any, ...]


def path_string(path: Path) -> str:
    """TensorFlow's joined string path: ('a', 0) -> 'a/0'; the top is ''."""
    return "/".join(str(p) for p in path)


def path_name(path: Path) -> str:
    """A leaf's path for a message: `path_string`, or '(the only feature)' for a `feature_config` that is one leaf."""
    return path_string(path) or "(the only feature)"


def is_nest(value: Any) -> bool:
    """Whether `value` is a level of a nest (a mapping, list or tuple) rather than a leaf."""
    return isinstance(value, (Mapping, list, tuple))


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "dict"
    return type(value).__name__


def short_repr(value: Any) -> str:
    """`repr(value)`, cut to 80 characters, for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def flatten_with_paths(structure: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """`(path, leaf)` of every leaf of `structure` in `tf.nest` order: dict keys sorted, lists and tuples in order."""
    if isinstance(structure, dict):
        return [item for key in sorted(structure) for item in flatten_with_paths(structure[key], path + (key,))]
    if isinstance(structure, (list, tuple)):
        return [item for i, value in enumerate(structure) for item in flatten_with_paths(value, path + (i,))]
    return [(path, structure)]


def flatten_up_to(config: Any, value: Any, argument: str, path: Path = ()) -> list[Any]:
    """`value`'s items at the leaves of `config`, in `tf.nest` order (dict keys sorted).

    What `tf.nest.assert_same_structure(config, value)` followed by
    `tf.nest.flatten(value)` does, except that the item at a leaf of `config`
    is taken whole (it may be a list of lists of ids). The errors are
    `tf.nest`'s (module docstring); `argument` names `value` in them.
    """
    if not is_nest(config):
        return [value]
    where = f" at path '{path_string(path)}'" if path else ""

    def mismatch(error: type, detail: str) -> Exception:
        return error(f"Argument `{argument}` must have the nested structure of `feature_config`. {detail}")

    if not is_nest(value):
        raise mismatch(
            ValueError,
            f"feature_config has a {_kind(config)}{where}; `{argument}` has "
            f"{type(value).__name__}: {short_repr(value)}.",
        )
    config_is_dict = isinstance(config, Mapping)
    if config_is_dict != isinstance(value, Mapping) or (not config_is_dict and type(config) is not type(value)):
        raise mismatch(TypeError, f"feature_config has a {_kind(config)}{where}; `{argument}` has a {_kind(value)}.")
    if config_is_dict:
        if set(config) != set(value):
            raise mismatch(
                ValueError,
                f"The dict{where} has keys {sorted(map(str, config))} in feature_config and "
                f"{sorted(map(str, value))} in `{argument}`.",
            )
        return [
            item for key in sorted(config) for item in flatten_up_to(config[key], value[key], argument, path + (key,))
        ]
    if len(config) != len(value):
        raise mismatch(
            ValueError,
            f"The {_kind(config)}{where} has {len(config)} items in feature_config and {len(value)} in `{argument}`.",
        )
    return [item for i, (c, v) in enumerate(zip(config, value)) for item in flatten_up_to(c, v, argument, path + (i,))]


def pack_as(config: Any, flat: Sequence[Any]) -> Any:
    """`tf.nest.pack_sequence_as(config, flat)`: dicts keep `config`'s key order."""
    items = iter(flat)

    def pack(structure: Any) -> Any:
        if isinstance(structure, Mapping):
            packed = {key: None for key in structure}
            for key in sorted(structure):
                packed[key] = pack(structure[key])
            return type(structure)(packed) if type(structure) is not dict else packed
        if isinstance(structure, (list, tuple)):
            values = [pack(s) for s in structure]
            if isinstance(structure, tuple) and hasattr(structure, "_fields"):  # namedtuple
                return type(structure)(*values)
            return type(structure)(values)
        return next(items)

    return pack(config)
