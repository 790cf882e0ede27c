"""`BundleReader.read_rows`: some rows of a tensor, plain or saved as slices, equal to `read(name)[rows]` bit
for bit, read without the rest (memory bounded by the rows plus one chunk), with `read`'s errors."""

import itertools
import os
import pathlib
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.tf_bundle import (
    FULL,
    BundleReader,
    DataLossError,
    NotFoundError,
    SlicedTensor,
    data_file,
    write_bundle,
)

CASES = itertools.count()  # a fresh directory per hypothesis example
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def stored(draw):
    """(table, what to write): a random N-D tensor (rows = first axis), whole or cut into slices the way a
    writer cuts it: row slices (one per host, `div` or `mod` order alike), sometimes columns too."""
    rows = draw(st.integers(0, 40))
    inner = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
    dtype = draw(st.sampled_from(["float32", "float64", "int64", "uint8", "bool", "bfloat16"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = rows * int(np.prod(inner))
    if dtype == "bfloat16":
        table = (rng.integers(0, 2**15, count, dtype=np.uint32) << 16).view(np.float32)  # exact in bfloat16
    elif dtype == "bool":
        table = rng.integers(0, 2, count).astype(bool)
    else:
        table = rng.integers(0, 256, count * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)  # NaN bits too
    table = table.reshape((rows, *inner))
    override = {"t": "bfloat16"} if dtype == "bfloat16" else {}
    if rows == 0 or not draw(st.booleans()):
        return table, table, override
    row_cuts = sorted(set(draw(st.lists(st.integers(0, rows), max_size=5))) | {0, rows})
    parts = []
    for r0, r1 in itertools.pairwise(row_cuts):
        if inner and draw(st.booleans()):  # this row block cut into column blocks too
            c = draw(st.integers(0, inner[0]))
            for c0, c1 in ((0, c), (c, inner[0])):
                if c1 > c0:
                    box = ((r0, r1 - r0), (c0, c1 - c0)) + ((0, FULL),) * (len(inner) - 1)
                    parts.append((box, table[r0:r1, c0:c1]))
        else:
            parts.append((((r0, r1 - r0),) + ((0, FULL),) * len(inner), table[r0:r1]))
    draw(st.randoms()).shuffle(parts)
    return table, SlicedTensor(table.shape, parts), override


@st.composite
def requests(draw, rows):
    """Rows to ask for: a run, or indices (a `mod` rank's ids r, r + W, ..., or any, repeats and order)."""
    kind = draw(st.sampled_from(["run", "strided", "any"]))
    if kind == "run":
        start = draw(st.integers(0, rows))
        return slice(start, draw(st.integers(start, rows)))
    if rows == 0:
        return np.zeros(0, np.int64)
    if kind == "strided":
        world = draw(st.integers(1, 5))
        return np.arange(draw(st.integers(0, world - 1)), rows, world)
    return np.array(
        draw(st.lists(st.integers(0, rows - 1), max_size=30)), dtype=draw(st.sampled_from(["int64", "int32"]))
    )


@SETTINGS
@given(st.data(), stored(), st.integers(1, 3), st.sampled_from("<>"), st.sampled_from([1, 7, 64, 1 << 22]))
def test_read_rows_equals_read_then_index_bit_for_bit(tmp_path, data, case, num_shards, byteorder, buffer):
    table, value, override = case
    prefix = str(tmp_path / f"rows-{next(CASES)}" / "ckpt")
    write_bundle(prefix, {"t": value}, dtypes=override, num_shards=num_shards, byteorder=byteorder)
    rows = data.draw(requests(len(table)))
    for verify in (True, False):
        reader = BundleReader(prefix, verify=verify)
        want = reader.read("t")[rows]
        got = reader.read_rows("t", rows, buffer=buffer)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_strings_are_read_whole_then_indexed(tmp_path):
    prefix = str(tmp_path / "ckpt")
    write_bundle(prefix, {"s": np.array([b"a", b"bc", b"", b"d"], dtype=object)})
    assert BundleReader(prefix).read_rows("s", [3, 0]).tolist() == [b"d", b"a"]
    assert BundleReader(prefix).read_rows("s", slice(1, 3)).tolist() == [b"bc", b""]


@pytest.fixture
def sliced(tmp_path):
    """A [10, 3] float32 table saved as two row slices (two hosts), in two data files."""
    prefix = str(tmp_path / "model.ckpt-1")
    table = np.arange(30, dtype=np.float32).reshape(10, 3)
    parts = [(((0, 5), (0, FULL)), table[:5]), (((5, 5), (0, FULL)), table[5:])]
    write_bundle(prefix, {"t": SlicedTensor((10, 3), parts), "step": np.int64(1)}, num_shards=2)
    return prefix


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (slice(0, 11), r"must lie in \[0, 10\].*Received: \[0, 11\)"),
        (slice(3, 2), r"must lie in \[0, 10\].*Received: \[3, 2\)"),
        (slice(0, 10, 2), r"step 1.*step of 2"),
        ([0, 10], r"row indices in \[0, 10\).*Received: 10"),
        ([-1], r"row indices in \[0, 10\).*Received: -1"),
        (np.zeros((2, 2), np.int64), r"1-D array of int row indices"),
        ([0.5], r"1-D array of int row indices.*float64"),
    ],
)
def test_rows_out_of_range_or_not_rows_are_value_errors(sliced, rows, match):
    with pytest.raises(ValueError, match=r"tensor 't': argument `rows` .*" + match):
        BundleReader(sliced).read_rows("t", rows)


def test_a_scalar_has_no_rows_and_a_missing_tensor_is_not_found(sliced):
    with pytest.raises(ValueError, match=r"tensor 'step' is a scalar"):
        BundleReader(sliced).read_rows("step", [0])
    with pytest.raises(NotFoundError, match=r"Key 'nope' not found"):
        BundleReader(sliced).read_rows("nope", [0])


def flip_a_byte(prefix, shard, at):
    path = pathlib.Path(data_file(prefix, shard, 2))
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_corrupt_slice_is_data_loss_when_touched_only(sliced):
    entry = BundleReader(sliced).slice_entry("t", ((5, 5), (0, FULL)))
    flip_a_byte(sliced, entry.shard_id, entry.offset + 4 * 14)  # the last row of the second slice
    reader = BundleReader(sliced)
    assert reader.read_rows("t", slice(0, 5)).tolist() == np.arange(15, dtype=np.float32).reshape(5, 3).tolist()
    with pytest.raises(DataLossError, match=r"slice \[5:10, :\] of tensor 't': checksum does not match"):
        reader.read_rows("t", [5])  # the slice is checked whole, not only the row asked for
    assert BundleReader(sliced, verify=False).read_rows("t", [5]).tolist() == [[15.0, 16.0, 17.0]]


def test_a_truncated_data_file_is_data_loss(sliced):
    entry = BundleReader(sliced).slice_entry("t", ((5, 5), (0, FULL)))
    path = pathlib.Path(data_file(sliced, entry.shard_id, 2))
    path.write_bytes(path.read_bytes()[: entry.offset + entry.size - 3])
    with pytest.raises(DataLossError, match=r"slice \[5:10, :\] of tensor 't'.*truncated"):
        BundleReader(sliced, verify=False).read_rows("t", [6])


def test_a_missing_data_file_is_not_found(sliced):
    entry = BundleReader(sliced).slice_entry("t", ((5, 5), (0, FULL)))
    os.remove(data_file(sliced, entry.shard_id, 2))
    with pytest.raises(NotFoundError, match=r"does not exist"):
        BundleReader(sliced).read_rows("t", [0])


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("rows", [slice(250_000, 500_000), np.arange(1, 1_000_000, 4)])
def test_memory_is_the_rows_asked_for_plus_one_chunk(tmp_path, verify, rows):
    """A 16 MB table in two row slices: a quarter of its rows costs a quarter of it (plus a 1 MiB chunk and
    what indexes it), never the whole table; the index array asked for is the caller's."""
    table = np.arange(1_000_000 * 4, dtype=np.float32).reshape(-1, 4)
    prefix = str(tmp_path / "ckpt")
    half = [(((0, 500_000), (0, FULL)), table[:500_000]), (((500_000, 500_000), (0, FULL)), table[500_000:])]
    write_bundle(prefix, {"t": SlicedTensor(table.shape, half)}, num_shards=2)
    reader = BundleReader(prefix, verify=verify)
    tracemalloc.start()
    try:
        got = reader.read_rows("t", rows, buffer=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(got, table[rows])
    assert peak < 1.25 * got.nbytes + 2 * (1 << 20)
    assert peak < table.nbytes / 2
