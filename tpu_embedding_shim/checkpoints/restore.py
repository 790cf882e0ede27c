"""From a checkpoint to the runner's state: what to restore (resume) or take (warm start), checked whole first.

`resume_plan` and `warm_start_plan` read and check everything they need
from a `ProgramCheckpoint` -- every table, slot, the step, the dense state
-- and return a `Plan`; only then does the runner assign it. A missing or
corrupt file, a missing tensor or a shape that does not fit raises an
error naming the checkpoint and the tensor, and nothing is restored.

Resuming (`model_dir`'s latest checkpoint, whoever wrote it) takes every
table and `global_step`; each table's slots under TensorFlow's TPU names,
or its CPU optimizer's names when that optimizer is the EmbeddingConfigSpec's
(a TPUEstimator(use_tpu=False) run trains the tables with the model's
optimizer), else they start from their initial values and the log says so.
The dense state is restored whole from this runner's checkpoints; a
TensorFlow-written one's other tensors wait for the model_fn to set the
dense_state keys of their names (`DenseState.add_pending`).

Warm-starting (`WarmStartSettings`, TensorFlow's rules) takes only the
variables `vars_to_warm_start` selects, by their names here, from the
names `var_name_to_prev_var_name` gives them there; a slot follows its
table's previous name unless it is named itself.

A table of a TPU job with `partition_strategy='mod'` and several hosts is
stored permuted (see `tf_names`); it is put back in id order, the host
count being its number of row slices (TPU saves keep one per host) or
`WarmStartSettings(num_hosts=...)`.

A replica under `mpiexec` (`Program.row_ids`: the ids it owns of each
engine table) reads only its rows: it computes where its ids are stored
(in id order, or in a `mod` job's hosts' order) and reads those rows of
each table and slot (`BundleReader.read_rows`), never a whole table; the
plan then holds its rows only (`Plan.local`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..api.warm_start import WarmStartSettings, selects
from ..engine import CheckpointError, initial_slots, shard_sizes
from .program_checkpoint import ProgramCheckpoint
from .state import decode_tensors
from .tf_names import CHECKPOINT, LAYER, SOURCE, ProgramNames, from_mod_layout, mod_layout_rows, slot_suffixes

__all__ = ["Program", "Plan", "resume_plan", "warm_start_plan"]


@dataclasses.dataclass
class Program:
    """What a restore needs to know of the running program."""

    names: ProgramNames
    tables: dict[str, tuple[int, int]]  # engine table -> (vocabulary_size, dim)
    optimizers: dict[str, Any]  # engine table -> its OptimizerSpec (or None)
    tensor_core: dict[str, tuple[int, int]]  # tensor-core table (a dense_state key) -> shape
    partition_strategy: str
    row_ids: dict[str, np.ndarray] | None = None  # engine table -> the ids this replica owns; None: every row

    def local_shape(self, table: str) -> tuple[int, int]:
        """The shape of the rows of `table` a plan holds: the whole table, or this replica's rows."""
        rows, dim = self.tables[table]
        return (rows if self.row_ids is None else len(self.row_ids[table]), dim)

    def slot_names(self, table: str) -> list[str]:
        return sorted(self.optimizers[table].slot_initial_values()) if self.optimizers[table] else []

    def kind(self, table: str) -> str | None:
        return self.optimizers[table].kind if self.optimizers[table] else None


@dataclasses.dataclass
class Plan:
    """What to assign: checked, complete, read into memory (or memory-mapped)."""

    tables: dict[str, dict[str, np.ndarray]]  # engine table -> {'embedding': ..., slot: ...}, every one
    step: int
    tensor_core: dict[str, np.ndarray]  # dense_state key -> table
    dense: tuple[str, Any]  # ('replace', entries) | ('update', entries) | ('pending', {key: (array, where)})
    names: dict[str, tuple[str, int]]  # table -> (checkpoint name, certainty) to adopt
    notes: list[str]
    local: bool = False  # tables hold this replica's rows only (Program.row_ids), for DistributedEngine.load_rows


