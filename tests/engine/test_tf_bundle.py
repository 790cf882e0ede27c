"""TensorFlow's checkpoint format (engine/tf_bundle): CRC-32C, keys, the index table, round trips,
TF-written fixtures, every corruption we can make, and atomic writes.

The fixtures under tests/fixtures/tf_checkpoints/ were written by TensorFlow
2.15 (make_fixtures.py); their expected values are what TF's own reader
returned. tests/tf_interop/ checks the same things against a live TensorFlow.
"""

import dataclasses
import importlib
import itertools
import json
import math
import os
import pathlib
import signal
import struct
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.checkpoint import CheckpointError
from tpu_embedding_shim.engine.tf_bundle import (
    FULL,
    BundleEntry,
    BundleReader,
    DataLossError,
    NotFoundError,
    SlicedTensor,
    UnimplementedError,
    crc32c,
    data_file,
    data_files,
    delete_bundle,
    index_file,
    list_bundle,
    mask,
    read_bundle,
    read_state,
    unmask,
    write_bundle,
    write_state,
)
from tpu_embedding_shim.engine.tf_bundle import writer as writer_module
from tpu_embedding_shim.engine.tf_bundle.dtypes import from_bfloat16, to_bfloat16
from tpu_embedding_shim.engine.tf_bundle.ordered_code import decode_signed, decode_slice_key, encode_signed, slice_key
from tpu_embedding_shim.engine.tf_bundle.protos import BundleHeader
from tpu_embedding_shim.engine.tf_bundle.state import escape, unescape
from tpu_embedding_shim.engine.tf_bundle.table import build_table, read_table

# The module (the package's attribute `crc32c` is the function of that name).
crc_module = importlib.import_module("tpu_embedding_shim.engine.tf_bundle.crc32c")
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints"
FIXTURE_DIRS = ["saver_v1", "sharded_v1", "tf2_object"]
CASES = itertools.count()  # a fresh directory per hypothesis example
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# CRC-32C ----------------------------------------------------------------------------------------

# RFC 3720 (iSCSI), appendix B.4, and the common check value of "123456789".
RFC_3720 = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (
        bytes(
            [
                0x01,
                0xC0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0x14,
                0,
                0,
                0,
                0,
                0,
                0x04,
                0,
                0,
                0,
                0,
                0x14,
                0,
                0,
                0,
                0x18,
                0x28,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0x02,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ]
        ),
        0xD9963A56,
    ),
    (b"123456789", 0xE3069283),
]


