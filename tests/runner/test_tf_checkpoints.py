"""TPUEstimator model_dirs in TensorFlow's checkpoint format: names, round trips, TF-written model_dirs, warm start.

TensorFlow is not needed: the TensorFlow-written model_dirs are fixtures
(tests/fixtures/tf_checkpoints/make_estimator_fixtures.py wrote them with
TensorFlow 2.15), and tests/runner/tf_program.py is their program,
ported. tests/tf_interop/test_estimator_interop.py checks the same things
against a live TensorFlow.
"""

import json
import logging
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.checkpoints import program_checkpoint as checkpoints
from tpu_embedding_shim.checkpoints.state import DenseState, decode_tensors
from tpu_embedding_shim.checkpoints.tf_names import from_mod_layout, to_mod_layout
from tpu_embedding_shim.engine.checkpoint import CheckpointError
from tpu_embedding_shim.engine.tf_bundle import BundleReader, DataLossError, NotFoundError, read_state

from . import tf_program as program
from .problem import columns, estimator, input_fn_for, make_data

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints"
USER = "dense_features/user_embedding/embedding_weights"  # the user column's table, read by DenseFeatures
TRAIN = make_data(256, seed=0)
WARM_LOG = "tpu_embedding_shim"


def fixture_dir(name, tmp_path):
    """A copy of a TensorFlow-written fixture (the runner writes into its model_dir)."""
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return str(target)


def tf_values(name):
    """(expected.json, {tensor: value as TensorFlow's reader returned it}) of a fixture."""
    info = json.loads((FIXTURES / name / "expected.json").read_text())
    arrays = np.load(FIXTURES / name / "expected.npz")
    return info, {tensor: arrays[entry["key"]] for tensor, entry in info["tensors"].items()}


def id_order():
    arrays = np.load(FIXTURES / "tpu_mod_3hosts" / "id_order.npz")
    return {key.replace("|", "/"): arrays[key] for key in arrays.files}


def trained(model_dir, steps=3, **kwargs):
    est = program.shim_estimator(model_dir, **kwargs)
    est.train(program.shim_input_fn, steps=steps)
    return est


# Names ---------------------------------------------------------------------------------------------------------


def test_names_dtypes_and_shapes_are_tensorflows_for_the_same_program(tmp_path):
    est = trained(tmp_path / "m")
    info, _ = tf_values("estimator_cpu_adagrad")  # TensorFlow's TPUEstimator(use_tpu=False), same program
    ours = dict(tf.train.list_variables(str(tmp_path / "m")))
    ours.pop("_TPU_EMBEDDING_SHIM_STATE")
    theirs = {name: entry["shape"] for name, entry in info["tensors"].items()}
    # TensorFlow's dense layer has Adagrad slots; the numpy port's dense part keeps none.
    assert set(theirs) - set(ours) == {"dense/kernel/Adagrad", "dense/bias/Adagrad"}
    assert {name: theirs[name] for name in ours} == ours
    reader = tf.train.load_checkpoint(str(tmp_path / "m"))
    dtypes = {name: dtype.name for name, dtype in reader.get_variable_to_dtype_map().items()}
    assert all(dtypes[name] == info["tensors"][name]["dtype"] for name in ours)
    assert est.get_variable_names() == sorted(ours)
    step = reader.get_tensor("global_step")
    assert step.dtype == np.int64 and step.shape == () and int(step) == 3


def _layer_program(layout):
    """A program whose model_fn reads user, item and a shared pair (q1, q2) with the layers `layout` names."""
    fc = tf.feature_column
    user = tf.tpu.experimental.embedding_column(fc.categorical_column_with_identity("user", 6), 2)
    item = tf.tpu.experimental.embedding_column(fc.categorical_column_with_identity("item", 5), 2)
    shared = tf.tpu.experimental.shared_embedding_columns(
        [fc.categorical_column_with_identity("q2", 4), fc.categorical_column_with_identity("q1", 4)], 2
    )

    def model_fn(features, labels, mode, params):
        if layout == "two DenseFeatures":  # built a, b; called b first: names follow construction
            a = tf.keras.layers.DenseFeatures([user])
            b = tf.keras.layers.DenseFeatures([item] + shared)
            outputs = [b(features), a(features)]
        elif layout == "input_layer twice":
            outputs = [
                tf.compat.v1.feature_column.input_layer(features, [user]),
                tf.compat.v1.feature_column.input_layer(features, [item]),
                tf.keras.layers.DenseFeatures(shared)(features),
            ]
        else:
            outputs = [tf.keras.layers.DenseFeatures([user, item] + shared, name="towers")(features)]
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=0.0, train_op=lambda: None, embedding_gradients={o: np.zeros_like(o) for o in outputs}
        )

    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item] + shared, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
    )
    return model_fn, spec


