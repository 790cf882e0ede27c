"""Construction properties, one hypothesis test per constructor family.

Every argument has a pool of valid values and a pool of invalid ones (ints,
floats, bools, None, strings, negative numbers, NaN, odd combiner / device /
strategy names, lists of various lengths). Each example picks up to two
arguments to draw from their invalid pool, the rest from the valid pool
(some values are valid or not depending on the others, e.g. a default id
and the number of buckets). Each test carries a small oracle computing which
arguments are bad. The property:

- no bad argument: construction succeeds, and the lowered `EmbeddingSpec`
  round-trips (`EmbeddingSpec.from_dict(s.to_dict()) == s`) and reflects the
  arguments;
- some bad argument: construction raises ValueError or TypeError whose
  message names one of the bad arguments (or the offending object);
- no other exception type escapes (it fails the test as an error).

Examples are derandomized (the same every run). `@example` pins inputs
that escaped the property once.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as _event
from hypothesis import strategies as st

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import lowering
from tpu_embedding_shim.api import tpu_embedding_v1 as v1
from tpu_embedding_shim.api import tpu_embedding_v2_utils as v2
from tpu_embedding_shim.api.embedding_config_spec import EmbeddingConfigSpec
from tpu_embedding_shim.spec import EmbeddingSpec, TruncatedNormal, Zeros

fc = tf.feature_column
tpu = tf.tpu.experimental

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

NAN = float("nan")
INF = float("inf")


class _Omit:
    def __repr__(self):
        return "OMIT"


OMIT = _Omit()  # "don't pass this argument" (use the default)


def lr_fn(step):
    return 0.05


def zero_arg_lr():
    return 0.01


def grad_multiplier(step):
    return 1.0


# The generator and the check ----------------------------------------------------------------


def P(valid: Iterable[Any], invalid: Iterable[Any] = ()) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return tuple(valid), tuple(invalid)


@st.composite
def arguments(draw, pools: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]], max_bad: int = 2):
    """One value per argument; up to `max_bad` arguments drawn from their invalid pool."""
    can_be_bad = sorted(name for name, (_, invalid) in pools.items() if invalid)
    bad = set(draw(st.lists(st.sampled_from(can_be_bad), max_size=max_bad, unique=True)))
    return {name: draw(st.sampled_from(pools[name][1] if name in bad else pools[name][0])) for name in sorted(pools)}


def first_valid(pools, **overrides) -> dict[str, Any]:
    """An explicit example: the first valid value of every pool, with `overrides`."""
    return {**{name: valid[0] for name, (valid, _) in pools.items()}, **overrides}


def passed(values: dict[str, Any], *names: str) -> dict[str, Any]:
    """The keyword arguments among `names` that are not OMIT."""
    return {n: values[n] for n in names if n in values and values[n] is not OMIT}


class Bad:
    """What a raised message may name: argument names (whole-word match) or literal fragments."""

    def __init__(self):
        self.names: set[str] = set()
        self.fragments: set[str] = set()

    def arg(self, *names: str) -> None:
        self.names.update(names)

    def text(self, *fragments: str) -> None:
        self.fragments.update(fragments)

    def __bool__(self) -> bool:
        return bool(self.names or self.fragments)

    def named_in(self, message: str) -> bool:
        return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in self.names) or any(
            f in message for f in self.fragments
        )

    def __repr__(self):
        return f"Bad(names={sorted(self.names)}, fragments={sorted(self.fragments)})"


def event(text: str) -> None:
    """hypothesis.event, also callable from a plain test."""
    with contextlib.suppress(Exception):
        _event(text)


def check_outcome(build, bad: Bad, may_refuse: Iterable[str] = ()):
    """Runs `build` and asserts the property. Returns what it built, or None when it (rightly) raised.

    `may_refuse`: message fragments with which valid-looking arguments may still be refused (a design
    choice the property leaves open).
    """
    try:
        value = build()
    except (ValueError, TypeError) as error:
        if not bad and any(f in str(error) for f in may_refuse):
            event("refused (allowed)")
            return None
        assert bad, f"valid arguments were refused: {type(error).__name__}: {error}"
        assert bad.named_in(str(error)), f"{type(error).__name__} message names none of {bad}: {error}"
        event("refused")
        return None
    assert not bad, f"accepted arguments that should be refused ({bad})"
    event("built")
    return value


def round_trips(spec: EmbeddingSpec) -> EmbeddingSpec:
    assert isinstance(spec, EmbeddingSpec)
    assert EmbeddingSpec.from_dict(spec.to_dict()) == spec
    return spec


# Value predicates (the oracle's vocabulary) ---------------------------------------------------


def is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def is_real(v) -> bool:
    return (
        isinstance(v, (int, float, np.integer, np.floating))
        and not isinstance(v, (bool, np.bool_))
        and math.isfinite(float(v))
    )


def is_bool(v) -> bool:
    return v is True or v is False


def real_in(v, lo=None, hi=None, lo_open=False, hi_open=False) -> bool:
    if not is_real(v):
        return False
    x = float(v)
    if lo is not None and (x <= lo if lo_open else x < lo):
        return False
    return not (hi is not None and (x >= hi if hi_open else x > hi))


def nonempty_str(v) -> bool:
    return isinstance(v, str) and v != ""


def int_at_least(v, minimum) -> bool:
    return is_int(v) and v >= minimum


COMBINER = P(["mean", "sum", "sqrtn", None], ["max", "MEAN", 1, ""])  # None: TF accepts it (a TPU sums)
BOOL_ARG = P([OMIT, True, False], [0, 1, None, "yes"])


# 1. Categorical columns -------------------------------------------------------------------------

CATEGORICAL = {
    "kind": P(["identity", "vocabulary_list", "weighted", "seq_identity", "seq_vocabulary_list"], ["hash_bucket"]),
    "key": P(["k", "movie"], ["", None, 3]),
    "num_buckets": P([10, 1, 5, np.int64(4)], [0, -2, 2.0, 2.5, True, None, "5"]),
    "default": P([None, 0, 3], [10, -1, 2.5, True]),
    "vocab": P(
        [["a", "b", "c"], ["x"], ("p", "q"), [1, 2, 3], [7]],
        [[], None, "abc", ["a", "a"], ["a", 1], [True, False], [1.5, 2.5], [1, 1]],
    ),
    "dtype": P([None, "match"], ["opposite", "float32"]),
    "oov": P([0, 1, 2], [-1, 1.5, None]),
    "list_default": P([-1, 0, 1], [5, 1.5, None]),
    "weight_key": P(["w"], ["", None, 3, "k"]),
    "weight_dtype": P([tf.float32, tf.int64], [tf.string]),
}


def _vocab_ok(vocab) -> bool:
    if not isinstance(vocab, (list, tuple)) or not vocab or len(set(vocab)) != len(vocab):
        return False
    return all(isinstance(t, str) for t in vocab) or all(is_int(t) for t in vocab)


def _dtype(token, vocab):
    strings = not (isinstance(vocab, (list, tuple)) and vocab and all(is_int(t) for t in vocab))
    return {
        None: None,
        "float32": tf.float32,
        "match": tf.string if strings else tf.int64,
        "opposite": tf.int64 if strings else tf.string,
    }[token]


@SETTINGS
@given(a=arguments(CATEGORICAL))
def test_categorical_columns(a):
    kind, key, num_buckets, default, vocab = a["kind"], a["key"], a["num_buckets"], a["default"], a["vocab"]
    oov, list_default, weight_key = a["oov"], a["list_default"], a["weight_key"]
    dtype = _dtype(a["dtype"], vocab)
    sequence = kind.startswith("seq_")
    bad = Bad()
    if not nonempty_str(key):
        bad.arg("key")
    if kind in ("identity", "weighted", "seq_identity"):
        if not int_at_least(num_buckets, 1):
            bad.arg("num_buckets")
        elif default is not None and not (is_int(default) and 0 <= default < num_buckets):
            bad.arg("default_value")
        buckets = num_buckets
    elif kind in ("vocabulary_list", "seq_vocabulary_list"):
        if not _vocab_ok(vocab):
            bad.arg("vocabulary_list")
        elif a["dtype"] in ("opposite", "float32"):
            bad.arg("dtype")
        if not int_at_least(oov, 0):
            bad.arg("num_oov_buckets")
        elif oov and list_default != -1:
            bad.arg("default_value", "num_oov_buckets")
        if not (is_int(list_default) and (list_default == -1 or (_vocab_ok(vocab) and 0 <= list_default < len(vocab)))):
            bad.arg("default_value")
        buckets = len(vocab) + oov if not bad else None
    else:  # a hash bucket column: TPU embedding columns refuse it
        if not int_at_least(num_buckets, 2):
            bad.arg("hash_bucket_size")
        bad.text("HashedCategoricalColumn")
        buckets = None
    if kind == "weighted":
        if not nonempty_str(weight_key):
            bad.arg("weight_feature_key")
        elif a["weight_dtype"] == tf.string:
            bad.arg("dtype")
        elif weight_key == key:
            bad.text("weight keys")  # the weights would be read from the ids' own key

    def build():
        if kind == "identity":
            col = fc.categorical_column_with_identity(key, num_buckets, default)
        elif kind == "seq_identity":
            col = fc.sequence_categorical_column_with_identity(key, num_buckets, default)
        elif kind == "weighted":
            col = fc.weighted_categorical_column(
                fc.categorical_column_with_identity(key, num_buckets, default), weight_key, a["weight_dtype"]
            )
        elif kind == "vocabulary_list":
            col = fc.categorical_column_with_vocabulary_list(key, vocab, dtype, list_default, oov)
        elif kind == "seq_vocabulary_list":
            col = fc.sequence_categorical_column_with_vocabulary_list(key, vocab, dtype, list_default, oov)
        else:
            col = fc.categorical_column_with_hash_bucket(key, num_buckets)
        emb = tpu.embedding_column(col, 3, max_sequence_length=4 if sequence else 0)
        return col, EmbeddingConfigSpec(feature_columns=[emb], optimization_parameters=v1.AdagradParameters(0.1))

    built = check_outcome(build, bad)
    if built is None:
        return
    col, config = built
    assert col.num_buckets == buckets
    spec = round_trips(config.to_spec())
    (table,), (feature,) = spec.tables, spec.features
    assert (table.name, table.vocabulary_size, table.dim) == (f"tbl_{col.name}", buckets, 3)
    assert (feature.name, feature.num_buckets, feature.is_sequence) == (key, buckets, sequence)
    assert feature.weight_key == (weight_key if kind == "weighted" else None)
    if "vocabulary" in kind:
        assert (feature.id_source, feature.vocabulary, feature.num_oov_buckets, feature.default_value) == (
            "vocabulary_list",
            tuple(vocab),
            oov,
            list_default,
        )
    else:
        assert (feature.id_source, feature.default_value) == ("identity", default)


# 2. embedding_column ----------------------------------------------------------------------------

COLUMNS = {
    "identity": fc.categorical_column_with_identity("ident", 10),
    "sequence": fc.sequence_categorical_column_with_identity("sident", 10),
    "weighted": fc.weighted_categorical_column(fc.categorical_column_with_identity("wid", 10), "wid_w"),
    "hash": fc.categorical_column_with_hash_bucket("h", 10),
    "numeric": fc.numeric_column("n"),
    "none": None,
    "string": "ident",
    "tpu_column": tpu.embedding_column(fc.categorical_column_with_identity("e", 10), 2),
}
EMBEDDING = {
    "column": P(["identity", "sequence", "weighted"], ["hash", "numeric", "none", "string", "tpu_column"]),
    "dimension": P([4, 1, np.int64(3)], [0, -3, 2.5, True, None, "4"]),
    "combiner": COMBINER,
    "initializer": P([None, Zeros(), TruncatedNormal(0.0, 0.1, 7)], [3, "zeros"]),
    # "auto": 3 for a sequence column, else 0; "wrong": the other one.
    "max_sequence_length": P(["auto"], ["wrong", -1, 2.5, "3", None]),
    "device": P([None, "cpu", "tpu_embedding_core", "tpu_tensor_core"], ["gpu", "CPU"]),
    # "auto": [None, 3] with 'tpu_tensor_core', else None; "needless": the other one.
    "shape": P(["auto", "auto_tuple"], [[4], [1, 2, 3], [0, 3], [2.5, 3], "ab", 5, "needless"]),
    "learning_rate_fn": P([None, lr_fn], [3, "f"]),
    "safe": P([True, False], [0, 1, None, "yes"]),
}


def _shape_ok(shape) -> bool:
    if not isinstance(shape, (list, tuple)) or len(shape) != 2:
        return False
    return all(s is None or s == -1 or int_at_least(s, 1) for s in shape)


def _device_bad(bad: Bad, device, shape, sequence_columns: Iterable[bool]) -> None:
    if device not in (None, "cpu", "tpu_embedding_core", "tpu_tensor_core"):
        bad.arg("embedding_lookup_device")
    if shape is not None and (not _shape_ok(shape) or device != "tpu_tensor_core"):
        bad.arg("tensor_core_shape")
    if shape is None and device == "tpu_tensor_core":
        bad.arg("tensor_core_shape")
    if device == "tpu_tensor_core" and any(sequence_columns):
        bad.arg("embedding_lookup_device")


def _dimension_and_combiner_bad(bad: Bad, dimension, combiner) -> None:
    """The rules embedding_column and shared_embedding_columns share for `dimension` and `combiner`."""
    if not int_at_least(dimension, 1):
        bad.arg("dimension")
    if combiner not in ("mean", "sum", "sqrtn", None):
        bad.arg("combiner")


def _resolve_shape(token, device):
    tensor_core = device == "tpu_tensor_core"
    if token == "auto":
        return [None, 3] if tensor_core else None
    if token == "auto_tuple":
        return (-1, 3) if tensor_core else None
    if token == "needless":
        return None if tensor_core else [None, 3]
    return token


@SETTINGS
@given(a=arguments(EMBEDDING))
@example(a=first_valid(EMBEDDING, device="tpu_tensor_core", shape=5))
def test_embedding_column(a):
    categorical = COLUMNS[a["column"]]
    sequence = a["column"] == "sequence"
    dimension, combiner, init, device = a["dimension"], a["combiner"], a["initializer"], a["device"]
    msl = {"auto": 3 if sequence else 0, "wrong": 0 if sequence else 3}.get(
        a["max_sequence_length"], a["max_sequence_length"]
    )
    shape = _resolve_shape(a["shape"], device)
    bad = Bad()
    if a["column"] in ("numeric", "none", "string", "tpu_column"):
        bad.arg("categorical_column")
    if a["column"] == "hash":
        bad.text("HashedCategoricalColumn")
    _dimension_and_combiner_bad(bad, dimension, combiner)
    if init is not None and not callable(init):
        bad.arg("initializer")
    if not is_int(msl) or (sequence and msl < 1) or (not sequence and msl != 0):
        bad.arg("max_sequence_length")
    _device_bad(bad, device, shape, [sequence])
    if a["learning_rate_fn"] is not None and not callable(a["learning_rate_fn"]):
        bad.arg("learning_rate_fn")
    if not is_bool(a["safe"]):
        bad.arg("use_safe_embedding_lookup")

    def build():
        col = tpu.embedding_column(
            categorical,
            dimension,
            combiner=combiner,
            initializer=init,
            max_sequence_length=msl,
            learning_rate_fn=a["learning_rate_fn"],
            embedding_lookup_device=device,
            tensor_core_shape=shape,
            use_safe_embedding_lookup=a["safe"],
        )
        return col, EmbeddingConfigSpec(feature_columns=[col], optimization_parameters=v1.AdagradParameters(0.1))

    # A config whose only column is a tensor-core one leaves nothing to the embedding engine: building it
    # or refusing it (naming the tensor-core column / feature_columns) are both acceptable.
    built = check_outcome(
        build, bad, may_refuse=("tensor_core", "feature_columns") if device == "tpu_tensor_core" else ()
    )
    if built is None:
        return
    col, config = built
    assert (col.dimension, col.combiner, col.get_max_sequence_length()) == (dimension, combiner, msl)
    assert col.embedding_lookup_device == device
    if device == "tpu_tensor_core":
        assert list(config.tensor_core_feature_columns) == [col] and not config.feature_columns
        return  # the model trains tensor-core tables; nothing for the embedding engine
    spec = round_trips(config.to_spec())
    (table,), (feature,) = spec.tables, spec.features
    assert (table.vocabulary_size, table.dim, table.combiner) == (10, dimension, combiner or "sum")
    if init is not None:
        assert table.initializer is init
    else:
        assert table.initializer == TruncatedNormal(0.0, 1 / math.sqrt(dimension), None)
    assert (feature.name, feature.max_sequence_length, feature.safe_lookup) == (
        col.get_feature_key_name(),
        msl,
        a["safe"],
    )
    if a["learning_rate_fn"] is not None:
        assert spec.optimizer_for(table.name).learning_rate is a["learning_rate_fn"]
    else:
        assert table.optimizer is None and spec.optimizer.learning_rate == 0.1


def test_tpu_column_arguments_are_read_only():
    """TensorFlow's TPU columns are namedtuples: setting an argument raises AttributeError (checked on TF 2.15)."""
    ident, other = fc.categorical_column_with_identity("a", 5), fc.categorical_column_with_identity("b", 5)
    column = tpu.embedding_column(ident, 4)
    shared = tpu.shared_embedding_columns([ident, other], 4)[0]
    for col, names in [
        (column, ["categorical_column", "dimension", "combiner", "initializer", "use_safe_embedding_lookup"]),
        (shared, ["categorical_column", "shared_embedding_column_creator", "combiner"]),
    ]:
        for name in names:
            with pytest.raises(AttributeError):
                setattr(col, name, None)
    assert shared.get_initializer() is shared.shared_embedding_column_creator.initializer


