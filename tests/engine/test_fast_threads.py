"""`engine/fast/threads.py`: small calls on one thread, small tables side by side, the same bits.

Skipped when numba is not installed (CI installs the `fast` extra); the
cases that need two threads are skipped on a one-core machine (CI has two).
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

from .fast_only import require_fast_kernels

require_fast_kernels()
import numba  # noqa: E402

from tpu_embedding_shim.engine.engine import Engine  # noqa: E402
from tpu_embedding_shim.engine.fast import owner, threads  # noqa: E402
from tpu_embedding_shim.spec import (  # noqa: E402
    AdagradSpec,
    EmbeddingSpec,
    FeatureSpec,
    FtrlSpec,
    RandomUniform,
    TableSpec,
)

from .strategies import step_both  # noqa: E402

two_threads = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two numba threads")


@contextlib.contextmanager
def serial_work(value):
    saved = threads.SERIAL_WORK
    threads.SERIAL_WORK = value
    try:
        yield
    finally:
        threads.SERIAL_WORK = saved


@pytest.fixture(autouse=True)
def threading_layer_chosen():
    """`run_each` spreads only once numba has chosen a (thread-safe) layer: run one parallel kernel."""
    slot_map = owner.new_slot_map(4)
    owner.reset_owned(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), slot_map)


def recorder(log, value, work=1):
    """A (work, call) pair whose call records (value, its thread, numba's thread count there)."""

    def call():
        log.append((value, threading.get_ident(), numba.get_num_threads()))
        return value

    return work, call


@two_threads
def test_small_calls_run_side_by_side_on_one_numba_thread_each():
    log = []
    with serial_work(10):
        results = threads.run_each([recorder(log, i, work=4) for i in range(6)])  # each < 10, together >= 10
    assert results == list(range(6))
    assert {count for _, _, count in log} == {1}
    assert len({ident for _, ident, _ in log}) == 2  # the calling thread and one helper
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS  # the caller's count is restored


@two_threads
def test_large_calls_run_on_the_calling_thread_with_every_thread():
    log = []
    with serial_work(10):
        results = threads.run_each([recorder(log, "big", work=50), recorder(log, "a", 6), recorder(log, "b", 6)])
    assert results == ["big", "a", "b"]
    big = [entry for entry in log if entry[0] == "big"]
    assert big == [("big", threading.get_ident(), numba.get_num_threads())]


def test_calls_worth_no_launch_together_run_in_order_on_the_calling_thread():
    log = []
    with serial_work(1000):
        assert threads.run_each([recorder(log, i, work=4) for i in range(5)]) == list(range(5))
    assert [value for value, _, _ in log] == list(range(5))
    assert {ident for _, ident, _ in log} == {threading.get_ident()}


@two_threads
def test_every_call_runs_and_the_first_error_in_call_order_is_raised():
    done = []

    def failing(message):
        def call():
            done.append(message)
            raise ValueError(message)

        return 4, call

    calls = [recorder(done, 0, 4), failing("first"), recorder(done, 2, 4), failing("second"), recorder(done, 4, 4)]
    with serial_work(10), pytest.raises(ValueError, match="first"):
        threads.run_each(calls)
    assert sorted(map(str, (entry if isinstance(entry, str) else entry[0] for entry in done))) == [
        "0",
        "2",
        "4",
        "first",
        "second",
    ]


def test_one_thread_below_restores_the_thread_count():
    before = numba.get_num_threads()
    with serial_work(100):
        with threads.one_thread_below(99):
            assert numba.get_num_threads() == 1
        with threads.one_thread_below(100):
            assert numba.get_num_threads() == before
    assert numba.get_num_threads() == before


def test_num_threads_reads_and_sets_what_numba_reads_and_sets_on_every_thread():
    """`threads.num_threads` / `_set_num_threads` skip numba's per-call lock; they must mean numba's count."""
    assert threads._parallel._is_initialized  # numba's threads run (the fixture's kernel): the lock-free path
    seen = []

    def on_a_thread():
        seen.append((threads.num_threads(), numba.get_num_threads()))
        with threads.one_thread_below(0):
            seen.append((threads.num_threads(), numba.get_num_threads()))
        seen.append((threads.num_threads(), numba.get_num_threads()))

    on_a_thread()
    helper = threading.Thread(target=on_a_thread)
    helper.start()
    helper.join()
    full = numba.config.NUMBA_NUM_THREADS
    assert seen == [(full, full), (1, 1), (full, full)] * 2


def test_balance_gives_each_share_about_the_same_work():
    shares = threads.balance([0, 1, 2, 3, 4], [10, 1, 1, 1, 9], 2)
    assert sorted(i for share in shares for i in share) == [0, 1, 2, 3, 4]
    loads = [sum([10, 1, 1, 1, 9][i] for i in share) for share in shares]
    assert sorted(loads) == [11, 11]


def test_a_forked_child_gets_its_own_pool(monkeypatch):
    """The pool's helper threads do not survive a fork: a child must not submit to its parent's."""
    parent = threads.worker_pool(1)
    assert threads.worker_pool(1) is parent
    monkeypatch.setattr(threads.os, "getpid", lambda: -12345)
    child = threads.worker_pool(1)
    assert child is not parent
    assert child.submit(lambda: 7).result() == 7


def _many_tables_spec(optimizer, tables=5, pipelined=False):
    return EmbeddingSpec(
        pipeline_execution_with_tensor_core=pipelined,
        tables=tuple(
            TableSpec(
                name=f"t{i}",
                vocabulary_size=50 + 7 * i,
                dim=4 + i,
                combiner=combiner,
                initializer=RandomUniform(-1, 1, seed=i),
            )
            for i, combiner in zip(range(tables), ["sum", "mean", "sqrtn", "sum", "mean"])
        ),
        features=tuple(FeatureSpec(name=f"f{i}", table=f"t{i}", num_buckets=50 + 7 * i) for i in range(tables))
        + (FeatureSpec(name="seq", table="t0", num_buckets=50, max_sequence_length=3),),
        optimizer=optimizer,
    )


@two_threads
@pytest.mark.parametrize("optimizer", [AdagradSpec(learning_rate=0.1), FtrlSpec(learning_rate=0.05)])
@pytest.mark.parametrize("pipelined", [False, True])
def test_small_tables_side_by_side_give_the_numpy_engines_bits(optimizer, pipelined):
    spec = _many_tables_spec(optimizer, pipelined=pipelined)
    fast, slow = Engine(spec, kernels="fast"), Engine(spec, kernels="numpy")
    rng = np.random.default_rng(3)
    helpers = set()
    real = threads._run_share

    def spy(*args):
        helpers.add(threading.get_ident())
        return real(*args)

    # every call below 200 row elements, together above: each step's calls are spread
    with serial_work(200), pytest.MonkeyPatch.context() as patch:
        patch.setattr(threads, "_run_share", spy)
        for _ in range(4):
            features = {
                f.name: [list(rng.integers(0, f.num_buckets, rng.integers(0, 6))) for _ in range(8)]
                for f in spec.features
            }
            grads = {f"f{i}": rng.standard_normal((8, 4 + i)) for i in range(5)}
            grads["seq"] = rng.standard_normal((8, 3, 4))
            step_both(fast, slow, features, grads)
    assert len(helpers) == 2  # the calling thread and a helper both ran shares
    for table in spec.tables:
        np.testing.assert_array_equal(fast.table(table.name), slow.table(table.name))
        for name, values in slow.slots(table.name).items():
            np.testing.assert_array_equal(fast.slots(table.name)[name], values)
        assert fast.kernels.slot_maps_clean()


@two_threads
def test_a_failing_step_over_small_tables_side_by_side_changes_nothing():
    """A NaN in the last feature's gradient after lookups spread side by side: the check refuses the
    step; no table or slot changes, every slot map is clean, and the same lookup still trains."""
    spec = _many_tables_spec(AdagradSpec(learning_rate=0.1))
    engine = Engine(spec, kernels="fast")
    rng = np.random.default_rng(4)
    features = {f.name: [list(rng.integers(0, f.num_buckets, 4)) for _ in range(8)] for f in spec.features}
    grads = {f"f{i}": rng.standard_normal((8, 4 + i)) for i in range(5)}
    grads["seq"] = rng.standard_normal((8, 3, 4))
    with serial_work(200):
        result = engine.forward(features)
        before = {t.name: (engine.table(t.name), engine.slots(t.name)["accumulators"]) for t in spec.tables}
        broken = dict(grads, f4=np.full((8, 8), np.nan))
        with pytest.raises(ValueError, match="f4"):
            engine.apply_gradients(result, broken)
        for name, (table, slots) in before.items():
            np.testing.assert_array_equal(engine.table(name), table)
            np.testing.assert_array_equal(engine.slots(name)["accumulators"], slots)
            assert engine.kernels.slot_maps_clean()
        engine.apply_gradients(result, grads)
    assert engine.global_step == 1
    assert any(not np.array_equal(engine.table(name), table) for name, (table, _) in before.items())
