"""How SparseCore stores tables: TensorFlow 2.21's table layouts, the stacking that makes them, and rows moved
between one plain table and a stacked, sharded one.

A `TPUEmbeddingV2` on SparseCore keeps tables of one padded width and one
optimizer (and quantization) side by side in one *stacked table*, split over
`num_sparse_cores` shards (4 SparseCores a chip x `num_partitions` chips).
Each table is first padded: its rows to a multiple of 8 x num_sparse_cores,
its columns to a multiple of 8 (zeros). Row r of a table then lives on
shard `(r % S + rotation) % S` at row `offset + r // S` of that shard,
where S is the number of shards, `offset` the table's
`sparse_core_shard_row_offset` and `rotation` its
`sparse_core_shard_rotation`. The stacked table is the shards one after
another: `[S * total_rows_per_sparse_core_shard, padded width]`.

`TableLayout` is TensorFlow's `SparseCoreTableLayout` proto
(tensorflow/core/tpu/kernels/sparse_core_layout.proto), field for field;
`encode_layouts` / `decode_layouts` read and write the serialized
`SparseCoreTableLayouts` a SparseCore checkpoint holds. `stack_tables` is
TensorFlow's `SparseCoreLayoutStacker` (which tables share a stack, their
offsets and rotations); `stack` and `unstack` move the rows.

>>> layouts = stack_tables([StackRequest("a", 10, 4, "adagrad", 16), StackRequest("b", 20, 4, "adagrad", 16)],
...                        num_partitions=1)
>>> [(t.table_name, t.stacked_table_name, t.sparse_core_shard_row_offset, t.sparse_core_shard_rotation)
...  for t in layouts]
[('a', 'a_b', 0, 0), ('b', 'a_b', 8, 0)]
>>> import numpy as np
>>> a, b = np.arange(40, dtype=np.float32).reshape(10, 4), -np.arange(80, dtype=np.float32).reshape(20, 4)
>>> stacked = stack({"a": a, "b": b}, layouts)
>>> stacked.shape, (unstack(stacked, layouts[1]) == b).all()
((64, 8), np.True_)
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

import numpy as np

from .tf_bundle import WireError, decode_varint, encode_varint, field_bytes, field_varint, iter_fields

__all__ = [
    "TableLayout",
    "StackRequest",
    "encode_layouts",
    "decode_layouts",
    "stack_tables",
    "stack",
    "unstack",
    "check_stack",
    "SPARSE_CORES_PER_CHIP",
    "ACTIVATION_BYTES_LIMIT",
    "SHARD_BYTES_LIMIT",
]

SPARSE_CORES_PER_CHIP = 4
"""SparseCores on one chip (TensorFlow's `sparse_cores_per_partition` default)."""

ACTIVATION_BYTES_LIMIT = 2 * 1024 * 1024
"""A stack's activations per SparseCore must stay below this (XLA's `tf_xla_sparse_core_stacking_mem_limit_bytes`
default, measured against TensorFlow 2.21's stacker)."""

SHARD_BYTES_LIMIT = 2 * 1024 * 1024 * 1024
"""A stack's bytes per partition must stay below this (`tf_xla_sparse_core_stacking_table_shard_limit_bytes`)."""

_ROW_LIMIT = (1 << 31) - 1  # SparseCore rows are signed 32-bit


@dataclasses.dataclass(frozen=True)
class TableLayout:
    """Where one table sits in its stacked table (TensorFlow's `SparseCoreTableLayout`)."""

    table_name: str
    stacked_table_name: str
    num_sparse_cores: int
    num_partitions: int
    total_rows_per_sparse_core_shard: int
    unsharded_shape: tuple[int, int]
    unsharded_padded_shape: tuple[int, int]
    sparse_core_shard_row_offset: int = 0
    sparse_core_shard_rotation: int = 0
    per_sparse_core_batch_size: int = 0
    num_features: int = 0
    fdo_key: str = ""

    @property
    def rows_per_shard(self) -> int:
        """This table's rows on each shard (its padded rows / the shards)."""
        return self.unsharded_padded_shape[0] // self.num_sparse_cores

    def shard_and_row(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, row within the shard) of each table row in `ids` (TensorFlow's `map_indices_in_shard`)."""
        ids = np.asarray(ids, np.int64)
        shards = self.num_sparse_cores
        return (
            ids % shards + self.sparse_core_shard_rotation
        ) % shards, self.sparse_core_shard_row_offset + ids // shards


# The proto ---------------------------------------------------------------------------------------

_STRINGS = {1: "table_name", 2: "stacked_table_name", 12: "fdo_key"}
_INTS = {
    3: "num_sparse_cores",
    4: "num_partitions",
    5: "total_rows_per_sparse_core_shard",
    8: "sparse_core_shard_row_offset",
    9: "sparse_core_shard_rotation",
    10: "per_sparse_core_batch_size",
    11: "num_features",
}
_SHAPES = {6: "unsharded_shape", 7: "unsharded_padded_shape"}


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _packed(data: bytes) -> tuple[int, ...]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = decode_varint(data, pos)
        values.append(_signed(value))
    return tuple(values)


def _encode_layout(layout: TableLayout) -> bytes:
    """One `SparseCoreTableLayout`, fields in number order, defaults left out (as protobuf writes it)."""
    out = b""
    for number in range(1, 13):
        if number in _STRINGS:
            text = getattr(layout, _STRINGS[number])
            out += field_bytes(number, text.encode()) if text else b""
        elif number in _INTS:
            value = getattr(layout, _INTS[number])
            out += field_varint(number, value & ((1 << 64) - 1)) if value else b""
        else:
            shape = getattr(layout, _SHAPES[number])
            packed = b"".join(encode_varint(v & ((1 << 64) - 1)) for v in shape)
            out += field_bytes(number, packed) if shape else b""
    return out


def encode_layouts(layouts: Sequence[TableLayout]) -> bytes:
    """The serialized `SparseCoreTableLayouts` message holding `layouts` in order."""
    return b"".join(field_bytes(1, _encode_layout(layout)) for layout in layouts)


def _decode_layout(data: bytes) -> TableLayout:
    fields: dict[str, object] = {"unsharded_shape": (), "unsharded_padded_shape": ()}
    for number, value in iter_fields(data):
        if number in _STRINGS and isinstance(value, bytes):
            fields[_STRINGS[number]] = value.decode()
        elif number in _INTS and isinstance(value, int):
            fields[_INTS[number]] = _signed(value)
        elif number in _SHAPES:
            fields[_SHAPES[number]] = _packed(value) if isinstance(value, bytes) else (_signed(value),)
    for name in ("table_name", "stacked_table_name", "num_sparse_cores", "num_partitions"):
        if name not in fields:
            raise WireError(f"a SparseCoreTableLayout without its {name}")
    for name in ("total_rows_per_sparse_core_shard",):
        fields.setdefault(name, 0)
    return TableLayout(**fields)  # type: ignore[arg-type]


def decode_layouts(data: bytes) -> list[TableLayout]:
    """The layouts of a serialized `SparseCoreTableLayouts` message, checked (`check_stack` per stacked table).

    Raises:
      WireError: the bytes are not such a message, or a layout does not fit its stacked table.
    """
    layouts = [_decode_layout(value) for number, value in iter_fields(data) if number == 1 and isinstance(value, bytes)]
    by_stack: dict[str, list[TableLayout]] = {}
    for layout in layouts:
        by_stack.setdefault(layout.stacked_table_name, []).append(layout)
    for stacked in by_stack.values():
        try:
            check_stack(stacked)
        except ValueError as e:
            raise WireError(str(e)) from None
    return layouts


# Stacking ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StackRequest:
    """A table to place.

    `group`: tables of one group (one optimizer and quantization) may share
    a stack; stacks are listed in (padded width, group) order.
    `output_samples`: the activation rows it returns a step (the product of
    each feature's output shape, summed over its features).
    """

    name: str
    rows: int
    dim: int
    group: str
    output_samples: int
    num_features: int = 0


def _round_up(n: int, factor: int) -> int:
    return -(-n // factor) * factor


def stack_tables(
    tables: Sequence[StackRequest],
    *,
    num_partitions: int,
    sparse_cores_per_partition: int = SPARSE_CORES_PER_CHIP,
    stacking: bool = True,
    activation_bytes_limit: int = ACTIVATION_BYTES_LIMIT,
    shard_bytes_limit: int = SHARD_BYTES_LIMIT,
) -> list[TableLayout]:
    """The layouts TensorFlow 2.21 gives `tables` (its `SparseCoreLayoutStacker`, fed as `TPUEmbeddingV2` feeds it).

    Tables are placed in name order. A table joins the first stack of its
    padded width and group that stays below both byte limits (0: no limit)
    and the row limit, else starts a stack; within a stack each table's
    rotation advances by one chip's SparseCores. The result lists stacks
    by (padded width, group), then in the order they were started, tables
    in stack order.

    Raises:
      ValueError: no tables, two of one name, or a bad size.
    """
    if num_partitions < 1 or sparse_cores_per_partition < 1:
        raise ValueError(
            f"`num_partitions` and `sparse_cores_per_partition` must be >= 1. Received: {num_partitions}, "
            f"{sparse_cores_per_partition}."
        )
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        raise ValueError(f"Table names must be unique. Received: {names}.")
    shards = num_partitions * sparse_cores_per_partition
    stacks: dict[tuple[int, str], list[dict]] = {}
    for table in sorted(tables, key=lambda t: t.name):
        if table.rows < 1 or table.dim < 1:
            raise ValueError(f"Table {table.name!r} must have rows and dim >= 1. Received: {table.rows} x {table.dim}.")
        width = _round_up(table.dim, 8)
        height = _round_up(table.rows, shards * 8)
        activation = 4 * width * (table.output_samples // sparse_cores_per_partition)
        shard_bytes = 4 * width * height // num_partitions
        candidates = stacks.setdefault((width, table.group), [])
        chosen = None
        for stack in candidates if stacking else ():
            if activation_bytes_limit and stack["activation"] + activation >= activation_bytes_limit:
                continue
            if shard_bytes_limit and stack["shard_bytes"] + shard_bytes >= shard_bytes_limit:
                continue
            if stack["height"] + height >= _ROW_LIMIT:
                continue
            chosen = stack
            break
        if chosen is None:
            chosen = {"height": 0, "activation": 0, "shard_bytes": 0, "tables": []}
            candidates.append(chosen)
        chosen["tables"].append(
            dict(
                table_name=table.name,
                num_sparse_cores=shards,
                num_partitions=num_partitions,
                unsharded_shape=(table.rows, table.dim),
                unsharded_padded_shape=(height, width),
                sparse_core_shard_row_offset=chosen["height"] // shards,
                sparse_core_shard_rotation=(len(chosen["tables"]) * shards // num_partitions) % shards,
                per_sparse_core_batch_size=table.output_samples // sparse_cores_per_partition,
                num_features=table.num_features,
            )
        )
        chosen["height"] += height
        chosen["activation"] += activation
        chosen["shard_bytes"] += shard_bytes
    layouts = []
    for _, group_stacks in sorted(stacks.items()):
        for stack in group_stacks:
            stacked_name = "_".join(t["table_name"] for t in stack["tables"])
            rows = stack["height"] // shards
            layouts += [
                TableLayout(stacked_table_name=stacked_name, total_rows_per_sparse_core_shard=rows, **t)
                for t in stack["tables"]
            ]
    return layouts


# Moving rows -------------------------------------------------------------------------------------


def check_stack(layouts: Sequence[TableLayout]) -> None:
    """Checks that `layouts` describe one stacked table whose tables fit it without overlapping.

    Raises:
      ValueError: naming the table and the field that does not fit.
    """
    if not layouts:
        raise ValueError("A stacked table needs at least one table layout.")
    first = layouts[0]
    spans = []
    for layout in layouts:
        where = f"table {layout.table_name!r} (stacked table {layout.stacked_table_name!r})"
        for name in ("stacked_table_name", "num_sparse_cores", "total_rows_per_sparse_core_shard"):
            if getattr(layout, name) != getattr(first, name):
                raise ValueError(f"{where}: its {name} {getattr(layout, name)!r} differs from {first.table_name!r}'s.")
        if layout.unsharded_padded_shape[1] != first.unsharded_padded_shape[1]:
            raise ValueError(f"{where}: padded width {layout.unsharded_padded_shape[1]} differs from its stack's.")
        if len(layout.unsharded_shape) != 2 or len(layout.unsharded_padded_shape) != 2:
            raise ValueError(f"{where}: shapes must have two dimensions. Received: {layout.unsharded_shape}.")
        if layout.num_sparse_cores < 1 or layout.unsharded_padded_shape[0] % layout.num_sparse_cores:
            raise ValueError(
                f"{where}: padded rows {layout.unsharded_padded_shape[0]} are not a multiple of num_sparse_cores "
                f"{layout.num_sparse_cores}."
            )
        if not all(0 <= u <= p for u, p in zip(layout.unsharded_shape, layout.unsharded_padded_shape)):
            raise ValueError(
                f"{where}: unsharded_shape {layout.unsharded_shape} must fit unsharded_padded_shape "
                f"{layout.unsharded_padded_shape}."
            )
        start, stop = layout.sparse_core_shard_row_offset, layout.sparse_core_shard_row_offset + layout.rows_per_shard
        if start < 0 or stop > layout.total_rows_per_sparse_core_shard:
            raise ValueError(
                f"{where}: rows {start}..{stop} of each shard fall outside total_rows_per_sparse_core_shard "
                f"{layout.total_rows_per_sparse_core_shard}."
            )
        spans.append((start, stop, layout.table_name))
    spans.sort()
    for (_, stop, name), (start, _, other) in itertools.pairwise(spans):
        if start < stop:
            raise ValueError(f"Tables {name!r} and {other!r} overlap in stacked table {first.stacked_table_name!r}.")


def _stacked_shape(layout: TableLayout) -> tuple[int, int]:
    return (layout.num_sparse_cores * layout.total_rows_per_sparse_core_shard, layout.unsharded_padded_shape[1])


def unstack(stacked: np.ndarray, layout: TableLayout) -> np.ndarray:
    """Table `layout.table_name` out of its stacked table, in id order, padding cut (a new array).

    Raises:
      ValueError: `stacked` is not shaped as the layout says.
    """
    expected = _stacked_shape(layout)
    if tuple(stacked.shape) != expected:
        raise ValueError(
            f"Stacked table {layout.stacked_table_name!r} must be {expected[0]} x {expected[1]} (num_sparse_cores x "
            f"total_rows_per_sparse_core_shard, padded width) for table {layout.table_name!r}. "
            f"Received: {tuple(stacked.shape)}."
        )
    shards, per_shard = layout.num_sparse_cores, layout.rows_per_shard
    rows, dim = layout.unsharded_shape
    start = layout.sparse_core_shard_row_offset
    view = stacked.reshape(shards, layout.total_rows_per_sparse_core_shard, expected[1])[:, start : start + per_shard]
    view = np.roll(view, -layout.sparse_core_shard_rotation, axis=0)  # shard (r % S + rotation) % S holds row r
    return np.ascontiguousarray(view.transpose(1, 0, 2).reshape(per_shard * shards, expected[1])[:rows, :dim])


def stack(tables: Mapping[str, np.ndarray], layouts: Sequence[TableLayout]) -> np.ndarray:
    """One stacked table from the tables its `layouts` name (all of one stack), zeros in the padding.

    Raises:
      ValueError: a table is missing or not shaped as its layout says, or the layouts are not one stack.
    """
    check_stack(layouts)
    first = layouts[0]
    shards = first.num_sparse_cores
    out = np.zeros((shards, first.total_rows_per_sparse_core_shard, first.unsharded_padded_shape[1]), np.float32)
    for layout in layouts:
        if layout.table_name not in tables:
            raise ValueError(
                f"No values for table {layout.table_name!r} of stacked table {first.stacked_table_name!r}."
            )
        values = np.asarray(tables[layout.table_name])
        if tuple(values.shape) != tuple(layout.unsharded_shape):
            raise ValueError(
                f"Table {layout.table_name!r} must be {layout.unsharded_shape[0]} x {layout.unsharded_shape[1]}. "
                f"Received: {tuple(values.shape)}."
            )
        padded = np.zeros(layout.unsharded_padded_shape, np.float32)
        padded[: values.shape[0], : values.shape[1]] = values
        per_shard = layout.rows_per_shard
        by_shard = padded.reshape(per_shard, shards, -1).transpose(
            1, 0, 2
        )  # [S, rows / S, D]: shard s holds r % S == s
        start = layout.sparse_core_shard_row_offset
        out[:, start : start + per_shard] = np.roll(by_shard, layout.sparse_core_shard_rotation, axis=0)
    return out.reshape(_stacked_shape(first))
