"""FarmHash Fingerprint64: TensorFlow hashes OOV tokens with it (`to_hash_bucket_fast`)."""

from __future__ import annotations

import ctypes

import pytest

from tpu_embedding_shim.engine.farmhash import fingerprint64, hash_bucket


def _signed(x):
    return ctypes.c_int64(x).value


@pytest.mark.parametrize(
    "data,expected",
    [
        (b"", -7286425919675154353),  # the constant k2
        (b"test", 8581389452482819506),
        (b"test" * 8, -4196240717365766262),  # 32 bytes
        (b"test" * 64, 3500507768004279527),  # 256 bytes
        (b"alphabet", -2427165924636348523),  # BigQuery FARM_FINGERPRINT
        (b"1footrue", -1541654101129638711),
        (b"2applefalse", 2794438866806483259),
        (b"3true", -4880158226897771312),
        (b"Amazon Redshift", 8085098817162212970),
        (b"F7479877-4690-4A44-AFC9-8FE987EA512F:some_other_id", 6862335115798125349),  # 50 bytes
    ],
)
def test_fingerprint64_published_values(data, expected):
    assert _signed(fingerprint64(data)) == expected


def test_fingerprint64_every_length_up_to_3200_bytes():
    """Guava's cross-check against the C++ reference: hashes of buffers of every
    length up to 3200 bytes folded into one number."""
    mask = (1 << 64) - 1

    def remix(h):
        h ^= h >> 41
        return (h * 949921979) & mask

    def char(h):
        return ord("a") + ((h & 0xFFFFF) % 26)

    # Four hashes per round i, of prefixes of length i, i^2 % n, i^3 % n and n
    # (n = bytes written so far, read at each hash).
    lengths = (lambda i, n: i, lambda i, n: i * i % n, lambda i, n: i * i * i % n, lambda i, n: n)
    buf, n, h = bytearray(3200), 0, 0
    for i in range(800):
        for length in lengths:
            h = remix(h ^ fingerprint64(bytes(buf[: length(i, n)])))
            buf[n] = char(h)
            n += 1
        x0, x1, x2, x3 = buf[n - 1], buf[n - 2], buf[n - 3], buf[n // 2]
        buf[((x0 << 16) + (x1 << 8) + x2) % n] ^= x3
        buf[((x1 << 16) + (x2 << 8) + x3) % n] ^= i % 256
    assert h == 0x7A1D67C50EC7E167


def test_hash_bucket_matches_tf_docs_example():
    # tf.strings.to_hash_bucket_fast(["Hello", "TensorFlow", "2.x"], 3) -> [0, 2, 2]
    assert [hash_bucket(t, 3) for t in ("Hello", "TensorFlow", "2.x")] == [0, 2, 2]
    assert hash_bucket(b"Hello", 3) == hash_bucket("Hello", 3)
    assert hash_bucket(42, 7) == hash_bucket("42", 7)
