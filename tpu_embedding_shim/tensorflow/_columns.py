"""The project's feature-column functions, taking TensorFlow's dtypes (`tf.string`, `tf.int64`, ...).

The columns are numpy-world objects that name dtypes as numpy does; a
`tf.DType` argument is passed on as its name ('string', 'int64'), which they
read as TensorFlow's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import tensorflow as tf


def _plain(value: Any) -> Any:
    return value.name if isinstance(value, tf.DType) else value


def taking_tf_dtypes(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, with every `tf.DType` argument replaced by its name."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return function(*[_plain(a) for a in args], **{k: _plain(v) for k, v in kwargs.items()})

    return wrapper


# TensorFlow's own, bound now: while the drop-in mode is on (`_mode.py`), `tf.feature_column`'s is this module's.
_TF_MAKE_PARSE_EXAMPLE_SPEC = tf.feature_column.make_parse_example_spec


def _tf_parse_spec(config: Any) -> Any:
    """A parse spec of the project's columns (`VarLenFeature` / `FixedLenFeature`) as TensorFlow's."""
    if type(config).__name__ == "VarLenFeature":
        return tf.io.VarLenFeature(tf.as_dtype(config.dtype))
    if type(config).__name__ == "FixedLenFeature":
        return tf.io.FixedLenFeature(config.shape, tf.as_dtype(config.dtype), config.default_value)
    return config


def make_parse_example_spec(feature_columns: Any) -> dict:
    """`tf.feature_column.make_parse_example_spec` over this project's columns and TensorFlow's, mixed.

    The project's columns give their `parse_example_spec` with TensorFlow's
    `tf.io` feature types; TensorFlow's columns are read by TensorFlow. A key
    given two different specs is a ValueError, as in TensorFlow.
    """
    result: dict = {}
    for column in feature_columns:
        if type(column).__module__.startswith("tpu_embedding_shim."):
            config = {key: _tf_parse_spec(value) for key, value in column.parse_example_spec.items()}
        else:
            config = _TF_MAKE_PARSE_EXAMPLE_SPEC([column])
        for key, value in config.items():
            if key in result and result[key] != value:
                raise ValueError(
                    f"feature_columns contain different parse_spec for key {key}. Given {result[key]} and {value}"
                )
        result.update(config)
    return result
