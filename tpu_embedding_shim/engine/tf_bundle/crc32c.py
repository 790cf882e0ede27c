"""CRC-32C (Castagnoli), the checksum of every TensorFlow checkpoint block and tensor.

`crc32c(data, crc)` extends `crc` (the CRC-32C of earlier bytes, 0 for
none) over `data`, as TensorFlow's `crc32c::Extend`, so a large tensor is
checksummed piece by piece. `mask` / `unmask` are the rotation TF applies
before it stores a CRC (a CRC stored next to the bytes it covers would
otherwise checksum oddly).

Two implementations compute the same numbers:

- a numba kernel (slicing-by-8: eight bytes per step through eight
  256-entry tables), used when numba imports (the `fast` extra) and the
  fast kernels are not turned off (`TPU_EMBEDDING_SHIM_KERNELS=numpy`);
- numpy, for everyone else. A CRC is sequential, so numpy cuts the data
  into many equal lanes, runs the slicing-by-8 step on all lanes at once
  (one array operation per table per step), and joins the lane CRCs
  with the linear "shift by n zero bytes" operator of the CRC.

Both are measured in docs/checkpoints.md ("Speed").

>>> hex(crc32c(b"123456789"))
'0xe3069283'
>>> crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")
True
>>> unmask(mask(0x12345678)) == 0x12345678
True
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..fast import available

__all__ = ["crc32c", "mask", "unmask", "backend", "crc32c_numpy", "crc32c_numba"]

Bytes = bytes | bytearray | memoryview | np.ndarray

POLYNOMIAL = 0x82F63B78  # CRC-32C, bit-reflected
_MASK_DELTA = 0xA282EAD8
_M32 = 0xFFFFFFFF
_LANES = 1 << 14  # numpy lanes: enough work per array operation, few enough to join quickly
_PIECE = 1 << 22  # bytes per numpy pass: 4 MiB keeps each column of lanes in cache (measured best)


def mask(crc: int) -> int:
    """TensorFlow's stored form of a CRC: rotated right by 15 bits plus a constant."""
    crc &= _M32
    return ((((crc >> 15) | (crc << 17)) & _M32) + _MASK_DELTA) & _M32


def unmask(masked: int) -> int:
    """The CRC whose `mask` is `masked`."""
    rot = (masked - _MASK_DELTA) & _M32
    return ((rot >> 17) | (rot << 15)) & _M32


def _tables() -> np.ndarray:
    """tables[k][b]: the CRC register after byte b followed by k zero bytes (slicing-by-8)."""
    tables = np.zeros((8, 256), dtype=np.uint32)
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ (POLYNOMIAL if value & 1 else 0)
        tables[0, byte] = value
    for k in range(1, 8):
        previous = tables[k - 1]
        tables[k] = (previous >> 8) ^ tables[0][previous & 0xFF]
    return tables


TABLES = _tables()


