"""The fast (numba) kernels agree with the numpy reference kernels (hypothesis).

The numpy kernels in `lookup.py` and `optimizers.py` are the specification;
`engine/fast/` must give the same bits: the forward and the backward add
the same float32 terms in the same order (running sums in entry order:
`lookup.running_sums`), the fused updates do the same float32 operations
(`test_fused_optimizers.py`), so a fast engine equals a numpy engine
exactly, step after step. Several features of one table summed per
feature first, as the reference once did, only agree to rounding. Skipped when numba is not installed (CI installs the
`fast` extra).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .fast_only import require_fast_kernels

require_fast_kernels()
import numba  # noqa: E402

from tpu_embedding_shim.engine import lookup  # noqa: E402
from tpu_embedding_shim.engine.engine import Engine  # noqa: E402
from tpu_embedding_shim.engine.fast import kernels as fast_kernels  # noqa: E402
from tpu_embedding_shim.engine.fast import owner  # noqa: E402
from tpu_embedding_shim.engine.fast import threads as fast_threads  # noqa: E402
from tpu_embedding_shim.engine.fast.kernels import FastKernels  # noqa: E402
from tpu_embedding_shim.engine.ragged import Ragged  # noqa: E402
from tpu_embedding_shim.spec import (  # noqa: E402
    AdagradSpec,
    FeatureSpec,
    SGDSpec,
)

from .strategies import (  # noqa: E402
    assert_same_bits,
    batches,
    fused_optimizers,
    row_id_spec,
    step_both,
    step_inputs,
)

SETTINGS = settings(max_examples=40, deadline=None)
COMBINERS = st.sampled_from(["sum", "mean", "sqrtn"])
TOL = dict(rtol=1e-5, atol=1e-6)


def _sorted(ids, rows):
    order = np.argsort(ids)
    return ids[order], rows[order]


@pytest.mark.parametrize("dim", [16, 32, 64, 300])
@pytest.mark.parametrize("num_bags", [1, 63, 65, 130, 201])
def test_forward_kernels_are_exactly_the_reference(dim, num_bags):
    """Bags of 0..150 entries, bag counts not multiples of the task size: the
    per-width kernels (and the generic one above D = 256) give the reference's
    bits, weighted and unweighted."""
    from tpu_embedding_shim.engine.fast import forward

    rng = np.random.default_rng(dim * 1000 + num_bags)
    lengths = rng.integers(0, 151, num_bags)
    lengths[: min(num_bags, 151)] = np.arange(min(num_bags, 151))[rng.permutation(min(num_bags, 151))]
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(splits[-1])
    table = rng.standard_normal((500, dim)).astype(np.float32)
    ids = rng.integers(0, 500, n).astype(np.int64)
    batch = Ragged(ids, splits, None, np.concatenate([np.arange(k) for k in lengths]).astype(np.int64))
    got = np.empty((num_bags, dim), np.float32)
    forward.pooled(table, ids, splits, np.zeros(0, np.float32), got)
    np.testing.assert_array_equal(got, lookup.pooled_lookup(table, batch, "sum"))
    w = rng.uniform(0.1, 2.0, n).astype(np.float32)
    weighted = Ragged(ids, splits, w, batch.positions)
    forward.pooled(table, ids, splits, w, got)
    np.testing.assert_array_equal(got, lookup.pooled_lookup(table, weighted, "sum"))
    generic = np.empty_like(got)
    forward.pooled_forward(table, ids, splits, w, generic, forward.NO_QUANTIZATION)
    np.testing.assert_array_equal(got, generic)


@settings(max_examples=10, deadline=None)
@given(case=batches(max_len=300), combiner=COMBINERS)
def test_long_bags_forward_is_exactly_the_reference(case, combiner):
    """Long bags: the reference finishes its last running sums one by one (`lookup._FEW`)."""
    table, batch = case
    np.testing.assert_array_equal(
        FastKernels().pooled_lookup(table, batch, combiner), lookup.pooled_lookup(table, batch, combiner)
    )


@settings(max_examples=20, deadline=None)
@given(case=batches(max_len=150), combiner=COMBINERS)
def test_generic_and_per_width_forward_kernels_agree_exactly(case, combiner):
    """`forward.pooled_forward` (any D) and the kernel compiled per D give the same bits."""
    from tpu_embedding_shim.engine.fast import forward

    table, batch = case
    ids, splits, _, coef = FastKernels().coefficients(batch, combiner, True, table.shape[1])
    if coef.size == 0:  # an unweighted sum: no coefficients; the generic kernel takes them all
        coef = np.ones(ids.shape[0], np.float32)
    generic = np.empty((batch.batch_size, table.shape[1]), np.float32)
    forward.pooled_forward(table, ids, splits, coef, generic, forward.NO_QUANTIZATION)
    fixed = np.empty_like(generic)
    forward.pooled(table, ids, splits, coef, fixed)
    np.testing.assert_array_equal(fixed, generic)
    if combiner == "sum" and batch.weights is None:  # no coefficients at all: the unweighted kernel
        forward.pooled(table, ids, splits, np.zeros(0, np.float32), fixed)
        np.testing.assert_array_equal(fixed, generic)


@SETTINGS
@given(case=batches(weights=False), length=st.integers(1, 8), gaps=st.booleans(), seed=st.integers(0, 99))
def test_sequence_forward_is_exactly_the_reference(case, length, gaps, seed):
    """Zeros where no id sits, rows where one does, lengths capped at L; with `gaps` the positions skip
    columns (a sparse or padded dense input: an id at column 5 of a row with 2 ids)."""
    table, batch = case
    if gaps and batch.num_values:
        steps = np.random.default_rng(seed).integers(1, 4, batch.num_values)
        first = np.repeat(batch.row_splits[:-1], batch.row_lengths())
        cumulative = np.cumsum(steps)
        positions = (
            cumulative
            - np.repeat(
                cumulative[batch.row_splits[:-1][batch.row_lengths() > 0]], batch.row_lengths()[batch.row_lengths() > 0]
            )
            + steps[first]
        )
        batch = dataclasses.replace(batch, positions=positions.astype(np.int64))
    want, want_lengths = lookup.sequence_lookup(table, batch, length)
    got, got_lengths = FastKernels().sequence_lookup(table, batch, length)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_lengths, want_lengths)


@SETTINGS
@given(
    case=batches(vocab=40),
    parts=st.integers(1, 6),
    seed=st.integers(0, 99),
    epoch=st.sampled_from([0, 7, 2**31 - 400]),
    defer=st.booleans(),
)
def test_owner_kernels_with_any_partition_count(case, parts, seed, epoch, defer):
    """Powers of two partition by a bit mask, other counts by `%`: same rows, same owners. The map is
    never reset: two steps in a row on one map, the second at the next epoch, give the same sums. With
    `defer`, the rows of one entry are left unwritten, marked with their entry, until `write_opened`."""
    table, batch = case
    grad = np.random.default_rng(seed).standard_normal((batch.batch_size, table.shape[1])).astype(np.float32)
    want_ids, want_rows = lookup.pooled_backward(batch, "sum", grad)
    e = FastKernels().pooled_entries(batch, "sum", grad)
    n = e.ids.shape[0]
    owned = np.zeros(parts, dtype=np.int64)
    owner.count_owned(e.ids, owned)
    np.testing.assert_array_equal(owned, np.bincount(e.ids % parts, minlength=parts))
    starts = np.zeros(parts, dtype=np.int64)
    np.cumsum(owned[:-1], out=starts[1:])
    slot_map = owner.new_slot_map(table.shape[0])
    unique_ids = np.empty(max(1, n), dtype=np.int64)
    order = np.empty(max(1, n), dtype=np.int64)
    owner.bucket_owned(e.ids, starts, order)  # one feature: its entry offsets are the regions' starts
    for p in range(parts):  # each partition's entries, in entry order
        mine = order[starts[p] : starts[p] + owned[p]]
        np.testing.assert_array_equal(mine, np.flatnonzero(e.ids % parts == p))
    stops = starts + owned
    for step_epoch in (epoch, epoch + n):  # the first step's slots are below the second's epoch
        summed = np.full((unique_ids.shape[0], table.shape[1]), np.nan, dtype=np.float32)
        counts = np.zeros(parts, dtype=np.int64)
        opened = np.full(unique_ids.shape[0] if defer else 0, -2, dtype=np.int64)
        owner.sum_owned(
            *e, slot_map, starts, counts, unique_ids, summed, order, starts, stops, step_epoch, opened, defer
        )
        regions = [slice(int(a), int(a + c)) for a, c in zip(starts, counts)]
        for p, region in enumerate(regions):
            assert np.all(unique_ids[region] % parts == p)
            np.testing.assert_array_equal(
                slot_map[unique_ids[region]], step_epoch + np.arange(region.stop - region.start)
            )
        assert np.all(slot_map < step_epoch + max(n, 1))  # nothing at or past the next epoch
        if defer:
            once = np.flatnonzero(np.bincount(e.ids, minlength=table.shape[0]) == 1)
            for region in regions:  # a row left unwritten is a row of one entry, marked with that entry
                marked = opened[region]
                np.testing.assert_array_equal(
                    np.sort(unique_ids[region][marked >= 0]), np.sort(np.intersect1d(once, unique_ids[region]))
                )
                assert np.all(e.ids[marked[marked >= 0]] == unique_ids[region][marked >= 0])
                assert np.all(marked[marked < 0] == -1)
            owner.write_opened(e.src, e.coef, e.grads, opened, starts, starts + counts, summed)
            assert all(np.all(opened[region] == -1) for region in regions)
        ids = np.concatenate([unique_ids[r] for r in regions])
        rows = np.concatenate([summed[r] for r in regions])
        ids, rows = _sorted(ids, rows)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(rows, want_rows)


# Engine level: the fast engine and the numpy engine, step by step.


@st.composite
def engine_cases(draw):
    vocab = draw(st.integers(2, 25))
    dim = draw(st.integers(1, 6))
    combiner = draw(COMBINERS)
    optimizer = draw(fused_optimizers())  # every fused optimizer, over its options and the shared ones
    spec = row_id_spec(
        optimizer,
        vocab=vocab,
        dim=dim,
        combiner=combiner,
        features="abs",
        pipeline_execution_with_tensor_core=draw(st.booleans()),
        num_shards=draw(st.sampled_from([1, 1, 2, 3, 8])),
        partition_strategy=draw(st.sampled_from(["div", "mod"])),
    )
    return spec, draw(st.integers(0, 999))


@contextlib.contextmanager
def _serial_work(value):
    """`threads.SERIAL_WORK` set to `value` for the block: 0 runs every kernel on every thread."""
    saved = fast_threads.SERIAL_WORK
    fast_threads.SERIAL_WORK = value
    try:
        yield
    finally:
        fast_threads.SERIAL_WORK = saved


@settings(max_examples=40, deadline=None)
@given(case=engine_cases(), serial_work=st.sampled_from([0, 16, fast_threads.SERIAL_WORK]))
def test_fast_engine_equals_numpy_engine(case, serial_work):
    """Every thread mode: 0 runs every kernel on every thread; 16 makes some calls small and spreads
    them side by side (`threads.run_each`); the default runs these small steps on one thread."""
    with _serial_work(serial_work):
        _fast_engine_equals_numpy_engine(case)


def _per_feature():
    """The per-feature path for every step, however small (no table-batched step: test_batched_step.py)."""
    return mock.patch.object(fast_kernels.FastKernels, "batches", staticmethod(lambda work: False))


def _fast_engine_equals_numpy_engine(case):
    spec, seed = case
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(seed)
    table = spec.tables[0]
    for _step in range(3):  # the same bits, step after step (same sums, same updates)
        step_both(fast, slow, *step_inputs(rng, table.vocabulary_size, table.dim))
    np.testing.assert_array_equal(fast.table("t"), slow.table("t"))
    for got, want in zip(fast.shards("t"), slow.shards("t")):  # the same rows in the same shards
        np.testing.assert_array_equal(got, want)
    for name, values in slow.slots("t").items():
        np.testing.assert_array_equal(fast.slots("t")[name], values)


@settings(max_examples=30, deadline=None)
@given(
    optimizer=fused_optimizers(),
    combiner=COMBINERS,
    skewed=st.booleans(),
    features=st.sampled_from(["f", "abs"]),
    serial_work=st.sampled_from([0, fast_threads.SERIAL_WORK]),
    defer=st.booleans(),
    pipelined=st.booleans(),
    seed=st.integers(0, 999),
)
def test_rows_of_one_entry_read_in_place_give_the_numpy_engines_bits(
    optimizer, combiner, skewed, features, serial_work, defer, pipelined, seed
):
    """The sums leave a row of one entry unwritten and the update reads the entry's gradient row in place
    (`owner.sum_owned`, `Summed.refs`); the numpy updates (pipelined steps), non-lazy Adam and numpy's
    powers get the rows written (`Summed.write_refs`). Zipf-like ids (a few hot rows, most rows once)
    and uniform ids (most rows once), every fused optimizer and combiner, weights, a sequence feature,
    one thread or all: the numpy engine's bits, step after step, whichever design the step uses."""
    vocab, dim, batch = 300, 5, 48
    spec = row_id_spec(
        optimizer,
        vocab=vocab,
        dim=dim,
        combiner=combiner,
        features=features,
        pipeline_execution_with_tensor_core=pipelined,
    )
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(seed)

    def ids():
        lengths = rng.integers(0, 12, batch)
        if skewed:  # ranks drawn from Zipf(1.1), scattered over the vocabulary
            values = (rng.zipf(1.1, lengths.sum()) * 7919) % vocab
        else:
            values = rng.integers(0, vocab, lengths.sum())
        return [list(row) for row in np.split(values, np.cumsum(lengths)[:-1])]

    chosen = mock.patch.object(FastKernels, "_defers", lambda self, table, dim: defer)
    with _serial_work(serial_work), _per_feature(), chosen:
        for _step in range(3):
            if features == "f":
                inputs = {"f": ids()}, {"f": rng.standard_normal((batch, dim))}
            else:
                b_ids = ids()
                b_w = [list(rng.uniform(-0.5, 2, len(r)).astype(np.float32)) for r in b_ids]
                grads = {"a": rng.standard_normal((batch, dim)), "b": rng.standard_normal((batch, dim))}
                inputs = (
                    {"a": ids(), "b": b_ids, "b_w": b_w, "s": ids()},
                    grads | {"s": rng.standard_normal((batch, 3, dim))},
                )
            step_both(fast, slow, *inputs)
    assert_same_bits(fast.table("t"), slow.table("t"))
    for name, values in slow.slots("t").items():
        assert_same_bits(fast.slots("t")[name], values)


