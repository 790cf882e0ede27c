"""The step context (`params['context']`) and the tensor-core columns.

`params['context']` is what TensorFlow calls the `TPUContext`; here it also
tells the model_fn about the step it is running:

- `mode`, `global_step` (the step being computed; learning-rate and
  gradient-multiplier functions see the same number), `batch_size`;
- `dense_state`: the same `DenseState` as `params['dense_state']`;
- `tensor_core_tables`: `{table name: [V, D] array}` of the columns with
  embedding_lookup_device='tpu_tensor_core' (see below);
- `tensor_core_gradients`: `{table name: [V, D] d(loss)/d(table)}`, filled
  by the runner after the model_fn returns and before it calls `train_op`.

Tensor-core columns behave as on a TPU: the embedding engine does not own
them. Their tables are ordinary dense variables -- entries of
`params['dense_state']` named like the engine's tables, `'tbl_' +
column.get_embedding_var_name()` -- initialised from the column's
initializer, looked up into the same feature layers, saved with the
checkpoints, and trained by the model's own optimizer: in `train_op`, read
`context.tensor_core_gradients[name]` and update
`context.tensor_core_tables[name]` (or `params['dense_state'][name]`) in
place.

The lookup is TensorFlow's dense TPU lookup (`pad_sparse_embedding_lookup_indices`
then `sparse_embedding_aggregate_slice`): each example keeps only the ids
at positions `< tensor_core_shape[1]` -- the column index of a sparse or
dense input, the index inside a ragged row -- and the rest are dropped
before any check, as TensorFlow slices them off; then 'sum' adds the kept
rows and 'mean' divides by their count (an empty example gives zeros).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..api import lowering, replicas
from ..api.tensors import RaggedTensor, SparseTensor
from ..engine import Ragged, is_ragged_tensor, is_sparse, to_ragged
from ..engine import lookup as lookup_kernels


class TPUContext:
    """`params['context']`: the running step, the dense state and the tensor-core tables.

    TensorFlow's attributes, with TensorFlow's return shapes, describe CPU
    hosts of one replica each: one host in one process, N under
    `mpiexec -n N` (this process is host `current_host`). As in TensorFlow,
    `current_input_fn_deployment()` and `current_host` answer in an
    input_fn only, and `device_assignment` in a model_fn only (None: no TPU
    topology); anywhere else they raise TensorFlow's RuntimeError.
    """

    @property
    def num_replicas(self) -> int:
        return replicas.num_replicas()

    @property
    def num_hosts(self) -> int:
        return replicas.num_replicas()

    @property
    def num_of_replicas_per_host(self) -> int:
        """1: each host (process) is one replica."""
        return 1

    @property
    def current_host(self) -> int:
        self._only_in("input_fn")
        return replicas.replica_id()

    @property
    def device_assignment(self) -> None:
        """None, as TensorFlow's is without model parallelism: there is no TPU topology to assign."""
        self._only_in("model_fn")
        return None

    def current_input_fn_deployment(self) -> tuple[str, int, int, int]:
        """(host device, invocation index, invocation count, replicas fed by this call) of this input_fn call,
        as TensorFlow's per-host input: one call per host, feeding its one replica, so an input_fn can read its
        share (`dataset.shard(count, index)`)."""
        self._only_in("input_fn")
        host = replicas.replica_id()
        return (_host_device(host), host, self.num_hosts, self.num_of_replicas_per_host)

    def device_for_replica(self, replica_id: int) -> tuple[str, int]:
        """(CPU device of the replica's host, its ordinal on that host), as TensorFlow's."""
        return (_host_device(int(replica_id)), 0)

    @property
    def tpu_host_placement_function(self) -> Any:
        """`host_id -> the host's CPU device`, as TensorFlow's."""
        return lambda host_id: _host_device(int(host_id))

    def _only_in(self, where: str) -> None:
        """TensorFlow's rule: some attributes are for the input_fn only, others for the model_fn only."""
        if (where == "input_fn") != self._from_input_fn:
            raise RuntimeError(
                f"This TPUContext instance must not be called from {'model_fn' if where == 'input_fn' else 'input_fn'}."
            )

    def __init__(
        self,
        *,
        mode: str,
        global_step: int,
        batch_size: int | None,
        dense_state: Any,
        tensor_core: TensorCoreColumns | None,
        engine: Any,
        scope: Any,
        use_tpu: bool,
        from_input_fn: bool = False,
    ):
        self._from_input_fn = from_input_fn
        self.mode = mode
        self.global_step = global_step
        self.batch_size = batch_size
        self.dense_state = dense_state
        self.engine = engine
        self.lookup_scope = scope
        self.use_tpu = use_tpu
        self._tensor_core = tensor_core
        self.tensor_core_gradients: dict[str, np.ndarray] = {}

    @property
    def tensor_core_tables(self) -> dict[str, np.ndarray]:
        """Table name -> the [V, D] variable (the array in dense_state; update it in place or reassign)."""
        if self._tensor_core is None:
            return {}
        return {name: self.dense_state[name] for name in self._tensor_core.tables}

    def __repr__(self):
        return f"TPUContext(mode={self.mode!r}, global_step={self.global_step}, batch_size={self.batch_size})"


