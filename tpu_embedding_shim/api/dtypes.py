"""TensorFlow's dtype names as numpy dtypes (`tf.float32`, `tf.string`, ...)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
bool = np.dtype("bool")
string = np.dtype(np.str_)


def as_dtype(value: Any) -> np.dtype:
    """A numpy dtype from a numpy dtype, a type, or a TF-style name ('float32', 'string')."""
    if isinstance(value, str) and value == "string":
        return string
    return np.dtype(value)


def is_integer(dtype: Any) -> builtins.bool:  # `bool` here is tf.bool
    return as_dtype(dtype).kind in "iu"


def is_floating(dtype: Any) -> builtins.bool:
    return as_dtype(dtype).kind == "f"


def is_string(dtype: Any) -> builtins.bool:
    return as_dtype(dtype).kind in "USO"
