"""`tf.nn` / `tf.compat.v1.nn` embedding lookups: signatures, TensorFlow's numbers, errors, properties.

Every expected number and exception type below was read off TensorFlow
2.15.1 (the oracle venv), for the same inputs. TensorFlow's run-time
`InvalidArgumentError` is a `ValueError` here (docs/stricter_than_tensorflow.md).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import embedding_ops
from tpu_embedding_shim.engine.lookup import clip_rows
from tpu_embedding_shim.engine.sharding import split_table

T = np.arange(14, dtype=np.float32).reshape(7, 2)  # row i = [2i, 2i + 1]
TOL = dict(rtol=1e-5, atol=1e-6)


def sparse(indices, values, dense_shape):
    return tf.SparseTensor(np.array(indices, np.int64).reshape(-1, len(dense_shape)), values, dense_shape)


SP = sparse([[0, 0], [0, 1], [2, 0]], [1, 3, 6], [4, 2])
SP_INVALID = sparse([[0, 0], [0, 1], [2, 0]], [1, -3, 6], [4, 2])
W = SP.with_values(np.array([1.0, 2.0, 0.5], np.float32))


# --------------------------------------------------------------------------
# Namespaces and signatures
# --------------------------------------------------------------------------

SIGNATURES = {  # str(inspect.signature(f)) of TensorFlow 2.15.1
    tf.nn.embedding_lookup: "(params, ids, max_norm=None, name=None)",
    tf.compat.v1.nn.embedding_lookup: (
        "(params, ids, partition_strategy='mod', name=None, validate_indices=True, max_norm=None)"
    ),
    tf.nn.embedding_lookup_sparse: (
        "(params, sp_ids, sp_weights, combiner=None, max_norm=None, name=None, allow_fast_lookup=False)"
    ),
    tf.compat.v1.nn.embedding_lookup_sparse: (
        "(params, sp_ids, sp_weights, partition_strategy='mod', name=None, combiner=None, max_norm=None, "
        "allow_fast_lookup=False)"
    ),
    tf.nn.safe_embedding_lookup_sparse: (
        "(embedding_weights, sparse_ids, sparse_weights=None, combiner='mean', default_id=None, max_norm=None, "
        "name=None, allow_fast_lookup=False)"
    ),
    tf.compat.v1.nn.safe_embedding_lookup_sparse: (
        "(embedding_weights, sparse_ids, sparse_weights=None, combiner='mean', default_id=None, name=None, "
        "partition_strategy='div', max_norm=None, allow_fast_lookup=False)"
    ),
}


@pytest.mark.parametrize("function", list(SIGNATURES), ids=lambda f: f.__name__)
def test_signatures_are_tensorflows(function):
    signature = inspect.signature(function).replace(return_annotation=inspect.Signature.empty)
    plain = signature.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    )
    assert str(plain) == SIGNATURES[function]


def test_namespaces():
    assert tf.compat.v2.nn is tf.nn
    assert tf.nn.embedding_lookup is embedding_ops.embedding_lookup_v2
    assert tf.compat.v1.nn.embedding_lookup is embedding_ops.embedding_lookup
    assert tf.nn.safe_embedding_lookup_sparse is embedding_ops.safe_embedding_lookup_sparse_v2
    assert tf.compat.v1.nn.embedding_lookup_sparse is embedding_ops.embedding_lookup_sparse


# --------------------------------------------------------------------------
# embedding_lookup
# --------------------------------------------------------------------------


def test_the_tf2_docstring_example():
    shards = [np.array([[1, 2], [3, 4]]), np.array([[5, 6], [7, 8]]), np.array([[9, 10]])]
    assert tf.nn.embedding_lookup(shards, [0, 3, 4]).tolist() == [[1, 2], [7, 8], [9, 10]]
    full = np.array([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]])
    assert tf.nn.embedding_lookup(full, [0, 3, 4]).tolist() == [[1, 2], [7, 8], [9, 10]]


def test_ids_of_any_shape_and_the_params_dtype():
    assert tf.nn.embedding_lookup(T, [[1, 2], [3, 6]]).tolist() == [[[2, 3], [4, 5]], [[6, 7], [12, 13]]]
    assert tf.nn.embedding_lookup(T, 3).tolist() == [6, 7]
    assert tf.nn.embedding_lookup(T, np.zeros(0, np.int64)).shape == (0, 2)
    assert tf.nn.embedding_lookup(T, []).shape == (0, 2)
    assert tf.nn.embedding_lookup(np.arange(6).reshape(3, 2), [1]).dtype == np.int64
    assert tf.nn.embedding_lookup(T.astype(np.float64), [1]).dtype == np.float64
    assert tf.nn.embedding_lookup(T, np.array([1], np.int32)).tolist() == [[2, 3]]


def test_mod_and_div_shards():
    ids = [0, 1, 2, 5, 6]
    assert tf.compat.v1.nn.embedding_lookup([T[0::2], T[1::2]], ids).tolist() == T[ids].tolist()  # 'mod' default
    assert tf.compat.v1.nn.embedding_lookup([T[:4], T[4:]], ids, partition_strategy="div").tolist() == T[ids].tolist()
    assert tf.nn.embedding_lookup([T[:4], T[4:]], ids).tolist() == T[ids].tolist()
    # More shards than rows: 'mod' leaves the last shard empty (TF accepts it too).
    empty = np.zeros((0, 2), np.float32)
    assert tf.compat.v1.nn.embedding_lookup([T[:1], T[1:2], empty], [0, 1]).tolist() == [[0, 1], [2, 3]]


def test_max_norm_clips_each_row():
    out = tf.nn.embedding_lookup(T, [0, 1, 6], max_norm=1.0)
    np.testing.assert_allclose(out, [[0.0, 1.0], [0.5547002, 0.8320503], [0.67828006, 0.7348034]], **TOL)
    np.testing.assert_array_equal(tf.nn.embedding_lookup(T, [0, 1, 6], max_norm=1), out)
    np.testing.assert_allclose(
        tf.compat.v1.nn.embedding_lookup([T[:4], T[4:]], [0, 1, 6], "div", max_norm=1.0), out, **TOL
    )
    assert clip_rows(np.zeros((1, 3), np.float32), 1.0).tolist() == [[0.0, 0.0, 0.0]]


def test_params_of_rank_3_and_1():
    cube = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    out = tf.compat.v1.nn.embedding_lookup(cube, [[1], [3]], max_norm=5.0)  # clipped over both trailing axes
    assert out.shape == (2, 1, 3, 2)
    np.testing.assert_allclose(
        out[0, 0], [[1.4126447, 1.6480856], [1.8835264, 2.1189673], [2.354408, 2.5898488]], **TOL
    )
    np.testing.assert_allclose(out[1, 0], [[1.786122, 1.885351], [1.9845802, 2.0838091], [2.1830382, 2.282267]], **TOL)
    line = np.arange(4, dtype=np.float32) - 2
    assert tf.compat.v1.nn.embedding_lookup(line, [[1], [3]], max_norm=1.5).tolist() == [[-1.0], [1.0]]
    halves = [np.arange(2, dtype=np.float32), np.arange(2, dtype=np.float32)]
    assert tf.compat.v1.nn.embedding_lookup(halves, [[1], [3]], max_norm=1.5).tolist() == [[0.0], [1.0]]


# --------------------------------------------------------------------------
# embedding_lookup_sparse
# --------------------------------------------------------------------------


def test_the_tf2_sparse_docstring_examples():
    params = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], dtype=np.float32)
    ids = sparse([[0, 0], [0, 1], [1, 0], [2, 0]], [0, 1, 3, 2], [3, 2])
    assert tf.nn.embedding_lookup_sparse(params, ids, None, combiner="sum").tolist() == [[4, 6], [7, 8], [5, 6]]
    weights = ids.with_values(np.array([0.1, 1.0, 0.5, 2.0], np.float32))
    np.testing.assert_allclose(
        tf.nn.embedding_lookup_sparse(params, ids, weights, combiner="sum"),
        [[3.1, 4.2], [3.5, 4.0], [10.0, 12.0]],
        **TOL,
    )


def test_plain_lookup_drops_trailing_empty_rows():
    assert tf.nn.embedding_lookup_sparse(T, SP, None).tolist() == [[4, 5], [0, 0], [12, 13]]  # mean by default
    assert tf.compat.v1.nn.embedding_lookup_sparse(T, SP, None).tolist() == [[4, 5], [0, 0], [12, 13]]
    assert tf.nn.embedding_lookup_sparse(T, SP, W, combiner="sum").tolist() == [[14, 17], [0, 0], [6, 6.5]]
    assert tf.nn.embedding_lookup_sparse(T, sparse([], [], [3, 2]), None).shape == (0, 2)
    assert tf.nn.embedding_lookup_sparse(T, sparse([], [], [0, 2]), None).shape == (0, 2)
    repeated = sparse([[0, 0], [0, 0]], [1, 2], [1, 1])  # one index twice: both ids count
    assert tf.nn.embedding_lookup_sparse(T, repeated, None, combiner="sum").tolist() == [[6, 8]]


def test_plain_lookup_of_other_ranks_combines_by_the_first_index():
    rank3 = sparse([[0, 0, 0], [0, 1, 0], [1, 1, 1]], [1, 2, 3], [2, 2, 2])
    assert tf.nn.embedding_lookup_sparse(T, rank3, None, combiner="sum").tolist() == [[6, 8], [6, 7]]
    rank1 = sparse([[0], [2]], [1, 2], [3])
    assert tf.nn.embedding_lookup_sparse(T, rank1, None, combiner="sum").tolist() == [[2, 3], [0, 0], [4, 5]]


def test_plain_lookup_with_ragged_ids_shards_max_norm_and_rank_3_params():
    ragged = tf.RaggedTensor.from_row_lengths([1, 3, 6], [2, 0, 1, 0])
    assert tf.nn.embedding_lookup_sparse(T, ragged, None).tolist() == [[4, 5], [0, 0], [12, 13]]
    assert tf.compat.v1.nn.embedding_lookup_sparse([T[0::2], T[1::2]], SP, None, combiner="sum").tolist() == [
        [8, 10],
        [0, 0],
        [12, 13],
    ]
    assert tf.nn.embedding_lookup_sparse([T[:4], T[4:]], SP, None, combiner="sum").tolist() == [
        [8, 10],
        [0, 0],
        [12, 13],
    ]
    np.testing.assert_allclose(
        tf.nn.embedding_lookup_sparse(T, SP, W, combiner="sum", max_norm=1.0),
        [[1.8563, 2.3506], [0, 0], [0.3391, 0.3674]],
        atol=1e-4,
    )
    cube = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    ids = sparse([[0, 0], [0, 1], [2, 0]], [1, 0, 3], [4, 2])
    out = tf.nn.embedding_lookup_sparse(cube, ids, None, combiner="sum")
    assert out.shape == (3, 3, 2)
    assert out[0].tolist() == [[6, 8], [10, 12], [14, 16]] and out[2].tolist() == cube[3].tolist()
    out = tf.nn.embedding_lookup_sparse(cube, ids, W, combiner="mean")
    np.testing.assert_allclose(out[0], [[2, 3], [4, 5], [6, 7]], **TOL)
    assert tf.nn.embedding_lookup_sparse(
        T, SP, W.with_values(np.array([1, 2, 3], np.int32)), combiner="sum"
    ).tolist() == [[14, 17], [0, 0], [36, 39]]


# --------------------------------------------------------------------------
# safe_embedding_lookup_sparse
# --------------------------------------------------------------------------


def test_safe_lookup_prunes_and_fills_every_row():
    assert tf.nn.safe_embedding_lookup_sparse(T, SP_INVALID).tolist() == [[2, 3], [0, 0], [12, 13], [0, 0]]
    assert tf.nn.safe_embedding_lookup_sparse(T, SP_INVALID, default_id=5).tolist() == [
        [2, 3],
        [10, 11],
        [12, 13],
        [10, 11],
    ]
    assert tf.nn.safe_embedding_lookup_sparse(T, SP_INVALID, default_id=np.int64(2))[1].tolist() == [4, 5]
    assert tf.nn.safe_embedding_lookup_sparse(T, SP_INVALID, combiner=None).tolist() == [
        [2, 3],
        [0, 0],
        [12, 13],
        [0, 0],
    ]
    assert tf.nn.safe_embedding_lookup_sparse(T, sparse([], [], [3, 2])).tolist() == [[0, 0]] * 3
    assert tf.nn.safe_embedding_lookup_sparse(T, sparse([], [], [0, 2])).shape == (0, 2)
    unsorted = sparse([[2, 0], [0, 0]], [1, 2], [3, 1])  # the safe lookup takes any order
    assert tf.nn.safe_embedding_lookup_sparse(T, unsorted).tolist() == [[4, 5], [0, 0], [2, 3]]
    assert tf.nn.safe_embedding_lookup_sparse(T, unsorted, unsorted.with_values(np.array([1.0, 2.0]))).tolist() == [
        [4, 5],
        [0, 0],
        [2, 3],
    ]


def test_safe_lookup_prunes_non_positive_weights_for_mean_and_sqrtn_only():
    ids = sparse([[0, 0], [0, 1]], [7, 1], [1, 2])  # id 7 is out of range for T, but its weight is 0
    weights = ids.with_values(np.array([0.0, 1.0], np.float32))
    assert tf.nn.safe_embedding_lookup_sparse(T, ids, weights).tolist() == [[2, 3]]
    with pytest.raises(ValueError, match=r"must hold row ids in \[0, 7\)\. Received: 7"):
        tf.nn.safe_embedding_lookup_sparse(T, ids, weights, combiner="sum")  # 'sum' keeps it and gathers it


def test_safe_lookup_of_rank_3_and_rank_1_ids():
    rank3 = sparse([[0, 0, 0], [0, 1, 0], [1, 1, 1]], [1, 2, 3], [2, 2, 2])
    assert tf.nn.safe_embedding_lookup_sparse(T, rank3, combiner="sum").tolist() == [[[2, 3], [4, 5]], [[0, 0], [6, 7]]]
    weights = rank3.with_values(np.array([1.0, 2.0, 3.0], np.float32))
    assert tf.nn.safe_embedding_lookup_sparse(T, rank3, weights, combiner="sum").tolist() == [
        [[2, 3], [8, 10]],
        [[0, 0], [18, 21]],
    ]
    rank1 = sparse([[0], [2]], [1, 2], [3])
    assert tf.nn.safe_embedding_lookup_sparse(T, rank1, combiner="sum").tolist() == [6, 8]


def test_safe_lookup_with_ragged_ids_shards_and_max_norm():
    ragged = tf.RaggedTensor.from_row_lengths([1, -3, 6], [2, 0, 1, 0])
    weights = tf.RaggedTensor.from_row_lengths(np.array([1.0, 2.0, 0.5], np.float32), [2, 0, 1, 0])
    assert tf.nn.safe_embedding_lookup_sparse(T, ragged).tolist() == [[2, 3], [0, 0], [12, 13], [0, 0]]
    assert tf.nn.safe_embedding_lookup_sparse(T, ragged, weights, default_id=2).tolist() == [
        [2, 3],
        [4, 5],
        [12, 13],
        [4, 5],
    ]
    assert tf.compat.v1.nn.safe_embedding_lookup_sparse(
        [T[0::2], T[1::2]], SP_INVALID, None, combiner="sum", partition_strategy="mod"
    ).tolist() == [[2, 3], [0, 0], [12, 13], [0, 0]]
    assert tf.compat.v1.nn.safe_embedding_lookup_sparse([T[:4], T[4:]], SP_INVALID, None, combiner="sum").tolist() == [
        [2, 3],
        [0, 0],
        [12, 13],
        [0, 0],
    ]  # 'div' by default
    np.testing.assert_allclose(
        tf.nn.safe_embedding_lookup_sparse(T, SP_INVALID, default_id=5, max_norm=1.0),
        [[0.5547, 0.8321], [0.6727, 0.7399], [0.6783, 0.7348], [0.6727, 0.7399]],
        atol=1e-4,
    )  # default row clipped too


# --------------------------------------------------------------------------
# Errors: TensorFlow's types, a message naming the argument
# --------------------------------------------------------------------------

DENSE = tf.nn.embedding_lookup
V1 = tf.compat.v1.nn


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: DENSE(None, [1]), ValueError, "`params` must be"),
        (lambda: DENSE([], [1]), ValueError, r"Received: \[\]"),
        (lambda: DENSE(np.float32(3), [0]), ValueError, "rank >= 1"),
        (lambda: DENSE([T[:4], np.zeros((3, 3), np.float32)], [0]), ValueError, "same shape after the first"),
        (lambda: DENSE([T[:2], T[2:]], [0]), ValueError, r"shards of \[4, 3\] rows. Received shards of \[2, 5\]"),
        (
            lambda: V1.embedding_lookup([T[:1], T[1:2], T[:0]], [0], partition_strategy="div"),
            ValueError,
            "at least one row per shard",
        ),
        (lambda: V1.embedding_lookup([T[:4], T[4:]], [1], partition_strategy="foo"), ValueError, "partition_strategy"),
        (lambda: V1.embedding_lookup(T, [1], partition_strategy="DIV"), ValueError, "case-sensitive"),
        (lambda: DENSE(T, [-1]), ValueError, r"`ids` must hold row ids in \[0, 7\)\. Received: -1"),
        (lambda: DENSE(T, [[0, 7]]), ValueError, r"Received: 7 \(entry 1\)"),
        (lambda: DENSE([T[:4], T[4:]], [9]), ValueError, r"\[0, 7\)"),
        (lambda: DENSE(T, [1.0]), TypeError, "integer ids"),
        (lambda: DENSE(T, [True]), TypeError, "integer ids"),
        (lambda: DENSE(T, ["a"]), TypeError, "integer ids"),
        (lambda: DENSE(T, SP), ValueError, "embedding_lookup_sparse"),
        (lambda: DENSE(T, tf.ragged.constant([[1], [2, 3]])), TypeError, "row_splits"),
        (lambda: DENSE(T, [1], max_norm="a"), TypeError, "max_norm"),
        (lambda: DENSE(T, [1], max_norm=0.0), ValueError, "> 0"),
        (lambda: DENSE(T, [1], max_norm=-1.0), ValueError, "> 0"),
        (lambda: DENSE(np.arange(6).reshape(3, 2), [1], max_norm=1.0), TypeError, "floating-point params"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_embedding_lookup_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


SPARSE_FUNCTIONS = [
    tf.nn.embedding_lookup_sparse,
    V1.embedding_lookup_sparse,
    tf.nn.safe_embedding_lookup_sparse,
    V1.safe_embedding_lookup_sparse,
]


@pytest.mark.parametrize("function", SPARSE_FUNCTIONS, ids=lambda f: f.__module__.split(".")[-1] + "." + f.__name__)
@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(combiner="max"), ValueError, "`combiner` must be one of 'sum', 'mean', 'sqrtn'. Received: 'max'"),
        (dict(combiner="MEAN"), ValueError, "case-sensitive"),
        (dict(params=None), ValueError, "must be a"),
        (dict(params=[]), ValueError, r"Received: \[\]"),
        (dict(params=[T[:4], T[4:, :1]]), ValueError, "same shape after the first"),
        (dict(params=np.array([["a", "b"]])), TypeError, "must hold numbers"),
        (dict(ids=[[1, 2]]), TypeError, "must be a SparseTensor or a RaggedTensor. Received: list"),
        (dict(ids=np.array([[1, 2]])), TypeError, "Received: ndarray"),
        (dict(ids=sparse([[0, 0]], np.array([1.0]), [1, 1])), TypeError, "integer ids"),
        (dict(ids=sparse([[0, 0]], [7], [1, 1])), ValueError, r"row ids in \[0, 7\)\. Received: 7"),
        (dict(weights=[[1.0, 2.0]]), TypeError, "must be None or a SparseTensor"),
        (dict(weights=tf.ragged.constant([[1.0, 2.0], [], [0.5]])), TypeError, "must be None or a SparseTensor"),
        (
            dict(ids=tf.RaggedTensor.from_row_lengths([1, 3, 6], [2, 0, 1]), weights=W),
            TypeError,
            "must be None or a RaggedTensor",
        ),
        (dict(weights=sparse([[1, 0], [1, 1], [3, 0]], [1.0, 2.0, 0.5], [4, 2])), ValueError, "same indices"),
        (dict(weights=sparse([[0, 0], [0, 1]], [1.0, 2.0], [4, 2])), ValueError, "same indices"),
        (dict(weights=SP.with_values(np.array(["a", "b", "c"]))), TypeError, "must hold numbers"),
        (dict(max_norm="a"), TypeError, "max_norm"),
        (dict(max_norm=0), ValueError, "max_norm"),
        (dict(allow_fast_lookup="yes"), TypeError, "allow_fast_lookup"),
    ],
)
def test_sparse_lookup_errors(function, kwargs, error, match):
    args = dict(params=T, ids=SP, weights=None)
    args.update({k: v for k, v in kwargs.items() if k in args})
    options = {k: v for k, v in kwargs.items() if k not in args}
    with pytest.raises(error, match=match):
        function(args["params"], args["ids"], args["weights"], **options)


@pytest.mark.parametrize("function", SPARSE_FUNCTIONS[:2], ids=["v2", "v1"])
def test_plain_lookup_errors(function):
    with pytest.raises(ValueError, match=r"row ids in \[0, 7\)\. Received: -3"):
        function(T, SP_INVALID, None)  # nothing is pruned: TF's gather fails on -3
    with pytest.raises(ValueError, match="segment ids are not increasing"):
        function(T, sparse([[2, 0], [0, 0]], [1, 2], [3, 1]), None)


@pytest.mark.parametrize("function", SPARSE_FUNCTIONS[2:], ids=["v2", "v1"])
def test_safe_lookup_errors(function):
    with pytest.raises(ValueError, match=r"`default_id` must be an int in \[0, 7\) or None. Received: 7"):
        function(T, SP_INVALID, default_id=7)
    with pytest.raises(ValueError, match="Received: -1"):
        function(T, SP_INVALID, default_id=-1)
    with pytest.raises(TypeError, match="default_id"):
        function(T, SP_INVALID, default_id=2.5)
    with pytest.raises(ValueError, match=r"`sparse_ids` must hold row ids in \[0, 7\)"):
        function(T, sparse([[0, 0]], [7], [1, 1]))


def test_a_failed_or_clipped_lookup_changes_no_input():
    table, ids = T.copy(), np.array([[0, 6]])
    weights = SP.values.astype(np.float32)
    tf.nn.embedding_lookup(table, ids, max_norm=0.5)
    tf.nn.safe_embedding_lookup_sparse(table, SP, SP.with_values(weights), default_id=2, max_norm=0.5)
    with pytest.raises(ValueError):
        tf.nn.embedding_lookup_sparse(table, SP_INVALID, None, max_norm=0.5)
    np.testing.assert_array_equal(table, T)
    assert ids.tolist() == [[0, 6]] and weights.tolist() == [1.0, 3.0, 6.0]


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def lookups(draw, *, min_ids_per_row=0, valid_only=False):
    """A table, a shard count and strategy, and a rank-2 sparse batch with weights."""
    vocabulary_size = draw(st.integers(1, 12))
    dim = draw(st.integers(1, 3))
    table = np.array(
        draw(st.lists(st.floats(-4, 4, width=32), min_size=vocabulary_size * dim, max_size=vocabulary_size * dim)),
        np.float32,
    ).reshape(vocabulary_size, dim)
    batch = draw(st.integers(1, 5))
    indices, ids, weights = [], [], []
    low = 0 if valid_only else -1
    for row in range(batch):
        n = draw(st.integers(min_ids_per_row, 4))
        for col in range(n):
            indices.append([row, col])
            ids.append(draw(st.integers(low, vocabulary_size - 1)))
            weights.append(draw(st.floats(0.25, 2) if valid_only else st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0])))
    sp_ids = sparse(indices, np.array(ids, np.int64), [batch, 4])
    return dict(
        table=table,
        num_shards=draw(st.integers(1, vocabulary_size)),
        strategy=draw(st.sampled_from(["div", "mod"])),
        combiner=draw(st.sampled_from(["sum", "mean", "sqrtn"])),
        sp_ids=sp_ids,
        sp_weights=sp_ids.with_values(np.array(weights, np.float32)),
    )


@SETTINGS
@given(
    case=lookups(valid_only=True),
    ids=st.lists(st.integers(0, 100), max_size=8),
    max_norm=st.sampled_from([None, 0.5, 2.0]),
)
def test_results_do_not_depend_on_the_shard_count_or_strategy(case, ids, max_norm):
    table, n, strategy = case["table"], case["num_shards"], case["strategy"]
    shards = split_table(table, n, strategy)
    ids = np.array(ids, np.int64) % table.shape[0]
    one = V1.embedding_lookup(table, ids, max_norm=max_norm)
    if max_norm is None:
        np.testing.assert_array_equal(one, table[ids])
    np.testing.assert_array_equal(V1.embedding_lookup(shards, ids, partition_strategy=strategy, max_norm=max_norm), one)
    for function in (V1.embedding_lookup_sparse, V1.safe_embedding_lookup_sparse):
        kwargs = dict(combiner=case["combiner"], max_norm=max_norm)
        np.testing.assert_array_equal(
            function(shards, case["sp_ids"], case["sp_weights"], partition_strategy=strategy, **kwargs),
            function(table, case["sp_ids"], case["sp_weights"], **kwargs),
        )
    if strategy == "div":
        np.testing.assert_array_equal(tf.nn.embedding_lookup(shards, ids, max_norm=max_norm), one)


@SETTINGS
@given(case=lookups(min_ids_per_row=1, valid_only=True), weighted=st.booleans(), default_id=st.sampled_from([None, 0]))
def test_safe_equals_plain_when_every_row_has_valid_ids(case, weighted, default_id):
    weights = case["sp_weights"] if weighted else None
    plain = tf.nn.embedding_lookup_sparse(case["table"], case["sp_ids"], weights, combiner=case["combiner"])
    safe = tf.nn.safe_embedding_lookup_sparse(
        case["table"], case["sp_ids"], weights, combiner=case["combiner"], default_id=default_id
    )
    np.testing.assert_array_equal(safe, plain)


@SETTINGS
@given(case=lookups(), max_norm=st.floats(0.1, 5))
def test_max_norm_bounds_every_row_and_keeps_short_ones(case, max_norm):
    table = case["table"]
    out = tf.nn.embedding_lookup(table, np.arange(table.shape[0]), max_norm=max_norm)
    norms = np.linalg.norm(table, axis=1)
    assert np.all(np.linalg.norm(out, axis=1) <= max_norm * (1 + 1e-5))
    np.testing.assert_allclose(out[norms <= max_norm], table[norms <= max_norm], **TOL)
    long = norms > max_norm
    np.testing.assert_allclose(out[long], table[long] * (max_norm / norms[long])[:, None], **TOL)


@SETTINGS
@given(case=lookups(), d1=st.integers(1, 3))
def test_safe_lookup_of_rank_3_ids_is_the_rank_2_lookup_reshaped(case, d1):
    ids = case["sp_ids"]
    batch, width = (int(d) for d in ids.dense_shape)
    cube = sparse(
        np.stack([ids.indices[:, 0] // d1, ids.indices[:, 0] % d1, ids.indices[:, 1]], axis=1),
        ids.values,
        [-(-batch // d1), d1, width],
    )
    flat = sparse(np.stack([ids.indices[:, 0], ids.indices[:, 1]], axis=1), ids.values, [cube.shape[0] * d1, width])
    kwargs = dict(combiner=case["combiner"], default_id=0)
    out = tf.nn.safe_embedding_lookup_sparse(case["table"], cube, cube.with_values(case["sp_weights"].values), **kwargs)
    weights = flat.with_values(case["sp_weights"].values)
    expected = tf.nn.safe_embedding_lookup_sparse(case["table"], flat, weights, **kwargs)
    np.testing.assert_array_equal(out, expected.reshape(out.shape))
