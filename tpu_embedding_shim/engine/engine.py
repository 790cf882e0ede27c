"""The CPU embedding engine: tables, lookups and training steps for one `EmbeddingSpec`.

A step is `forward` (ids -> activations) then `apply_gradients`
(d loss / d activations -> one optimizer update per touched row):

    engine = Engine(spec, seed=0)
    result = engine.forward(features)  # {feature: [B, D] or [B, L, D]}
    grads = {f: d_loss_d_activation[f] for f in result.activations}
    engine.apply_gradients(result, grads)

What it emulates of a TPU, and says so in `describe()` and the log:

- tables split into `num_shards` shards by `div` or `mod`; numbers never
  depend on either;
- `pipeline_execution_with_tensor_core`: the update of step N is applied
  after the lookup of step N+1, so that lookup is one step stale;
- the gradient multiplier function of the global step, per-table learning
  rates, gradient and weight clipping, weight decay (see `optimizers/`);
- `clipping_limit` has no effect (as in TensorFlow): one warning.

A call that raises leaves every table, slot and the global step as they were.

>>> from tpu_embedding_shim.spec import *
>>> spec = EmbeddingSpec(
...     tables=(TableSpec(name="t", vocabulary_size=4, dim=2, initializer=RowIdInitializer(), combiner="sum"),),
...     features=(FeatureSpec(name="f", table="t", num_buckets=4),),
...     optimizer=SGDSpec(learning_rate=1.0))
>>> engine = Engine(spec)
>>> result = engine.forward({"f": [[1, 2], [3, -1]]})
>>> result.activations["f"].tolist()
[[3.0, 3.0], [3.0, 3.0]]
>>> engine.apply_gradients(result, {"f": [[1.0, 0.0], [0.0, 1.0]]})
>>> engine.table("t").tolist()  # rows 1, 2 moved by -[1, 0]; row 3 by -[0, 1]
[[0.0, 0.0], [0.0, 1.0], [1.0, 2.0], [3.0, 2.0]]
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..spec import EmbeddingSpec, TableSpec
from . import fast
from .checkpoint import load_checkpoint, resolve_checkpoint, save_checkpoint
from .initialization import initial_rows, seeded_initializers
from .interface import describe_spec, warn_clipping_limit
from .kernels import Kernels, Lookup, NumpyKernels, Update
from .lookup import quantization_parameters
from .memmap import check_table_files, open_table
from .optimizers import apply_update, initial_slots, touches_all_rows
from .ragged import Ragged
from .sharding import ShardedTable
from .statistics import LookupStatistics
from .step_checks import (
    check_state,
    check_trainable,
    checked_gradients,
    feature_batch,
    gradient_multiplier,
    not_finite,
)

log = logging.getLogger("tpu_embedding_shim")


@dataclasses.dataclass(frozen=True)
class LookupResult:
    """What `forward` returns: activations, and what `apply_gradients` needs to route gradients.

    Attributes:
      activations: feature -> [B, D] (pooled) or [B, L, D] (sequence).
      sequence_lengths: sequence feature -> [B] lengths, capped at L.
      batches: feature -> the ids in the engine's ragged form.
      training: False for an inference lookup (it can't be trained on).
      step: the global step the lookup was made at.
      storage_batches: feature -> its ids as rows of the table's storage
        array (the fast kernels' form; see `sharding.py`), when they differ
        from `batches`. Internal: kept so the backward maps ids only once.
      packed: a small step's features as the table-batched kernels took
        them (`FastKernels.pack`), or None. Internal: the backward reads them.
    """

    activations: dict[str, np.ndarray]
    sequence_lengths: dict[str, np.ndarray]
    batches: dict[str, Ragged]
    training: bool
    step: int
    storage_batches: dict[str, Ragged] = dataclasses.field(default_factory=dict, repr=False)
    packed: Any = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass
class _PendingUpdate:
    """New rows and slot rows for each table, written at once (pipelining defers the write)."""

    rows: dict[str, tuple[np.ndarray, np.ndarray]]  # table -> (ids, new rows)
    slots: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]  # table -> slot -> (ids, new rows)


class Engine:
    """Owns the tables and slots of an `EmbeddingSpec` and runs its steps on a CPU.

    Args:
      spec: what to build.
      seed: seeds initializers that have no seed of their own (None: fresh
        randomness, as TensorFlow).
      check_numerics: refuse NaN or infinite gradients (before any change).
      kernels: 'auto' (the fast numba kernels of `engine/fast/` when numba
        imports, else numpy), 'numpy' (the reference kernels only) or 'fast'
        (an error if numba is missing). The environment variable
        TPU_EMBEDDING_SHIM_KERNELS=numpy turns 'auto' into 'numpy'. See
        docs/engine.md.
      table_files: table name -> path of a `.npy` file that holds the table
        as a memory-mapped array (for tables larger than RAM); its slots go
        beside it (`<path>.<slot>.npy`). See `memmap.py`.
    """

    def __init__(
        self,
        spec: EmbeddingSpec,
        *,
        seed: int | None = None,
        check_numerics: bool = True,
        kernels: str = "auto",
        table_files: Mapping[str, str] | None = None,
    ):
        if not isinstance(spec, EmbeddingSpec):
            raise TypeError(f"Engine needs an EmbeddingSpec. Received: {spec!r}.")
        self.spec = spec
        self._chosen_kernels = choose_kernels(kernels)
        self._warned_fork = False
        table_files = _check_table_files(spec, table_files)
        self.check_numerics = check_numerics
        self.global_step = 0
        self._pending: _PendingUpdate | None = None
        self._tables: dict[str, ShardedTable] = {}
        self._slots: dict[str, dict[str, ShardedTable]] = {}
        initializers = seeded_initializers(spec, seed)
        self._table_files = table_files
        for table in spec.tables:
            optimizer = spec.optimizer_for(table.name)
            if table.name in table_files:
                full, slots = open_table(table_files[table.name], table, optimizer, initializers[table.name])
            else:
                full = initial_rows(table, initializers[table.name])
                slots = initial_slots(optimizer, full.shape)
            self._tables[table.name] = ShardedTable(full, spec.num_shards, spec.partition_strategy, copy=False)
            self._slots[table.name] = {
                name: ShardedTable(values, spec.num_shards, spec.partition_strategy, copy=False)
                for name, values in slots.items()
            }
        # What every step reads of the (frozen) spec, worked out once: per feature (name, table, combiner,
        # safe, sequence length or None, its table's quantization parameters or None); the tables with an
        # optimizer; the features of each without one.
        quantizations = {t.name: quantization_parameters(t.quantization) for t in spec.tables}
        self._lookups = [
            (
                f.name,
                f.table,
                spec.table(f.table).combiner,
                f.safe_lookup,
                f.max_sequence_length or None,
                quantizations[f.table],
            )
            for f in spec.features
        ]
        self._trained = [(t, o) for t in spec.tables if (o := spec.optimizer_for(t.name)) is not None]
        self._untrained = [
            (t.name, [k for k, f in enumerate(spec.features) if f.table == t.name])
            for t in spec.tables
            if spec.optimizer_for(t.name) is None
        ]
        self.statistics = None
        if spec.profile_data_directory:
            self.statistics = LookupStatistics(spec.profile_data_directory, spec)
        warn_clipping_limit(spec)
        for line in self.describe():
            log.info(line)

    @property
    def kernels(self) -> Kernels:
        """The kernels the next step runs: the chosen ones, or numpy's in a child forked after numba's
        parallel kernels ran (see `fast.forked_after_parallel_use`; the numbers are the same)."""
        if isinstance(self._chosen_kernels, NumpyKernels) or not fast.forked_after_parallel_use():
            return self._chosen_kernels
        if not self._warned_fork:
            self._warned_fork = True
            warnings.warn(
                "This process was forked after numba's parallel kernels ran in its parent; they cannot run in a "
                "forked child (numba's OpenMP layer is not fork-safe), so this engine runs the numpy kernels here: "
                "the same numbers, slower. To keep the fast kernels, start workers with "
                "multiprocessing.get_context('spawn') or 'forkserver'.",
                RuntimeWarning,
                stacklevel=3,
            )
        return _NUMPY_KERNELS

    # Introspection ------------------------------------------------------------------

    def describe(self) -> list[str]:
        """What the engine holds and which TPU behaviours it emulates, one line each."""
        spec = self.spec
        sizes = {name: f"shard sizes {[s.shape[0] for s in table.shards]}" for name, table in self._tables.items()}
        lines = describe_spec(spec, "CPU embedding engine", sizes)
        lines.append(self.kernels.describe(spec))
        for name, path in self._table_files.items():
            lines.append(f"  table {name}: memory-mapped from {path}.")
        return lines

    def table(self, name: str) -> np.ndarray:
        """The full table `name` in id order (a copy), pending updates applied."""
        self.flush()
        return self._table(name).to_full()

    def slots(self, name: str) -> dict[str, np.ndarray]:
        """Slot name -> full slot array of table `name` (copies)."""
        self.flush()
        self._table(name)
        return {slot: values.to_full() for slot, values in self._slots[name].items()}

    def shards(self, name: str) -> list[np.ndarray]:
        """The shards of table `name` as stored (copies), pending updates applied."""
        self.flush()
        return [s.copy() for s in self._table(name).shards]

    def stored(self, name: str) -> tuple[ShardedTable, dict[str, ShardedTable]]:
        """Table `name` and its slots as the engine holds them, not copies (pending updates applied):
        for inspecting memory layout and sharing. Writing into them bypasses every check."""
        self.flush()
        return self._table(name), dict(self._slots[name])

    def _table(self, name: str) -> ShardedTable:
        if name not in self._tables:
            raise KeyError(f"No table named {name!r}; tables are {list(self._tables)}.")
        return self._tables[name]

    # Forward ----------------------------------------------------------------------

    def forward(
        self, features: Mapping[str, Any], weights: Mapping | None = None, *, training=True, same_batch_size=True
    ) -> LookupResult:
        """Looks up every feature of the spec in `features` (other keys are ignored).

        A feature's weights come from `weights[name]`, else from
        `features[feature.weight_key]`. With pipelining, a training lookup
        sees the tables before the pending update, which is applied right
        after it; an inference lookup applies it first. `same_batch_size`
        (the estimator's rule) requires every feature to have the same number
        of examples; the mid-level API lets each feature have its own.
        """
        if not isinstance(features, Mapping):
            raise TypeError(
                f"Argument `features` must be a dict of feature name -> ids. Received: {type(features).__name__}."
            )
        kernels = self.kernels
        batches = self._dense_batches(kernels, features, weights)
        for f in self.spec.features:
            if f.name not in batches:
                batches[f.name] = feature_batch(self.spec, kernels, f, features, weights, copy=training)
        if len(batches) > 1:  # in the spec's order
            batches = {f.name: batches[f.name] for f in self.spec.features}
        sizes = {name: batch.batch_size for name, batch in batches.items()}
        if same_batch_size and len(set(sizes.values())) > 1:
            raise ValueError(f"All features of one step must have the same batch size. Received: {sizes}.")
        if not (training and self.spec.pipeline_execution_with_tensor_core):
            self.flush()
        activations: dict[str, np.ndarray] = {}
        lengths: dict[str, np.ndarray] = {}
        storage_batches: dict[str, Ragged] = {}
        requests = []
        for name, table_name, combiner, safe, length, quantization in self._lookups:  # rows of each `storage`
            table = self._tables[table_name]
            batch = batches[name]
            if not table.in_id_order:
                batch = storage_batches[name] = _on_storage(batch, table)
            requests.append(Lookup(table.storage, batch, combiner, safe, length, quantization))
        pack = getattr(kernels, "pack", None)  # the table-batched kernels (FastKernels), for small steps
        packed = pack(requests, [lookup[1] for lookup in self._lookups]) if pack is not None else None
        values = kernels.lookups(requests) if packed is None else kernels.lookup_packed(packed)  # type: ignore[attr-defined]
        for (name, _, _, _, length, _), value in zip(self._lookups, values):
            if length:
                activations[name], lengths[name] = value
            else:
                activations[name] = value
        if training:
            self._record_statistics(batches)
            self.flush()
        return LookupResult(activations, lengths, batches, training, self.global_step, storage_batches, packed)

    def _dense_batches(self, kernels: Kernels, features: Mapping[str, Any], weights: Mapping | None) -> dict:
        """Feature -> its batch, for the features whose ids are dense int64 arrays without weights, checked
        in one compiled pass (`FastKernels.dense_batches`, small steps); {} when none or the pass declines
        (each then goes through `feature_batch`, with its own result or error)."""
        dense_batches = getattr(kernels, "dense_batches", None)
        if dense_batches is None:
            return {}
        chosen, arrays = [], []
        for f in self.spec.features:
            ids = features.get(f.name)
            if (
                type(ids) is np.ndarray
                and ids.dtype == np.int64
                and ids.ndim in (1, 2)
                and ids.size
                and f.id_source == "identity"
                and f.weight_key is None
                and not (weights is not None and f.name in weights)
            ):
                chosen.append(f)
                arrays.append(ids)
        found = dense_batches(arrays, chosen) if chosen else None
        return {} if found is None else {f.name: batch for f, batch in zip(chosen, found)}

    def _record_statistics(self, batches: dict[str, Ragged]) -> None:
        if self.statistics is None:
            return
        for table in self.spec.tables:
            users = self.spec.features_of(table.name)
            lengths = [batches[f.name].row_lengths() for f in users]
            if len({len(x) for x in lengths}) == 1:  # one batch: ids per example summed over the features
                ids_per_example = np.sum(lengths, axis=0)
            else:  # features with their own example counts: each example counts on its own
                ids_per_example = np.concatenate(lengths)
            ids = np.concatenate([batches[f.name].values for f in users])
            unique = np.unique(ids)
            self.statistics.record(
                table.name,
                ids_per_example=ids_per_example,
                unique_ids=unique,
                shard_load=self._tables[table.name].load_per_shard(ids),
            )

    # Backward ---------------------------------------------------------------------

    def apply_gradients(self, result: LookupResult, gradients: Mapping[str, Any]) -> None:
        """One optimizer update per touched row, from d loss / d activations.

        `gradients` maps each feature of `result` to an array shaped like its
        activation; a missing feature or None means a zero gradient (which
        still decays non-lazy Adam's moments). Duplicate ids, within a
        feature or across features sharing a table, are summed first.
        """
        if not isinstance(result, LookupResult):
            raise TypeError("Argument `result` must be the LookupResult returned by forward().")
        step = self.global_step
        check_trainable(result, step, gradients)
        multiplier = gradient_multiplier(self.spec, step)
        kernels = self.kernels
        features = self.spec.features
        sum_packed = getattr(kernels, "sum_packed", None)  # the table-batched sums (FastKernels)
        packed = result.packed if sum_packed is not None else None
        grads = checked_gradients(
            features,
            [result.activations[f.name].shape for f in features],
            gradients,
            kernels=kernels,
            check_numerics=self.check_numerics,
            finite_checked_later=packed is not None,  # by `sum_packed`, in the same call as the sums
        )
        if multiplier != 1:
            grads = [None if grad is None else grad * multiplier for grad in grads]
        trained, untrained = self._trained, None
        for name, readers in self._untrained:  # checked for every table before anything is computed
            if any(grads[k] is not None for k in readers):
                untrained = RuntimeError(
                    f"Table {name!r} has no optimizer (an inference-only spec); it can't be trained."
                )
                break
        if packed is not None:
            all_summed = sum_packed(  # type: ignore[misc]
                packed, grads, [(table.name, table.dim) for table, _ in trained], check_numerics=self.check_numerics
            )
            if isinstance(all_summed, int):  # the finite check, before the table check as in a loop of them
                raise not_finite(features[all_summed])
            if untrained is not None:
                raise untrained
        else:
            if untrained is not None:
                raise untrained
            entries: dict[str, list[Any]] = {t.name: [] for t in self.spec.tables}
            for feature, grad in zip(features, grads):
                if grad is None:
                    continue
                # the kernels address rows of `storage`
                batch = result.storage_batches.get(feature.name) or _on_storage(
                    result.batches[feature.name], self._tables[feature.table]
                )
                if feature.is_sequence:
                    entries[feature.table].append(kernels.sequence_entries(batch, feature.max_sequence_length, grad))
                else:
                    combiner = self.spec.table(feature.table).combiner
                    entries[feature.table].append(
                        kernels.pooled_entries(batch, combiner, grad, safe=feature.safe_lookup)
                    )
            all_summed = kernels.sum_tables(
                [(table.name, table.vocabulary_size, table.dim, entries[table.name]) for table, _ in trained]
            )
        pending = _PendingUpdate({}, {})
        in_place = []  # fused updates, written after every check
        for (table, optimizer), summed in zip(trained, all_summed):
            storage = self._tables[table.name]
            if kernels.fuses(optimizer) and not self.spec.pipeline_execution_with_tensor_core:
                slots = {slot: values.storage for slot, values in self._slots[table.name].items()}
                in_place.append(Update(optimizer, optimizer.learning_rate_at(step), storage.storage, slots, summed))
            else:
                rows, grads = summed.compact()
                self._plan_update(table, optimizer, step, storage.logical(rows), grads, pending)
        # Every check has passed and every new value is computed: from here on, nothing fails.
        self.flush()  # the previous step's update, if pipelining deferred it
        if in_place:
            kernels.apply_all(in_place)
        self._pending = pending
        self.global_step += 1
        if not self.spec.pipeline_execution_with_tensor_core:
            self.flush()

    def _plan_update(
        self,
        table: TableSpec,
        optimizer: Any,
        step: int,
        unique: np.ndarray,
        row_grads: np.ndarray,
        pending: _PendingUpdate,
    ) -> None:
        """Computes the new rows of `table` into `pending` without writing them.

        `unique` / `row_grads`: the touched ids (no repeats, any order) and
        their summed gradients; an optimizer that touches every row (non-lazy
        Adam) updates the others with a zero gradient.
        """
        if touches_all_rows(optimizer):
            every_row = np.zeros((table.vocabulary_size, table.dim), np.float32)
            every_row[unique] = row_grads
            unique, row_grads = np.arange(table.vocabulary_size), every_row
        if unique.size == 0:
            return
        sharded = self._tables[table.name]
        slots = {name: values.gather(unique) for name, values in self._slots[table.name].items()}
        new_rows, new_slots = apply_update(optimizer, sharded.gather(unique), slots, row_grads, step)
        pending.rows[table.name] = (unique, new_rows)
        pending.slots[table.name] = {name: (unique, values) for name, values in new_slots.items()}

    def flush(self) -> None:
        """Writes the pending update, if pipelining deferred one."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        for name, (ids, rows) in pending.rows.items():
            self._tables[name].scatter(ids, rows)
        for name, slots in pending.slots.items():
            for slot, (ids, rows) in slots.items():
                self._slots[name][slot].scatter(ids, rows)

    # State ------------------------------------------------------------------------

    def state(self) -> dict[str, dict[str, np.ndarray]]:
        """Table -> {'embedding': full table, slot: full slot}, in id order (copies)."""
        self.flush()
        return {
            name: {"embedding": sharded.to_full(), **{s: v.to_full() for s, v in self._slots[name].items()}}
            for name, sharded in self._tables.items()
        }

    def load_state(self, state: Mapping[str, Mapping[str, np.ndarray]], *, step: int | None = None) -> None:
        """Replaces every table and slot (checked whole before anything changes), re-sharding as this spec says."""
        slot_names = check_state(self.spec, state)
        new_tables, new_slots = {}, {}
        for name, names in slot_names.items():
            arrays = state[name]

            def make(a):  # an aligned copy
                return ShardedTable(np.asarray(a, np.float32), self.spec.num_shards, self.spec.partition_strategy)

            new_tables[name] = make(arrays["embedding"])
            new_slots[name] = {slot: make(arrays[slot]) for slot in names}
        if step is not None and (not isinstance(step, (int, np.integer)) or step < 0):
            raise ValueError(f"Argument `step` must be an int >= 0. Received: {step!r}.")
        self._pending = None
        for name in self._table_files:  # a memory-mapped table keeps its files: write into them
            self._tables[name].storage[...] = new_tables[name].storage  # same spec: same layout
            for slot, values in new_slots[name].items():
                self._slots[name][slot].storage[...] = values.storage
            new_tables[name], new_slots[name] = self._tables[name], self._slots[name]
        self._tables, self._slots = new_tables, new_slots
        if step is not None:
            self.global_step = int(step)

    def save(self, directory: str, *, keep: int = 5, extra: dict | None = None) -> str:
        """Writes a checkpoint of every table, slot and the global step; returns its path."""
        path = save_checkpoint(
            directory,
            self.state(),
            step=self.global_step,
            spec_structure=self.spec.structure(),
            fingerprint=self.spec.fingerprint(),
            extra=extra,
            keep=keep,
        )
        if self.statistics is not None:
            self.statistics.flush()
        return path

    def restore(self, path: str) -> dict:
        """Loads a checkpoint (a directory of checkpoints: its latest); returns its manifest."""
        state, step, manifest = load_checkpoint(resolve_checkpoint(path), spec_structure=self.spec.structure())
        self.load_state(state, step=step)
        return manifest


def _on_storage(batch: Ragged, table: ShardedTable) -> Ragged:
    """`batch` with its ids as rows of `table.storage` (itself when the storage is in id order)."""
    if table.in_id_order:
        return batch
    return dataclasses.replace(batch, values=table.physical(batch.values))


def choose_kernels(kernels: str) -> Kernels:
    """The kernels `Engine(kernels=...)` asks for: numba's `FastKernels` where they can run, else numpy's."""
    if kernels not in ("auto", "numpy", "fast"):
        raise ValueError(f"Argument `kernels` must be one of 'auto', 'numpy', 'fast'. Received: {kernels!r}.")
    if kernels == "numpy":
        return _NUMPY_KERNELS
    if not fast.available():
        if kernels == "fast":
            raise ImportError(
                f"kernels='fast' needs numba: {fast.unavailable_reason()}. Install it with "
                "`pip install numba` (the `fast` extra), or pass kernels='auto'."
            )
        return _NUMPY_KERNELS
    from .fast.kernels import FastKernels  # imports numba: only once numba is known to be there

    return FastKernels()


_NUMPY_KERNELS = NumpyKernels()


def _check_table_files(spec: EmbeddingSpec, table_files: Mapping[str, str] | None) -> dict[str, str]:
    table_files = check_table_files(spec, table_files)
    if table_files and spec.num_shards != 1 and spec.partition_strategy != "div":
        raise ValueError(
            f"Argument `table_files` needs the table stored in id order (num_shards == 1, or "
            f"partition_strategy 'div'): one file per table. Received: num_shards="
            f"{spec.num_shards} with partition_strategy {spec.partition_strategy!r}."
        )
    return table_files


def initial_table(table: TableSpec, rng: np.random.Generator) -> np.ndarray:
    """The table's initial values, checked: [V, D], finite, float32 (a seedless random initializer
    seeded from `rng`, as `Engine` seeds it; `initialization.py` draws it)."""
    return initial_rows(table, table.seeded_initializer(rng))