class _Reading:
    """Reads tables and slots of one source, checked against the program, in id order."""

    def __init__(self, source: ProgramCheckpoint, program: Program, *, strategy: str, num_hosts: int | None = None):
        self.source = source
        self.program = program
        self.strategy = strategy
        self.num_hosts = num_hosts
        self.consumed: set[str] = set()
        self._stored_rows: dict[tuple[str, int], slice | np.ndarray] = {}

    def rows(self, name: str, shape: tuple[int, int], what: str, table: str | None = None) -> np.ndarray:
        """Tensor `name` of shape `shape` in id order: whole, or only the rows of `program.row_ids[table]`
        (an engine table's, on a replica that owns those ids)."""
        source = self.source
        if name not in source.names:
            raise CheckpointError(f"Checkpoint {source.path!r} holds no tensor {name!r} ({what}).")
        found = tuple(source.shape(name))
        if found != tuple(shape):
            raise CheckpointError(
                f"Checkpoint {source.path!r}: tensor {name!r} has shape {list(found)}, but {what} "
                f"is {list(shape)} in this program: was it written by another one?"
            )
        if not source.is_numeric(name):
            raise CheckpointError(f"Checkpoint {source.path!r}: tensor {name!r} ({what}) is not numeric.")
        hosts = self._hosts(name, shape[0], what)
        self.consumed.add(name)
        if table is not None and self.program.row_ids is not None:
            key = (table, hosts)
            if key not in self._stored_rows:  # where this replica's ids are stored: once per table and layout
                self._stored_rows = {key: _as_run(mod_layout_rows(self.program.row_ids[table], shape[0], hosts))}
            return source.read_rows(name, self._stored_rows[key])
        array = source.read(name)
        return from_mod_layout(array, hosts) if hosts > 1 else array

    def _hosts(self, name: str, rows: int, what: str) -> int:
        """How many hosts' `mod` slices the stored rows are in (1: id order)."""
        if self.source.kind == "ours":  # whole, in id order, unless write_for_tpu laid it out for a TPU job
            return int(self.source.meta.get("mod_hosts", 1))
        if self.strategy != "mod" or self.source.kind != "tf":
            return 1
        try:
            slices = self.source.row_slices(name)
        except ValueError as error:
            raise CheckpointError(str(error)) from None
        if slices is None:
            if self.num_hosts is None:
                raise CheckpointError(
                    f"Checkpoint {self.source.path!r}: {what} ({name!r}) is stored whole, and the partition strategy "
                    "is 'mod': a TPU job saves a table as one row slice per host in a host-major order, so this one "
                    "was merged, or written by a run that did not partition it, and its row order can't be known. "
                    "Pass WarmStartSettings(..., num_hosts=N) with the host count of the job that wrote it "
                    "(num_hosts=1: the rows are in id order), or partition_strategy='div'."
                )
            return self.num_hosts
        hosts = len(slices)
        if self.num_hosts is not None and self.num_hosts != hosts:
            raise CheckpointError(
                f"Checkpoint {self.source.path!r}: {what} ({name!r}) is stored in {hosts} row "
                f"slices (one per host of the TPU job), but num_hosts={self.num_hosts} was given."
            )
        expected = shard_sizes(rows, hosts, "mod") if rows else [0] * hosts
        if [length for _, length in slices] != expected or any(
            start != sum(expected[:i]) for i, (start, _) in enumerate(slices)
        ):
            raise CheckpointError(
                f"Checkpoint {self.source.path!r}: the {hosts} row slices of {name!r} ({what}) "
                f"have {[n for _, n in slices]} rows, not one per host ({expected}): which host "
                "held which ids can't be known."
            )
        return hosts

    def slot_names(self, table: str, variable: str) -> tuple[dict[str, str] | None, str]:
        """(engine slot -> tensor name, 'TPU' / 'CPU') for `table` stored as `variable`, or (None, '')."""
        slots = self.program.slot_names(table)
        if not slots:
            return {}, "TPU"
        kind = self.program.kind(table)
        for flavour, cpu in (("TPU", False), ("CPU", True)):
            names = {slot: f"{variable}/{suffix}" for slot, suffix in slot_suffixes(kind, slots, cpu=cpu).items()}
            if all(name in self.source.names for name in names.values()):
                return names, flavour
        return None, ""


