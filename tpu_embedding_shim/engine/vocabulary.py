"""Vocabulary features: tokens to row ids, as TensorFlow's vocabulary tables map them.

A token of `feature.vocabulary` gets its index there; an unknown one gets
`default_value` (None or -1: the id is dropped) or, with
`num_oov_buckets > 0`, `len(vocabulary) + fingerprint64(token) %
num_oov_buckets` (`farmhash.hash_bucket`, TensorFlow's buckets). Strings and
bytes compare as text; integer vocabularies compare as ints and hash as
their decimal string, as TensorFlow does.

A vocabulary's index (a dict, and a sorted numpy copy for `np.searchsorted`)
is built once per vocabulary tuple and kept in a small cache keyed by the
tuple's `id()` (the cache holds the tuple, so the id stays unique).

>>> import numpy as np
>>> from tpu_embedding_shim.spec import FeatureSpec
>>> f = FeatureSpec(name="w", table="t", num_buckets=3, id_source="vocabulary_list", vocabulary=("a", "b"),
...                 num_oov_buckets=1)
>>> map_vocabulary(f, np.array(["b", "a", "zz"]), "str").tolist()
[1, 0, 2]
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..spec import FeatureSpec
from .farmhash import hash_bucket

__all__ = ["map_vocabulary", "normalize_token"]

_VOCAB_CACHE: dict = {}
_VOCAB_CACHE_SIZE = 64


def normalize_token(token: Any) -> Any:
    """Strings and bytes compare as text (bytes are decoded as UTF-8); ints as ints."""
    if isinstance(token, bytes):
        return token.decode("utf-8", "surrogateescape")
    if isinstance(token, (str, np.str_)):
        return str(token)
    return int(token)


def _vocab_index(name: str, vocab: tuple) -> tuple[dict, bool, tuple[np.ndarray, np.ndarray] | None]:
    """(token -> id dict, True for a string vocabulary, `_sorted_vocabulary`), cached per vocabulary tuple."""
    hit = _VOCAB_CACHE.get(id(vocab))
    if hit is not None and hit[0] is vocab:
        return hit[1:]
    is_text = [isinstance(t, (str, bytes, np.str_, np.bytes_)) for t in vocab]
    is_integer = [isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in vocab]
    if all(is_text):
        text = True
    elif all(is_integer):
        text = False
    else:
        raise TypeError(
            f"Feature {name!r}: `vocabulary` must hold only strings or only ints. "
            f"Received: {vocab[:5]!r}{'...' if len(vocab) > 5 else ''}."
        )
    index = {normalize_token(t): i for i, t in enumerate(vocab)}
    if len(_VOCAB_CACHE) >= _VOCAB_CACHE_SIZE:
        _VOCAB_CACHE.pop(next(iter(_VOCAB_CACHE)))
    entry = (vocab, index, text, _sorted_vocabulary(index, text))
    _VOCAB_CACHE[id(vocab)] = entry  # keeps `vocab` alive, so its id stays unique
    return entry[1:]


def _sorted_vocabulary(index: dict, text: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """(the tokens as one sorted numpy array, their ids) for `np.searchsorted`, or None when numpy
    would not hold every token exactly: a str ending in NUL (numpy strips it), an int beyond int64."""
    tokens = list(index)
    if text and any(t.endswith("\x00") for t in tokens):
        return None
    try:
        array = np.array(tokens, dtype=str if text else np.int64)
    except OverflowError:
        return None
    order = np.argsort(array, kind="stable")
    return array[order], np.fromiter(index.values(), dtype=np.int64, count=len(tokens))[order]


def map_vocabulary(feature: FeatureSpec, tokens: np.ndarray, kind: str) -> np.ndarray:
    """int64 ids for `tokens`; -1 for unknown tokens that are dropped."""
    vocab = feature.vocabulary
    if vocab is None:
        raise ValueError(f"Feature {feature.name!r} has no vocabulary to map its ids with.")
    index, text, searchable = _vocab_index(feature.name, vocab)
    if text != (kind == "str"):
        want = "strings" if text else "integers"
        got = "strings" if kind == "str" else "integers"
        raise TypeError(f"Feature {feature.name!r} has a vocabulary of {want}; its ids must be {want}. Received {got}.")
    n_vocab = len(vocab)
    default = -1 if feature.default_value is None else int(feature.default_value)
    if tokens.size == 0:
        return np.zeros(0, dtype=np.int64)
    tokens = tokens.reshape(-1)
    if searchable is not None and (tokens.dtype.kind == "U" if text else tokens.dtype == np.int64):
        # Known tokens by binary search, all at once; only the unknown ones one by one (their OOV hash).
        known, ids = searchable
        at = np.minimum(np.searchsorted(known, tokens), known.shape[0] - 1)
        found = known[at] == tokens
        mapped = np.where(found, ids[at], default)
        if feature.num_oov_buckets > 0 and not found.all():
            missing, where = np.unique(tokens[~found], return_inverse=True)
            buckets = [n_vocab + hash_bucket(normalize_token(t), feature.num_oov_buckets) for t in missing.tolist()]
            mapped[~found] = np.array(buckets, dtype=np.int64)[where.reshape(-1)]
        return mapped
    uniques, inverse = np.unique(tokens, return_inverse=True)
    mapped = np.empty(len(uniques), dtype=np.int64)
    for u, token in enumerate(uniques.tolist()):
        token = normalize_token(token)
        found = index.get(token)
        if found is not None:
            mapped[u] = found
        elif feature.num_oov_buckets > 0:
            mapped[u] = n_vocab + hash_bucket(token, feature.num_oov_buckets)
        else:
            mapped[u] = default
    return mapped[inverse.reshape(-1)]