# The names TensorFlow 2.15's TPUEstimator(use_tpu=False) gave these layouts (tests/tf_interop checks them live).
LAYER_NAMES = {
    "two DenseFeatures": [
        "dense_features/user_embedding/embedding_weights",
        "dense_features_1/item_embedding/embedding_weights",
        "q1_q2_shared_embedding",
    ],
    "input_layer twice": [
        "input_layer/user_embedding/embedding_weights",
        "input_layer_1/item_embedding/embedding_weights",
        "q1_q2_shared_embedding",
    ],
    "a named DenseFeatures": [
        "q1_q2_shared_embedding",
        "towers/item_embedding/embedding_weights",
        "towers/user_embedding/embedding_weights",
    ],
}


@pytest.mark.parametrize("layout", sorted(LAYER_NAMES))
def test_each_table_is_named_after_the_layer_that_read_its_column(tmp_path, layout):
    model_fn, spec = _layer_program(layout)
    est = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path)),
        train_batch_size=4,
        embedding_config_spec=spec,
    )
    batch = {k: np.array([[1], [2], [3], [1]]) for k in ("user", "item", "q1", "q2")}
    est.train(lambda params: batch, steps=2)
    tables = [n for n in est.get_variable_names() if not n.endswith("/Adagrad") and n != "global_step"]
    assert tables == LAYER_NAMES[layout]
    # A new estimator on the model_dir keeps them, before its model_fn has run.
    again = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path)),
        train_batch_size=4,
        embedding_config_spec=spec,
    )
    assert again.get_variable_names() == est.get_variable_names()


# TensorFlow's TPU slot names (tensorflow_estimator 2.15, _tpu_estimator_embedding._get_slot_variable_names):
# (optimizer, {checkpoint suffix: engine slot}).
TPU_SLOTS = [
    ("adagrad", {"Adagrad": "accumulators"}),
    ("adam", {"Adam/m": "momenta", "Adam/v": "velocities"}),
    ("ftrl", {"Ftrl": "accumulators", "Ftrl_1": "linears"}),
    ("momentum", {"Momentum": "momenta"}),
    ("proximal_adagrad", {"ProximalAdagrad": "accumulators"}),
    ("rmsprop", {"RMSProp/ms": "ms", "RMSProp/mom": "mom"}),
    ("sgd", {}),
]


@pytest.mark.parametrize("optimizer,tpu_slots", TPU_SLOTS, ids=[optimizer for optimizer, _ in TPU_SLOTS])
def test_slots_get_tensorflows_tpu_names(tmp_path, optimizer, tpu_slots):
    est = trained(tmp_path, optimizer=optimizer, steps=2)
    table = "dense_features/user_embedding/embedding_weights"
    assert [n for n in est.get_variable_names() if n.startswith(table + "/")] == sorted(
        f"{table}/{suffix}" for suffix in tpu_slots
    )
    slots = est.engine.slots("tbl_user")
    reader = tf.train.load_checkpoint(str(tmp_path))
    for suffix, slot in tpu_slots.items():
        np.testing.assert_array_equal(reader.get_tensor(f"{table}/{suffix}"), slots[slot])
        np.testing.assert_array_equal(est.get_variable_value(f"{table}/{suffix}"), slots[slot])
    np.testing.assert_array_equal(reader.get_tensor(table), est.engine.table("tbl_user"))


def test_engine_names_and_dense_keys_are_accepted_by_get_variable_value(tmp_path):
    est = trained(tmp_path)
    np.testing.assert_array_equal(
        est.get_variable_value("tbl_user"), est.get_variable_value("dense_features/user_embedding/embedding_weights")
    )
    np.testing.assert_array_equal(
        est.get_variable_value("tbl_user/accumulators"),
        est.get_variable_value("dense_features/user_embedding/embedding_weights/Adagrad"),
    )
    with pytest.raises(ValueError, match=r"Variable 'nope' not found; variables are \['dense/bias'"):
        est.get_variable_value("nope")


# The dense state ---------------------------------------------------------------------------------------------


class Counter:
    """An object with state_dict() / load_state_dict(), as a torch module or optimizer has."""

    def __init__(self):
        self.state = {"steps": 0, "history": [np.zeros(2, np.float32)], "name": "c", "note": None}

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.state = state


