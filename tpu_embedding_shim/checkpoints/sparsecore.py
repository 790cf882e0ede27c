"""SparseCore checkpoints (TensorFlow 2.21's `TPUEmbeddingV2` on a TPU) read as plain tables and slots, and written.

Such a checkpoint holds, under the embedding object's path `<path>` (for
`tf.train.Checkpoint(embedding=...)`, `embedding`):

- `<path>/_sparse_core_table_layouts/.ATTRIBUTES/VARIABLE_VALUE`: the
  serialized `SparseCoreTableLayouts` (one `sparsecore_layout.TableLayout` per table, see
  `engine/sparsecore_layout.py`);
- `<path>/<stacked>/.ATTRIBUTES/VARIABLE_VALUE`: each stacked table,
  `[num_sparse_cores * total_rows_per_sparse_core_shard, padded width]`
  (on a TPU saved as row slices of that key, one per chip);
- `<path>/<stacked>.S<slot>/.ATTRIBUTES/VARIABLE_VALUE`: each optimizer
  slot of it (`accumulators`, `momenta`, ...), stacked the same way.

`read_sparsecore` finds every such embedding in a checkpoint and returns
its tables as `{table: {'embedding': rows, slot: rows}}` in id order, the
padding cut: the engine's state form, which `Engine.load_state`,
`checkpoint convert` and `migrate` take. `write_sparsecore` writes that
state back in the layout given (TensorFlow 2.21 restores it into a
`TPUEmbeddingV2` of that layout; on a CPU, `SparseCoreStackedTableTrackable`
reads it). TensorFlow's own checkpoint adapter converts plain tables into
this layout but not back (`NotImplementedError("Sharded to Unsharded is not
implemented yet.")`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

import numpy as np

from ..engine import CheckpointError, sparsecore_layout
from ..engine.tf_bundle import (
    OBJECT_GRAPH_KEY,
    VARIABLE_VALUE,
    BundleReader,
    Node,
    SlicedTensor,
    WireError,
    build_graph,
    escape_local_name,
    unescape_local_name,
    write_bundle,
)

__all__ = ["LAYOUTS_NAME", "SparseCoreEmbedding", "find_sparsecore", "read_sparsecore", "write_sparsecore"]

LAYOUTS_NAME = "_sparse_core_table_layouts"
"""The local name TensorFlow tracks the layouts under (`tpu_embedding_v3_utils.SPARSECORE_LAYOUTS_CHECKPOINT_KEY`)."""

_SUFFIX = f"/.ATTRIBUTES/{VARIABLE_VALUE}"
_PARAMETERS = "embedding"  # the engine state's name for a table's own rows


@dataclasses.dataclass(frozen=True)
class SparseCoreEmbedding:
    """One SparseCore embedding object found in a checkpoint.

    Attributes:
      path: its object path, escaped as in the keys ('' for the root).
      layouts: every table's layout, as the checkpoint lists them.
      keys: stacked table -> {'embedding' or slot name -> checkpoint key}.
    """

    path: str
    layouts: tuple[sparsecore_layout.TableLayout, ...]
    keys: dict[str, dict[str, str]]

    def stacks(self) -> dict[str, list[sparsecore_layout.TableLayout]]:
        """Stacked table -> the layouts of its tables."""
        out: dict[str, list[sparsecore_layout.TableLayout]] = {}
        for layout in self.layouts:
            out.setdefault(layout.stacked_table_name, []).append(layout)
        return out


def _layout_bytes(reader: BundleReader, key: str) -> bytes:
    value = np.asarray(reader.read(key))
    if value.shape != () or not isinstance(value.item(), (bytes, str)):
        raise CheckpointError(f"{reader.prefix}: {key!r} must hold a serialized SparseCoreTableLayouts string.")
    item = value.item()
    return item.encode() if isinstance(item, str) else item


def find_sparsecore(reader: BundleReader) -> list[SparseCoreEmbedding]:
    """Every SparseCore embedding in the checkpoint `reader` reads (none: []).

    Raises:
      CheckpointError: layouts that do not parse or fit, or a stacked table or slot whose key is missing or
        whose shape is not the layouts'.
    """
    found = []
    names = reader.names()
    for key in names:
        if key != LAYOUTS_NAME + _SUFFIX and not key.endswith(f"/{LAYOUTS_NAME}{_SUFFIX}"):
            continue
        path = key[: -len(LAYOUTS_NAME + _SUFFIX)].rstrip("/")
        try:
            layouts = sparsecore_layout.decode_layouts(_layout_bytes(reader, key))
        except WireError as e:
            raise CheckpointError(
                f"{reader.prefix}: {key!r} is not a valid SparseCoreTableLayouts message: {e}."
            ) from None
        embedding = SparseCoreEmbedding(path, tuple(layouts), _stacked_keys(reader, names, path, layouts))
        found.append(embedding)
    return found


def _stacked_keys(
    reader: BundleReader, names: Sequence[str], path: str, layouts: Sequence[sparsecore_layout.TableLayout]
) -> dict[str, dict[str, str]]:
    """Stacked table -> {'embedding' / slot -> key}, each checked for its shape."""
    head = f"{path}/" if path else ""
    keys: dict[str, dict[str, str]] = {}
    for layout in layouts:
        stacked = layout.stacked_table_name
        if stacked in keys:
            continue
        own = f"{head}{escape_local_name(stacked)}{_SUFFIX}"
        if own not in names:
            raise CheckpointError(
                f"{reader.prefix}: the layouts name stacked table {stacked!r}, but the checkpoint has no {own!r}."
            )
        keys[stacked] = {_PARAMETERS: own}
        slot_head = f"{head}{escape_local_name(stacked)}.S"
        for name in names:
            if name.startswith(slot_head) and name.endswith(_SUFFIX):
                escaped = name[len(head) : -len(_SUFFIX)]
                if "/" not in escaped:  # a child of the embedding, not deeper
                    slot = unescape_local_name(escaped)[len(stacked) + 1 :]
                    keys[stacked][slot] = name
        expected = (layout.num_sparse_cores * layout.total_rows_per_sparse_core_shard, layout.unsharded_padded_shape[1])
        for what, key in keys[stacked].items():
            shape = tuple(reader.shape(key))
            if shape != expected:
                raise CheckpointError(
                    f"{reader.prefix}: {key!r} ({what} of stacked table {stacked!r}) is {list(shape)}; its layouts "
                    f"say {list(expected)} (num_sparse_cores x total_rows_per_sparse_core_shard, padded width)."
                )
    return keys


def read_sparsecore(path: str | os.PathLike[str], *, verify: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """The plain tables and slots of the SparseCore checkpoint at `path` (its prefix): table -> {'embedding':
    [rows, dim], slot: [rows, dim]}, float32, in id order.

    Raises:
      CheckpointError: no SparseCore embedding in it, more than one, or one that does not fit its layouts
        (NotFoundError / DataLossError for a missing or damaged file).
    """
    reader = BundleReader(path, verify=verify)
    found = find_sparsecore(reader)
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} ({', '.join(repr(f.path) for f in found)})"
        raise CheckpointError(
            f"{reader.prefix}: read_sparsecore needs exactly one SparseCore embedding (a `{LAYOUTS_NAME}` key); "
            f"the checkpoint has {what}."
        )
    return tables_of(reader, found[0])


def tables_of(reader: BundleReader, embedding: SparseCoreEmbedding) -> dict[str, dict[str, np.ndarray]]:
    """`embedding`'s tables and slots, read from `reader`, unstacked (see `read_sparsecore`)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for stacked, layouts in embedding.stacks().items():
        for what, key in embedding.keys[stacked].items():
            values = reader.read(key)
            for layout in layouts:
                out.setdefault(layout.table_name, {})[what] = sparsecore_layout.unstack(
                    np.asarray(values, np.float32), layout
                )
    return out


