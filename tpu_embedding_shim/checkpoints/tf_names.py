"""TensorFlow's checkpoint names for a TPUEstimator program's embedding tables and their optimizer slots.

TensorFlow names a column's table after the variable scope it was created
in -- the feature layer that looked the column up -- and the column:

| the model_fn looked the column up with | the table's checkpoint name |
|---|---|
| `tf.compat.v1.feature_column.input_layer` | `input_layer/<column>/embedding_weights` (a 2nd call: `input_layer_1`) |
| `tf.keras.layers.DenseFeatures` | `dense_features/<column>/embedding_weights` (`dense_features_1`..., or `name=`) |
| `tf.keras.experimental.SequenceFeatures` | `sequence_features/<column>/embedding_weights` |
| any layer, `shared_embedding_columns` | `<sorted keys>_shared_embedding` (the shared collection name, no scope) |

where `<column>` is the column's name (`user_embedding`). The names are
the same on a CPU and on a TPU (TensorFlow's TPU code records that scope
for the TPU's variables, `_tpu_estimator_embedding.get_full_variable_names`).
The slots of the EmbeddingConfigSpec's optimizer are `<table>/<suffix>`,
TensorFlow's TPU names (`_get_slot_variable_names`); a CPU run
(`use_tpu=False`) trains the tables with the model's optimizer and names
the slots after it instead (read here, never written):

| optimizer | TPU slot names (written) | CPU model optimizer's (read) |
|---|---|---|
| Adagrad | `/Adagrad` | `/Adagrad` |
| Adam | `/Adam/m`, `/Adam/v` | `/Adam`, `/Adam_1` (+ `beta1_power`, `beta2_power`, not used) |
| FTRL | `/Ftrl` (accumulator), `/Ftrl_1` (linear) | the same |
| Momentum | `/Momentum` | `/Momentum` |
| RMSProp | `/RMSProp/ms`, `/RMSProp/mom` | `/RMSProp` (ms), `/RMSProp_1` (mom) |
| ProximalAdagrad | `/ProximalAdagrad` | `/ProximalAdagrad` |
| SGD | none | none |

This module lives in runner/ because the scope comes from a running
model_fn (which layer read which column: `LookupScope.layer_names`) and
the tables from an EmbeddingConfigSpec's columns, as TensorFlow's own
mapping lives in tensorflow_estimator.

A TPU job with H hosts saves each table (and slot) as H row slices of one
key; with `partition_strategy='mod'` host i's slice holds ids i, i+H, ...
so the stored tensor is a permutation of id order. `from_mod_layout` undoes
it, `to_mod_layout` makes it:

>>> import numpy as np
>>> to_mod_layout(np.arange(7)[:, None], 3)[:, 0].tolist()   # host 0: 0 3 6, host 1: 1 4, host 2: 2 5
[0, 3, 6, 1, 4, 2, 5]
>>> from_mod_layout(to_mod_layout(np.arange(7)[:, None], 3), 3)[:, 0].tolist()
[0, 1, 2, 3, 4, 5, 6]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..api.feature_columns import SequenceCategoricalColumn
from ..api.tpu_feature_columns import TPU_EMBEDDING_COLUMN_CLASSES, _TPUSharedEmbeddingColumnV2
from ..engine import join_shards, shard_sizes, split_table

__all__ = [
    "TPU_SLOT_SUFFIXES",
    "CPU_SLOT_SUFFIXES",
    "TableName",
    "ProgramNames",
    "slot_suffixes",
    "to_mod_layout",
    "from_mod_layout",
    "mod_layout_rows",
    "DEFAULT",
    "SOURCE",
    "LAYER",
    "CHECKPOINT",
]

TPU_SLOT_SUFFIXES: dict[str, dict[str, str]] = {
    "sgd": {},
    "adagrad": {"accumulators": "Adagrad"},
    "adam": {"momenta": "Adam/m", "velocities": "Adam/v"},
    "ftrl": {"accumulators": "Ftrl", "linears": "Ftrl_1"},
    "momentum": {"momenta": "Momentum"},
    "rmsprop": {"ms": "RMSProp/ms", "mom": "RMSProp/mom"},
    "proximal_adagrad": {"accumulators": "ProximalAdagrad"},
}
"""Engine slot -> TensorFlow's TPU slot suffix, per optimizer kind (what the runner writes)."""

