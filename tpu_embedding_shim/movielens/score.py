"""Scoring (user, item) pairs with the export a run of the job wrote: the probability that the user rates it >= 4.

`tpu-embedding-shim movielens-score PAIRS.csv --output-dir DIR` and
`Scorer(DIR).score(users, items)` read `DIR/export` (the tables and the
dense weights) and `DIR/results.json` (which data trained it: the features
of a pair are built from the same ratings). A pair's features are those the
model trained on: the user, the item, the user's latest rated items (the
history), the item's genres and the user's side features. Only numpy is
needed; an export of `--dense tf` is scored by `TPUEstimator.predict`
instead (its dense weights are TensorFlow variables).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from ..api.tensors import RaggedTensor
from ..runner.export import load_exported
from . import data as ml_data
from . import job as ml_job
from . import model as ml_model

PAIRS_HEADER = ("user_id", "item_id")


class ScoreError(Exception):
    """The output directory or the pairs cannot be scored: the message says why and the fix."""


class Scorer:
    """The model a run of the job exported to `output_dir`, with the data that trained it."""

    def __init__(self, output_dir: str = "movielens_output"):
        results_path = os.path.join(output_dir, "results.json")
        export_dir = os.path.join(output_dir, "export")
        if not (os.path.isfile(results_path) and os.path.isdir(export_dir)):
            raise ScoreError(
                f"--output-dir {output_dir!r} holds no run of the job (results.json and export/ are missing); "
                "run `tpu-embedding-shim movielens --output-dir DIR` first, or pass the directory it wrote."
            )
        with open(results_path, encoding="utf-8") as handle:
            results = json.load(handle)
        if results.get("dense", "numpy") != "numpy":
            raise ScoreError(
                f"{output_dir!r} was trained with --dense {results['dense']}: its dense part is TensorFlow's, which "
                "this scorer does not run; score it with TPUEstimator.predict, or train with --dense numpy."
            )
        self.data = ml_job.load_data(**results.get("data", {}))
        vocabulary = os.path.join(output_dir, "zip_prefixes.txt")
        self.model = load_exported(export_dir)
        self.model.features = [  # the run's vocabulary file, wherever the directory is now
            dataclasses.replace(f, vocabulary_file=vocabulary) if f.vocabulary_file else f for f in self.model.features
        ]
        pooled, sequence = ml_model.feature_columns(self.data, vocabulary, ml_model.Dims())
        self.pooled_features = [c.categorical_column.name for c in sorted(pooled, key=lambda c: c.name)]
        self.sequence_feature = sequence[0].categorical_column.name
        self.dense = ml_model.DenseModel(
            ml_model.pooled_layout(pooled), ml_model.Dims(), state=dict(self.model.dense_state)
        )

    def score(self, users, items) -> np.ndarray:
        """P(rating >= 4) for each (users[i], items[i]), float32 [N]."""
        users, items = np.asarray(users, np.int64).reshape(-1), np.asarray(items, np.int64).reshape(-1)
        for name, ids, count in (("user_id", users, self.data.num_users), ("item_id", items, self.data.num_items)):
            bad = ids[(ids < 0) | (ids >= count)]
            if len(bad):
                raise ScoreError(f"`{name}` {int(bad[0])} is not in the model: its ids are 0..{count - 1}.")
        if len(users) != len(items):
            raise ScoreError(f"{len(users)} users and {len(items)} items: score pairs of the same length.")
        activations, lengths = self.model.lookup(self.features(users, items))
        pooled = np.concatenate([activations[name] for name in self.pooled_features], axis=1)
        sequence = activations[self.sequence_feature]
        logits = self.dense.forward(pooled, sequence, lengths[self.sequence_feature])
        return ml_model.sigmoid(logits).astype(np.float32)

    def features(self, users: np.ndarray, items: np.ndarray) -> dict[str, object]:
        """The model's features for the pairs: those of a rating of `items` by `users` after all their ratings."""
        data, history_length = self.data, ml_model.Dims().history_length
        ends = np.searchsorted(data.user, users, side="right")  # ratings are sorted by user, then time
        starts = np.maximum(np.searchsorted(data.user, users, side="left"), ends - history_length)
        history = RaggedTensor(
            np.concatenate([data.item[a:b] for a, b in zip(starts, ends)] + [np.zeros(0, np.int64)]),
            np.r_[0, np.cumsum(ends - starts)].astype(np.int64),
        )
        genre_values, genre_splits = ml_data.ragged_rows(data.genre_values, data.genre_splits, items)
        return {
            "user": users.reshape(-1, 1),
            "item": items.reshape(-1, 1),
            "history": history,
            "genres": RaggedTensor(genre_values.astype(str), genre_splits),
            "occupation": data.user_occupation[users].astype(str).reshape(-1, 1),
            "gender": data.user_gender[users].astype(str).reshape(-1, 1),
            "age": data.user_age[users].reshape(-1, 1),
            "zip": data.user_zip[users].astype(str).reshape(-1, 1),
        }


def read_pairs(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(users, items) of a CSV file whose header starts `user_id,item_id` (further columns are ignored: a ratings
    file scores as it is)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise ScoreError(f"{path!r}: cannot read it ({type(error).__name__}: {error}).") from None
    header = tuple(field.strip() for field in lines[0].split(",")) if lines else ()
    if header[:2] != PAIRS_HEADER:
        received = repr(lines[0]) if lines else "an empty file"
        raise ScoreError(f"{path!r}: the header must start with user_id,item_id. Received: {received}.")
    pairs = []
    for number, line in enumerate(lines[1:], start=2):
        fields = [field.strip() for field in line.split(",")][:2]
        if len(fields) < 2 or not all(field.isdigit() for field in fields):
            raise ScoreError(f"{path!r} line {number}: user_id and item_id must be integers >= 0. Received: {line!r}.")
        pairs.append([int(fields[0]), int(fields[1])])
    if not pairs:
        raise ScoreError(f"{path!r} has a header and no pairs.")
    array = np.array(pairs, np.int64)
    return array[:, 0], array[:, 1]