def test_the_dense_state_is_saved_under_its_keys_and_comes_back_exactly(tmp_path):
    def model_fn(features, labels, mode, params):
        state = params["dense_state"]
        state.setdefault("dense/kernel", np.zeros((2, 1), np.float32))
        state.setdefault("counts", np.zeros(3, np.int32))
        state.setdefault("lr", 0.5)
        state.setdefault("steps", 0)
        state.setdefault("flag", False)
        state.setdefault("nested", {"a": [np.float64(1.5), (np.ones(1, np.float16),)], 7: "text"})
        counter = state.setdefault("counter", Counter())

        def train_op():
            state["dense/kernel"] = state["dense/kernel"] + 1
            state["counts"] = state["counts"] + 2
            state["steps"] += 1
            state["flag"] = True
            counter.state["steps"] += 1
            counter.state["history"].append(np.full(2, counter.state["steps"], np.float32))

        net = tf.keras.layers.DenseFeatures(columns()[0])(features)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=0.0, train_op=train_op, embedding_gradients={net: np.zeros_like(net)}
        )

    _, _, cols = columns()
    est = estimator(tmp_path, model_fn, cols)
    est.train(input_fn_for(TRAIN), steps=3)
    names = est.get_variable_names()
    for name in (
        "dense/kernel",
        "counts",
        "lr",
        "steps",
        "flag",
        "nested/a/0",
        "nested/a/1/0",
        "counter/steps",
        "counter/history/3",
    ):
        assert name in names, name
    reader = BundleReader(est.latest_checkpoint())
    assert [reader.dtype_name(n) for n in ("counts", "lr", "steps", "flag", "nested/a/1/0")] == [
        "int32",
        "float64",
        "int64",
        "bool",
        "float16",
    ]
    assert int(reader.read("steps")) == 3 and int(reader.read("counter/steps")) == 3

    again = estimator(tmp_path, model_fn, cols, seed=9)
    state = again.dense_state
    assert state["steps"] == 3 and type(state["steps"]) is int and state["flag"] is True
    assert state["lr"] == 0.5 and type(state["lr"]) is float
    np.testing.assert_array_equal(state["dense/kernel"], np.full((2, 1), 3.0, np.float32))
    assert state["counts"].dtype == np.int32 and state["counts"].tolist() == [6, 6, 6]
    assert state["nested"][7] == "text" and isinstance(state["nested"]["a"][1], tuple)
    assert state.pending_keys == ["counter"]  # an object comes back into the one the model_fn sets
    again.train(input_fn_for(TRAIN), steps=1)
    counter = again.dense_state["counter"]
    assert counter.state["steps"] == 4 and counter.state["name"] == "c" and counter.state["note"] is None
    assert [h.tolist() for h in counter.state["history"]] == [[0, 0], [1, 1], [2, 2], [3, 3], [4, 4]]


dense_values = st.recursive(
    st.one_of(
        st.integers(-(2**62), 2**62),
        st.floats(allow_nan=False),
        st.booleans(),
        st.none(),
        st.text(max_size=4),
        st.builds(
            lambda shape, seed: np.random.default_rng(seed).standard_normal(shape).astype(np.float32),
            st.lists(st.integers(0, 3), max_size=2).map(tuple),
            st.integers(0, 99),
        ),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(st.text("abc", min_size=1, max_size=3), children, max_size=3),
    ),
    max_leaves=8,
)


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    else:
        assert a == b


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text("xyz/", min_size=1, max_size=3).filter(lambda k: "//" not in k and k[-1] != "/"),
        dense_values,
        max_size=4,
    )
)
def test_dense_state_tensors_round_trip(entries):
    state = DenseState(entries)
    try:
        tensors, structure = state.to_tensors()
    except ValueError as error:  # two values named alike ('x/y' and {'x': {'y': ...}}): refused, named
        assert "would be saved as the tensor" in str(error)
        return
    restored = DenseState()
    restored.replace(decode_tensors(json.loads(json.dumps(structure)), tensors))
    _same(dict(state), dict(restored))


# Round trips -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "ftrl", "momentum", "rmsprop", "sgd"])
@pytest.mark.parametrize("layout", [{}, {"partition_strategy": "mod", "num_shards": 3}], ids=["div", "mod-3"])
def test_resume_is_bit_for_bit(tmp_path, optimizer, layout):
    once = trained(tmp_path / "once", steps=6, optimizer=optimizer, **layout)
    trained(tmp_path / "twice", steps=3, optimizer=optimizer, **layout)
    resumed = trained(tmp_path / "twice", steps=3, optimizer=optimizer, seed=77, **layout)  # all from disk
    assert resumed.global_step == once.global_step == 6
    assert resumed.get_variable_names() == once.get_variable_names()
    for name in once.get_variable_names():
        np.testing.assert_array_equal(resumed.get_variable_value(name), once.get_variable_value(name), err_msg=name)


def test_keep_checkpoint_max_and_the_state_file(tmp_path):
    est = trained(tmp_path, steps=1, keep=2)
    for _ in range(3):
        est.train(program.shim_input_fn, steps=1)
    assert sorted(os.listdir(tmp_path)) == [
        "checkpoint",
        "model.ckpt-3.data-00000-of-00001",
        "model.ckpt-3.index",
        "model.ckpt-4.data-00000-of-00001",
        "model.ckpt-4.index",
    ]
    state = read_state(str(tmp_path))
    assert state.model_checkpoint_path == str(tmp_path / "model.ckpt-4")
    assert state.all_model_checkpoint_paths == (str(tmp_path / "model.ckpt-3"), str(tmp_path / "model.ckpt-4"))
    assert (tmp_path / "checkpoint").read_text() == (
        'model_checkpoint_path: "model.ckpt-4"\n'
        'all_model_checkpoint_paths: "model.ckpt-3"\n'
        'all_model_checkpoint_paths: "model.ckpt-4"\n'
    )