def _host_device(host: int) -> str:
    return f"/job:worker/replica:0/task:{host}/device:CPU:0"


class TensorCoreColumns:
    """Lookups and table gradients for the columns with embedding_lookup_device='tpu_tensor_core'."""

    def __init__(self, columns: list[Any]):
        tables, features = lowering.specs_from_feature_columns(list(columns), optimizer=None)
        self.tables = {t.name: t for t in tables}
        self.features = features
        self.kept_positions = {c.get_feature_key_name(): int(c.tensor_core_shape[1]) for c in columns}

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    def initialize(self, dense_state: Any, rng: np.random.Generator) -> None:
        """Puts each table missing from `dense_state` there, from its initializer."""
        for name, table in self.tables.items():
            if name in dense_state:
                continue
            initializer = table.seeded_initializer(rng)  # a seedless random one seeded from `rng`, as the engine's
            values = np.array(initializer((table.vocabulary_size, table.dim), np.float32), dtype=np.float32)
            if values.shape != (table.vocabulary_size, table.dim):
                raise ValueError(
                    f"The initializer of tensor-core table {name!r} returned shape {values.shape}; "
                    f"expected {(table.vocabulary_size, table.dim)}."
                )
            dense_state[name] = values

    def _table(self, dense_state: Any, name: str) -> np.ndarray:
        table = self.tables[name]
        value = dense_state.get(name) if hasattr(dense_state, "get") else None
        if value is None:
            raise ValueError(f"Tensor-core table {name!r} is missing from params['dense_state'].")
        value = np.asarray(value)
        if value.shape != (table.vocabulary_size, table.dim):
            raise ValueError(
                f"Tensor-core table {name!r} in params['dense_state'] has shape {value.shape}; "
                f"expected {(table.vocabulary_size, table.dim)}."
            )
        return value

    def lookup(self, features: Mapping[str, Any], dense_state: Any) -> tuple[dict[str, np.ndarray], dict[str, Ragged]]:
        """(activations, batches) of every tensor-core feature."""
        activations, batches = {}, {}
        for feature in self.features:
            if feature.name not in features:
                raise ValueError(
                    f"Feature {feature.name!r} (a tensor-core column) is missing from the features. "
                    f"Received keys: {sorted(features)}."
                )
            ids = first_positions(features[feature.name], self.kept_positions[feature.name])
            batch = to_ragged(ids, feature=feature)
            table = self._table(dense_state, feature.table)
            activations[feature.name] = lookup_kernels.pooled_lookup(
                table, batch, self.tables[feature.table].combiner, safe=feature.safe_lookup
            )
            batches[feature.name] = batch
        return activations, batches

    def gradients(self, batches: Mapping[str, Ragged], grads: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Table name -> dense [V, D] d(loss)/d(table), summed over the features sharing it."""
        out = {name: np.zeros((t.vocabulary_size, t.dim), np.float32) for name, t in self.tables.items()}
        for feature in self.features:
            grad = grads.get(feature.name)
            if grad is None:
                continue
            ids, rows = lookup_kernels.pooled_backward(
                batches[feature.name], self.tables[feature.table].combiner, grad, safe=feature.safe_lookup
            )
            np.add.at(out[feature.table], ids, rows)
        return out


def first_positions(ids: Any, count: int) -> Any:
    """`ids` without the entries at positions >= `count` of each example, in the same input form.

    TensorFlow's `pad_sparse_embedding_lookup_indices` slices the sparse ids
    to `[batch, count]`. A position is the column index of a sparse or dense
    input and the index inside a ragged row. A one-id-per-example input
    ([B]) and inputs whose form to_ragged will refuse pass unchanged.
    """
    if is_sparse(ids):
        indices, values = np.asarray(ids.indices), np.asarray(ids.values)
        shape = np.asarray(ids.dense_shape).reshape(-1)
        if indices.ndim != 2 or indices.shape[1:] != (2,) or shape.shape != (2,) or len(values) != len(indices):
            return ids
        keep = indices[:, 1] < count
        return SparseTensor(indices[keep], values[keep], [int(shape[0]), min(int(shape[1]), count)])
    if is_ragged_tensor(ids):
        values, splits = np.asarray(ids.values), np.asarray(ids.row_splits).reshape(-1)
        if values.ndim != 1 or splits.size < 1 or splits[-1] != len(values) or np.any(np.diff(splits) < 0):
            return ids
        lengths = np.diff(splits)
        positions = np.arange(len(values)) - np.repeat(splits[:-1], lengths)
        return RaggedTensor.from_row_lengths(values[positions < count], np.minimum(lengths, count))
    if isinstance(ids, (list, tuple)) and ids and all(isinstance(r, (list, tuple, np.ndarray)) for r in ids):
        return [list(r)[:count] for r in ids]
    try:
        array = np.asarray(ids)
    except ValueError:  # not rectangular: to_ragged says what is wrong
        return ids
    return array[:, :count] if array.ndim == 2 else ids