def test_rows_of_one_entry_are_left_unwritten_after_a_step_of_few_duplicates():
    """The design follows the table's last step: after one of mostly distinct rows (uniform ids over a
    large table) the sums leave the rows of one entry unwritten; after one of many duplicates (a few
    hot rows), or at the table's first step, they write every row."""
    fast = FastKernels()
    rng = np.random.default_rng(0)
    dim, n = 64, 8192  # 8,192 distinct rows of 256 bytes: 2 MB, above `_DEFER_BYTES`
    grad = rng.standard_normal((n, dim)).astype(np.float32)
    splits = np.arange(n + 1, dtype=np.int64)

    def summed(ids):
        return fast.sum_table("t", 100_000, dim, [fast.pooled_entries(Ragged(ids, splits, None), "sum", grad)])

    distinct = rng.permutation(100_000)[:n].astype(np.int64)
    hot = rng.integers(0, 50, n).astype(np.int64)
    assert summed(distinct).refs is None  # no last step to go by
    assert summed(distinct).refs is not None
    assert summed(hot).refs is not None  # the last step had few duplicates
    assert summed(distinct).refs is None  # the last one had many
    want_ids, want_rows = lookup.sum_duplicates(distinct, grad)
    for _ in range(2):
        ids, rows = _sorted(*summed(distinct).compact())
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(rows, want_rows)