def crc_bitwise(data):
    """The textbook definition, one bit at a time: the reference both implementations must equal."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize(
    "data, expected", RFC_3720, ids=["zeros", "ones", "incrementing", "decrementing", "iscsi", "check"]
)
def test_crc32c_known_vectors(data, expected):
    assert crc_bitwise(data) == expected
    assert crc32c(data) == expected
    assert crc_module.crc32c_numpy(data) == expected


@SETTINGS
@given(st.binary(max_size=3000), st.integers(0, 40000), st.integers(0, 2**32 - 1))
def test_crc32c_numpy_equals_the_definition_and_extends(data, extra, seed):
    # Long inputs take the many-lanes path; `extra` random bytes push them past its thresholds.
    data += np.random.default_rng(seed).integers(0, 256, extra, dtype=np.uint8).tobytes()
    split = seed % (len(data) + 1)
    whole = crc_module.crc32c_numpy(data)
    assert whole == crc_module.crc32c_numpy(data[split:], crc_module.crc32c_numpy(data[:split]))
    if len(data) <= 5000:
        assert whole == crc_bitwise(data)
    else:
        assert whole == crc_module.crc32c_numpy(bytearray(data))  # and the bytewise path on the tail
        assert whole == crc_module.register_bytewise(0xFFFFFFFF, np.frombuffer(data, np.uint8)) ^ 0xFFFFFFFF


@SETTINGS
@given(st.binary(max_size=2000), st.integers(0, 300000), st.integers(0, 2**32 - 1))
def test_crc32c_fast_kernel_equals_numpy(data, extra, seed):
    pytest.importorskip("numba", reason="the numba CRC-32C kernel needs the `fast` extra")
    data += np.random.default_rng(seed).integers(0, 256, extra, dtype=np.uint8).tobytes()
    assert crc_module.crc32c_numba(data) == crc_module.crc32c_numpy(data)
    split = seed % (len(data) + 1)
    assert crc_module.crc32c_numba(data[split:], crc_module.crc32c_numba(data[:split])) == crc_module.crc32c_numpy(data)


def test_crc32c_of_arrays_is_of_their_bytes_in_memory_order():
    table = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert crc32c(table) == crc32c(table.tobytes())
    assert crc32c(table.T) == crc32c(np.ascontiguousarray(table.T).tobytes())


@given(st.integers(0, 2**32 - 1))
def test_mask_is_tensorflows_rotation_and_unmask_inverts_it(crc):
    assert mask(crc) == ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert unmask(mask(crc)) == crc


# Slice keys (OrderedCode) -----------------------------------------------------------------------


def test_slice_keys_are_the_ones_tensorflow_wrote():
    # Read from the index TensorFlow wrote for tests/fixtures/tf_checkpoints/sharded_v1 ([5, 2] in 3 parts).
    assert (
        slice_key("items_shared_embedding", ((2, 2), (0, 2)))
        == b"\x00items_shared_embedding\x00\x01\x01\x02\x82\x82\x80\x82"
    )
    assert (
        slice_key("items_shared_embedding", ((4, 1), (0, 2)))
        == b"\x00items_shared_embedding\x00\x01\x01\x02\x84\x81\x80\x82"
    )
    # OrderedCode's own examples (ordered_code.cc): 0x424242 and -0x800; a whole dimension is -1.
    assert encode_signed(0x424242) == bytes.fromhex("f0424242")
    assert encode_signed(-0x800) == bytes.fromhex("3800")
    assert encode_signed(FULL) == b"\x7f"
    assert slice_key("a\x00\xffb", ((0, 1),))[:8] == b"\x00a\x00\xff\xc3\xbf" + b"b\x00"


@given(st.integers(-(2**63), 2**63 - 1))
def test_signed_numbers_round_trip(value):
    encoded = encode_signed(value)
    assert decode_signed(encoded + b"\x80\x00", 0) == (value, len(encoded))
    assert 1 <= len(encoded) <= 10


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=20, unique=True))
def test_signed_encoding_sorts_like_the_numbers(values):
    assert sorted(values, key=encode_signed) == sorted(values)


@given(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20),
    st.lists(st.tuples(st.integers(0, 2**40), st.integers(-1, 2**40)), max_size=4),
)
def test_slice_keys_round_trip(name, extents):
    key = slice_key(name, tuple(extents))
    assert key.startswith(b"\x00")
    assert decode_slice_key(key) == (name, tuple(extents))


# The index table --------------------------------------------------------------------------------


@SETTINGS
@given(st.dictionaries(st.binary(min_size=1, max_size=60), st.binary(max_size=300), max_size=150))
def test_table_round_trip(entries):
    pairs = [(b"", b"header")] + sorted(entries.items())
    data = build_table(pairs)
    assert read_table(data, "t.index") == pairs
    assert struct.unpack("<Q", data[-8:])[0] == 0xDB4775248B80FB57


def test_table_refuses_unsorted_keys():
    with pytest.raises(ValueError, match="strictly increasing"):
        build_table([(b"b", b""), (b"a", b"")])


# Round trips ------------------------------------------------------------------------------------

NUMERIC = [
    "float32",
    "float64",
    "float16",
    "int32",
    "int64",
    "bool",
    "int8",
    "int16",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "complex64",
    "complex128",
]
names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=24)
shapes = st.lists(st.integers(0, 5), max_size=3).map(tuple)


@st.composite
def tensors(draw):
    """(value to write, dtype override or None, expected read value)."""
    kind = draw(st.sampled_from(NUMERIC + ["bfloat16", "string", "str"]))
    shape = draw(shapes)
    count = math.prod(shape)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "string":
        value = np.array(draw(st.lists(st.binary(max_size=12), min_size=count, max_size=count)) or [], dtype=object)
        value = value.reshape(shape)
        return value, None, value
    if kind == "str":
        texts = draw(
            st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), min_size=count, max_size=count)
        )
        value = np.array(texts, dtype=object).reshape(shape) if count else np.zeros(shape, dtype=object)
        expected = np.array([t.encode() for t in texts], dtype=object).reshape(shape) if count else value
        return value, None, expected
    if kind == "bfloat16":
        bits = rng.integers(0, 2**16, count, dtype=np.uint16)
        nan = ((bits & 0x7F80) == 0x7F80) & ((bits & 0x7F) != 0)
        bits[nan] = (bits[nan] & 0x8000) | 0x7FC0  # a NaN is stored as TF's quiet NaN
        value = from_bfloat16(bits).reshape(shape)  # exactly representable: read back bit for bit
        return value, "bfloat16", value
    raw = rng.integers(0, 256, count * np.dtype(kind).itemsize, dtype=np.uint8)
    value = raw.view(kind).reshape(shape) if kind != "bool" else (raw % 2).astype(bool).reshape(shape)
    return value, None, value


def assert_same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    if want.dtype == object:
        assert got.dtype == object and got.tolist() == want.tolist()
    else:
        assert got.dtype == want.dtype.newbyteorder("=")
        assert got.tobytes() == np.ascontiguousarray(want, want.dtype.newbyteorder("=")).tobytes()  # NaN bits too


@SETTINGS
@given(st.dictionaries(names, tensors(), min_size=1, max_size=8), st.integers(1, 3), st.sampled_from("<>"))
def test_round_trip_every_dtype_and_shape(tmp_path, contents, num_shards, byteorder):
    prefix = str(tmp_path / f"rt-{next(CASES)}" / "model.ckpt-1")
    values = {name: value for name, (value, _, _) in contents.items()}
    overrides = {name: dtype for name, (_, dtype, _) in contents.items() if dtype}
    write_bundle(prefix, values, dtypes=overrides, num_shards=num_shards, byteorder=byteorder)
    reader = BundleReader(prefix)
    assert sorted(reader.names()) == sorted(contents)
    assert len(data_files(prefix)) == num_shards
    for name, (_, dtype, expected) in contents.items():
        assert reader.shape(name) == expected.shape
        if dtype == "bfloat16":
            assert reader.dtype_name(name) == "bfloat16"
        assert_same(reader.read(name), expected)
        assert_same(reader.read(name, mmap=True), expected)


@st.composite
def partitioned(draw):
    """A table, and a SlicedTensor of it: cut into row blocks, and (sometimes) each block into column blocks."""
    rows, cols = draw(st.integers(0, 12)), draw(st.integers(1, 5))
    dtype = draw(st.sampled_from(["float32", "float16", "int64", "bool"]))  # float16: TF itself can't read these
    table = (np.arange(rows * cols).reshape(rows, cols) + draw(st.integers(0, 100))).astype(dtype)
    row_cuts = sorted(set(draw(st.lists(st.integers(0, rows), max_size=4))) | {0, rows})
    col_cuts = sorted(set(draw(st.lists(st.integers(0, cols), max_size=2))) | {0, cols})
    parts = []
    for r0, r1 in itertools.pairwise(row_cuts):
        if len(col_cuts) == 2 and draw(st.booleans()):
            parts.append((((r0, r1 - r0), (0, FULL)), table[r0:r1]))
            continue
        for c0, c1 in itertools.pairwise(col_cuts):
            parts.append((((r0, r1 - r0), (c0, c1 - c0)), table[r0:r1, c0:c1]))
    assume(parts)
    draw(st.randoms()).shuffle(parts)
    return table, SlicedTensor(table.shape, parts)


@SETTINGS
@given(st.dictionaries(names, partitioned(), min_size=1, max_size=3), st.integers(1, 3))
def test_round_trip_sliced_tensors(tmp_path, contents, num_shards):
    prefix = str(tmp_path / f"sl-{next(CASES)}" / "ckpt")
    write_bundle(prefix, {name: sliced for name, (_, sliced) in contents.items()}, num_shards=num_shards)
    reader = BundleReader(prefix)
    assert sorted(reader.names()) == sorted(contents)  # slice keys are not names
    for name, (table, _) in contents.items():
        assert_same(reader.read(name), table)


def test_large_tables_are_memory_mapped_copy_on_write(tmp_path):
    table = np.random.default_rng(0).standard_normal((300_000, 4)).astype(np.float32)  # 4.8 MB
    prefix = str(tmp_path / "big")
    write_bundle(prefix, {"emb": table, "small": table[:2]})
    reader = BundleReader(prefix)
    mapped = reader.read("emb")
    assert isinstance(mapped, np.memmap) and mapped.flags.writeable
    assert_same(mapped, table)
    assert not isinstance(reader.read("small"), np.memmap)
    assert not isinstance(reader.read("emb", mmap=False), np.memmap)
    mapped[0] = 7.0  # changes the array only, never the checkpoint
    assert_same(BundleReader(prefix).read("emb"), table)


def test_large_table_streamed_in_blocks_and_stored_as_bfloat16(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "_BLOCK_BYTES", 4096)  # many blocks per tensor
    table = np.random.default_rng(1).standard_normal((5000, 3)).astype(np.float32)
    prefix = str(tmp_path / "blocks")
    write_bundle(prefix, {"t": table, "b": table, "t_f": np.asfortranarray(table)}, dtypes={"b": "bfloat16"})
    reader = BundleReader(prefix)
    assert_same(reader.read("t"), table)
    assert_same(reader.read("t_f"), table)
    assert_same(reader.read("b"), from_bfloat16(to_bfloat16(table)).reshape(table.shape))


def test_bfloat16_rounds_to_nearest_even():
    values = np.array(
        [1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -0.0, np.inf, -np.inf, 3e38, 1e-40], dtype=np.float32
    )
    expected = [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x8000, 0x7F80, 0xFF80, 0x7F62, 0x0001]
    assert to_bfloat16(values).tolist() == expected
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA12345, 0x7FFFFFFF], np.uint32)
    assert to_bfloat16(nans.view(np.float32)).tolist() == [0x7FC0, 0xFFC0, 0x7FC0, 0xFFC0, 0x7FC0, 0x7FC0]  # as TF


def test_read_bundle_list_bundle_and_delete(tmp_path):
    prefix = str(tmp_path / "m")
    write_bundle(prefix, {"b": np.zeros(2, np.int32), "a/x": np.bytes_(b"hi")}, num_shards=2)
    assert list_bundle(prefix) == [("a/x", "string", ()), ("b", "int32", (2,))]
    assert set(read_bundle(prefix)) == {"a/x", "b"}
    delete_bundle(prefix)
    assert os.listdir(tmp_path) == []


# TensorFlow-written fixtures --------------------------------------------------------------------


def fixture(directory):
    meta = json.loads((FIXTURES / directory / "expected.json").read_text())
    with np.load(FIXTURES / directory / "expected.npz", allow_pickle=False) as arrays:
        expected = {name: (info["dtype"], info["shape"], arrays[info["key"]]) for name, info in meta["tensors"].items()}
    return meta["latest"], expected


@pytest.mark.parametrize("directory", FIXTURE_DIRS)
def test_reads_what_tensorflow_wrote(directory):
    latest, expected = fixture(directory)
    state = read_state(FIXTURES / directory)
    assert os.path.basename(state.model_checkpoint_path) == latest
    reader = BundleReader(state.model_checkpoint_path)
    assert sorted(reader.names()) == sorted(expected)
    for name, (dtype, shape, want) in expected.items():
        assert (reader.dtype_name(name), list(reader.shape(name))) == (dtype, shape), name
        got = reader.read(name)
        if dtype == "string":
            assert got.tolist() == np.asarray(want, dtype=object).tolist(), name
        else:
            assert_same(got, want)


def test_fixtures_cover_slices_shards_and_every_dtype():
    saver = BundleReader(FIXTURES / "saver_v1" / "model.ckpt-42")
    assert {saver.dtype_name(n) for n in saver.names()} >= {
        "float32",
        "float64",
        "float16",
        "bfloat16",
        "int32",
        "int64",
        "bool",
        "string",
    }
    assert len(saver.entry("input_layer/user_embedding/embedding_weights").slices) == 3
    sharded = BundleReader(FIXTURES / "sharded_v1" / "model.ckpt-7")
    assert sharded.header.num_shards == 3
    table = sharded.entry("items_shared_embedding")
    shards = {sharded.slice_entry("items_shared_embedding", s).shard_id for s in table.slices}
    assert shards == {0, 1, 2}  # one table, assembled from three data files
    assert BundleReader(FIXTURES / "tf2_object" / "ckpt-1").dtype_name("_CHECKPOINTABLE_OBJECT_GRAPH") == "string"


def test_rewriting_a_tensorflow_checkpoint_keeps_every_value(tmp_path):
    for directory in FIXTURE_DIRS:
        source = BundleReader(read_state(FIXTURES / directory).model_checkpoint_path)
        values = source.read_all()
        dtypes = {n: source.dtype_name(n) for n in source.names() if source.dtype_name(n) == "bfloat16"}
        copy = str(tmp_path / directory / "copy")
        write_bundle(copy, values, dtypes=dtypes)
        again = BundleReader(copy)
        for name in source.names():
            assert again.dtype_name(name) == source.dtype_name(name)
            assert_same(again.read(name), values[name])


# Errors -----------------------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path):
    prefix = str(tmp_path / "model.ckpt-1")
    write_bundle(
        prefix,
        {
            "emb": np.arange(12, dtype=np.float32).reshape(4, 3),
            "names": np.array([b"a", b"bc"], object),
            "part": SlicedTensor(
                (4, 1), [(((0, 2), (0, FULL)), np.ones((2, 1))), (((2, 2), (0, FULL)), np.zeros((2, 1)))]
            ),
        },
    )
    return prefix


def read_everything(prefix):
    reader = BundleReader(prefix)
    return {name: reader.read(name) for name in reader.names()}


def rewrite_index(prefix, change):
    """Rewrites `prefix`'s index with `change(key, BundleEntry) -> BundleEntry` (a valid table, CRCs and all)."""
    pairs = read_table(pathlib.Path(index_file(prefix)).read_bytes(), "index")
    pairs = [pairs[0]] + [(key, change(key, BundleEntry.decode(value)).encode()) for key, value in pairs[1:]]
    pathlib.Path(index_file(prefix)).write_bytes(build_table(pairs))