def test_a_crash_never_leaves_the_state_file_naming_a_missing_checkpoint(tmp_path, monkeypatch):
    est = trained(tmp_path, steps=2, keep=1)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    # A crash before the state file: the new checkpoint exists, the state still names the previous one.
    monkeypatch.setattr(checkpoints, "write_state", crash)
    with pytest.raises(OSError, match="disk full"):
        est.train(program.shim_input_fn, steps=1)
    monkeypatch.undo()
    assert est.latest_checkpoint() == str(tmp_path / "model.ckpt-2")
    # A crash while pruning (the next train() starts again from step 2, the latest checkpoint): the state file
    # already names only the kept checkpoint, which exists.
    monkeypatch.setattr(checkpoints, "delete_bundle", crash)
    with pytest.raises(OSError, match="disk full"):
        est.train(program.shim_input_fn, steps=1)
    monkeypatch.undo()
    state = read_state(str(tmp_path))
    assert state.all_model_checkpoint_paths == (str(tmp_path / "model.ckpt-3"),)
    assert os.path.isfile(str(tmp_path / "model.ckpt-3.index"))
    resumed = program.shim_estimator(tmp_path, keep=1)
    assert resumed.global_step == 0 and resumed.engine.global_step == 3  # restored on first use


def test_a_directory_without_a_tensorflow_checkpoint_is_no_checkpoint_to_start_from(tmp_path):
    # An engine checkpoint (ckpt-<step>/ with its manifest) is not a TPUEstimator checkpoint: the runner reads
    # TensorFlow's format only, and says so instead of starting from nothing.
    source = trained(tmp_path / "source", steps=3)
    source.engine.save(str(tmp_path / "engine"))
    assert os.listdir(tmp_path / "engine") == ["ckpt-0000000003"]
    with pytest.raises(NotFoundError, match=r"No checkpoint in .*engine.*model\.ckpt-<step>"):
        program.shim_estimator(tmp_path / "warm", warm_start_from=str(tmp_path / "engine")).train(
            program.shim_input_fn, steps=1
        )
    assert not os.path.exists(tmp_path / "warm" / "checkpoint")


# TensorFlow-written model_dirs -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture, optimizer", [("estimator_cpu_adagrad", "adagrad"), ("estimator_cpu_adam", "adam")])
def test_resume_from_a_model_dir_tensorflow_wrote(tmp_path, caplog, fixture, optimizer):
    info, values = tf_values(fixture)
    model_dir = fixture_dir(fixture, tmp_path)
    est = program.shim_estimator(model_dir, optimizer=optimizer)
    with caplog.at_level(logging.INFO, logger=WARM_LOG):
        metrics = est.evaluate(program.shim_input_fn, steps=1)
    # The same model as TensorFlow's at step 3: tables, dense kernel and bias (claimed by the model_fn's
    # setdefault), so the same loss.
    assert metrics["global_step"] == 3
    assert metrics["loss"] == pytest.approx(info["eval_loss"], rel=1e-6)
    for name in program.TABLES:
        np.testing.assert_array_equal(est.get_variable_value(name), values[name])
    cpu = {"adagrad": {"accumulators": "Adagrad"}, "adam": {"momenta": "Adam", "velocities": "Adam_1"}}[optimizer]
    for slot, suffix in cpu.items():
        np.testing.assert_array_equal(
            est.engine.slots("tbl_user")[slot], values[f"dense_features/user_embedding/embedding_weights/{suffix}"]
        )
    text = caplog.text
    if optimizer == "adam":
        assert "are TensorFlow's CPU optimizer's, read as the EmbeddingConfigSpec optimizer's" in text
        assert "beta1_power / beta2_power" in text
    np.testing.assert_array_equal(est.dense_state["dense/kernel"], values["dense/kernel"])
    # Training on writes this runner's checkpoint: TensorFlow's TPU slot names, TF's leftovers dropped.
    est.train(program.shim_input_fn, steps=1)
    names = est.get_variable_names()
    assert est.latest_checkpoint() == os.path.join(model_dir, "model.ckpt-4")
    assert "dense/kernel/Adagrad" not in names and "beta1_power" not in names
    if optimizer == "adam":
        assert "dense_features/user_embedding/embedding_weights/Adam/m" in names


def test_resume_with_another_optimizer_starts_the_slots_afresh_and_says_so(tmp_path, caplog):
    _, values = tf_values("estimator_cpu_adagrad")
    est = program.shim_estimator(fixture_dir("estimator_cpu_adagrad", tmp_path), optimizer="ftrl")
    with caplog.at_level(logging.INFO, logger=WARM_LOG):
        assert est.engine.global_step == 3
    np.testing.assert_array_equal(est.engine.table("tbl_user"), values[USER])
    np.testing.assert_array_equal(est.engine.slots("tbl_user")["linears"], np.zeros((6, 2), np.float32))
    np.testing.assert_array_equal(est.engine.slots("tbl_user")["accumulators"], np.full((6, 2), 0.1, np.float32))
    assert (
        "the checkpoint has no ftrl slots for it (found ['Adagrad']); its slots ['accumulators', 'linears'] "
        "start from their initial values"
    ) in caplog.text


