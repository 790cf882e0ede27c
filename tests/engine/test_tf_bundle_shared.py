"""A bundle several processes write: `write_data_shard` per process, `write_shared_index` once (one process here)."""

import os

import numpy as np
import pytest

from tpu_embedding_shim.engine.tf_bundle import BundleReader, SlicedTensor, data_file, index_file
from tpu_embedding_shim.engine.tf_bundle.writer import write_data_shard, write_shared_index

TABLE = np.arange(20, dtype=np.float32).reshape(5, 4)


def rows(start, stop):
    return SlicedTensor((5, 4), [(((start, stop - start), (0, -1)), TABLE[start:stop])])


def write(prefix, parts, token="t"):
    """Each part's shard, then the index; the files moved to their final names, as the collective write does."""
    entries = [
        write_data_shard(prefix, tensors, shard=shard, num_shards=len(parts), token=token)
        for shard, tensors in enumerate(parts)
    ]
    index = write_shared_index(prefix, entries, token=token)
    for shard in range(len(parts)):
        os.replace(f"{data_file(prefix, shard, len(parts))}.tempstate{token}", data_file(prefix, shard, len(parts)))
    os.replace(index, index_file(prefix))


def test_the_slices_of_several_shards_make_one_tensor(tmp_path):
    prefix = str(tmp_path / "ckpt")
    write(prefix, [{"t": rows(0, 2), "step": np.int64(3)}, {"t": rows(2, 5)}])
    reader = BundleReader(prefix)
    assert reader.names() == ["step", "t"]
    np.testing.assert_array_equal(reader.read("t"), TABLE)
    assert sorted(reader.entry("t").slices) == [((0, 2), (0, -1)), ((2, 3), (0, -1))]


@pytest.mark.parametrize(
    "parts, message",
    [
        ([{"t": rows(0, 3)}, {"t": rows(2, 5)}], "slices of tensor 't' overlap"),
        ([{"t": rows(0, 2)}, {"t": rows(3, 5)}], "cover 16 of its 20 elements; they must cover the tensor"),
        ([{"s": np.int64(1)}, {"s": np.int64(2)}], "tensor 's' is written by two shards"),
        ([{"t": rows(0, 2)}, {"t": rows(0, 2)}], "is written by two shards"),
    ],
)
def test_shards_that_do_not_make_a_bundle_are_refused(tmp_path, parts, message):
    prefix = str(tmp_path / "ckpt")
    entries = [
        write_data_shard(prefix, tensors, shard=shard, num_shards=2, token="t") for shard, tensors in enumerate(parts)
    ]
    with pytest.raises(ValueError, match=message):
        write_shared_index(prefix, entries, token="t")
    assert not os.path.exists(f"{index_file(prefix)}.tempstate" + "t")


def test_a_shard_that_can_not_be_stored_writes_nothing(tmp_path):
    prefix = str(tmp_path / "ckpt")
    with pytest.raises(TypeError, match="object array"):
        write_data_shard(prefix, {"bad": np.array([object()])}, shard=0, num_shards=1, token="t")
    assert not os.path.exists(tmp_path / "ckpt.data-00000-of-00001.tempstatet")
