"""The exchange's index work and the filling of its send buffers, numpy's and the compiled kernels'
(`engine/fast/exchange.py`), against their definition, one small loop per entry here (hypothesis). Both give
the same arrays: integers, and float32 rows copied or multiplied once.

Runs the numpy code everywhere and the compiled kernels where numba imports (both in CI's venvs together).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import fast
from tpu_embedding_shim.engine.distributed import Ownership, SingleProcess, exchange, owner_pooling

IMPLEMENTATIONS = ["numpy"] + (["compiled"] if fast.available() else [])


@contextlib.contextmanager
def using(implementation):
    """The exchange's numpy code ('numpy') or its compiled kernels ('compiled'), while the block runs."""
    saved = exchange._COMPILED[:]
    if implementation == "numpy":
        exchange._COMPILED[:] = [None]
    else:
        from tpu_embedding_shim.engine.fast import exchange as kernels

        exchange._COMPILED[:] = [kernels]
    try:
        yield
    finally:
        exchange._COMPILED[:] = saved


@st.composite
def features(draw, max_world=4, max_features=4, max_entries=30):
    """(world size, per feature: owners, local rows)."""
    world = draw(st.integers(1, max_world))
    count = draw(st.integers(0, max_features))
    sizes = draw(st.lists(st.integers(0, max_entries), min_size=count, max_size=count))
    owners = [np.array(draw(st.lists(st.integers(0, world - 1), min_size=n, max_size=n)), np.int64) for n in sizes]
    locals_ = [np.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), np.int64) for n in sizes]
    return world, owners, locals_


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(case=features())
def test_pack_orders_by_owner_then_feature_keeping_entry_order(implementation, case):
    world, owners, locals_ = case
    with using(implementation):
        box = exchange.pack(owners, locals_, world)
    expected = [(o, f, k) for f, own in enumerate(owners) for k, o in enumerate(own.tolist())]
    expected.sort(key=lambda entry: (entry[0], entry[1]))  # stable: entry order within a segment
    bases = np.concatenate([[0], np.cumsum([o.shape[0] for o in owners])]).astype(np.int64)
    assert box.order.tolist() == [int(bases[f]) + k for _, f, k in expected]
    assert box.local.tolist() == [int(locals_[f][k]) for _, f, k in expected]
    counts = np.zeros((world, len(owners)), np.int64)
    for o, f, _ in expected:
        counts[o, f] += 1
    assert box.counts.tolist() == counts.tolist()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(case=features())
def test_distinct_lists_each_pair_once_in_order_of_first_occurrence(implementation, case):
    world, owners, locals_ = case
    with using(implementation):
        found = exchange.distinct(owners, locals_, world)
    for (pair_owners, pair_rows, inverse), owner, local in zip(found, owners, locals_):
        pairs = list(dict.fromkeys(zip(owner.tolist(), local.tolist())))
        assert list(zip(pair_owners.tolist(), pair_rows.tolist())) == pairs
        assert pair_owners[inverse].tolist() == owner.tolist() and pair_rows[inverse].tolist() == local.tolist()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(case=features())
def test_requests_ask_each_owner_for_each_distinct_row_of_a_group_once(implementation, case):
    world, owners, locals_ = case
    bases = np.concatenate([[0], np.cumsum([o.shape[0] for o in owners])]).astype(np.int64)
    joined = [np.concatenate(a) if a else np.zeros(0, np.int64) for a in (owners, locals_)]
    with using(implementation):
        outbox, pair, at = exchange.requests(*joined, bases, world)
    pairs = [list(dict.fromkeys(zip(o.tolist(), r.tolist()))) for o, r in zip(owners, locals_)]  # first occurrence
    assert outbox.bases.tolist() == np.concatenate([[0], np.cumsum([len(p) for p in pairs])]).tolist()
    owners_of = [np.array([o for o, _ in p], np.int64) for p in pairs]
    rows_of = [np.array([r for _, r in p], np.int64) for p in pairs]
    box = exchange.pack(owners_of, rows_of, world)  # the pairs, by owner then group: `pack`'s order
    assert outbox.order.tolist() == box.order.tolist() and outbox.local.tolist() == box.local.tolist()
    assert outbox.counts.tolist() == box.counts.tolist() and outbox.starts.tolist() == box.starts.tolist()
    flat = [pair for p in pairs for pair in p]
    entries = [(o, r) for own, local in zip(owners, locals_) for o, r in zip(own.tolist(), local.tolist())]
    assert [flat[j] for j in pair.tolist()] == entries
    for j, p in zip(pair.tolist(), at.tolist()):
        assert outbox.order[p] == j


@st.composite
def segments(draw):
    """(counts [W, P], per entry: example, gradient rows per segment, group, local row, coefficient)."""
    world, num = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    counts = np.array(draw(st.lists(st.integers(0, 5), min_size=world * num, max_size=world * num)), np.int64)
    counts = counts.reshape(world, num)
    n = int(counts.sum())
    examples = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)
    rows_got = np.array(draw(st.lists(st.integers(0, 3), min_size=world * num, max_size=world * num)), np.int64)
    group = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)
    return counts, examples, rows_got.reshape(world, num), group, np.arange(n, dtype=np.int64) * 7


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(case=segments())
def test_groups_are_the_runs_of_equal_examples_in_each_segment(implementation, case):
    counts, examples, *_ = case
    with using(implementation):
        per_segment, group, first, lengths = owner_pooling._groups(counts, examples)
    runs, starts, k = [], [], 0
    for size in counts.reshape(-1).tolist():
        in_segment = []
        for j in range(size):
            if j == 0 or examples[k] != examples[k - 1]:
                starts.append(k)
                in_segment.append(0)
            in_segment[-1] += 1
            k += 1
        runs.append(in_segment)
    assert per_segment.reshape(-1).tolist() == [len(r) for r in runs]
    assert first.tolist() == starts
    assert lengths.tolist() == [length for r in runs for length in r]
    assert group.tolist() == [g for r in runs for g, length in enumerate(r) for _ in range(length)]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(case=segments())