def test_resume_from_a_tpu_jobs_mod_checkpoint_puts_rows_back_in_id_order(tmp_path):
    expected = id_order()
    est = program.shim_estimator(
        fixture_dir("tpu_mod_3hosts", tmp_path), optimizer="adam", partition_strategy="mod", num_shards=2
    )
    assert est.engine.global_step == 12
    for name in program.TABLES:
        table = est.get_variable_value(name)
        np.testing.assert_array_equal(table, expected[name])
        for suffix in ("Adam/m", "Adam/v"):
            np.testing.assert_array_equal(est.get_variable_value(f"{name}/{suffix}"), expected[f"{name}/{suffix}"])
    est.train(program.shim_input_fn, steps=1)  # the dense kernel of the checkpoint is the model_fn's
    assert est.global_step == 13


# Warm start --------------------------------------------------------------------------------------------------


def test_warm_start_from_tensorflows_cpu_run_takes_tables_and_dense_not_slots_or_step(tmp_path, caplog):
    _, values = tf_values("estimator_cpu_adagrad")
    with caplog.at_level(logging.INFO, logger=WARM_LOG):
        est = program.shim_estimator(tmp_path / "m", warm_start_from=str(FIXTURES / "estimator_cpu_adagrad"))
        assert est.engine.global_step == 0
    for name in program.TABLES:
        np.testing.assert_array_equal(est.get_variable_value(name), values[name])
    np.testing.assert_array_equal(est.engine.slots("tbl_user")["accumulators"], np.full((6, 2), 0.1, np.float32))
    assert "start from their initial values (optimizer slots are not trainable variables" in caplog.text
    assert {"dense/kernel", "dense/bias"} <= set(est.dense_state.pending_keys)  # for the model_fn's setdefault
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=WARM_LOG):
        est.train(program.shim_input_fn, steps=1)
    # The first step's loss (before its update) is TensorFlow's loss at the step it saved: the same model.
    info, _ = tf_values("estimator_cpu_adagrad")
    loss = float(caplog.text.split("Loss for final step: ")[1].split(".\n")[0].rstrip("."))
    assert loss == pytest.approx(info["eval_loss"], rel=1e-6)
    assert est.global_step == 1


def test_warm_start_settings_select_by_name(tmp_path):
    _, values = tf_values("estimator_cpu_adam")
    path = str(FIXTURES / "estimator_cpu_adam")
    only_tables = program.shim_estimator(
        tmp_path / "a", optimizer="adam", warm_start_from=tf.estimator.WarmStartSettings(path, ".*embedding.*")
    )
    assert only_tables.engine.global_step == 0  # built and warm-started on first use
    for name in program.TABLES:
        np.testing.assert_array_equal(only_tables.get_variable_value(name), values[name])
    assert only_tables.dense_state.pending_keys == []  # dense/kernel and dense/bias do not match: not taken
    only_tables.train(program.shim_input_fn, steps=1)
    assert float(only_tables.dense_state["dense/bias"][0]) != float(values["dense/bias"][0])

    nothing = program.shim_estimator(
        tmp_path / "b", optimizer="adam", warm_start_from=tf.estimator.WarmStartSettings(path, vars_to_warm_start=None)
    )
    assert not np.array_equal(nothing.engine.table("tbl_user"), values[USER])

    everything = program.shim_estimator(
        tmp_path / "c",
        optimizer="adam",  # a list: slots and global_step too
        warm_start_from=tf.estimator.WarmStartSettings(path, [".*"]),
    )
    assert everything.engine.global_step == 3
    np.testing.assert_array_equal(
        everything.engine.slots("tbl_item")["velocities"], values["input_layer/item_embedding/embedding_weights/Adam_1"]
    )
    np.testing.assert_array_equal(
        everything.engine.table("tbl_q1_q2_shared_embedding"), values["q1_q2_shared_embedding"]
    )


def _renamed_program(model_dir, warm_start_from):
    """The program with column `user` renamed `member`: its table is dense_features/member_embedding/..."""
    fc = tf.feature_column
    member = tf.tpu.experimental.embedding_column(fc.categorical_column_with_identity("member", 6), 2)

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([member])(features)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode, loss=0.0, train_op=lambda: None, embedding_gradients={net: np.zeros_like(net)}
        )

    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[member], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
    )
    return tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=str(model_dir)),
        train_batch_size=2,
        embedding_config_spec=spec,
        warm_start_from=warm_start_from,
    )


