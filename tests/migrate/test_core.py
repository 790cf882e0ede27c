"""The migration core: the source (spec and weights, fresh or from any checkpoint), the options, the report,
writing a migration, and the command line."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tests.runner import tf_program as program
from tpu_embedding_shim import cli
from tpu_embedding_shim.engine import CheckpointError, Engine
from tpu_embedding_shim.engine.tf_bundle import NotFoundError
from tpu_embedding_shim.migrate import (
    CONVERTED,
    EXACT,
    IMPOSSIBLE,
    LossyMigrationError,
    Report,
    Row,
    load_source,
    migrate,
    resolve_object,
    to_keras_rs,
    to_tf_midlevel,
    to_torchrec,
)
from tpu_embedding_shim.migrate import options as options_module
from tpu_embedding_shim.migrate.migration import MARKER_FILE, Migration
from tpu_embedding_shim.migrate.runtime import MARKER, embedded
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec

from .models import _learning_rate as _rate_of_step
from .models import every_optimizer_spec, every_option_config, movielens_config, small_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints"
ROOT = Path(__file__).resolve().parents[2]


def _tf_program_spec(optimizer: str, partition_strategy: str = "div"):
    user, item, hist, shared = program.shim_columns()
    return tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[user, item, hist] + shared,
        optimization_parameters=program.shim_optimizer(optimizer, 0.1),
        partition_strategy=partition_strategy,
    )


# The source --------------------------------------------------------------------------------------------------


def test_fresh_weights_are_the_engines_initial_state():
    spec = every_optimizer_spec()
    source = load_source(spec, seed=7)
    expected = Engine(spec, seed=7, kernels="numpy").state()
    assert source.step == 0 and source.origin.startswith("fresh")
    assert sorted(source.state) == sorted(expected)
    for table, arrays in expected.items():
        assert sorted(source.state[table]) == sorted(arrays)
        for key, values in arrays.items():
            np.testing.assert_array_equal(source.state[table][key], values)


def test_tensor_core_tables_come_with_their_features():
    source = load_source(every_option_config())
    assert [t.name for t in source.tensor_core_tables] == ["tbl_country"]
    assert source.is_tensor_core("tbl_country") and source.optimizer_for("tbl_country") is None
    assert [f.name for f in source.features_of("tbl_country")] == ["country"]
    assert source.state["tbl_country"]["embedding"].shape == (12, 4)
    assert "tbl_country" not in [t.name for t in source.spec.tables]


def test_an_engine_checkpoint_is_read_whole(tmp_path):
    spec = small_spec()
    engine = Engine(spec, seed=1, kernels="numpy")
    engine.apply_gradients(engine.forward({"f": [[1, 2], [3]]}), {"f": np.ones((2, 4), np.float32)})
    path = engine.save(str(tmp_path))
    for where in (path, str(tmp_path)):  # the checkpoint, or its directory (the latest)
        source = load_source(spec, where)
        assert source.step == 1 and "engine checkpoint" in source.origin
        for key, values in engine.state()["t"].items():
            np.testing.assert_array_equal(source.state["t"][key], values)


def test_a_tensorflow_written_tpu_job_checkpoint_in_mod_layout_is_put_back_in_id_order():
    """TF 2.15 wrote it (tests/fixtures/tf_checkpoints): 3 hosts, mod, Adam; stored host-major."""
    arrays = np.load(FIXTURES / "tpu_mod_3hosts" / "id_order.npz")
    expected = {key.replace("|", "/"): arrays[key] for key in arrays.files}
    source = load_source(_tf_program_spec("adam", "mod"), str(FIXTURES / "tpu_mod_3hosts"))
    assert source.step == 12
    for name, table in program.ENGINE_TABLES.items():
        np.testing.assert_array_equal(source.state[table]["embedding"], expected[name])
        np.testing.assert_array_equal(source.state[table]["momenta"], expected[f"{name}/Adam/m"])
        np.testing.assert_array_equal(source.state[table]["velocities"], expected[f"{name}/Adam/v"])


def test_a_tensorflow_cpu_estimator_checkpoint_gives_its_adagrad_slots():
    reader = tf.train.load_checkpoint(str(FIXTURES / "estimator_cpu_adagrad"))
    source = load_source(_tf_program_spec("adagrad"), str(FIXTURES / "estimator_cpu_adagrad"))
    assert source.step == 3
    for name, table in program.ENGINE_TABLES.items():
        np.testing.assert_array_equal(source.state[table]["embedding"], reader.get_tensor(name))
        np.testing.assert_array_equal(source.state[table]["accumulators"], reader.get_tensor(f"{name}/Adagrad"))


def test_the_runners_own_checkpoint_is_read(tmp_path):
    est = program.shim_estimator(tmp_path / "m")
    est.train(program.shim_input_fn, steps=2)
    source = load_source(_tf_program_spec("adagrad"), str(tmp_path / "m"))
    assert source.step == 2
    for table, arrays in est.engine.state().items():
        for key, values in arrays.items():
            np.testing.assert_array_equal(source.state[table][key], values)


def test_bad_sources_raise_and_name_what_is_wrong(tmp_path):
    with pytest.raises(TypeError, match="EmbeddingConfigSpec or an EmbeddingSpec"):
        load_source({"tables": []})
    with pytest.raises(ValueError, match="batch_size"):
        load_source(small_spec(), batch_size=0)
    with pytest.raises(NotFoundError):
        load_source(small_spec(), str(tmp_path / "nothing"))
    other = small_spec(vocabulary_size=31)
    engine = Engine(other, seed=0, kernels="numpy")
    engine.save(str(tmp_path / "c"))
    with pytest.raises(CheckpointError, match="vocabulary_size|shape|31"):
        load_source(small_spec(), str(tmp_path / "c"))


def test_resolve_object_calls_functions_and_names_bad_references():
    assert isinstance(resolve_object("tests.migrate.models:every_optimizer_spec"), EmbeddingSpec)
    with pytest.raises(ValueError, match="MODULE:OBJECT"):
        resolve_object("tests.migrate.models")
    with pytest.raises(ValueError, match="no attribute 'nope'"):
        resolve_object("tests.migrate.models:nope")


# Options -----------------------------------------------------------------------------------------------------


def test_every_field_of_the_spec_is_an_option_or_named_as_covered():
    """A new spec field must get an option (every target then says how it maps) or a reason here."""
    covered_elsewhere = {
        EmbeddingSpec: {"tables", "features", "optimizer"},  # per table
        TableSpec: {"name", "optimizer"},  # the row's `where`; 'optimizer' is a table option
        FeatureSpec: {"name", "vocabulary", "vocabulary_file", "num_buckets"},  # where; id_source; the table's size
    }
    listed = {
        EmbeddingSpec: set(options_module.SPEC_OPTIONS),
        TableSpec: set(options_module.TABLE_OPTIONS),
        FeatureSpec: set(options_module.FEATURE_OPTIONS),
    }
    for cls, fields in listed.items():
        names = {f.name for f in dataclasses.fields(cls)}
        assert names - fields - covered_elsewhere[cls] == set(), cls.__name__


def test_options_list_every_optimizer_field_of_every_table():
    source = load_source(every_optimizer_spec())
    found = {(o.where, o.name) for o in options_module.options(source)}
    for table in source.spec.tables:
        optimizer = source.optimizer_for(table.name)
        for field in dataclasses.fields(optimizer):
            assert (f"table {table.name}", f"optimizer.{field.name}") in found


# The report --------------------------------------------------------------------------------------------------


def test_a_row_that_is_not_exact_must_say_how():
    with pytest.raises(ValueError, match="must say how"):
        Row("spec", "x", "1", CONVERTED)
    with pytest.raises(ValueError, match="status"):
        Row("spec", "x", "1", "maybe", how="?")


def test_impossible_rows_raise_unless_allowed_and_lead_the_markdown():
    rows = (
        Row("spec", "a", "1", EXACT, "a"),
        Row("table t", "b", "2", CONVERTED, "b'", "scaled"),
        Row("feature f", "c", "3", IMPOSSIBLE, how="dropped"),
    )
    report = Report("Target 1.0", "a source", rows, ("a note",))
    with pytest.raises(LossyMigrationError, match=r"feature f: c=3: dropped[\s\S]*allow_lossy=True"):
        report.check(allow_lossy=False)
    report.check(allow_lossy=True)
    text = report.to_markdown()
    assert text.index("## What will differ") < text.index("## What to do") < text.index("## Every option")
    assert "3 options: 1 exact, 1 converted, 1 impossible." in text and "- a note" in text
    assert report.row("table t", "b").how == "scaled" and not report.lossless


# Writing a migration -----------------------------------------------------------------------------------------


def test_write_puts_every_file_in_place_or_none(tmp_path):
    migration = to_tf_midlevel(small_spec())
    paths = migration.write(tmp_path / "out")
    assert sorted(os.path.basename(p) for p in paths) == ["model.py", "report.md", "tf_checkpoint"]
    assert sorted(os.listdir(tmp_path / "out")) == [MARKER_FILE, "model.py", "report.md", "tf_checkpoint"]

    def failing(migration: Migration, directory: str, progress=None) -> list[str]:
        raise OSError("disk full")

    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "model.py").write_text("old")
    broken = dataclasses.replace(migration, write_weights=failing)
    with pytest.raises(OSError, match="disk full"):
        broken.write(tmp_path / "keep")
    assert os.listdir(tmp_path / "keep") == ["model.py"] and (tmp_path / "keep" / "model.py").read_text() == "old"


def test_migrate_names_the_targets():
    with pytest.raises(ValueError, match="one of"):
        migrate("onnx", small_spec())
    with pytest.raises(TypeError, match="allow_lossy"):
        migrate("tf-midlevel", small_spec(), allow_lossy="yes")


# The command line --------------------------------------------------------------------------------------------


def test_cli_writes_the_migration_and_refuses_a_lossy_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out"
    assert cli.main(["migrate", "--to", "tf-midlevel", "tests.migrate.models:movielens_config", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Migrated to TensorFlow's mid-level API" in printed and "0 impossible" in printed
    assert sorted(os.listdir(out)) == [MARKER_FILE, "model.py", "report.md", "tf_checkpoint"]
    lossy = tmp_path / "lossy"
    argv = ["migrate", "--to", "tf-midlevel", "tests.migrate.models:every_option_config", "--out", str(lossy)]
    assert cli.main(argv) == 1
    assert "profile_data_directory" in capsys.readouterr().err and not lossy.exists()
    assert cli.main([*argv, "--allow-lossy"]) == 0
    assert "## What will differ" in (lossy / "report.md").read_text()
    assert (
        cli.main(
            [
                "migrate",
                "--to",
                "tf-midlevel",
                "tests.migrate.models:small_spec",
                "--out",
                str(tmp_path / "x"),
                "--checkpoint",
                str(tmp_path / "missing"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith(f"tpu-embedding-shim migrate: error: No checkpoint at {str(tmp_path / 'missing')!r}")
    assert err.count("\n") == 1 and not (tmp_path / "x" / "model.py").exists()


def test_cli_usage_errors_exit_2():
    result = subprocess.run(
        [sys.executable, "-m", "tpu_embedding_shim", "migrate", "--to", "onnx", "m:o", "--out", "x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2 and "invalid choice: 'onnx'" in result.stderr


def test_the_movielens_config_is_read():
    source = load_source(movielens_config())
    assert len(source.tables) == 7 and source.spec.feature("history").max_sequence_length == 20


# The generated programs' runtime modules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "migrate_to"),
    [
        ("torchrec_model", lambda: to_torchrec(small_spec())),
        ("keras_rs_model", lambda: to_keras_rs(small_spec())),
        ("tf_midlevel_model", lambda: to_tf_midlevel(small_spec(optimizer=SGDSpec(learning_rate=_rate_of_step)))),
    ],
)
def test_each_runtime_module_is_embedded_whole_in_its_generated_program(module, migrate_to):
    text = embedded(module)
    assert text.strip() and MARKER not in text  # the module's text after its marker line, nothing of its head
    code = migrate_to().code
    assert text in code
    compile(code, "model.py", "exec")


def test_a_runtime_module_without_its_marker_line_is_refused():
    with pytest.raises(ValueError, match='has no line "# model.py\'s text from here on."'):
        embedded("__init__")
