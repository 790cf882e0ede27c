"""To keras-rs, without the library: the report, the weights, the generated code.

tests/migrate/test_keras_rs_run.py builds the layer with keras-rs on JAX and compares its lookups with the engine.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.engine.checkpoint import save_checkpoint
from tpu_embedding_shim.migrate import (
    CONVERTED,
    EXACT,
    IMPOSSIBLE,
    LossyMigrationError,
    keras_rs,
    load_source,
    to_keras_rs,
)
from tpu_embedding_shim.migrate.options import options
from tpu_embedding_shim.spec import AdagradSpec, AdamSpec, FtrlSpec, SGDSpec

from .models import EVERY_OPTIMIZER, every_optimizer_spec, every_option_config, movielens_config, small_spec

KERAS_SLOTS = {
    "sgd": {},
    "adagrad": {"accumulator": "accumulators"},
    "adam": {"momentum": "momenta", "velocity": "velocities"},
    "ftrl": {"accumulator": "accumulators", "linear": "linears"},
}
"""The optimizers keras-rs 0.4.0 takes (SGD, Adagrad, Adam, Ftrl): jax-tpu-embedding's slot field -> TF's slot."""

MODELS = {
    "movielens": movielens_config,
    "every option": every_option_config,
    "every optimizer": every_optimizer_spec,
}


@pytest.mark.parametrize("name", MODELS)
def test_every_option_gets_one_row(name):
    config = MODELS[name]()
    migration = to_keras_rs(config, allow_lossy=True, batch_size=8)
    expected = [(o.where, o.name) for o in options(load_source(config))]
    assert [(r.where, r.option) for r in migration.report.rows] == expected


def test_every_table_sets_its_optimizer_because_keras_rs_defaults_to_adam():
    for config in MODELS.values():
        migration = to_keras_rs(config(), allow_lossy=True)
        tables = len(load_source(config()).tables)
        assert migration.code.count("keras_rs.layers.TableConfig(") == tables
        assert migration.code.count("        optimizer=keras.optimizers.") == tables
        assert any("default is Adam" in note for note in migration.report.notes)


def test_optimizers_keras_rs_lacks_are_impossible_and_fall_back_to_sgd():
    spec = every_optimizer_spec()
    with pytest.raises(LossyMigrationError, match=r"t_adagrad_momentum: optimizer=[\s\S]*t_proximal_adagrad"):
        to_keras_rs(spec)
    migration = to_keras_rs(spec, allow_lossy=True)
    report = migration.report
    impossible = {where for where, _ in {(r.where, r.option) for r in report.impossible}}
    assert impossible == {
        f"table t_{k}" for k in ("adagrad_momentum", "adam", "momentum", "rmsprop", "proximal_adagrad")
    }
    assert report.row("table t_adam", "optimizer").status == CONVERTED
    assert report.row("table t_adagrad", "optimizer").target == "keras.optimizers.Adagrad"
    rmsprop = {r.option for r in report.impossible if r.where == "table t_rmsprop"}
    assert rmsprop == {"optimizer", "optimizer.rho", "optimizer.momentum", "optimizer.epsilon"}
    assert report.row("table t_rmsprop", "optimizer.learning_rate").target == "keras.optimizers.SGD(learning_rate=0.1)"
    assert "epsilon=1e-07" in report.row("table t_adagrad", "optimizer.initial_accumulator").target
    assert "optimizer=keras.optimizers.SGD(learning_rate=learning_rates['t_momentum']),  # TF: momentum" in (
        migration.code
    )
    assert "keras.optimizers.Adagrad(learning_rate=learning_rates['t_adagrad'], initial_accumulator_value=0.2" in (
        migration.code
    )


def test_what_keras_rs_on_jax_drops_is_impossible():
    """Weight clipping (no limits passed to the kernels), weight decay and clipvalue (neither mapped nor rejected)."""
    report = to_keras_rs(every_option_config(), allow_lossy=True).report
    impossible = {r.option for r in report.impossible if r.where == "table tbl_user"}
    assert impossible == {
        "optimizer.clip_weight_min",
        "optimizer.clip_weight_max",
        "optimizer.weight_decay_factor",
        "optimizer.multiply_weight_decay_factor_by_learning_rate",
        "optimizer.clip_gradient_min",
        "optimizer.clip_gradient_max",
        "optimizer.epsilon",
        "optimizer.lazy_adam",
    }
    assert "neither maps nor rejects" in report.row("table tbl_user", "optimizer.weight_decay_factor").how


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize(
    "optimizer", [SGDSpec(learning_rate=0.1), AdagradSpec(learning_rate=0.2), FtrlSpec(learning_rate=0.1)], ids=str
)
def test_sgd_adagrad_and_ftrl_tables_convert_without_loss(combiner, optimizer):
    report = to_keras_rs(small_spec(combiner, optimizer, weighted=True)).report
    assert report.lossless
    assert report.row("table t", "combiner").status == EXACT
    assert report.row("table t", "placement").status == CONVERTED  # 'auto': the optimizer rows hold on SparseCore
    assert report.row("feature f", "weight_key").status == CONVERTED


def test_ftrl_flags_keras_has_not():
    spec = small_spec(
        optimizer=FtrlSpec(learning_rate=0.1, multiply_linear_by_learning_rate=True, initial_linear_value=0.5)
    )
    report = to_keras_rs(spec, allow_lossy=True).report
    assert [r.option for r in report.impossible] == ["optimizer.multiply_linear_by_learning_rate"]
    assert report.row("table t", "optimizer.initial_linear_value").status == CONVERTED


def test_tensor_core_tables_go_to_default_device_without_slots():
    migration = to_keras_rs(every_option_config(), allow_lossy=True)
    report = migration.report
    assert report.row("table tbl_country", "placement").status == EXACT
    assert report.row("table tbl_country", "optimizer").status == EXACT
    assert report.row("table tbl_user", "placement").target == "TableConfig(placement='auto')"
    assert "placement='default_device'" in migration.code
    assert [key for key in migration.weights if key.startswith("tbl_country")] == ["tbl_country"]
    assert "update_stats=True" in migration.code  # the profile directory: keras-rs keeps its own statistics
    assert report.row("spec", "profile_data_directory").status == CONVERTED


def _trained_checkpoint(spec, directory, steps=3):
    engine = Engine(spec, seed=4, kernels="numpy")
    rng = np.random.default_rng(0)
    for _ in range(steps):
        features = {f.name: [list(rng.integers(0, f.num_buckets, 2)) for _ in range(3)] for f in spec.features}
        result = engine.forward(features)
        engine.apply_gradients(result, {k: rng.normal(size=np.shape(v)) for k, v in result.activations.items()})
    path = save_checkpoint(
        directory, engine.state(), step=steps, spec_structure=spec.structure(), fingerprint=spec.fingerprint()
    )
    return engine.state(), path


def test_the_weights_are_the_tables_and_the_slots_keras_rs_takes(tmp_path):
    spec = every_optimizer_spec()
    state, path = _trained_checkpoint(spec, tmp_path)
    for migration, source in (
        (to_keras_rs(spec, allow_lossy=True, seed=9), load_source(spec, seed=9)),
        (to_keras_rs(spec, path, allow_lossy=True), load_source(spec, path)),
    ):
        expected = {}
        for table in source.tables:
            expected[table.name] = source.state[table.name]["embedding"]
            for field, slot in KERAS_SLOTS.get(source.optimizer_for(table.name).kind, {}).items():
                expected[f"{table.name}/{field}"] = source.state[table.name][slot]
        assert sorted(migration.weights) == sorted(expected)
        for key, values in expected.items():
            np.testing.assert_array_equal(migration.weights[key], values, err_msg=key)
    np.testing.assert_array_equal(migration.weights["t_ftrl/linear"], state["t_ftrl"]["linears"])
    assert migration.step == 3 and "STEP = 3" in migration.code


@settings(max_examples=30, deadline=None)
@given(optimizer=st.sampled_from(EVERY_OPTIMIZER), dim=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_slots_ship_only_for_optimizers_keras_rs_takes(optimizer, dim, seed):
    source = load_source(small_spec(optimizer=optimizer, dim=dim), seed=seed)
    weights = keras_rs.weights(source)
    fields = KERAS_SLOTS.get(optimizer.kind, {})
    assert sorted(weights) == sorted(["t"] + [f"t/{field}" for field in fields])
    for field, slot in fields.items():
        np.testing.assert_array_equal(weights[f"t/{field}"], source.state["t"][slot])


def test_the_code_is_valid_python_for_every_model_and_batch():
    for config in MODELS.values():
        for batch in (None, 64):
            migration = to_keras_rs(config(), allow_lossy=True, batch_size=batch)
            code = migration.code
            compile(code, "model.py", "exec")
            assert f"GLOBAL_BATCH_SIZE = {batch}" in code
            batch_notes = [note for note in migration.report.notes if note.startswith("No global batch size")]
            assert len(batch_notes) == (batch is None)
            assert 'os.environ.setdefault("KERAS_BACKEND", "jax")' in code
    code = to_keras_rs(every_option_config(), allow_lossy=True).code
    features = re.findall(r"keras_rs\.layers\.FeatureConfig\(name='(\w+)'", code)
    assert features == ["user", "item", "history", "tags", "city", "country"]
    assert "input_shape=(GLOBAL_BATCH_SIZE, None), output_shape=(GLOBAL_BATCH_SIZE, 8)" in code


def test_movielens_converts_and_is_written(tmp_path):
    config = movielens_config()
    with pytest.raises(LossyMigrationError, match="history: max_sequence_length=20"):
        to_keras_rs(config)
    migration = to_keras_rs(config, allow_lossy=True, batch_size=32)
    report = migration.report
    assert [(r.where, r.option) for r in report.impossible] == [("feature history", "max_sequence_length")]
    assert report.row("feature genres", "id_source").status == CONVERTED
    assert report.row("feature user", "dense_zero_is_padding").status == CONVERTED
    assert report.row("table tbl_user", "optimizer").status == EXACT
    migration.write(tmp_path)
    with np.load(tmp_path / "weights.npz") as stored:
        assert sorted(stored.files) == sorted(migration.weights)
        np.testing.assert_array_equal(stored["tbl_user/accumulator"], migration.weights["tbl_user/accumulator"])
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# Migration to keras-rs 0.4.0") and "| feature history | `max_sequence_length` |" in text


def test_a_gradient_multiplier_and_pipelining():
    report = to_keras_rs(every_option_config(), allow_lossy=True).report
    assert report.row("spec", "gradient_multiplier_fn").status == CONVERTED
    assert "stop_gradient" in report.row("spec", "gradient_multiplier_fn").how
    assert report.row("spec", "pipeline_execution_with_tensor_core").status == IMPOSSIBLE
    spec = dataclasses.replace(small_spec(), partition_strategy="mod")
    assert to_keras_rs(spec).report.row("spec", "partition_strategy").status == EXACT


def test_adam_converts_with_the_bias_correction_cancelled():
    migration = to_keras_rs(small_spec(optimizer=AdamSpec(learning_rate=0.1, sum_inside_sqrt=False)), allow_lossy=True)
    assert [r.option for r in migration.report.impossible] == ["optimizer.epsilon"]
    assert (
        "optimizer=keras.optimizers.Adam(learning_rate=adam_learning_rate(learning_rates['t'], 0.9, 0.999), "
        "beta_1=0.9, beta_2=0.999, epsilon=1e-08)," in migration.code
    )


def test_without_keras_rs_the_config_is_left_to_the_code(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "keras_rs" else real(name, *a))
    migration = to_keras_rs(small_spec())
    assert migration.config is None and "not installed" in migration.missing
    assert keras_rs.NAME == migration.target == "keras-rs"
