"""Workloads: what one benchmark step does, built through the project's public API.

A `Workload` names the sizes; `make_batches` draws ids and activation
gradients once, shared by every implementation; `engine_spec` is the
`EmbeddingSpec` the engine is built from (tables, features, optimizer).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tpu_embedding_shim.engine.optimizers import bias_corrected_learning_rate
from tpu_embedding_shim.engine.optimizers import touches_all_rows as _touches_all_rows
from tpu_embedding_shim.spec import OPTIMIZER_SPECS, EmbeddingSpec, FeatureSpec, TableSpec

# The 26 categorical features of Criteo (Kaggle display advertising), vocabulary sizes as in DLRM's
# preprocessing; capped by `Workload.vocab_cap` so 26 tables fit beside every peer's copy.
CRITEO_SIZES = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)

LR = 0.05
ADAGRAD_INITIAL = 0.1
BETA1, BETA2, ADAM_EPS = 0.9, 0.999, 1e-8
MOMENTUM = 0.9
RMSPROP_LR, RMSPROP_RHO, RMSPROP_MOMENTUM, RMSPROP_EPS = 0.001, 0.9, 0.9, 1e-10  # 0.05: a first step of ~0.16
L1, L2 = 1e-3, 1e-3  # FTRL and proximal Adagrad: small, but every row goes through the shrinkage code
ADAGRAD_MOMENTUM_EPS = 1e-10

# torch's Adam corrects the bias; a TPU's Adam doesn't: the correction is folded into the learning rate
# (optimizers.bias_corrected_learning_rate) and epsilon goes outside the root.
_ADAM = {
    "learning_rate": bias_corrected_learning_rate(LR, BETA1, BETA2),
    "beta1": BETA1,
    "beta2": BETA2,
    "epsilon": ADAM_EPS,
    "sum_inside_sqrt": False,
}
_PROXIMAL = {"l1_regularization_strength": L1, "l2_regularization_strength": L2}

# Workload.optimizer -> (the spec's kind, its hyper-parameters): the project's public spec of each.
_OPTIMIZER_SPECS = {
    "sgd": ("sgd", {"learning_rate": LR}),
    "adagrad": ("adagrad", {"learning_rate": LR, "initial_accumulator": ADAGRAD_INITIAL}),
    "adam": ("adam", {**_ADAM, "lazy_adam": True}),
    "adam-nonlazy": ("adam", {**_ADAM, "lazy_adam": False}),
    "ftrl": (
        "ftrl",
        {"learning_rate": LR, "learning_rate_power": -0.5, "initial_accumulator_value": ADAGRAD_INITIAL, **_PROXIMAL},
    ),
    "momentum": ("momentum", {"learning_rate": LR, "momentum": MOMENTUM}),
    "rmsprop": (
        "rmsprop",
        {"learning_rate": RMSPROP_LR, "rho": RMSPROP_RHO, "momentum": RMSPROP_MOMENTUM, "epsilon": RMSPROP_EPS},
    ),
    "proximal-adagrad": (
        "proximal_adagrad",
        {"learning_rate": LR, "initial_accumulator": ADAGRAD_INITIAL, **_PROXIMAL},
    ),
    "adagrad-momentum": (
        "adagrad_momentum",
        {"learning_rate": LR, "momentum": MOMENTUM, "epsilon": ADAGRAD_MOMENTUM_EPS},
    ),
}
OPTIMIZERS = tuple(_OPTIMIZER_SPECS)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark configuration. `tables` vocabulary sizes, one feature per table."""

    name: str
    vocab: tuple[int, ...] = (1_000_000,)
    dim: int = 64
    batch: int = 4096
    bag: tuple[int, int] = (20, 20)  # ids per example: min, max (uniform in between)
    ids: str = "uniform"  # 'uniform' or 'zipf'
    zipf_a: float = 1.05
    combiner: str = "sum"  # sum, mean, sqrtn
    weighted: bool = False
    optimizer: str = "adagrad"  # one of OPTIMIZERS ('adam' is lazy Adam)
    sequence: int = 0  # > 0: a sequence feature of this max length (no pooling)
    forward_only: bool = False
    num_shards: int = 1  # EmbeddingSpec.num_shards: storage only, numbers never change
    partition_strategy: str = "div"  # 'div' or 'mod' (with num_shards > 1)

    @property
    def num_tables(self) -> int:
        return len(self.vocab)

    def describe(self) -> str:
        v = f"{self.vocab[0]:,}" if self.num_tables == 1 else f"{self.num_tables} tables, {sum(self.vocab):,} rows"
        bag = f"{self.bag[0]}" if self.bag[0] == self.bag[1] else f"{self.bag[0]}..{self.bag[1]}"
        kind = (
            f"sequence L={self.sequence}" if self.sequence else f"{self.combiner}{' weighted' if self.weighted else ''}"
        )
        shards = f" {self.num_shards} shards {self.partition_strategy}" if self.num_shards > 1 else ""
        return (
            f"V={v} D={self.dim} B={self.batch} L={bag} {self.ids} {kind} "
            f"{'forward only' if self.forward_only else self.optimizer}{shards}"
        )