def test_missing_checkpoint_is_not_found(tmp_path):
    with pytest.raises(NotFoundError, match=r"No checkpoint at .*nope.*nope\.index does not exist") as info:
        BundleReader(tmp_path / "nope")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, CheckpointError)


def test_missing_data_file_is_not_found(small):
    os.remove(data_file(small, 0, 1))
    reader = BundleReader(small)  # the index alone opens, as in TensorFlow
    with pytest.raises(NotFoundError, match=r"data-00000-of-00001 of tensor 'emb' does not exist"):
        reader.read("emb")


def test_unknown_tensor_is_not_found(small):
    with pytest.raises(NotFoundError, match=r"Key 'nope' not found in checkpoint .*model\.ckpt-1"):
        BundleReader(small).read("nope")


@pytest.mark.parametrize("keep", [0, 10, 47, -1, -9])
def test_truncated_index_is_data_loss(small, keep):
    path = index_file(small)
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[:keep] if keep >= 0 else data[: len(data) + keep])
    with pytest.raises(DataLossError, match=r"model\.ckpt-1\.index"):
        BundleReader(small)


def test_truncated_data_is_data_loss_naming_file_and_tensor(small):
    path = data_file(small, 0, 1)
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[:-3])
    with pytest.raises(DataLossError, match=r"data-00000-of-00001: tensor 'names'.*truncated"):
        read_everything(small)


