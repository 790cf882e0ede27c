"""tf.train.Checkpoint / CheckpointManager in TensorFlow's object-based format, without TensorFlow.

What TensorFlow 2.15 writes and does was checked with the oracle: the
fixtures under tests/fixtures/tf_checkpoints/ (make_midlevel_fixtures.py)
are its checkpoints, and tests/tf_interop/test_midlevel_interop.py runs
both directions against TensorFlow itself. In particular TensorFlow raises
on a shape mismatch ("Received incompatible tensor with shape ...") and on
a dtype mismatch, restores what it finds and leaves the rest (a checkpoint
without slots into an object with slots), restores a name-based checkpoint
by variable name, and `Checkpoint.save` records only the new checkpoint in
the state file.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import runpy
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine.checkpoint import CheckpointError
from tpu_embedding_shim.engine.tf_bundle import (
    BundleReader,
    DataLossError,
    NotFoundError,
    data_file,
    is_bundle,
    read_state,
    write_bundle,
)
from tpu_embedding_shim.engine.tf_bundle.object_graph import OBJECT_GRAPH_KEY

from .nests import assert_same_structure

E = tf.tpu.experimental.embedding
V, D = 9, 2
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints"
OPTIMIZERS = {
    "SGD": lambda: E.SGD(0.1),
    "Adagrad": lambda: E.Adagrad(0.1),
    "AdagradMomentum": lambda: E.AdagradMomentum(0.1, momentum=0.5),
    "Adam": lambda: E.Adam(0.1),
    "FTRL": lambda: E.FTRL(0.1),
}
SLOTS = {
    "SGD": [],
    "Adagrad": ["accumulators"],
    "AdagradMomentum": ["accumulators", "momenta"],
    "Adam": ["momenta", "velocities"],
    "FTRL": ["accumulators", "linears"],
}


def make(optimizer=None, pipelining=False, cls=None):
    t1 = E.TableConfig(vocabulary_size=V, dim=D, initializer=tf.random_normal_initializer(seed=1))
    t2 = E.TableConfig(
        vocabulary_size=V + 1, dim=D + 1, initializer=tf.random_normal_initializer(seed=2), optimizer=E.FTRL(0.2)
    )
    config = {"a": E.FeatureConfig(table=t1), "b": E.FeatureConfig(table=t2, max_sequence_length=2)}
    cls = cls or E.TPUEmbedding
    kwargs = {"pipeline_execution_with_tensor_core": pipelining}
    if cls is E.TPUEmbeddingV2:  # it requires a TPUStrategy scope, as in TensorFlow
        with tf.distribute.TPUStrategy().scope():
            return cls(feature_config=config, optimizer=optimizer or E.Adam(0.1), **kwargs)
    return cls(feature_config=config, optimizer=optimizer or E.Adam(0.1), **kwargs)


def train(embedding, steps, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        features = {"a": rng.integers(0, V, 4), "b": tf.ragged.constant([[1, 2], [3], [], [4, 5, 6]])}
        embedding.enqueue(features)
        activations = embedding.dequeue()
        embedding.apply_gradients({k: rng.normal(size=v.shape).astype(np.float32) for k, v in activations.items()})


def state_of(embedding):
    return {t.name: {k: v.copy() for k, v in slots.items()} for t, slots in embedding.variables.items()}


def assert_same_state(a, b):
    sa, sb = state_of(a), state_of(b)
    assert list(sa) == list(sb)
    for table in sa:
        assert sorted(sa[table]) == sorted(sb[table])
        for key in sa[table]:
            np.testing.assert_array_equal(sa[table][key], sb[table][key])
    assert a.engine.global_step == b.engine.global_step


def keys(path):
    return [name for name, _ in tf.train.list_variables(path)]


# Round trips -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipelining", [False, True])
def test_restoring_into_a_fresh_object_gives_identical_tables_slots_and_step(tmp_path, pipelining):
    embedding = make(pipelining=pipelining)
    train(embedding, 3)
    path = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "ckpt"))  # a pending update is saved
    fresh = make(pipelining=pipelining)
    status = tf.train.Checkpoint(embedding=fresh).restore(path)
    status.assert_consumed().assert_existing_objects_matched().assert_nontrivial_match().expect_partial()
    assert_same_state(fresh, embedding)
    train(embedding, 2, seed=5)  # training continues identically
    train(fresh, 2, seed=5)
    assert_same_state(fresh, embedding)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizers_slots_round_trip_under_tensorflows_keys(tmp_path, name):
    table = E.TableConfig(vocabulary_size=V, dim=D, name="items")
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=table)}, optimizer=OPTIMIZERS[name]())
    train_one(embedding)
    path = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "ckpt"))
    expected = ["embedding/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step"] + sorted(
        ["embedding/items/.ATTRIBUTES/VARIABLE_VALUE"]
        + [f"embedding/items.S{slot}/.ATTRIBUTES/VARIABLE_VALUE" for slot in SLOTS[name]]
    )
    assert keys(path) == [OBJECT_GRAPH_KEY] + expected + ["save_counter/.ATTRIBUTES/VARIABLE_VALUE"]
    fresh = E.TPUEmbedding(
        {"f": E.FeatureConfig(table=E.TableConfig(vocabulary_size=V, dim=D, name="items"))},
        optimizer=OPTIMIZERS[name](),
    )
    tf.train.Checkpoint(embedding=fresh).restore(path).assert_consumed()
    assert_same_state(fresh, embedding)
    assert sorted(fresh.variables[next(iter(fresh.variables))]) == sorted(["parameters"] + SLOTS[name])


def train_one(embedding):
    embedding.enqueue({"f": np.array([1, 2, 2, 7])})
    activations = embedding.dequeue()
    embedding.apply_gradients({k: np.full(v.shape, 0.5, np.float32) for k, v in activations.items()})


def test_sharded_tables_restore_between_the_three_classes(tmp_path):
    # TPUEmbeddingV2 keeps each table in 4 `mod` shards; the checkpoint holds whole tables in id order.
    embedding = make(cls=E.TPUEmbeddingV2)
    activations, preserved = embedding({"a": np.arange(4), "b": tf.ragged.constant([[1], [2], [3], [4]])})
    embedding.apply_gradients({k: np.ones_like(v) for k, v in activations.items()}, preserved)
    path = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "ckpt"))
    reader = tf.train.load_checkpoint(path)
    np.testing.assert_array_equal(
        reader.get_tensor("embedding/table_0/.ATTRIBUTES/VARIABLE_VALUE"),
        embedding.embedding_tables[embedding._table_config[0]],
    )
    for cls in (E.TPUEmbedding, E.TPUEmbeddingV2):
        other = make(cls=cls)
        tf.train.Checkpoint(embedding=other).restore(path).assert_consumed()
        assert_same_state(other, embedding)
    back = tf.train.Checkpoint(embedding=make()).save(str(tmp_path / "back"))  # one shard into four
    sharded = make(cls=E.TPUEmbeddingV2)
    tf.train.Checkpoint(embedding=sharded).restore(back).assert_consumed()
    assert_same_state(sharded, make())


def test_numpy_models_are_saved_under_tensorflows_keys_and_restored_in_place(tmp_path):
    class KerasLike:
        def __init__(self):
            self.weights = [np.zeros(2), np.zeros((2, 2))]

        def get_weights(self):
            return [w.copy() for w in self.weights]

        def set_weights(self, weights):
            self.weights = [np.array(w) for w in weights]

    params = {"w": np.arange(4.0), "b": np.ones(1), "nested": {"layer.1": [np.full(2, 3.0), 0.5]}}
    alias = params["w"]
    array = np.full(3, 7.0)
    keras_like = KerasLike()
    keras_like.weights[1][:] = 5
    checkpoint = tf.train.Checkpoint(model=params, array=array, keras=keras_like, embedding=make())
    path = checkpoint.write(str(tmp_path / "manual"))
    assert path == str(tmp_path / "manual") and tf.train.latest_checkpoint(str(tmp_path)) is None
    assert [k for k in keys(path) if not k.startswith("embedding")] == [
        OBJECT_GRAPH_KEY,
        "array/.ATTRIBUTES/VARIABLE_VALUE",
        "keras/0/.ATTRIBUTES/VARIABLE_VALUE",
        "keras/1/.ATTRIBUTES/VARIABLE_VALUE",
        "model/b/.ATTRIBUTES/VARIABLE_VALUE",
        "model/nested/layer..1/0/.ATTRIBUTES/VARIABLE_VALUE",
        "model/nested/layer..1/1/.ATTRIBUTES/VARIABLE_VALUE",
        "model/w/.ATTRIBUTES/VARIABLE_VALUE",
    ]  # write() without a save before: no save_counter, as in TensorFlow
    params["w"][:] = -1
    params["nested"]["layer.1"][1] = 0.0
    array[:] = 0
    keras_like.weights = [np.ones(2), np.ones((2, 2))]
    status = checkpoint.read(path)
    assert status.restored == ["model", "array", "keras", "embedding"]
    status.assert_consumed()
    np.testing.assert_array_equal(alias, np.arange(4.0))  # in place: references stay valid
    assert params["w"] is alias and params["nested"]["layer.1"][1] == 0.5
    np.testing.assert_array_equal(array, 7.0)
    np.testing.assert_array_equal(keras_like.weights[1], 5.0)
    assert checkpoint.model is params


DTYPES = ["float32", "float64", "float16", "int8", "int32", "int64", "uint16", "bool", "complex64"]


@st.composite
def arrays(draw):
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return np.asarray(rng.standard_normal(shape) * 100).astype(draw(st.sampled_from(DTYPES)))


structures = st.recursive(
    arrays(),
    lambda children: (
        st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), children, max_size=3)
        | st.lists(children, max_size=3)
    ),
    max_leaves=8,
)


def zeroed(structure):
    if isinstance(structure, dict):
        return {k: zeroed(v) for k, v in structure.items()}
    if isinstance(structure, list):
        return [zeroed(v) for v in structure]
    return np.zeros_like(structure)


@settings(max_examples=60, deadline=None)
@given(structures)
def test_nested_numpy_structures_round_trip(structure):
    # Any str key ('/', '.', unicode, empty), any numeric dtype and shape (0-d, empty): saved and restored.
    with tempfile.TemporaryDirectory() as directory:
        path = tf.train.Checkpoint(model=structure).save(os.path.join(directory, "ckpt"))
        restored = zeroed(structure)
        tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
        assert_same_structure(restored, structure)


def test_root_and_attributes_as_in_tensorflow(tmp_path):
    params = {"w": np.ones(2)}
    checkpoint = tf.train.Checkpoint(root=params, extra=np.zeros(1))
    checkpoint.late = np.full(3, 2.0)  # assigning an attribute tracks the object, as in TensorFlow
    path = checkpoint.save(str(tmp_path / "ckpt"))
    assert keys(path) == [
        OBJECT_GRAPH_KEY,
        "extra/.ATTRIBUTES/VARIABLE_VALUE",
        "late/.ATTRIBUTES/VARIABLE_VALUE",
        "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
        "w/.ATTRIBUTES/VARIABLE_VALUE",
    ]
    other = {"w": np.zeros(2)}
    tf.train.Checkpoint(root=other).restore(path).expect_partial()
    assert other["w"].tolist() == [1.0, 1.0] and checkpoint.root is params
    with pytest.raises(ValueError, match="save_counter"):
        tf.train.Checkpoint(save_counter=np.ones(1))


def test_save_counter_state_file_and_latest_checkpoint(tmp_path):
    checkpoint = tf.train.Checkpoint(model={"w": np.zeros(1)})
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
    first = checkpoint.save(str(tmp_path / "ckpt"))
    second = checkpoint.save(str(tmp_path / "ckpt"))
    assert (os.path.basename(first), os.path.basename(second)) == ("ckpt-1", "ckpt-2")
    assert tf.train.latest_checkpoint(str(tmp_path)) == second
    # TensorFlow's Checkpoint.save records only the new checkpoint.
    assert (tmp_path / "checkpoint").read_text().splitlines() == [
        'model_checkpoint_path: "ckpt-2"',
        'all_model_checkpoint_paths: "ckpt-2"',
    ]
    assert int(tf.train.load_variable(second, "save_counter/.ATTRIBUTES/VARIABLE_VALUE")) == 2
    fresh = tf.train.Checkpoint(model={"w": np.zeros(1)})
    fresh.restore(first)
    assert fresh.save_counter == 1
    assert os.path.basename(fresh.save(str(tmp_path / "ckpt"))) == "ckpt-2"


def test_restore_status_reports_what_matched(tmp_path):
    path = tf.train.Checkpoint(a={"x": np.zeros(1)}, b={"y": np.zeros(1)}).save(str(tmp_path / "ckpt"))
    status = tf.train.Checkpoint(a={"x": np.zeros(1)}).restore(path)
    status.assert_existing_objects_matched()
    assert status.unmatched_in_checkpoint == ["b/y/.ATTRIBUTES/VARIABLE_VALUE"]
    with pytest.raises(AssertionError, match="Unresolved"):
        status.assert_consumed()
    status = tf.train.Checkpoint(c={"z": np.zeros(1)}).restore(path)
    assert status.missing_from_checkpoint == ["c/z/.ATTRIBUTES/VARIABLE_VALUE"]
    with pytest.raises(AssertionError, match="not found"):
        status.assert_existing_objects_matched()
    with pytest.raises(AssertionError, match="Nothing"):
        status.assert_nontrivial_match()
    assert tf.train.Checkpoint(a={"x": np.zeros(1)}).restore(None).restored == []


def test_unsupported_objects_are_refused_and_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(TypeError, match="can't save"):
        tf.train.Checkpoint(model=object())
    with pytest.raises(TypeError, match="dict keys must be str"):
        tf.train.Checkpoint(model={1: np.ones(1)})
    with pytest.raises(TypeError, match="dtype"):
        tf.train.Checkpoint(model={"s": np.array(["a"])}).write(str(tmp_path / "never"))
    checkpoint = tf.train.Checkpoint(model={"s": np.array(["a"])})
    with pytest.raises(TypeError, match="dtype"):
        checkpoint.save(str(tmp_path / "never"))
    assert os.listdir(tmp_path) == [] and checkpoint.save_counter == 0


# TensorFlow's checkpoints --------------------------------------------------------------------------


def fixture_values(directory):
    meta = json.loads((FIXTURES / directory / "expected.json").read_text())
    with np.load(FIXTURES / directory / "expected.npz", allow_pickle=False) as arrays:
        return {name: arrays[info["key"]] for name, info in meta["tensors"].items()}


def tpu_embedding_like_the_fixture(cls=E.TPUEmbedding):
    """make_midlevel_fixtures.midlevel_tpu_embedding's object: its configuration (midlevel_configs.py), built here."""
    tpu_embedding_config = runpy.run_path(str(FIXTURES / "midlevel_configs.py"))["tpu_embedding_config"]
    return cls(tpu_embedding_config(E), optimizer=E.Adagrad(0.1))