CPU_SLOT_SUFFIXES: dict[str, dict[str, str]] = {
    **TPU_SLOT_SUFFIXES,
    "adam": {"momenta": "Adam", "velocities": "Adam_1"},
    "rmsprop": {"ms": "RMSProp", "mom": "RMSProp_1"},
}
"""Engine slot -> the slot suffix of TensorFlow's v1 CPU optimizer of the same kind (read only): the TPU
names, except Adam's and RMSProp's (`Adam`, `Adam_1` where the TPU writes `Adam/m`, `Adam/v`)."""

# How sure a table's name is; a higher one replaces a lower one.
DEFAULT = 0  # no layer has read the column yet: DenseFeatures' (or SequenceFeatures') name
SOURCE = 1  # seen in a checkpoint being warm-started from, or named in var_name_to_prev_var_name
LAYER = 2  # the layer that read the column in a step of this run
CHECKPOINT = 3  # the name the table already has in this model_dir's checkpoints


def slot_suffixes(kind: str | None, slots: Iterable[str], *, cpu: bool = False) -> dict[str, str]:
    """Engine slot -> checkpoint suffix for an optimizer kind (`<slot>` itself for a kind TF has no name for)."""
    table = CPU_SLOT_SUFFIXES if cpu else TPU_SLOT_SUFFIXES
    known = table.get(kind or "sgd")
    if known is not None and set(known) == set(slots):
        return dict(known)
    return {slot: slot for slot in slots}


@dataclasses.dataclass(frozen=True)
class TableName:
    """What names one table: the engine (or dense_state) key and the column TensorFlow scopes it by."""

    table: str  # 'tbl_' + the column's embedding var name
    column: str  # the column's name ('user_embedding'); for shared tables the first column's
    shared: str | None  # the shared collection name, for shared_embedding_columns
    sequence: bool  # looked up as a sequence (SequenceFeatures' default scope)
    features: tuple  # the feature keys that read the table
    tensor_core: bool  # a tensor-core column's table, kept in params['dense_state']

    def variable(self, scope: str) -> str:
        """The checkpoint name of the table when its column is read in layer `scope`."""
        if self.shared is not None:
            return self.shared
        return f"{scope}/{self.column}/embedding_weights"

    def matches(self, name: str) -> bool:
        """Whether checkpoint name `name` can be this table (any scope for an unshared column)."""
        if self.shared is not None:
            return name == self.shared
        return name.endswith(f"/{self.column}/embedding_weights") or name == f"{self.column}/embedding_weights"


def _tables_of(columns: Iterable[Any], *, tensor_core: bool) -> dict[str, TableName]:
    out: dict[str, TableName] = {}
    features: dict[str, list[str]] = {}
    for column in columns:
        if not isinstance(column, TPU_EMBEDDING_COLUMN_CLASSES):
            continue
        table = "tbl_" + column.get_embedding_var_name()
        features.setdefault(table, []).append(column.get_feature_key_name())
        if table in out:
            continue
        shared = column.get_embedding_var_name() if isinstance(column, _TPUSharedEmbeddingColumnV2) else None
        sequence = isinstance(column.categorical_column, SequenceCategoricalColumn)
        out[table] = TableName(table, column.name, shared, sequence, (), tensor_core)
    return {t: dataclasses.replace(n, features=tuple(features[t])) for t, n in out.items()}