def test_crc_mismatch_is_data_loss_naming_file_and_tensor(small):
    reader = BundleReader(small)
    offset = reader.entry("emb").offset
    path = data_file(small, 0, 1)
    data = bytearray(pathlib.Path(path).read_bytes())
    data[offset + 5] ^= 0x01
    pathlib.Path(path).write_bytes(bytes(data))
    with pytest.raises(DataLossError, match=r"data-00000-of-00001: tensor 'emb': checksum does not match"):
        BundleReader(small).read("emb")
    assert BundleReader(small, verify=False).read("emb")[0, 1] != 1.0  # the flipped bit, read unchecked


def test_corrupt_string_lengths_are_data_loss(small):
    reader = BundleReader(small)
    offset = reader.entry("names").offset
    path = data_file(small, 0, 1)
    data = bytearray(pathlib.Path(path).read_bytes())
    data[offset] = 3  # a length
    pathlib.Path(path).write_bytes(bytes(data))
    with pytest.raises(DataLossError, match=r"tensor 'names': the string length checksum does not match"):
        BundleReader(small).read("names")


@pytest.mark.parametrize("code, name", [(99, "unknown dtype 99"), (21, "variant"), (11, "qint8")])
def test_unknown_dtype_is_unimplemented_naming_the_tensor(small, code, name):
    rewrite_index(small, lambda key, entry: dataclasses.replace(entry, dtype=code) if key == b"emb" else entry)
    reader = BundleReader(small)
    assert reader.dtype_name("emb") == name
    with pytest.raises(UnimplementedError, match=rf"model\.ckpt-1'.*tensor 'emb' has dtype {name}"):
        reader.read("emb")
    assert reader.read("names").tolist() == [b"a", b"bc"]  # the rest still reads


