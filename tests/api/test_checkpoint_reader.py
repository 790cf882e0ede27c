"""tf.train.load_checkpoint / list_variables / load_variable / latest_checkpoint, without TensorFlow.

What TensorFlow 2.15 returns and raises was checked with the oracle
(tests/tf_interop/ runs the same calls against real TensorFlow): a
directory means its latest checkpoint; a 0-d tensor is a numpy scalar
(`bytes` for a string); a missing key raises NotFoundError "Key ... not
found in checkpoint"; an empty directory raises ValueError "Couldn't find
'checkpoint' file or checkpoints in given directory"; latest_checkpoint of
a prefix (not a directory) is None.
"""

import json
import os
import pathlib

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine.tf_bundle import (
    BundleEntry,
    DataLossError,
    NotFoundError,
    SlicedTensor,
    UnimplementedError,
    index_file,
    write_bundle,
)
from tpu_embedding_shim.engine.tf_bundle.table import build_table, read_table

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints"


@pytest.fixture
def model_dir(tmp_path):
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    write_bundle(str(tmp_path / "model.ckpt-1"), {"global_step": np.int64(1)}, update_state=True)
    write_bundle(
        str(tmp_path / "model.ckpt-5"),
        {
            "global_step": np.int64(5),
            "input_layer/user_embedding/embedding_weights": table,
            "part": SlicedTensor((6, 2), [(((0, 3), (0, -1)), table[:3]), (((3, 3), (0, -1)), table[3:])]),
            "vocab": np.array([b"a", b"bc"], object),
            "name": np.array(b"x", object),
            "lr": np.float32(0.5),
            "half": np.float16(1.5),
            "brain": np.array([1.5, 2.0], np.float32),
            "flag": np.bool_(True),
        },
        dtypes={"brain": "bfloat16"},
        update_state=True,
    )
    return tmp_path


def test_load_checkpoint_of_a_directory_reads_its_latest(model_dir):
    reader = tf.train.load_checkpoint(str(model_dir))
    assert reader.get_tensor("global_step") == 5
    assert reader.get_variable_to_shape_map() == {
        "brain": [2],
        "flag": [],
        "global_step": [],
        "half": [],
        "input_layer/user_embedding/embedding_weights": [6, 2],
        "lr": [],
        "name": [],
        "part": [6, 2],
        "vocab": [2],
    }
    assert tf.train.load_checkpoint(str(model_dir / "model.ckpt-1")).get_tensor("global_step") == 1


def test_values_and_types_are_tensorflows(model_dir):
    reader = tf.compat.v1.train.load_checkpoint(model_dir)
    step = reader.get_tensor("global_step")
    assert type(step) is np.int64 and step == 5  # a numpy scalar, as TF returns
    assert type(reader.get_tensor("flag")) is np.bool_
    assert type(reader.get_tensor("half")) is np.float16
    assert reader.get_tensor("name") == b"x"
    assert reader.get_tensor("vocab").tolist() == [b"a", b"bc"]
    assert reader.get_tensor(b"part").tolist() == np.arange(12).reshape(6, 2).tolist()
    assert reader.get_tensor("brain").dtype == np.float32  # bfloat16 read as float32
    dtypes = reader.get_variable_to_dtype_map()
    assert dtypes["vocab"] == tf.string and dtypes["global_step"] == tf.int64 and dtypes["brain"] == tf.float32
    assert reader.has_tensor("part") and not reader.has_tensor("nope")
    assert not reader.has_tensor("\x00part\x00\x01\x01\x02\x80\x83\x80\x7f")  # a slice key is not a variable
    assert b"global_step (DT_INT64) []\n" in reader.debug_string()
    assert b"input_layer/user_embedding/embedding_weights (DT_FLOAT) [6,2]\n" in reader.debug_string()


def test_list_variables_is_sorted_and_load_variable_drops_the_output_index(model_dir):
    assert tf.train.list_variables(str(model_dir))[:3] == [("brain", [2]), ("flag", []), ("global_step", [])]
    assert tf.train.load_variable(str(model_dir), "lr:0") == np.float32(0.5)
    assert tf.train.load_variable(str(model_dir), "part")[5].tolist() == [10.0, 11.0]