def test_we_write_tensorflows_object_graph_byte_for_byte(tmp_path):
    expected = fixture_values("midlevel_tpu_embedding")
    embedding = tpu_embedding_like_the_fixture()
    path = tf.train.Checkpoint(embedding=embedding, model={"w": np.zeros(3, np.float32)}).save(str(tmp_path / "c"))
    reader = BundleReader(path)
    assert bytes(reader.read(OBJECT_GRAPH_KEY)[()]) == bytes(expected[OBJECT_GRAPH_KEY][()])
    assert set(reader.names()) == set(expected) | {"embedding/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step"}
    serving = E.TPUEmbeddingForServing({"f": E.FeatureConfig(table=E.TableConfig(6, 2, name="t"))}, E.Adam(0.1))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(embedding=serving), str(tmp_path / "serving"), 2)
    path = manager.save()
    assert bytes(BundleReader(path).read(OBJECT_GRAPH_KEY)[()]) == bytes(
        fixture_values("midlevel_serving")[OBJECT_GRAPH_KEY][()]
    )


def test_tensorflows_checkpoints_restore(tmp_path):
    expected = fixture_values("midlevel_tpu_embedding")
    for cls in (E.TPUEmbedding, E.TPUEmbeddingForServing):
        embedding = (
            tpu_embedding_like_the_fixture(cls)
            if cls is E.TPUEmbedding
            else cls(tpu_embedding_like_the_fixture()._feature_config, E.Adagrad(0.1))
        )
        step = embedding.engine.global_step
        model = {"w": np.zeros(3, np.float32)}
        checkpoint = tf.train.Checkpoint(embedding=embedding, model=model)
        checkpoint.restore(str(FIXTURES / "midlevel_tpu_embedding" / "ckpt-1")).assert_consumed()
        for table, slots in embedding.variables.items():
            for slot, value in slots.items():
                key = table.name.replace(".", "..").replace("/", ".S") + ("" if slot == "parameters" else f".S{slot}")
                np.testing.assert_array_equal(value, expected[f"embedding/{key}/.ATTRIBUTES/VARIABLE_VALUE"])
        np.testing.assert_array_equal(model["w"], expected["model/w/.ATTRIBUTES/VARIABLE_VALUE"])
        assert checkpoint.save_counter == 1 and embedding.engine.global_step == step  # TF saves no step

    # A CheckpointManager reads TensorFlow's state file (timestamps included) and carries on from it.
    directory = tmp_path / "serving"
    shutil.copytree(FIXTURES / "midlevel_serving", directory)
    serving = E.TPUEmbeddingForServing({"f": E.FeatureConfig(table=E.TableConfig(6, 2, name="t"))}, E.Adam(0.1))
    checkpoint = tf.train.Checkpoint(embedding=serving)
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=2)
    assert manager.checkpoints == [str(directory / "ckpt-2"), str(directory / "ckpt-3")]
    assert manager.restore_or_initialize() == str(directory / "ckpt-3")
    serving_expected = fixture_values("midlevel_serving")
    np.testing.assert_array_equal(
        next(iter(serving.embedding_tables.values())), serving_expected["embedding/t/.ATTRIBUTES/VARIABLE_VALUE"]
    )
    assert manager.save() == str(directory / "ckpt-4")  # save_counter 3 was restored
    assert not is_bundle(str(directory / "ckpt-2")) and manager.checkpoints[-1] == str(directory / "ckpt-4")