def _as_run(rows: np.ndarray) -> slice | np.ndarray:
    """`rows` as a slice when they are one run (a `div` replica's rows, or a `mod` one's of a checkpoint
    its own host count wrote): read without an index array."""
    if len(rows) and int(rows[-1]) - int(rows[0]) == len(rows) - 1 and bool((rows[1:] > rows[:-1]).all()):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _find_table(source: ProgramCheckpoint, program: Program, table: str) -> str | None:
    """The tensor of `source` that is `table`: this runner's record, the program's name, else its column's."""
    if source.meta is not None:
        recorded = source.meta.get("tables", {}).get(table)
        if recorded is not None:
            return recorded["name"]
    current = program.names.variable(table)
    if current in source.names:
        return current
    entry = program.names.tables[table]
    candidates = sorted(name for name in source.names if entry.matches(name))
    if len(candidates) > 1:
        raise CheckpointError(
            f"Checkpoint {source.path!r} holds several tables for column {entry.column!r}: "
            f"{candidates} (TensorFlow made one per feature layer that read it). Name the one to "
            "use: warm-start with WarmStartSettings(var_name_to_prev_var_name={"
            f"{current!r}: <one of them>}})."
        )
    return candidates[0] if candidates else None


def _certainty(source: ProgramCheckpoint, table: str) -> int:
    """How sure the name of `table` in `source` is: as the runner recorded it, else TensorFlow's."""
    if source.meta is not None:
        return int(source.meta.get("tables", {}).get(table, {}).get("certainty", CHECKPOINT))
    return CHECKPOINT


def _missing(source: ProgramCheckpoint, program: Program, table: str) -> CheckpointError:
    entry = program.names.tables[table]
    look = (
        f"{entry.shared!r}"
        if entry.shared is not None
        else f"'<layer>/{entry.column}/embedding_weights' (this program: {program.names.variable(table)!r})"
    )
    return CheckpointError(
        f"Checkpoint {source.path!r} holds no table {look} for {table}: it was written by "
        "another program, or names its tables otherwise (warm-start with "
        "WarmStartSettings(var_name_to_prev_var_name=...) to map names)."
    )


def _dense_entries(source: ProgramCheckpoint) -> dict[str, tuple[str, Any]] | None:
    """The dense state this runner saved in `source` (None for a TensorFlow-written one)."""
    if source.meta is not None:
        structure = source.meta["dense_state"]
        try:
            return decode_tensors(structure, {name: source.read(name) for name in structure["tensors"]})
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"Checkpoint {source.path!r}: the dense state can't be read ({error}).") from None
    return None


def _belongs_to(name: str, tables: list[str]) -> bool:
    """Whether `name` is one of `tables` or a slot of one (`<table>/...`): never dense state."""
    return any(name == table or name.startswith(table + "/") for table in tables)


def _dense_tensor_names(source: ProgramCheckpoint) -> set:
    if source.meta is not None:
        return set(source.meta["dense_state"]["tensors"])
    return set()