def test_warm_start_maps_renamed_variables(tmp_path):
    _, values = tf_values("estimator_cpu_adagrad")
    path = str(FIXTURES / "estimator_cpu_adagrad")
    renamed = {"dense_features/member_embedding/embedding_weights": "dense_features/user_embedding/embedding_weights"}
    est = _renamed_program(tmp_path / "a", tf.estimator.WarmStartSettings(path, var_name_to_prev_var_name=renamed))
    np.testing.assert_array_equal(est.engine.table("tbl_member"), values[USER])
    # The slot follows its table's previous name when it is selected.
    est = _renamed_program(
        tmp_path / "b",
        tf.estimator.WarmStartSettings(path, vars_to_warm_start=[".*member.*"], var_name_to_prev_var_name=renamed),
    )
    np.testing.assert_array_equal(
        est.engine.slots("tbl_member")["accumulators"],
        values["dense_features/user_embedding/embedding_weights/Adagrad"],
    )

    unmapped = _renamed_program(tmp_path / "c", path)
    for _ in range(2):  # refused every time: it never trains without its warm start
        with pytest.raises(ValueError, match=r"^Tensor dense_features/member_embedding/embedding_weights is not "):
            unmapped.train(lambda params: {"member": np.array([[1], [2]])}, steps=1)
    assert not os.path.exists(tmp_path / "c" / "checkpoint")
    misspelled = {"dense_features/membr_embedding/embedding_weights": "dense/kernel"}
    with pytest.raises(
        ValueError,
        match=r"You provided the following variables in var_name_to_prev_var_name that "
        r"were not used: \{'dense_features/membr_embedding/embedding_weights'\}",
    ):
        _renamed_program(
            tmp_path / "d",
            tf.estimator.WarmStartSettings(path, vars_to_warm_start="dense/.*", var_name_to_prev_var_name=misspelled),
        ).engine
    assert not os.path.exists(tmp_path / "d" / "checkpoint")


def test_warm_start_from_a_tpu_jobs_mod_checkpoint(tmp_path):
    expected = id_order()
    path = str(FIXTURES / "tpu_mod_3hosts")
    est = program.shim_estimator(
        tmp_path / "a",
        optimizer="adam",
        partition_strategy="mod",
        warm_start_from=tf.estimator.WarmStartSettings(path, vars_to_warm_start=[".*"]),
    )
    assert est.engine.global_step == 12
    for name in program.TABLES:
        np.testing.assert_array_equal(est.get_variable_value(name), expected[name])
        np.testing.assert_array_equal(est.get_variable_value(f"{name}/Adam/v"), expected[f"{name}/Adam/v"])
    # Read as 'div' the rows stay in the hosts' order, which is what TensorFlow's reader returns.
    stored = tf.train.load_variable(path, "dense_features/user_embedding/embedding_weights")
    div = program.shim_estimator(tmp_path / "b", optimizer="adam", warm_start_from=path)
    np.testing.assert_array_equal(div.engine.table("tbl_user"), stored)
    assert not np.array_equal(stored, expected["dense_features/user_embedding/embedding_weights"])
    # The source's strategy can be given when this program's differs.
    named = program.shim_estimator(
        tmp_path / "c", optimizer="adam", warm_start_from=tf.estimator.WarmStartSettings(path, partition_strategy="mod")
    )
    np.testing.assert_array_equal(
        named.engine.table("tbl_user"), expected["dense_features/user_embedding/embedding_weights"]
    )
    with pytest.raises(
        CheckpointError,
        match=r"is stored in 3 row slices \(one per host of the TPU job\), but "
        r"num_hosts=2 was given",
    ):
        program.shim_estimator(
            tmp_path / "d",
            optimizer="adam",
            partition_strategy="mod",
            warm_start_from=tf.estimator.WarmStartSettings(path, num_hosts=2),
        ).engine


def test_a_whole_table_under_mod_needs_the_host_count(tmp_path):
    _, values = tf_values("estimator_cpu_adagrad")
    path = str(FIXTURES / "estimator_cpu_adagrad")
    with pytest.raises(
        CheckpointError,
        match=r"is stored whole, and the partition strategy is 'mod'.*"
        r"WarmStartSettings\(\.\.\., num_hosts=N\)",
    ):
        program.shim_estimator(tmp_path / "a", partition_strategy="mod", warm_start_from=path).engine
    assert not os.path.exists(tmp_path / "a" / "checkpoint")
    est = program.shim_estimator(
        tmp_path / "b", partition_strategy="mod", warm_start_from=tf.estimator.WarmStartSettings(path, num_hosts=1)
    )
    np.testing.assert_array_equal(est.engine.table("tbl_user"), values[USER])
    merged = program.shim_estimator(
        tmp_path / "c", partition_strategy="mod", warm_start_from=tf.estimator.WarmStartSettings(path, num_hosts=2)
    )
    np.testing.assert_array_equal(merged.engine.table("tbl_user"), from_mod_layout(values[USER], 2))


def test_warm_start_from_this_runners_model_dir(tmp_path):
    source = trained(tmp_path / "source", steps=3, optimizer="adam")
    warm = program.shim_estimator(tmp_path / "warm", optimizer="adam", warm_start_from=str(tmp_path / "source"))
    assert warm.engine.global_step == 0
    for name in program.TABLES:
        np.testing.assert_array_equal(warm.get_variable_value(name), source.get_variable_value(name))
    np.testing.assert_array_equal(warm.dense_state["dense/kernel"], source.get_variable_value("dense/kernel"))
    np.testing.assert_array_equal(warm.engine.slots("tbl_user")["momenta"], np.zeros((6, 2), np.float32))


