"""The MovieLens recommender: TPU embedding columns and a numpy MLP with its gradients written out.

Embeddings (trained by the embedding engine with the EmbeddingConfigSpec's
optimizer): user, movie (shared with the user's history, a sequence), genres
(multivalent, sqrtn), occupation, gender, age bucket, zip-code prefix
(vocabulary file with OOV buckets).

Dense part, in numpy: the history is mean-pooled over its valid positions;
the movie's dot products with the user and with the pooled history are
added as two interaction features; everything is concatenated and fed to a
one-hidden-layer ReLU MLP giving one logit. Loss: sigmoid cross-entropy.
The dense parameters train with Adam; `backward` returns the gradient of the
loss with respect to every input, which is what the embedding engine needs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import compat
from ..spec.initializers import TruncatedNormal

fc = compat.v2.feature_column
tpu = compat.v2.tpu.experimental


@dataclasses.dataclass(frozen=True)
class Dims:
    """Embedding widths and MLP size."""

    user: int = 16  # must equal `item`: the model uses their dot product
    item: int = 16
    genres: int = 8
    occupation: int = 4
    gender: int = 2
    age: int = 4
    zip: int = 4
    hidden: int = 64
    history_length: int = 20


def feature_columns(data, zip_vocabulary: str, dims: Dims = Dims(), seed: int = 0):
    """(pooled TPU columns in DenseFeatures order, [history sequence column]).

    The movie table is shared by `item` and `history` through
    `shared_embedding_columns` with `max_sequence_lengths`.
    """

    def init(dim, offset):
        return TruncatedNormal(stddev=1.0 / np.sqrt(dim), seed=seed + offset)

    user = fc.categorical_column_with_identity("user", data.num_users)
    item = fc.categorical_column_with_identity("item", data.num_items)
    history = fc.sequence_categorical_column_with_identity("history", data.num_items)
    genres = fc.categorical_column_with_vocabulary_list("genres", list(data.genres))
    occupation = fc.categorical_column_with_vocabulary_list("occupation", list(data.occupations))
    gender = fc.categorical_column_with_vocabulary_list("gender", ["M", "F"])
    age = fc.categorical_column_with_identity("age", 8)  # buckets 1..7 (0 would be padding in dense input)
    zipc = fc.categorical_column_with_vocabulary_file("zip", zip_vocabulary, num_oov_buckets=8)
    item_col, history_col = tpu.shared_embedding_columns(
        [item, history], dims.item, initializer=init(dims.item, 1), max_sequence_lengths=[0, dims.history_length]
    )
    pooled = [
        tpu.embedding_column(user, dims.user, initializer=init(dims.user, 2)),
        item_col,
        tpu.embedding_column(genres, dims.genres, combiner="sqrtn", initializer=init(dims.genres, 3)),
        tpu.embedding_column(occupation, dims.occupation, initializer=init(dims.occupation, 4)),
        tpu.embedding_column(gender, dims.gender, initializer=init(dims.gender, 5)),
        tpu.embedding_column(age, dims.age, initializer=init(dims.age, 6)),
        tpu.embedding_column(zipc, dims.zip, initializer=init(dims.zip, 7)),
    ]
    return pooled, [history_col]


def sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function, written with tanh: no overflow for any z."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def log_loss(labels: np.ndarray, logits: np.ndarray) -> float:
    """Mean sigmoid cross-entropy, computed stably from logits."""
    return float(np.mean(np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half), by ranks."""
    labels = np.asarray(labels) > 0.5
    scores = np.asarray(scores, np.float64)
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    for start, end in zip(starts, ends):
        ranks[order[start:end]] = (start + end + 1) / 2.0
    positives, negatives = labels.sum(), (~labels).sum()
    if positives == 0 or negatives == 0:
        return float("nan")
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


PARAMETERS = ("w1", "b1", "w2", "b2")


