"""Sharding: div / mod layouts, round trips and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

from tpu_embedding_shim.engine.sharding import ShardedTable, join_shards, locate, shard_sizes, split_table
from tpu_embedding_shim.spec import RowIdInitializer


def ids_per_shard(vocabulary_size, num_shards, strategy):
    """Which global ids each shard holds, read off a row-id table."""
    table = ShardedTable(RowIdInitializer()((vocabulary_size, 1)), num_shards, strategy)
    return [s[:, 0].astype(int).tolist() for s in table.shards]


def test_the_13_over_5_example_of_the_tf_docs():
    assert ids_per_shard(13, 5, "div") == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10], [11, 12]]
    assert ids_per_shard(13, 5, "mod") == [[0, 5, 10], [1, 6, 11], [2, 7, 12], [3, 8], [4, 9]]


@pytest.mark.parametrize(
    "vocabulary_size,num_shards,sizes",
    [
        (13, 5, [3, 3, 3, 2, 2]),
        (12, 4, [3, 3, 3, 3]),
        (7, 1, [7]),
        (1, 1, [1]),
        (3, 5, [1, 1, 1, 0, 0]),
        (28, 3, [10, 9, 9]),
    ],
)
@pytest.mark.parametrize("strategy", ["div", "mod"])
def test_shard_sizes(vocabulary_size, num_shards, sizes, strategy):
    assert shard_sizes(vocabulary_size, num_shards, strategy) == sizes


def test_more_shards_than_rows_gives_empty_shards():
    t = ShardedTable(np.ones((2, 3), np.float32), 4, "div")
    assert [s.shape for s in t.shards] == [(1, 3), (1, 3), (0, 3), (0, 3)]
    assert ids_per_shard(3, 5, "div") == [[0], [1], [2], [], []]
    assert ids_per_shard(3, 5, "mod") == [[0], [1], [2], [], []]
    np.testing.assert_array_equal(t.to_full(), np.ones((2, 3)))


@pytest.mark.parametrize("strategy", ["div", "mod"])
def test_locate_agrees_with_split_for_every_small_case(strategy):
    for vocabulary_size in range(1, 21):
        full = RowIdInitializer()((vocabulary_size, 1))
        ids = np.arange(vocabulary_size)
        for num_shards in range(1, 9):
            shards = split_table(full, num_shards, strategy)
            shard, row = locate(ids, vocabulary_size, num_shards, strategy)
            found = np.array([shards[s][r, 0] for s, r in zip(shard, row)])
            np.testing.assert_array_equal(found, ids)
            np.testing.assert_array_equal(join_shards(shards, vocabulary_size, strategy), full)
            if strategy == "div":  # contiguous ranges
                assert (np.diff(shard) >= 0).all()


def test_locate_keeps_the_shape_of_ids():
    shard, row = locate(np.array([[0, 12], [5, 6]]), 13, 5, "mod")
    assert shard.tolist() == [[0, 2], [0, 1]] and row.tolist() == [[0, 2], [1, 1]]


def test_gather_scatter_and_full():
    full = RowIdInitializer()((11, 2))
    for strategy in ("div", "mod"):
        t = ShardedTable(full, 3, strategy)
        assert (t.vocabulary_size, t.dim, t.num_shards, t.strategy) == (11, 2, 3, strategy)
        assert t.shape == (11, 2) and len(t) == 11 and t.dtype == np.float32
        np.testing.assert_array_equal(t[np.array([[10, 0], [4, 4]])], full[[[10, 0], [4, 4]]])
        np.testing.assert_array_equal(t.gather([3]), full[[3]])
        assert t[np.zeros(0, np.int64)].shape == (0, 2)
        assert t[7].shape == (2,)
        t.scatter([10, 2], [[-1.0, -1.0], [-2.0, -2.0]])
        expected = full.copy()
        expected[[10, 2]] = [[-1.0, -1.0], [-2.0, -2.0]]
        np.testing.assert_array_equal(t.to_full(), expected)
        np.testing.assert_array_equal(np.asarray(t), expected)
        copy = t.to_full()
        copy[:] = 0
        assert t[[5]][0, 0] == 5.0  # to_full is a copy


def test_load_per_shard():
    t = ShardedTable(np.zeros((13, 1)), 5, "mod")
    assert t.load_per_shard(np.array([0, 5, 10, 3, 4, 4])).tolist() == [3, 0, 0, 1, 2]
    t = ShardedTable(np.zeros((13, 1)), 5, "div")
    assert t.load_per_shard([[0, 5], [10, 12]]).tolist() == [1, 1, 0, 1, 1]
    assert t.load_per_shard([]).tolist() == [0, 0, 0, 0, 0]


def test_repr_names_the_layout():
    assert repr(ShardedTable(np.zeros((4, 2)), 2, "mod")) == (
        "ShardedTable(vocabulary_size=4, dim=2, num_shards=2, strategy='mod')"
    )


# (name, call, error, fragments)
ERRORS = [
    ("num_shards_zero", lambda: shard_sizes(10, 0, "div"), ValueError, ["`num_shards`", ">= 1", "0"]),
    ("num_shards_float", lambda: ShardedTable(np.zeros((4, 1)), 2.5, "div"), ValueError, ["`num_shards`", "2.5"]),
    ("num_shards_str", lambda: locate([1], 4, "2", "div"), TypeError, ["`num_shards`"]),
    ("vocabulary_zero", lambda: shard_sizes(0, 2, "mod"), ValueError, ["`vocabulary_size`"]),
    (
        "strategy_unknown",
        lambda: shard_sizes(4, 2, "round_robin"),
        ValueError,
        ["`strategy`", "'div', 'mod'", "round_robin"],
    ),
    ("strategy_case", lambda: ShardedTable(np.zeros((4, 1)), 2, "DIV"), ValueError, ["`strategy`", "case-sensitive"]),
    ("id_too_big", lambda: locate([4], 4, 2, "div"), ValueError, ["`ids`", "[0, 4)", "4"]),
    ("negative_id", lambda: ShardedTable(np.zeros((4, 1)), 2, "mod")[np.array([-1])], ValueError, ["`ids`", "-1"]),
    ("float_ids", lambda: locate([1.0], 4, 2, "div"), TypeError, ["`ids`", "float"]),
    ("table_rank", lambda: ShardedTable(np.zeros(4), 2, "div"), ValueError, ["`full`", "(4,)"]),
    ("split_rank", lambda: split_table(np.zeros((2, 2, 2)), 2, "div"), ValueError, ["`full`"]),
    (
        "join_sizes",
        lambda: join_shards([np.zeros((2, 1)), np.zeros((3, 1))], 5, "div"),
        ValueError,
        ["`shards`", "[3, 2]"],
    ),
    ("join_dims", lambda: join_shards([np.zeros((2, 1)), np.zeros((2, 2))], 4, "mod"), ValueError, ["`shards`"]),
    ("join_empty", lambda: join_shards([], 4, "mod"), ValueError, ["`shards`"]),
    (
        "scatter_duplicates",
        lambda: ShardedTable(np.zeros((4, 1)), 2, "div").scatter([1, 1], [[1.0], [2.0]]),
        ValueError,
        ["`ids`", "repeat"],
    ),
]


@pytest.mark.parametrize("name,call,error,fragments", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_the_argument(name, call, error, fragments):
    with pytest.raises(error) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"