@pytest.mark.parametrize(
    "settings, error, message",
    [
        (dict(ckpt_to_initialize_from=""), ValueError, "`ckpt_to_initialize_from` MUST be set in WarmStartSettings"),
        (
            dict(ckpt_to_initialize_from="x", vars_to_warm_start=3),
            ValueError,
            "`vars_to_warm_start must be a `list` or `str`.  Given type is <class 'int'>",
        ),
        (
            dict(ckpt_to_initialize_from="x", vars_to_warm_start=["a", 1]),
            ValueError,
            "If `vars_to_warm_start` is a list, it must be all `Variable` or all `str`.",
        ),
        (dict(ckpt_to_initialize_from="x", vars_to_warm_start="("), ValueError, "is not a regular expression"),
        (
            dict(ckpt_to_initialize_from="x", var_name_to_vocab_info={"v": object()}),
            NotImplementedError,
            "`var_name_to_vocab_info` (remapping rows to a new vocabulary) is not supported",
        ),
        (dict(ckpt_to_initialize_from="x", num_hosts=0), ValueError, "`num_hosts` must be an int >= 1 or None"),
        (dict(ckpt_to_initialize_from="x", partition_strategy="MOD"), ValueError, "`partition_strategy` must be"),
    ],
)
def test_warm_start_settings_are_checked(settings, error, message):
    with pytest.raises(error, match=re.escape(message)):
        tf.estimator.WarmStartSettings(**settings)


def test_warm_start_from_must_be_a_path_or_settings(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"^warm_start_from must be a string or a WarmStartSettings, instead got "
        r"<class 'int'>$",
    ):
        program.shim_estimator(tmp_path, warm_start_from=3)


# Errors change nothing -----------------------------------------------------------------------------------------


def _corrupt_data(prefix):
    path = prefix + ".data-00000-of-00001"
    data = bytearray(open(path, "rb").read())
    data[0] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize(
    "damage, error, message",
    [
        (_corrupt_data, DataLossError, r"model\.ckpt-3\.data-00000-of-00001: tensor '.*': .*checksum does not match"),
        (
            lambda prefix: os.remove(prefix + ".data-00000-of-00001"),
            NotFoundError,
            r"model\.ckpt-3\.data-00000-of-00001",
        ),
        (lambda prefix: open(prefix + ".index", "r+b").truncate(30), DataLossError, r"model\.ckpt-3\.index"),
    ],
    ids=["bad-crc", "missing-data-file", "truncated-index"],
)
def test_a_damaged_checkpoint_is_named_and_changes_nothing(tmp_path, damage, error, message):
    est = trained(tmp_path / "m", steps=3)
    shutil.copytree(tmp_path / "m", tmp_path / "bad")
    damage(str(tmp_path / "bad" / "model.ckpt-3"))
    est.train(program.shim_input_fn, steps=2)
    before, dense = est.engine.state(), {k: np.copy(v) for k, v in est.dense_state.items()}
    with pytest.raises(error, match=message):
        est.evaluate(program.shim_input_fn, checkpoint_path=str(tmp_path / "bad" / "model.ckpt-3"))
    after = est.engine.state()
    assert est.global_step == 5
    for table in before:
        for key in before[table]:
            np.testing.assert_array_equal(after[table][key], before[table][key])
    assert {k: v.tolist() for k, v in est.dense_state.items()} == {k: v.tolist() for k, v in dense.items()}


def test_a_table_that_does_not_fit_is_named_and_changes_nothing(tmp_path):
    trained(tmp_path, steps=2)
    bigger = tf.tpu.experimental.embedding_column(tf.feature_column.categorical_column_with_identity("user", 9), 2)
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[bigger], optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
    )

    def make():
        return tf.estimator.tpu.TPUEstimator(
            model_fn=lambda features, labels, mode, params: None,
            train_batch_size=2,
            embedding_config_spec=spec,
            config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path), tf_random_seed=1),
        )

    est = make()
    with pytest.raises(
        CheckpointError,
        match=rf"model\.ckpt-2': tensor '{USER}' has shape \[6, 2\], but table "
        r"tbl_user is \[9, 2\] in this program",
    ):
        est.engine
    fresh = make()
    fresh._state.build()
    np.testing.assert_array_equal(est._state.engine.table("tbl_user"), fresh._state.engine.table("tbl_user"))
    assert est._state.engine.global_step == 0


def test_a_state_file_naming_a_missing_checkpoint_is_refused(tmp_path):
    trained(tmp_path, steps=2)
    os.remove(tmp_path / "model.ckpt-2.index")
    with pytest.raises(
        NotFoundError,
        match=r"names '.*model\.ckpt-2' as the latest checkpoint, but .*model\.ckpt-2"
        r"\.index does not exist",
    ):
        program.shim_estimator(tmp_path).engine