def test_config_whose_only_column_is_tensor_core():
    """The example of test_embedding_column the search rarely reaches: built, or refused with a clear error."""
    column = tpu.embedding_column(
        fc.categorical_column_with_identity("ident", 10),
        2,
        embedding_lookup_device="tpu_tensor_core",
        tensor_core_shape=[None, 3],
    )
    config = check_outcome(
        lambda: EmbeddingConfigSpec(feature_columns=[column], optimization_parameters=v1.AdagradParameters(0.1)),
        Bad(),
        may_refuse=("tensor_core", "feature_columns"),
    )
    if config is not None:
        assert list(config.tensor_core_feature_columns) == [column]
        assert not config.feature_columns


# 3. shared_embedding_columns ------------------------------------------------------------------------

SHARED_POOL = {
    "p": fc.categorical_column_with_identity("p", 10),
    "q": fc.categorical_column_with_identity("q", 10),
    "r20": fc.categorical_column_with_identity("r20", 20),
    "s": fc.sequence_categorical_column_with_identity("s", 10),
    "w": fc.weighted_categorical_column(fc.categorical_column_with_identity("wk", 10), "wk_weights"),
    "v": fc.categorical_column_with_vocabulary_list("v", [str(i) for i in range(8)], num_oov_buckets=2),
    "h": fc.categorical_column_with_hash_bucket("h", 10),
    "n": fc.numeric_column("n"),
}
SHARED = {
    "names": P(
        [("p", "q"), ("p",), ("s", "p"), ("w", "q", "v"), ("v", "s"), ("q", "p", "w", "v")],
        [(), ("p", "p"), ("p", "r20"), ("r20", "s"), ("h", "q"), ("n",), "single", "none", "string"],
    ),
    "dimension": P([2, 1], [0, 2.5, "2", None]),
    "combiner": P(["mean", "sqrtn", None], ["max"]),
    # "auto": 2 for sequence columns, 0 otherwise (None or [] when there are none); others are broken versions.
    "lengths": P(["auto"], ["too_long", "too_short", "negative", "float", "zeros", 5, "0"]),
    "collection": P([None, "my_shared"], ["", 3]),
    "device": P([None, "cpu"], ["gpu"]),
}