def test_small_calls_run_on_one_thread_and_give_the_same_bits():
    spec = _spec(AdagradSpec(learning_rate=0.1), vocab=30)
    threads = numba.get_num_threads()
    seen = []
    real = fast_kernels.forward.pooled

    def spy(*args):
        seen.append(numba.get_num_threads())
        return real(*args)

    results = []
    for serial_work in (0, 10**9):  # every call on all threads, then every call on one
        engine = Engine(spec, kernels="fast")
        rng = np.random.default_rng(5)
        with (
            _serial_work(serial_work),
            mock.patch.object(fast_kernels.forward, "pooled", spy),
            _per_feature(),
        ):
            for _ in range(3):
                ids = [list(rng.integers(0, 30, rng.integers(0, 6))) for _ in range(8)]
                result = engine.forward({"f": ids})
                engine.apply_gradients(result, {"f": rng.standard_normal((8, 3))})
        results.append((result.activations["f"], engine.table("t"), engine.slots("t")["accumulators"]))
        assert numba.get_num_threads() == threads  # restored after every call
    assert seen == [threads] * 3 + [1] * 3
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


def _spec(optimizer=None, num_shards=1, vocab=10, strategy="div"):
    optimizer = optimizer or AdagradSpec(learning_rate=0.1)
    return row_id_spec(optimizer, vocab=vocab, num_shards=num_shards, partition_strategy=strategy)