def test_a_name_based_checkpoint_restores_by_variable_name(tmp_path):
    # TensorFlow restores a checkpoint without an object graph by variable name (NameBasedSaverStatus).
    table = np.arange(V * D, dtype=np.float32).reshape(V, D)
    prefix = write_bundle(str(tmp_path / "model.ckpt-1"), {"items": table, "items/accumulators": table + 1})
    embedding = E.TPUEmbedding({"f": E.FeatureConfig(table=E.TableConfig(V, D, name="items"))}, E.Adagrad(0.1))
    tf.train.Checkpoint(embedding=embedding).restore(prefix).assert_consumed()
    np.testing.assert_array_equal(embedding.variables[embedding._table_config[0]]["accumulators"], table + 1)


# Failures change nothing (issue 16, items 2 and 3) --------------------------------------------------------


def test_a_shape_mismatch_raises_naming_the_key_and_both_shapes(tmp_path):
    path = tf.train.Checkpoint(model={"w": np.ones(3)}).save(str(tmp_path / "ckpt"))
    model = {"w": np.zeros(5)}
    with pytest.raises(CheckpointError, match=r"shape \(3,\).*`model/w` with shape \(5,\).*model/w/.ATTRIBUTES"):
        tf.train.Checkpoint(model=model).restore(path)
    assert model["w"].tolist() == [0.0] * 5
    with pytest.raises(CheckpointError, match="holds float64"):
        tf.train.Checkpoint(model={"w": np.zeros(3, np.float32)}).restore(path)
    sgd = make(optimizer=E.SGD(0.1))
    path = tf.train.Checkpoint(embedding=sgd).save(str(tmp_path / "tables"))
    table = E.TableConfig(vocabulary_size=V + 3, dim=D, name="table_0")
    other = E.TPUEmbedding(
        feature_config=[
            E.FeatureConfig(table=table),
            E.FeatureConfig(table=E.TableConfig(vocabulary_size=V + 1, dim=D + 1, name="table_1")),
        ],
        optimizer=E.SGD(0.1),
    )
    before = state_of(other)
    with pytest.raises(ValueError, match=r"\(9, 2\).*\(12, 2\).*embedding/table_0/"):
        tf.train.Checkpoint(embedding=other).restore(path)
    assert_same_state_dict(state_of(other), before)


