"""What a user of `tpu-embedding-shim migrate` reads: usage errors (exit 2, naming the option), failures (exit 1,
one line), the lossy refusal in the caller's terms, the report's grouped rows and the shard count, the header of
the generated model.py, the progress line and the files written."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tpu_embedding_shim import cli
from tpu_embedding_shim.engine.tf_bundle import write_bundle
from tpu_embedding_shim.migrate import LossyMigrationError, ProgressLine, load_source, to_tf_midlevel, to_torchrec
from tpu_embedding_shim.migrate.options import options

from .models import every_option_config, movielens_config, small_spec

ROOT = Path(__file__).resolve().parents[2]
SMALL = "tests.migrate.models:small_spec"


def command(*argv):
    """Runs `python -m tpu_embedding_shim migrate ...` from the repository root: (exit status, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tpu_embedding_shim", "migrate", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(
    "argv, last_line",
    [
        (["--batch-size", "0"], "argument --batch-size: must be an int >= 1, got '0'"),
        (["--batch-size", "x"], "argument --batch-size: must be an int >= 1, got 'x'"),
        (["--seed", "-1"], "argument --seed: must be an int from 0 to 2**63 - 1, got '-1'"),
    ],
)
def test_a_bad_option_value_is_a_usage_error_naming_the_option(tmp_path, argv, last_line):
    status, _, err = command("--to", "jax", SMALL, "--out", tmp_path / "out", *argv)
    assert status == 2 and err.splitlines()[-1] == f"tpu-embedding-shim migrate: error: {last_line}"
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_reference_without_a_colon_is_a_usage_error(tmp_path):
    status, _, err = command("--to", "jax", "tests.migrate.models", "--out", tmp_path / "out")
    assert status == 2 and err.splitlines()[-1].startswith(
        "tpu-embedding-shim migrate: error: argument MODULE:OBJECT: expected MODULE:OBJECT"
    )


def run_cli(capsys, *argv):
    """`migrate` in this process: (exit status, stdout, stderr)."""
    status = cli.main(["migrate", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_failures_exit_1_with_one_line(tmp_path, capsys, at_root):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["--to", "jax", SMALL, "--out", a_file], f"--out {str(a_file)!r} is a file; --out is a directory"),
        (
            ["--to", "jax", SMALL, "--out", a_file / "sub"],
            f"--out {str(a_file / 'sub')!r}: {str(a_file)!r} is a file, so the directory cannot be made",
        ),
        (["--to", "jax", "no_such_module:x", "--out", tmp_path / "o"], "MODULE:OBJECT 'no_such_module:x': No module"),
        (["--to", "jax", "tests.migrate.models:nope", "--out", tmp_path / "o"], "has no attribute 'nope'"),
        (
            ["--to", "jax", "tests.migrate.models:os", "--out", tmp_path / "o"],
            "must be an EmbeddingConfigSpec or an EmbeddingSpec",
        ),
        (["--to", "jax", SMALL, "--out", tmp_path / "o", "--checkpoint", a_file], "No checkpoint at"),
    ]
    for argv, fragment in cases:
        status, out, err = run_cli(capsys, *argv)
        assert status == 1 and out == "", argv
        assert err.startswith("tpu-embedding-shim migrate: error: ") and err.count("\n") == 1, err
        assert fragment in err, (fragment, err)
    assert not (tmp_path / "o").exists()


def test_a_checkpoint_directory_one_level_up_gives_the_command(tmp_path, capsys, at_root):
    """`--checkpoint movielens_output` (the job writes movielens_output/model/) says to pass model/."""
    table = np.ones((30, 4), np.float32)
    write_bundle(
        str(tmp_path / "job" / "model" / "model.ckpt-1"),
        {"t": table, "t/accumulators": table, "global_step": np.int64(1)},
        update_state=True,
    )
    out = tmp_path / "out"
    status, _, err = run_cli(capsys, "--to", "tf-midlevel", SMALL, "--checkpoint", tmp_path / "job", "--out", out)
    assert status == 1 and err.count("\n") == 1
    assert err.rstrip("\n").endswith(
        f"Its subdirectory {str(tmp_path / 'job' / 'model')!r} holds one; run: tpu-embedding-shim migrate "
        f"--to tf-midlevel {SMALL} --checkpoint {tmp_path / 'job' / 'model'} --out {out}"
    )
    status, printed, _ = run_cli(
        capsys, "--to", "tf-midlevel", SMALL, "--checkpoint", tmp_path / "job" / "model", "--out", out
    )
    assert status == 0 and printed.startswith("Migrated to ")


