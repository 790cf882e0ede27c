"""SparseCore layouts and checkpoints against TensorFlow 2.21's own code: its layout stacker, its checkpoint
adapter (plain tables -> SparseCore layout) and its CPU restore of a stacked table (`SparseCoreStackedTableTrackable`).

- our `stack_tables` gives TensorFlow's stacker's layouts byte for byte, on generated tables;
- our `stack` gives what TensorFlow's adapter writes for the whole stacked table and for each chip's slice, and
  `unstack` what `unshuffle_from_sc_to_cpu` + `remove_padding_from_sc` give;
- a checkpoint TensorFlow writes from its adapter's values reads back here to the original tables and slots,
  bit for bit, through `read_sparsecore` and `checkpoint convert`;
- a checkpoint written here is read by TensorFlow: its tensors, its layouts (the adapter's
  `create_from_checkpoint`) and each table through TensorFlow's CPU restore.

Runs only where TensorFlow 2.16 or newer is installed (CI: its TensorFlow 2.21 venv); TensorFlow 2.15 has no
SparseCore layouts.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip(
    "tensorflow", reason="the TensorFlow interop tests need TensorFlow (tensorflow-cpu==2.21 in a separate venv)"
)
adapter = pytest.importorskip(
    "tensorflow.python.tpu.tpu_embedding_v3_checkpoint_adapter",
    reason="SparseCore checkpoints need TensorFlow >= 2.16 (this venv has an older one; CI runs these with 2.21)",
)
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2  # noqa: E402
from tensorflow.python.tpu import _pywrap_sparse_core_layout, tpu_embedding_v3_utils  # noqa: E402
from tensorflow.python.tpu.tpu_embedding_v3 import TPUEmbeddingShardedSaveable  # noqa: E402
from tensorflow.python.trackable import autotrackable  # noqa: E402
from tensorflow.python.trackable import base as trackable_base  # noqa: E402

from tests.engine.test_sparsecore_checkpoint import requests, tables_for  # noqa: E402
from tpu_embedding_shim.checkpoint_cli import convert  # noqa: E402
from tpu_embedding_shim.checkpoints.sparsecore import read_sparsecore, write_sparsecore  # noqa: E402
from tpu_embedding_shim.engine import checkpoint as engine_checkpoint  # noqa: E402
from tpu_embedding_shim.engine.sparsecore_layout import (  # noqa: E402
    StackRequest,
    decode_layouts,
    encode_layouts,
    stack,
    stack_tables,
    unstack,
)
from tpu_embedding_shim.engine.tf_bundle import BundleReader  # noqa: E402


def tf_layouts(reqs, partitions, per_chip, stacking=True):
    stacker = _pywrap_sparse_core_layout.SparseCoreLayoutStacker(
        num_partitions=partitions, disable_table_stacking=not stacking, sparse_cores_per_partition=per_chip
    )
    for r in sorted(reqs, key=lambda r: r.name):  # TPUEmbeddingV2 adds them in name order
        stacker.AddTable(
            table_name=r.name,
            table_height=r.rows,
            table_width=r.dim,
            group=r.group,
            output_samples=r.output_samples,
            num_features=r.num_features,
        )
    return stacker.GetLayouts()


def by_stack(layouts):
    out = {}
    for layout in layouts:
        out.setdefault(layout.stacked_table_name, []).append(layout)
    return {name: sorted(ls, key=lambda x: x.sparse_core_shard_row_offset) for name, ls in out.items()}


def adapter_stacked(tables, layouts, partition=None):
    """The stacked table (or one partition's rows of it) as TensorFlow's adapter makes it from plain tables."""
    first = layouts[0]
    total = first.num_sparse_cores * first.total_rows_per_sparse_core_shard
    width = first.unsharded_padded_shape[1]
    start, rows = 0, total
    if partition is not None:
        rows = total // first.num_partitions
        start = partition * rows
    spec = f"{total} {width} {start},{rows}:0,{width}"
    return adapter._shard_from_cpu_to_sc([tables[x.table_name] for x in layouts], spec, layouts).numpy()


@settings(max_examples=80, deadline=None)
@given(reqs=requests, partitions=st.integers(1, 4), per_chip=st.sampled_from([1, 2, 4]), stacking=st.booleans())
def test_stacking_and_rows_agree_with_tensorflow(reqs, partitions, per_chip, stacking):
    theirs = tf_layouts(reqs, partitions, per_chip, stacking)
    ours = stack_tables(reqs, num_partitions=partitions, sparse_cores_per_partition=per_chip, stacking=stacking)
    assert decode_layouts(theirs.SerializeToString()) == ours
    tables = tables_for(reqs)
    for name, layouts in by_stack(theirs.tables).items():
        mine = stack(tables, [x for x in ours if x.stacked_table_name == name])
        assert mine.tobytes() == adapter_stacked(tables, layouts).tobytes()
        per_partition = mine.shape[0] // partitions
        for p in range(partitions):
            part = adapter_stacked(tables, layouts, partition=p)
            assert part.tobytes() == mine[p * per_partition : (p + 1) * per_partition].tobytes()
        for theirs_layout in layouts:
            back = tpu_embedding_v3_utils.remove_padding_from_sc(
                tpu_embedding_v3_utils.unshuffle_from_sc_to_cpu(
                    mine,
                    num_sparse_cores=theirs_layout.num_sparse_cores,
                    offset_in_shard=theirs_layout.sparse_core_shard_row_offset,
                    size_in_shard=theirs_layout.unsharded_padded_shape[0] // theirs_layout.num_sparse_cores,
                    shard_rotation=theirs_layout.sparse_core_shard_rotation,
                ),
                tuple(theirs_layout.unsharded_shape),
            ).numpy()
            (our_layout,) = [x for x in ours if x.table_name == theirs_layout.table_name]
            assert back.tobytes() == unstack(mine, our_layout).tobytes() == tables[our_layout.table_name].tobytes()


class _ShardedStackedTable(trackable_base.Trackable):
    """A stacked table saved as a TPU saves it: one row slice per chip (TensorFlow's own
    `TPUEmbeddingShardedSaveable`, which `TPUEmbeddingShardedVariable` saves through)."""

    def __init__(self, value, num_partitions):
        rows = value.shape[0] // num_partitions
        self.shards = [tf.Variable(value[p * rows : (p + 1) * rows]) for p in range(num_partitions)]

    def _gather_saveables_for_checkpoint(self):
        def factory(name):
            n = len(self.shards)
            return [TPUEmbeddingShardedSaveable(v, i, n, 0, name) for i, v in enumerate(self.shards)]

        return {trackable_base.VARIABLE_VALUE_KEY: factory}


class _TPUEmbeddingV2Variables(autotrackable.AutoTrackable):
    """What a TPUEmbeddingV2 tracks for its checkpoint, as TensorFlow 2.21 tracks it (`_create_variables`:
    `<stacked>` and `<stacked>/<slot>`, then `_variables`, then `_track_restore_info_for_cpu`'s layouts);
    `num_partitions`: each stacked table in row slices per chip, as on a TPU (None: whole variables)."""

    def __init__(self, stacked, layouts, num_partitions=None):
        variables = {}
        for name, arrays in stacked.items():
            variables[name] = {}
            for what, value in arrays.items():
                local = name if what == "parameters" else f"{name}/{what}"
                if num_partitions:
                    variables[name][what] = _ShardedStackedTable(value, num_partitions)
                    self._track_trackable(variables[name][what], local)
                    continue
                variables[name][what] = self._add_variable_with_custom_getter(
                    name=local,
                    initializer=lambda shape, dtype, value=value: value,
                    shape=value.shape,
                    dtype=tf.float32,
                    getter=lambda name, shape, dtype, initializer, trainable: tf.Variable(
                        initializer(shape, dtype), name=name, trainable=False
                    ),
                    trainable=False,
                )
        if not num_partitions:
            self._variables = variables
        self._track_trackable(
            tpu_embedding_v3_utils.SparseCoreLayoutsTrackable(tf.constant(layouts.SerializeToString())),
            tpu_embedding_v3_utils.SPARSECORE_LAYOUTS_CHECKPOINT_KEY,
        )


REQUESTS = [StackRequest("items", 100, 8, "adagrad", 64, 1), StackRequest("users", 37, 5, "adagrad", 64, 1),
            StackRequest("tags", 50, 16, "adagrad", 128, 2)]  # fmt: skip


def plain_state(seed):
    tables = tables_for(REQUESTS, seed)
    return {name: {"embedding": t, "accumulators": np.abs(t) + 0.1} for name, t in tables.items()}


@pytest.mark.parametrize("num_partitions", [None, 2], ids=["whole", "sliced-per-chip"])
def test_a_checkpoint_tensorflows_adapter_makes_reads_back_to_the_original_tables(tmp_path, num_partitions):
    layouts = tf_layouts(REQUESTS, partitions=2, per_chip=4)
    state = plain_state(1)
    stacked = {
        name: {
            "parameters": adapter_stacked({t: a["embedding"] for t, a in state.items()}, members),
            "accumulators": adapter_stacked({t: a["accumulators"] for t, a in state.items()}, members),
        }
        for name, members in by_stack(layouts.tables).items()
    }
    embedding = _TPUEmbeddingV2Variables(stacked, layouts, num_partitions)
    prefix = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "tf" / "c"))
    if num_partitions:  # saved as a TPU saves it: row slices of one key
        key = "embedding/items_users/.ATTRIBUTES/VARIABLE_VALUE"
        assert BundleReader(prefix).entry(key).slices
    back = read_sparsecore(prefix)
    assert sorted(back) == sorted(state)
    for table, arrays in state.items():
        assert sorted(back[table]) == sorted(arrays)
        for what, values in arrays.items():
            assert back[table][what].tobytes() == values.tobytes(), (table, what)
    assert convert(prefix, str(tmp_path / "engine")) == 0
    converted, _, _ = engine_checkpoint.load_checkpoint(str(tmp_path / "engine" / "ckpt-0000000000"))
    assert all(converted[t][w].tobytes() == v.tobytes() for t, arrays in state.items() for w, v in arrays.items())


@pytest.mark.parametrize("sliced", [True, False], ids=["sliced-per-chip", "whole"])
def test_a_checkpoint_written_here_is_read_by_tensorflow(tmp_path, sliced):
    layouts = stack_tables(REQUESTS, num_partitions=2)
    state = plain_state(2)
    prefix = write_sparsecore(str(tmp_path / "ours" / "ckpt-1"), state, layouts, sliced=sliced)
    theirs = adapter.TpuEmbeddingV3CheckpointAdapter.create_from_checkpoint(prefix)
    expected = tf_layouts(REQUESTS, partitions=2, per_chip=4)
    assert {name: x.SerializeToString() for name, x in theirs._checkpoint_layouts.items()} == {
        x.table_name: x.SerializeToString() for x in expected.tables
    }
    reader = tf.train.load_checkpoint(prefix)
    for name, members in by_stack(expected.tables).items():
        embeddings = {t: a["embedding"] for t, a in state.items()}
        assert reader.get_tensor(f"embedding/{name}/.ATTRIBUTES/VARIABLE_VALUE").tobytes() == (
            adapter_stacked(embeddings, members).tobytes()
        )
        # TensorFlow's own CPU restore of a stacked table into one variable per table
        configs = {
            x.table_name: tf.tpu.experimental.embedding.TableConfig(
                vocabulary_size=x.unsharded_shape[0], dim=x.unsharded_shape[1], name=x.table_name
            )
            for x in members
        }
        restored = tpu_embedding_v3_utils.SparseCoreStackedTableTrackable(members, configs)
        parent = autotrackable.AutoTrackable()
        parent._track_trackable(restored, name)
        tf.train.Checkpoint(embedding=parent).read(prefix).expect_partial()
        for table, variable in restored.get_vars().items():
            assert variable.numpy().tobytes() == state[table]["embedding"].tobytes(), table


def test_layouts_proto_round_trips_through_tensorflows_message():
    expected = tf_layouts(REQUESTS, partitions=3, per_chip=4)
    ours = decode_layouts(expected.SerializeToString())
    parsed = sparse_core_layout_pb2.SparseCoreTableLayouts()
    parsed.ParseFromString(encode_layouts(ours))
    assert parsed == expected