def assert_same_state_dict(a, b):
    assert list(a) == list(b)
    for table in a:
        for key in a[table]:
            np.testing.assert_array_equal(a[table][key], b[table][key])


def test_a_failed_restore_changes_no_object(tmp_path):
    embedding = make()
    train(embedding, 2)
    path = tf.train.Checkpoint(embedding=embedding, model=np.ones(3)).save(str(tmp_path / "ckpt"))
    train(embedding, 2, seed=3)  # now the embedding differs from the checkpoint
    before, step = state_of(embedding), embedding.engine.global_step
    model = np.full(5, 4.0)
    with pytest.raises(CheckpointError, match="model"):  # the embedding is checked first, the model fails
        tf.train.Checkpoint(embedding=embedding, model=model).restore(path)
    assert_same_state_dict(state_of(embedding), before)
    assert embedding.engine.global_step == step and model.tolist() == [4.0] * 5

    # A table's data cut in half: nothing is restored (the model comes first in the checkpoint's key order).
    model = np.zeros(3)
    data = data_file(path, 0, 1)
    with open(data, "r+b") as file:
        file.truncate(os.path.getsize(data) // 2)
    with pytest.raises(DataLossError, match="truncated"):
        tf.train.Checkpoint(embedding=embedding, model=model).restore(path)
    assert model.tolist() == [0.0] * 3
    assert_same_state_dict(state_of(embedding), before)


def test_a_flipped_byte_or_a_failing_set_weights_changes_nothing(tmp_path):
    class Failing:
        def __init__(self, fail):
            self.weights, self.fail, self.calls = [np.zeros(2)], fail, 0

        def get_weights(self):
            return [w.copy() for w in self.weights]

        def set_weights(self, weights):
            self.calls += 1
            if self.fail and self.calls == 1:
                raise RuntimeError("set_weights failed")
            self.weights = [np.array(w) for w in weights]

    path = tf.train.Checkpoint(a=Failing(False), b=Failing(False), m=np.ones(2)).write(str(tmp_path / "x"))
    a, b, m = Failing(False), Failing(True), np.zeros(2)
    a.weights = b.weights = [np.full(2, 9.0)]
    with pytest.raises(RuntimeError, match="set_weights failed"):
        tf.train.Checkpoint(a=a, b=b, m=m).restore(path)
    assert a.weights[0].tolist() == [9.0, 9.0] and a.calls == 2  # set, then undone
    assert m.tolist() == [0.0, 0.0]

    reader = BundleReader(path)
    entry = reader.entry("m/.ATTRIBUTES/VARIABLE_VALUE")
    with open(data_file(path, 0, 1), "r+b") as file:
        file.seek(entry.offset)
        byte = file.read(1)
        file.seek(entry.offset)
        file.write(bytes([byte[0] ^ 1]))
    with pytest.raises(DataLossError, match="checksum"):
        tf.train.Checkpoint(m=m).restore(path)
    assert m.tolist() == [0.0, 0.0]


def test_missing_slots_keep_their_values_as_in_tensorflow(tmp_path, caplog):
    sgd = make(optimizer=E.SGD(0.1))
    train(sgd, 1)
    path = tf.train.Checkpoint(embedding=sgd).save(str(tmp_path / "ckpt"))
    adam = make(optimizer=E.Adam(0.1))
    slots_before = state_of(adam)["table_0"]["momenta"]
    with caplog.at_level(logging.WARNING, logger="tpu_embedding_shim"):
        status = tf.train.Checkpoint(embedding=adam).restore(path)
    assert "table_0.Smomenta" in caplog.text
    assert status.missing_from_checkpoint == [
        f"embedding/table_0.S{s}/.ATTRIBUTES/VARIABLE_VALUE" for s in ("momenta", "velocities")
    ]
    with pytest.raises(AssertionError, match="momenta"):
        status.assert_existing_objects_matched()
    np.testing.assert_array_equal(
        adam.embedding_tables[adam._table_config[0]], sgd.embedding_tables[sgd._table_config[0]]
    )
    np.testing.assert_array_equal(state_of(adam)["table_0"]["momenta"], slots_before)


def test_no_checkpoint_there(tmp_path):
    sgd = make(optimizer=E.SGD(0.1))
    with pytest.raises(NotFoundError, match="No checkpoint"):
        tf.train.Checkpoint(embedding=sgd).restore(str(tmp_path / "nothing"))
    path = tf.train.Checkpoint(embedding=sgd).save(str(tmp_path / "ckpt"))
    with pytest.raises(NotFoundError, match="latest_checkpoint"):
        tf.train.Checkpoint(embedding=sgd).restore(str(tmp_path))
    with pytest.raises(NotFoundError, match="without '.index'"):
        tf.train.Checkpoint(embedding=sgd).restore(path + ".index")


# CheckpointManager ------------------------------------------------------------------------------------------


def test_checkpoint_manager_keeps_the_newest_and_records_times(tmp_path):
    params = {"w": np.zeros(1)}
    checkpoint = tf.train.Checkpoint(model=params)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=2)
    assert manager.restore_or_initialize() is None and manager.latest_checkpoint is None
    paths = []
    for i in range(4):
        params["w"][:] = i
        paths.append(manager.save())
    assert [os.path.basename(p) for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]
    assert manager.checkpoints == paths[2:] and manager.latest_checkpoint == paths[3]
    assert not is_bundle(paths[0]) and not os.path.exists(data_file(paths[0], 0, 1)) and is_bundle(paths[2])
    state = read_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == paths[2:] and len(state.all_model_checkpoint_timestamps) == 2
    params["w"][:] = -1
    again = tf.train.CheckpointManager(tf.train.Checkpoint(model=params), str(tmp_path), max_to_keep=2)
    assert again.checkpoints == paths[2:] and again.restore_or_initialize() == paths[3] and params["w"][0] == 3
    with pytest.raises(ValueError, match="max_to_keep"):
        tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=0)
    with pytest.raises(TypeError, match="tf.train.Checkpoint"):
        tf.train.CheckpointManager(params, str(tmp_path), max_to_keep=1)
    with pytest.raises(ValueError, match="step_counter"):
        tf.train.CheckpointManager(checkpoint, str(tmp_path), 1, checkpoint_interval=5)


