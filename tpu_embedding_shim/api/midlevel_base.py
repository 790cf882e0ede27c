"""What the three mid-level classes share: tables, features, optimizer defaulting, the engine and its state.

`TPUEmbedding` (tpu_embedding_v2.py), `TPUEmbeddingV2` (tpu_embedding_v3.py)
and `TPUEmbeddingForServing` (tpu_embedding_for_serving.py) derive from
`MidLevelBase`, TensorFlow's `TPUEmbeddingBase`. It keeps one
`MidLevelFeature` per leaf of `feature_config`, in `tf.nest` order: where the
leaf sits, its `FeatureConfig`, the engine's spec of it, and its output
shape once known. Each batch goes through `_convert` (TensorFlow's input
rules, midlevel_inputs.py), `_lookup`, and for training `_engine_gradients`
and `_apply`.

Under `mpiexec -n N`, an object created in the scope of the `TPUStrategy`
stand-in (whose `num_replicas_in_sync` is then N) is replicated: its engine
is a `DistributedEngine` over the N processes (each holds its rows of every
table and slot, and looks up its per-replica batch), and every public method
that reaches the engine is collective: every replica calls it, in the same
order. Every replica runs the local checks of a call and the replicas agree
before the engine runs (`_agreed`), so a bad input on one replica raises on
every replica (`PeerFailedError` on the others) and changes nothing. Outside
a `TPUStrategy` (and `TPUEmbeddingForServing`, which TensorFlow refuses
under one) the object is this process's own: a one-process `Engine`, as
without mpiexec. docs/distributed.md, "The mid-level API under mpiexec".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..engine import (
    CheckpointError,
    DistributedEngine,
    EmbeddingEngine,
    Engine,
    LookupResult,
    agree,
    shard_sizes,
)
from ..spec import EmbeddingSpec, FeatureSpec
from ..spec.checks import is_int
from . import distribute, lowering, replicas
from . import tpu_embedding_v2_utils as v2_utils
from .midlevel_inputs import ConvertedInput, check_gradient, convert_inputs, zero_gradient_warning
from .nest import Path, flatten_up_to, flatten_with_paths, path_string

__all__ = ["MidLevelBase", "MidLevelFeature", "under_tpu_strategy"]


def under_tpu_strategy() -> bool:
    """Whether the current `tf.distribute` strategy is the (emulated) `TPUStrategy`."""
    return isinstance(distribute.get_strategy(), distribute.TPUStrategy)


@dataclasses.dataclass
class MidLevelFeature:
    """One leaf of `feature_config`, as a mid-level object keeps it.

    Attributes:
      path: where the leaf sits in the nest (`('a', 0)`; `()` for a bare leaf).
      config: its `FeatureConfig`.
      spec: the engine's spec of the feature, pooled: the engine looks every
        input up as pooled samples (`ConvertedInput`), a sequence as one
        sample per position, so one feature can be a sequence in one batch
        and pooled in another (TensorFlow's rules).
      output_shape: the output shape without the embedding dimension, fixed
        by `FeatureConfig.output_shape`, `build()` or the first batch; None
        until then.
    """

    path: Path
    config: v2_utils.FeatureConfig
    spec: FeatureSpec
    output_shape: tuple[int, ...] | None


class MidLevelBase:
    """Tables, features, optimizer defaulting, the engine and its state.

    TensorFlow's `TPUEmbeddingBase`: the table order is the order of first
    appearance in `tf.nest.flatten(feature_config)`; a table without an
    optimizer gets the global one and an unnamed table is named
    `table_<i>`, both by mutating the `TableConfig` (as TensorFlow does);
    duplicate table names are a `ValueError`.

    `num_shards` (None: one per replica) is how many shards the engine
    stores each table in; `TPUEmbeddingV2` passes TensorFlow's
    `4 * num_replicas_in_sync`. Under mpiexec it must be a multiple of the
    number of replicas (`ValueError` otherwise, nothing changed).
    """

    tensorflow_class_name = "TPUEmbedding"
    """The TensorFlow class this object stands in for: how its messages and checkpoints name it."""

    simulates_quantization = True
    """Whether lookups apply the tables' `quantization_config` (a TPU's forward pass does; TensorFlow's
    CPU serving lookups do not)."""

    def __init__(
        self,
        feature_config: Any,
        optimizer: Any,
        pipeline_execution_with_tensor_core: bool = False,
        *,
        num_shards: int | None = None,
        partition_strategy: str = "div",
    ):
        self._strategy = distribute.get_strategy()
        self._using_tpu = under_tpu_strategy()
        # Replicas of this object: N under a TPUStrategy in `mpiexec -n N`, else 1 (this process's own object).
        self._replicas = self._strategy.num_replicas_in_sync
        if num_shards is None:
            num_shards = self._replicas
        elif is_int(num_shards) and num_shards >= 1 and num_shards % self._replicas:
            raise ValueError(
                f"Argument `num_shards` must be a multiple of the number of replicas ({self._replicas}, one per "
                f"process under mpiexec): each replica holds num_shards / {self._replicas} shards of every table. "
                f"Received: {num_shards!r}."
            )
        self._feature_config = feature_config
        leaves = flatten_with_paths(feature_config)
        for path, config in leaves:
            if not isinstance(config, v2_utils.FeatureConfig):
                raise ValueError(
                    f"Argument `feature_config` must be a nest of tf.tpu.experimental.embedding.FeatureConfig. "
                    f"Received {config!r} at path '{path_string(path)}'."
                )
        if optimizer is not None and not isinstance(optimizer, v2_utils.Optimizer):
            raise ValueError(
                f"{type(optimizer)} is an unsupported optimizer class. Please pass an instance of one "
                "of the optimizer classes under tf.tpu.experimental.embedding."
            )
        self._table_config: list[v2_utils.TableConfig] = []
        for _, config in leaves:
            if not any(config.table is t for t in self._table_config):
                self._table_config.append(config.table)
        # TensorFlow names the tables and gives them the global optimizer by changing the user's TableConfigs;
        # a call that raises changes nothing here, so they are put back if anything below fails.
        originals = [(table, table.name, table.optimizer) for table in self._table_config]
        try:
            names: list[str] = []
            for i, table in enumerate(self._table_config):
                if table.optimizer is None:
                    table.optimizer = optimizer
                if (table.optimizer is not None or self._using_tpu) and not isinstance(
                    table.optimizer, v2_utils.Optimizer
                ):
                    raise ValueError(
                        f"{type(table.optimizer)} is an unsupported optimizer class. Please pass an "
                        "instance of one of the optimizer classes under tf.tpu.experimental.embedding."
                    )
                if table.name is None:
                    table.name = f"table_{i}"
                if table.name in names:
                    raise ValueError(f"Tables must have a unique name. Multiple tables with name {table.name} found.")
                names.append(table.name)
            self._optimizer = optimizer
            self._pipeline_execution_with_tensor_core = bool(pipeline_execution_with_tensor_core)
            self._learning_rates = lowering.LearningRateMemo()
            self._spec = lowering.spec_from_feature_config(
                feature_config,
                None,
                pipeline_execution_with_tensor_core=self._pipeline_execution_with_tensor_core,
                num_shards=num_shards,
                partition_strategy=partition_strategy,
                learning_rate_memo=self._learning_rates,
                simulate_quantization=self.simulates_quantization,
            )
        except BaseException:
            for table, name, table_optimizer in originals:
                table.name, table.optimizer = name, table_optimizer
            raise
        self._features = [
            MidLevelFeature(
                path,
                config,
                dataclasses.replace(spec, max_sequence_length=0),
                tuple(config.output_shape) if config.output_shape is not None else None,
            )
            for (path, config), spec in zip(leaves, self._spec.features)
        ]
        self._engine_spec = dataclasses.replace(self._spec, features=tuple(f.spec for f in self._features))
        self._engine: EmbeddingEngine | None = None
        self._built = False

    # What the TF bridge (tensorflow/), tf.train.Checkpoint (checkpoint_objects.py) and migrate/ use ------------

    @property
    def feature_config(self) -> Any:
        """The `feature_config` nest as given: its structure is that of every input, weight, gradient and
        activation nest."""
        return self._feature_config

    @property
    def table_configs(self) -> list[v2_utils.TableConfig]:
        """The `TableConfig`s in table order (first appearance in `tf.nest.flatten(feature_config)`), named and
        with their optimizers. A new list; the configs are the user's."""
        return list(self._table_config)

    @property
    def features(self) -> list[MidLevelFeature]:
        """One `MidLevelFeature` per leaf of `feature_config`, in `tf.nest` order (a new list of this object's
        own entries: an output shape fixed later shows in them)."""
        return list(self._features)

    @property
    def output_shapes(self) -> list[tuple[int, ...] | None]:
        """Every feature's output shape without the embedding dimension (None while unknown), in `tf.nest`
        order."""
        return [f.output_shape for f in self._features]

    @property
    def engine_spec(self) -> EmbeddingSpec:
        """The engine's spec (tables, slots, features), known without building the engine."""
        return self._engine_spec

    @property
    def built(self) -> bool:
        """Whether the object is built (TensorFlow's `_built`): `build()`, a first batch or a restore made
        its engine."""
        return self._built

    @property
    def engine_if_built(self) -> EmbeddingEngine | None:
        """The engine if it exists, else None; unlike `engine`, reading it builds nothing."""
        return self._engine

    def batch_output_shapes(self, features: Any, weights: Any = None) -> list[tuple[int, ...]]:
        """Each feature's output shape for this batch, after TensorFlow's checks of it (`ValueError` /
        `TypeError` as TensorFlow's); changes nothing. The TF bridge runs it on an empty batch of the traced
        shapes."""
        return [tuple(c.output_shape) for c in self._convert(features, weights)]

    @property
    def _output_shapes(self) -> list[tuple[int, ...] | None]:
        """`output_shapes` under TensorFlow's attribute name (which TensorFlow-ported tests read)."""
        return self.output_shapes

    # Building ------------------------------------------------------------------------------

    # Seeds the tables' random initializers that have no seed of their own; None: fresh entropy, as TensorFlow
    # without a seed. The TensorFlow bridge sets it from TensorFlow's global seed (tf.random.set_seed).
    initializer_seed: int | None = None

    def _build_engine(self) -> EmbeddingEngine:
        """Creates the tables and slots (once), honouring `slot_variable_creation_fn` (collective when replicated).

        Replicated (module docstring): a `DistributedEngine` over
        `replicas.world()`; the seed is agreed (rank 0 draws one when
        `initializer_seed` is None), so the joined tables are those one
        process draws with that seed. `slot_variable_creation_fn` runs on
        every replica on the full tables; each replica keeps its rows of
        what it returns (so it must be deterministic, as any replicated code).
        """
        if self._engine is None:
            if self._replicas > 1:
                # Which replica holds which rows is storage only (the numbers are those of one process either
                # way). `div` keeps each replica's rows one contiguous range, so its part of a checkpoint is one
                # row slice, as TensorFlow saves mid-level tables under a TPUStrategy; V2's shard view
                # (`embedding_table_shards`) still follows `self._engine_spec`.
                spec = dataclasses.replace(self._engine_spec, partition_strategy="div")
                engine: EmbeddingEngine = DistributedEngine(spec, replicas.world(), seed=self.initializer_seed)
            else:
                engine = Engine(self._engine_spec, seed=self.initializer_seed)
            custom = [
                t
                for t in self._table_config
                if t.optimizer is not None and getattr(t.optimizer, "slot_variable_creation_fn", None)
            ]
            if custom:
                state = engine.state()
                for table in custom:
                    parameters = state[table.name]["embedding"]
                    state[table.name].update(
                        self._agreed("slot_variable_creation_fn", self._created_slots, table, parameters)
                    )
                engine.load_state(state, step=0)
            self._engine = engine
        return self._engine

    def _agreed(self, call: str, fn: Any, *args: Any) -> Any:
        """`fn(*args)`, a local step (checks and conversions, no collective inside); when replicated, the
        replicas agree on its outcome before going on: an error on one raises on every one (its own error
        there, `PeerFailedError` on the others)."""
        if self._replicas == 1:
            return fn(*args)
        result, error = None, None
        try:
            result = fn(*args)
        except Exception as caught:
            error = caught
        agree(replicas.world(), error, f"{self.tensorflow_class_name}.{call}")
        return result

    @staticmethod
    def call_slot_variable_creation_fn(
        table: v2_utils.TableConfig, parameters: np.ndarray, names: list[str], initializers: list[Any]
    ) -> Any:
        """`slot_variable_creation_fn(a copy of the table's initial values, slot names, initializers)`.

        The TensorFlow bridge replaces it on its objects (as it sets
        `initializer_seed`) with one that calls it as TensorFlow does (a
        `tf.Variable`, initializers TensorFlow can call) and reads the slots
        back as arrays.
        """
        return table.optimizer.slot_variable_creation_fn(parameters.copy(), names, initializers)

    def _created_slots(self, table: v2_utils.TableConfig, parameters: np.ndarray) -> dict[str, np.ndarray]:
        names, initializers = lowering.slot_names_and_initializers(table.optimizer)
        created = self.call_slot_variable_creation_fn(table, parameters, list(names), list(initializers))
        if not isinstance(created, Mapping) or sorted(created) != sorted(names):
            received = sorted(created) if isinstance(created, Mapping) else type(created).__name__
            raise ValueError(
                f"slot_variable_creation_fn of table {table.name!r} must return a dict with exactly the "
                f"slot names {names}. Received: {received}."
            )
        slots = {}
        for name in names:
            value = np.asarray(created[name], dtype=np.float32)
            if value.shape != parameters.shape:
                raise ValueError(
                    f"slot_variable_creation_fn of table {table.name!r} returned slot {name!r} of shape "
                    f"{list(value.shape)}; it must have the table's shape {list(parameters.shape)}."
                )
            slots[name] = value
        return slots

    @property
    def engine(self) -> EmbeddingEngine:
        """The CPU engine holding the tables (built on first use, collectively when replicated). Not a
        TensorFlow attribute."""
        return self._build_engine()

    # Tables ----------------------------------------------------------------------------------

    @property
    def embedding_tables(self) -> dict[v2_utils.TableConfig, np.ndarray]:
        """A dict of the full embedding tables `[vocabulary_size, dim]`, keyed by `TableConfig`.

        Copies, in id order, with any pending (pipelined) update applied. In
        TensorFlow this works only outside a `TPUStrategy`; here it always
        works. Replicated (under mpiexec), it is a collective gather: every
        replica calls it and gets the full tables.
        """
        engine = self._build_engine()
        return {table: engine.table(table.name) for table in self._table_config}

    @property
    def variables(self) -> dict[v2_utils.TableConfig, dict[str, np.ndarray]]:
        """`{TableConfig: {'parameters': table, <slot name>: slot}}`, TensorFlow's names (copies; full
        arrays on every replica, one collective gather when replicated)."""
        state = self._build_engine().state()
        return {
            table: {"parameters": state[table.name]["embedding"], **self._slots_of(state[table.name])}
            for table in self._table_config
        }

    @staticmethod
    def _slots_of(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: values for name, values in arrays.items() if name != "embedding"}

    # Inputs and gradients ---------------------------------------------------------------------------

    def _convert(self, features: Any, weights: Any, *, serving: bool = False) -> list[ConvertedInput]:
        """Each feature's input checked and mapped to the engine's samples (`convert_input`).

        Features may have different batch sizes (TensorFlow checks each
        feature's output shape, not one batch size for all).
        """
        flat_inputs = flatten_up_to(self._feature_config, features, "features")
        flat_weights = [None] * len(flat_inputs)
        if weights is not None:
            flat_weights = flatten_up_to(self._feature_config, weights, "weights")
        mine = self._features
        return convert_inputs(
            flat_inputs,
            flat_weights,
            [f.config for f in mine],
            [f.path for f in mine],
            features=[f.spec for f in mine],
            serving=serving,
            known=[None if f.config.output_shape is not None else f.output_shape for f in mine],
            kernels=None if self._engine is None else self._engine.kernels,  # once built: one compiled check
        )

    def _check_output_shapes(self, converted: list[ConvertedInput]) -> None:
        """The first batch fixes each feature's output shape (unless configured or built); later ones keep it."""
        for f, c in zip(self._features, converted):
            if f.output_shape is None:
                f.output_shape = c.output_shape

    def _lookup(self, converted: list[ConvertedInput], training: bool) -> tuple[LookupResult, list[np.ndarray]]:
        # a batch enqueue checked goes to the engine as it is (`CheckedBatch`: no second check, no copy)
        features = {f.spec.name: c.ids if c.checked is None else c.checked for f, c in zip(self._features, converted)}
        weights = {
            f.spec.name: c.weights
            for f, c in zip(self._features, converted)
            if c.weights is not None and c.checked is None
        }
        result = self._build_engine().forward(features, weights or None, training=training, same_batch_size=False)
        activations = [
            result.activations[f.spec.name].reshape(c.output_shape + (f.config.table.dim,))
            for f, c in zip(self._features, converted)
        ]
        return result, activations

    def _engine_gradients(self, gradients: Any, converted: list[ConvertedInput]) -> dict[str, np.ndarray]:
        """The gradients as the engine's `[samples, dim]`, after TensorFlow's checks (`output_shape + [dim]`)."""
        flat = flatten_up_to(self._feature_config, gradients, "gradients")
        expected = [tuple(c.output_shape) + (f.config.table.dim,) for f, c in zip(self._features, converted)]
        arrays = [check_gradient(g, shape, f.path) for g, shape, f in zip(flat, expected, self._features)]
        out = {}
        for array, shape, c, f in zip(arrays, expected, converted, self._features):
            if array is None:
                zero_gradient_warning(f.path, shape)
                array = np.zeros(shape, np.float32)
            out[f.spec.name] = array.reshape(c.num_samples, f.config.table.dim)
        return out

    def _apply(self, result: LookupResult, gradients: dict[str, np.ndarray]) -> None:
        """The engine update, each callable learning rate evaluated once (TensorFlow's rule)."""
        functions = [
            t.optimizer.learning_rate
            for t in self._table_config
            if t.optimizer is not None and callable(t.optimizer.learning_rate)
        ]
        self._learning_rates.evaluate(functions)
        try:
            self._build_engine().apply_gradients(result, gradients)
        finally:
            self._learning_rates.clear()

    # Checkpoints (tf.train.Checkpoint, the TF bridge's, migrate/) -------------------------------------

    def replica_rows(self, table: str) -> slice | None:
        """The run of ids of `table` this replica holds when replicated (`div`: one range per replica), else
        None (one process holds every row). Known without building the engine."""
        if self._replicas == 1:
            return None
        spec = self._engine_spec
        sizes = shard_sizes(spec.table(table).vocabulary_size, spec.num_shards, "div")
        per = spec.num_shards // self._replicas
        rank = replicas.world().rank
        start = sum(sizes[: rank * per])
        return slice(start, start + sum(sizes[rank * per : (rank + 1) * per]))

    def restore_state(self, state: Mapping[str, Mapping[str, np.ndarray]], step: int, *, local: bool = False) -> None:
        """Loads `{table name: {'embedding' | slot: array}}` and the engine's step, as a restore does.

        Every table needs its embedding and the slots this object's
        optimizer has (`CheckpointError` otherwise); extra slots are ignored.
        `state` holds full arrays; replicated, every replica passes them and
        keeps its rows (collective). `local`: replicated, `state` holds only
        this replica's rows (`replica_rows`): no replica reads a whole table."""
        engine = self._build_engine()
        wanted = {}
        for name, info in engine.spec.structure().items():
            if name not in state:
                raise CheckpointError(f"The checkpoint has no table {name!r} (it holds {sorted(state)}).")
            keys = ["embedding"] + list(info["slots"])
            missing = [k for k in keys if k not in state[name]]
            if missing:
                raise CheckpointError(
                    f"Table {name!r}: the checkpoint lacks {missing} (it holds "
                    f"{sorted(state[name])}). Was it saved with another optimizer?"
                )
            wanted[name] = {k: state[name][k] for k in keys}
        if local and isinstance(engine, DistributedEngine):
            engine.load_rows(wanted, step=step)
        else:
            engine.load_state(wanted, step=step)
        self._built = True
        self._forget_lookup()

    def _forget_lookup(self) -> None:
        """Drops what a subclass keeps of a lookup made before a restore (it can't be trained on after it)."""

    def __repr__(self) -> str:
        where = "under an emulated TPUStrategy" if self._using_tpu else "outside a TPUStrategy"
        if self._replicas > 1:
            where += f", replicated over {self._replicas} processes"
        return (
            f"<{self.tensorflow_class_name} on the CPU engine ({where}): {len(self._table_config)} table(s) "
            f"{[t.name for t in self._table_config]}, {len(self._features)} feature(s), pipelining "
            f"{'on' if self._pipeline_execution_with_tensor_core else 'off'}>"
        )