def test_a_dense_value_of_another_shape_is_named_when_the_model_fn_sets_it(tmp_path):
    model_dir = fixture_dir("estimator_cpu_adagrad", tmp_path)
    user, item, hist, shared = program.shim_columns()

    def model_fn(features, labels, mode, params):
        params["dense_state"].setdefault("dense/kernel", np.zeros((3, 1), np.float32))
        raise AssertionError("not reached")

    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item, hist] + shared, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
    )
    est = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=model_dir),
        train_batch_size=4,
        embedding_config_spec=spec,
    )
    before = est.engine.state()
    with pytest.raises(
        ValueError,
        match=r"model\.ckpt-3'.*: tensor 'dense/kernel' has shape \[10, 1\], but the "
        r"model_fn sets dense_state\['dense/kernel'\] to shape \[3, 1\]",
    ):
        est.train(program.shim_input_fn, steps=1)
    np.testing.assert_array_equal(est.engine.table("tbl_user"), before["tbl_user"]["embedding"])
    assert est.global_step == 3


@pytest.mark.parametrize("key", ["global_step", "dense_features/user_embedding/embedding_weights"])
def test_a_dense_state_key_that_is_already_a_checkpoint_name_is_refused_before_writing(tmp_path, key):
    user, item, hist, shared = program.shim_columns()
    inner = program.shim_model_fn(user, item, hist, shared)

    def model_fn(features, labels, mode, params):
        params["dense_state"][key] = np.zeros(1)
        return inner(features, labels, mode, params)

    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item, hist] + shared, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1)
    )
    est = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path)),
        train_batch_size=4,
        embedding_config_spec=spec,
    )
    with pytest.raises(ValueError, match=f"dense_state would be saved as the tensor '{key}', which is already"):
        est.train(program.shim_input_fn, steps=1)
    assert os.listdir(tmp_path) == []


# The mod layout ------------------------------------------------------------------------------------------------


@given(st.integers(0, 40), st.integers(1, 9), st.integers(1, 3))
def test_mod_layout_is_the_hosts_rows_one_after_another(rows, hosts, width):
    table = np.arange(rows * width, dtype=np.float32).reshape(rows, width)
    stored = to_mod_layout(table, hosts)
    # TensorFlow's TPU save: host i's variable holds ids i, i + H, ..., saved as consecutive rows.
    np.testing.assert_array_equal(stored, np.concatenate([table[i::hosts] for i in range(hosts)]))
    np.testing.assert_array_equal(from_mod_layout(stored, hosts), table)


@pytest.mark.parametrize("rows", [None, 2])  # the program's tables, or a 2-row table (fewer rows than hosts)
def test_write_for_tpu_lays_tables_out_as_a_mod_tpu_job_saves_them(tmp_path, rows):
    if rows is None:
        est = trained(tmp_path / "m", steps=2, optimizer="adam")
        tables = program.ENGINE_TABLES
    else:
        column = tf.tpu.experimental.embedding_column(tf.feature_column.categorical_column_with_identity("t", rows), 2)
        spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=[column], optimization_parameters=tf.tpu.experimental.AdamParameters(0.1)
        )

        def model_fn(features, labels, mode, params):
            net = tf.keras.layers.DenseFeatures([column])(features)
            return tf.estimator.tpu.TPUEstimatorSpec(
                mode, loss=0.0, train_op=lambda: None, embedding_gradients={net: np.ones_like(net)}
            )

        est = tf.estimator.tpu.TPUEstimator(
            model_fn=model_fn,
            train_batch_size=2,
            embedding_config_spec=spec,
            config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path / "m")),
        )
        est.train(lambda params: {"t": np.array([[1], [1]])}, steps=2)
        tables = {"dense_features/t_embedding/embedding_weights": "tbl_t"}
    prefix = checkpoints.write_for_tpu(est.latest_checkpoint(), str(tmp_path / "tpu" / "model.ckpt-7"), num_hosts=3)
    reader = BundleReader(prefix)
    for name, table in tables.items():
        values = est.engine.table(table)
        for tensor, value in ((name, values), (name + "/Adam/m", est.engine.slots(table)["momenta"])):
            assert len(reader.entry(tensor).slices) == min(3, len(value))  # one row slice per host
            np.testing.assert_array_equal(reader.read(tensor), np.concatenate([value[i::3] for i in range(3)]))
    # This runner reads it back in id order, whatever its own partition strategy.
    for strategy in ("div", "mod"):
        spec = est.embedding_config_spec._replace(partition_strategy=strategy)
        again = tf.estimator.tpu.TPUEstimator(
            model_fn=est.model_fn,
            train_batch_size=2,
            embedding_config_spec=spec,
            config=tf.estimator.tpu.RunConfig(model_dir=str(tmp_path / "tpu")),
        )
        for name, table in tables.items():
            np.testing.assert_array_equal(again.get_variable_value(name), est.engine.table(table))
    with pytest.raises(ValueError, match="is already in the layout of 3 hosts"):
        checkpoints.write_for_tpu(prefix, str(tmp_path / "x" / "model.ckpt-7"), num_hosts=3)