def test_keep_checkpoint_every_n_hours_and_checkpoint_interval(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("tpu_embedding_shim.api.train.time.time", lambda: clock[0])
    checkpoint = tf.train.Checkpoint(model={"w": np.zeros(1)})
    manager = tf.train.CheckpointManager(
        checkpoint, str(tmp_path / "hours"), max_to_keep=1, keep_checkpoint_every_n_hours=1.0
    )
    paths = []
    for _ in range(4):
        clock[0] += 1800.0  # half an hour apart: every other pruned checkpoint is preserved
        paths.append(manager.save())
    assert manager.checkpoints == [paths[3]]
    assert [is_bundle(p) for p in paths] == [False, True, False, True]

    step = np.zeros((), np.int64)  # a 0-d array is a counter that can move
    manager = tf.train.CheckpointManager(
        checkpoint, str(tmp_path / "interval"), None, step_counter=step, checkpoint_interval=10
    )
    assert manager.save() is not None
    step[...] = 5
    assert manager.save() is None and manager.save(check_interval=False) is not None
    step[...] = 15
    assert os.path.basename(manager.save(checkpoint_number=99)) == "ckpt-99"


def test_a_state_file_naming_a_missing_checkpoint_falls_back_to_the_newest_complete_one(tmp_path, caplog):
    checkpoint = tf.train.Checkpoint(model={"w": np.zeros(1)})
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=3)
    first, second = manager.save(), manager.save()
    os.remove(second + ".index")  # what the previous version could leave: the state names a deleted checkpoint
    with caplog.at_level(logging.WARNING, logger="tpu_embedding_shim"):
        recovered = tf.train.CheckpointManager(tf.train.Checkpoint(model={"w": np.zeros(1)}), str(tmp_path), 3)
    assert recovered.latest_checkpoint == first and recovered.checkpoints == [first]
    assert "not a complete checkpoint" in caplog.text
    os.remove(tmp_path / "checkpoint")  # no state file at all, checkpoints on disk
    assert tf.train.CheckpointManager(checkpoint, str(tmp_path), 3).latest_checkpoint == first
