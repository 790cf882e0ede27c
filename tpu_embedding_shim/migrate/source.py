"""What a migration converts: the spec, every table's weights and slots, and where they came from.

`load_source(config, checkpoint=None)` takes an `EmbeddingConfigSpec` (the
TPUEstimator program's) or an `EmbeddingSpec` (the project's), and the
weights either from a checkpoint or, without one, freshly initialized with
TensorFlow's initializers (what the program would start from):

- a TPUEstimator checkpoint written by TensorFlow or by this project's
  runner (a prefix or a model_dir: its latest), read with the runner's own
  restore: TensorFlow's variable names, `mod` tables of several hosts put
  back in id order, TensorFlow's CPU slot names;
- an engine checkpoint (`ckpt-<step>`, or a directory of them);
- a checkpoint of `tpu-embedding-shim checkpoint convert` (keys `<table>`
  and `<table>/<slot>`), for an `EmbeddingSpec`;
- a SparseCore checkpoint (TensorFlow 2.21's `TPUEmbeddingV2` on a TPU:
  stacked, sharded tables with their layouts), unstacked by
  `checkpoints/sparsecore.py`, for an `EmbeddingSpec` of the same tables.

Tables are whole, in id order; slots keep TensorFlow's names (`accumulators`,
`momenta`, `velocities`, `linears`, `ms`, `mom`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from ..api import lowering
from ..api.checkpoint_reader import latest_checkpoint
from ..api.embedding_config_spec import EmbeddingConfigSpec
from ..checkpoints import program_checkpoint
from ..checkpoints.restore import Program, resume_plan
from ..checkpoints.sparsecore import find_sparsecore, tables_of
from ..checkpoints.tf_names import ProgramNames
from ..engine import CheckpointError, Engine
from ..engine import checkpoint as engine_checkpoint
from ..engine.tf_bundle import BundleReader, is_bundle
from ..spec import EmbeddingSpec, FeatureSpec, OptimizerSpec, TableSpec

__all__ = ["MigrationInput", "load_source", "resolve_object"]

State = dict[str, dict[str, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class MigrationInput:
    """A model's embeddings, ready to convert.

    Attributes:
      spec: the engine's tables and features, and the spec-wide options.
      tensor_core_tables: tables of `tensor_core_feature_columns` (trained by
        the model's own optimizer, so they have no embedding optimizer).
      tensor_core_features: their features.
      state: table -> {'embedding': [V, D] float32, slot: array}, every
        table (tensor-core ones have no slots), whole, in id order.
      step: the global step of the weights (0 when fresh).
      origin: where the weights came from, for the report.
      batch_size: the global batch size, for targets whose configs carry it
        (keras-rs, jax-tpu-embedding); None when not given.
      notes: what reading the weights noticed (slots started fresh, ...).
      num_shards_known: whether `spec.num_shards` is the program's. An
        EmbeddingConfigSpec holds no shard count (the TPUEstimator's
        `TPUConfig(num_shards=...)` sets it, and a checkpoint of whole
        tables does not record it), so for one this is False and the
        report says where the count lives instead of the spec's 1.
    """

    spec: EmbeddingSpec
    tensor_core_tables: tuple[TableSpec, ...]
    tensor_core_features: tuple[FeatureSpec, ...]
    state: State
    step: int
    origin: str
    batch_size: int | None = None
    notes: tuple[str, ...] = ()
    num_shards_known: bool = True

    @property
    def tables(self) -> tuple[TableSpec, ...]:
        """Every table: the engine's, then the tensor-core ones."""
        return self.spec.tables + self.tensor_core_tables

    @property
    def features(self) -> tuple[FeatureSpec, ...]:
        return self.spec.features + self.tensor_core_features

    def table(self, name: str) -> TableSpec:
        """The table `name`, a tensor-core one too (KeyError naming every table otherwise)."""
        found = [table for table in self.tables if table.name == name]
        if not found:
            raise KeyError(f"No table named {name!r}; tables are {[t.name for t in self.tables]}.")
        return found[0]

    def feature(self, name: str) -> FeatureSpec:
        """The feature `name`, a tensor-core one too."""
        return next(f for f in self.features if f.name == name)

    def features_of(self, table: str) -> tuple[FeatureSpec, ...]:
        return tuple(f for f in self.features if f.table == table)

    def is_tensor_core(self, table: str) -> bool:
        return any(t.name == table for t in self.tensor_core_tables)

    def optimizer_for(self, table: str) -> OptimizerSpec | None:
        """The table's embedding optimizer (None for a tensor-core table: the model's optimizer trains it)."""
        return None if self.is_tensor_core(table) else self.spec.optimizer_for(table)

    def describe(self) -> str:
        tables = ", ".join(f"{t.name} [{t.vocabulary_size} x {t.dim}]" for t in self.tables)
        return f"{len(self.tables)} tables ({tables}); weights: {self.origin}"


def resolve_object(reference: str) -> Any:
    """`MODULE:OBJECT` (OBJECT may be dotted): the object, called when it is a function (with no arguments).

    Raises ValueError naming the reference when it has no ':' or the object does not exist.
    """
    import importlib

    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"Expected MODULE:OBJECT (e.g. my_model:embedding_config_spec). Received: {reference!r}.")
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"{reference!r}: module {module_name!r} has no attribute {attribute!r}.")
        value = getattr(value, part)
    if callable(value) and not isinstance(value, (EmbeddingSpec, EmbeddingConfigSpec, type)):
        value = value()
    return value