def _feature_key(name):
    return {"w": "wk"}.get(name, name)


def _lengths(token, names):
    auto = [2 if n == "s" else 0 for n in names]
    if token == "auto":
        return auto if "s" in names else (None if len(names) % 2 else [])
    return {
        "too_long": auto + [0],
        "too_short": auto[:-1],
        "negative": [-1] + auto[1:],
        "float": [2.5] + auto[1:],
        "zeros": [0] * len(names),
    }.get(token, token)


@SETTINGS
@given(a=arguments(SHARED))
@example(a=first_valid(SHARED, lengths=5))
def test_shared_embedding_columns(a):
    names, dimension, combiner, collection, device = (
        a["names"],
        a["dimension"],
        a["combiner"],
        a["collection"],
        a["device"],
    )
    bad = Bad()
    if isinstance(names, str):
        columns = {"single": SHARED_POOL["p"], "none": None, "string": "p"}[names]
        bad.arg("categorical_columns")
        names = ()
    else:
        columns = [SHARED_POOL[n] for n in names]
        if not columns:
            bad.arg("categorical_columns")
    lengths = _lengths(a["lengths"], names)
    for name in names:
        if name == "h":
            bad.text("HashedCategoricalColumn")
        if name == "n":
            bad.arg("categorical_column")
    if "r20" in names and set(names) - {"r20", "h", "n"}:
        bad.text("number of buckets")
    keys = [_feature_key(n) for n in names]
    if len(set(keys)) != len(keys):
        bad.text("feature keys")
    if isinstance(lengths, list) and lengths:
        effective = lengths if len(lengths) == len(names) else None
        if effective is None:
            bad.arg("max_sequence_lengths")
    elif lengths is None or lengths == []:
        effective = [0] * len(names)  # the default: no sequence columns
    else:  # not a list at all
        bad.arg("max_sequence_lengths", "max_sequence_length")
        effective = None
    for name, length in zip(names, effective or []):
        sequence = name == "s"
        if not is_int(length) or (sequence and length < 1) or (not sequence and length != 0):
            bad.arg("max_sequence_length")
    _dimension_and_combiner_bad(bad, dimension, combiner)
    if collection is not None and not nonempty_str(collection):
        bad.arg("shared_embedding_collection_name")
    _device_bad(bad, device, None, [n == "s" for n in names])

    def build():
        cols = tpu.shared_embedding_columns(
            columns,
            dimension,
            combiner=combiner,
            max_sequence_lengths=lengths,
            shared_embedding_collection_name=collection,
            embedding_lookup_device=device,
        )
        return cols, EmbeddingConfigSpec(feature_columns=cols, optimization_parameters=v1.AdagradParameters(0.1))

    built = check_outcome(build, bad)
    if built is None:
        return
    cols, config = built
    assert [col.categorical_column for col in cols] == columns  # input order
    table_name = collection or "_".join(sorted(c.name for c in columns)) + "_shared_embedding"
    assert {col.get_embedding_var_name() for col in cols} == {table_name}
    spec = round_trips(config.to_spec())
    (table,) = spec.tables
    assert (table.name, table.vocabulary_size, table.dim, table.combiner) == (
        "tbl_" + table_name,
        columns[0].num_buckets,
        dimension,
        combiner or "sum",
    )
    assert [f.name for f in spec.features] == keys
    assert [f.max_sequence_length for f in spec.features] == list(effective)