def test_a_failed_fast_step_changes_nothing():
    engine = Engine(_spec(), kernels="fast")
    before, slots_before = engine.table("t"), engine.slots("t")
    result = engine.forward({"f": [[1, 2, 2], [3]]})
    with pytest.raises(ValueError, match="NaN"):
        engine.apply_gradients(result, {"f": [[np.nan, 0, 0], [1, 1, 1]]})
    np.testing.assert_array_equal(engine.table("t"), before)
    np.testing.assert_array_equal(engine.slots("t")["accumulators"], slots_before["accumulators"])
    assert engine.global_step == 0
    assert engine.kernels.slot_maps_clean()
    engine.apply_gradients(result, {"f": np.ones((2, 3))})  # the same lookup still trains
    assert engine.global_step == 1


def test_a_failing_learning_rate_function_changes_no_table():
    calls = []

    def lr(step):
        calls.append(step)
        raise RuntimeError("schedule broke")

    engine = Engine(_spec(SGDSpec(learning_rate=lr)), kernels="fast")
    before = engine.table("t")
    result = engine.forward({"f": [[1, 2]]})
    with pytest.raises(RuntimeError, match="schedule broke"):
        engine.apply_gradients(result, {"f": np.ones((1, 3))})
    np.testing.assert_array_equal(engine.table("t"), before)
    assert engine.kernels.slot_maps_clean()


@pytest.mark.parametrize("strategy", ["div", "mod"])
def test_sharded_tables_use_the_fast_kernels_on_one_storage_array(strategy):
    engine = Engine(_spec(num_shards=3, vocab=11, strategy=strategy), kernels="fast")
    assert any("numba" in line for line in engine.describe())
    sharded, _ = engine.stored("t")
    assert all(np.shares_memory(shard, sharded.storage) for shard in sharded.shards if shard.size)
    result = engine.forward({"f": [[10, 4], [4]]})
    np.testing.assert_array_equal(result.activations["f"][:, 0], [14.0, 4.0])  # RowIdInitializer: row i is i
    engine.apply_gradients(result, {"f": np.ones((2, 3))})
    full = engine.table("t")[:, 0]
    assert full[4] < 4.0 and full[10] < 10.0 and full[[0, 1, 5]].tolist() == [0.0, 1.0, 5.0]
    assert engine.kernels.slot_maps_clean()


def test_kernels_argument_is_checked():
    with pytest.raises(ValueError, match="kernels"):
        Engine(_spec(), kernels="gpu")


def test_a_ten_million_row_table_trains_without_full_size_temporaries():
    spec = row_id_spec(SGDSpec(learning_rate=1.0), vocab=10_000_000, dim=1)
    engine = Engine(spec, kernels="fast")
    result = engine.forward({"f": [[9_999_999, 5], [5, -1]]})
    assert result.activations["f"][:, 0].tolist() == [10_000_004.0, 5.0]
    engine.apply_gradients(result, {"f": [[1.0], [1.0]]})
    table = engine.stored("t")[0].shards[0]  # the one stored copy
    assert table[5, 0] == 3.0 and table[9_999_999, 0] == 9_999_998.0 and table[6, 0] == 6.0


def test_memory_mapped_table_trains_and_reopens(tmp_path):
    path = str(tmp_path / "t.npy")
    spec = _spec(vocab=600_000)
    engine = Engine(spec, kernels="fast", table_files={"t": path})
    in_memory = Engine(spec, kernels="fast")
    np.testing.assert_array_equal(engine.table("t"), in_memory.table("t"))  # RowIdInitializer, block by block
    for e in (engine, in_memory):
        result = e.forward({"f": [[1, 599_999], [1]]})
        e.apply_gradients(result, {"f": np.ones((2, 3))})
    np.testing.assert_array_equal(engine.table("t"), in_memory.table("t"))
    del engine
    reopened = Engine(spec, kernels="fast", table_files={"t": path})
    np.testing.assert_array_equal(reopened.table("t"), in_memory.table("t"))
    np.testing.assert_array_equal(reopened.slots("t")["accumulators"], in_memory.slots("t")["accumulators"])
    assert any("memory-mapped" in line for line in reopened.describe())


def test_memory_mapped_tables_need_the_id_order(tmp_path):
    with pytest.raises(ValueError, match="partition_strategy 'div'"):
        Engine(_spec(num_shards=2, strategy="mod"), table_files={"t": str(tmp_path / "t.npy")})
    engine = Engine(_spec(num_shards=2), kernels="fast", table_files={"t": str(tmp_path / "d.npy")})  # div: id order
    result = engine.forward({"f": [[1, 9]]})
    engine.apply_gradients(result, {"f": np.ones((1, 3))})
    reopened = Engine(_spec(num_shards=2), kernels="fast", table_files={"t": str(tmp_path / "d.npy")})
    np.testing.assert_array_equal(reopened.table("t"), engine.table("t"))
    assert reopened.table("t")[9, 0] < 9.0
    with pytest.raises(ValueError, match="unknown tables"):
        Engine(_spec(), table_files={"nope": str(tmp_path / "t.npy")})


