"""Which rank owns which rows: TensorFlow's host sharding over W ranks (num_shards = W or a multiple)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.distributed import Ownership
from tpu_embedding_shim.engine.sharding import locate


@given(
    vocab=st.integers(1, 50),
    world=st.integers(1, 6),
    per_rank=st.integers(1, 3),
    strategy=st.sampled_from(["div", "mod"]),
)
@settings(max_examples=200, deadline=None)
def test_ranks_own_whole_shards(vocab, world, per_rank, strategy):
    """Shard j of num_shards = W * s lives on rank j // s (div) or j % W (mod); with s = 1 rank r owns
    what shard r owns. Local rows are in id order; take and join are inverses."""
    own = Ownership(vocab, world * per_rank, strategy, world)
    ids = np.arange(vocab)
    shard, _ = locate(ids, vocab, world * per_rank, strategy)
    owner, local = own.locate(ids)
    np.testing.assert_array_equal(owner, shard // per_rank if strategy == "div" else shard % world)
    if per_rank == 1:
        np.testing.assert_array_equal(local, locate(ids, vocab, world, strategy)[1])
    for rank in range(world):
        mine = own.owned_ids(rank)
        np.testing.assert_array_equal(mine, ids[owner == rank])
        np.testing.assert_array_equal(local[mine], np.arange(mine.shape[0]))
    assert own.sizes == [int((owner == rank).sum()) for rank in range(world)]
    full = np.random.default_rng(0).standard_normal((vocab, 2)).astype(np.float32)
    np.testing.assert_array_equal(own.join([own.take(full, rank) for rank in range(world)]), full)


def test_tensorflow_host_rules():
    """div: the first V % W ranks one row more; mod: id % W."""
    assert Ownership(10, 4, "div", 4).sizes == [3, 3, 2, 2]
    assert Ownership(10, 4, "div", 4).owned_ids(1).tolist() == [3, 4, 5]
    assert Ownership(10, 4, "mod", 4).owned_ids(1).tolist() == [1, 5, 9]
    assert Ownership(2, 3, "div", 3).sizes == [1, 1, 0]  # more ranks than rows: an empty rank


def test_num_shards_must_be_a_multiple_of_the_ranks():
    with pytest.raises(ValueError, match=r"Argument `num_shards` must be the number of ranks \(4\) or a multiple"):
        Ownership(10, 6, "div", 4)