def test_wrong_size_in_an_entry_is_data_loss(small):
    rewrite_index(small, lambda key, entry: dataclasses.replace(entry, size=entry.size + 4) if key == b"emb" else entry)
    with pytest.raises(DataLossError, match=r"tensor 'emb' \(float32 \[4, 3\]\) has a stored size of 52 bytes"):
        BundleReader(small).read("emb")


def test_slices_that_overlap_or_leave_holes_are_data_loss(small):
    def overlap(key, entry):
        slices = (((0, 2), (0, FULL)), ((1, 2), (0, FULL)))
        return dataclasses.replace(entry, slices=slices) if key == b"part" else entry

    rewrite_index(small, overlap)
    with pytest.raises(DataLossError, match=r"slice \[1:3, :\] of tensor 'part' overlaps"):
        BundleReader(small).read("part")

    def hole(key, entry):
        return dataclasses.replace(entry, slices=(((0, 2), (0, FULL)),)) if key == b"part" else entry

    rewrite_index(small, hole)
    with pytest.raises(DataLossError, match=r"slices of tensor 'part' cover 2 of its 4 elements"):
        BundleReader(small).read("part")


def test_a_newer_format_is_unimplemented(small):
    pairs = read_table(pathlib.Path(index_file(small)).read_bytes(), "index")
    pairs[0] = (b"", BundleHeader(min_consumer=2).encode())
    pathlib.Path(index_file(small)).write_bytes(build_table(pairs))
    with pytest.raises(UnimplementedError, match="consumer version >= 2"):
        BundleReader(small)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_flipped_byte_is_caught_or_harmless(tmp_path_factory, data):
    """A flipped byte anywhere in the index or a data file: DataLossError / NotFoundError / UnimplementedError,
    or (the footer's padding, which no CRC covers) the very same values."""
    directory = tmp_path_factory.mktemp("flip")
    prefix = str(directory / "m")
    write_bundle(
        prefix,
        {
            "emb": np.arange(40, dtype=np.float32).reshape(10, 4),
            "s": np.array([b"ab", b"c"], object),
            "step": np.int64(3),
            "p": SlicedTensor((3,), [(((0, 1),), np.ones(1)), (((1, 2),), np.zeros(2))]),
        },
        num_shards=2,
    )
    original = read_everything(prefix)
    path = data.draw(st.sampled_from([index_file(prefix)] + data_files(prefix)))
    content = bytearray(pathlib.Path(path).read_bytes())
    position = data.draw(st.integers(0, len(content) - 1))
    content[position] ^= data.draw(st.integers(1, 255))
    pathlib.Path(path).write_bytes(bytes(content))
    try:
        values = read_everything(prefix)
    except (DataLossError, NotFoundError, UnimplementedError):
        return
    assert set(values) == set(original)
    for name in original:
        assert_same(values[name], original[name])


