"""Migrate a TPU embedding model off TensorFlow: configs, weights and an honest report of what changes.

Each converter takes an `EmbeddingConfigSpec` (or the project's
`EmbeddingSpec`) and optionally a checkpoint (TensorFlow's TPUEstimator
format, or the project's), and returns a `Migration`: the target's config
objects (when its library is installed), Python source that builds them,
the weights and optimizer state in the target's layout, and a `Report`
that says for every option whether it maps exactly, after a conversion,
or not at all. An option with no equivalent raises `LossyMigrationError`
unless `allow_lossy=True`. See docs/migrate.md.

- `to_torchrec`: TorchRec's `EmbeddingBagCollection` and FBGEMM's fused optimizers;
- `to_keras_rs`: keras-rs `DistributedEmbedding`;
- `to_jax_tpu_embedding`: jax-tpu-embedding's `TableSpec` / `FeatureSpec`;
- `to_tf_midlevel`: TensorFlow's mid-level `TPUEmbedding` (v2 configs), and a
  `tf.train.Checkpoint` of its tables and slots.

`tpu-embedding-shim migrate --to ... MODULE:OBJECT --out DIR` is the command line.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ..progress import ProgressLine
from .migration import Migration
from .report import CONVERTED, EXACT, IMPOSSIBLE, LossyMigrationError, Report, Row
from .source import MigrationInput, load_source, resolve_object

__all__ = [
    "TARGETS",
    "to_torchrec",
    "to_keras_rs",
    "to_jax_tpu_embedding",
    "to_tf_midlevel",
    "migrate",
    "Migration",
    "ProgressLine",
    "Report",
    "Row",
    "LossyMigrationError",
    "MigrationInput",
    "load_source",
    "resolve_object",
    "EXACT",
    "CONVERTED",
    "IMPOSSIBLE",
]

TARGETS = {"torchrec": "torchrec", "keras-rs": "keras_rs", "jax": "jax_tpu_embedding", "tf-midlevel": "tf_midlevel"}
"""The CLI's `--to` value -> the module of this package that converts to it."""


def migrate(to: str, config: Any, checkpoint: str | os.PathLike | None = None, **options: Any) -> Migration:
    """Migrates `config` to the target `to` (one of `TARGETS`); the `to_*` functions call this.

    `options` are `convert`'s: `allow_lossy`, `seed`, `batch_size` and `progress` (the command line's progress
    line; None: nothing is shown).
    """
    from .convert import convert

    if to not in TARGETS:
        raise ValueError(f"Argument `to` must be one of {sorted(TARGETS)}. Received: to={to!r}.")
    module = importlib.import_module(f"{__name__}.{TARGETS[to]}")
    return convert(module.TARGET, config, checkpoint, **options)


def to_torchrec(config: Any, checkpoint: Any = None, **options: Any) -> Migration:
    """TorchRec `EmbeddingBagConfig`s and fused-optimizer settings; `state_dict` and optimizer state."""
    return migrate("torchrec", config, checkpoint, **options)


def to_keras_rs(config: Any, checkpoint: Any = None, **options: Any) -> Migration:
    """keras-rs `TableConfig` / `FeatureConfig` for `DistributedEmbedding`; the tables' weights."""
    return migrate("keras-rs", config, checkpoint, **options)


def to_jax_tpu_embedding(config: Any, checkpoint: Any = None, **options: Any) -> Migration:
    """jax-tpu-embedding `TableSpec` / `FeatureSpec`; tables and slot tuples as arrays."""
    return migrate("jax", config, checkpoint, **options)


def to_tf_midlevel(config: Any, checkpoint: Any = None, **options: Any) -> Migration:
    """TensorFlow's mid-level API configs (`tf.tpu.experimental.embedding.*`); a TF checkpoint of its state."""
    return migrate("tf-midlevel", config, checkpoint, **options)
