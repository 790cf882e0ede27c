"""tf.train.load_checkpoint / list_variables / load_variable / latest_checkpoint on the engine's own checkpoints.

An engine checkpoint (a `ckpt-<step>` directory of .npy files and a
manifest) reads as the tensors `<table>`, `<table>/<slot>` and
`global_step` (int64), the keys `tpu-embedding-shim checkpoint convert`
writes into a TensorFlow checkpoint, so one `load_checkpoint` opens both.
"""

import json
import os

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api.engine_checkpoint_reader import EngineCheckpoint
from tpu_embedding_shim.engine.checkpoint import CheckpointError, load_checkpoint
from tpu_embedding_shim.engine.tf_bundle import NotFoundError, write_bundle
from tpu_embedding_shim.spec import AdamSpec


@pytest.fixture
def engine_dir(tmp_path, two_table_engine):
    """A directory of two engine checkpoints of an Adam engine (two slots per table), steps 3 and 8."""
    engine = two_table_engine(AdamSpec(learning_rate=0.1), users=6, items=4, item_table="towers/item id")
    engine.global_step = 3
    engine.save(str(tmp_path / "ckpts"))
    result = engine.forward({"u": np.array([[1, 2]]), "i": np.array([[3]])})
    engine.apply_gradients(result, {"u": np.ones((1, 3), np.float32), "i": np.ones((1, 2), np.float32)})
    engine.global_step = 8
    engine.save(str(tmp_path / "ckpts"))
    return tmp_path / "ckpts"


def test_an_engine_checkpoint_reads_as_named_tensors(engine_dir):
    path = str(engine_dir / "ckpt-0000000008")
    state, step, _ = load_checkpoint(path)
    reader = tf.train.load_checkpoint(path)
    assert reader.format == "engine"
    assert reader.get_variable_to_shape_map() == {
        "global_step": [],
        "users": [6, 3],
        "users/momenta": [6, 3],
        "users/velocities": [6, 3],
        "towers/item id": [4, 2],
        "towers/item id/momenta": [4, 2],
        "towers/item id/velocities": [4, 2],
    }
    assert set(reader.get_variable_to_dtype_map().values()) == {tf.float32, tf.int64}
    for table, arrays in state.items():
        for slot, array in arrays.items():
            name = table if slot == "embedding" else f"{table}/{slot}"
            np.testing.assert_array_equal(reader.get_tensor(name), array)
    value = reader.get_tensor("global_step")
    assert type(value) is np.int64 and value == step == 8  # a numpy scalar, as TensorFlow returns a 0-d tensor
    assert reader.has_tensor("users/momenta") and not reader.has_tensor("users/accumulators")
    assert b"users/velocities (DT_FLOAT) [6,3]\n" in reader.debug_string()
    assert b"global_step (DT_INT64) []\n" in reader.debug_string()
    with pytest.raises(NotFoundError, match="Key 'users/accumulators' not found in checkpoint"):
        reader.get_tensor("users/accumulators")


def test_a_directory_of_engine_checkpoints_means_its_latest(engine_dir):
    assert tf.train.latest_checkpoint(str(engine_dir)) == str(engine_dir / "ckpt-0000000008")
    assert tf.train.load_variable(str(engine_dir), "global_step") == 8
    assert tf.train.list_variables(str(engine_dir))[0] == ("global_step", [])
    assert [name for name, _ in tf.train.list_variables(str(engine_dir))] == sorted(
        [
            "global_step",
            "users",
            "users/momenta",
            "users/velocities",
            "towers/item id",
            "towers/item id/momenta",
            "towers/item id/velocities",
        ]
    )
    older = tf.train.load_variable(str(engine_dir / "ckpt-0000000003"), "users:0")
    assert not np.array_equal(older, tf.train.load_variable(str(engine_dir), "users"))  # the step moved rows 1, 2


def test_a_state_file_wins_over_engine_checkpoints(engine_dir):
    write_bundle(str(engine_dir / "model.ckpt-1"), {"global_step": np.int64(1)}, update_state=True)
    assert tf.train.latest_checkpoint(str(engine_dir)) == str(engine_dir / "model.ckpt-1")
    assert tf.train.load_checkpoint(str(engine_dir)).format == "tensorflow"
    assert tf.train.latest_checkpoint(str(engine_dir), latest_filename="other") is None


def test_bit_for_bit_values_and_dtypes(tmp_path, save_arrays):
    table = np.array([[np.nan, -0.0], [np.inf, 1.5]], np.float32)
    table.view(np.uint32)[0, 0] = 0x7FC12345  # a NaN payload
    path = save_arrays(tmp_path, {"t": {"embedding": table, "accumulators": np.arange(2, dtype=np.int64)[:, None]}}, 4)
    reader = tf.train.load_checkpoint(path)
    assert reader.get_tensor("t").tobytes() == table.tobytes()
    assert reader.get_tensor("t/accumulators").dtype == np.int64
    assert reader.get_variable_to_dtype_map()["t/accumulators"] == tf.int64


@pytest.mark.parametrize(
    "tables, clash",
    [
        (
            {
                "a": {"embedding": np.ones((2, 1)), "accumulators": np.ones((2, 1))},
                "a/accumulators": {"embedding": np.ones((2, 1))},
            },
            "'a/accumulators'",
        ),
        ({"global_step": {"embedding": np.ones((2, 1))}}, "'global_step'"),
    ],
)
def test_names_that_would_collide_are_refused(tmp_path, tables, clash, save_arrays):
    path = save_arrays(tmp_path, tables, 1)
    with pytest.raises(CheckpointError, match=f"would both be read as tensor {clash}"):
        tf.train.load_checkpoint(path)
    assert load_checkpoint(path)[1] == 1  # the engine reads it as it is


def test_a_corrupt_array_names_checkpoint_table_slot_and_file(engine_dir):
    path = engine_dir / "ckpt-0000000008"
    manifest = json.loads((path / "manifest.json").read_text())
    entry = next(e for e in manifest["arrays"] if e["table"] == "users" and e["slot"] == "momenta")
    data = bytearray((path / entry["file"]).read_bytes())
    data[-1] ^= 0x01
    (path / entry["file"]).write_bytes(bytes(data))
    reader = tf.train.load_checkpoint(str(path))
    with pytest.raises(CheckpointError, match=rf"table 'users' slot 'momenta' \({entry['file']}\) is corrupt: sha256"):
        reader.get_tensor("users/momenta")
    assert reader.get_tensor("users").shape == (6, 3)  # the others still read


def test_a_broken_manifest_is_a_checkpoint_error(tmp_path, save_arrays):
    path = save_arrays(tmp_path, {"t": {"embedding": np.ones((2, 2), np.float32)}}, 1)
    with open(os.path.join(path, "manifest.json"), "w") as file:
        file.write("{not json")
    with pytest.raises(CheckpointError, match="manifest.json is not valid JSON"):
        tf.train.load_checkpoint(path)


def test_memory_mapped_reads_are_checked_and_never_change_the_checkpoint(tmp_path, save_arrays):
    path = save_arrays(tmp_path, {"t": {"embedding": np.arange(6, dtype=np.float32).reshape(3, 2)}}, 2)
    value = EngineCheckpoint(path).read("t", mmap=True)
    assert isinstance(value, np.memmap)
    value[0, 0] = 99.0
    assert tf.train.load_variable(path, "t")[0, 0] == 0.0
