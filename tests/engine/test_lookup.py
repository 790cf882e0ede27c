"""Lookup kernels on a table you can read by eye: row i is [i, 10 i]."""

from __future__ import annotations

import ast
import doctest
import json
from pathlib import Path

import numpy as np
import pytest

from tpu_embedding_shim.engine import lookup, ragged, sharding
from tpu_embedding_shim.engine.lookup import (
    pooled_backward,
    pooled_coefficients,
    pooled_lookup,
    sequence_backward,
    sequence_lookup,
    sum_duplicates,
)
from tpu_embedding_shim.engine.ragged import Ragged, to_ragged
from tpu_embedding_shim.engine.sharding import ShardedTable
from tpu_embedding_shim.spec import FeatureSpec, RowIdInitializer

V = 10
FEATURE = FeatureSpec(name="f", table="t", num_buckets=V)
# RowIdInitializer: row i = [i, i]; scale the second column by 10 so columns differ.
TABLE = RowIdInitializer()((V, 2)) * np.array([1.0, 10.0], dtype=np.float32)


def batch(ids, weights=None):
    return to_ragged(ids, weights, feature=FEATURE)


def rows(*values):
    """[[v, 10 v], ...]: what a lookup returns when it combines to the numbers v."""
    return np.array([[v, 10 * v] for v in values], dtype=np.float32)


# --------------------------------------------------------------------------
# Combiners
# --------------------------------------------------------------------------

# (name, ids, weights, combiner, expected combined row ids)
POOLED = [
    ("sum", [[1, 2], [4]], None, "sum", [3, 4]),
    ("mean", [[1, 2], [4]], None, "mean", [1.5, 4]),
    ("sqrtn", [[3, 4], [4]], None, "sqrtn", [7 / np.sqrt(2), 4]),
    ("sum_weighted", [[1, 2]], [[2.0, 0.5]], "sum", [3]),
    ("mean_weighted", [[1, 4]], [[3.0, 1.0]], "mean", [(3 + 4) / 4]),
    ("sqrtn_weighted", [[1, 4]], [[3.0, 4.0]], "sqrtn", [(3 + 16) / 5]),
    ("repeated_ids_count_each_time", [[2, 2, 5]], None, "mean", [3]),
    ("empty_example_gives_zeros", [[1], [], [2]], [[1.0], [], [1.0]], "sum", [1, 0, 2]),
    ("padding_only_example_is_empty", [[3, -1], [-1, -1]], None, "mean", [3, 0]),
    # The safe rule: weights <= 0 are pruned for mean and sqrtn...
    ("mean_prunes_nonpositive_weights", [[1, 5, 9]], [[2.0, 0.0, -1.0]], "mean", [1]),
    ("sqrtn_prunes_nonpositive_weights", [[4, 9]], [[2.0, -3.0]], "sqrtn", [4]),
    ("mean_all_pruned_is_empty", [[4, 9]], [[0.0, -3.0]], "mean", [0]),
    # ...but kept for sum.
    ("sum_keeps_negative_weights", [[1, 5]], [[2.0, -1.0]], "sum", [-3]),
    ("sum_zero_weights_give_zero", [[7, 8]], [[0.0, 0.0]], "sum", [0]),
]


@pytest.mark.parametrize("name,ids,weights,combiner,expected", POOLED, ids=[p[0] for p in POOLED])
def test_pooled_lookup(name, ids, weights, combiner, expected):
    out = pooled_lookup(TABLE, batch(ids, weights), combiner)
    assert out.dtype == np.float32 and out.shape == (len(expected), 2)
    np.testing.assert_allclose(out, rows(*expected), rtol=1e-6)


def test_default_id_fills_empty_examples_only():
    b = batch([[1], [], [-1, -1], [2, 3]])
    out = pooled_lookup(TABLE, b, "mean", default_id=9)
    np.testing.assert_allclose(out, rows(1, 9, 9, 2.5))


