"""Both kernel sets (`NumpyKernels`, numba's `FastKernels`) against the reference `lookup.py`, through the
`Kernels` interface the engine calls: the same bits, the same errors, case for case.

Fast-only internals (per-width kernels, owners, scratch, threads) are in test_fast_kernels.py.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import Kernels, NumpyKernels, lookup, to_ragged
from tpu_embedding_shim.engine.kernels import Lookup, Update
from tpu_embedding_shim.engine.optimizers import apply_update, initial_slots
from tpu_embedding_shim.spec import AdagradSpec, FeatureSpec, FtrlSpec, SGDSpec

from .strategies import assert_same_bits, batches


def _kernel_sets():
    sets = [pytest.param(NumpyKernels, id="numpy")]
    try:
        from tpu_embedding_shim.engine import fast

        if fast.available():
            from tpu_embedding_shim.engine.fast.kernels import FastKernels

            sets.append(pytest.param(FastKernels, id="fast"))
            return sets
        reason = fast.unavailable_reason()
    except ImportError as error:
        reason = str(error)
    sets.append(pytest.param(None, id="fast", marks=pytest.mark.skip(reason=f"fast kernels off: {reason}")))
    return sets


pytestmark = pytest.mark.parametrize("make_kernels", _kernel_sets())

SETTINGS = settings(max_examples=30, deadline=None)
COMBINERS = st.sampled_from(["sum", "mean", "sqrtn"])


def _by_id(ids, rows):
    order = np.argsort(ids)
    return ids[order], rows[order]


def test_each_kernel_set_is_a_kernels(make_kernels):
    assert isinstance(make_kernels(), Kernels)


@SETTINGS
@given(case=batches(), combiner=COMBINERS, safe=st.booleans(), length=st.integers(1, 6))
def test_lookups_are_the_reference_bits(make_kernels, case, combiner, safe, length):
    table, batch = case
    pooled, (sequence, lengths) = make_kernels().lookups(
        [Lookup(table, batch, combiner, safe), Lookup(table, batch, max_sequence_length=length)]
    )
    assert_same_bits(pooled, lookup.pooled_lookup(table, batch, combiner, safe=safe))
    want, want_lengths = lookup.sequence_lookup(table, batch, length)
    assert_same_bits(sequence, want)
    np.testing.assert_array_equal(lengths, want_lengths)


@SETTINGS
@given(
    first=batches(vocab=20),
    second=batches(vocab=20, weights=False),
    combiner=COMBINERS,
    length=st.integers(1, 5),
    seed=st.integers(0, 99),
)
def test_entries_summed_per_table_are_the_reference_bits(make_kernels, first, second, combiner, length, seed):
    """A pooled feature and a sequence feature of one table: one row per touched id, each the running
    sum of its entries in entry order, feature after feature (`lookup.sum_duplicates` of them all)."""
    (table, pooled), (_, sequence) = first, second
    dim = table.shape[1]
    rng = np.random.default_rng(seed)
    g_pooled = rng.standard_normal((pooled.batch_size, dim)).astype(np.float32)
    g_sequence = rng.standard_normal((sequence.batch_size, length, dim)).astype(np.float32)
    want = [
        lookup.pooled_entries(pooled, combiner, g_pooled, safe=True),
        lookup.sequence_entries(sequence, length, g_sequence),
    ]
    want_ids, want_rows = lookup.sum_duplicates(
        np.concatenate([w[0] for w in want]), np.concatenate([w[1] for w in want])
    )
    kernels = make_kernels()
    entries = [
        kernels.pooled_entries(pooled, combiner, g_pooled, safe=True),
        kernels.sequence_entries(sequence, length, g_sequence),
    ]
    (summed,) = kernels.sum_tables([("t", 20, dim, entries)])
    ids, rows = _by_id(*summed.compact())
    np.testing.assert_array_equal(ids, want_ids)
    assert_same_bits(rows, want_rows)


def test_a_table_without_entries_sums_to_nothing(make_kernels):
    (summed,) = make_kernels().sum_tables([("t", 5, 3, [])])
    ids, rows = summed.compact()
    assert ids.shape == (0,) and rows.shape == (0, 3)


RAGGED_INPUTS = [
    ([[1, 2], [], [3]], None),
    (np.array([[1, 2], [3, 4]], np.int64), None),
    (np.array([[1, 2], [3, 4]], np.int64), np.array([[0.5, 1.0], [2.0, -1.0]], np.float32)),
    (np.array([1, 4], np.int64), None),
    (np.array([[1, 0], [3, 4]], np.int64), None),  # a dense 0: padding for an EmbeddingConfigSpec feature
]


@pytest.mark.parametrize("ids,weights", RAGGED_INPUTS)
@pytest.mark.parametrize("copy", [True, False])
def test_to_batch_is_to_ragged(make_kernels, ids, weights, copy):
    feature = FeatureSpec(name="f", table="t", num_buckets=5)
    got = make_kernels().to_batch(ids, feature, weights, copy=copy)
    want = to_ragged(ids, weights, feature=feature)
    np.testing.assert_array_equal(got.values, want.values)
    np.testing.assert_array_equal(got.row_splits, want.row_splits)
    np.testing.assert_array_equal(got.row_positions(), want.row_positions())
    if want.weights is None:
        assert got.weights is None
    else:
        assert_same_bits(got.weights, want.weights)
    if copy and isinstance(ids, np.ndarray):  # a training batch outlives the call: not the caller's ids
        assert not np.shares_memory(got.values, ids)


@pytest.mark.parametrize("ids", [np.array([[1, 9]], np.int64), [[1, 7]], np.array([[1.5]]), "not ids"])
def test_to_batch_refuses_what_to_ragged_refuses(make_kernels, ids):
    feature = FeatureSpec(name="f", table="t", num_buckets=5)
    with pytest.raises(Exception) as want:
        to_ragged(ids, None, feature=feature)
    with pytest.raises(type(want.value)):
        make_kernels().to_batch(ids, feature, None, copy=True)


@pytest.mark.parametrize(
    "values",
    [[0.0, -0.0, 1e-45, 3.4e38], [np.inf], [-np.inf, 1.0], [np.nan], []],
)
def test_all_finite_is_numpys(make_kernels, values):
    array = np.array(values, np.float32)
    assert make_kernels().all_finite(array) == bool(np.isfinite(array).all())


@pytest.mark.parametrize(
    "optimizer",
    [SGDSpec(learning_rate=0.5), AdagradSpec(learning_rate=0.1, clip_gradient_max=0.3), FtrlSpec(learning_rate=0.2)],
)
def test_a_fused_update_is_apply_update(make_kernels, optimizer):
    """Where the kernels fuse an optimizer, `apply_all` writes the rows `apply_update` computes, bit for bit;
    where they do not (numpy's never do), the engine applies `apply_update` itself."""
    kernels = make_kernels()
    if not kernels.fuses(optimizer):
        with pytest.raises(RuntimeError):
            kernels.apply_all([Update(optimizer, 0.1, np.zeros((1, 1), np.float32), {}, None)])
        assert isinstance(kernels, NumpyKernels)
        return
    rng = np.random.default_rng(0)
    table = rng.standard_normal((8, 3)).astype(np.float32)
    slots = {name: np.ascontiguousarray(v) for name, v in initial_slots(optimizer, table.shape).items()}
    batch = to_ragged([[1, 2, 2], [5]], None, feature=FeatureSpec(name="f", table="t", num_buckets=8))
    grad = rng.standard_normal((2, 3)).astype(np.float32)
    (summed,) = kernels.sum_tables([("t", 8, 3, [kernels.pooled_entries(batch, "sum", grad, safe=True)])])
    ids, rows = summed.compact()
    want_rows, want_slots = apply_update(optimizer, table[ids], {k: v[ids] for k, v in slots.items()}, rows, 0)
    kernels.apply_all([Update(optimizer, optimizer.learning_rate_at(0), table, slots, summed)])
    assert_same_bits(table[ids], want_rows)
    for name, values in want_slots.items():
        assert_same_bits(slots[name][ids], values)


def test_a_lookup_batch_can_be_shifted_onto_storage_rows(make_kernels):
    """The engine hands the kernels ids as rows of a table's storage (`mod` sharding maps them first):
    any id -> row bijection gives each row the same sum."""
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    batch = to_ragged([[0, 5, 5], [3]], None, feature=FeatureSpec(name="f", table="t", num_buckets=6))
    perm = np.array([3, 0, 4, 1, 5, 2])
    moved = dataclasses.replace(batch, values=perm[batch.values])
    storage = np.empty_like(table)
    storage[perm] = table
    (got,) = make_kernels().lookups([Lookup(storage, moved, "sum")])
    assert_same_bits(got, lookup.pooled_lookup(table, batch, "sum"))
