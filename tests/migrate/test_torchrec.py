"""To TorchRec, without TorchRec: the report covers every option and refuses what FBGEMM cannot do, the weights
and fused optimizer state are the source's in TorchRec's names and layout, the generated model.py compiles and its
coefficients reproduce the engine's combiners. test_torchrec_run.py runs the result in TorchRec."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import Engine, Ragged, lookup
from tpu_embedding_shim.migrate import (
    CONVERTED,
    EXACT,
    IMPOSSIBLE,
    LossyMigrationError,
    load_source,
    to_torchrec,
)
from tpu_embedding_shim.migrate import torchrec as target
from tpu_embedding_shim.migrate.migration import CODE_FILE, REPORT_FILE, WEIGHTS_FILE
from tpu_embedding_shim.migrate.options import options
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec

from . import models
from .models import every_optimizer_spec, every_option_config, movielens_config, small_spec


def _keys(rows):
    return [(row.where, row.option) for row in rows]


def _status(migration, where, option):
    return migration.report.row(where, option).status


# The report ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [movielens_config, every_option_config, every_optimizer_spec, lambda: small_spec("sqrtn", weighted=True)],
    ids=["movielens", "every-option", "every-optimizer", "small"],
)
def test_every_option_gets_exactly_one_row(config):
    config = config()
    migration = to_torchrec(config, allow_lossy=True)
    assert _keys(migration.report.rows) == [(option.where, option.name) for option in options(load_source(config))]
    assert migration.report.target == target.TITLE


def test_movielens_converts_without_loss():
    migration = to_torchrec(movielens_config())
    report = migration.report
    assert report.lossless
    # sqrtn makes the collection weighted: every pooled mean becomes SUM with coefficients.
    assert _status(migration, "table tbl_genres", "combiner") == CONVERTED
    assert _status(migration, "table tbl_user", "combiner") == CONVERTED
    # The item / history table serves a sequence feature: it is in the EmbeddingCollection.
    assert "EmbeddingCollection" in report.row("table tbl_history_item_shared_embedding", "combiner").how
    assert _status(migration, "feature history", "max_sequence_length") == CONVERTED
    # gender's dim 2 is padded to 4 (FBGEMM), Adagrad's state is written after building.
    assert report.row("table tbl_gender", "dim").target == "embedding_dim=4"
    assert _status(migration, "table tbl_user", "optimizer") == CONVERTED
    assert _status(migration, "table tbl_user", "optimizer.initial_accumulator") == CONVERTED
    assert _status(migration, "feature zip", "num_oov_buckets") == CONVERTED
    assert _status(migration, "table tbl_user", "optimizer.learning_rate") == EXACT


def test_sum_and_an_unweighted_mean_are_exact():
    for combiner, pooling in (("sum", "SUM"), ("mean", "MEAN")):
        migration = to_torchrec(small_spec(combiner, AdagradSpec(learning_rate=0.1)))
        row = migration.report.row("table t", "combiner")
        assert (row.status, row.target) == (EXACT, f"PoolingType.{pooling}")
        assert f"pooling=PoolingType.{pooling}" in migration.code
        assert "IS_WEIGHTED = False" in migration.code
        assert _status(migration, "feature f", "weight_key") == EXACT


@pytest.mark.parametrize("combiner, weighted", [("sqrtn", False), ("sqrtn", True), ("mean", True)])
def test_sqrtn_and_a_weighted_mean_become_coefficient_weights(combiner, weighted):
    migration = to_torchrec(small_spec(combiner, weighted=weighted))
    row = migration.report.row("table t", "combiner")
    assert (row.status, row.target) == (CONVERTED, "PoolingType.SUM, per-id weights")
    assert "IS_WEIGHTED = True" in migration.code and "pooling=PoolingType.SUM" in migration.code
    assert _status(migration, "feature f", "weight_key") == CONVERTED
    assert _status(migration, "feature f", "safe_lookup") == (CONVERTED if weighted else EXACT)


def test_a_weighted_sum_takes_the_weights_as_they_are():
    migration = to_torchrec(small_spec("sum", weighted=True))
    assert migration.report.row("feature f", "weight_key").status == EXACT
    assert "IS_WEIGHTED = True" in migration.code


def test_the_optimizers_fbgemm_has_exactly_and_the_stand_ins():
    migration = to_torchrec(every_optimizer_spec(), allow_lossy=True)
    rows = {row.where: row for row in migration.report.rows if row.option == "optimizer"}
    assert (rows["table t_sgd"].status, rows["table t_sgd"].target) == (
        EXACT,
        "EmbOptimType.EXACT_SGD (torchrec.optim.SGD)",
    )
    assert rows["table t_adagrad"].status == CONVERTED
    assert "eps=0" in rows["table t_adagrad"].how
    assert rows["table t_adam"].status == IMPOSSIBLE and "bias-corrects" in rows["table t_adam"].how
    for kind in ("adagrad_momentum", "ftrl", "momentum", "rmsprop", "proximal_adagrad"):
        row = rows[f"table t_{kind}"]
        assert (row.status, row.target) == (IMPOSSIBLE, "EmbOptimType.EXACT_SGD (a stand-in)")
    # A stand-in's own hyper-parameters go with it.
    assert _status(migration, "table t_ftrl", "optimizer.beta") == IMPOSSIBLE
    assert migration.report.row("table t_adam", "optimizer.beta1").target == "ADAM beta1"
    assert "torchrec.optim.Adam, {'lr': 0.01, 'beta1': 0.9, 'beta2': 0.999, 'eps': 1e-08}" in migration.code


def test_an_impossible_option_raises_naming_it():
    with pytest.raises(LossyMigrationError) as raised:
        to_torchrec(every_option_config())
    message = str(raised.value)
    for words in (
        "pipeline_execution_with_tensor_core",
        "profile_data_directory",
        "optimizer='adam'",
        "clip_weight_min",
    ):
        assert words in message


def test_with_allow_lossy_the_report_lists_what_will_differ():
    migration = to_torchrec(every_option_config(), allow_lossy=True)
    impossible = set(_keys(migration.report.impossible))
    assert ("spec", "pipeline_execution_with_tensor_core") in impossible
    assert ("spec", "profile_data_directory") in impossible
    for table in ("tbl_user", "tbl_history_item_shared_embedding", "tbl_tags_weighted_by_tag_weights", "tbl_city"):
        for option in (
            "optimizer",
            "optimizer.clip_weight_min",
            "optimizer.weight_decay_factor",
            "optimizer.clip_gradient_max",
            "optimizer.sum_inside_sqrt",
        ):
            assert (f"table {table}", option) in impossible
    # Nothing of the tensor-core table or of the features is impossible.
    assert not [key for key in impossible if key[0].startswith("feature") or "tbl_country" in key[0]]
    markdown = migration.report.to_markdown()
    assert markdown.index("## What will differ") < markdown.index("## What to do")


def test_gradient_clipping_and_weight_decay_are_refused():
    optimizer = SGDSpec(learning_rate=0.1, clip_gradient_min=-1.0, clip_gradient_max=1.0, weight_decay_factor=0.1)
    with pytest.raises(LossyMigrationError, match="clip_gradient_min"):
        to_torchrec(small_spec("sum", optimizer))
    migration = to_torchrec(small_spec("sum", optimizer), allow_lossy=True)
    assert "before a row's duplicates are summed" in migration.report.row("table t", "optimizer.clip_gradient_max").how
    assert _status(migration, "table t", "optimizer.weight_decay_factor") == IMPOSSIBLE
    assert _status(migration, "table t", "optimizer.multiply_weight_decay_factor_by_learning_rate") == IMPOSSIBLE


def test_the_tensor_core_table_is_data_parallel():
    migration = to_torchrec(every_option_config(), allow_lossy=True)
    assert _status(migration, "table tbl_country", "placement") == CONVERTED
    assert "DATA_PARALLEL = ['tbl_country']" in migration.code
    assert "'tbl_country'" not in migration.code.split("FUSED_OPTIMIZERS = {")[1].split("}")[0]


# Learning-rate functions and the gradient multiplier --------------------------------------------------------


def test_an_importable_function_is_imported_and_a_local_one_is_left_to_the_user():
    migration = to_torchrec(every_option_config(), allow_lossy=True)
    module = models._learning_rate.__module__
    assert f"from {module} import _learning_rate, _multiplier" in migration.code
    assert "'tbl_user': _learning_rate," in migration.code
    assert "GRADIENT_MULTIPLIER_FN = _multiplier" in migration.code
    row = migration.report.row("table tbl_user", "optimizer.learning_rate")
    assert row.status == CONVERTED and f"model.py imports {module}._learning_rate" in row.how
    # The fused rate starts at the function's value at the weights' step.
    assert "'tbl_user': (torchrec.optim.Adam, {'lr': 0.1," in migration.code

    local = small_spec("sum", SGDSpec(learning_rate=lambda step: 0.5))
    local = dataclasses.replace(local, gradient_multiplier_fn=lambda step: 2.0)
    migration = to_torchrec(local)
    assert "cannot be written here: put it in" in migration.code
    assert "GRADIENT_MULTIPLIER_FN = None" in migration.code
    assert "copy it into model.py" in migration.report.row("table t", "optimizer.learning_rate").how
    assert "copy it into model.py" in migration.report.row("spec", "gradient_multiplier_fn").how


# The weights -----------------------------------------------------------------------------------------------


def _check_weights(migration, source):
    expected_keys = set()
    for table in source.tables:
        key = target.weight_key(source, table.name)
        expected_keys.add(key)
        arrays = source.state[table.name]
        width = -(-table.dim // 4) * 4
        values = migration.weights[key]
        assert values.dtype == np.float32 and values.shape == (table.vocabulary_size, width)
        np.testing.assert_array_equal(values[:, : table.dim], arrays["embedding"])
        np.testing.assert_array_equal(values[:, table.dim :], 0.0)
        if "accumulators" in arrays:
            state = migration.weights[f"{key}/{table.name}.momentum1"]
            expected_keys.add(f"{key}/{table.name}.momentum1")
            np.testing.assert_array_equal(state[:, : table.dim], arrays["accumulators"])
            initial = source.optimizer_for(table.name).initial_accumulator
            np.testing.assert_array_equal(state[:, table.dim :], np.float32(initial))
    assert set(migration.weights) == expected_keys


def test_fresh_weights_are_tfs_draws_in_torchrecs_names():
    config = movielens_config()
    migration = to_torchrec(config, seed=3)
    source = load_source(config, seed=3)
    _check_weights(migration, source)
    assert "embeddings.tbl_history_item_shared_embedding.weight" in migration.weights
    assert migration.weights["embedding_bags.tbl_gender.weight"].shape == (2, 4)


def test_weights_from_an_engine_checkpoint(tmp_path):
    spec = _two_tables()
    engine = Engine(spec, seed=4, kernels="numpy")
    rng = np.random.default_rng(0)
    for _ in range(3):
        features = {name: [list(rng.integers(0, 20, 3)) for _ in range(4)] for name in ("a", "b")}
        result = engine.forward(features)
        engine.apply_gradients(result, {k: rng.standard_normal(v.shape) for k, v in result.activations.items()})
    path = engine.save(str(tmp_path / "ckpt"))
    migration = to_torchrec(spec, path)
    assert migration.step == 3
    source = load_source(spec, path)
    _check_weights(migration, source)
    np.testing.assert_array_equal(migration.weights["embedding_bags.sgd.weight"][:, :6], engine.table("sgd"))
    np.testing.assert_array_equal(
        migration.weights["embedding_bags.adagrad.weight/adagrad.momentum1"], engine.slots("adagrad")["accumulators"]
    )
    assert not (migration.weights["embedding_bags.adagrad.weight/adagrad.momentum1"] == 0.1).all()  # trained


def _two_tables() -> EmbeddingSpec:
    tables = (
        TableSpec(name="sgd", vocabulary_size=20, dim=6, combiner="sum", optimizer=SGDSpec(learning_rate=0.5)),
        TableSpec(name="adagrad", vocabulary_size=20, dim=8, combiner="sqrtn"),
    )
    features = (
        FeatureSpec(name="a", table="sgd", num_buckets=20),
        FeatureSpec(name="b", table="adagrad", num_buckets=20),
    )
    return EmbeddingSpec(tables=tables, features=features, optimizer=AdagradSpec(learning_rate=0.2))


# The code and the files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [movielens_config, every_option_config, every_optimizer_spec, _two_tables])
def test_the_code_compiles_and_names_every_table(config):
    migration = to_torchrec(config(), allow_lossy=True)
    compile(migration.code, "model.py", "exec")
    source = load_source(config())
    for table in source.tables:
        assert f"name={table.name!r}" in migration.code
    if importlib.util.find_spec("torchrec") is None:  # the plain suite: no config, and the report says why
        assert migration.config is None and migration.missing.startswith(f"{target.TITLE} is not installed")
    else:  # the TorchRec venv: build() ran the code in-process
        assert migration.missing is None and list(migration.config.FEATURES) == [f.name for f in source.features]


def test_write_puts_the_code_the_weights_and_the_report(tmp_path):
    migration = to_torchrec(movielens_config())
    paths = migration.write(tmp_path / "out")
    assert [p.rsplit("/", 1)[1] for p in paths] == [CODE_FILE, WEIGHTS_FILE, REPORT_FILE]
    assert (tmp_path / "out" / CODE_FILE).read_text() == migration.code
    with np.load(tmp_path / "out" / WEIGHTS_FILE) as data:
        assert sorted(data.files) == sorted(migration.weights)
        for key in data.files:
            np.testing.assert_array_equal(data[key], migration.weights[key])
    report = (tmp_path / "out" / REPORT_FILE).read_text()
    assert report.startswith(f"# Migration to {target.TITLE}") and "0 impossible" in report


def test_vocabularies_are_shipped_in_the_code():
    migration = to_torchrec(movielens_config())
    namespace = _runtime_functions(migration.code, ["token_ids"])
    vocabularies = namespace["VOCABULARIES"]
    assert vocabularies["genres"]["tokens"][:2] == ["Action", "Adventure"]
    assert vocabularies["zip"]["num_oov_buckets"] == 8
    token_ids = namespace["token_ids"]
    assert token_ids("genres", ["Comedy", b"Action", "Western"]).tolist() == [4, 0, -1]
    with pytest.raises(ValueError, match="pass hash_bucket"):
        token_ids("zip", ["99999"])
    assert token_ids("zip", ["007", "99999"], hash_bucket=lambda token, n: 3).tolist() == [7, 103]


def _runtime_functions(code: str, names: list[str]) -> dict:
    """The generated module's data and the named functions, run with numpy alone (the rest needs torch)."""
    tree = ast.parse(code)
    keep = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name in names)
        or (
            isinstance(node, ast.Assign) and node.targets[0].id in ("FEATURES", "VOCABULARIES")  # type: ignore[attr-defined]
        )
    ]
    namespace: dict = {"np": np}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "model.py", "exec"), namespace)
    return namespace


