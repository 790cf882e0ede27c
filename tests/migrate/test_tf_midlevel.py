"""To TensorFlow's mid-level API: the report, the checkpoint, and the numbers.

The proof: the mid-level config (built, and from the generated code with
its one import changed to this project) restored from the migration's
checkpoint trains on exactly as the EmbeddingConfigSpec's engine does:
the same activations and the same tables and slots, step after step, with
every option the mid-level API has (pipelining, a learning-rate function,
non-lazy Adam with clipping and weight decay, weights, sqrtn, a shared
table with a sequence feature).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.migrate import EXACT, IMPOSSIBLE, LossyMigrationError, load_source, to_tf_midlevel
from tpu_embedding_shim.migrate.options import options

from .models import (
    EVERY_OPTIMIZER,
    _multiplier,
    every_optimizer_spec,
    every_option_config,
    midlevel_from_build,
    midlevel_from_code,
    movielens_config,
    small_spec,
)

CITIES = ["paris", "oslo", "lima"]


def _batch(rng: np.random.Generator, size: int = 4):
    """(the engine's features, the mid-level's features and weights) of one batch: the same examples."""

    def bags(vocabulary, longest):
        return [list(rng.integers(1, vocabulary, rng.integers(1, longest + 1))) for _ in range(size)]

    user, item, history, tags = bags(50, 2), bags(40, 1), bags(40, 7), bags(30, 3)
    tag_weights = [list(rng.uniform(0.5, 2.0, len(bag))) for bag in tags]
    cities = [list(rng.choice(CITIES, rng.integers(1, 3))) for _ in range(size)]
    engine = {"user": user, "item": item, "history": history, "tags": tags, "tag_weights": tag_weights, "city": cities}
    ids = {
        "user": user,
        "item": item,
        "history": history,
        "tags": tags,
        "city": [[CITIES.index(c) for c in bag] for bag in cities],
    }
    midlevel = {k: tf.ragged.constant([[int(i) for i in bag] for bag in v]) for k, v in ids.items()}
    weights = {k: None for k in ids} | {"tags": tf.ragged.constant(tag_weights)}
    return engine, midlevel, weights


def _gradients(rng, activations):
    return {k: rng.normal(size=np.shape(v)).astype(np.float32) for k, v in activations.items()}


def _trained_checkpoint(config, directory, steps=3):
    """The EmbeddingConfigSpec's engine trained `steps` steps, saved; (engine, checkpoint path)."""
    # clipping_limit changes nothing (the engine would only warn of it: docs/faq.md shows that warning)
    engine = Engine(dataclasses.replace(config.to_spec(), clipping_limit=None), seed=3, kernels="numpy")
    rng = np.random.default_rng(0)
    for _ in range(steps):
        features, _, _ = _batch(rng)
        result = engine.forward(features)
        engine.apply_gradients(result, _gradients(rng, result.activations))
    return engine, engine.save(str(directory))


@pytest.mark.parametrize("make", [midlevel_from_code, midlevel_from_build], ids=["generated code", "built"])
def test_the_midlevel_api_trains_on_as_the_embedding_config_spec(tmp_path, make):
    config = every_option_config(profile=False)
    engine, path = _trained_checkpoint(config, tmp_path / "model")
    migration = to_tf_midlevel(config, path)  # lossless: no impossible option
    assert migration.report.lossless and migration.step == 3
    embedding = make(migration, tmp_path / "out")
    rng = np.random.default_rng(1)
    for _ in range(4):
        features, ids, weights = _batch(rng)
        step = engine.global_step
        result = engine.forward(features)
        embedding.enqueue(ids, weights=weights, training=True)
        activations = embedding.dequeue()
        for name, value in result.activations.items():
            np.testing.assert_array_equal(activations[name], value, err_msg=name)
        gradients = _gradients(rng, result.activations)
        engine.apply_gradients(result, gradients)
        # The report's conversion of experimental_gradient_multiplier_fn: the caller scales the gradients.
        embedding.apply_gradients({k: g * np.float32(_multiplier(step)) for k, g in gradients.items()})
    # To float32 rounding: the mid-level API flattens a feature dict in sorted key order (as TensorFlow's nest
    # does), so the gradients of features sharing a table (item, history) are summed in another order.
    for table in config.to_spec().tables:
        variables = {k: np.asarray(v) for k, v in embedding.variables[_table(embedding, table.name)].items()}
        close = {"rtol": 1e-5, "atol": 1e-7}
        np.testing.assert_allclose(variables.pop("parameters"), engine.table(table.name), **close, err_msg=table.name)
        assert sorted(variables) == sorted(engine.slots(table.name))
        for slot, values in engine.slots(table.name).items():
            np.testing.assert_allclose(variables[slot], values, **close, err_msg=f"{table.name}/{slot}")


