"""`data.ragged_rows` gathers rows of a ragged array in one pass: the same values and splits as row by row."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tpu_embedding_shim.movielens import data as ml_data


@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=12),
    picks=st.lists(st.integers(0, 1000), max_size=20),
)
def test_rows_gathered_at_once_equal_rows_gathered_one_by_one(lengths, picks):
    splits = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    values = np.arange(100, 100 + splits[-1])
    rows = np.array([p % len(lengths) for p in picks], np.int64)
    got_values, got_splits = ml_data.ragged_rows(values, splits, rows)
    expected = [values[splits[r] : splits[r + 1]] for r in rows]
    np.testing.assert_array_equal(got_values, np.concatenate(expected) if expected else np.zeros(0, values.dtype))
    np.testing.assert_array_equal(got_splits, np.r_[0, np.cumsum([len(e) for e in expected])])
    assert got_splits.dtype == np.int64