def test_slot_map_is_reset_after_an_interrupted_sum():
    fast = FastKernels()

    class BoomError(Exception):
        pass

    class BadEntries:
        ids = np.array([1, 2], np.int64)

        def __iter__(self):  # the summing pass reads the entries' arrays: fail there
            raise BoomError

    with pytest.raises(BoomError):
        fast.sum_rows("t", 5, 2, [BadEntries()])
    assert fast.slot_maps_clean()


@SETTINGS
@given(cases=st.lists(batches(vocab=25, max_len=30, weights=False), min_size=2, max_size=4), seed=st.integers(0, 99))
def test_persistent_scratch_is_reused_across_steps_of_any_size(cases, seed):
    """The one-pass backward writes into per-table scratch kept between steps (high-water mark):
    steps of growing and shrinking sizes, and several dims, each still agree with the reference."""
    fast = FastKernels()
    rng = np.random.default_rng(seed)
    for table, batch in cases:
        grad = rng.standard_normal((batch.batch_size, table.shape[1])).astype(np.float32)
        want_ids, want_rows = lookup.pooled_backward(batch, "sum", grad)
        summed = fast.sum_table("t", 25, table.shape[1], [fast.pooled_entries(batch, "sum", grad)])
        assert summed.size == want_ids.shape[0]
        ids, rows = _sorted(*summed.compact())
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(rows, want_rows)
        assert fast.slot_maps_clean()


@SETTINGS
@given(cases=st.lists(batches(vocab=25, max_len=30, weights=False), min_size=2, max_size=5), seed=st.integers(0, 99))
def test_slot_map_starts_again_before_its_epoch_overflows(cases, seed):
    """The slot map is never reset between steps: each step's slots start at the table's epoch, and the
    map is filled with -1 again when the next epoch would pass the limit (int32's range; 60 here, so
    that most steps start again)."""
    fast = FastKernels()
    rng = np.random.default_rng(seed)
    with mock.patch.object(fast_kernels, "_EPOCH_LIMIT", 60):
        for table, batch in cases:
            grad = rng.standard_normal((batch.batch_size, table.shape[1])).astype(np.float32)
            want_ids, want_rows = lookup.pooled_backward(batch, "sum", grad)
            ids, rows = _sorted(*fast.sum_rows("t", 25, table.shape[1], [fast.pooled_entries(batch, "sum", grad)]))
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_array_equal(rows, want_rows)
            assert fast.slot_maps_clean()


@SETTINGS
@given(
    steps=st.lists(
        st.lists(st.tuples(st.integers(0, 2), batches(vocab=25, max_len=30, weights=True)), min_size=1, max_size=5),
        min_size=1,
        max_size=3,
    ),
    combiner=COMBINERS,
    seed=st.integers(0, 99),
)
def test_all_tables_summed_in_one_call_give_each_table_s_sums(steps, combiner, seed):
    """`sum_serial` (every table in one call, for one numba thread) gives the rows and bits of `sum_table`
    per table, step after step on the same slot maps: several features per table, weighted or not."""
    serial, each = FastKernels(), FastKernels()
    rng = np.random.default_rng(seed)
    for pieces in steps:
        requests = []
        for t in range(3):
            entries = []
            for table_of, (_, batch) in pieces:
                if table_of == t:
                    grad = rng.standard_normal((batch.batch_size, 3)).astype(np.float32)
                    entries.append(serial.pooled_entries(batch, combiner, grad))
            requests.append((f"t{t}", 25, 3, entries))
        got = serial.sum_serial(requests)
        assert got is not None
        for summed, request in zip(got, requests):
            want_ids, want_rows = _sorted(*each.sum_table(*request).compact())
            ids, rows = _sorted(*summed.compact())
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_array_equal(rows.view(np.uint32), want_rows.view(np.uint32))
        assert serial.slot_maps_clean()


def test_prefetch_is_only_a_hint():
    """`prefetch_row` of rows far outside the array neither faults nor changes anything."""
    import numba

    from tpu_embedding_shim.engine.fast.prefetch import prefetch_item, prefetch_row

    @numba.njit
    def touch(a, v):
        for i in (0, 3, -1, 1 << 20):
            prefetch_row(a, i)
            prefetch_item(v, i)
        return a.sum() + v.sum()

    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    v = np.arange(5, dtype=np.int32)
    assert touch(a, v) == a.sum() + v.sum()


class _RaggedInput:
    def __init__(self, values, row_splits):
        self.values, self.row_splits = values, row_splits


@SETTINGS
@given(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=8),
    low=st.integers(-2, 0),
    high=st.integers(1, 12),
    buckets=st.integers(1, 10),
    bad_splits=st.booleans(),
    seed=st.integers(0, 99),
)
def test_fast_ragged_conversion_is_to_ragged_or_declines(lengths, low, high, buckets, bad_splits, seed):
    """`FastKernels.ragged_ids` gives exactly `to_ragged`'s batch, or None (then the engine runs `to_ragged`)."""
    from tpu_embedding_shim.engine.ragged import to_ragged

    rng = np.random.default_rng(seed)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = rng.integers(low, high, int(splits[-1])).astype(np.int64)
    if bad_splits and splits.shape[0] > 2:
        splits[1], splits[2] = splits[2] + 1, splits[1]
    feature = FeatureSpec(name="f", table="t", num_buckets=buckets)
    got = FastKernels.ragged_ids(_RaggedInput(values, splits), feature)
    in_range = values.size > 0 and values.min() >= 0 and values.max() < buckets
    valid = splits[0] == 0 and splits[-1] == values.shape[0] and np.all(np.diff(splits) >= 0)
    if not (in_range and valid):
        assert got is None
        return
    want = to_ragged(_RaggedInput(values, splits), None, feature=feature)
    for a, b in (
        (got.values, want.values),
        (got.row_splits, want.row_splits),
        (got.row_positions(), want.row_positions()),
    ):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert got.weights is None and want.weights is None
    assert not np.shares_memory(got.values, values) and not np.shares_memory(got.row_splits, splits)


