"""TensorFlow's dtype codes (DataType enum) and how each is stored and read.

Numeric tensors are stored as their raw bytes. numpy has no bfloat16: a
bfloat16 tensor is read as float32 (exact: a bfloat16 is the top half of a
float32) and written from floats by rounding to the nearest bfloat16, ties
to even, as TensorFlow casts. Strings are `strings.py`'s business.

>>> name_of(14), numpy_dtype(14)
('bfloat16', dtype('float32'))
>>> to_bfloat16(np.array([1.0, 1.00390625], np.float32)).tolist()
[16256, 16256]
>>> from_bfloat16(np.array([16256], np.uint16)).tolist()
[1.0]
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = [
    "BFLOAT16",
    "STRING",
    "CODES",
    "code_of",
    "name_of",
    "numpy_dtype",
    "stored_dtype",
    "to_bfloat16",
    "from_bfloat16",
]

BFLOAT16 = 14
STRING = 7

ByteOrder = Literal["<", ">"]
"""A bundle's byte order: '<' little-endian (what TensorFlow writes), '>' big-endian."""

# code -> TensorFlow's name, for the dtypes this package reads and writes. A numeric tensor is stored as the
# bytes of the numpy dtype of the same name, little-endian; bfloat16 as its 16 bits (uint16).
_SUPPORTED: dict[int, str] = {
    1: "float32",
    2: "float64",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    7: "string",
    8: "complex64",
    9: "int64",
    10: "bool",
    14: "bfloat16",
    17: "uint16",
    18: "complex128",
    19: "float16",
    22: "uint32",
    23: "uint64",
}
# Codes TensorFlow has that this reader does not (quantized, resource, variant, float8, int4, ...).
_KNOWN_UNSUPPORTED = {
    11: "qint8",
    12: "quint8",
    13: "qint32",
    15: "qint16",
    16: "quint16",
    20: "resource",
    21: "variant",
    24: "float8_e5m2",
    25: "float8_e4m3fn",
    29: "int4",
    30: "uint4",
}

CODES: dict[str, int] = {name: code for code, name in _SUPPORTED.items()}
"""TensorFlow's dtype name -> code, for the dtypes this package reads and writes."""


def name_of(code: int) -> str:
    """TensorFlow's name of dtype `code` ('float32', 'qint8', or 'unknown dtype 99')."""
    if code in _SUPPORTED:
        return _SUPPORTED[code]
    return _KNOWN_UNSUPPORTED.get(code, f"unknown dtype {code}")


def is_supported(code: int) -> bool:
    return code in _SUPPORTED


def _numeric(code: int) -> np.dtype:
    """The numpy dtype of a numeric code's stored bytes, native byte order (bfloat16: uint16)."""
    return np.dtype(np.uint16 if code == BFLOAT16 else _SUPPORTED[code])


def stored_dtype(code: int, byteorder: ByteOrder = "<") -> np.dtype:
    """The numpy dtype of a numeric tensor's stored bytes; `byteorder` '>' for a big-endian bundle.

    Strings have none (`strings.py` lays them out)."""
    if code == STRING:
        raise ValueError("a string tensor is stored as lengths and bytes, not as a numpy dtype")
    dtype = _numeric(code)
    return dtype.newbyteorder(byteorder) if dtype.itemsize > 1 else dtype


def numpy_dtype(code: int) -> np.dtype:
    """The dtype of the array a reader returns: float32 for bfloat16, object (bytes) for strings."""
    if code == STRING:
        return np.dtype(object)
    if code == BFLOAT16:
        return np.dtype(np.float32)
    return _numeric(code)


def code_of(dtype: np.dtype) -> int:
    """The code a numpy dtype is stored under (strings: bytes, str and object arrays)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "SUO":
        return STRING
    for code in _SUPPORTED:
        if code not in (STRING, BFLOAT16) and _numeric(code) == dtype.newbyteorder("="):
            return code
    raise TypeError(f"dtype {dtype} has no TensorFlow checkpoint dtype; supported: {sorted(_SUPPORTED.values())}.")


def to_bfloat16(values: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) nearest to `values`, ties to even, as TensorFlow's cast.

    Every NaN becomes the quiet NaN 0x7fc0 with its sign (TF 2.15 gives 0x7fc0 too, with the sign in some
    of its code paths and without it in others).
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> 16) & 1)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(values.astype(np.float32, copy=False))
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) & 0x8000 | 0x7FC0).astype(np.uint16)
    return rounded


def from_bfloat16(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (uint16), exactly."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)