# The coefficients reproduce the engine's combiners -------------------------------------------------------


@st.composite
def _bags(draw):
    batch = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(0, 5), min_size=batch, max_size=batch))
    n = sum(lengths)
    ids = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    weighted = draw(st.booleans())
    weights = draw(st.lists(st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 3.0]), min_size=n, max_size=n))
    return np.array(lengths), np.array(ids, dtype=np.int64), (np.array(weights, np.float32) if weighted else None)


_COEFFICIENTS = _runtime_functions(to_torchrec(small_spec("sqrtn")).code, ["coefficients"])["coefficients"]


@settings(max_examples=200, deadline=None)
@given(_bags(), st.sampled_from(["sum", "mean", "sqrtn"]), st.booleans())
def test_sum_pooling_with_the_coefficients_is_the_engines_combiner(bags, combiner, safe):
    lengths, ids, weights = bags
    table = np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32)
    keep, coefficient = _COEFFICIENTS(lengths, weights, combiner, safe)
    example = np.repeat(np.arange(lengths.size), lengths)
    pooled = np.zeros((lengths.size, 3), np.float32)
    np.add.at(pooled, example[keep], table[ids[keep]] * coefficient[keep][:, None])
    batch = Ragged(values=ids, row_splits=np.concatenate([[0], np.cumsum(lengths)]), weights=weights)
    expected = lookup.pooled_lookup(table, batch, combiner, safe=safe)
    np.testing.assert_allclose(pooled, expected, rtol=1e-6, atol=1e-6)