class DenseModel:
    """The numpy MLP: `forward` -> logits, `backward` -> input gradients, `step` -> Adam update.

    Inputs: `pooled` [B, P] (the DenseFeatures output: columns sorted by
    name, as TensorFlow concatenates them), `sequence` [B, L, Dh] and
    `lengths` [B] (the SequenceFeatures output). `layout` maps a column name
    to its (start, width) in `pooled`.
    """

    def __init__(
        self,
        layout: dict[str, tuple[int, int]],
        dims: Dims = Dims(),
        *,
        learning_rate: float = 1e-3,
        seed: int = 0,
        state: dict[str, np.ndarray] | None = None,
    ):
        self.dims = dims
        self.user_slice = slice(layout["user_embedding"][0], sum(layout["user_embedding"]))
        self.item_slice = slice(layout["item_shared_embedding"][0], sum(layout["item_shared_embedding"]))
        self.learning_rate = learning_rate
        self.state = {} if state is None else state  # parameters and Adam moments live here (checkpointed)
        if "w1" not in self.state:
            rng = np.random.default_rng(seed)
            width = max(start + w for start, w in layout.values()) + dims.item + 2
            self.state.update(
                {
                    "w1": (rng.standard_normal((width, dims.hidden)) * np.sqrt(2.0 / width)).astype(np.float32),
                    "b1": np.zeros(dims.hidden, np.float32),
                    "w2": (rng.standard_normal((dims.hidden, 1)) * np.sqrt(1.0 / dims.hidden)).astype(np.float32),
                    "b2": np.zeros(1, np.float32),
                    "adam_steps": 0,
                }
            )
            for name in PARAMETERS:
                self.state["m_" + name] = np.zeros_like(self.state[name])
                self.state["v_" + name] = np.zeros_like(self.state[name])
        self._cache: tuple | None = None

    @property
    def params(self) -> dict[str, np.ndarray]:
        return {name: self.state[name] for name in PARAMETERS}

    def forward(self, pooled: np.ndarray, sequence: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        mask = (np.arange(sequence.shape[1])[None, :] < lengths[:, None]).astype(np.float32)
        count = np.maximum(lengths, 1).astype(np.float32)[:, None]
        history = (sequence * mask[:, :, None]).sum(axis=1) / count
        user, item = pooled[:, self.user_slice], pooled[:, self.item_slice]
        dot_user = (user * item).sum(axis=1, keepdims=True)
        dot_history = (history * item).sum(axis=1, keepdims=True)
        x = np.concatenate([pooled, history, dot_user, dot_history], axis=1)
        h_pre = x @ self.params["w1"] + self.params["b1"]
        h = np.maximum(h_pre, 0)
        logits = (h @ self.params["w2"] + self.params["b2"])[:, 0]
        self._cache = (pooled, history, mask, count, x, h_pre, h, user, item)
        return logits

    def backward(self, d_logits: np.ndarray, sequence_shape) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(d pooled, d sequence, parameter gradients) from d loss / d logits."""
        d = self.dims
        pooled, history, mask, count, x, h_pre, h, user, item = self._cache
        d_logits = d_logits[:, None].astype(np.float32)
        grads = {"w2": h.T @ d_logits, "b2": d_logits.sum(axis=0)}
        d_h = (d_logits @ self.params["w2"].T) * (h_pre > 0)
        grads["w1"] = x.T @ d_h
        grads["b1"] = d_h.sum(axis=0)
        d_x = d_h @ self.params["w1"].T
        p = pooled.shape[1]
        d_pooled = d_x[:, :p].copy()
        d_history = d_x[:, p : p + d.item].copy()
        d_dot_user, d_dot_history = d_x[:, p + d.item : p + d.item + 1], d_x[:, p + d.item + 1 :]
        d_pooled[:, self.user_slice] += d_dot_user * item
        d_pooled[:, self.item_slice] += d_dot_user * user + d_dot_history * history
        d_history += d_dot_history * item
        d_sequence = (d_history / count)[:, None, :] * mask[:, :, None]
        return d_pooled, d_sequence.astype(np.float32), grads

    def step(self, grads: dict[str, np.ndarray], beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        """Adam on the dense parameters (with bias correction), written back into `state`."""
        steps = int(self.state["adam_steps"]) + 1
        lr = self.learning_rate * np.sqrt(1 - beta2**steps) / (1 - beta1**steps)
        for name, grad in grads.items():
            m = beta1 * self.state["m_" + name] + (1 - beta1) * grad
            v = beta2 * self.state["v_" + name] + (1 - beta2) * grad * grad
            self.state["m_" + name], self.state["v_" + name] = m, v
            self.state[name] = (self.state[name] - lr * m / (np.sqrt(v) + eps)).astype(np.float32)
        self.state["adam_steps"] = steps


def pooled_layout(columns: list) -> dict[str, tuple[int, int]]:
    """Column name -> (start, width) in the DenseFeatures output (columns sorted by name)."""
    layout, start = {}, 0
    for column in sorted(columns, key=lambda c: c.name):
        layout[column.name] = (start, column.dimension)
        start += column.dimension
    return layout