# Optimizer argument pools (v1 and v2) ------------------------------------------------------------

COMMON = {
    "use_gradient_accumulation": BOOL_ARG,
    "clip_weight_min": P([OMIT, None, -1.0, 0.0], [NAN, "x", True, 5.0]),
    "clip_weight_max": P([OMIT, None, 1.0, 2], [NAN, "x", True, -5.0]),
    "weight_decay_factor": P([OMIT, None, 0.0, 0.5], [-1.0, NAN, "x", True]),
    "multiply_weight_decay_factor_by_learning_rate": P([OMIT, None, True, False], [1, "yes"]),
}


def _common_bad(bad: Bad, a: dict[str, Any], clip_pair: tuple[str, str]) -> None:
    def get(name, default=None):
        value = a.get(name, OMIT)
        return default if value is OMIT else value

    if not is_bool(get("use_gradient_accumulation", True)):
        bad.arg("use_gradient_accumulation")
    multiply = get("multiply_weight_decay_factor_by_learning_rate")
    if multiply is not None and not is_bool(multiply):
        bad.arg("multiply_weight_decay_factor_by_learning_rate")
    decay = get("weight_decay_factor")
    if decay is not None and not real_in(decay, 0):
        bad.arg("weight_decay_factor")
    for low, high in (("clip_weight_min", "clip_weight_max"), clip_pair):
        lo, hi = get(low), get(high)
        for name, value in ((low, lo), (high, hi)):
            if value is not None and not is_real(value):
                bad.arg(name)
        if is_real(lo) and is_real(hi) and lo > hi:
            bad.arg(low, high)


def NONNEG(v):
    return real_in(v, 0)


def POSITIVE(v):
    return real_in(v, 0, lo_open=True)


def UNIT_OPEN(v):
    return real_in(v, 0, 1, hi_open=True)


def UNIT(v):
    return real_in(v, 0, 1)


# 4. v1 *Parameters ---------------------------------------------------------------------------------

