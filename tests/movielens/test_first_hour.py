"""What a user meets in a first hour with the command line: version, help, one-line errors with their exit
codes, install hints that run, progress and outputs named, the plot's baseline, their own ratings, scoring."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

import tpu_embedding_shim
from tpu_embedding_shim import cli
from tpu_embedding_shim.movielens import data as ml_data
from tpu_embedding_shim.movielens import job
from tpu_embedding_shim.movielens import progress as ml_progress
from tpu_embedding_shim.movielens.score import Scorer


def run_cli(capsys, *argv):
    """(exit status, stdout, stderr) of `tpu-embedding-shim *argv`."""
    try:
        status = cli.main(list(argv))
    except SystemExit as exit_info:
        status = exit_info.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def write_ratings(path, num_users=24, num_items=30, per_user=12, seed=0, timestamps=True):
    """A ratings CSV in the documented layout, with a learnable signal (user and item biases)."""
    rng = np.random.default_rng(seed)
    user_bias, item_bias = rng.normal(size=num_users + 1), rng.normal(size=num_items + 1)
    header = "user_id,item_id,rating" + (",timestamp" if timestamps else "")
    lines = [header]
    for user in range(1, num_users + 1):
        for t, item in enumerate(rng.choice(np.arange(1, num_items + 1), per_user, replace=False)):
            rating = int(np.clip(np.round(3.5 + user_bias[user] + item_bias[item]), 1, 5))
            lines.append(f"{user},{item},{rating}" + (f",{1000 * t + user}" if timestamps else ""))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


SMALL = ["--epochs", "1", "--batch-size", "32"]


def test_version_and_help_texts(capsys):
    status, out, _ = run_cli(capsys, "--version")
    assert status == 0 and out.strip() == f"tpu-embedding-shim {tpu_embedding_shim.__version__}"
    status, out, _ = run_cli(capsys, "demo", "--help")
    assert status == 0 and "Build the EmbeddingConfigSpec of TensorFlow's documentation example" in out
    status, out, _ = run_cli(capsys, "movielens", "--help")
    text = " ".join(out.split())
    assert status == 0 and "None" not in text
    assert "(default: every rating)" in text and "(default: downloaded once with pip into" in text


def test_a_missing_wheel_is_a_usage_error(capsys, tmp_path):
    status, _, err = run_cli(capsys, "movielens", "--wheel", str(tmp_path / "no.whl"), "--output-dir", str(tmp_path))
    assert status == 2 and f"error: --wheel {str(tmp_path / 'no.whl')!r}: no such file." in err


def test_a_file_that_is_no_wheel_fails_without_asking_to_delete_it(capsys, tmp_path):
    notes = tmp_path / "README.md"
    notes.write_text("# mine\n")
    status, _, err = run_cli(capsys, "movielens", "--wheel", str(notes), "--output-dir", str(tmp_path / "out"))
    assert status == 1 and len(err.strip().splitlines()) == 1
    assert f"tpu-embedding-shim movielens: error: --wheel {str(notes)!r} is not a readable recbole==1.2.1" in err
    assert "Delete" not in err and "omit --wheel to download it" in err and notes.read_text() == "# mine\n"


def test_a_foreign_output_dir_is_a_usage_error_and_is_left_alone(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    status, _, err = run_cli(capsys, "movielens", "--output-dir", str(tmp_path))
    assert status == 2 and "is not empty and was not written by this job" in err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    "pip_error", ["ERROR: No matching distribution found for recbole==1.2.1", "/venv/bin/python: No module named pip"]
)
def test_a_failed_download_says_to_pass_the_wheel(capsys, tmp_path, monkeypatch, pip_error):
    monkeypatch.setenv("TPU_EMBEDDING_SHIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        ml_data.subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(command, 1, "", pip_error)
    )
    status, _, err = run_cli(capsys, "movielens", "--output-dir", str(tmp_path / "out"))
    assert status == 1 and len(err.strip().splitlines()) == 1 and pip_error in err
    assert f"download {ml_data.WHEEL_FILE} from {ml_data.WHEEL_URL}" in err and "--wheel PATH" in err


def test_without_matplotlib_the_hint_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    lines = []
    assert job._plot(job.JobConfig(output_dir=str(tmp_path)), [0.6], [0.7], 0.65, lines.append) is None
    assert "pip install matplotlib" in lines[0] and "tpu-embedding-shim[" not in lines[0]


def test_the_plot_draws_the_baseline_and_a_legend(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib", reason="the plot needs matplotlib (pip install matplotlib)")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda figure, *a, **kw: (saved.append(figure), original(figure, *a, **kw)))
    path = job._plot(job.JobConfig(output_dir=str(tmp_path)), [0.62, 0.57], [0.76, 0.77], 0.66, lambda line: None)
    assert path == str(tmp_path / "training.png") and (tmp_path / "training.png").stat().st_size > 0
    legend = saved[0].axes[0].get_legend()
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels == ["train loss", "test AUC", "most-popular-item baseline AUC (0.660)"]
    assert [line.get_ydata()[0] for line in saved[0].axes[1].get_lines()][-1] == 0.66


def test_the_job_on_own_ratings_prints_progress_and_names_every_output(capsys, tmp_path):
    ratings = write_ratings(tmp_path / "ratings.csv")
    out = tmp_path / "out"
    status, stdout, _ = run_cli(capsys, "movielens", "--ratings", ratings, "--output-dir", str(out), *SMALL)
    assert status == 0
    lines = stdout.splitlines()
    assert lines[0].startswith(f"ratings from {ratings}: ")
    steps = -(-len(ml_data.load_ratings(ratings).train) // 32)
    assert f"epoch 1/1  step {steps}/{steps}  loss " in stdout  # the last step always has its line
    for name, path in [
        ("checkpoint", out / "model" / f"model.ckpt-{steps}"),
        ("export", out / "export"),
        ("results", out / "results.json"),
    ]:
        assert f"  {name:<14}{path}" in lines
    plot = next(line for line in lines if line.startswith("  plot"))
    assert plot.endswith(str(out / "training.png")) or "no matplotlib" in plot
    assert (out / "results.json").is_file() and (out / "export" / "manifest.json").is_file()
    assert f"movielens-score PAIRS.csv --output-dir {out}" in lines[-1]


def test_a_fast_first_step_prints_no_compile_notice(monkeypatch):
    lines = []
    progress = ml_progress.JobProgress(3, 1, lines.append, compile_notice=60.0)
    progress.start()
    progress.step()  # before the notice: the timer is cancelled, and no line about compiling or the first step
    progress.first_step_is_slow()  # a timer that fired late says nothing either
    assert lines == [] and not progress.slow_first_step
    monkeypatch.setenv("TPU_EMBEDDING_SHIM_KERNELS", "numpy")
    assert not ml_progress.numba_kernels()  # the numpy kernels: nothing is compiled, no timer


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "is empty: its first line must be the header user_id,item_id,rating"),
        ("user,item,rating\n1,2,4\n", "the header must be user_id,item_id,rating or user_id,item_id,rating,timestamp"),
        ("user_id,item_id,rating\n", "has a header and no ratings"),
        ("user_id,item_id,rating\n1,2,four\n", "line 2: `rating` must be a number. Received: 'four'"),
        ("user_id,item_id,rating\n1,-2,4\n", "line 2: `item_id` must be an integer in 1..10000000"),
        ("user_id,item_id,rating\n0,2,4\n", "(0 is padding in TPUEstimator's dense input: shift your ids by one)"),
        ("user_id,item_id,rating\n1,2\n", "line 2: 3 fields expected (user_id,item_id,rating)"),
        ("user_id,item_id,rating\n1,2,4\n1,3,5\n", "no user has enough ratings for a test set"),
    ],
)
def test_a_bad_ratings_file_is_one_line_and_exit_1(capsys, tmp_path, content, message):
    ratings = tmp_path / "ratings.csv"
    ratings.write_text(content)
    status, _, err = run_cli(capsys, "movielens", "--ratings", str(ratings), "--output-dir", str(tmp_path / "out"))
    assert status == 1 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"tpu-embedding-shim movielens: error: --ratings {str(ratings)!r}") and message in err
    assert not (tmp_path / "out").exists()


def test_ratings_without_timestamps_keep_the_file_order(tmp_path):
    data = ml_data.load_ratings(write_ratings(tmp_path / "r.csv", timestamps=False))
    rows = np.flatnonzero(data.user == 3)
    assert list(data.item[rows]) == [int(line.split(",")[1]) for line in open(tmp_path / "r.csv") if line[:2] == "3,"]
    assert data.genres == ("unknown",) and set(data.user_gender) == {""}  # no side information: empty features


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An output directory of the job trained on a generated ratings file."""
    root = tmp_path_factory.mktemp("scored")
    ratings = write_ratings(root / "ratings.csv")
    out = str(root / "out")
    job.run(
        job.JobConfig(output_dir=out, ratings=ratings, epochs=1, batch_size=32, progress=False, plot=False),
        echo=lambda line: None,
    )
    return root, out


