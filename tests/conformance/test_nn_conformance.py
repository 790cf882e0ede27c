"""`tf.nn` / `tf.compat.v1.nn` embedding lookups against numbers computed by TensorFlow 2.15.1.

Every case of the categories `lookup_sparse` and `partitioned` in
data/index.json runs through the public functions of the TF-shaped
namespace (`import tpu_embedding_shim as tf`), both signatures where both
apply. Tolerance: rtol 1e-5, atol 1e-6. Where TensorFlow raised, the same
exception type is expected, with the project's mapping of TensorFlow's
run-time errors (`InvalidArgumentError` is a `ValueError`, see
docs/stricter_than_tensorflow.md).
"""

from __future__ import annotations

import numpy as np
import pytest

import tpu_embedding_shim as tf

from .golden import INDEX, TOL, arrays, cases

TF_ERRORS = {"InvalidArgumentError": ValueError}


def assert_same(ours, theirs):
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, **TOL)


# --------------------------------------------------------------------------
# lookup_sparse: safe_embedding_lookup_sparse and embedding_lookup_sparse
# --------------------------------------------------------------------------


@cases("lookup_sparse")
def test_lookup_sparse(case):
    a, p = arrays(case), case["params"]
    table, combiner = a["table"], p["combiner"]
    ids = tf.SparseTensor(a["indices"], a["ids"], a["dense_shape"])
    weights = ids.with_values(a["weights"]) if "weights" in a else None

    safe = tf.nn.safe_embedding_lookup_sparse(table, ids, weights, combiner=combiner, default_id=p["default_id"])
    assert_same(safe, a["safe_out"])
    v1 = tf.compat.v1.nn.safe_embedding_lookup_sparse(table, ids, weights, combiner, p["default_id"])
    np.testing.assert_array_equal(v1, safe)

    if "plain_out" in a:
        # TF's plain output has max(row with an id) + 1 rows: trailing empty rows are missing.
        assert a["plain_out"].shape[0] == p["plain_out_rows"]
        assert_same(tf.nn.embedding_lookup_sparse(table, ids, weights, combiner=combiner), a["plain_out"])
        v1 = tf.compat.v1.nn.embedding_lookup_sparse(table, ids, weights, combiner=combiner)
        assert_same(v1, a["plain_out"])
    elif p["plain_error"] == "not computed":
        # Rank-3 ids, which the generator did not send through the plain lookup. TF combines a
        # plain lookup's ids by their first index (checked on the oracle in tests/api/test_nn.py),
        # so it equals the lookup of the same ids with the trailing dimensions folded into one.
        shape = a["dense_shape"]
        assert len(shape) == 3
        folded = tf.SparseTensor(
            np.stack([a["indices"][:, 0], a["indices"][:, 1] * shape[2] + a["indices"][:, 2]], axis=1),
            a["ids"],
            [shape[0], shape[1] * shape[2]],
        )
        ours = tf.nn.embedding_lookup_sparse(table, ids, None, combiner=combiner)
        assert ours.shape[0] == a["indices"][:, 0].max() + 1
        np.testing.assert_array_equal(ours, tf.nn.embedding_lookup_sparse(table, folded, None, combiner=combiner))
    else:
        error = TF_ERRORS[p["plain_error"].split(":")[0]]
        with pytest.raises(error, match=r"must hold row ids in \[0, "):
            tf.nn.embedding_lookup_sparse(table, ids, weights, combiner=combiner)
        with pytest.raises(error, match=r"must hold row ids in \[0, "):
            tf.compat.v1.nn.embedding_lookup_sparse(table, ids, weights, combiner=combiner)


# --------------------------------------------------------------------------
# partitioned: the three lookups over a list of shards
# --------------------------------------------------------------------------


@cases("partitioned")
def test_partitioned(case):
    a, p = arrays(case), case["params"]
    strategy = p["partition_strategy"]
    shards = [a[f"shard{j}"] for j in range(p["num_shards"])]
    assert [s.shape[0] for s in shards] == p["shard_sizes"]
    v2 = strategy == "div"  # the tf.nn functions always use 'div'

    out = tf.compat.v1.nn.embedding_lookup(shards, a["ids"], partition_strategy=strategy)
    assert out.shape == tuple(p["ids_shape"]) + (p["dim"],)
    np.testing.assert_array_equal(out, a["out"])
    if v2:
        np.testing.assert_array_equal(tf.nn.embedding_lookup(shards, a["ids"]), a["out"])
    if "out_max_norm" in a:
        clipped = tf.compat.v1.nn.embedding_lookup(
            shards, a["ids"], partition_strategy=strategy, max_norm=p["max_norm"]
        )
        assert_same(clipped, a["out_max_norm"])
        if v2:
            assert_same(tf.nn.embedding_lookup(shards, a["ids"], max_norm=p["max_norm"]), a["out_max_norm"])

    sp_ids = tf.SparseTensor(a["sp_indices"], a["sp_ids"], a["sp_dense_shape"])
    sp_weights = sp_ids.with_values(a["sp_weights"])
    for combiner in ("sum", "mean", "sqrtn"):
        plain = tf.compat.v1.nn.embedding_lookup_sparse(
            shards, sp_ids, sp_weights, partition_strategy=strategy, combiner=combiner
        )
        assert_same(plain, a[f"sparse_{combiner}"])
        safe = tf.compat.v1.nn.safe_embedding_lookup_sparse(
            shards, sp_ids, sp_weights, combiner=combiner, partition_strategy=strategy
        )
        assert_same(safe, a[f"safe_{combiner}"])
        if v2:
            assert_same(
                tf.nn.embedding_lookup_sparse(shards, sp_ids, sp_weights, combiner=combiner), a[f"sparse_{combiner}"]
            )
            assert_same(
                tf.nn.safe_embedding_lookup_sparse(shards, sp_ids, sp_weights, combiner=combiner), a[f"safe_{combiner}"]
            )


def test_every_case_of_both_categories_is_collected():
    counts = {k: v for k, v in INDEX["counts"].items() if k in ("lookup_sparse", "partitioned")}
    assert counts == {"lookup_sparse": 160, "partitioned": 72}