V1_CLASSES = [
    v1.StochasticGradientDescentParameters,
    v1.AdagradParameters,
    v1.ProximalAdagradParameters,
    v1.AdamParameters,
    v1.FtrlParameters,
    v1.MomentumParameters,
    v1.RMSPropParameters,
]
# class -> {argument: predicate}; the spec field has the same name for every v1 class.
V1_SPECIFIC = {
    v1.StochasticGradientDescentParameters: {},
    v1.AdagradParameters: {"initial_accumulator": POSITIVE},
    v1.ProximalAdagradParameters: {
        "initial_accumulator": POSITIVE,
        "l1_regularization_strength": NONNEG,
        "l2_regularization_strength": NONNEG,
    },
    v1.AdamParameters: {
        "beta1": UNIT_OPEN,
        "beta2": UNIT_OPEN,
        "epsilon": POSITIVE,
        "lazy_adam": is_bool,
        "sum_inside_sqrt": is_bool,
    },
    v1.FtrlParameters: {
        "learning_rate_power": lambda v: real_in(v, hi=0),
        "initial_accumulator_value": NONNEG,
        "l1_regularization_strength": NONNEG,
        "l2_regularization_strength": NONNEG,
        "beta": NONNEG,
        "multiply_linear_by_learning_rate": is_bool,
        "allow_zero_accumulator": is_bool,
    },
    v1.MomentumParameters: {"momentum": NONNEG, "use_nesterov": is_bool},
    v1.RMSPropParameters: {"rho": UNIT, "momentum": NONNEG, "epsilon": POSITIVE},
}
V1_REQUIRED = {
    v1.MomentumParameters: {"momentum": 0.9},
    v1.RMSPropParameters: {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-10},
}
V1 = {
    "cls": P(V1_CLASSES),
    "learning_rate": P([0.1, 0.0, 1], [-0.1, "x", None, True, NAN]),
    **COMMON,
    "clip_gradient_min": P([OMIT, None, -1.0], [NAN, "x", 5.0]),
    "clip_gradient_max": P([OMIT, None, 1.0], [NAN, "x", -5.0]),
    "initial_accumulator": P([OMIT, 0.1, 1], [0, -1, NAN, "x"]),
    "l1_regularization_strength": P([OMIT, 0.0, 0.5], [-1, NAN, "x"]),
    "l2_regularization_strength": P([OMIT, 0.0, 0.5], [-1, NAN, "x"]),
    "beta1": P([OMIT, 0.0, 0.9], [1.0, -0.1, 1.5, "x"]),
    "beta2": P([OMIT, 0.0, 0.999], [1.0, -0.1, 1.5, "x"]),
    "epsilon": P([OMIT, 1e-8, 1.0], [0.0, -1e-8, "x"]),
    "lazy_adam": BOOL_ARG,
    "sum_inside_sqrt": BOOL_ARG,
    "learning_rate_power": P([OMIT, -0.5, 0.0], [0.5, "x", None]),
    "initial_accumulator_value": P([OMIT, 0.1, 0.0], [-1, NAN]),
    "beta": P([OMIT, 0, 0.5], [-1, "x"]),
    "multiply_linear_by_learning_rate": BOOL_ARG,
    "allow_zero_accumulator": BOOL_ARG,
    "momentum": P([OMIT, 0.0, 0.9], [-0.5, "x", None]),
    "use_nesterov": BOOL_ARG,
    "rho": P([OMIT, 0.9, 1.0, 0.0], [1.5, -0.1, "x"]),
}
V1_COMMON_NAMES = [
    "use_gradient_accumulation",
    "clip_weight_min",
    "clip_weight_max",
    "weight_decay_factor",
    "multiply_weight_decay_factor_by_learning_rate",
    "clip_gradient_min",
    "clip_gradient_max",
]


@SETTINGS
@given(a=arguments(V1))
def test_v1_optimization_parameters(a):
    cls = a["cls"]
    kwargs = {"learning_rate": a["learning_rate"], **passed(a, *V1_COMMON_NAMES, *V1_SPECIFIC[cls])}
    for name, value in V1_REQUIRED.get(cls, {}).items():
        kwargs.setdefault(name, value)
    bad = Bad()
    if not real_in(kwargs["learning_rate"], 0):
        bad.arg("learning_rate")
    _common_bad(bad, kwargs, ("clip_gradient_min", "clip_gradient_max"))
    for name, ok in V1_SPECIFIC[cls].items():
        if name in kwargs and not ok(kwargs[name]):
            bad.arg(name)
    accumulate = kwargs.get("use_gradient_accumulation", True)
    if (
        kwargs.get("clip_gradient_min") is not None or kwargs.get("clip_gradient_max") is not None
    ) and accumulate is False:
        bad.arg("use_gradient_accumulation")
    if cls is v1.AdamParameters and kwargs.get("lazy_adam", True) is False and accumulate is False:
        bad.arg("lazy_adam", "use_gradient_accumulation")

    def build():
        params = cls(**kwargs)
        column = tpu.embedding_column(fc.categorical_column_with_identity("ident", 10), 2)
        return params, EmbeddingConfigSpec(feature_columns=[column], optimization_parameters=params)

    built = check_outcome(build, bad)
    if built is None:
        return
    params, config = built
    for name, value in kwargs.items():
        assert getattr(params, name) is value  # stored as given, as TensorFlow does
    optimizer = round_trips(config.to_spec()).optimizer
    assert optimizer.learning_rate == kwargs["learning_rate"]
    for name in V1_SPECIFIC[cls]:
        if name in kwargs:
            assert getattr(optimizer, name) == kwargs[name]
    for name in ("clip_weight_min", "clip_weight_max", "clip_gradient_min", "clip_gradient_max", "weight_decay_factor"):
        assert getattr(optimizer, name) == kwargs.get(name)
    assert optimizer.multiply_weight_decay_factor_by_learning_rate == bool(
        kwargs.get("multiply_weight_decay_factor_by_learning_rate")
    )


# 5. v2 optimizers -----------------------------------------------------------------------------------

V2_CLASSES = [v2.SGD, v2.Adagrad, v2.AdagradMomentum, v2.Adam, v2.FTRL]


def same_field(**predicates):
    """{argument: (predicate, spec field)} for arguments whose spec field has the argument's name."""
    return {name: (predicate, name) for name, predicate in predicates.items()}