def test_fast_ragged_conversion_declines_what_it_does_not_cover():
    feature = FeatureSpec(name="f", table="t", num_buckets=10)
    splits = np.array([0, 2], dtype=np.int64)
    assert FastKernels.ragged_ids(_RaggedInput(np.array([1, 2], np.int32), splits), feature) is None
    assert FastKernels.ragged_ids(_RaggedInput([1, 2], splits), feature) is None
    assert FastKernels.ragged_ids(np.array([[1, -1]]), feature) is None  # dense padding: to_ragged's
    assert FastKernels.ragged_ids(np.array([[1, 2]], np.int32), feature) is None
    assert FastKernels.ragged_ids([[1, 2]], feature) is None
    assert FastKernels.ragged_ids(_RaggedInput(np.zeros(0, np.int64), np.zeros(1, np.int64)), feature) is None
    vocab = FeatureSpec(name="f", table="t", num_buckets=2, id_source="vocabulary_list", vocabulary=("a", "b"))
    assert FastKernels.ragged_ids(_RaggedInput(np.array([1, 0], np.int64), splits), vocab) is None


@pytest.mark.parametrize("splits", [[0, 100, 5], [0, 3, 1, 5], [0, -2, 5], [0, 5, 5, 6]])
def test_fast_ragged_conversion_never_reads_past_the_ids(splits):
    """A row that ends past N, or a decreasing or negative split, is declined before any entry is touched
    (numba does not check bounds: reading `values[5:100]` would read or write foreign memory)."""
    feature = FeatureSpec(name="f", table="t", num_buckets=10)
    values = np.array([1, 2, 3, 4, 5], np.int64)
    assert FastKernels.ragged_ids(_RaggedInput(values, np.array(splits, np.int64)), feature) is None


def test_fast_ragged_conversion_stays_in_bounds_under_numba_boundscheck(tmp_path):
    """The same malformed splits with numba's bounds checking on (a fresh process and kernel cache): an
    out-of-bounds access would raise IndexError there instead of going unnoticed."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from tpu_embedding_shim.engine.fast.kernels import FastKernels\n"
        "from tpu_embedding_shim.spec import FeatureSpec\n"
        "class R:\n"
        "    def __init__(self, values, splits): self.values, self.row_splits = values, splits\n"
        "f = FeatureSpec(name='f', table='t', num_buckets=10)\n"
        "for splits in ([0, 100, 5], [0, 3, 1, 5], [0, -2, 5], [0, 5, 5, 6]):\n"
        "    for copy in (True, False):\n"
        "        assert FastKernels.ragged_ids(R(np.arange(1, 6), np.array(splits)), f, copy=copy) is None\n"
        "print('ok')\n"
    )
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 999), rows=st.integers(500, 3000), bad_at=st.integers(0, 10_000))
def test_fast_ragged_conversion_of_long_batches(seed, rows, bad_at):
    """A copy, positions within each row, and one bad id anywhere declines the whole batch."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 5, rows)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = rng.integers(0, 10, int(splits[-1])).astype(np.int64)
    feature = FeatureSpec(name="f", table="t", num_buckets=10)
    batch = FastKernels.ragged_ids(_RaggedInput(values, splits), feature)
    np.testing.assert_array_equal(batch.values, values)
    assert not np.shares_memory(batch.values, values) and not np.shares_memory(batch.row_splits, splits)
    assert batch.positions is None  # computed when asked for:
    np.testing.assert_array_equal(batch.row_positions(), np.arange(values.size) - np.repeat(splits[:-1], lengths))
    if values.size:  # an inference lookup checks the caller's arrays and uses them as they are
        inference = FastKernels.ragged_ids(_RaggedInput(values, splits), feature, copy=False)
        assert inference.values is values and inference.row_splits is splits
        broken = values.copy()
        broken[bad_at % values.size] = 10
        assert FastKernels.ragged_ids(_RaggedInput(broken, splits), feature) is None
        assert FastKernels.ragged_ids(_RaggedInput(broken, splits), feature, copy=False) is None


def test_many_duplicates_with_cancellation_are_the_same_running_sum():
    """34 entries of one id (found by hypothesis when the reference still added pairwise: the two
    orders differed by ~3e-5 relative after cancellation). Both are one running sum now."""
    splits = np.array([0, 0, 0, 1, 1, 12, 12, 12, 22, 34], dtype=np.int64)
    positions = np.concatenate([np.arange(n) for n in np.diff(splits)]).astype(np.int64)
    batch = Ragged(np.zeros(34, np.int64), splits, None, positions)
    grad = np.random.default_rng(0).standard_normal((batch.batch_size, 3)).astype(np.float32)
    want_ids, want_rows = lookup.pooled_backward(batch, "sum", grad, safe=False)
    fast = FastKernels()
    entries = fast.pooled_entries(batch, "sum", grad, safe=False)
    ids, rows = fast.sum_rows("t", 1, 3, [entries])
    np.testing.assert_array_equal(ids, want_ids)
    sequential = np.zeros(3, np.float32)
    for r in grad[batch.row_ids()]:  # the fast kernels add an id's terms in entry order
        sequential = sequential + r
    np.testing.assert_array_equal(rows[0], sequential)
    np.testing.assert_array_equal(rows, want_rows)


