"""SparseCore layouts and checkpoints without TensorFlow: stacking, rows moved both ways, the layouts proto, a
checkpoint written and read back, `checkpoint convert` and `migrate` reading one, and bad input refused.

TensorFlow 2.21's own stacker, adapter and CPU restore check the same code in
tests/tf_interop/test_sparsecore_interop.py.
"""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.checkpoint_cli import convert
from tpu_embedding_shim.checkpoints.sparsecore import LAYOUTS_NAME, find_sparsecore, read_sparsecore, write_sparsecore
from tpu_embedding_shim.engine import CheckpointError
from tpu_embedding_shim.engine import checkpoint as engine_checkpoint
from tpu_embedding_shim.engine.sparsecore_layout import (
    StackRequest,
    TableLayout,
    check_stack,
    decode_layouts,
    encode_layouts,
    stack,
    stack_tables,
    unstack,
)
from tpu_embedding_shim.engine.tf_bundle import BundleReader, write_bundle
from tpu_embedding_shim.engine.tf_bundle.wire import WireError
from tpu_embedding_shim.migrate.source import load_source
from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

requests = st.lists(
    st.builds(
        StackRequest,
        name=st.text("abcxyz_", min_size=1, max_size=4),
        rows=st.integers(1, 400),
        dim=st.integers(1, 24),
        group=st.sampled_from(["g1", "g2"]),
        output_samples=st.sampled_from([8, 64, 4096, 2**16, 2**16 + 4, 2**17]),
        num_features=st.integers(0, 3),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda r: r.name,
)
"""Tables to stack: names that sort in every order, widths on both sides of a multiple of 8, activations on both
sides of the 2 MiB limit (also used by tests/tf_interop/test_sparsecore_interop.py)."""


def tables_for(reqs, seed=0):
    rng = np.random.default_rng(seed)
    return {r.name: rng.standard_normal((r.rows, r.dim)).astype(np.float32) for r in reqs}


@settings(max_examples=60, deadline=None)
@given(reqs=requests, partitions=st.integers(1, 4), per_chip=st.sampled_from([1, 2, 4]), stacking=st.booleans())
def test_every_table_comes_back_bit_for_bit_from_its_stack(reqs, partitions, per_chip, stacking):
    layouts = stack_tables(reqs, num_partitions=partitions, sparse_cores_per_partition=per_chip, stacking=stacking)
    assert sorted(layout.table_name for layout in layouts) == sorted(r.name for r in reqs)
    tables = tables_for(reqs)
    stacks = {}
    for layout in layouts:
        stacks.setdefault(layout.stacked_table_name, []).append(layout)
    for name, members in stacks.items():
        assert name == "_".join(m.table_name for m in members)
        stacked = stack(tables, members)
        assert stacked.shape == (
            members[0].num_sparse_cores * members[0].total_rows_per_sparse_core_shard,
            members[0].unsharded_padded_shape[1],
        )
        for layout in members:
            assert unstack(stacked, layout).tobytes() == tables[layout.table_name].tobytes()
        # every value is somewhere once, the rest is zero padding
        assert np.count_nonzero(stacked) == sum(np.count_nonzero(tables[m.table_name]) for m in members)
    assert decode_layouts(encode_layouts(layouts)) == layouts


def test_a_row_lands_where_map_indices_in_shard_says():
    layouts = stack_tables([StackRequest("a", 100, 8, "g", 64), StackRequest("b", 37, 8, "g", 64)], num_partitions=2)
    b = layouts[1]
    assert (b.stacked_table_name, b.sparse_core_shard_row_offset, b.sparse_core_shard_rotation) == ("a_b", 16, 4)
    values = np.arange(37, dtype=np.float32)[:, None] * np.ones((1, 8), np.float32)
    stacked = stack({"a": np.zeros((100, 8), np.float32), "b": values}, layouts).reshape(8, 24, 8)
    shards, rows = b.shard_and_row(np.arange(37))
    assert (stacked[shards, rows, 0] == np.arange(37)).all()


def test_stacks_split_at_the_activation_and_shard_limits():
    def names(samples, rows=64):
        reqs = [StackRequest(n, rows, 8, "g", samples) for n in "ab"]
        return [layout.stacked_table_name for layout in stack_tables(reqs, num_partitions=1)]

    assert names(2**16) == ["a_b", "a_b"]  # 2 x 512 KiB of activations per SparseCore: below 2 MiB
    assert names(2**17) == ["a", "b"]  # 2 x 1 MiB: not below
    assert names(64, rows=2**24) == ["a_b", "a_b"]  # 2 x 512 MiB a partition: below 2 GiB
    assert names(64, rows=2**25) == ["a", "b"]
    reqs = [StackRequest(n, 64, 8, "g", 64) for n in "ab"]
    assert [x.stacked_table_name for x in stack_tables(reqs, num_partitions=1, stacking=False)] == ["a", "b"]
    # different groups (optimizers) or padded widths never share a stack
    mixed = [StackRequest("a", 64, 8, "g", 64), StackRequest("b", 64, 8, "h", 64), StackRequest("c", 64, 9, "g", 64)]
    assert sorted({x.stacked_table_name for x in stack_tables(mixed, num_partitions=1)}) == ["a", "b", "c"]


def test_bad_requests_and_layouts_are_refused():
    with pytest.raises(ValueError, match="unique"):
        stack_tables([StackRequest("a", 8, 8, "g", 8)] * 2, num_partitions=1)
    with pytest.raises(ValueError, match="num_partitions"):
        stack_tables([StackRequest("a", 8, 8, "g", 8)], num_partitions=0)
    with pytest.raises(ValueError, match="rows and dim"):
        stack_tables([StackRequest("a", 0, 8, "g", 8)], num_partitions=1)
    (layout,) = stack_tables([StackRequest("a", 20, 4, "g", 8)], num_partitions=1)
    with pytest.raises(ValueError, match="must be 32 x 8"):
        unstack(np.zeros((30, 8), np.float32), layout)
    with pytest.raises(ValueError, match="must be 20 x 4"):
        stack({"a": np.zeros((20, 5), np.float32)}, [layout])
    with pytest.raises(ValueError, match="No values for table 'a'"):
        stack({}, [layout])
    outside = TableLayout("a", "a", 4, 1, 8, (20, 4), (32, 8), sparse_core_shard_row_offset=1)
    with pytest.raises(ValueError, match="fall outside"):
        check_stack([outside])
    overlapping = [
        TableLayout("a", "a_b", 4, 1, 8, (16, 4), (16, 8)),
        TableLayout("b", "a_b", 4, 1, 8, (16, 4), (16, 8), sparse_core_shard_row_offset=2),
    ]
    with pytest.raises(ValueError, match="overlap"):
        check_stack(overlapping)
    with pytest.raises(WireError, match="overlap"):
        decode_layouts(encode_layouts(overlapping))
    with pytest.raises(WireError):
        decode_layouts(b"\x0a\x05\x0a\x01")  # a layout cut short


def state_of(layouts, seed=0):
    rng = np.random.default_rng(seed)
    return {
        x.table_name: {
            "embedding": rng.standard_normal(x.unsharded_shape).astype(np.float32),
            "accumulators": rng.random(x.unsharded_shape).astype(np.float32),
        }
        for x in layouts
    }


LAYOUTS = stack_tables(
    [StackRequest("items", 100, 8, "adagrad", 64), StackRequest("users", 37, 5, "adagrad", 64)], num_partitions=2
)


def test_a_written_checkpoint_reads_back_as_the_same_tables(tmp_path):
    state = state_of(LAYOUTS)
    prefix = write_sparsecore(str(tmp_path / "ckpt-1"), state, LAYOUTS)
    reader = BundleReader(prefix)
    assert sorted(reader.names()) == [
        "_CHECKPOINTABLE_OBJECT_GRAPH",
        f"embedding/{LAYOUTS_NAME}/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/items_users.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/items_users/.ATTRIBUTES/VARIABLE_VALUE",
    ]
    (found,) = find_sparsecore(reader)
    assert found.path == "embedding" and list(found.layouts) == LAYOUTS
    back = read_sparsecore(prefix)
    assert {t: sorted(a) for t, a in back.items()} == {t: ["accumulators", "embedding"] for t in state}
    for table, arrays in state.items():
        for name, values in arrays.items():
            assert back[table][name].tobytes() == values.tobytes()


def test_convert_and_migrate_take_a_sparsecore_checkpoint(tmp_path, capsys):
    state = state_of(LAYOUTS, seed=3)
    prefix = write_sparsecore(str(tmp_path / "sc" / "ckpt-1"), state, LAYOUTS, update_state=True)
    assert convert(prefix, str(tmp_path / "engine")) == 0
    converted, step, _ = engine_checkpoint.load_checkpoint(str(tmp_path / "engine" / "ckpt-0000000000"))
    assert step == 0
    for table, arrays in state.items():
        for name, values in arrays.items():
            assert converted[table][name].tobytes() == values.tobytes()
    assert "SparseCore checkpoint" in capsys.readouterr().err
    spec = EmbeddingSpec(
        tables=(
            TableSpec(name="items", vocabulary_size=100, dim=8),
            TableSpec(name="users", vocabulary_size=37, dim=5),
        ),
        features=(
            FeatureSpec(name="item", table="items", num_buckets=100),
            FeatureSpec(name="user", table="users", num_buckets=37),
        ),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    for where in (prefix, str(tmp_path / "sc")):
        source = load_source(spec, where)
        assert source.state["users"]["accumulators"].tobytes() == state["users"]["accumulators"].tobytes()
        assert source.origin.startswith("SparseCore checkpoint")
    wrong = EmbeddingSpec(
        tables=(TableSpec(name="items", vocabulary_size=99, dim=8),),
        features=(FeatureSpec(name="item", table="items", num_buckets=99),),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    with pytest.raises(CheckpointError, match=r"table 'items' is \[100, 8\].*\[99, 8\]"):
        load_source(wrong, prefix)


def test_damaged_checkpoints_and_bad_state_are_refused_and_write_nothing(tmp_path):
    state = state_of(LAYOUTS)
    with pytest.raises(ValueError, match="exactly the layouts' tables"):
        write_sparsecore(str(tmp_path / "a"), {"items": state["items"]}, LAYOUTS)
    uneven = {**state, "users": {"embedding": state["users"]["embedding"]}}
    with pytest.raises(ValueError, match="same slots"):
        write_sparsecore(str(tmp_path / "a"), uneven, LAYOUTS)
    assert os.listdir(tmp_path) == []
    key = f"embedding/{LAYOUTS_NAME}/.ATTRIBUTES/VARIABLE_VALUE"
    stacked = "embedding/items_users/.ATTRIBUTES/VARIABLE_VALUE"
    good = np.array(encode_layouts(LAYOUTS), dtype=object)
    cases = {
        "not a valid": {key: np.array(b"\x0a\x05\x0a\x01", dtype=object), stacked: np.zeros((192, 8), np.float32)},
        "has no": {key: good},
        r"is \[10, 8\]; its layouts say \[192, 8\]": {key: good, stacked: np.zeros((10, 8), np.float32)},
    }
    for i, (message, tensors) in enumerate(cases.items()):
        prefix = write_bundle(str(tmp_path / f"bad-{i}"), tensors)
        with pytest.raises(CheckpointError, match=message):
            read_sparsecore(prefix)
    plain = write_bundle(str(tmp_path / "plain"), {"t": np.zeros((2, 2), np.float32)})
    with pytest.raises(CheckpointError, match="the checkpoint has no"):
        read_sparsecore(plain)
