"""The engine's lookups against numbers computed by TensorFlow 2.15.1.

Every case of the categories `lookup_sparse`, `partitioned`, `sequence` and
`column_lookup` in data/index.json is one test. Tolerance: rtol 1e-5,
atol 1e-6 (float32 precision, what TensorFlow's own numpy references
reach). See ../../../shared/conformance/README.md for how the data was made.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tpu_embedding_shim.engine.lookup import pooled_lookup, sequence_lookup
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.engine.sharding import ShardedTable, shard_sizes
from tpu_embedding_shim.spec import FeatureSpec

from .golden import INDEX, TOL, arrays, cases


class Sparse(NamedTuple):
    """A SparseTensor stand-in (to_ragged duck-types on these three names)."""

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


def check_plain(ours, tf_plain, batch):
    """TF's non-safe lookup drops trailing empty examples: its output has only
    max(row with ids) + 1 rows. Ours always has B rows. The first rows agree;
    the rows TF left out are exactly the trailing empty examples (zeros here)."""
    n = tf_plain.shape[0]
    np.testing.assert_allclose(ours[:n], tf_plain, **TOL)
    assert (batch.row_lengths()[n:] == 0).all()
    assert not ours[n:].any()
    if n < batch.batch_size or n == 0:
        assert n == 0 or batch.row_lengths()[n - 1] > 0  # TF keeps up to the last non-empty row


# --------------------------------------------------------------------------
# lookup_sparse: tf.nn.safe_embedding_lookup_sparse / embedding_lookup_sparse
# --------------------------------------------------------------------------


@cases("lookup_sparse")
def test_lookup_sparse(case):
    a, p = arrays(case), case["params"]
    indices, dense_shape = a["indices"], a["dense_shape"]
    out_shape = a["safe_out"].shape
    if len(dense_shape) > 2:
        # Rank-3 sparse ids: TF's safe lookup reshapes [d0, d1, n] to [d0*d1, n] and back.
        # to_ragged takes rank 2 only, so the test does the same reshape.
        rows = np.ravel_multi_index(tuple(indices[:, :-1].T), tuple(dense_shape[:-1]))
        indices = np.stack([rows, indices[:, -1]], axis=1)
        dense_shape = np.array([np.prod(dense_shape[:-1]), dense_shape[-1]])
    feature = FeatureSpec(name="ids", table="t", num_buckets=p["vocab"])
    weights = Sparse(indices, a["weights"], dense_shape) if "weights" in a else None
    batch = to_ragged(Sparse(indices, a["ids"], dense_shape), weights, feature=feature)

    safe = pooled_lookup(a["table"], batch, p["combiner"], safe=True, default_id=p["default_id"])
    np.testing.assert_allclose(safe.reshape(out_shape), a["safe_out"], **TOL)

    plain = pooled_lookup(a["table"], batch, p["combiner"], safe=False)
    if "plain_out" in a:
        check_plain(plain, a["plain_out"], batch)
    elif p["plain_error"] != "not computed":
        # TF's plain lookup raised on a negative id. Ours never sees one: to_ragged drops
        # negative ids as padding for every input form (the safe lookup's rule).
        assert "out of range" in p["plain_error"] or "is not in" in p["plain_error"]
        assert (a["ids"] < 0).any()
        assert batch.num_values == int((a["ids"] >= 0).sum())


# --------------------------------------------------------------------------
# partitioned: tf.compat.v1.nn.embedding_lookup over a list of shards
# --------------------------------------------------------------------------


@cases("partitioned")
def test_partitioned(case):
    a, p = arrays(case), case["params"]
    num_shards, strategy = p["num_shards"], p["partition_strategy"]
    full = a["full_table"]
    table = ShardedTable(full, num_shards, strategy)

    assert shard_sizes(p["vocab"], num_shards, strategy) == p["shard_sizes"]
    assert len(table.shards) == num_shards
    for j, shard in enumerate(table.shards):
        np.testing.assert_array_equal(shard, a[f"shard{j}"])
    np.testing.assert_array_equal(table.to_full(), full)

    np.testing.assert_array_equal(table[a["ids"]], a["out"])
    # `out_max_norm` (where present) is TF's `max_norm` clipping of embedding_lookup, a
    # non-TPU option the engine does not implement: that one array is not checked.

    feature = FeatureSpec(name="sp", table="t", num_buckets=p["vocab"])
    sp = (a["sp_indices"], a["sp_dense_shape"])
    batch = to_ragged(Sparse(sp[0], a["sp_ids"], sp[1]), Sparse(sp[0], a["sp_weights"], sp[1]), feature=feature)
    for combiner in ("sum", "mean", "sqrtn"):
        ours = pooled_lookup(table, batch, combiner, safe=True)
        np.testing.assert_allclose(ours, a[f"safe_{combiner}"], **TOL)
        np.testing.assert_array_equal(ours, pooled_lookup(full, batch, combiner, safe=True))
        check_plain(pooled_lookup(table, batch, combiner, safe=False), a[f"sparse_{combiner}"], batch)


# --------------------------------------------------------------------------
# sequence: sequence TPU embedding columns
# --------------------------------------------------------------------------


@cases("sequence")
def test_sequence(case):
    a, p = arrays(case), case["params"]
    length = p["max_sequence_length"]
    feature = FeatureSpec(name="seq", table="t", num_buckets=p["vocab"], max_sequence_length=length)
    batch = to_ragged(Sparse(a["indices"], a["ids"], a["dense_shape"]), feature=feature)

    # The TPU rule: padded / truncated to max_sequence_length, lengths capped.
    out, lengths = sequence_lookup(a["table"], batch, length)
    np.testing.assert_allclose(out, a["tpu_style_padded"], **TOL)
    np.testing.assert_array_equal(lengths, a["tpu_style_len"])

    # TF's CPU SequenceFeatures ignores max_sequence_length: it pads to T = dense_shape[1].
    # The same kernel with L = T reproduces that real TF output.
    cpu_t = int(a["dense_shape"][1])
    assert cpu_t == p["cpu_T"]
    out_cpu, lengths_cpu = sequence_lookup(a["table"], batch, cpu_t)
    np.testing.assert_allclose(out_cpu, a["cpu_seq_out"], **TOL)
    np.testing.assert_array_equal(lengths_cpu, a["cpu_seq_len"])


# --------------------------------------------------------------------------
# column_lookup: TPU embedding_column looked up through DenseFeatures
# --------------------------------------------------------------------------


def column_feature(p, a):
    column = p["column"]
    if column in ("identity", "weighted"):
        return FeatureSpec(
            name="c",
            table="t",
            num_buckets=p["num_buckets"],
            weight_key="c_weight" if column == "weighted" else None,
        )
    vocab = tuple(str(w) for w in a["vocab_words"])
    return FeatureSpec(
        name="c",
        table="t",
        num_buckets=p["num_buckets"],
        id_source="vocabulary_list",
        vocabulary=vocab,
        num_oov_buckets=p["num_oov_buckets"],
    )


@cases("column_lookup")
def test_column_lookup(case):
    a, p = arrays(case), case["params"]
    feature = column_feature(p, a)
    values = a["strings"] if "strings" in a else a["ids"]
    weights = Sparse(a["indices"], a["weights"], a["dense_shape"]) if "weights" in a else None
    batch = to_ragged(Sparse(a["indices"], values, a["dense_shape"]), weights, feature=feature)
    safe = p["use_safe_embedding_lookup"]
    ours = pooled_lookup(a["table"], batch, p["combiner"], safe=safe)

    if p["error"]:
        # cl0034: a vocabulary column without OOV buckets maps unknown strings to -1, and
        # TF's non-safe lookup then fails on the -1 ("indices[0] == -1 out of range").
        # The engine drops -1 as padding for every lookup, so it returns the lookup of the
        # known tokens only (and zeros for examples left empty).
        assert "out of range" in p["error"] and not safe
        vocab = set(feature.vocabulary)
        known = np.array([s in vocab for s in values])
        assert not known.all()
        assert batch.num_values == int(known.sum())
        ids = np.array([feature.vocabulary.index(s) for s in values[known]])
        rows = a["indices"][known, 0]
        expected = np.zeros_like(ours)
        for b in range(batch.batch_size):
            mine = ids[rows == b]
            if mine.size:
                expected[b] = a["table"][mine].sum(0) / np.sqrt(mine.size)  # sqrtn, unit weights
        assert p["combiner"] == "sqrtn"
        np.testing.assert_allclose(ours, expected, **TOL)
        return

    # OOV buckets: to_ragged hashes unknown tokens with FarmHash Fingerprint64, the
    # function TF uses (to_hash_bucket_fast), so the OOV rows are compared too.
    if safe:
        np.testing.assert_allclose(ours, a["out"], **TOL)
    else:
        check_plain(ours, a["out"], batch)


def test_every_case_of_the_four_categories_is_collected():
    wanted = {"lookup_sparse", "partitioned", "sequence", "column_lookup"}
    counts = {k: v for k, v in INDEX["counts"].items() if k in wanted}
    assert counts == {"lookup_sparse": 160, "partitioned": 72, "column_lookup": 23, "sequence": 15}