# class -> {argument: (predicate, spec field)}
V2_SPECIFIC = {
    v2.SGD: {},
    v2.Adagrad: {"initial_accumulator_value": (POSITIVE, "initial_accumulator")},
    v2.AdagradMomentum: same_field(
        momentum=is_real, use_nesterov=is_bool, exponent=POSITIVE, beta2=UNIT, epsilon=POSITIVE
    ),
    v2.Adam: {
        "beta_1": (UNIT_OPEN, "beta1"),
        "beta_2": (UNIT_OPEN, "beta2"),
        **same_field(epsilon=POSITIVE, lazy_adam=is_bool, sum_inside_sqrt=is_bool),
    },
    v2.FTRL: same_field(
        learning_rate_power=lambda v: real_in(v, hi=0),
        initial_accumulator_value=POSITIVE,
        l1_regularization_strength=NONNEG,
        l2_regularization_strength=NONNEG,
        beta=NONNEG,
        multiply_linear_by_learning_rate=is_bool,
        allow_zero_accumulator=is_bool,
    ),
}
V2 = {
    "cls": P(V2_CLASSES),
    "learning_rate": P([OMIT, 0.1, 0.0, zero_arg_lr], [-0.1, "x", None, True, NAN]),
    **COMMON,
    "clipvalue": P(
        [OMIT, None, 1.0, 0, (-1.0, 1.0), (None, 2.0)],
        [-1.0, (1.0, -1.0), (1.0, 2.0, 3.0), (1.0, "x"), [-1.0, 1.0], "x", NAN],
    ),
    "slot_variable_creation_fn": P([OMIT, None, lr_fn], [3]),
    "low_dimensional_packing_status": BOOL_ARG,
    "initial_accumulator_value": P([OMIT, 0.1, 1.0], [0.0, -1, NAN, "x"]),
    "momentum": P([OMIT, 0.0, 0.9, -0.5], [NAN, "x", None]),
    "use_nesterov": BOOL_ARG,
    "exponent": P([OMIT, 2, 1.5], [0, -1, "x"]),
    "beta2": P([OMIT, 1, 0.9, 0.0], [1.5, -0.1, "x"]),
    "epsilon": P([OMIT, 1e-7, 1.0], [0.0, -1e-8, "x"]),
    "beta_1": P([OMIT, 0.0, 0.9], [1.0, -0.1, "x"]),
    "beta_2": P([OMIT, 0.0, 0.999], [1.0, 1.5, "x"]),
    "lazy_adam": BOOL_ARG,
    "sum_inside_sqrt": BOOL_ARG,
    "learning_rate_power": P([OMIT, -0.5, 0.0], [0.5, "x"]),
    "l1_regularization_strength": P([OMIT, 0.0, 0.5], [-1, NAN, "x"]),
    "l2_regularization_strength": P([OMIT, 0.0, 0.5], [-1, NAN, "x"]),
    "beta": P([OMIT, 0.0, 0.5], [-1, "x"]),
    "multiply_linear_by_learning_rate": BOOL_ARG,
    "allow_zero_accumulator": BOOL_ARG,
}
V2_COMMON_NAMES = [
    "learning_rate",
    "use_gradient_accumulation",
    "clip_weight_min",
    "clip_weight_max",
    "weight_decay_factor",
    "multiply_weight_decay_factor_by_learning_rate",
    "clipvalue",
    "low_dimensional_packing_status",
]


def _clipvalue_bounds(bad: Bad, clipvalue) -> tuple | None:
    """Marks a bad clipvalue; returns the (min, max) a good one means."""
    if clipvalue is None:
        return None, None
    if isinstance(clipvalue, tuple):
        if (
            len(clipvalue) != 2
            or any(v is not None and not is_real(v) for v in clipvalue)
            or (all(is_real(v) for v in clipvalue) and clipvalue[0] > clipvalue[1])
        ):
            bad.arg("clipvalue")
            return None
        return clipvalue
    if not real_in(clipvalue, 0):
        bad.arg("clipvalue")
        return None
    return -float(clipvalue), float(clipvalue)


@SETTINGS
@given(a=arguments(V2))
@example(a=first_valid(V2, cls=v2.Adagrad, clipvalue=(1.0, -1.0)))
def test_v2_optimizers(a):
    cls = a["cls"]
    names = V2_COMMON_NAMES + list(V2_SPECIFIC[cls]) + ([] if cls is v2.SGD else ["slot_variable_creation_fn"])
    kwargs = passed(a, *names)
    bad = Bad()
    learning_rate = kwargs.get("learning_rate", 0.01 if cls is v2.SGD else 0.001)
    if not callable(learning_rate) and not real_in(learning_rate, 0):
        bad.arg("learning_rate")
    _common_bad(bad, kwargs, ("no_such_min", "no_such_max"))
    bounds = _clipvalue_bounds(bad, kwargs.get("clipvalue"))
    if not is_bool(kwargs.get("low_dimensional_packing_status", False)):
        bad.arg("low_dimensional_packing_status")
    creator = kwargs.get("slot_variable_creation_fn")
    if creator is not None and not callable(creator):
        bad.arg("slot_variable_creation_fn")
    for name, (ok, _) in V2_SPECIFIC[cls].items():
        if name in kwargs and not ok(kwargs[name]):
            bad.arg(name)
    accumulate = kwargs.get("use_gradient_accumulation", True)
    if kwargs.get("clipvalue") is not None and accumulate is False:
        bad.arg("use_gradient_accumulation")
    if cls is v2.Adam and kwargs.get("lazy_adam", True) is False and accumulate is False:
        bad.arg("lazy_adam", "use_gradient_accumulation")

    def build():
        optimizer = cls(**kwargs)
        table = v2.TableConfig(vocabulary_size=10, dim=2, optimizer=optimizer, name="t")
        return optimizer, lowering.spec_from_feature_config({"f": v2.FeatureConfig(table)})

    built = check_outcome(build, bad)
    if built is None:
        return
    optimizer, spec = built
    round_trips(spec)
    lowered = spec.optimizer_for("t")
    assert lowered is spec.tables[0].optimizer
    assert lowered.learning_rate_at(step=5) == pytest.approx(
        learning_rate() if callable(learning_rate) else learning_rate
    )
    assert (lowered.clip_gradient_min, lowered.clip_gradient_max) == tuple(bounds)
    for name, (_, field) in V2_SPECIFIC[cls].items():
        if name in kwargs:
            assert getattr(lowered, field) == kwargs[name]
    assert sorted(optimizer._slot_names()) == sorted(lowered.slot_initial_values())


@pytest.mark.parametrize("cls", v1.OPTIMIZATION_PARAMETER_CLASSES + v2.OPTIMIZER_CLASSES, ids=lambda c: c.__name__)
def test_optimizer_arguments_bind_as_in_tensorflow(cls):
    """Positional and keyword calls agree; a missing, unknown or extra argument is TensorFlow's TypeError."""
    parameters = inspect.signature(cls).parameters.values()
    values = {p.name: 0.1 if p.default is p.empty else p.default for p in parameters}
    assert vars(cls(*values.values())) == vars(cls(**values))
    with pytest.raises(TypeError, match="'no_such_option'"):
        cls(**values, no_such_option=1)
    with pytest.raises(TypeError, match=f"{cls.__name__}.*positional"):
        cls(*values.values(), 1)
    for name in [p.name for p in parameters if p.default is p.empty]:
        with pytest.raises(TypeError, match=f"'{name}'"):
            cls(**{k: v for k, v in values.items() if k != name})


