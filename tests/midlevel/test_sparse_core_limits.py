"""SparseCore's limits on TPUEmbeddingV2 (TensorFlow 2.21's preprocessing, `api/sparse_core_limits.py`).

The statistics are checked against a direct count of the rule (SparseCore c gets samples [c*k, (c+1)*k), an id goes to
partition id % 4); the errors are TensorFlow's; dropping keeps exactly the entries that fit the buffer, each with the
gain TensorFlow gives it (the whole sample's combiner scale).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import sparse_core_limits as limits

E = tf.tpu.experimental.embedding


def make(combiner="mean", config=None, vocabulary=64, optimizer=None):
    table = E.TableConfig(
        vocabulary_size=vocabulary, dim=2, combiner=combiner, name="t", initializer=E.RowIdInitializer()
    )
    with tf.distribute.TPUStrategy().scope():
        embedding = E.TPUEmbeddingV2(
            feature_config={"f": E.FeatureConfig(table=table)},
            optimizer=optimizer or E.SGD(1.0),
            sparse_core_embedding_config=config,
        )
    return embedding, table


batches = st.lists(st.lists(st.integers(0, 63), max_size=6), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(rows=batches)
def test_counts_follow_the_rule(rows):
    samples = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    ids = np.array([i for r in rows for i in r], np.int64)
    stats = limits.table_statistics("t", [(samples, ids, len(rows))], num_replicas=1, max_ids_per_chip_per_sample=64)
    chunk = -(-len(rows) // 4)
    expected = np.zeros((4, 4), int)
    unique = [[set() for _ in range(4)] for _ in range(4)]
    for s, i in {(int(s), int(i)) for s, i in zip(samples, ids)}:  # repeated (sample, id) pairs are one entry
        expected[s // chunk, i % 4] += 1
        unique[s // chunk][i % 4].add(i)
    assert stats.ids.tolist() == expected.tolist()
    assert stats.unique_ids.tolist() == [[len(u) for u in row] for row in unique]
    assert stats.dropped == 0 and stats.buffer_size == 64 * chunk * 4


@settings(max_examples=60, deadline=None)
@given(rows=batches, per_sample=st.integers(1, 4))
def test_dropping_keeps_a_prefix_of_the_buffer_order(rows, per_sample):
    samples = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    ids = np.array([i for r in rows for i in r], np.int64)
    stats = limits.table_statistics(
        "t", [(samples, ids, len(rows))], num_replicas=1, max_ids_per_chip_per_sample=per_sample * 2
    )
    total = len({(int(s), int(i)) for s, i in zip(samples, ids)})
    assert 0 <= stats.dropped <= total
    assert (stats.dropped > 0) == (stats.buffer_needed > stats.buffer_size)
    # The dropped entries are the last in buffer order: SparseCore, partition, id, sample.
    chunk = -(-len(rows) // 4)
    pairs = {(int(s), int(i)) for s, i in zip(samples, ids)}
    order = sorted(pairs, key=lambda p: (p[0] // chunk, p[1] % 4, p[1], p[0]))
    tail = order[len(order) - stats.dropped :]
    assert [(int(s), int(i)) for _, s, i in stats.dropped_entries] == tail


def test_the_per_partition_limits_raise_tensorflows_error_and_never_drop():
    config = E.SparseCoreEmbeddingConfig(max_ids_per_table={"t": 1}, allow_id_dropping=True)
    embedding, table = make(config=config)
    before = embedding.embedding_tables[table].copy()
    with pytest.raises(ValueError, match=r"Sparse core 1 gets 2 ids while the max ids per sparse core is set to be 1"):
        embedding({"f": tf.ragged.constant([[1, 5], [2], [3], [4]])})
    np.testing.assert_array_equal(embedding.embedding_tables[table], before)
    config = E.SparseCoreEmbeddingConfig(max_unique_ids_per_table={"t": 1})
    embedding, _ = make(config=config)
    with pytest.raises(ValueError, match=r"Sparse core 1 gets 2 unique ids while the max unique ids"):
        embedding({"f": tf.ragged.constant([[1, 5], [2], [3], [4]])})


def test_a_full_buffer_raises_without_dropping():
    embedding, _ = make(config=E.SparseCoreEmbeddingConfig(max_ids_per_chip_per_sample=2))
    with pytest.raises(
        ValueError,
        match=r"max_ids_per_chip is set to be 8 which is not going to fit all ids. The "
        r"remaining id count is 11 \. Please consider setting the allow_id_dropping to be true",
    ):
        embedding({"f": tf.ragged.constant([[1, 2, 3], [4, 5, 9], [8, 12, 13], [16, 17, 21]])})
    assert embedding.dropped_ids == []


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_dropped_ids_are_gone_and_the_kept_keep_the_whole_samples_gain(combiner):
    config = E.SparseCoreEmbeddingConfig(max_ids_per_chip_per_sample=2, allow_id_dropping=True)
    embedding, table = make(combiner, config)
    rows = [[1, 2, 3], [4, 5, 9], [8, 12, 13], [16, 17, 21]]
    activations, preserved = embedding({"f": tf.ragged.constant(rows)})
    stats = embedding.sparse_core_statistics["t"]
    # Buffer 8: SparseCore 0 fits partition 1 (id 1, padded to 8), then nothing more.
    assert (stats.buffer_size, stats.dropped, embedding.dropped_ids) == (8, 11, [{"t": 11}])
    scale = {"sum": 1.0, "mean": 1 / 3, "sqrtn": 1 / np.sqrt(3)}[combiner]
    expected = np.zeros((4, 2), np.float32)
    expected[0] = 1.0 * scale  # row 1 of a RowIdInitializer table is all 1
    np.testing.assert_allclose(activations["f"], expected, rtol=1e-6)
    assert preserved["t"].sorted_token_ids.tolist() == [1]
    np.testing.assert_allclose(preserved["t"].sorted_gains, [scale], rtol=1e-6)
    embedding.apply_gradients({"f": np.ones((4, 2), np.float32)}, preserved)
    column = embedding.embedding_tables[table][:, 0]
    np.testing.assert_allclose(column[1], 1 - scale, rtol=1e-6)
    np.testing.assert_array_equal(column[2:], np.arange(2, 64))  # every dropped row untouched


def test_nothing_dropped_changes_nothing():
    rows = [[1, 2, 3], [4, 5, 9], [8, 12, 13], [16, 17, 21]]
    wide, _ = make(config=E.SparseCoreEmbeddingConfig(allow_id_dropping=True))
    plain, _ = make()
    a, _ = wide({"f": tf.ragged.constant(rows)})
    b, _ = plain({"f": tf.ragged.constant(rows)})
    np.testing.assert_array_equal(a["f"], b["f"])
    assert wide.dropped_ids == [{"t": 0}] and wide.sparse_core_statistics["t"].max_ids == 2


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(max_ids_per_chip_per_sample=0), ValueError),
        (dict(max_ids_per_chip_per_sample="64"), TypeError),
        (dict(allow_id_dropping=1), TypeError),
        (dict(max_ids_per_table={"t": 0}), ValueError),
        (dict(max_unique_ids_per_table=[("t", 4)]), TypeError),
    ],
)
def test_sparse_core_config_refuses_bad_values(kwargs, error):
    with pytest.raises(error, match="SparseCoreEmbeddingConfig"):
        E.SparseCoreEmbeddingConfig(**kwargs)


def test_what_tensorflow_cannot_run_on_sparse_core_is_refused_when_built():
    def build(table, optimizer=None):
        with tf.distribute.TPUStrategy().scope():
            return E.TPUEmbeddingV2(feature_config=E.FeatureConfig(table=table), optimizer=optimizer or E.SGD(0.1))

    custom = E.CustomOptimizer(lambda *a: a[1], learning_rate=0.1)
    with pytest.raises(ValueError, match="Unsupported optimizer in minibatching mode"):
        build(E.TableConfig(vocabulary_size=4, dim=2, name="a"), custom)
    combiner = E.CustomCombiner(lambda valency, vectors: vectors[0], max_valency=4)
    with pytest.raises(TypeError, match="Expected string for argument 'combiner'"):
        build(E.TableConfig(vocabulary_size=4, dim=2, name="a", combiner=combiner))
    with pytest.raises(NotImplementedError, match="float32"):
        build(E.TableConfig(vocabulary_size=4, dim=2, name="a", dtype=tf.int32))


def test_compute_sparse_core_stats_sizes_the_limits_from_a_batch():
    table = E.TableConfig(vocabulary_size=64, dim=2, name="t")
    config = {"f": E.FeatureConfig(table=table), "g": E.FeatureConfig(table=table)}
    features = {"f": tf.ragged.constant([[1, 5], [2], [3], [4]]), "g": tf.ragged.constant([[5], [9], [13], [1]])}
    max_ids, max_unique = E.TPUEmbeddingV2.compute_sparse_core_stats(features, config, num_tpu_chips=1)
    # SparseCore 0 has sample 0 of f (ids 1, 5) and of g (id 5): partition 1 gets 3 pairs, 2 distinct ids.
    assert (max_ids, max_unique) == ({"t": 3}, {"t": 2})
    assert table.name == "t" and table.optimizer is None  # the config is not changed
    exact = E.SparseCoreEmbeddingConfig(max_ids_per_table=max_ids, max_unique_ids_per_table=max_unique)
    tight = E.SparseCoreEmbeddingConfig(max_ids_per_table={"t": 2})
    with tf.distribute.TPUStrategy().scope():
        E.TPUEmbeddingV2(config, E.SGD(0.1), sparse_core_embedding_config=exact)(features)
        with pytest.raises(ValueError, match="gets 3 ids"):
            E.TPUEmbeddingV2(config, E.SGD(0.1), sparse_core_embedding_config=tight)(features)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.tuples(st.integers(0, 63), st.sampled_from([0.5, 1.0, 2.0])), max_size=5), min_size=4, max_size=8
    ),
    combiner=st.sampled_from(["sum", "mean", "sqrtn"]),
    per_sample=st.integers(1, 6),
)
def test_activations_after_dropping_are_the_kept_entries_with_whole_sample_gains(rows, combiner, per_sample):
    config = E.SparseCoreEmbeddingConfig(max_ids_per_chip_per_sample=per_sample * 2, allow_id_dropping=True)
    embedding, _ = make(combiner, config)
    ids = tf.ragged.constant([[i for i, _ in r] for r in rows], dtype=tf.int64)
    weights = tf.ragged.constant([[w for _, w in r] for r in rows], dtype=tf.float32)
    activations, _ = embedding({"f": ids}, weights={"f": weights})
    gone = {(int(s), int(i)) for _, s, i in embedding.sparse_core_statistics["t"].dropped_entries}
    expected = np.zeros(len(rows))
    for s, row in enumerate(rows):
        w = np.array([w for _, w in row])
        denominator = {"sum": 1.0, "mean": w.sum(), "sqrtn": np.sqrt((w * w).sum())}[combiner]
        expected[s] = sum(w * i for i, w in row if (s, i) not in gone) / denominator if row else 0.0
    np.testing.assert_allclose(activations["f"][:, 0], expected, rtol=1e-5, atol=1e-5)


def test_stacked_tables_share_their_limits_under_the_stacked_name():
    a = E.TableConfig(vocabulary_size=64, dim=2, name="a")
    b = E.TableConfig(vocabulary_size=64, dim=3, name="b")  # padded width 8 too: stacked with a
    c = E.TableConfig(vocabulary_size=64, dim=9, name="c")  # padded width 16: alone
    config = {"x": E.FeatureConfig(table=a), "y": E.FeatureConfig(table=b), "z": E.FeatureConfig(table=c)}
    features = {k: tf.ragged.constant([[1], [2], [3], [4]]) for k in "xyz"}
    # SparseCore 0 sends id 1 of a and id 1 of b to partition 1: 2 ids for the stack a_b.
    assert E.TPUEmbeddingV2.compute_sparse_core_stats(features, config, num_tpu_chips=1) == (
        {"a_b": 2, "c": 1},
        {"a_b": 2, "c": 1},
    )
    with tf.distribute.TPUStrategy().scope():
        stacked = E.SparseCoreEmbeddingConfig(max_ids_per_table={"a_b": 1})
        with pytest.raises(ValueError, match="gets 2 ids .* for table a_b"):
            E.TPUEmbeddingV2(config, E.SGD(0.1), sparse_core_embedding_config=stacked)(features)
        with pytest.warns(UserWarning, match="stacks into 'a_b'"):
            by_table = E.TPUEmbeddingV2(
                config, E.SGD(0.1), sparse_core_embedding_config=E.SparseCoreEmbeddingConfig(max_ids_per_table={"a": 1})
            )
        by_table(features)  # as on a TPU: the stack a_b is not named, so it gets 256
        unstacked = E.SparseCoreEmbeddingConfig(max_ids_per_table={"a": 1}, disable_table_stacking=True)
        E.TPUEmbeddingV2(config, E.SGD(0.1), sparse_core_embedding_config=unstacked)(features)
        assert sorted(by_table.sparse_core_statistics) == ["a_b", "c"]


def test_a_stacked_tables_rotation_moves_its_ids_to_other_partitions():
    stacks = limits.stack_tables(
        [("a", 8, 4, "g0", 8), ("b", 8, 4, "g0", 8), ("c", 8, 4, "g1", 8)], num_replicas=2, disabled=False
    )
    assert [(s.name, s.rotations) for s in stacks] == [("a_b", (0, 4)), ("c", (0,))]
    one = (np.array([0]), np.array([1]), 4)
    stats = limits.table_statistics("a_b", [(*one, 0, 0), (*one, 1, 4)], num_replicas=2, max_ids_per_chip_per_sample=8)
    assert stats.ids[0].tolist() == [0, 1, 0, 0, 0, 1, 0, 0]  # id 1 of a on partition 1, of b on 1 + 4
