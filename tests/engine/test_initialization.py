"""A table's initial rows drawn alone (`engine/initialization.py`): any rank's rows, on any number of ranks,
are the full table's rows there, bit for bit, without the full table ever being drawn."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import Engine
from tpu_embedding_shim.engine.distributed import Ownership
from tpu_embedding_shim.engine.initialization import BLOCK_ROWS, initial_rows, seeded_initializers
from tpu_embedding_shim.spec import (
    AdagradSpec,
    EmbeddingSpec,
    FeatureSpec,
    RandomNormal,
    RandomUniform,
    RowIdInitializer,
    TableSpec,
    TruncatedNormal,
)
from tpu_embedding_shim.spec.initializers import Constant, Ones, Zeros


def _initializer(kind: str, seed: int, vocabulary: int, dim: int):
    return {
        "truncated": TruncatedNormal(stddev=0.5, seed=seed),
        "normal": RandomNormal(seed=seed),
        "uniform": RandomUniform(seed=seed),
        "row_id": RowIdInitializer(offset=seed),
        "constant": Constant(0.25),
        "constant_array": Constant(np.arange(vocabulary * dim) % 7),
        "zeros": Zeros(),
        "ones": Ones(),
    }[kind]


KINDS = ["truncated", "normal", "uniform", "row_id", "constant", "constant_array", "zeros", "ones"]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@given(
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**31 - 1),
    vocabulary=st.one_of(st.integers(1, 50), st.integers(BLOCK_ROWS - 3, 3 * BLOCK_ROWS + 5)),
    dim=st.integers(1, 3),
    world=st.integers(1, 5),
    strategy=st.sampled_from(["div", "mod"]),
)
@settings(max_examples=40, deadline=None)
def test_every_ranks_rows_are_the_full_tables_rows(kind, seed, vocabulary, dim, world, strategy):
    table = TableSpec(name="t", vocabulary_size=vocabulary, dim=dim)
    initializer = _initializer(kind, seed, vocabulary, dim)
    full = initial_rows(table, initializer)
    assert full.shape == (vocabulary, dim) and full.dtype == np.float32
    owners = Ownership(vocabulary, world, strategy, world)
    parts = [initial_rows(table, initializer, owners.owned(rank)) for rank in range(world)]
    assert _same_bits(owners.join(parts), full)
    picked = np.random.default_rng(seed).integers(0, vocabulary, size=7)  # any rows, in any order
    assert _same_bits(initial_rows(table, initializer, picked), full[picked])


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_of_one_block_is_the_initializers_own_draw(kind):
    """Block 0 is the initializer's own stream: calling the initializer on the table's shape gives the table."""
    table = TableSpec(name="t", vocabulary_size=BLOCK_ROWS, dim=3)
    initializer = _initializer(kind, 11, BLOCK_ROWS, 3)
    assert _same_bits(initial_rows(table, initializer), initializer((BLOCK_ROWS, 3), np.float32))


def test_blocks_after_the_first_are_new_draws():
    table = TableSpec(name="t", vocabulary_size=2 * BLOCK_ROWS, dim=2)
    values = initial_rows(table, TruncatedNormal(seed=5))
    assert not np.array_equal(values[:BLOCK_ROWS], values[BLOCK_ROWS:])
    assert abs(float(values.std()) - 0.88) < 0.02  # a truncated standard normal's spread (0.88), every block


def test_block_k_draws_from_the_seed_sequence_of_seed_and_k_halved():
    """The stream of block k > 0 is keyed by SeedSequence([seed, k]) (its first uint64, halved), the same number
    under numpy 1.x (TensorFlow 2.15's venv) and 2.x."""
    table = TableSpec(name="t", vocabulary_size=3 * BLOCK_ROWS, dim=2)
    values = initial_rows(table, TruncatedNormal(seed=5))
    for block in (1, 2):
        seed = int(np.random.SeedSequence([5, block]).generate_state(1, np.uint64)[0]) // 2
        expected = TruncatedNormal(seed=seed)((BLOCK_ROWS, 2), np.float32)
        assert _same_bits(values[block * BLOCK_ROWS : (block + 1) * BLOCK_ROWS], expected)


def test_any_other_callable_is_called_once_for_the_whole_table():
    calls = []

    def initializer(shape, dtype=np.float32):
        calls.append(tuple(shape))
        return np.arange(np.prod(shape), dtype=np.float64).reshape(shape)

    table = TableSpec(name="t", vocabulary_size=10, dim=2)
    assert initial_rows(table, initializer, slice(3, 5)).tolist() == [[6.0, 7.0], [8.0, 9.0]]
    assert calls == [(10, 2)]


def test_bad_values_and_rows_are_refused_clearly():
    table = TableSpec(name="t", vocabulary_size=4, dim=2)
    with pytest.raises(ValueError, match=r"The initializer of table 't' returned shape \(2, 2\); expected \(4, 2\)"):
        initial_rows(table, lambda shape, dtype=None: np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"table 't' returned NaN or infinite values"):
        initial_rows(table, Constant(np.array([1.0, np.nan] * 4)))
    with pytest.raises(TypeError, match=r"Argument `value` of Constant has 3 elements"):
        initial_rows(table, Constant(np.arange(3)))
    with pytest.raises(ValueError, match=r"Argument `rows` must lie in \[0, 4\). Received rows 2..4"):
        initial_rows(table, Zeros(), np.array([2, 4]))
    with pytest.raises(ValueError, match=r"Argument `rows` must be a slice or a 1-D array of row indices"):
        initial_rows(table, Zeros(), np.zeros((2, 2), np.int64))


def test_a_ranks_rows_are_drawn_without_the_full_table():
    """Peak memory of drawing one rank's rows of four (`mod`: rows from every block) stays within 1.25x its rows."""
    vocabulary, dim, world = 4_000_000, 8, 4
    table = TableSpec(name="t", vocabulary_size=vocabulary, dim=dim)
    rows = Ownership(vocabulary, world, "mod", world).owned(1)
    share = (vocabulary // world) * dim * 4
    tracemalloc.start()
    try:
        mine = initial_rows(table, TruncatedNormal(seed=1), rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert mine.nbytes == share
    assert peak <= 1.25 * share, (peak, share)  # the full table would be 4x `share` (8x as float64 draws)


def test_engine_tables_are_drawn_this_way():
    spec = EmbeddingSpec(
        tables=(
            TableSpec(name="a", vocabulary_size=BLOCK_ROWS + 9, dim=2),  # TensorFlow's default: truncated normal
            TableSpec(name="b", vocabulary_size=7, dim=3, initializer=RandomUniform()),
        ),
        features=(
            FeatureSpec(name="f", table="a", num_buckets=BLOCK_ROWS + 9),
            FeatureSpec(name="g", table="b", num_buckets=7),
        ),
        optimizer=AdagradSpec(learning_rate=0.1),
    )
    engine = Engine(spec, seed=4, kernels="numpy")
    initializers = seeded_initializers(spec, 4)
    for table in spec.tables:
        assert _same_bits(engine.table(table.name), initial_rows(table, initializers[table.name]))