def test_default_id_fills_examples_emptied_by_pruning():
    b = batch([[4, 5], [6]], [[-1.0, 0.0], [2.0]])
    np.testing.assert_allclose(pooled_lookup(TABLE, b, "sqrtn", default_id=7), rows(7, 6))
    # With sum nothing is pruned: the first example is -4 (not empty, so no default).
    np.testing.assert_allclose(pooled_lookup(TABLE, b, "sum", default_id=7), rows(-4, 12))


# --------------------------------------------------------------------------
# safe=False: TensorFlow's plain embedding_lookup_sparse
# --------------------------------------------------------------------------


def test_unsafe_keeps_nonpositive_weights():
    b = batch([[1, 5]], [[2.0, -1.0]])
    np.testing.assert_allclose(pooled_lookup(TABLE, b, "mean", safe=False), rows(-3 / 1))
    np.testing.assert_allclose(pooled_lookup(TABLE, b, "sqrtn", safe=False), rows(-3 / np.sqrt(5)))


def test_unsafe_zero_denominator_gives_zeros():
    b = batch([[1, 5]], [[1.0, -1.0]])
    np.testing.assert_array_equal(pooled_lookup(TABLE, b, "mean", safe=False), rows(0))


def test_unsafe_empty_examples_are_zero_rows_and_kept():
    b = batch([[], [3], [], []])
    out = pooled_lookup(TABLE, b, "sum", safe=False)
    np.testing.assert_array_equal(out, rows(0, 3, 0, 0))


def test_tf_plain_lookup_drops_trailing_empty_examples_we_do_not():
    """TF's embedding_lookup_sparse returns only max(row with ids) + 1 rows: trailing
    empty examples are missing. Conformance case ls0218 shows it (batch 4, 1 row)."""
    data = Path(__file__).parents[1] / "conformance" / "data"
    case = next(c for c in json.loads((data / "index.json").read_text())["cases"] if c["id"] == "ls0218")
    with np.load(data / case["file"]) as z:
        a = {k: z[f"ls0218__{k}"] for k in ("table", "indices", "ids", "dense_shape", "plain_out")}

    class Sparse:
        indices, values, dense_shape = a["indices"], a["ids"], a["dense_shape"]

    b = to_ragged(Sparse(), feature=FeatureSpec(name="f", table="t", num_buckets=case["params"]["vocab"]))
    ours = pooled_lookup(a["table"], b, case["params"]["combiner"], safe=False)
    assert a["plain_out"].shape[0] == 1 < b.batch_size == ours.shape[0] == 4
    np.testing.assert_allclose(ours[:1], a["plain_out"], rtol=1e-5, atol=1e-6)
    assert (b.row_lengths()[1:] == 0).all() and not ours[1:].any()


def test_default_id_needs_safe_and_a_valid_row():
    b = batch([[1]])
    with pytest.raises(ValueError, match="`default_id`.*safe=True"):
        pooled_lookup(TABLE, b, "sum", safe=False, default_id=0)
    with pytest.raises(ValueError, match=r"`default_id`.*\[0, 10\).*Received: 10"):
        pooled_lookup(TABLE, b, "sum", default_id=10)
    with pytest.raises(ValueError, match="`default_id`"):
        pooled_lookup(TABLE, b, "sum", default_id=-1)
    with pytest.raises(TypeError, match="`default_id`"):
        pooled_lookup(TABLE, b, "sum", default_id=1.0)


def test_unknown_combiner_lists_the_valid_ones():
    with pytest.raises(ValueError, match="'sum', 'mean', 'sqrtn'.*Received: 'max'"):
        pooled_lookup(TABLE, batch([[1]]), "max")
    with pytest.raises(ValueError, match="case-sensitive"):
        pooled_backward(batch([[1]]), "MEAN", np.zeros((1, 2)))


def test_empty_batch_and_no_ids():
    assert pooled_lookup(TABLE, batch(np.zeros((0, 3), np.int64)), "mean").shape == (0, 2)
    np.testing.assert_array_equal(pooled_lookup(TABLE, batch([[-1], [-1]]), "sqrtn"), np.zeros((2, 2)))