def test_missing_key_is_not_found(model_dir):
    with pytest.raises(NotFoundError, match="Key 'nope' not found in checkpoint"):
        tf.train.load_variable(str(model_dir), "nope")


def test_paths_without_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="Couldn't find 'checkpoint' file or checkpoints in given directory"):
        tf.train.load_checkpoint(str(tmp_path))
    with pytest.raises(ValueError, match="Couldn't find 'checkpoint' file"):
        tf.train.list_variables(str(tmp_path))
    with pytest.raises(NotFoundError, match="Failed to find any matching files for .*model.ckpt-9"):
        tf.train.load_checkpoint(str(tmp_path / "model.ckpt-9"))
    write_bundle(str(tmp_path / "m"), {"x": np.ones(1)})
    with pytest.raises(NotFoundError, match=r"Pass the prefix without '\.index'"):
        tf.train.load_checkpoint(str(tmp_path / "m.index"))


def test_a_corrupt_checkpoint_is_data_loss_naming_file_and_tensor(model_dir):
    path = model_dir / "model.ckpt-5.data-00000-of-00001"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    reader = tf.train.load_checkpoint(str(model_dir))
    with pytest.raises(DataLossError, match=r"model\.ckpt-5\.data-00000-of-00001: tensor 'vocab'"):
        reader.get_tensor("vocab")


def test_an_unknown_dtype_names_the_tensor_and_the_rest_still_reads(tmp_path):
    # TensorFlow 2.15: get_variable_to_dtype_map raises TypeError, get_tensor of it aborts the process.
    prefix = str(tmp_path / "m")
    write_bundle(prefix, {"x": np.ones(3, np.float32), "y": np.ones(2)})
    pairs = read_table(pathlib.Path(index_file(prefix)).read_bytes(), "index")
    entry = BundleEntry.decode(pairs[1][1])
    pairs[1] = (b"x", BundleEntry(99, entry.shape, entry.shard_id, entry.offset, entry.size, entry.crc32c).encode())
    pathlib.Path(index_file(prefix)).write_bytes(build_table(pairs))
    reader = tf.train.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map() == {"x": [3], "y": [2]}
    assert reader.get_tensor("y").tolist() == [1.0, 1.0]
    for call in (lambda: reader.get_tensor("x"), reader.get_variable_to_dtype_map):
        with pytest.raises(UnimplementedError, match=r"tensor 'x' has dtype unknown dtype 99"):
            call()


def test_latest_checkpoint(model_dir, tmp_path_factory, caplog):
    assert tf.train.latest_checkpoint(str(model_dir)) == str(model_dir / "model.ckpt-5")
    assert tf.train.latest_checkpoint(str(model_dir / "model.ckpt-5")) is None  # a prefix is not a directory (as TF)
    empty = tmp_path_factory.mktemp("empty")
    assert tf.train.latest_checkpoint(str(empty)) is None
    os.remove(model_dir / "model.ckpt-5.index")
    assert tf.train.latest_checkpoint(str(model_dir)) is None
    assert "Couldn't match files for checkpoint" in caplog.text
    (model_dir / "checkpoint").write_text("garbage without fields\n")
    assert tf.train.latest_checkpoint(str(model_dir)) is None


@pytest.mark.parametrize("directory", ["saver_v1", "sharded_v1", "tf2_object"])
def test_reads_tensorflow_written_checkpoints(directory):
    meta = json.loads((FIXTURES / directory / "expected.json").read_text())
    assert os.path.basename(tf.train.latest_checkpoint(str(FIXTURES / directory))) == meta["latest"]
    assert tf.train.list_variables(str(FIXTURES / directory)) == sorted(
        (name, info["shape"]) for name, info in meta["tensors"].items()
    )
    reader = tf.train.load_checkpoint(str(FIXTURES / directory))
    with np.load(FIXTURES / directory / "expected.npz", allow_pickle=False) as arrays:
        for name, info in meta["tensors"].items():
            got, want = np.asarray(reader.get_tensor(name)), arrays[info["key"]]
            if info["dtype"] == "string":
                assert got.tolist() == want.astype(object).tolist()
            else:
                np.testing.assert_array_equal(got, want)
                assert got.dtype == want.dtype
