"""The main job's model, trained, then migrated with its checkpoint: what `tpu-embedding-shim migrate` does after
`tpu-embedding-shim movielens` (on a tiny MovieLens-shaped wheel, as tests/movielens does)."""

import sys

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tests.movielens.test_movielens import TINY_RUN, make_wheel, quiet_config
from tpu_embedding_shim import cli
from tpu_embedding_shim.migrate import to_tf_midlevel
from tpu_embedding_shim.movielens.job import embedding_config_spec, run

NAMES = {  # engine table -> its name in the job's TPUEstimator checkpoint
    "tbl_user": "dense_features/user_embedding/embedding_weights",
    "tbl_history_item_shared_embedding": "history_item_shared_embedding",
    "tbl_zip": "dense_features/zip_embedding/embedding_weights",
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(output_dir, wheel) of a tiny run of the main job."""
    root = tmp_path_factory.mktemp("movielens")
    wheel = make_wheel(root / "recbole-1.2.1-py3-none-any.whl")
    run(quiet_config(root / "out", wheel, **TINY_RUN), echo=lambda line: None)
    return root / "out", wheel


def test_the_trained_job_migrates_with_its_tables_and_accumulators(trained, tmp_path):
    output_dir, wheel = trained
    config = embedding_config_spec(str(output_dir), wheel=wheel)
    migration = to_tf_midlevel(config, str(output_dir / "model"))
    reader = tf.train.load_checkpoint(str(output_dir / "model"))
    assert migration.step == int(reader.get_tensor("global_step")) > 0
    for table, name in NAMES.items():
        np.testing.assert_array_equal(
            migration.weights[f"embedding/{table}/.ATTRIBUTES/VARIABLE_VALUE"], reader.get_tensor(name)
        )
        np.testing.assert_array_equal(
            migration.weights[f"embedding/{table}.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE"],
            reader.get_tensor(f"{name}/Adagrad"),
        )
    migration.write(tmp_path)
    restored = tf.train.load_checkpoint(str(tmp_path / "tf_checkpoint"))
    np.testing.assert_array_equal(
        restored.get_tensor("embedding/tbl_user/.ATTRIBUTES/VARIABLE_VALUE"), reader.get_tensor(NAMES["tbl_user"])
    )


def test_the_cli_migrates_the_trained_job(trained, tmp_path, monkeypatch, capsys):
    """MODULE is the user's own file in the current directory, naming the job's spec over this run."""
    output_dir, wheel = trained
    (tmp_path / "my_model.py").write_text(
        "from tpu_embedding_shim.movielens.job import embedding_config_spec\n\n\n"
        f"def spec():\n    return embedding_config_spec({str(output_dir)!r}, wheel={wheel!r})\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI adds the current directory
    argv = ["migrate", "--to", "tf-midlevel", "my_model:spec", "--checkpoint", str(output_dir / "model")]
    assert cli.main([*argv, "--out", "migrated"]) == 0
    assert "0 impossible" in capsys.readouterr().out
    assert "weights: checkpoint" in (tmp_path / "migrated" / "report.md").read_text()