# 6. v1 TableConfig / FeatureConfig through EmbeddingConfigSpec -------------------------------------


def _table_config_bad(bad: Bad, vocabulary_size, dimension_name: str, dimension, initializer) -> None:
    """The rules v1's and v2's TableConfig share: both sizes ints >= 1, the initializer None or callable."""
    if not int_at_least(vocabulary_size, 1):
        bad.arg("vocabulary_size")
    if not int_at_least(dimension, 1):
        bad.arg(dimension_name)
    if initializer is not None and not callable(initializer):
        bad.arg("initializer")


V1_CONFIGS = {
    "vocabulary_size": P([10, 1, np.int64(4)], [0, 10.0, -1, None, "10", True]),
    "dimension": P([4, 1], [0, 2.5, None, "4"]),
    "initializer": P([None, Zeros()], [1, "zeros"]),
    "combiner": P(["mean", "sum", "sqrtn", None], ["max", "MEAN", 1]),
    "learning_rate": P([None, 0.2, 0.0], [-1.0, "x", NAN]),
    "learning_rate_fn": P([None, lr_fn], [3]),
    "table_params": P([None, "adam"], ["x", "sgd_v2"]),
    "table_id": P(["t"], ["t2", "", None, 3]),
    "max_sequence_length": P([0, 4], [-1, 2.0, None]),
    "weight_key": P([None, "w"], ["", 3, "f"]),
    "global_params": P([None, "adagrad"], ["x", "class"]),
}
V1_PARAMS = {
    None: None,
    "adam": v1.AdamParameters(0.3),
    "x": "x",
    "sgd_v2": v2.SGD(0.1),
    "adagrad": v1.AdagradParameters(0.1),
    "class": v1.AdagradParameters,
}


@SETTINGS
@given(a=arguments(V1_CONFIGS))
def test_v1_table_and_feature_config(a):
    learning_rate, learning_rate_fn = a["learning_rate"], a["learning_rate_fn"]
    bad = Bad()
    _table_config_bad(bad, a["vocabulary_size"], "dimension", a["dimension"], a["initializer"])
    if a["combiner"] not in ("mean", "sum", "sqrtn", None):
        bad.arg("combiner")
    if learning_rate is not None and learning_rate_fn is not None:
        bad.arg("learning_rate", "learning_rate_fn")
    if learning_rate is not None and not real_in(learning_rate, 0):
        bad.arg("learning_rate")
    if learning_rate_fn is not None and not callable(learning_rate_fn):
        bad.arg("learning_rate_fn")
    if a["table_params"] in ("x", "sgd_v2") or a["global_params"] in ("x", "class"):
        bad.arg("optimization_parameters")
    if not nonempty_str(a["table_id"]):
        bad.arg("table_id")
    elif a["table_id"] != "t":
        bad.text("'t2'")
    if not int_at_least(a["max_sequence_length"], 0):
        bad.arg("max_sequence_length")
    if a["weight_key"] is not None and not nonempty_str(a["weight_key"]):
        bad.arg("weight_key")
    elif a["weight_key"] == "f":
        bad.text("weight key")

    def build():
        table = v1.TableConfig(
            a["vocabulary_size"],
            a["dimension"],
            initializer=a["initializer"],
            combiner=a["combiner"],
            learning_rate=learning_rate,
            learning_rate_fn=learning_rate_fn,
            optimization_parameters=V1_PARAMS[a["table_params"]],
        )
        feature = v1.FeatureConfig(
            a["table_id"], max_sequence_length=a["max_sequence_length"], weight_key=a["weight_key"]
        )
        return EmbeddingConfigSpec(
            feature_to_config_dict={"f": feature},
            table_to_config_dict={"t": table},
            optimization_parameters=V1_PARAMS[a["global_params"]],
        )

    config = check_outcome(build, bad)
    if config is None:
        return
    spec = round_trips(config.to_spec())
    (table,), (feature,) = spec.tables, spec.features
    assert (table.name, table.vocabulary_size, table.dim) == ("t", a["vocabulary_size"], a["dimension"])
    assert table.combiner == ("sum" if a["combiner"] is None else a["combiner"])
    if a["initializer"] is not None:
        assert table.initializer is a["initializer"]
    assert (feature.name, feature.table, feature.max_sequence_length, feature.weight_key) == (
        "f",
        "t",
        a["max_sequence_length"],
        a["weight_key"],
    )
    optimizer = spec.optimizer_for("t")
    own = V1_PARAMS[a["table_params"]] or V1_PARAMS[a["global_params"]]
    if own is None:
        assert optimizer is None
    else:
        assert optimizer.kind == ("adam" if a["table_params"] == "adam" else "adagrad")
        override = learning_rate if learning_rate is not None else learning_rate_fn
        assert optimizer.learning_rate == (override if override is not None else own.learning_rate)


# 7. v2 TableConfig / FeatureConfig ---------------------------------------------------------------------

V2_CONFIGS = {
    "vocabulary_size": P([10, 1, np.int64(4)], [0, -2, 2.5, True, None, "5"]),
    "dim": P([4, 1], [0, 2.5, None, "4"]),
    "initializer": P([None, Zeros()], [1]),
    "optimizer": P([None, "sgd"], ["sgd_str", "adagrad_v1"]),
    "combiner": COMBINER,
    "name": P([None, "video"], ["", 3]),
    "quantization": P([None, "q"]),
    "table": P(["table"], ["str", None]),
    "max_sequence_length": P([0, 3], [-1, 2.5, None]),
    "validate": P([True, False], [0, 1, None, "yes"]),
    "output_shape": P([None, [4], (2, 3)], [[0], [2.5], "x", 5]),
    "feature_name": P([None, "watched"], ["", 3]),
    "global_optimizer": P([None, "adam"]),
}
V2_OPTIMIZERS = {
    None: None,
    "sgd": v2.SGD(0.2),
    "sgd_str": "sgd",
    "adagrad_v1": v1.AdagradParameters(0.1),
    "adam": v2.Adam(0.01),
}