# Writer checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tensors, kwargs, error, match",
    [
        ({"": np.ones(1)}, {}, ValueError, "non-empty strings"),
        ({1: np.ones(1)}, {}, ValueError, "non-empty strings"),
        ({"bad\ud800": np.ones(1)}, {}, ValueError, "can't be UTF-8 encoded"),
        ({"o": np.array([1, "a"], object)}, {}, TypeError, "holding int"),
        ({"d": np.array(["2020-01-01"], "datetime64[D]")}, {}, TypeError, "has no TensorFlow checkpoint dtype"),
        ({"x": np.ones(2)}, {"dtypes": {"x": "float8"}}, ValueError, r"`dtypes\['x'\]` must be one of"),
        ({"x": np.ones(2)}, {"dtypes": {"y": "float16"}}, ValueError, "names tensors that are not written"),
        ({"x": np.array([b"a"], object)}, {"dtypes": {"x": "bfloat16"}}, TypeError, "can't be stored as bfloat16"),
        ({"x": np.ones(2)}, {"num_shards": 0}, ValueError, r"`num_shards` must be an int in \[1, 99999\]"),
        ({"x": np.ones(2)}, {"byteorder": "="}, ValueError, "`byteorder` must be"),
        ({"p": SlicedTensor((4,), [(((0, 3),), np.ones(3)), (((2, 2),), np.ones(2))])}, {}, ValueError, "overlaps"),
        ({"p": SlicedTensor((4,), [(((0, 3),), np.ones(3))])}, {}, ValueError, "cover 3 of its 4 elements"),
        ({"p": SlicedTensor((4,), [(((2, 3),), np.ones(3))])}, {}, ValueError, "outside the shape"),
        ({"p": SlicedTensor((4,), [(((0, 4),), np.ones(3))])}, {}, ValueError, "values of shape"),
        ({"p": SlicedTensor((4, 1), [(((0, 4),), np.ones(4))])}, {}, ValueError, "has 1 extents"),
        (
            {"p": SlicedTensor((2,), [(((0, 1),), np.ones(1)), (((1, 1),), np.ones(1, np.int32))])},
            {},
            TypeError,
            "different dtypes",
        ),
        ({"p": SlicedTensor((2,), [])}, {}, ValueError, "has no parts"),
    ],
    ids=lambda v: None,
)
def test_bad_input_is_refused_before_anything_is_written(tmp_path, tensors, kwargs, error, match):
    with pytest.raises(error, match=match):
        write_bundle(str(tmp_path / "sub" / "m"), tensors, **kwargs)
    assert not (tmp_path / "sub").exists() or os.listdir(tmp_path / "sub") == []


