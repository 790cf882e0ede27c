"""`python -m benchmarks programs`: the runner's arithmetic and table, and a quick run of each framework whose venv
is here (the TF bridge and TF in the TensorFlow venv, TorchRec in its own). No timing is asserted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks import programs
from benchmarks.programs import PROGRAMS, batches, quick, rate, summarize, table
from benchmarks.run import _root


def test_the_rate_counts_the_batches_of_the_window_only():
    program = quick(PROGRAMS["criteo"])  # W = 2 warm-up steps, S = 5 timed ones, B = 64
    stamps = [0.0, 10.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 99.0]  # steps 2..7 are 1 s apart
    assert rate(stamps, program) == pytest.approx(5 * 64 / 5.0)


def test_the_data_is_the_programs_shape_with_ids_from_one():
    features, labels = batches(quick(PROGRAMS["criteo"]), count=3)
    assert sorted(features) == sorted([f"c{i}" for i in range(26)] + ["dense"])
    assert features["c0"].shape == (3, 64, 1) and features["dense"].shape == (3, 64, 13) and labels.shape == (3, 64)
    assert all(
        features[f"c{i}"].min() >= 1 and features[f"c{i}"].max() < v
        for i, v in enumerate(quick(PROGRAMS["criteo"]).vocab)
    )
    history = batches(PROGRAMS["migration"], count=2)[0]["history"]
    assert history.shape == (2, 64, 5) and history.min() >= 1


def test_the_summary_divides_ours_by_each_peer_and_keeps_errors():
    runs = {
        ("criteo", "ours"): [{"examples_per_s": 30.0}, {"examples_per_s": 10.0}, {"examples_per_s": 20.0}],
        ("criteo", "tf"): [{"examples_per_s": 8.0}, {"examples_per_s": 10.0}, {"error": "boom"}],
        ("criteo", "torchrec"): [{"error": "no venv"}],
    }
    rows = {r["framework"]: r for r in summarize(runs)}
    assert rows["ours"]["examples_per_s"] == 20.0 and rows["ours"]["ours_over_this"] == 1.0
    assert rows["tf"]["examples_per_s"] == 9.0 and rows["tf"]["ours_over_this"] == pytest.approx(20 / 9)
    assert rows["tf"]["rounds"] == 2 and rows["tf"]["error"] == "boom"
    assert rows["torchrec"]["examples_per_s"] is None
    text = table(list(rows.values()))
    assert "| `criteo` | TF 2.15 TPUEstimator (CPU) | 9 | 8 - 10 | 2.22x |" in text
    assert "n/a: no venv" in text


def test_the_keras_programs_run_ours_and_tf_only_and_a_run_on_the_other_path_is_an_error():
    assert programs.frameworks_of("keras256") == ("ours", "tf") and "torchrec" in programs.frameworks_of("criteo")
    strategy, embedding = programs.KERAS_PATHS["tf"]
    theirs = {"examples_per_s": 5.0, "strategy": strategy, "embedding": embedding + "tpu_embedding_for_serving"}
    assert programs.checked_path(theirs, "tf") == theirs
    error = programs.checked_path(theirs, "ours")["error"]
    assert error.startswith("ours ran tensorflow.python.distribute") and "not tpu_embedding_shim" in error
    assert programs.checked_path({"error": "boom"}, "ours") == {"error": "boom"}


def test_the_keras_rows_name_keras_and_tfrs():
    rows = summarize({("keras256", "ours"): [{"examples_per_s": 2.0}], ("keras256", "tf"): [{"examples_per_s": 1.0}]})
    text = table(rows)
    assert "| `keras256` | ours (drop-in mode) | 2 | 2 - 2 | 1.00x |" in text
    assert "| `keras256` | TF 2.15 Keras + TFRS (CPU) | 1 | 1 - 1 | 2.00x |" in text


def test_an_unknown_framework_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit):
        programs.main(["--frameworks", "jax"])
    assert "unknown framework 'jax'; known: ours, tf, torchrec" in capsys.readouterr().err


def _quick_run(framework: str, tmp_path) -> str:
    out = tmp_path / "rows.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "programs",
            "--quick",
            "--rounds",
            "1",
            "--frameworks",
            framework,
            "--csv",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=_root(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("program,framework,rounds,examples_per_s")
    return proc.stdout


@pytest.mark.parametrize("framework", ["ours", "tf", "torchrec"])
def test_a_quick_run_writes_a_row_for_each_program_of_the_framework(framework, tmp_path):
    reason = programs.missing(framework)
    if reason is not None:
        pytest.skip(reason)
    stdout = _quick_run(framework, tmp_path)
    mine = [program for program in PROGRAMS if framework in programs.frameworks_of(program)]
    keras_rows = [line for line in stdout.splitlines() if line.startswith("| `keras")]
    assert (keras_rows == []) == (framework == "torchrec")  # TorchRec has no form of the Keras program
    for program in mine:
        line = next(line for line in stdout.splitlines() if line.startswith(f"| `{program}` |"))
        figure = line.split("|")[3].strip()
        assert not figure.startswith("n/a"), line
        assert float(figure.replace(",", "")) > 0
