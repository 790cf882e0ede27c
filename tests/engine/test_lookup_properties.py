"""Properties of the lookup kernels that hold for every input (hypothesis)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.lookup import (
    pooled_backward,
    pooled_lookup,
    sequence_backward,
    sequence_lookup,
    sum_duplicates,
)
from tpu_embedding_shim.engine.ragged import Ragged, to_ragged
from tpu_embedding_shim.engine.sharding import ShardedTable
from tpu_embedding_shim.spec import COMBINERS, FeatureSpec

SETTINGS = settings(max_examples=60, deadline=None)
combiners = st.sampled_from(COMBINERS)
V_MAX = 12


class Case(NamedTuple):
    table: np.ndarray  # float32 [V, D]
    batch: Ragged


def _weights(draw, n, kind):
    if kind == "none":
        return None
    low = 0.125 if kind == "positive" else -2.0
    values = draw(st.lists(st.floats(low, 2.0, width=32), min_size=n, max_size=n))
    return np.array(values, dtype=np.float32)


@st.composite
def cases(draw, weights=("none", "positive", "any"), max_len=5, vocab=None):
    """A random table and a random batch of ragged ids into it."""
    vocab = vocab or draw(st.integers(1, V_MAX))
    dim = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    table = np.random.default_rng(seed).standard_normal((vocab, dim)).astype(np.float32)
    lengths = draw(st.lists(st.integers(0, max_len), min_size=0, max_size=6))
    n = sum(lengths)
    ids = np.array(draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n)), dtype=np.int64)
    row_splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    positions = np.concatenate([np.arange(k) for k in lengths] + [np.zeros(0)]).astype(np.int64)
    w = _weights(draw, n, draw(st.sampled_from(weights)))
    return Case(table, Ragged(values=ids.reshape(-1), row_splits=row_splits, weights=w, positions=positions))


def with_weights(batch, weights):
    return Ragged(values=batch.values, row_splits=batch.row_splits, weights=weights, positions=batch.positions)


def close(a, b, scale=1.0):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, scale))


# --------------------------------------------------------------------------
# Combiner identities
# --------------------------------------------------------------------------


@SETTINGS
@given(cases(weights=("any",)), st.floats(-2.0, 2.0), st.integers(0, 2**32 - 1))
def test_sum_is_linear_in_the_weights(case, alpha, seed):
    table, batch = case
    w1 = batch.weights
    w2 = np.random.default_rng(seed).uniform(-2, 2, w1.shape).astype(np.float32)
    lhs = pooled_lookup(table, with_weights(batch, (w1 + np.float32(alpha) * w2).astype(np.float32)), "sum")
    rhs = pooled_lookup(table, with_weights(batch, w1), "sum") + alpha * pooled_lookup(
        table, with_weights(batch, w2), "sum"
    )
    close(lhs, rhs, scale=10.0)


@SETTINGS
@given(cases(), st.integers(0, 2**32 - 1), st.booleans())
def test_mean_of_equal_rows_is_the_row(case, seed, safe):
    _, batch = case
    dim = case.table.shape[1]
    row = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    table = np.tile(row, (V_MAX, 1))
    out = pooled_lookup(table, batch, "mean", safe=safe)
    w = batch.weights_or_ones()
    kept = w > 0 if safe else np.ones_like(w, dtype=bool)
    den = np.bincount(batch.row_ids()[kept], weights=w[kept], minlength=batch.batch_size)
    for b in range(batch.batch_size):
        if abs(den[b]) > 1e-3:  # a (near-)zero denominator gives 0 by definition
            close(out[b], row)
        elif den[b] == 0:
            assert not out[b].any()


@SETTINGS
@given(cases(max_len=1, weights=("none",)))
def test_sqrtn_of_one_id_equals_sum_and_mean(case):
    table, batch = case
    total = pooled_lookup(table, batch, "sum")
    np.testing.assert_allclose(pooled_lookup(table, batch, "sqrtn"), total, rtol=1e-6)
    np.testing.assert_allclose(pooled_lookup(table, batch, "mean"), total, rtol=1e-6)


@SETTINGS
@given(cases(max_len=1, weights=("positive",)))
def test_weighted_sqrtn_of_one_id_is_the_row(case):
    table, batch = case
    out = pooled_lookup(table, batch, "sqrtn")
    has_id = batch.row_lengths() > 0
    close(out[has_id], table[batch.values])
    close(out[has_id] * batch.weights[:, None], pooled_lookup(table, batch, "sum")[has_id])


@SETTINGS
@given(cases(weights=("none", "positive", "any")), st.floats(0.125, 0.875), st.sampled_from(["sum", "mean"]))
def test_duplicate_ids_equal_one_id_with_summed_weight(case, split, combiner):
    """Each entry (id, w) becomes two entries (id, s w) and (id, (1 - s) w)."""
    table, batch = case
    w = batch.weights_or_ones()
    twice = Ragged(
        values=np.repeat(batch.values, 2),
        row_splits=batch.row_splits * 2,
        weights=np.stack([w * np.float32(split), w * np.float32(1 - split)], axis=1).reshape(-1),
        positions=np.repeat(batch.row_positions(), 2),
    )
    once = with_weights(batch, w)
    if combiner == "sum":
        close(pooled_lookup(table, twice, "sum"), pooled_lookup(table, once, "sum"), scale=10.0)
    else:  # mean: same numerator and denominator (signs kept, so the same pruning)
        den = np.bincount(once.row_ids(), weights=np.where(w > 0, w, 0), minlength=once.batch_size)
        ok = (den == 0) | (den > 1e-2)
        close(pooled_lookup(table, twice, "mean")[ok], pooled_lookup(table, once, "mean")[ok], scale=10.0)


# --------------------------------------------------------------------------
# Sharding never changes a number
# --------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(cases(), combiners, st.integers(1, 3))
def test_results_do_not_depend_on_shard_count_or_strategy(case, combiner, length):
    table, batch = case
    default_id = table.shape[0] - 1
    expected = pooled_lookup(table, batch, combiner, default_id=default_id)
    expected_seq = sequence_lookup(table, batch, length)
    for num_shards in range(1, 8):
        for strategy in ("div", "mod"):
            sharded = ShardedTable(table, num_shards, strategy)
            np.testing.assert_array_equal(pooled_lookup(sharded, batch, combiner, default_id=default_id), expected)
            out, lengths = sequence_lookup(sharded, batch, length)
            np.testing.assert_array_equal(out, expected_seq[0])
            np.testing.assert_array_equal(lengths, expected_seq[1])
            np.testing.assert_array_equal(sharded.to_full(), table)


@SETTINGS
@given(cases(), st.integers(1, 7), st.sampled_from(["div", "mod"]), st.integers(0, 2**32 - 1))
def test_scatter_then_gather_round_trips(case, num_shards, strategy, seed):
    table, batch = case
    sharded = ShardedTable(table, num_shards, strategy)
    ids = np.unique(batch.values)
    new_rows = np.random.default_rng(seed).standard_normal((ids.size, table.shape[1])).astype(np.float32)
    sharded.scatter(ids, new_rows)
    expected = table.copy()
    expected[ids] = new_rows
    np.testing.assert_array_equal(sharded.to_full(), expected)
    np.testing.assert_array_equal(sharded[ids], new_rows)
    assert sharded.load_per_shard(batch.values).sum() == batch.num_values


# --------------------------------------------------------------------------
# Backward is the transpose of forward
# --------------------------------------------------------------------------


def _scatter(ids, grads, shape):
    dense = np.zeros(shape, dtype=np.float64)
    dense[ids] = grads
    return dense


@SETTINGS
@given(cases(), combiners, st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_pooled_backward_is_the_gradient_of_forward(case, combiner, safe, use_default, seed):
    """The lookup is linear in the table: out = A T. So for L = <out, G>,
    dL/dT = A^T G, and for any direction T2, <A T2, G> = <T2, dL/dT>."""
    table, batch = case
    default_id = 0 if (safe and use_default) else None
    rng = np.random.default_rng(seed)
    grad = rng.standard_normal((batch.batch_size, table.shape[1])).astype(np.float32)
    direction = rng.standard_normal(table.shape).astype(np.float32)

    ids, row_grads = pooled_backward(batch, combiner, grad, safe=safe, default_id=default_id)
    assert (np.diff(ids) > 0).all()  # sorted, unique
    d_table = _scatter(ids, row_grads, table.shape)
    lhs = float(np.sum(pooled_lookup(direction, batch, combiner, safe=safe, default_id=default_id) * grad))
    rhs = float(np.sum(direction * d_table))
    scale = float(np.abs(direction).sum() * np.abs(d_table).max(initial=1.0))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, scale)

    # And a finite difference in float64 along the same direction agrees.
    t64 = table.astype(np.float64)
    eps = 1e-3
    loss = lambda t: float(np.sum(pooled_lookup(t, batch, combiner, safe=safe, default_id=default_id) * grad))  # noqa: E731
    numeric = (loss(t64 + eps * direction) - loss(t64 - eps * direction)) / (2 * eps)
    assert abs(numeric - rhs) <= 2e-2 * max(1.0, abs(rhs))


@SETTINGS
@given(cases(), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_sequence_backward_is_the_transpose_of_forward(case, length, seed):
    table, batch = case
    rng = np.random.default_rng(seed)
    grad = rng.standard_normal((batch.batch_size, length, table.shape[1])).astype(np.float32)
    direction = rng.standard_normal(table.shape).astype(np.float32)
    ids, row_grads = sequence_backward(batch, length, grad)
    lhs = float(np.sum(sequence_lookup(direction, batch, length)[0] * grad))
    rhs = float(np.sum(direction * _scatter(ids, row_grads, table.shape)))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))


@SETTINGS
@given(st.lists(st.integers(0, 20), max_size=30), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_sum_duplicates_equals_a_dense_scatter_add(ids, dim, seed):
    ids = np.array(ids, dtype=np.int64)
    grads = np.random.default_rng(seed).standard_normal((ids.size, dim)).astype(np.float32)
    unique, summed = sum_duplicates(ids, grads)
    dense = np.zeros((21, dim))
    np.add.at(dense, ids, grads)
    np.testing.assert_array_equal(unique, np.unique(ids))
    np.testing.assert_allclose(summed, dense[unique], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# Input forms agree
# --------------------------------------------------------------------------


class Sparse(NamedTuple):
    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


class RaggedT(NamedTuple):
    values: np.ndarray
    row_splits: np.ndarray


@SETTINGS
@given(st.integers(0, 5), st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_dense_sparse_ragged_and_lists_give_the_same_batch(batch_size, width, seed):
    rng = np.random.default_rng(seed)
    dense = rng.integers(-2, 9, size=(batch_size, width))
    weights = rng.uniform(0.5, 2, size=dense.shape).astype(np.float32)
    feature = FeatureSpec(name="f", table="t", num_buckets=9)

    from_dense = to_ragged(dense, weights, feature=feature)
    where = np.argwhere(dense >= 0)
    shape = np.array([batch_size, width])
    from_sparse = to_ragged(
        Sparse(where, dense[dense >= 0], shape), Sparse(where, weights[dense >= 0], shape), feature=feature
    )
    lists = [[int(v) for v in row if v >= 0] for row in dense]
    list_weights = [[float(w) for v, w in zip(row, wrow) if v >= 0] for row, wrow in zip(dense, weights)]
    splits = np.concatenate([[0], np.cumsum([len(r) for r in lists])]).astype(np.int64)
    flat = np.array([v for r in lists for v in r], dtype=np.int64)
    from_ragged = to_ragged(RaggedT(flat, splits), RaggedT(weights[dense >= 0], splits), feature=feature)

    for other in (from_sparse, from_ragged):
        np.testing.assert_array_equal(other.values, from_dense.values)
        np.testing.assert_array_equal(other.row_splits, from_dense.row_splits)
        np.testing.assert_allclose(other.weights, from_dense.weights, rtol=1e-6)
    np.testing.assert_array_equal(from_sparse.row_positions(), from_dense.row_positions())  # column indices
    np.testing.assert_array_equal(from_dense.values, dense[dense >= 0])
    if batch_size and width and len({len(r) for r in lists}) > 1:
        from_lists = to_ragged(lists, list_weights, feature=feature)
        np.testing.assert_array_equal(from_lists.values, from_dense.values)
        np.testing.assert_array_equal(from_lists.row_splits, from_dense.row_splits)