@SETTINGS
@given(case=batches(), combiner=COMBINERS, safe=st.booleans(), odd=st.sampled_from([None, 0.0, -0.0, np.nan]))
def test_compiled_coefficients_are_the_reference_bits(case, combiner, safe, odd):
    """`coefficients.pooled_coefficients` == `lookup.pooled_coefficients`: kept entries, examples and
    float32 coefficients, with zero, negative and NaN weights (pruned for mean and sqrtn when safe)."""
    _, batch = case
    if odd is not None and batch.weights is not None and batch.num_values:
        weights = batch.weights.copy()
        weights[0] = odd
        batch = dataclasses.replace(batch, weights=weights)
    _assert_compiled_coefficients_are_the_reference(batch, combiner, safe)


def _assert_compiled_coefficients_are_the_reference(batch, combiner, safe):
    """Kept ids, examples, float32 coefficients and kept row splits: the same as `lookup.pooled_coefficients`;
    returns the reference (example, ids, coef)."""
    from tpu_embedding_shim.engine.fast import coefficients

    example, ids, coef, _ = lookup.pooled_coefficients(batch, combiner, safe=safe)
    got_ids, splits, got_example, got_coef = coefficients.pooled_coefficients(
        batch.values, batch.row_splits, batch.weights, combiner, safe
    )
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_example, example)
    np.testing.assert_array_equal(got_coef, coef.astype(np.float32))
    kept_per_example = np.bincount(example, minlength=batch.batch_size)
    np.testing.assert_array_equal(splits, np.concatenate([[0], np.cumsum(kept_per_example)]))
    return example, ids, coef


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 999),
    num_examples=st.integers(200, 1300),
    combiner=COMBINERS,
    safe=st.booleans(),
    weighted=st.booleans(),
)
def test_compiled_coefficients_over_many_blocks_of_examples(seed, num_examples, combiner, safe, weighted):
    """Several parallel blocks of `coefficients.CHUNK` examples, some entries pruned: the reference's bits."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 7, num_examples)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(splits[-1])
    weights = None
    if weighted:
        weights = rng.uniform(-0.5, 2.0, n).astype(np.float32)
        weights[rng.random(n) < 0.1] = 0.0
    batch = Ragged(
        rng.integers(0, 50, n).astype(np.int64),
        splits,
        weights,
        (np.arange(n) - np.repeat(splits[:-1], lengths)).astype(np.int64),
    )
    example, ids, coef = _assert_compiled_coefficients_are_the_reference(batch, combiner, safe)
    # the fast path's entries: a sum's coefficients are the weights themselves, with no pass at all
    path_ids, _, path_example, path_coef = FastKernels().coefficients(batch, combiner, safe, 4)
    if path_coef.size == 0:  # an unweighted sum: no coefficient array, every coefficient 1
        assert combiner == "sum" and not weighted
        path_coef = np.ones(n, np.float32)
    np.testing.assert_array_equal(path_coef, coef.astype(np.float32))
    np.testing.assert_array_equal(path_ids, ids)
    if path_example is not None:
        np.testing.assert_array_equal(path_example, example)


def test_a_lookup_and_its_gradient_share_one_coefficient_pass():
    from tpu_embedding_shim.engine.fast import coefficients

    spec = row_id_spec(AdagradSpec(learning_rate=0.1), combiner="mean")
    engine = Engine(spec, kernels="fast")
    real = coefficients.pooled_coefficients
    with mock.patch.object(coefficients, "pooled_coefficients", side_effect=real) as spy, _per_feature():
        for _ in range(2):
            result = engine.forward({"f": [[1, 2, 2], [3]]})
            engine.apply_gradients(result, {"f": np.ones((2, 3))})
    assert spy.call_count == 2  # once per step, not once for the lookup and again for the gradient


@SETTINGS
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=8),
    dtype=st.sampled_from(["float32", "float64", "int32"]),
    other_splits=st.booleans(),
    short=st.booleans(),
    seed=st.integers(0, 99),
)
def test_fast_ragged_conversion_with_weights_is_to_ragged_or_declines(lengths, dtype, other_splits, short, seed):
    """Ragged weights with the ids' row splits are taken in the fast pass (cast to float32, copied);
    weights that do not line up are declined, and `to_ragged` then raises its own error."""
    from tpu_embedding_shim.engine.ragged import to_ragged

    rng = np.random.default_rng(seed)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(splits[-1])
    values = rng.integers(0, 10, n).astype(np.int64)
    w_values = (rng.uniform(-1, 2, n - 1 if short and n else n) * 3).astype(dtype)
    w_splits = splits.copy()
    if other_splits and w_splits.shape[0] > 2:
        w_splits[1] = w_splits[2]
    feature = FeatureSpec(name="f", table="t", num_buckets=10)
    ids, weights = _RaggedInput(values, splits), _RaggedInput(w_values, w_splits)
    got = FastKernels.ragged_ids(ids, feature, weights)
    lines_up = w_values.shape[0] == n and np.array_equal(w_splits, splits)
    if n == 0 or not lines_up:
        assert got is None
        if n and not lines_up:
            with pytest.raises(ValueError, match="weights"):
                to_ragged(ids, weights, feature=feature)
        return
    want = to_ragged(ids, weights, feature=feature)
    for a, b in (
        (got.values, want.values),
        (got.row_splits, want.row_splits),
        (got.row_positions(), want.row_positions()),
        (got.weights, want.weights),
    ):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert not np.shares_memory(got.weights, w_values)


@pytest.mark.parametrize("training", [True, False])
def test_ragged_tensor_inputs_on_the_fast_path_give_the_numpy_engines_bits(training):
    """RaggedTensor-like int64 inputs take the compiled input pass (no positions written): a pooled, a
    weighted and a sequence feature (whose positions are computed when asked for) give the numpy
    engine's activations; an inference lookup uses the caller's ids as they are, a training one copies."""
    spec = row_id_spec(AdagradSpec(learning_rate=0.1), vocab=40, dim=4, combiner="mean", features="abs")
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(11)
    for _ in range(3):
        splits = np.concatenate([[0], np.cumsum(rng.integers(0, 6, 16))]).astype(np.int64)
        ids = {
            name: _RaggedInput(rng.integers(0, 40, int(splits[-1])).astype(np.int64), splits)
            for name in ("a", "b", "s")
        }
        features = dict(ids, b_w=_RaggedInput(rng.uniform(0, 2, int(splits[-1])).astype(np.float32), splits))
        got, want = fast.forward(features, training=training), slow.forward(features, training=training)
        for name in ("a", "b", "s"):
            np.testing.assert_array_equal(got.activations[name], want.activations[name])
            assert np.shares_memory(got.batches[name].values, ids[name].values) is (not training)
        np.testing.assert_array_equal(got.sequence_lengths["s"], want.sequence_lengths["s"])
        if training:
            grads = {
                "a": rng.standard_normal((16, 4)),
                "b": rng.standard_normal((16, 4)),
                "s": rng.standard_normal((16, 3, 4)),
            }
            fast.apply_gradients(got, grads)
            slow.apply_gradients(want, grads)
    np.testing.assert_array_equal(fast.table("t"), slow.table("t"))


@SETTINGS
@given(
    values=st.lists(
        st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True), min_size=0, max_size=300
    ),
    order=st.sampled_from(["C", "strided", "float64"]),
)
def test_all_finite_is_numpys_isfinite_all(values, order):
    """The compiled check (an integer pass over the exponent bits) is `np.isfinite(a).all()`: inf, -inf,
    NaN, subnormals, -0.0 and the largest floats included; strided and float64 arrays take numpy's path."""
    array = np.array(values, dtype=np.float32)
    if order == "strided":
        array = np.repeat(array, 2)[::2]
    elif order == "float64":
        array = array.astype(np.float64)
    assert FastKernels.all_finite(array) == bool(np.isfinite(array).all())
    if array.size:  # and as the engine shapes a gradient: [B, D]
        assert FastKernels.all_finite(array.reshape(-1, 1)) == bool(np.isfinite(array).all())