def _as_bytes(data: Bytes) -> np.ndarray:
    """A flat uint8 view of `data` (no copy for contiguous buffers and arrays)."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


# numpy ------------------------------------------------------------------------------------------


def register_bytewise(register: int, data: np.ndarray) -> int:
    """The raw register after `data`, one byte at a time (short tails only)."""
    table = TABLES[0]
    for byte in data.tolist():
        register = int(table[(register ^ byte) & 0xFF]) ^ (register >> 8)
    return register


def _lanes_zero_start(lanes: np.ndarray) -> np.ndarray:
    """The raw register (started at 0) of every row of `lanes` ([L, n], n % 8 == 0), all rows at once."""
    count, width = lanes.shape
    words = lanes.view("<u4")  # [L, n / 4]
    register = np.zeros(count, dtype=np.uint32)
    t = TABLES
    for j in range(0, width // 4, 2):
        low = register ^ words[:, j]
        high = words[:, j + 1]
        register = (
            t[7][low & 0xFF]
            ^ t[6][(low >> 8) & 0xFF]
            ^ t[5][(low >> 16) & 0xFF]
            ^ t[4][low >> 24]
            ^ t[3][high & 0xFF]
            ^ t[2][(high >> 8) & 0xFF]
            ^ t[1][(high >> 16) & 0xFF]
            ^ t[0][high >> 24]
        )
    return register


@functools.lru_cache(maxsize=64)
def _shift_tables(nbytes: int) -> np.ndarray:
    """4 x 256 tables of the linear map 'register -> register after `nbytes` zero bytes'."""
    # The images of the 32 unit registers, by squaring the one-zero-byte operator.
    one_byte = np.array([register_bytewise(1 << bit, np.zeros(1, np.uint8)) for bit in range(32)], dtype=np.uint32)
    result = np.array([1 << bit for bit in range(32)], dtype=np.uint32)  # identity
    power, n = one_byte, nbytes
    while n:
        if n & 1:
            result = _compose(power, result)
        power = _compose(power, power)
        n >>= 1
    tables = np.zeros((4, 256), dtype=np.uint32)
    for part in range(4):
        for value in range(256):
            acc = 0
            for bit in range(8):
                if value >> bit & 1:
                    acc ^= int(result[8 * part + bit])
            tables[part, value] = acc
    return tables


def _apply(operator: np.ndarray, register: int) -> int:
    acc = 0
    for bit in range(32):
        if register >> bit & 1:
            acc ^= int(operator[bit])
    return acc


def _compose(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """outer o inner, operators given as the images of the 32 unit vectors."""
    return np.array([_apply(outer, int(v)) for v in inner], dtype=np.uint32)


def _shift(registers: np.ndarray, nbytes: int) -> np.ndarray:
    """Every register of `registers` carried over `nbytes` zero bytes."""
    t = _shift_tables(nbytes)
    r = registers.astype(np.uint32)
    return t[0][r & 0xFF] ^ t[1][(r >> 8) & 0xFF] ^ t[2][(r >> 16) & 0xFF] ^ t[3][r >> 24]


def _register_numpy(register: int, data: np.ndarray) -> int:
    """The raw register after `data`, numpy lanes for the bulk and bytes for the tail."""
    if data.size < 8 * 1024:
        return register_bytewise(register, data)
    lanes = _LANES
    while lanes > 1 and data.size < lanes * 64:
        lanes //= 2
    width = (data.size // lanes) & ~7
    bulk = lanes * width
    lane_crcs = _lanes_zero_start(data[:bulk].reshape(lanes, width))
    # Join: r(A || B) = shift(r(A), |B|) ^ r0(B), pairwise up a binary tree of lanes.
    span = width
    while lane_crcs.size > 1:
        lane_crcs = _shift(lane_crcs[0::2], span) ^ lane_crcs[1::2]
        span *= 2
    register = int(_shift(np.array([register], np.uint32), bulk)[0]) ^ int(lane_crcs[0])
    return _register_numpy(register, data[bulk:])


def crc32c_numpy(data: Bytes, crc: int = 0) -> int:
    """`crc32c` with numpy only (module docstring)."""
    view = _as_bytes(data)
    register = (crc ^ _M32) & _M32
    for start in range(0, view.size, _PIECE):
        register = _register_numpy(register, view[start : start + _PIECE])
    return register ^ _M32


# numba ------------------------------------------------------------------------------------------


def _register_kernel(register, data, tables):  # pragma: no cover - compiled by numba
    """Slicing-by-8 over `data` (uint8), from raw register `register` (uint32)."""
    n = data.size
    i = 0
    while i + 8 <= n:
        low = register ^ (data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24))
        register = (
            tables[7, low & 0xFF]
            ^ tables[6, (low >> 8) & 0xFF]
            ^ tables[5, (low >> 16) & 0xFF]
            ^ tables[4, (low >> 24) & 0xFF]
            ^ tables[3, data[i + 4]]
            ^ tables[2, data[i + 5]]
            ^ tables[1, data[i + 6]]
            ^ tables[0, data[i + 7]]
        )
        i += 8
    while i < n:
        register = tables[0, (register ^ data[i]) & 0xFF] ^ (register >> 8)
        i += 1
    return register


@functools.lru_cache(maxsize=1)
def _numba_kernel() -> Callable[..., Any] | None:
    if not available():
        return None
    import numba  # optional (the `fast` extra): imported only where it is installed

    from ..fast import disk_cache  # noqa: F401  (numba caches the kernel outside the package)

    return numba.njit(cache=True, nogil=True)(_register_kernel)


def crc32c_numba(data: Bytes, crc: int = 0) -> int:
    """`crc32c` with the numba kernel (raises RuntimeError when numba is not available)."""
    kernel = _numba_kernel()
    if kernel is None:
        raise RuntimeError("crc32c_numba needs numba (pip install numba).")
    return int(kernel(np.uint32((crc ^ _M32) & _M32), _as_bytes(data), TABLES)) ^ _M32


def backend() -> str:
    """'numba' or 'numpy': which implementation `crc32c` uses."""
    return "numba" if _numba_kernel() is not None else "numpy"


def crc32c(data: Bytes, crc: int = 0) -> int:
    """The CRC-32C of `data`, continuing from `crc` (the CRC-32C of the bytes before it).

    Args:
      data: bytes, a bytearray / memoryview, or a numpy array (its raw bytes
        in memory order; a memory-mapped array is read in place).
      crc: the CRC-32C of what came before `data` (0: nothing did).
    """
    if _numba_kernel() is not None:
        return crc32c_numba(data, crc)
    return crc32c_numpy(data, crc)