class ProgramNames:
    """The checkpoint name of every table of one TPUEstimator program, learned as the program runs.

    A table's name is the most certain one known (`CHECKPOINT` > `LAYER` >
    `SOURCE` > `DEFAULT`): the name it already has in the model_dir, else
    the layer a step read its column with, else the name a warm-start
    checkpoint gives it, else TensorFlow's default for the column's kind.
    """

    def __init__(
        self, feature_columns: Iterable[Any] = (), tensor_core_columns: Iterable[Any] = (), tables: Iterable[str] = ()
    ):
        self.tables: dict[str, TableName] = _tables_of(feature_columns, tensor_core=False)
        self.tables.update(_tables_of(tensor_core_columns, tensor_core=True))
        for table in tables:  # a table of feature_to_config_dict / table_to_config_dict: TF names it by itself
            self.tables.setdefault(table, TableName(table, table, table, False, (), False))
        self._names: dict[str, tuple] = {}  # table -> (name, certainty)

    def _default(self, entry: TableName) -> str:
        return entry.variable("sequence_features" if entry.sequence else "dense_features")

    def variable(self, table: str) -> str:
        """The checkpoint name of `table` (an engine or tensor-core table)."""
        entry = self.tables[table]
        name, _ = self._names.get(table, (self._default(entry), DEFAULT))
        return name

    def certainty(self, table: str) -> int:
        """How sure the table's name is; a shared table's name has no scope, so it is certain."""
        if self.tables[table].shared is not None:
            return CHECKPOINT
        return self._names.get(table, (None, DEFAULT))[1]

    def set(self, table: str, name: str, certainty: int) -> None:
        """Names `table` `name` unless a more certain name is known."""
        if (
            table in self.tables
            and self.tables[table].shared is None
            and certainty >= self.certainty(table)
            and certainty > DEFAULT
        ):
            self._names[table] = (name, certainty)

    def learn(self, layer_names: Mapping[str, str]) -> None:
        """Names tables from a step's `LookupScope.layer_names` (feature key -> layer name)."""
        for table, entry in self.tables.items():
            if self.certainty(table) >= LAYER:
                continue
            for feature in entry.features:
                if feature in layer_names:
                    self.set(table, entry.variable(layer_names[feature]), LAYER)
                    break


def _check_hosts(num_hosts: Any) -> int:
    if isinstance(num_hosts, bool) or not isinstance(num_hosts, (int, np.integer)) or num_hosts < 1:
        raise ValueError(f"Argument `num_hosts` must be an int >= 1. Received: {num_hosts!r}.")
    return int(num_hosts)


def to_mod_layout(table: np.ndarray, num_hosts: int) -> np.ndarray:
    """A table in id order -> the rows as a `mod`-partitioned TPU job with `num_hosts` hosts saves them."""
    hosts = _check_hosts(num_hosts)
    if hosts == 1 or len(table) == 0:
        return np.asarray(table)
    return np.concatenate(split_table(np.asarray(table), hosts, "mod"), axis=0)


def mod_layout_rows(ids: np.ndarray, vocabulary_size: int, num_hosts: int) -> np.ndarray:
    """Where ids `ids` (int64) are stored in a table of `vocabulary_size` rows that a `mod` job with
    `num_hosts` hosts saved: host h = id % H holds its ids after the rows of hosts 0..h-1, in id order.

    >>> mod_layout_rows(np.arange(5), 5, 2).tolist()  # stored as [0 2 4 | 1 3]
    [0, 3, 1, 4, 2]
    """
    hosts = _check_hosts(num_hosts)
    ids = np.asarray(ids, np.int64)
    if hosts == 1:
        return ids
    starts = np.concatenate([[0], np.cumsum(shard_sizes(vocabulary_size, hosts, "mod"))]).astype(np.int64)
    rows = ids // hosts
    rows += starts[ids % hosts]
    return rows


def from_mod_layout(stored: np.ndarray, num_hosts: int) -> np.ndarray:
    """The inverse of `to_mod_layout`: rows saved by a `mod` job with `num_hosts` hosts -> id order."""
    hosts = _check_hosts(num_hosts)
    if hosts == 1 or len(stored) == 0:
        return np.asarray(stored)
    sizes = shard_sizes(len(stored), hosts, "mod")
    parts, start = [], 0
    for size in sizes:
        parts.append(stored[start : start + size])
        start += size
    return join_shards(parts, len(stored), "mod")
