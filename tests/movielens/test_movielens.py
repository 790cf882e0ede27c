"""The MovieLens job: data parsing, the hand-written gradients, and the whole job on small data."""

import json
import os
import zipfile

import numpy as np
import pytest

from tpu_embedding_shim.movielens import data as ml_data
from tpu_embedding_shim.movielens import model as ml_model
from tpu_embedding_shim.movielens.job import JobConfig, run


def make_wheel(path, num_users=30, num_items=40, ratings_per_user=25, seed=0):
    """A tiny file in the recbole wheel's layout, with a learnable signal (user and item biases)."""
    rng = np.random.default_rng(seed)
    user_bias, item_bias = rng.normal(size=num_users + 1), rng.normal(size=num_items + 1)
    inter = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    for user in range(1, num_users + 1):
        items = rng.choice(np.arange(1, num_items + 1), ratings_per_user, replace=False)
        for t, item in enumerate(items):
            score = user_bias[user] + item_bias[item] + 0.3 * rng.normal()
            rating = int(np.clip(np.round(3.5 + score), 1, 5))
            inter.append(f"{user}\t{item}\t{rating}\t{880000000 + 1000 * t + user}")
    occupations = ["artist", "doctor", "student"]
    users = ["user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token"]
    for user in range(1, num_users + 1):
        users.append(f"{user}\t{15 + user}\t{'MF'[user % 2]}\t{occupations[user % 3]}\t{10000 + 37 * user}")
    genres = ["Action", "Comedy", "Drama", "Sci-Fi"]
    items = ["item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq"]
    for item in range(1, num_items + 1):
        items.append(f"{item}\tMovie {item}\t1990\t{genres[item % 4]} {genres[(item + 1) % 4]}")
    with zipfile.ZipFile(path, "w") as archive:
        for name, rows in (("inter", inter), ("user", users), ("item", items)):
            archive.writestr(ml_data.MEMBER.format(name), "\n".join(rows) + "\n")
    return str(path)


def quiet_config(output_dir, wheel, **options):
    """The job over `wheel` into `output_dir`, with no progress lines and no plots; `options`: the rest of JobConfig."""
    return JobConfig(output_dir=str(output_dir), wheel=wheel, progress=False, plot=False, **options)


TINY_RUN = {"epochs": 3, "batch_size": 32, "eval_batch_size": 64}  # on make_wheel's 600 training examples


@pytest.fixture(scope="module")
def tiny_wheel(tmp_path_factory):
    return make_wheel(tmp_path_factory.mktemp("wheel") / "recbole-1.2.1-py3-none-any.whl")


def test_parsing_split_and_history(tiny_wheel):
    d = ml_data.load(tiny_wheel, history_length=4)
    assert len(d.user) == 30 * 25
    assert len(d.train) == 30 * 20 and len(d.test) == 30 * 5
    for user in (1, 17):
        rows = np.flatnonzero(d.user == user)
        train, test = np.intersect1d(rows, d.train), np.intersect1d(rows, d.test)
        assert d.timestamp[train].max() <= d.timestamp[test].min()  # the split is by time, per user
    example = np.flatnonzero(d.user == 5)[6]
    history = d.history_values[d.history_splits[example] : d.history_splits[example + 1]]
    np.testing.assert_array_equal(history, d.item[example - 4 : example])  # the 4 previous movies, oldest first
    features, labels = ml_data.features_of(d, d.test[:8])
    assert features["history"].nrows == 8 and features["gender"].shape == (8, 1)
    assert set(np.unique(labels)) <= {0.0, 1.0}


def test_dense_model_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    dims = ml_model.Dims(user=3, item=3, hidden=5)
    layout = {"age_embedding": (0, 2), "item_shared_embedding": (2, 3), "user_embedding": (5, 3)}
    model = ml_model.DenseModel(layout, dims, seed=1)
    pooled = rng.normal(size=(4, 8)).astype(np.float64)
    sequence = rng.normal(size=(4, 6, 3)).astype(np.float64)
    lengths = np.array([0, 2, 6, 3])
    labels = np.array([1.0, 0.0, 1.0, 0.0])

    def loss(p, s):
        return ml_model.log_loss(labels, model.forward(p, s, lengths))

    logits = model.forward(pooled, sequence, lengths)
    d_pooled, d_sequence, _ = model.backward((ml_model.sigmoid(logits) - labels) / 4, sequence.shape)

    def central_difference(argument, index, eps=1e-6):
        """d loss / d argument[index] (argument 0: pooled, 1: sequence), numerically."""
        bumped, lower = [pooled.copy(), sequence.copy()], [pooled.copy(), sequence.copy()]
        bumped[argument][index] += eps
        lower[argument][index] -= eps
        return (loss(*bumped) - loss(*lower)) / (2 * eps)

    for index in [(0, 0), (1, 3), (2, 6), (3, 7)]:
        assert d_pooled[index] == pytest.approx(central_difference(0, index), rel=1e-3, abs=1e-6)
    for index in [(1, 1, 2), (2, 5, 0), (3, 4, 1)]:
        assert d_sequence[index] == pytest.approx(central_difference(1, index), rel=1e-3, abs=1e-6)
    assert d_sequence[3, 4, 1] == 0.0  # beyond the length: no gradient


def test_auc_equals_the_pairwise_definition():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 60).astype(float)
    scores = np.round(rng.normal(size=60), 1)  # with ties
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert ml_model.auc(labels, scores) == pytest.approx(pairs)


def test_the_whole_job_on_a_tiny_generated_file(tiny_wheel, tmp_path):
    lines = []
    out = str(tmp_path / "out")
    result = run(
        quiet_config(out, tiny_wheel, **TINY_RUN, partition_strategy="mod", pipelining=True), echo=lines.append
    )
    assert result.global_step == 3 * int(np.ceil(600 / 32))
    assert result.train_loss[-1] < result.train_loss[0]
    assert result.checkpoint == os.path.join(out, "model", f"model.ckpt-{result.global_step}")  # TensorFlow's format
    assert os.path.isfile(result.checkpoint + ".index") and os.path.isfile(
        os.path.join(result.export_dir, "manifest.json")
    )
    saved = json.load(open(tmp_path / "out" / "results.json"))
    assert saved["test_auc"] == result.test_auc
    assert any("most-popular-item baseline" in line for line in lines)


def test_the_job_reruns_from_scratch_in_its_own_output_dir(tiny_wheel, tmp_path):
    config = quiet_config(tmp_path / "out", tiny_wheel, epochs=1, batch_size=64, eval_batch_size=64)
    first = run(config, echo=lambda line: None)
    lines = []
    second = run(config, echo=lines.append)  # the estimator alone would resume and refuse the export
    assert second.global_step == first.global_step
    assert second.test_auc == first.test_auc
    assert any("replacing the previous run" in line for line in lines)


def test_the_job_refuses_a_foreign_non_empty_output_dir(tiny_wheel, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not written by this job"):
        run(quiet_config(tmp_path, tiny_wheel, epochs=1), echo=lambda line: None)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def real_wheel():
    try:
        return ml_data.fetch()
    except RuntimeError as error:  # no network: the generated-file test above still runs the whole job
        pytest.skip(f"the recbole wheel could not be downloaded: {error}")


def test_the_job_on_a_slice_of_the_real_data_beats_the_popularity_baseline(tmp_path):
    wheel = real_wheel()
    result = run(quiet_config(tmp_path, wheel, epochs=2, max_examples=20000), echo=lambda line: None)
    assert result.test_auc[-1] > result.baseline_auc
    assert result.test_auc[-1] > 0.70