def test_the_lossy_refusal_speaks_the_callers_language(tmp_path, capsys, at_root):
    with pytest.raises(LossyMigrationError) as raised:
        to_tf_midlevel(every_option_config())
    assert str(raised.value).splitlines()[-1] == (
        "Change them in the source, or pass allow_lossy=True to convert anyway: the report then lists what will differ."
    )
    assert "--allow-lossy" not in str(raised.value)
    config = "tests.migrate.models:every_option_config"
    status, _, err = run_cli(capsys, "--to", "tf-midlevel", config, "--out", tmp_path / "o")
    assert status == 1 and "allow_lossy" not in err
    assert err.splitlines()[-1] == (
        "Change them in the source, or add --allow-lossy to convert anyway: the report then lists what will differ."
    )


def test_an_embedding_config_specs_shard_count_is_not_invented():
    """TPUConfig(num_shards=...) sets it, not the EmbeddingConfigSpec: the report says so rather than '1'."""
    source = load_source(movielens_config())
    assert not source.num_shards_known
    row = to_tf_midlevel(movielens_config()).report.row("spec", "num_shards")
    assert row.value == "not in the EmbeddingConfigSpec (the TPUEstimator's TPUConfig(num_shards=...) sets it)"
    spec = dataclasses.replace(small_spec(), num_shards=2)
    assert [o.value for o in options(load_source(spec)) if o.name == "num_shards"] == [2]
    assert to_tf_midlevel(spec).report.row("spec", "num_shards").value == "2"


def test_rows_that_differ_only_in_their_feature_are_written_once():
    markdown = to_torchrec(movielens_config()).report.to_markdown()
    conversions = markdown.split("## What to do (conversions)")[1].split("## ")[0]
    grouped = [line for line in conversions.splitlines() if "`dense_zero_is_padding`" in line]
    assert len(grouped) == 1 and grouped[0].startswith("- **features user, item, genres, occupation, gender, age, ")
    table = markdown.split("## Every option")[1]
    assert sum("`dense_zero_is_padding`" in line for line in table.splitlines()) == 1
    assert "| spec | `num_shards` |" in table


def test_the_tf_midlevel_model_py_says_how_to_run_it():
    code = to_tf_midlevel(small_spec()).code
    header = code.split('"""')[1]
    assert "import tensorflow as tf\n" in code and "Runs on TensorFlow" not in header
    assert "Written for TensorFlow 2.15: it imports `tensorflow`" in header
    assert "change that one line to `import tpu_embedding_shim as tf`" in header


def test_help_names_every_metavar_and_never_shows_none():
    status, out, _ = command("--help")
    assert status == 0 and "--out DIR" in out and "--checkpoint PATH" in out and "--batch-size N" in out
    assert "None" not in out
    assert "omitted: fresh values drawn by each table's initializer" in " ".join(out.split())


def test_the_files_written_are_named_and_directories_list_their_files(tmp_path, capsys, at_root):
    status, printed, _ = run_cli(capsys, "--to", "tf-midlevel", SMALL, "--out", tmp_path / "o")
    assert status == 0
    assert printed.splitlines()[1:] == [
        f"  wrote {tmp_path / 'o' / 'model.py'}",
        f"  wrote {tmp_path / 'o' / 'tf_checkpoint'}{os.sep} (checkpoint, ckpt-1.data-00000-of-00001, ckpt-1.index)",
        f"  wrote {tmp_path / 'o' / 'report.md'}",
    ]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_progress_line_waits_then_counts_and_estimates_the_time_left():
    clock, out = Clock(), io.StringIO()
    line = ProgressLine("migrate", enabled=True, stream=out, clock=clock, delay=2.0)
    line.status("reading the checkpoint")
    assert out.getvalue() == ""  # quick work prints nothing
    clock.now = 3.0
    for name in line.items("writing weights.npz", [("a", 10), ("b", 30)]):
        clock.now += 5.0 if name == "a" else 15.0
    assert out.getvalue().split("\r")[1:] == [
        "migrate: writing weights.npz 1/2: a, 3 s",
        "migrate: writing weights.npz 2/2: b, 8 s, about 15 s left",
    ]
    line.close()
    assert out.getvalue().endswith("\r" + " " * len("migrate: writing weights.npz 2/2: b, 8 s, about 15 s left") + "\r")
    assert not ProgressLine("migrate", enabled=False, stream=out).enabled


def test_writing_shows_each_array_and_the_npz_reads_back(tmp_path):
    migration = to_torchrec(small_spec())
    clock, out = Clock(), io.StringIO()
    clock.now = 10.0
    line = ProgressLine("migrate", enabled=True, stream=out, clock=clock, delay=0.0)
    migration.write(tmp_path, progress=line)
    names = sorted(migration.weights)
    assert f"writing weights.npz 1/{len(names)}: " in out.getvalue()
    with np.load(tmp_path / "weights.npz") as saved:
        assert sorted(saved.files) == names
        for name in names:
            np.testing.assert_array_equal(saved[name], migration.weights[name])