def test_works_on_a_sharded_table():
    b = batch([[1, 2, 9], [], [7]], [[1.0, 2.0, 0.5], [], [3.0]])
    for n in (1, 3, 4):
        for strategy in ("div", "mod"):
            sharded = ShardedTable(TABLE, n, strategy)
            for combiner in ("sum", "mean", "sqrtn"):
                np.testing.assert_array_equal(
                    pooled_lookup(sharded, b, combiner, default_id=3), pooled_lookup(TABLE, b, combiner, default_id=3)
                )


def test_coefficients_are_scale_times_weight():
    b = batch([[1, 2], [3]], [[1.0, 3.0], [-2.0]])
    example, ids, coef, empty = pooled_coefficients(b, "mean")
    assert example.tolist() == [0, 0] and ids.tolist() == [1, 2]
    np.testing.assert_allclose(coef, [0.25, 0.75])
    assert empty.tolist() == [False, True]


# --------------------------------------------------------------------------
# Pooled backward
# --------------------------------------------------------------------------


def test_pooled_backward_sum_of_duplicates():
    b = batch([[1, 2, 1], [2]], [[1.0, 2.0, 3.0], [0.5]])
    grad = np.array([[1.0, 10.0], [2.0, 20.0]], dtype=np.float32)
    ids, g = pooled_backward(b, "sum", grad)
    assert ids.tolist() == [1, 2]
    # id 1: (1 + 3) * grad[0]; id 2: 2 * grad[0] + 0.5 * grad[1]
    np.testing.assert_allclose(g, [[4.0, 40.0], [3.0, 30.0]])
    assert ids.dtype == np.int64 and g.dtype == np.float32


def test_pooled_backward_mean_and_sqrtn_scale():
    b = batch([[3, 5]], [[1.0, 3.0]])
    grad = np.array([[4.0, 8.0]], dtype=np.float32)
    ids, g = pooled_backward(b, "mean", grad)
    assert ids.tolist() == [3, 5]
    np.testing.assert_allclose(g, [[1.0, 2.0], [3.0, 6.0]])  # w / sum w = 1/4, 3/4
    _ids, g = pooled_backward(b, "sqrtn", grad)
    s = np.sqrt(10.0)
    np.testing.assert_allclose(g, [[4 / s, 8 / s], [12 / s, 24 / s]], rtol=1e-6)


def test_pooled_backward_pruned_entries_get_nothing():
    b = batch([[3, 5, 7]], [[2.0, 0.0, -1.0]])
    ids, g = pooled_backward(b, "mean", np.ones((1, 2), np.float32))
    assert ids.tolist() == [3]
    ids, g = pooled_backward(b, "sum", np.ones((1, 2), np.float32))
    assert ids.tolist() == [3, 5, 7]
    np.testing.assert_allclose(g[:, 0], [2.0, 0.0, -1.0])


def test_pooled_backward_default_id_receives_empty_examples_gradient():
    b = batch([[1], [], [-1]])
    grad = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], dtype=np.float32)
    ids, g = pooled_backward(b, "mean", grad, default_id=1)
    assert ids.tolist() == [1]
    np.testing.assert_allclose(g, [[6.0, 6.0]])
    ids, g = pooled_backward(b, "mean", grad)  # without default_id, empty rows send nothing
    np.testing.assert_allclose(g, [[1.0, 1.0]])


def test_pooled_backward_checks_grad_shape():
    with pytest.raises(ValueError, match=r"`grad`.*\[batch_size=2, dim\].*\(3, 2\)"):
        pooled_backward(batch([[1], [2]]), "sum", np.zeros((3, 2)))


def test_pooled_backward_of_empty_batch():
    ids, g = pooled_backward(batch([[-1]]), "sum", np.zeros((1, 4)))
    assert ids.shape == (0,) and g.shape == (0, 4)


# --------------------------------------------------------------------------
# Sequence
# --------------------------------------------------------------------------


def test_sequence_pads_truncates_and_reports_lengths():
    b = batch([[4, 5, 6], [7]])
    out, lengths = sequence_lookup(TABLE, b, 2)
    assert out.shape == (2, 2, 2) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:, :, 0], [[4, 5], [7, 0]])
    assert lengths.tolist() == [2, 1] and lengths.dtype == np.int64
    out, lengths = sequence_lookup(TABLE, b, 4)
    np.testing.assert_array_equal(out[:, :, 0], [[4, 5, 6, 0], [7, 0, 0, 0]])
    assert lengths.tolist() == [3, 1]