def resume_plan(source: ProgramCheckpoint, program: Program) -> Plan:
    """Everything of `source` the program resumes from (see the module); raises before anything is assigned."""
    reading = _Reading(source, program, strategy=program.partition_strategy)
    notes: list[str] = []
    names: dict[str, tuple[str, int]] = {}
    tables: dict[str, dict[str, np.ndarray]] = {}
    for table, shape in program.tables.items():
        variable = _find_table(source, program, table)
        if variable is None:
            raise _missing(source, program, table)
        names[table] = (variable, _certainty(source, table))
        arrays = {"embedding": reading.rows(variable, shape, f"table {table}", table)}
        slots, flavour = reading.slot_names(table, variable)
        if slots is None:
            found = sorted(n[len(variable) + 1 :] for n in source.names if n.startswith(variable + "/"))
            notes.append(
                f"Table {variable}: the checkpoint has no {program.kind(table)} slots for it "
                f"(found {found or 'none'}); its slots {program.slot_names(table)} start from their initial "
                "values."
            )
            arrays.update(initial_slots(program.optimizers[table], program.local_shape(table)))
        else:
            if flavour == "CPU" and slots:
                notes.append(
                    f"Table {variable}: slots {sorted(slots.values())} are TensorFlow's CPU optimizer's, "
                    f"read as the EmbeddingConfigSpec optimizer's {sorted(slots)}."
                )
            for slot, name in slots.items():
                arrays[slot] = reading.rows(name, shape, f"slot {slot!r} of table {table}", table)
        tables[table] = arrays
    entries = _dense_entries(source)
    tensor_core = {}
    for table, shape in program.tensor_core.items():
        variable = _find_table(source, program, table)
        if variable is None:
            raise _missing(source, program, table)
        names[table] = (variable, _certainty(source, table))
        tensor_core[table] = reading.rows(variable, shape, f"tensor-core table {table}")
    step = source.step
    if step is None:
        raise CheckpointError(
            f"Checkpoint {source.path!r} holds no global_step: it is not a model_dir's checkpoint "
            "(use warm_start_from to start from its tables)."
        )
    if any(n in source.names for n in ("beta1_power", "beta2_power")) and source.kind == "tf":
        notes.append(
            "beta1_power / beta2_power (TensorFlow's CPU Adam bias correction) are not used: a TPU's Adam has none."
        )
    if entries is not None:
        dense = ("replace", entries)
    else:
        consumed = reading.consumed | {"global_step"}
        tables_there = [variable for variable, _ in names.values()]
        dense = (
            "pending",
            {
                name: (source.read(name), f"Checkpoint {source.path!r}")
                for name in sorted(source.names - consumed)
                if source.is_numeric(name) and not _belongs_to(name, tables_there)
            },
        )
    return Plan(tables, int(step), tensor_core, dense, names, notes, local=program.row_ids is not None)