@SETTINGS
@given(
    shape=st.sampled_from([(1,), (6,), (5, 1), (4, 3), (3, 0)]),
    low=st.integers(-2, 1),
    high=st.integers(2, 12),
    buckets=st.integers(1, 10),
    zero_is_padding=st.booleans(),
    weighted=st.booleans(),
    training=st.booleans(),
    seed=st.integers(0, 99),
)
def test_fast_dense_conversion_is_to_ragged_or_declines(
    shape, low, high, buckets, zero_is_padding, weighted, training, seed
):
    """A dense [B] or [B, L] int64 batch: `to_ragged`'s batch exactly, or None whenever it holds padding
    (a negative id, or a 0 for an EmbeddingConfigSpec feature), an id out of range or nothing at all."""
    from tpu_embedding_shim.engine.ragged import to_ragged

    rng = np.random.default_rng(seed)
    ids = rng.integers(low, high, shape).astype(np.int64)
    weights = rng.uniform(0, 2, shape).astype(np.float32) if weighted else None
    feature = FeatureSpec(name="f", table="t", num_buckets=buckets, dense_zero_is_padding=zero_is_padding)
    got = FastKernels.ragged_ids(ids, feature, weights, copy=training)
    lowest = 1 if zero_is_padding else 0
    if not (ids.size and ids.min() >= lowest and ids.max() < buckets):
        assert got is None
        return
    want = to_ragged(ids, weights, feature=feature)
    for a, b in (
        (got.values, want.values),
        (got.row_splits, want.row_splits),
        (got.row_positions(), want.row_positions()),
    ):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    if weighted:
        np.testing.assert_array_equal(got.weights, want.weights)
    else:
        assert got.weights is None and want.weights is None
    assert np.shares_memory(got.values, ids) is (not training)  # a training batch outlives the call: a copy


def test_fast_dense_conversion_copies_every_training_batch():
    """A training batch outlives the call, so its ids are never a view of the caller's array, even for a
    strided [B, 1] slice (numpy reshapes it to a view although it is not contiguous)."""
    feature = FeatureSpec(name="f", table="t", num_buckets=10)
    full = np.arange(1, 9, dtype=np.int64).reshape(4, 2)
    for ids in (full, np.asfortranarray(full), full[:, :1], full[::2]):
        got = FastKernels.ragged_ids(ids, feature, copy=True)
        np.testing.assert_array_equal(got.values, ids.reshape(-1))
        assert not np.shares_memory(got.values, ids)
        np.testing.assert_array_equal(FastKernels.ragged_ids(ids, feature, copy=False).values, ids.reshape(-1))


def test_sequence_entries_of_an_empty_batch_are_empty():
    """No examples: no entries, with the gradient's width (the reference's `sequence_entries` gives the same)."""
    batch = Ragged(np.zeros(0, np.int64), np.zeros(1, np.int64), None)
    grad = np.zeros((0, 3, 4), np.float32)
    entries = FastKernels().sequence_entries(batch, 3, grad)
    ids, want = lookup.sequence_entries(batch, 3, grad)
    assert entries.ids.tolist() == ids.tolist() == [] and entries.grads.shape == (0, 4) and want.shape == (0, 4)
