"""FarmHash `Fingerprint64`: the hash TensorFlow gives an out-of-vocabulary token its bucket with.

TensorFlow's vocabulary tables and `tf.strings.to_hash_bucket_fast` put an
unknown token in bucket `Fingerprint64(token) % num_buckets`, where
`Fingerprint64` is `farmhashna::Hash64` of the token's bytes. It is fixed
forever and depends on neither the machine nor the run, so the same
function here gives TensorFlow's buckets. This is a line-by-line port of the
C++ (64-bit arithmetic as Python ints masked to 64 bits).

>>> fingerprint64(b"Hello") % 3, fingerprint64(b"TensorFlow") % 3, fingerprint64(b"2.x") % 3
(0, 2, 2)
>>> hash_bucket("Hello", 3), hash_bucket(42, 7) == hash_bucket("42", 7)
(0, True)
"""

from __future__ import annotations

from typing import Any

__all__ = ["fingerprint64", "hash_bucket"]

_MASK = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F


def _rot(v: int, shift: int) -> int:
    """64-bit rotate right."""
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _MASK


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _fetch64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 8], "little")


def _fetch32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 4], "little")


def _hash_len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _MASK
    a ^= a >> 47
    b = ((v ^ a) * mul) & _MASK
    b ^= b >> 47
    return (b * mul) & _MASK


def _hash_len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = _K2 + n * 2
        a = (_fetch64(s, 0) + _K2) & _MASK
        b = _fetch64(s, n - 8)
        c = (_rot(b, 37) * mul + a) & _MASK
        d = ((_rot(a, 25) + b) * mul) & _MASK
        return _hash_len16(c, d, mul)
    if n >= 4:
        mul = _K2 + n * 2
        a = _fetch32(s, 0)
        return _hash_len16((n + (a << 3)) & _MASK, _fetch32(s, n - 4), mul)
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K0)) & _MASK) * _K2) & _MASK
    return _K2


def _ends(s: bytes, k: int) -> tuple[int, int, int, int, int]:
    """(mul, a, b, c, d): the first two and the last two 8-byte words, as HashLen17to32 and HashLen33to64
    both start (`a` is multiplied by `k`: k1 in the first, k2 in the second)."""
    n = len(s)
    mul = _K2 + n * 2
    return (
        mul,
        (_fetch64(s, 0) * k) & _MASK,
        _fetch64(s, 8),
        (_fetch64(s, n - 8) * mul) & _MASK,
        (_fetch64(s, n - 16) * _K2) & _MASK,
    )


def _mix(a: int, b: int, c: int, d: int, b_plus: int) -> tuple[int, int]:
    """The pair both length classes feed to HashLen16: (rot(a+b, 43) + rot(c, 30) + d, a + rot(b+b_plus, 18) + c)."""
    return (_rot((a + b) & _MASK, 43) + _rot(c, 30) + d) & _MASK, (a + _rot((b + b_plus) & _MASK, 18) + c) & _MASK


def _hash_len17to32(s: bytes) -> int:
    mul, a, b, c, d = _ends(s, _K1)
    return _hash_len16(*_mix(a, b, c, d, _K2), mul)


def _hash_len33to64(s: bytes) -> int:
    n = len(s)
    mul, a, b, c, d = _ends(s, _K2)
    y, second = _mix(a, b, c, d, _K2)
    z = _hash_len16(y, second, mul)
    e = (_fetch64(s, 16) * mul) & _MASK
    f = _fetch64(s, 24)
    g = ((y + _fetch64(s, n - 32)) * mul) & _MASK
    h = ((z + _fetch64(s, n - 24)) * mul) & _MASK
    return _hash_len16(*_mix(e, f, g, h, a), mul)


def _weak_hash32(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = (_fetch64(s, i + 8 * k) for k in range(4))
    a = (a + w) & _MASK
    b = _rot((b + a + z) & _MASK, 21)
    c = a
    a = (a + x + y) & _MASK
    b = (b + _rot(a, 44)) & _MASK
    return (a + z) & _MASK, (b + c) & _MASK


def fingerprint64(data: bytes) -> int:
    """FarmHash `Fingerprint64` of `data` (an unsigned 64-bit int).

    This is `farmhashna::Hash64`, the fingerprint TensorFlow uses in
    `tf.strings.to_hash_bucket_fast` and in vocabulary tables' OOV buckets.
    It is fixed forever and does not depend on the machine or the run.

    >>> fingerprint64(b"Hello") % 3, fingerprint64(b"TensorFlow") % 3, fingerprint64(b"2.x") % 3
    (0, 2, 2)
    """
    s = bytes(data)
    n = len(s)
    if n <= 16:
        return _hash_len0to16(s)
    if n <= 32:
        return _hash_len17to32(s)
    if n <= 64:
        return _hash_len33to64(s)
    seed = 81
    x = seed
    y = (seed * _K1 + 113) & _MASK
    z = (_shift_mix((y * _K2 + 113) & _MASK) * _K2) & _MASK
    v = (0, 0)
    w = (0, 0)
    x = (x * _K2 + _fetch64(s, 0)) & _MASK
    end = ((n - 1) // 64) * 64
    last64 = n - 64
    i = 0
    while True:
        x = (_rot((x + y + v[0] + _fetch64(s, i + 8)) & _MASK, 37) * _K1) & _MASK
        y = (_rot((y + v[1] + _fetch64(s, i + 48)) & _MASK, 42) * _K1) & _MASK
        x ^= w[1]
        y = (y + v[0] + _fetch64(s, i + 40)) & _MASK
        z = (_rot((z + w[0]) & _MASK, 33) * _K1) & _MASK
        v = _weak_hash32(s, i, (v[1] * _K1) & _MASK, (x + w[0]) & _MASK)
        w = _weak_hash32(s, i + 32, (z + w[1]) & _MASK, (y + _fetch64(s, i + 16)) & _MASK)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = _K1 + ((z & 0xFF) << 1)
    i = last64
    w = ((w[0] + ((n - 1) & 63)) & _MASK, w[1])
    v = ((v[0] + w[0]) & _MASK, v[1])
    w = ((w[0] + v[0]) & _MASK, w[1])
    x = (_rot((x + y + v[0] + _fetch64(s, i + 8)) & _MASK, 37) * mul) & _MASK
    y = (_rot((y + v[1] + _fetch64(s, i + 48)) & _MASK, 42) * mul) & _MASK
    x ^= (w[1] * 9) & _MASK
    y = (y + v[0] * 9 + _fetch64(s, i + 40)) & _MASK
    z = (_rot((z + w[0]) & _MASK, 33) * mul) & _MASK
    v = _weak_hash32(s, i, (v[1] * mul) & _MASK, (x + w[0]) & _MASK)
    w = _weak_hash32(s, i + 32, (z + w[1]) & _MASK, (y + _fetch64(s, i + 16)) & _MASK)
    z, x = x, z
    return _hash_len16(
        (_hash_len16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z) & _MASK,
        (_hash_len16(v[1], w[1], mul) + x) & _MASK,
        mul,
    )


def _token_bytes(token: Any) -> bytes:
    """The bytes TensorFlow hashes for a token: UTF-8 of a string, decimal of an int."""
    if isinstance(token, bytes):
        return token
    if isinstance(token, str):
        return token.encode("utf-8", "surrogateescape")
    return str(int(token)).encode("ascii")


def hash_bucket(token: Any, num_buckets: int) -> int:
    """`fingerprint64(token) % num_buckets`: TensorFlow's `to_hash_bucket_fast`."""
    return fingerprint64(_token_bytes(token)) % num_buckets