@given(
    names=st.lists(
        st.sampled_from(["items", "items_", "keys", "a.b", "a_b", "forward", "t", "_modules", "x.y.z"]),
        min_size=1,
        max_size=5,
        unique=True,
    )
)
@settings(max_examples=50, deadline=None)
def test_table_names_a_module_dict_refuses_get_free_names(names):
    """Every TorchRec name is a ModuleDict key (no '.', no ModuleDict attribute), distinct, and the others stay."""
    spec = EmbeddingSpec(
        tables=tuple(TableSpec(name=n, vocabulary_size=8, dim=4) for n in names),
        features=tuple(FeatureSpec(name=f"f{i}", table=n, num_buckets=8) for i, n in enumerate(names)),
        optimizer=SGDSpec(learning_rate=0.1),
    )
    source = load_source(spec)
    mapping = target.torchrec_names(source)
    assert len(set(mapping.values())) == len(names)
    for old, new in mapping.items():
        assert "." not in new and new not in target.MODULE_DICT_NAMES
        if "." not in old and old not in target.MODULE_DICT_NAMES:
            assert new == old
    migration = to_torchrec(spec)
    assert set(migration.weights) == {f"embedding_bags.{new}.weight" for new in mapping.values()}
    for old, new in mapping.items():
        assert f"name={new!r}" in migration.code
        if old != new:
            assert f"name={old!r}" not in migration.code
            assert any(f"{old!r} -> {new!r}" in note for note in migration.report.notes)