def _by_partition(stacked: np.ndarray, layout: sparsecore_layout.TableLayout) -> SlicedTensor:
    """`stacked` as the row slices of each partition (TensorFlow's `TPUEmbeddingShardedSaveable`)."""
    rows = stacked.shape[0] // layout.num_partitions
    parts = [(((p * rows, rows), (0, -1)), stacked[p * rows : (p + 1) * rows]) for p in range(layout.num_partitions)]
    return SlicedTensor(tuple(stacked.shape), parts)


def write_sparsecore(
    prefix: str | os.PathLike[str],
    state: Mapping[str, Mapping[str, np.ndarray]],
    layouts: Sequence[sparsecore_layout.TableLayout],
    *,
    object_name: str = "embedding",
    sliced: bool = True,
    update_state: bool = False,
) -> str:
    """Writes `state` (table -> {'embedding': rows, slot: rows}) as a SparseCore checkpoint at `prefix`, as
    `tf.train.Checkpoint(<object_name>=embedding).write(prefix)` of a TensorFlow 2.21 `TPUEmbeddingV2` with these
    `layouts` writes it (padding zeros); returns `prefix`. `sliced`: each stacked table as one row slice per
    partition (chip) of its key, as a TPU job saves it (False: one whole tensor). `update_state` also names it
    the latest in the directory's `checkpoint` state file (as `save` does).

    Raises:
      ValueError: a table of the layouts missing from `state` (or the other way), tables of one stack with
        different slots, or a shape that is not the layout's. Nothing is written.
      OSError: the files cannot be written (nothing is left behind).
    """
    layouts = list(layouts)
    named = {layout.table_name for layout in layouts}
    if set(state) != named:
        raise ValueError(
            f"Argument `state` must hold exactly the layouts' tables {sorted(named)}. Received: {sorted(state)}."
        )
    stacks: dict[str, list[sparsecore_layout.TableLayout]] = {}
    for layout in layouts:
        stacks.setdefault(layout.stacked_table_name, []).append(layout)
    embedding = Node()
    dict_node = Node()
    for stacked, members in stacks.items():
        slots = sorted(set(state[members[0].table_name]) - {_PARAMETERS})
        for layout in members:
            if _PARAMETERS not in state[layout.table_name]:
                raise ValueError(f"Argument `state`: table {layout.table_name!r} has no {_PARAMETERS!r} array.")
            if sorted(set(state[layout.table_name]) - {_PARAMETERS}) != slots:
                raise ValueError(
                    f"Argument `state`: tables of stacked table {stacked!r} must have the same slots; "
                    f"{members[0].table_name!r} has {slots}, {layout.table_name!r} has "
                    f"{sorted(set(state[layout.table_name]) - {_PARAMETERS})}."
                )
        per_stack = dict_node.add(stacked, Node())
        for what in (_PARAMETERS, *slots):
            values = sparsecore_layout.stack(
                {layout.table_name: state[layout.table_name][what] for layout in members}, members
            )
            name = stacked if what == _PARAMETERS else f"{stacked}/{what}"
            variable = embedding.add(name, Node.variable(name, _by_partition(values, members[0]) if sliced else values))
            per_stack.add("parameters" if what == _PARAMETERS else what, variable)
    embedding.add("_variables", dict_node)
    embedding.add(
        LAYOUTS_NAME, Node.variable(LAYOUTS_NAME, np.array(sparsecore_layout.encode_layouts(layouts), dtype=object))
    )
    root = Node()
    root.add(object_name, embedding)
    graph, tensors = build_graph(root)
    tensors[OBJECT_GRAPH_KEY] = np.array(graph.encode(), dtype=object)
    return write_bundle(prefix, tensors, update_state=update_state)