def load_source(
    config: Any, checkpoint: str | os.PathLike | None = None, *, seed: int = 0, batch_size: int | None = None
) -> MigrationInput:
    """The `MigrationInput` of `config` (an EmbeddingConfigSpec or EmbeddingSpec) with the weights of `checkpoint`.

    Without a checkpoint the tables are drawn by their initializers (the
    engine's, seeded with `seed`) and the slots hold their initial values.

    Raises:
      TypeError: `config` is neither an EmbeddingConfigSpec nor an EmbeddingSpec.
      ValueError: `batch_size` is not a positive int, `seed` not an int in [0, 2**63).
      TypeError / ValueError: `checkpoint` is not a path / an empty one.
      NotFoundError / CheckpointError / DataLossError: the checkpoint is
        missing, corrupt, or does not hold every table with its shape.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ValueError(f"Argument `seed` must be an int from 0 to 2**63 - 1. Received: seed={seed!r}.")
    if checkpoint is not None and (not isinstance(checkpoint, (str, os.PathLike)) or not os.fspath(checkpoint)):
        error = ValueError if isinstance(checkpoint, (str, os.PathLike)) else TypeError
        raise error(
            "Argument `checkpoint` must be None (fresh tables) or a non-empty path: a model_dir, a checkpoint "
            f"prefix or an engine checkpoint. Received: checkpoint={checkpoint!r}."
        )
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"Argument `batch_size` must be a positive int or None. Received: batch_size={batch_size!r}.")
    tensor_core_tables: tuple[TableSpec, ...] = ()
    tensor_core_features: tuple[FeatureSpec, ...] = ()
    if isinstance(config, EmbeddingConfigSpec):
        spec = config.to_spec()
        if config.tensor_core_feature_columns:
            tensor_core_tables, tensor_core_features = lowering.specs_from_feature_columns(
                list(config.tensor_core_feature_columns), optimizer=None
            )
    elif isinstance(config, EmbeddingSpec):
        spec = config
    else:
        raise TypeError(
            "Argument `config` must be an EmbeddingConfigSpec or an EmbeddingSpec. "
            f"Received: {type(config).__name__} {config!r:.80}."
        )
    if checkpoint is None:
        state, step, origin, notes = _fresh(spec, tensor_core_tables, seed)
    else:
        state, step, origin, notes = _read(config, spec, tensor_core_tables, os.fspath(checkpoint))
    return MigrationInput(
        spec,
        tensor_core_tables,
        tensor_core_features,
        state,
        step,
        origin,
        batch_size,
        tuple(notes),
        num_shards_known=not isinstance(config, EmbeddingConfigSpec),
    )


def _fresh(spec: EmbeddingSpec, tensor_core: tuple[TableSpec, ...], seed: int) -> tuple[State, int, str, list[str]]:
    # clipping_limit changes no value (the engine would warn so; the report says it)
    unclipped = dataclasses.replace(spec, clipping_limit=None)
    state = Engine(unclipped, seed=seed, kernels="numpy").state() if spec.tables else {}
    rng = np.random.default_rng([int(seed), 1])  # as the runner seeds tensor-core tables
    for table in tensor_core:
        values = table.seeded_initializer(rng)((table.vocabulary_size, table.dim), np.float32)
        state[table.name] = {"embedding": np.asarray(values, dtype=np.float32)}
    origin = (
        "fresh: drawn by each table's initializer (TensorFlow's default: truncated normal, stddev "
        f"1/sqrt(dim)), seed {seed}"
    )
    return state, 0, origin, []


def _read(
    config: Any, spec: EmbeddingSpec, tensor_core: tuple[TableSpec, ...], path: str
) -> tuple[State, int, str, list[str]]:
    engine_path = _engine_checkpoint(path)
    if engine_path is not None:
        state, step, _ = engine_checkpoint.load_checkpoint(engine_path, spec_structure=spec.structure())
        notes = []
        if tensor_core:  # an engine checkpoint holds the engine's tables only
            fresh, _, _, _ = _fresh(EmbeddingSpec(tables=(), features=()), tensor_core, 0)
            state = {**state, **fresh}
            notes.append(
                f"The engine checkpoint holds no tensor-core tables (the model's own): {sorted(fresh)} are drawn by "
                "their initializers (seed 0)."
            )
        return dict(state), step, f"engine checkpoint {engine_path} (step {step})", notes
    sparsecore = _sparsecore(spec, path)
    if sparsecore is not None:
        return sparsecore
    if isinstance(config, EmbeddingConfigSpec):
        names = ProgramNames(
            config.feature_columns or (), config.tensor_core_feature_columns or (), tables=[t.name for t in spec.tables]
        )
    else:
        names = ProgramNames(tables=[t.name for t in spec.tables])
    program = Program(
        names,
        {t.name: (t.vocabulary_size, t.dim) for t in spec.tables},
        {t.name: spec.optimizer_for(t.name) for t in spec.tables},
        {t.name: (t.vocabulary_size, t.dim) for t in tensor_core},
        spec.partition_strategy,
    )
    source = program_checkpoint.open_program_checkpoint(path)
    plan = resume_plan(source, program)
    state = {table: dict(arrays) for table, arrays in plan.tables.items()}
    for table, values in plan.tensor_core.items():
        state[table] = {"embedding": np.asarray(values, dtype=np.float32)}
    return state, plan.step, f"checkpoint {source.path} (step {plan.step})", list(plan.notes)


def _sparsecore(spec: EmbeddingSpec, path: str) -> tuple[State, int, str, list[str]] | None:
    """The spec's tables from the SparseCore checkpoint at `path` (a prefix or a directory's latest), or None when
    `path` is no SparseCore checkpoint. Every table of the spec must be there with its shape and slots."""
    prefix = path if is_bundle(path) else (latest_checkpoint(path) if os.path.isdir(path) else None)
    if prefix is None or not is_bundle(prefix):
        return None
    reader = BundleReader(prefix)
    found = find_sparsecore(reader)
    if not found:
        return None
    if len(found) > 1:
        raise CheckpointError(
            f"{prefix} holds {len(found)} SparseCore embeddings ({', '.join(repr(f.path) for f in found)}); "
            "a migration reads one."
        )
    held = {layout.table_name: tuple(layout.unsharded_shape) for layout in found[0].layouts}
    state = {}
    for name, wanted in spec.structure().items():
        shape = (wanted["vocabulary_size"], wanted["dim"])
        if held.get(name) != shape:
            what = f"is {list(held[name])}" if name in held else "is missing"
            raise CheckpointError(
                f"{prefix}: table {name!r} {what} in the SparseCore checkpoint; the spec has it {list(shape)} "
                f"(the checkpoint's tables: {sorted(held)})."
            )
    tables = tables_of(reader, found[0])
    for name, wanted in spec.structure().items():
        slots = sorted(set(tables[name]) - {"embedding"})
        if slots != wanted["slots"]:
            raise CheckpointError(
                f"{prefix}: table {name!r} has the slots {slots} in the SparseCore checkpoint; its optimizer in the "
                f"spec has {wanted['slots']}."
            )
        state[name] = tables[name]
    return state, 0, f"SparseCore checkpoint {prefix}", ["A SparseCore checkpoint keeps no step: the step is 0."]


def _engine_checkpoint(path: str) -> str | None:
    """The engine checkpoint `path` names (itself, or a directory's latest), or None when it is not one."""
    if os.path.isfile(os.path.join(path, engine_checkpoint.MANIFEST)):
        return path
    if os.path.isdir(path):
        return engine_checkpoint.latest_checkpoint(path)
    return None