@SETTINGS
@given(a=arguments(V2_CONFIGS))
@example(a=first_valid(V2_CONFIGS, output_shape=5))
def test_v2_table_and_feature_config(a):
    bad = Bad()
    _table_config_bad(bad, a["vocabulary_size"], "dim", a["dim"], a["initializer"])
    if a["optimizer"] in ("sgd_str", "adagrad_v1"):
        bad.arg("optimizer")
    if a["combiner"] not in ("mean", "sum", "sqrtn"):
        bad.arg("combiner")
    if a["name"] is not None and not nonempty_str(a["name"]):
        bad.arg("name")
    if a["table"] != "table":
        bad.arg("table")
    if not int_at_least(a["max_sequence_length"], 0):
        bad.arg("max_sequence_length")
    if not is_bool(a["validate"]):
        bad.arg("validate_weights_and_indices")
    shape = a["output_shape"]
    if shape is not None and not (isinstance(shape, (list, tuple)) and all(int_at_least(d, 1) for d in shape)):
        bad.arg("output_shape")
    if a["feature_name"] is not None and not nonempty_str(a["feature_name"]):
        bad.arg("name")

    def build():
        quantization = v2.QuantizationConfig(4, -1.0, 1.0) if a["quantization"] else None
        table_config = v2.TableConfig(
            a["vocabulary_size"],
            a["dim"],
            initializer=a["initializer"],
            optimizer=V2_OPTIMIZERS[a["optimizer"]],
            combiner=a["combiner"],
            name=a["name"],
            quantization_config=quantization,
        )
        feature = v2.FeatureConfig(
            {"table": table_config, "str": "video", None: None}[a["table"]],
            max_sequence_length=a["max_sequence_length"],
            validate_weights_and_indices=a["validate"],
            output_shape=shape,
            name=a["feature_name"],
        )
        return lowering.spec_from_feature_config({"f": feature}, V2_OPTIMIZERS[a["global_optimizer"]])

    spec = check_outcome(build, bad)
    if spec is None:
        return
    round_trips(spec)
    (table,), (feature,) = spec.tables, spec.features
    assert (table.name, table.vocabulary_size, table.dim, table.combiner) == (
        a["name"] or "table_0",
        a["vocabulary_size"],
        a["dim"],
        a["combiner"],
    )
    assert (feature.name, feature.max_sequence_length, feature.safe_lookup) == (
        a["feature_name"] or "f",
        a["max_sequence_length"],
        a["validate"],
    )
    expected_kind = "sgd" if a["optimizer"] == "sgd" else a["global_optimizer"]
    lowered = spec.optimizer_for(table.name)
    assert (lowered.kind if lowered else None) == expected_kind


# 8. EmbeddingConfigSpec ---------------------------------------------------------------------------------

_IDENT = fc.categorical_column_with_identity("ident", 10)
_EMB = tpu.embedding_column(_IDENT, 2)
_OTHER = tpu.embedding_column(fc.categorical_column_with_identity("other", 5), 3)
ECS_COLUMNS = {  # name: (feature_columns, what the refusal names (None: valid))
    "one": ([_EMB], None),
    "two": ([_EMB, _OTHER], None),
    "with_numeric": ([_EMB, fc.numeric_column("n")], None),
    "tuple": ((_EMB, _OTHER), None),
    "none": (None, "feature_columns"),
    "empty": ([], "feature_columns"),
    "single": (_EMB, "feature_columns"),
    "plain_embedding": ([fc.embedding_column(_IDENT, 2)], "tf.feature_column.embedding_column"),
    "raw_categorical": ([_IDENT], "feature_columns"),
    "string": (["p"], "feature_columns"),
    "twice": ([_EMB, _EMB], "'ident'"),
}
ECS_OPTIMIZERS = {
    "adagrad": v1.AdagradParameters(0.1),
    "ftrl": v1.FtrlParameters(0.2),
    "rmsprop": v1.RMSPropParameters(0.1, 0.9, 0.0, 1e-10),
    "none": None,
    "class": v1.AdagradParameters,
    "string": "adagrad",
    "v2": v2.Adagrad(0.1),
}
ECS = {
    "columns": P(
        ["one", "two", "with_numeric", "tuple"],
        ["none", "empty", "single", "plain_embedding", "raw_categorical", "string", "twice"],
    ),
    "optimizer": P(["adagrad", "ftrl", "rmsprop"], ["none", "class", "string", "v2"]),
    "clipping_limit": P([None, 1.0, 0.5, 2], [0, -1, "x", True, NAN]),
    "pipeline": P([False, True], [0, 1, None, "yes"]),
    "multiplier": P([None, grad_multiplier], [3]),
    "partition": P(["div", "mod"], ["DIV", "foo", None, 1]),
    "profile": P([None, "/tmp/profile"], [3]),
    "positional": P([False, True]),
}


@SETTINGS
@given(a=arguments(ECS))
def test_embedding_config_spec(a):
    feature_columns, refusal = ECS_COLUMNS[a["columns"]]
    params = ECS_OPTIMIZERS[a["optimizer"]]
    clipping_limit, pipeline, multiplier, partition, profile = (
        a["clipping_limit"],
        a["pipeline"],
        a["multiplier"],
        a["partition"],
        a["profile"],
    )
    bad = Bad()
    if refusal:
        bad.text(refusal)
    if a["optimizer"] in ("none", "class", "string", "v2"):
        bad.arg("optimization_parameters")
    if clipping_limit is not None and not real_in(clipping_limit, 0, lo_open=True):
        bad.arg("clipping_limit")
    if not is_bool(pipeline):
        bad.arg("pipeline_execution_with_tensor_core")
    if multiplier is not None and not callable(multiplier):
        bad.arg("experimental_gradient_multiplier_fn")
    if partition not in ("div", "mod"):
        bad.arg("partition_strategy")
    if profile is not None and not isinstance(profile, str):
        bad.arg("profile_data_directory")

    def build():
        if a["positional"]:
            return EmbeddingConfigSpec(
                feature_columns, params, clipping_limit, pipeline, multiplier, None, None, partition, profile
            )
        return tf.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=feature_columns,
            optimization_parameters=params,
            clipping_limit=clipping_limit,
            pipeline_execution_with_tensor_core=pipeline,
            experimental_gradient_multiplier_fn=multiplier,
            partition_strategy=partition,
            profile_data_directory=profile,
        )

    config = check_outcome(build, bad)
    if config is None:
        return
    assert (
        config.optimization_parameters,
        config.clipping_limit,
        config.partition_strategy,
        config.profile_data_directory,
    ) == (params, clipping_limit, partition, profile)
    spec = round_trips(config.to_spec())
    tpu_columns = [c for c in feature_columns if hasattr(c, "get_embedding_var_name")]
    assert [t.name for t in spec.tables] == ["tbl_" + c.get_embedding_var_name() for c in tpu_columns]
    assert spec.optimizer.kind == a["optimizer"]
    assert (
        spec.partition_strategy,
        spec.clipping_limit,
        spec.pipeline_execution_with_tensor_core,
        spec.gradient_multiplier_fn,
        spec.profile_data_directory,
    ) == (partition, clipping_limit, pipeline, multiplier, profile)