def test_routes_put_each_feature_s_entries_together_with_their_gradient_row(implementation, case):
    counts, _, rows_got, group, local = case
    coefs = (local / 3).astype(np.float32)
    if implementation == "numpy":
        rows, src, coef, bounds = owner_pooling._routes(counts, rows_got, group, local, coefs)
    else:
        from tpu_embedding_shim.engine.fast import exchange as kernels

        rows, src, coef, bounds = kernels.routes(counts, rows_got, group, local, coefs)
    world, num = counts.shape
    for p in range(num):
        want, k = [], 0
        for s in range(world):
            for q in range(num):
                for _ in range(counts[s, q]):
                    if q == p and rows_got[s, p]:
                        want.append((int(local[k]), int(rows_got[:s, p].sum() + group[k]), float(coefs[k])))
                    k += 1
        at = slice(int(bounds[p]), int(bounds[p + 1]))
        assert list(zip(rows[at].tolist(), src[at].tolist(), coef[at].tolist())) == want


@st.composite
def fills(draw):
    """(counts [W, F], dims [F], per feature a float32 source, rows, coefficients or None, present or None)."""
    world, num = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    counts = np.array(draw(st.lists(st.integers(0, 4), min_size=world * num, max_size=world * num)), np.int64)
    counts = counts.reshape(world, num)
    dims = np.array(draw(st.lists(st.integers(1, 3), min_size=num, max_size=num)), np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sources = [rng.standard_normal((int(rng.integers(1, 6)), int(d))).astype(np.float32) for d in dims]
    segment_feature = np.repeat(np.tile(np.arange(num), world), counts.reshape(-1))
    rows = np.array([rng.integers(0, sources[f].shape[0]) for f in segment_feature], np.int64)
    coef = rng.standard_normal(rows.shape[0]).astype(np.float32) if draw(st.booleans()) else None
    present = draw(st.none() | st.lists(st.booleans(), min_size=num, max_size=num))
    return counts, dims, sources, rows, coef, present


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(case=fills())
def test_fill_writes_each_entry_s_row_times_its_coefficient_where_its_segment_is(implementation, case):
    counts, dims, sources, rows, coef, present = case
    given_ = [True] * len(dims) if present is None else present
    written = exchange.Segments(counts * np.array(given_, np.int64), dims)
    flat = np.full(written.size, np.nan, np.float32)
    with using(implementation):
        exchange.fill(flat, exchange.Segments(counts, dims), sources, rows, coef, present)
    want, k = [], 0
    for r in range(counts.shape[0]):
        for f in range(counts.shape[1]):
            for _ in range(counts[r, f]):
                row = sources[f][rows[k]]
                if given_[f]:
                    want.extend((row if coef is None else row * coef[k]).tolist())
                k += 1
    assert flat.view(np.uint32).tolist() == np.array(want, np.float32).view(np.uint32).tolist()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=100, deadline=None)
@given(
    vocab=st.integers(1, 60),
    world=st.integers(1, 40),  # past `fast.exchange._LINEAR_RANKS`: the binary search too
    strategy=st.sampled_from(["div", "mod"]),
    data=st.data(),
)
def test_locate_gives_each_id_its_owner_and_its_row_there(implementation, vocab, world, strategy, data):
    own = Ownership(vocab, world, strategy, world)
    ids = np.array(data.draw(st.lists(st.integers(0, vocab - 1), max_size=30)), np.int64)
    with using(implementation):
        owner, local = own.locate(ids)
    rows_of = {rank: own.owned_ids(rank).tolist() for rank in range(world)}
    assert owner.dtype == local.dtype == np.int64
    assert [rows_of[o][r] for o, r in zip(owner.tolist(), local.tolist())] == ids.tolist()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(case=features(max_world=1), weighted=st.booleans())
def test_entries_go_out_in_send_order_with_their_example_and_coefficient(implementation, case, weighted):
    _, owners, locals_ = case
    bags = [
        owner_pooling.Bag(
            np.arange(o.shape[0], dtype=np.int64) // 2,
            o,
            local,
            (np.arange(o.shape[0]) / 3 if weighted else np.ones(o.shape[0])).astype(np.float32),
            (o.shape[0] + 1) // 2,
        )
        for o, local in zip(owners, locals_)
    ]
    with using(implementation):
        outbox, example, received, rows, examples_got, coefs = owner_pooling._send_entries(SingleProcess(), bags)
    joined = [np.concatenate([getattr(b, key) for b in bags]) if bags else np.zeros(0) for key in ("example", "coef")]
    assert received.tolist() == outbox.counts.tolist()
    assert rows.tolist() == outbox.local.tolist()
    assert example.tolist() == examples_got.tolist() == joined[0][outbox.order].tolist()
    assert coefs.dtype == np.float32 and coefs.tolist() == joined[1][outbox.order].tolist()