# Atomic writes and the state file ---------------------------------------------------------------


def first_checkpoint(directory):
    prefix = str(directory / "model.ckpt-1")
    write_bundle(prefix, {"w": np.full(3, 1.0, np.float32)}, update_state=True)
    return prefix


@pytest.mark.parametrize("failure", ["data", "index", "rename", "fsync"])
def test_a_failed_write_leaves_no_checkpoint_and_the_old_state(tmp_path, monkeypatch, failure):
    old = first_checkpoint(tmp_path)
    state_before = (tmp_path / "checkpoint").read_bytes()
    if failure == "data":
        calls = []

        def write_data(path, items, byteorder):
            calls.append(path)
            if len(calls) == 2:
                raise OSError("disk full")
            original_write_data(path, items, byteorder)

        original_write_data = writer_module._write_data
        monkeypatch.setattr(writer_module, "_write_data", write_data)
    elif failure == "index":
        monkeypatch.setattr(writer_module, "build_table", lambda pairs: (_ for _ in ()).throw(OSError("disk full")))
    elif failure == "rename":
        real_replace = os.replace

        def replace(src, dst):
            if dst.endswith(".index"):
                raise OSError("rename failed")
            real_replace(src, dst)

        monkeypatch.setattr(writer_module.os, "replace", replace)
    else:
        monkeypatch.setattr(writer_module.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("I/O error")))
    with pytest.raises(OSError):
        write_bundle(
            str(tmp_path / "model.ckpt-2"), {"w": np.full(3, 2.0, np.float32)}, num_shards=2, update_state=True
        )
    monkeypatch.undo()
    assert (tmp_path / "checkpoint").read_bytes() == state_before
    assert not os.path.exists(index_file(str(tmp_path / "model.ckpt-2")))
    assert not [name for name in os.listdir(tmp_path) if "tempstate" in name]
    assert read_state(tmp_path).model_checkpoint_path == old
    assert BundleReader(old).read("w").tolist() == [1.0, 1.0, 1.0]


def test_update_state_records_the_latest_and_keeps_the_others(tmp_path):
    first = first_checkpoint(tmp_path)
    second = write_bundle(str(tmp_path / "model.ckpt-2"), {"w": np.zeros(1)}, update_state=True)
    state = read_state(tmp_path)
    assert state.model_checkpoint_path == second and state.all_model_checkpoint_paths == (first, second)
    assert (tmp_path / "checkpoint").read_text() == (
        'model_checkpoint_path: "model.ckpt-2"\n'
        'all_model_checkpoint_paths: "model.ckpt-1"\nall_model_checkpoint_paths: "model.ckpt-2"\n'
    )


def test_the_state_file_has_ordinary_permissions_and_an_unreadable_one_is_replaced(tmp_path):
    first_checkpoint(tmp_path)
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "checkpoint").st_mode & 0o777 == 0o666 & ~umask
    (tmp_path / "checkpoint").write_text("not a state file")
    second = write_bundle(str(tmp_path / "model.ckpt-2"), {"w": np.zeros(1)}, update_state=True)
    assert read_state(tmp_path).all_model_checkpoint_paths == (second,)


def test_overwriting_a_prefix_replaces_it_and_removes_stale_shards(tmp_path):
    prefix = str(tmp_path / "m")
    write_bundle(prefix, {"a": np.ones(2), "b": np.ones(2), "c": np.ones(2)}, num_shards=3)
    write_bundle(prefix, {"a": np.zeros(2)})
    assert data_files(prefix) == [data_file(prefix, 0, 1)]
    assert read_bundle(prefix)["a"].tolist() == [0.0, 0.0]


CRASH_CODE = 17