def warm_start_plan(
    source: ProgramCheckpoint,
    program: Program,
    settings: WarmStartSettings,
    fresh: Mapping[str, Mapping[str, np.ndarray]],
    fresh_tensor_core: Mapping[str, np.ndarray],
) -> Plan:
    """What `settings` takes from `source`; `fresh` (the new engine's state: this replica's rows when
    `program.row_ids` is set) is kept for the rest."""
    mapping = dict(settings.var_name_to_prev_var_name)
    inverse = {prev: current for current, prev in mapping.items()}
    used = set()
    reading = _Reading(
        source,
        program,
        strategy=settings.partition_strategy or program.partition_strategy,
        num_hosts=settings.num_hosts,
    )
    notes: list[str] = []
    count = 0
    viable: list[str] = []

    def previous(current: str, default: str) -> str:
        if current in mapping:
            used.add(current)
            return mapping[current]
        return default

    def take(current: str, prev: str, shape: tuple[int, int], what: str, table: str | None = None) -> np.ndarray:
        nonlocal count
        if prev not in source.names:
            raise ValueError(
                f"Tensor {prev} is not found in {source.path} checkpoint {sorted(source.names)} "
                f"(warm-starting {current}, {what})."
            )
        count += 1
        return reading.rows(prev, shape, what, table)

    def name_table(table: str) -> tuple[str, str]:
        """(the table's name here, its name in the source): known or mapped, else as the source names its column."""
        entry = program.names.tables[table]
        keys = [k for k in mapping if entry.matches(k)]
        if program.names.certainty(table) < LAYER:
            if keys:
                program.names.set(table, keys[0], SOURCE)
            else:
                found = _find_table(source, program, table)
                if found is not None:
                    program.names.set(table, found, SOURCE)
        current = program.names.variable(table)
        if current in mapping:
            return current, previous(current, current)
        return current, _find_table(source, program, table) or current

    tables: dict[str, dict[str, np.ndarray]] = {}
    names: dict[str, tuple[str, int]] = {}
    tables_there: list[str] = []
    for table, shape in program.tables.items():
        current, prev_table = name_table(table)
        tables_there.append(prev_table)
        viable.append(current)
        arrays = {key: value for key, value in fresh[table].items()}
        if selects(settings, current, trainable=True):
            arrays["embedding"] = take(current, prev_table, shape, f"table {table}", table)
        suffixes = slot_suffixes(program.kind(table), program.slot_names(table))
        known, _ = reading.slot_names(table, prev_table)
        fresh_slots = []
        for slot, suffix in suffixes.items():
            slot_current = f"{current}/{suffix}"
            viable.append(slot_current)
            if selects(settings, slot_current, trainable=False):
                prev = previous(slot_current, (known or {}).get(slot, f"{prev_table}/{suffix}"))
                arrays[slot] = take(slot_current, prev, shape, f"slot {slot!r} of table {table}", table)
            else:
                fresh_slots.append(slot_current)
        if fresh_slots:
            notes.append(
                f"Warm start: slots {fresh_slots} start from their initial values (optimizer slots are not "
                "trainable variables; list them in vars_to_warm_start to take them)."
            )
        tables[table] = arrays
    entries = _dense_entries(source)
    tensor_core = {}
    for table, shape in program.tensor_core.items():
        current, prev = name_table(table)
        tables_there.append(prev)
        viable.append(current)
        tensor_core[table] = fresh_tensor_core[table]
        if selects(settings, current, trainable=True):
            tensor_core[table] = take(current, prev, shape, f"tensor-core table {table}")
    step = 0
    viable.append("global_step")
    if selects(settings, "global_step", trainable=False):
        prev = previous("global_step", "global_step")
        if prev not in source.names:
            raise ValueError(f"Tensor {prev} is not found in {source.path} checkpoint {sorted(source.names)}.")
        step = int(np.asarray(source.read(prev)).reshape(()))
        count += 1
    for table in list(program.tables) + list(program.tensor_core):
        names[table] = (program.names.variable(table), program.names.certainty(table))

    if entries is not None:
        taken = {}
        for key, value in entries.items():
            current = inverse.get(key, key)
            if key in program.tensor_core or current in program.tensor_core:
                continue
            if selects(settings, current, trainable=True):
                taken[current] = value
                if current in mapping:
                    used.add(current)
                count += 1
        dense = ("update", taken)
    else:
        pending = {}
        skip = reading.consumed | {"global_step"} | _dense_tensor_names(source)
        for name in sorted(source.names - skip):
            current = inverse.get(name, name)
            if _belongs_to(name, tables_there) and current not in mapping:
                continue
            if source.is_numeric(name) and selects(settings, current, trainable=True):
                pending[current] = (source.read(name), f"Checkpoint {source.path!r} (warm start)")
                if current in mapping:
                    used.add(current)
        dense = ("pending", pending)
    unused = sorted(set(mapping) - used)
    for current in unused:
        if mapping[current] not in source.names:
            raise ValueError(
                f"Tensor {mapping[current]} is not found in {source.path} checkpoint "
                f"{sorted(source.names)} (var_name_to_prev_var_name[{current!r}])."
            )
    if unused:
        raise ValueError(
            f"You provided the following variables in var_name_to_prev_var_name that were not used: "
            f"{set(unused)}.  Perhaps you misspelled them?  Here is the list of viable variable names: "
            f"{viable}"
        )
    notes.insert(0, f"Warm-started {count} variables from {source.path}.")
    return Plan(tables, step, tensor_core, dense, names, notes, local=program.row_ids is not None)
