"""To jax-tpu-embedding, without the library: the report, the weights and slot names, the generated code.

tests/migrate/test_jax_tpu_embedding_run.py builds the specs with the library and checks its numbers.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math

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
    jax_tpu_embedding,
    load_source,
    sparsecore,
    to_jax_tpu_embedding,
)
from tpu_embedding_shim.migrate.options import options
from tpu_embedding_shim.spec import AdamSpec, FtrlSpec, SGDSpec

from .models import EVERY_OPTIMIZER, every_optimizer_spec, every_option_config, movielens_config, small_spec

JTE_SLOTS = {
    "sgd": {},
    "adagrad": {"accumulator": "accumulators"},
    "adagrad_momentum": {"accumulator": "accumulators", "momentum": "momenta"},
    "adam": {"momentum": "momenta", "velocity": "velocities"},
    "ftrl": {"accumulator": "accumulators", "linear": "linears"},
}
"""jax-tpu-embedding's slot field -> TF's slot (embedding_spec.py's *SlotVariables namedtuples)."""

MODELS = {
    "movielens": movielens_config,
    "every option": every_option_config,
    "every optimizer": every_optimizer_spec,
}


def _trained_checkpoint(spec, directory, steps=3):
    """`spec`'s engine trained `steps` steps and saved with save_checkpoint; (its state, path)."""
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


@pytest.mark.parametrize("name", MODELS)
def test_every_option_gets_one_row(name):
    config = MODELS[name]()
    migration = to_jax_tpu_embedding(config, allow_lossy=True, batch_size=8)
    expected = [(o.where, o.name) for o in options(load_source(config))]
    assert [(r.where, r.option) for r in migration.report.rows] == expected


def test_optimizers_without_a_spec_and_adams_epsilon_are_impossible():
    spec = every_optimizer_spec()
    with pytest.raises(LossyMigrationError, match=r"t_adam: optimizer.epsilon[\s\S]*t_momentum: optimizer="):
        to_jax_tpu_embedding(spec)
    report = to_jax_tpu_embedding(spec, allow_lossy=True).report
    impossible = {(r.where, r.option) for r in report.impossible}
    assert {where for where, _ in impossible} == {
        "table t_adam",
        "table t_momentum",
        "table t_rmsprop",
        "table t_proximal_adagrad",
    }
    assert {o for w, o in impossible if w == "table t_adam"} == {"optimizer.epsilon", "optimizer.sum_inside_sqrt"}
    assert report.row("table t_adam", "optimizer").status == CONVERTED
    assert (
        "initial_accumulator_value=0.0, initial_momentum_value=0.0"
        in report.row("table t_adagrad_momentum", "optimizer").target
    )
    assert report.row("table t_adagrad", "optimizer.initial_accumulator").target == (
        "AdagradOptimizerSpec(initial_accumulator_value=0.2)"
    )
    assert report.row("table t_momentum", "optimizer").target == "SGD at TF's learning rate"
    # The fallback SGD keeps the options every optimizer has; the optimizer's own are what is lost.
    assert {o for w, o in impossible if w == "table t_momentum"} == {
        "optimizer",
        "optimizer.momentum",
        "optimizer.use_nesterov",
    }
    assert report.row("table t_momentum", "optimizer.learning_rate").target == "SGDOptimizerSpec(learning_rate=0.1)"


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("optimizer", [SGDSpec(learning_rate=0.1), FtrlSpec(learning_rate=0.1, beta=0.5)], ids=str)
def test_sgd_adagrad_and_ftrl_tables_convert_without_loss(combiner, optimizer):
    for spec in (small_spec(combiner), small_spec(combiner, optimizer, weighted=True)):
        report = to_jax_tpu_embedding(spec).report
        assert report.lossless and report.row("table t", "combiner").status == EXACT


def test_adam_converts_only_with_epsilon_outside_the_root_and_lazy():
    report = to_jax_tpu_embedding(small_spec(optimizer=AdamSpec(learning_rate=0.1)), allow_lossy=True).report
    assert {r.option for r in report.impossible} == {"optimizer.epsilon", "optimizer.sum_inside_sqrt"}
    spec = small_spec(optimizer=AdamSpec(learning_rate=0.1, sum_inside_sqrt=False, lazy_adam=False))
    report = to_jax_tpu_embedding(spec, allow_lossy=True).report
    assert {r.option for r in report.impossible} == {"optimizer.epsilon", "optimizer.lazy_adam"}


def _expected_weights(source):
    expected = {}
    for table in source.tables:
        arrays = source.state[table.name]
        expected[table.name] = arrays["embedding"]
        optimizer = source.optimizer_for(table.name)
        for field, slot in JTE_SLOTS.get(getattr(optimizer, "kind", ""), {}).items():
            expected[f"{table.name}/{field}"] = arrays[slot]
    return expected


def test_the_weights_are_the_tables_and_slots_fresh_and_from_a_checkpoint(tmp_path):
    spec = every_optimizer_spec()
    state, path = _trained_checkpoint(spec, tmp_path)
    fresh = to_jax_tpu_embedding(spec, allow_lossy=True, seed=2)
    trained = to_jax_tpu_embedding(spec, path, allow_lossy=True)
    assert trained.step == 3 and fresh.step == 0
    for migration, source in ((fresh, load_source(spec, seed=2)), (trained, load_source(spec, path))):
        expected = _expected_weights(source)
        assert sorted(migration.weights) == sorted(expected)
        for key, values in expected.items():
            np.testing.assert_array_equal(migration.weights[key], values, err_msg=key)
    # TF's accumulators include their initial value: the converted slot is TF's state, not a delta.
    np.testing.assert_array_equal(trained.weights["t_adagrad/accumulator"], state["t_adagrad"]["accumulators"])
    assert not np.array_equal(trained.weights["t_adagrad/accumulator"], fresh.weights["t_adagrad/accumulator"])
    assert "t_momentum/momentum" not in trained.weights  # no spec to carry it: the report says so
    assert "STEP = 3" in trained.code


@settings(max_examples=30, deadline=None)
@given(
    optimizer=st.sampled_from(EVERY_OPTIMIZER),
    vocabulary=st.integers(1, 40),
    dim=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_weights_hold_every_table_and_exactly_the_slots_the_spec_has(optimizer, vocabulary, dim, seed):
    spec = small_spec(optimizer=optimizer, vocabulary_size=vocabulary, dim=dim)
    source = load_source(spec, seed=seed)
    weights = jax_tpu_embedding.weights(source)
    fields = JTE_SLOTS.get(optimizer.kind, {})
    assert sorted(weights) == sorted(["t"] + [f"t/{field}" for field in fields])
    for key, values in weights.items():
        tf_slot = "embedding" if key == "t" else fields[key.split("/")[1]]
        assert values.shape == (vocabulary, dim) and values.dtype == np.float32
        np.testing.assert_array_equal(values, source.state["t"][tf_slot])


@settings(max_examples=60, deadline=None)
@given(
    learning_rate=st.floats(1e-4, 10.0),
    beta_1=st.floats(0.0, 0.999),
    beta_2=st.floats(0.0, 0.9999),
    step=st.integers(0, 10_000),
    as_function=st.booleans(),
)
def test_adam_learning_rate_cancels_the_bias_correction(learning_rate, beta_1, beta_2, step, as_function):
    """jax-tpu-embedding's AdamOptimizerSpec.get_hyperparameters(step) computes
    alpha_t = lr(step) * sqrt(1 - beta_2**(step+1)) / (1 - beta_1**(step+1)): with our learning rate it is TF's."""
    rate = (lambda s: learning_rate / (1 + s)) if as_function else learning_rate
    expected = rate(step) if as_function else learning_rate
    t = step + 1
    alpha_t = sparsecore.adam_learning_rate(rate, beta_1, beta_2)(step) * math.sqrt(1 - beta_2**t) / (1 - beta_1**t)
    assert alpha_t == pytest.approx(expected, rel=1e-12)


def test_the_code_is_valid_python_and_imports_the_learning_rate_function():
    for config in MODELS.values():
        compile(to_jax_tpu_embedding(config(), allow_lossy=True).code, "model.py", "exec")
    migration = to_jax_tpu_embedding(every_option_config(), allow_lossy=True, batch_size=16)
    assert "GLOBAL_BATCH_SIZE = 16" in migration.code
    assert "import _learning_rate" in migration.code and "'tbl_user': _learning_rate," in migration.code
    assert migration.report.row("table tbl_user", "optimizer.learning_rate").status == CONVERTED
    assert "adam_learning_rate(learning_rates['tbl_user'], 0.8, 0.99)" in migration.code
    assert "def adam_learning_rate(learning_rate, beta_1, beta_2):" in migration.code


def test_weight_clipping_goes_to_embedding_var_limits_for_every_table():
    spec = every_optimizer_spec()
    tables = tuple(
        dataclasses.replace(t, optimizer=dataclasses.replace(t.optimizer, clip_weight_min=-1.0))
        if t.name == "t_adagrad"
        else t
        for t in spec.tables
    )
    migration = to_jax_tpu_embedding(dataclasses.replace(spec, tables=tables), allow_lossy=True)
    assert migration.report.row("table t_adagrad", "optimizer.clip_weight_min").status == CONVERTED
    assert "    't_adagrad': (-1.0, None)," in migration.code and "    't_sgd': (None, None)," in migration.code


def test_a_local_learning_rate_function_is_impossible_in_code():
    def local(step):
        return 0.5 / (step + 1)

    spec = small_spec(optimizer=SGDSpec(learning_rate=local))
    with pytest.raises(LossyMigrationError, match="local function"):
        to_jax_tpu_embedding(spec)
    migration = to_jax_tpu_embedding(spec, allow_lossy=True)
    assert "'t': 0.5,  # TF: a local function of the step" in migration.code


def test_tensor_core_tables_ship_as_arrays_without_a_table_spec():
    migration = to_jax_tpu_embedding(every_option_config(), allow_lossy=True)
    report = migration.report
    assert report.row("table tbl_country", "placement").status == CONVERTED
    assert report.row("feature country", "weight_key").target == "the model's dense lookup"
    assert migration.weights["tbl_country"].shape == (12, 4) and "tbl_country/" not in " ".join(migration.weights)
    assert "return {name: weights[name] for name in ['tbl_country']}" in migration.code
    assert "name='tbl_country'" not in migration.code


def test_movielens_converts_with_its_sequence_feature_as_the_one_loss(tmp_path):
    config = movielens_config()
    with pytest.raises(LossyMigrationError, match="history: max_sequence_length=20"):
        to_jax_tpu_embedding(config, batch_size=32)
    migration = to_jax_tpu_embedding(config, allow_lossy=True, batch_size=32)
    assert [(r.where, r.option) for r in migration.report.impossible] == [("feature history", "max_sequence_length")]
    assert migration.report.row("feature zip", "num_oov_buckets").status == CONVERTED
    assert migration.report.row("feature zip", "id_source").status == CONVERTED
    assert "'gender': ('M', 'F')," in migration.code
    paths = migration.write(tmp_path)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["model.py", "weights.npz", "report.md"]
    with np.load(tmp_path / "weights.npz") as stored:
        assert sorted(stored.files) == sorted(migration.weights)
        for key in stored.files:
            np.testing.assert_array_equal(stored[key], migration.weights[key])
    assert (tmp_path / "model.py").read_text() == migration.code
    assert "## What will differ" in (tmp_path / "report.md").read_text()


def test_without_a_batch_size_the_shapes_hold_none_and_the_notes_say_so():
    migration = to_jax_tpu_embedding(small_spec())
    assert "GLOBAL_BATCH_SIZE = None" in migration.code
    assert any("No global batch size" in note for note in migration.report.notes)


def test_without_the_library_the_config_is_left_to_the_code(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "jax_tpu_embedding" else real(name, *a)
    )
    migration = to_jax_tpu_embedding(small_spec())
    assert migration.config is None and "not installed" in migration.missing
    assert jax_tpu_embedding.NAME == "jax" and migration.target == "jax"


def test_spec_options_map_by_value():
    spec = dataclasses.replace(small_spec(), partition_strategy="mod", pipeline_execution_with_tensor_core=True)
    report = to_jax_tpu_embedding(spec, allow_lossy=True).report
    assert report.row("spec", "partition_strategy").status == EXACT
    assert report.row("spec", "pipeline_execution_with_tensor_core").status == IMPOSSIBLE
    report = to_jax_tpu_embedding(small_spec()).report
    assert report.row("spec", "partition_strategy").status == CONVERTED  # div: the weights are whole tables