def _dying_at(k, real):
    """`real`, except that its k-th call ends the process first (os._exit, no cleanup)."""
    calls = [0]

    def dying(*args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            os._exit(CRASH_CODE)
        return real(*args, **kwargs)

    return dying


@pytest.mark.skipif(not (hasattr(os, "fork") and hasattr(signal, "SIGKILL")), reason="needs fork (POSIX)")
def test_a_crash_at_any_step_of_a_write_never_leaves_a_half_written_checkpoint(tmp_path):
    """The child dies (os._exit, no cleanup) right before the k-th fsync / rename / remove of a save; after
    each death every checkpoint with an index reads and verifies, and the state file names a readable one."""
    hooks = ["fsync", "replace", "remove"]
    for hook in hooks:
        for k in range(1, 8):
            directory = tmp_path / f"{hook}-{k}"
            directory.mkdir()
            first_checkpoint(directory)
            # The second save overwrites ckpt-1 with new values in 2 shards, then saves ckpt-2.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                try:
                    setattr(writer_module.os, hook, _dying_at(k, getattr(os, hook)))
                    write_bundle(str(directory / "model.ckpt-1"), {"w": np.full(3, 5.0, np.float32)}, num_shards=2)
                    write_bundle(str(directory / "model.ckpt-2"), {"w": np.full(3, 2.0, np.float32)}, update_state=True)
                finally:
                    os._exit(0)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, CRASH_CODE)
            for name in os.listdir(directory):
                if name.endswith(".index"):
                    values = read_everything(str(directory / name[: -len(".index")]))
                    assert values["w"].tolist() in ([1.0] * 3, [5.0] * 3, [2.0] * 3)
            state = read_state(directory)
            if os.path.exists(index_file(state.model_checkpoint_path)):
                read_everything(state.model_checkpoint_path)
            else:  # only ckpt-1 being replaced can be missing, and only while it is
                assert state.model_checkpoint_path.endswith("model.ckpt-1")


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_state_file_strings_round_trip(text):
    assert unescape(escape(text)) == text
    assert all(32 <= ord(c) < 127 for c in escape(text))


def test_state_file_as_tensorflow_writes_it(tmp_path):
    # tf.train.CheckpointManager's file: timestamps, absolute and relative paths, octal escapes.
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "caf\\303\\251/ckpt-2"\n'
        'all_model_checkpoint_paths: "/abs/ckpt-1"\n'
        'all_model_checkpoint_paths: "caf\\303\\251/ckpt-2"\n'
        "all_model_checkpoint_timestamps: 1700000000.5\n"
        "all_model_checkpoint_timestamps: 1700000001.25\n"
        "last_preserved_timestamp: 1699999999.0\n"
    )
    state = read_state(tmp_path)
    assert state.model_checkpoint_path == str(tmp_path / "caf\u00e9" / "ckpt-2")
    assert state.all_model_checkpoint_paths == ("/abs/ckpt-1", str(tmp_path / "caf\u00e9" / "ckpt-2"))
    write_state(tmp_path, str(tmp_path / 'we"ird\nname'), [])
    assert read_state(tmp_path).model_checkpoint_path == str(tmp_path / 'we"ird\nname')
    (tmp_path / "checkpoint").write_text("model_checkpoint_path: {oops}\n")
    with pytest.raises(DataLossError, match="model_checkpoint_path must be a quoted string"):
        read_state(tmp_path)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path "no colon"\n')
    with pytest.raises(DataLossError, match="not a checkpoint state file"):
        read_state(tmp_path)
    assert read_state(tmp_path / "missing") is None


def test_numeric_tensors_start_on_a_cache_line(tmp_path):
    """The writer pads to 64 bytes before each numeric tensor (numpy copies an aligned table about twice as
    fast); the padding is never read, and every value reads back."""
    tensors = {
        "a_step": np.int64(7),
        "b_name": np.array([b"x" * 5]),
        "c_table": np.arange(30, dtype=np.float32),
        "d_half": np.ones(3, np.float16),
        "e_table": np.arange(12, dtype=np.float64).reshape(3, 4),
    }
    prefix = write_bundle(str(tmp_path / "model.ckpt-1"), tensors)
    reader = BundleReader(prefix)
    for name in ("a_step", "c_table", "d_half", "e_table"):
        assert reader.entry(name).offset % 64 == 0, name
    for name, value in read_bundle(prefix).items():
        np.testing.assert_array_equal(value, tensors[name])
