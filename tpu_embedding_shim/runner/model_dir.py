"""The runner's model state and its model_dir: build it, restore it, warm-start it, save it.

A TPUEstimator program's state is the embedding engine (its tables, slots
and global step; None when no table is trained by the engine), the dense
model's `DenseState` (with the tensor-core tables) and the TensorFlow
names of the tables (`ProgramNames`). `ModelState` owns all of it and its
checkpoints in model_dir (checkpoints/program_checkpoint.py writes and finds the files,
restore.py plans what a checkpoint gives to whom):

    ensure(mode)   the state of the latest checkpoint, or a fresh (warm-started) one for training
    save()         model.ckpt-<step> in TensorFlow's format, under TensorFlow's names
    restore(path)  any checkpoint the runner reads: its own or TensorFlow's

A model without engine tables keeps its global step here (`step`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..api import replicas
from ..api.embedding_config_spec import EmbeddingConfigSpec
from ..api.warm_start import WarmStartSettings
from ..checkpoints import program_checkpoint
from ..checkpoints.restore import Program, resume_plan, warm_start_plan
from ..checkpoints.state import DenseState
from ..checkpoints.tf_names import DEFAULT, ProgramNames, slot_suffixes
from ..engine import DistributedEngine, EmbeddingEngine, agree, write_collectively
from ..engine.tf_bundle import SlicedTensor
from . import replicated
from .context import TensorCoreColumns
from .model_fn import ModeKeys

log = logging.getLogger("tpu_embedding_shim")

__all__ = ["ModelState"]


class ModelState:
    """The engine, the dense state and the table names of one TPUEstimator, and its checkpoints in `model_dir`.

    Args:
      model_dir: the directory of the checkpoints.
      embedding_config_spec: the program's `EmbeddingConfigSpec`, or None.
      tensor_core: its tensor-core columns (tables in the dense state), or None.
      num_shards: the engine's shard count.
      seed: `RunConfig.tf_random_seed` (None: a random start).
      warm_start_settings: what a fresh model_dir takes from another run, or None.
    """

    def __init__(
        self,
        model_dir: str,
        *,
        embedding_config_spec: EmbeddingConfigSpec | None,
        tensor_core: TensorCoreColumns | None,
        num_shards: int,
        seed: int | None,
        warm_start_settings: WarmStartSettings | None,
    ):
        self.model_dir = model_dir
        self._embedding_config_spec = embedding_config_spec
        self._tensor_core = tensor_core
        self._num_shards = num_shards
        self._seed = seed
        self._warm_start_settings = warm_start_settings
        # An engine only for engine tables: a spec whose columns are all tensor-core (or numeric) leaves it
        # nothing to own, and such a model checkpoints its dense state alone, like one without a spec.
        self.uses_engine = embedding_config_spec is not None and bool(embedding_config_spec.to_spec().tables)
        self.names = ProgramNames()
        if embedding_config_spec is not None:
            self.names = ProgramNames(
                embedding_config_spec.feature_columns or (),
                embedding_config_spec.tensor_core_feature_columns or (),
                tables=[t.name for t in embedding_config_spec.to_spec().tables],
            )
        self.engine: EmbeddingEngine | None = None
        self.step = 0  # the global step when there is no engine
        self.dense_state = DenseState()
        self.loaded_step: int | None = None  # the step of the checkpoint the state was restored from or saved as
        self._initialized = False
        self._noted_defaults: set = set()

    @property
    def global_step(self) -> int:
        """The step the next training step will compute (the engine's)."""
        return self.engine.global_step if self.engine is not None else self.step

    # Build, restore, warm-start --------------------------------------------------------------

    def build(self, *, restoring: bool = False) -> None:
        """A fresh state: new tables from the seed, step 0, an empty dense state (and the tensor-core tables).

        `restoring`: a checkpoint replaces the tables next, so a replicated engine's rows are not drawn (a
        restore then holds one copy of them); `ensure` builds again if that restore fails."""
        self._seed = replicated.common_seed(self._seed)  # under mpiexec: one seed for every replica
        if self.uses_engine:
            spec = self._embedding_config_spec.to_spec(num_shards=self._num_shards)
            self.engine = replicated.new_engine(spec, self._seed, initialize=not restoring)
        self.step = 0
        self.dense_state = DenseState()
        if self._tensor_core is not None:
            rng = np.random.default_rng(None if self._seed is None else [int(self._seed), 1])
            self._tensor_core.initialize(self.dense_state, rng)
        self._initialized = True
        self.loaded_step = None

    def ensure(self, mode: str, checkpoint_path: str | None = None) -> None:
        """Makes the in-memory state the latest checkpoint's (or `checkpoint_path`'s), or a fresh one."""
        if checkpoint_path is not None:
            self._build_and_restore(checkpoint_path)
            return
        latest = self.latest_checkpoint()
        if latest is None:
            if not self._initialized:
                if mode != ModeKeys.TRAIN:
                    raise ValueError(f"Could not find trained model in model_dir: {self.model_dir}.")
                self.build()
                if self._warm_start_settings is not None:
                    try:
                        self.warm_start(self._warm_start_settings)
                    except BaseException:
                        self._initialized = False  # the next call tries again, never trains unwarmed
                        raise
            return
        step = program_checkpoint.step_of(latest)
        if not self._initialized or step != self.loaded_step or step != self.global_step:
            self._build_and_restore(latest)

    def _build_and_restore(self, path: str) -> None:
        """The checkpoint `path`'s state, on the state there is or on a new one built for it (whose tables
        are not drawn; a failed restore leaves the fresh state a plain build makes)."""
        if self._initialized:
            self.restore(path)
            return
        self.build(restoring=True)
        try:
            self.restore(path)
        except BaseException:
            self.build()
            raise

    def _program(self) -> Program:
        """The program as a restore sees it (with a copy of the table names: a failed restore changes none)."""
        tables, optimizers, tensor_core = {}, {}, {}
        if self.engine is not None:
            for table in self.engine.spec.tables:
                tables[table.name] = (table.vocabulary_size, table.dim)
                optimizers[table.name] = self.engine.spec.optimizer_for(table.name)
        if self._tensor_core is not None:
            tensor_core = {name: (t.vocabulary_size, t.dim) for name, t in self._tensor_core.tables.items()}
        row_ids = None
        if isinstance(self.engine, DistributedEngine):  # each replica reads its own rows of the tables
            row_ids = {name: self.engine.row_ids(name) for name in tables}
        return Program(copy.deepcopy(self.names), tables, optimizers, tensor_core, self._partition_strategy(), row_ids)

    def _planned(self, plan_of: Any) -> Any:
        """`plan_of()`, agreed on by every replica when each reads only its rows (a corrupt slice fails only
        on the replicas that read it): a failure anywhere raises everywhere, before anything changes."""
        if not isinstance(self.engine, DistributedEngine):
            return plan_of()
        plan, error = None, None
        try:
            plan = plan_of()
        except Exception as caught:
            error = caught
        agree(self.engine.comm, error, "TPUEstimator: read a checkpoint")
        return plan

    def restore(self, path: str) -> None:
        """Resumes from the checkpoint `path` (a prefix or directory; the runner's or TensorFlow's)."""
        source = program_checkpoint.open_program_checkpoint(path)
        plan = self._planned(lambda: resume_plan(source, self._program()))
        self._apply(plan, resume=True)
        self.loaded_step = plan.step
        log.info("Restored the model from %s (global step %d).", source.path, plan.step)

    def warm_start(self, settings: WarmStartSettings) -> None:
        """Takes what `settings` asks for from another run's checkpoint into this fresh state."""
        source = program_checkpoint.open_program_checkpoint(settings.ckpt_to_initialize_from)
        fresh: Mapping[str, Mapping[str, np.ndarray]] = {}
        if isinstance(self.engine, DistributedEngine):  # this replica's rows: no table is gathered
            fresh = self.engine.local_state()
        elif self.engine is not None:
            fresh = self.engine.state()
        program = self._program()
        fresh_tensor_core = {name: self.dense_state[name] for name in program.tensor_core}
        plan = self._planned(lambda: warm_start_plan(source, program, settings, fresh, fresh_tensor_core))
        self._apply(plan, resume=False)

    def _apply(self, plan, *, resume: bool) -> None:
        """Assigns a checked plan: engine tables and step, tensor-core tables, dense state, table names."""
        if plan.local:
            assert isinstance(self.engine, DistributedEngine)  # only a replica's program asks for its rows
            self.engine.load_rows(plan.tables, step=plan.step)
        elif self.engine is not None:
            self.engine.load_state(plan.tables, step=plan.step)
        else:
            self.step = plan.step
        kind, value = plan.dense
        if kind == "replace":
            self.dense_state.replace(value)
        elif resume:  # a TensorFlow-written checkpoint: its tensors wait for the dense_state keys of their names
            self.dense_state.replace({})
        if kind == "update":
            self.dense_state.load_entries(value)
        elif kind == "pending":
            self.dense_state.add_pending(value)
        for name, table in plan.tensor_core.items():
            self.dense_state[name] = np.array(table, dtype=np.float32)
        for table, (name, certainty) in plan.names.items():
            self.names.set(table, name, certainty)
        for note in plan.notes:
            log.info("%s", note)

    # Save ------------------------------------------------------------------------------------

    def checkpoint_tensors(self, *, values: bool = True, local: bool = False) -> dict[str, Any]:
        """name -> array of everything a checkpoint holds, under TensorFlow's names (see tf_names.py).

        `local` (a `DistributedEngine`): this replica's part of a checkpoint
        every replica writes: its rows of each table and slot, as the one row
        slice a TPU host saves (`mod`: ids r, r + N, ..., the layout of N
        hosts), and on replica 0 everything else.
        """
        step = self.global_step
        tensors: dict[str, Any] = {"global_step": np.int64(step)}
        recorded = {}
        if self.engine is not None:
            structure = self.engine.spec.structure()
            state: Mapping[str, Mapping[str, Any]]
            if local:  # this replica's rows, one row slice of each stored tensor (mod: the hosts' order)
                assert isinstance(self.engine, DistributedEngine)  # only replicated states save collectively
                state = self.engine.row_slices()
            elif values:
                state = self.engine.state()
            else:
                state = {table: dict.fromkeys(["embedding", *info["slots"]]) for table, info in structure.items()}
            for table, arrays in state.items():
                name = self.names.variable(table)
                self._note_default(table)
                recorded[table] = {"name": name, "certainty": self.names.certainty(table)}
                tensors[name] = arrays["embedding"]
                optimizer = self.engine.spec.optimizer_for(table)
                slots = [slot for slot in arrays if slot != "embedding"]
                for slot, suffix in slot_suffixes(optimizer.kind if optimizer else None, slots).items():
                    tensors[f"{name}/{suffix}"] = arrays[slot]
        # no rows of a table here: nothing of it to write
        tensors = {name: v for name, v in tensors.items() if not (isinstance(v, SlicedTensor) and not v.parts)}
        rename = {}
        if self._tensor_core is not None:
            for table in self._tensor_core.tables:
                rename[table] = self.names.variable(table)
                self._note_default(table)
                recorded[table] = {"name": rename[table], "certainty": self.names.certainty(table)}
        dense, structure = self.dense_state.to_tensors(rename)
        for name in dense:
            if name in tensors or name == program_checkpoint.METADATA:
                what = "the global step" if name == "global_step" else "an embedding table or slot"
                raise ValueError(
                    f"dense_state would be saved as the tensor {name!r}, which is already {what} of "
                    "the checkpoint; rename the dense_state key."
                )
        tensors.update(dense)
        meta = {
            "format": program_checkpoint.FORMAT,
            "version": program_checkpoint.FORMAT_VERSION,
            "global_step": step,
            "tables": recorded,
            "dense_state": structure,
        }
        if local and self._partition_strategy() == "mod":
            meta["mod_hosts"] = replicas.num_replicas()
        tensors[program_checkpoint.METADATA] = np.array(json.dumps(meta).encode("utf-8"), dtype=object)
        if local and not replicas.is_chief():  # the others write their table slices only
            tensors = {name: value for name, value in tensors.items() if isinstance(value, SlicedTensor)}
        return tensors

    def _partition_strategy(self) -> str:
        return getattr(self._embedding_config_spec, "partition_strategy", None) or "div"

    def _note_default(self, table: str) -> None:
        if self.names.certainty(table) == DEFAULT and table not in self._noted_defaults:
            self._noted_defaults.add(table)
            log.info(
                "Table %s: no feature layer has read its column yet; it is saved as %s (TensorFlow's name "
                "when DenseFeatures / SequenceFeatures read it).",
                table,
                self.names.variable(table),
            )

    def save(self, *, keep: int | None) -> str:
        """Writes `model.ckpt-<global step>`, keeping the `keep` newest (None: all); returns its prefix."""
        step = self.global_step
        if replicas.num_replicas() > 1:
            path = self._save_collectively(step, keep)
        else:
            path = program_checkpoint.save(self.model_dir, step, self.checkpoint_tensors(), keep=keep)
        if self.engine is not None and self.engine.statistics is not None:
            self.engine.statistics.flush()
        self.loaded_step = step
        log.info("Saving checkpoints for %d into %s.", step, path)
        return path

    def _save_collectively(self, step: int, keep: int | None) -> str:
        """Every replica writes its rows of each table into a data file of its own (TensorFlow's sharded
        save of a multi-host job); replica 0 the rest, the index and the state file."""
        tensors = self.checkpoint_tensors(local=True)
        comm = replicas.world()
        with contextlib.ExitStack() as stack:
            error = None
            if comm.rank == 0:
                try:
                    stack.enter_context(program_checkpoint.saving(self.model_dir))
                except Exception as caught:
                    error = caught
            agree(comm, error, "TPUEstimator: save a checkpoint")
            prefix = program_checkpoint.prefix_of(self.model_dir, step)
            write_collectively(comm, prefix, tensors)
            return replicas.on_chief(
                lambda: program_checkpoint.record(self.model_dir, prefix, keep), "TPUEstimator: record a checkpoint"
            )

    def latest_checkpoint(self) -> str | None:
        """The latest checkpoint of model_dir (`<model_dir>/model.ckpt-<step>`), or None."""
        return program_checkpoint.latest(self.model_dir)

    # Variables by name -------------------------------------------------------------------------

    def variable_names(self) -> list[str]:
        """The checkpoint's variable names, sorted: tables, slots, the dense state, 'global_step'."""
        return sorted(n for n in self.checkpoint_tensors(values=False) if n != program_checkpoint.METADATA)

    def variable_value(self, name: str) -> Any:
        """The value of the variable `name` (TensorFlow's name, or the engine's); KeyError if there is none."""
        if name == "global_step":
            return self.global_step
        if self.engine is not None:
            for table in self.engine.spec.structure():
                variable = self.names.variable(table)
                optimizer = self.engine.spec.optimizer_for(table)
                slots = sorted(optimizer.slot_initial_values()) if optimizer else []
                suffixes = slot_suffixes(optimizer.kind if optimizer else None, slots)
                if name in (variable, table):
                    return self.engine.table(table)
                for slot, suffix in suffixes.items():
                    if name in (f"{variable}/{suffix}", f"{table}/{slot}"):
                        return self.engine.slots(table)[slot]
        rename = {t: self.names.variable(t) for t in (self._tensor_core.tables if self._tensor_core else {})}
        dense, _ = self.dense_state.to_tensors(rename)
        if name in dense:
            return np.array(dense[name], copy=True)
        if name in self.dense_state and not hasattr(self.dense_state[name], "state_dict"):
            return np.array(self.dense_state[name], copy=True)
        raise KeyError(name)
