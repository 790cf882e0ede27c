"""Vocabulary mapping: the binary search over the sorted vocabulary gives the token dictionary's ids."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import vocabulary
from tpu_embedding_shim.engine.farmhash import hash_bucket
from tpu_embedding_shim.engine.ragged import to_ragged
from tpu_embedding_shim.spec import FeatureSpec

_TOKEN = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(
    vocab=st.lists(_TOKEN, min_size=1, max_size=12, unique=True),
    extra=st.lists(_TOKEN, max_size=6),
    oov=st.integers(0, 3),
    default=st.booleans(),
    seed=st.integers(0, 99),
)
def test_vocabulary_search_maps_like_the_token_dictionary(vocab, extra, oov, default, seed):
    """Known tokens, unknown ones (OOV buckets, a default id, or dropped), any unicode: the same ids
    as the per-token dictionary path (`_sorted_vocabulary` None)."""
    rng = np.random.default_rng(seed)
    pool = vocab + extra
    tokens = np.array([pool[i] for i in rng.integers(0, len(pool), 24)], dtype=str).reshape(6, 4)
    feature = FeatureSpec(
        name="f",
        table="t",
        num_buckets=len(vocab) + oov,
        id_source="vocabulary_list",
        vocabulary=tuple(vocab),
        num_oov_buckets=oov,
        default_value=0 if default and not oov else None,
    )
    searched = to_ragged(tokens, feature=feature)
    entry = vocabulary._VOCAB_CACHE[id(feature.vocabulary)]
    assert (entry[3] is None) == any(t.endswith("\x00") for t in vocab)  # else the binary search ran
    vocabulary._VOCAB_CACHE[id(feature.vocabulary)] = entry[:3] + (None,)  # now the dictionary path
    try:
        looked_up = to_ragged(tokens, feature=feature)
    finally:
        vocabulary._VOCAB_CACHE[id(feature.vocabulary)] = entry
    np.testing.assert_array_equal(searched.values, looked_up.values)
    np.testing.assert_array_equal(searched.row_splits, looked_up.row_splits)
    np.testing.assert_array_equal(searched.row_positions(), looked_up.row_positions())


def test_vocabulary_tokens_numpy_cannot_hold_use_the_dictionary():
    """A token ending in NUL (numpy strips it) and an int beyond int64 keep the exact dictionary path."""
    nul = FeatureSpec(name="f", table="t", num_buckets=2, id_source="vocabulary_list", vocabulary=("a\x00", "b"))
    assert to_ragged(np.array([["a"], ["b"]]), feature=nul).values.tolist() == [1]  # "a" is not "a\x00"
    assert vocabulary._VOCAB_CACHE[id(nul.vocabulary)][3] is None
    big = FeatureSpec(name="g", table="t", num_buckets=2, id_source="vocabulary_list", vocabulary=(2**64 - 1, 5))
    assert to_ragged(np.array([[5], [7]]), feature=big).values.tolist() == [1]
    assert vocabulary._VOCAB_CACHE[id(big.vocabulary)][3] is None


def test_integer_vocabulary_is_searched_too():
    feature = FeatureSpec(
        name="f", table="t", num_buckets=5, id_source="vocabulary_list", vocabulary=(30, 4, 7), num_oov_buckets=2
    )
    got = to_ragged(np.array([[7, 30], [4, 99]], dtype=np.int64), feature=feature)
    assert got.values.tolist()[:3] == [2, 0, 1]
    assert got.values[3] == 3 + hash_bucket(99, 2)
    assert vocabulary._VOCAB_CACHE[id(feature.vocabulary)][3] is not None