def _table(embedding, name):
    return next(t for t in embedding.variables if t.name == name)


def test_the_checkpoint_holds_tensorflows_keys_and_the_weights(tmp_path):
    config = movielens_config()
    migration = to_tf_midlevel(config, seed=5)
    source = load_source(config, seed=5)
    migration.write(tmp_path)
    reader = tf.train.load_checkpoint(str(tmp_path / "tf_checkpoint"))
    for table, arrays in source.state.items():
        np.testing.assert_array_equal(
            reader.get_tensor(f"embedding/{table}/.ATTRIBUTES/VARIABLE_VALUE"), arrays["embedding"]
        )
        np.testing.assert_array_equal(
            reader.get_tensor(f"embedding/{table}.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE"), arrays["accumulators"]
        )
        np.testing.assert_array_equal(
            migration.weights[f"embedding/{table}/.ATTRIBUTES/VARIABLE_VALUE"], arrays["embedding"]
        )


def test_tensor_core_tables_go_beside_the_checkpoint(tmp_path):
    migration = to_tf_midlevel(every_option_config(profile=False))
    migration.write(tmp_path)
    with np.load(tmp_path / "tensor_core.npz") as stored:
        assert sorted(stored.files) == ["tbl_country"] and stored["tbl_country"].shape == (12, 4)
    assert migration.report.row("table tbl_country", "placement").status == "converted"


def test_every_option_has_one_row_and_optimizers_without_a_v2_class_are_impossible():
    spec = every_optimizer_spec()
    with pytest.raises(LossyMigrationError, match="momentum[\\s\\S]*rmsprop[\\s\\S]*proximal_adagrad"):
        to_tf_midlevel(spec)
    migration = to_tf_midlevel(spec, allow_lossy=True)
    rows = migration.report.rows
    assert [(r.where, r.option) for r in rows] == [(o.where, o.name) for o in options(load_source(spec))]
    impossible = {r.where for r in migration.report.impossible}
    v2_kinds = {"sgd", "adagrad", "adagrad_momentum", "adam", "ftrl"}
    assert impossible == {f"table t_{o.kind}" for o in EVERY_OPTIMIZER if o.kind not in v2_kinds}
    assert migration.report.row("table t_adam", "optimizer.sum_inside_sqrt").status == EXACT
    assert migration.report.row("table t_adagrad", "optimizer.initial_accumulator").target.startswith(
        "Adagrad(initial_accumulator_value"
    )
    compile(migration.code, "model.py", "exec")  # impossible tables get optimizer=None, still valid code


def test_a_local_learning_rate_function_is_impossible_in_code_but_runs_built():
    from tpu_embedding_shim.spec import SGDSpec

    def local(step):
        return 0.5 / (step + 1)

    spec = small_spec(optimizer=SGDSpec(learning_rate=local))
    with pytest.raises(LossyMigrationError, match="local function"):
        to_tf_midlevel(spec)
    migration = to_tf_midlevel(spec, allow_lossy=True)
    assert "learning_rate=0.5,  # TF: a local function" in migration.code
    built = migration.config["feature_config"]["f"].table.optimizer.learning_rate
    assert [built(), built(), built()] == [0.5, 0.25, 0.5 / 3]


def test_the_generated_code_is_valid_python_for_every_model():
    for config in (movielens_config(), every_option_config(profile=False), every_optimizer_spec()):
        compile(to_tf_midlevel(config, allow_lossy=True).code, "model.py", "exec")


@settings(max_examples=25, deadline=None)
@given(
    strategy=st.sampled_from(["div", "mod"]),
    pipelining=st.booleans(),
    combiner=st.sampled_from(["sum", "mean", "sqrtn"]),
)
def test_spec_options_map_without_loss(strategy, pipelining, combiner):
    from dataclasses import replace

    spec = replace(small_spec(combiner), partition_strategy=strategy, pipeline_execution_with_tensor_core=pipelining)
    migration = to_tf_midlevel(spec)
    assert migration.report.lossless and not migration.report.with_status(IMPOSSIBLE)
    assert migration.config["pipeline_execution_with_tensor_core"] is pipelining
    assert migration.config["feature_config"]["f"].table.combiner == combiner
    status = migration.report.row("spec", "partition_strategy").status
    assert status == (EXACT if strategy == "mod" else "converted")


def test_write_weights_of_an_inference_spec(tmp_path):
    from dataclasses import replace

    spec = replace(small_spec(), optimizer=None)
    migration = to_tf_midlevel(spec)
    assert migration.config["optimizer"] is None and "optimizer=None" in migration.code
    migration.write(tmp_path)
    assert os.path.isfile(tmp_path / "tf_checkpoint" / "ckpt-1.index")