@dataclasses.dataclass
class Batch:
    """One feature's ids in ragged form plus its activation gradient."""

    values: np.ndarray  # int64 [N]
    offsets: np.ndarray  # int64 [B + 1]
    weights: np.ndarray | None  # float32 [N] or None
    positions: np.ndarray  # int64 [N]
    grad: np.ndarray  # float32 [B, D] or [B, L, D]


def _draw_ids(rng: np.random.Generator, w: Workload, vocab: int, n: int) -> np.ndarray:
    if w.ids == "uniform":
        return rng.integers(0, vocab, n, dtype=np.int64)
    # Zipf(a) over ranks, ranks scattered over the vocabulary by a fixed permutation-like hash.
    ranks = rng.zipf(w.zipf_a, n * 2)
    ranks = ranks[ranks <= vocab][:n]
    while ranks.shape[0] < n:
        more = rng.zipf(w.zipf_a, n)
        ranks = np.concatenate([ranks, more[more <= vocab]])[:n]
    return ((ranks.astype(np.int64) - 1) * 2654435761) % vocab


def make_batches(w: Workload, count: int, seed: int = 0) -> list[list[Batch]]:
    """`count` steps, each a list with one `Batch` per table."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(count):
        step = []
        for vocab in w.vocab:
            lengths = rng.integers(w.bag[0], w.bag[1] + 1, w.batch)
            offsets = np.zeros(w.batch + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            n = int(offsets[-1])
            values = _draw_ids(rng, w, vocab, n)
            positions = (np.arange(n) - np.repeat(offsets[:-1], lengths)).astype(np.int64)
            weights = rng.uniform(0.1, 2.0, n).astype(np.float32) if w.weighted else None
            shape = (w.batch, w.sequence, w.dim) if w.sequence else (w.batch, w.dim)
            grad = rng.standard_normal(shape).astype(np.float32) * np.float32(0.1)
            step.append(Batch(values, offsets, weights, positions, grad))
        steps.append(step)
    return steps


def optimizer_spec(w: Workload):
    """The workload's optimizer as the project's public spec; its slots (`slot_initial_values()`) size the bound."""
    if w.optimizer not in _OPTIMIZER_SPECS:
        raise ValueError(f"unknown optimizer {w.optimizer!r}; choose from {OPTIMIZERS}")
    kind, hyperparameters = _OPTIMIZER_SPECS[w.optimizer]
    return OPTIMIZER_SPECS[kind](**hyperparameters)


def num_slots(w: Workload) -> int:
    """Optimizer slot arrays per table (0 for a forward-only workload), from the spec itself."""
    return 0 if w.forward_only else len(optimizer_spec(w).slot_initial_values())


def touches_all_rows(w: Workload) -> bool:
    """True when a step updates every row of every table (non-lazy Adam), as the engine decides it."""
    return not w.forward_only and _touches_all_rows(optimizer_spec(w))


def engine_spec(w: Workload) -> EmbeddingSpec:
    """The workload as the project's public `EmbeddingSpec`."""
    tables, features = [], []
    for t, vocab in enumerate(w.vocab):
        tables.append(TableSpec(name=f"t{t}", vocabulary_size=vocab, dim=w.dim, combiner=w.combiner))
        features.append(FeatureSpec(name=f"f{t}", table=f"t{t}", num_buckets=vocab, max_sequence_length=w.sequence))
    return EmbeddingSpec(
        tables=tuple(tables),
        features=tuple(features),
        optimizer=optimizer_spec(w),
        num_shards=w.num_shards,
        partition_strategy=w.partition_strategy,
    )


def initial_tables(w: Workload, seed: int = 1) -> list[np.ndarray]:
    """The same initial table for every implementation (uniform in +-1/sqrt(D))."""
    rng = np.random.default_rng(seed)
    scale = np.float32(1.0 / np.sqrt(w.dim))
    out = []
    for vocab in w.vocab:
        table = np.empty((vocab, w.dim), dtype=np.float32)
        for start in range(0, vocab, 1 << 20):
            stop = min(vocab, start + (1 << 20))
            table[start:stop] = rng.uniform(-1, 1, (stop - start, w.dim)).astype(np.float32) * scale
        out.append(table)
    return out