def test_scoring_with_the_export_equals_the_estimators_predictions(trained):
    _, out = trained
    scorer = Scorer(out)
    users, items = np.array([1, 1, 5, 24]), np.array([3, 30, 7, 1])
    scores = scorer.score(users, items)
    config = job.JobConfig(output_dir=out, epochs=1, batch_size=32, progress=False, plot=False)
    estimator = job.build_estimator(config, scorer.data, [])
    features = scorer.features(users, items)
    predictions = list(estimator.predict(lambda params: iter([(features, None)]), yield_single_examples=True))
    np.testing.assert_allclose(scores, [p["probability"] for p in predictions], rtol=1e-5)
    assert scores.dtype == np.float32 and ((scores > 0) & (scores < 1)).all()


def test_the_score_command_writes_a_csv_of_probabilities(capsys, trained):
    root, out = trained
    pairs = root / "pairs.csv"
    pairs.write_text("user_id,item_id\n1,3\n5,7\n")
    status, stdout, _ = run_cli(capsys, "movielens-score", str(pairs), "--output-dir", out)
    rows = list(csv.DictReader(stdout.splitlines()))
    assert status == 0 and [(r["user_id"], r["item_id"]) for r in rows] == [("1", "3"), ("5", "7")]
    assert [float(r["probability"]) for r in rows] == pytest.approx(Scorer(out).score([1, 5], [3, 7]), abs=1e-6)


@pytest.mark.parametrize(
    "content, message",
    [
        ("item_id,user_id\n1,2\n", "the header must start with user_id,item_id. Received: 'item_id,user_id'"),
        ("user_id,item_id\n1,x\n", "line 2: user_id and item_id must be integers >= 0. Received: '1,x'"),
        ("user_id,item_id\n1,999\n", "`item_id` 999 is not in the model: its ids are 0..30."),
    ],
)
def test_bad_pairs_are_one_line_and_exit_1(capsys, trained, content, message):
    root, out = trained
    pairs = root / "bad.csv"
    pairs.write_text(content)
    status, stdout, err = run_cli(capsys, "movielens-score", str(pairs), "--output-dir", out)
    assert status == 1 and stdout == "" and message in err and len(err.strip().splitlines()) == 1


def test_scoring_a_directory_without_a_run_says_how_to_make_one(capsys, tmp_path):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("user_id,item_id\n1,2\n")
    status, _, err = run_cli(capsys, "movielens-score", str(pairs), "--output-dir", str(tmp_path))
    assert status == 1 and "holds no run of the job" in err and "tpu-embedding-shim movielens --output-dir" in err