def test_sequence_positions_come_from_the_input():
    # Dense padding in the middle keeps the later id at its column; length counts it.
    b = batch([[-1, 3, -1, 8], [-1, -1, -1, -1]])
    out, lengths = sequence_lookup(TABLE, b, 5)
    np.testing.assert_array_equal(out[:, :, 0], [[0, 3, 0, 8, 0], [0, 0, 0, 0, 0]])
    assert lengths.tolist() == [4, 0]


def test_sequence_length_is_capped_by_truncation():
    class Sparse:
        indices = np.array([[0, 0], [0, 6], [1, 2]])
        values = np.array([1, 2, 3])
        dense_shape = np.array([2, 7])

    f = FeatureSpec(name="s", table="t", num_buckets=V, max_sequence_length=3)
    out, lengths = sequence_lookup(TABLE, to_ragged(Sparse(), feature=f), 3)
    np.testing.assert_array_equal(out[:, :, 0], [[1, 0, 0], [0, 0, 3]])
    assert lengths.tolist() == [3, 3]


def test_sequence_ignores_weights():
    plain, _ = sequence_lookup(TABLE, batch([[1, 2]]), 2)
    weighted, _ = sequence_lookup(TABLE, batch([[1, 2]], [[5.0, -1.0]]), 2)
    np.testing.assert_array_equal(plain, weighted)


def test_sequence_rejects_bad_length():
    with pytest.raises(ValueError, match="`max_sequence_length`.*>= 1"):
        sequence_lookup(TABLE, batch([[1]]), 0)


def test_sequence_backward():
    b = batch([[4, 5, 4], [5]])
    grad = np.arange(2 * 2 * 2, dtype=np.float32).reshape(2, 2, 2)
    ids, g = sequence_backward(b, 2, grad)
    # position 2 of example 0 (an id 4) is truncated: it gets nothing.
    assert ids.tolist() == [4, 5]
    np.testing.assert_array_equal(g, [grad[0, 0], grad[0, 1] + grad[1, 0]])
    with pytest.raises(ValueError, match="`grad`"):
        sequence_backward(b, 3, grad)


# --------------------------------------------------------------------------
# sum_duplicates
# --------------------------------------------------------------------------


def test_sum_duplicates():
    ids, g = sum_duplicates(np.array([5, 2, 5, 9, 2]), np.array([[1.0], [2.0], [3.0], [4.0], [5.0]]))
    assert ids.tolist() == [2, 5, 9]
    np.testing.assert_array_equal(g, [[7.0], [4.0], [4.0]])


def test_sum_duplicates_empty_and_mismatch():
    ids, g = sum_duplicates(np.zeros(0, np.int64), np.zeros((0, 3)))
    assert ids.shape == (0,) and g.shape == (0, 3)
    with pytest.raises(ValueError, match="same length"):
        sum_duplicates([1, 2], [[1.0]])


def test_kernels_trust_a_hand_built_ragged():
    b = Ragged(
        values=np.array([0, 9]),
        row_splits=np.array([0, 1, 2]),
        weights=np.array([2.0, 1.0], np.float32),
        positions=np.array([0, 0]),
    )
    np.testing.assert_allclose(pooled_lookup(TABLE, b, "sum"), rows(0, 9))


# --------------------------------------------------------------------------
# The modules themselves
# --------------------------------------------------------------------------


@pytest.mark.parametrize("module", [ragged, lookup, sharding], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("module", [ragged, lookup, sharding], ids=lambda m: m.__name__)
def test_engine_imports_spec_only(module):
    """engine/ may import spec/ (and itself), never api/."""
    tree = ast.parse(Path(module.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:  # relative: a sibling engine module
                assert "compat" not in name
            elif name.startswith("tpu_embedding_shim"):
                assert name.startswith("tpu_embedding_shim.spec"), name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("tpu_embedding_shim") or alias.name.startswith(
                    "tpu_embedding_shim.spec"
                ), alias.name
