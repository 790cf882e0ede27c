"""Generated bad inputs over every public entry point (issue 16, "keep it proven").

Each test puts one generated value (`JUNK`: None, bools, odd numbers, NaN and
infinities, strings, bytes, lists, dicts, numpy scalars and arrays, plain
objects, callables) into one argument of an entry point whose other arguments
are valid, and checks, through `attempt`:

- an exception is one of TensorFlow's family (ValueError, TypeError,
  NotImplementedError, RuntimeError, FileNotFoundError, the project's
  CheckpointError / tf.errors-like classes), never IndexError, KeyError,
  AttributeError, ZeroDivisionError, UnicodeDecodeError, JSONDecodeError,
  OverflowError or one of numpy's own classes;
- its message names the argument (or the file);
- a value TensorFlow refuses, or that docs/stricter_than_tensorflow.md says
  is refused here, is refused (`valid=False`), and a valid one is accepted;
  `valid=None` where only the exception's hygiene is checked;
- nothing changes after an error: tables, slots, the global step, the
  user's config objects, the checkpoint's targets.

Every test counts its generated inputs; together they are at least
`MINIMUM_PER_RUN`. Each test is bounded (max_examples, no deadline per
example, and the module runs in well under a minute).
"""

import copy
import json
import math
import os
import shutil
import tempfile
import traceback

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpu_embedding_shim as tf

E = tf.tpu.experimental.embedding
FC = tf.feature_column
MINIMUM_PER_RUN = 500
pytestmark = pytest.mark.filterwarnings("ignore:No gradient passed for feature")  # TensorFlow's warning, on purpose

FORBIDDEN = (
    IndexError,
    KeyError,
    AttributeError,
    ZeroDivisionError,
    UnicodeError,
    json.JSONDecodeError,
    OverflowError,
    FloatingPointError,
    AssertionError,
    RecursionError,
    StopIteration,
    LookupError,
)
ALLOWED = (ValueError, TypeError, NotImplementedError, RuntimeError, FileNotFoundError)

NAN, INF = float("nan"), float("inf")


def _callable(*args, **kwargs):
    return 0.1


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 12),
    st.sampled_from([2**40, -(2**40)]),
    st.sampled_from([2.5, 4.0, 0.0, -1.5, NAN, INF, -INF, 1e-300]),
    st.sampled_from(["", "mean", "MEAN", "sum", "sqrtn", "max", "x", "4", "div", "mod", "cpu", "\x00\u00fc"]),
    st.sampled_from([b"4", b"\xff\xfe"]),
    st.lists(st.integers(-2, 9), max_size=3),
    st.lists(st.sampled_from(["a", "b", "a"]), max_size=3),
    st.sampled_from([[None, 3], [[1]], [1.5], {}, {"a": 1}, (), (2, 3), [0, 0]]),
    st.sampled_from(
        [
            np.int64(4),
            np.int32(-1),
            np.float32(2.0),
            np.float64(NAN),
            np.bool_(True),
            np.array([1, 2]),
            np.array(3),
            np.array(["a"]),
            np.array([[1, 2], [3, 4]]),
            np.array([1.5, INF]),
            np.zeros((0,), np.int64),
        ]
    ),
    st.sampled_from([object(), _callable, int]),
)

COUNTS = {}


def examples(minimum, name):
    """Decorates a test body taking `data`: runs it under hypothesis, then checks at least `minimum` inputs ran."""

    def decorate(body):
        runner = settings(
            max_examples=3 * minimum, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )(given(data=st.data())(body))

        def test():
            COUNTS[name] = 0
            runner()
            assert COUNTS[name] >= minimum, (name, COUNTS[name])

        test.__name__ = body.__name__
        test.__doc__ = body.__doc__
        test.minimum = minimum
        return test

    return decorate


def _equal(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    return a == b


def attempt(name, call, *, names, valid, snapshot=None):
    """Calls `call()`; checks what it raised (or that a bad input was refused) and that an error changed nothing."""
    COUNTS[name] = COUNTS.get(name, 0) + 1
    before = snapshot() if snapshot is not None else None
    try:
        result = call()
    except Exception as error:  # judged below
        where = "".join(traceback.format_exception(type(error), error, error.__traceback__)[-3:])
        assert not isinstance(error, FORBIDDEN), f"{type(error).__name__} escaped:\n{where}"
        assert isinstance(error, ALLOWED), f"{type(error).__name__} is not TensorFlow's family:\n{where}"
        assert type(error).__module__.split(".")[0] != "numpy", f"numpy's own error:\n{where}"
        message = str(error).lower()
        assert any(n.lower() in message for n in names), f"message names none of {names}:\n{where}"
        assert valid is not True, f"a valid input was refused:\n{where}"
        if snapshot is not None:
            assert _equal(snapshot(), before), f"state changed by a call that raised:\n{where}"
        return error
    assert valid is not False, f"silently accepted; result {result!r:.200}"
    return result


def vars_of(*objects):
    """The attributes of config objects, as text (a raising call must leave the user's objects as they were)."""
    return [repr(sorted((k, repr(v)) for k, v in vars(o).items())) for o in objects]


# Predicates: what TensorFlow (or this project, where stricter) accepts --------------------------------------


def is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def is_number(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def finite_number(v):
    return is_number(v) and math.isfinite(v)


def one_of(v, *allowed):
    return isinstance(v, str) and v in allowed


def positive_int(v):
    return is_int(v) and v >= 1


def number_at_least(v, low, *, strict=False):
    """True/False where clear; None for NaN/inf and bools (TensorFlow's verdict differs by argument)."""
    if isinstance(v, (bool, np.bool_)) or (is_number(v) and not math.isfinite(v)):
        return None
    if not is_number(v):
        return False
    return v > low if strict else v >= low


def not_a_value(v):
    """Junk no argument of a number, a name or an array can mean."""
    return v is None or isinstance(v, (dict, bytes)) or type(v) is object or v is int or v is _callable


def pick(data, arguments):
    return data.draw(st.sampled_from(sorted(arguments)), label="argument"), data.draw(JUNK, label="value")


# Feature columns ----------------------------------------------------------------------------------------------


EMBEDDING_COLUMN = {
    "dimension": positive_int,
    "combiner": lambda v: v is None or one_of(v, "mean", "sum", "sqrtn"),  # None sums, as in TensorFlow 2.15
    "max_sequence_length": lambda v: is_int(v) and v == 0,  # over a non-sequence column
    "initializer": lambda v: v is None or callable(v),
    "learning_rate_fn": lambda v: v is None or callable(v),
    "embedding_lookup_device": lambda v: v is None or one_of(v, "cpu", "tpu_embedding_core"),
    "tensor_core_shape": lambda v: v is None,
    "use_safe_embedding_lookup": lambda v: isinstance(v, bool),
    "categorical_column": lambda v: False,
}


@examples(60, "embedding_column")
def test_embedding_column(data):
    argument, value = pick(data, EMBEDDING_COLUMN)
    column = FC.categorical_column_with_identity("f", 10)
    kwargs = {"categorical_column": column, "dimension": 4, argument: value}
    attempt(
        "embedding_column",
        lambda: tf.tpu.experimental.embedding_column(**kwargs),
        names=[argument],
        valid=EMBEDDING_COLUMN[argument](value),
        snapshot=lambda: vars_of(column),
    )


SHARED_COLUMNS = {
    "dimension": positive_int,
    "combiner": lambda v: v is None or one_of(v, "mean", "sum", "sqrtn"),
    "initializer": lambda v: v is None or callable(v),
    "max_sequence_lengths": lambda v: (
        v is None or (isinstance(v, (list, tuple)) and len(v) == 2 and all(is_int(x) and x == 0 for x in v)) or None
    ),
    "categorical_columns": lambda v: False,
    "use_safe_embedding_lookup": lambda v: isinstance(v, bool),
}


@examples(40, "shared_embedding_columns")
def test_shared_embedding_columns(data):
    argument, value = pick(data, SHARED_COLUMNS)
    a, b = FC.categorical_column_with_identity("a", 10), FC.categorical_column_with_identity("b", 10)
    kwargs = {"categorical_columns": [a, b], "dimension": 2, argument: value}
    valid = SHARED_COLUMNS[argument](value)
    attempt(
        "shared_embedding_columns",
        lambda: tf.tpu.experimental.shared_embedding_columns(**kwargs),
        names=[argument, "categorical_column", "max_sequence_length"],
        valid=valid,
        snapshot=lambda: vars_of(a, b),
    )


CATEGORICAL = {
    ("identity", "key"): lambda v: isinstance(v, str) and v != "",
    ("identity", "num_buckets"): positive_int,
    ("identity", "default_value"): lambda v: v is None or (is_int(v) and 0 <= v < 10),
    ("vocabulary_list", "vocabulary_list"): lambda v: (
        None
        if isinstance(v, (list, tuple, np.ndarray, dict))
        and np.ndim(v if not isinstance(v, dict) else list(v)) == 1
        and len(v)
        else False
    ),  # TensorFlow takes a dict's keys
    ("vocabulary_list", "num_oov_buckets"): lambda v: is_int(v) and v >= 0,
    ("sequence_identity", "num_buckets"): positive_int,
    ("weighted", "weight_feature_key"): lambda v: None if isinstance(v, str) else False,
}


@examples(50, "categorical_columns")
def test_categorical_columns(data):
    (kind, argument), value = data.draw(st.sampled_from(sorted(CATEGORICAL))), data.draw(JUNK)
    if kind == "identity":
        kwargs = {"key": "f", "num_buckets": 10, argument: value}
        call = lambda: FC.categorical_column_with_identity(**kwargs)  # noqa: E731
    elif kind == "sequence_identity":
        call = lambda: FC.sequence_categorical_column_with_identity("s", value)  # noqa: E731
    elif kind == "vocabulary_list":
        kwargs = {"key": "v", "vocabulary_list": ["a", "b"], argument: value}
        call = lambda: FC.categorical_column_with_vocabulary_list(**kwargs)  # noqa: E731
    else:
        column = FC.categorical_column_with_identity("f", 10)
        call = lambda: FC.weighted_categorical_column(column, value)  # noqa: E731
    attempt("categorical_columns", call, names=[argument], valid=CATEGORICAL[(kind, argument)](value))


@examples(40, "vocabulary_files")
def test_vocabulary_files(data):
    directory = tempfile.mkdtemp()
    try:
        path = os.path.join(directory, "vocab.txt")
        lines = data.draw(st.lists(st.sampled_from(["comedy", "drama", "", " ", "x\ty", "é"]), max_size=4))
        raw = "\n".join(lines).encode("utf-8")
        binary = data.draw(st.booleans())
        if binary:
            raw += data.draw(st.sampled_from([b"\xff\xfe\x00", b"\x80", b"\xc3"]))
        with open(path, "wb") as file:
            file.write(raw)
        size = data.draw(st.one_of(st.none(), JUNK))
        kwargs = {} if size is None else {"vocabulary_size": size}
        valid = None
        read = lines[:size] if is_int(size) and size > 0 else lines  # vocabulary_size lines are read
        words = [line for line in read if line]
        if binary or len(set(words)) < len(words) or (size is not None and not is_int(size)):
            valid = False  # not UTF-8, a duplicated line, a size that is not a count
        attempt(
            "vocabulary_files",
            lambda: FC.categorical_column_with_vocabulary_file("g", path, **kwargs),
            names=["vocab.txt", "vocabulary_size", "vocabulary_file"],
            valid=valid,
        )
        missing = os.path.join(directory, "missing.txt")
        attempt(
            "vocabulary_files",
            lambda: FC.categorical_column_with_vocabulary_file("g", missing),
            names=["missing.txt"],
            valid=False,
        )
    finally:
        shutil.rmtree(directory)


# EmbeddingConfigSpec and the v1 optimizer parameters ------------------------------------------------------------


SPEC = {
    "feature_columns": lambda v: False,
    "optimization_parameters": lambda v: False,
    "clipping_limit": lambda v: v is None or number_at_least(v, 0, strict=True),
    "pipeline_execution_with_tensor_core": lambda v: isinstance(v, bool),
    "experimental_gradient_multiplier_fn": lambda v: v is None or callable(v),
    "partition_strategy": lambda v: one_of(v, "div", "mod"),
}


@examples(50, "EmbeddingConfigSpec")
def test_embedding_config_spec(data):
    argument, value = pick(data, SPEC)
    column = tf.tpu.experimental.embedding_column(FC.categorical_column_with_identity("f", 10), 4)
    optimizer = tf.tpu.experimental.AdagradParameters(0.1)
    kwargs = {"feature_columns": [column], "optimization_parameters": optimizer, argument: value}
    attempt(
        "EmbeddingConfigSpec",
        lambda: tf.estimator.tpu.experimental.EmbeddingConfigSpec(**kwargs),
        names=[argument, "feature_columns", "feature_to_config_dict"],
        valid=SPEC[argument](value),
        snapshot=lambda: vars_of(column, optimizer),
    )


V1_PARAMETERS = {
    "AdagradParameters": {
        "learning_rate": lambda v: number_at_least(v, 0) if not callable(v) else None,
        "initial_accumulator": lambda v: number_at_least(v, 0, strict=True),
        "weight_decay_factor": lambda v: v is None or number_at_least(v, 0),
        "clip_weight_min": lambda v: v is None or (None if is_number(v) else False),
    },
    "AdamParameters": {
        "learning_rate": lambda v: number_at_least(v, 0) if not callable(v) else None,
        "epsilon": lambda v: number_at_least(v, 0, strict=True),
        "clip_gradient_max": lambda v: v is None or (None if is_number(v) else False),
    },
    "FtrlParameters": {
        "learning_rate": lambda v: number_at_least(v, 0) if not callable(v) else None,
        "l1_regularization_strength": lambda v: number_at_least(v, 0),
    },
    "StochasticGradientDescentParameters": {
        "learning_rate": lambda v: number_at_least(v, 0) if not callable(v) else None
    },
    "MomentumParameters": {
        "momentum": lambda v: None if is_number(v) and v >= 0 else (False if not is_number(v) or v < 0 else None)
    },
}


@examples(50, "v1_parameters")
def test_v1_optimizer_parameters(data):
    kind = data.draw(st.sampled_from(sorted(V1_PARAMETERS)))
    argument, value = pick(data, V1_PARAMETERS[kind])
    cls = getattr(tf.tpu.experimental, kind, None) or getattr(tf.estimator.tpu.experimental, kind)
    kwargs = {"learning_rate": 0.1, argument: value}
    if kind == "MomentumParameters":
        kwargs.setdefault("momentum", 0.9)
        kwargs[argument] = value
    attempt("v1_parameters", lambda: cls(**kwargs), names=[argument], valid=V1_PARAMETERS[kind][argument](value))


# Mid-level configs and optimizers -------------------------------------------------------------------------------


TABLE_CONFIG = {
    "vocabulary_size": positive_int,
    "dim": positive_int,
    "combiner": lambda v: one_of(v, "mean", "sum", "sqrtn"),
    "initializer": lambda v: v is None or callable(v),
    "optimizer": lambda v: None if v is None else False,
    "name": lambda v: None if isinstance(v, str) or v is None else False,
}
FEATURE_CONFIG = {
    "table": lambda v: False,
    "max_sequence_length": lambda v: is_int(v) and v >= 0,
    "name": lambda v: None if isinstance(v, str) or v is None else False,
}


@examples(60, "TableConfig/FeatureConfig")
def test_table_and_feature_config(data):
    if data.draw(st.booleans()):
        argument, value = pick(data, TABLE_CONFIG)
        kwargs = {"vocabulary_size": 8, "dim": 2, argument: value}
        attempt(
            "TableConfig/FeatureConfig",
            lambda: E.TableConfig(**kwargs),
            names=[argument],
            valid=TABLE_CONFIG[argument](value),
        )
    else:
        argument, value = pick(data, FEATURE_CONFIG)
        table = E.TableConfig(8, 2)
        kwargs = {"table": table, argument: value}
        attempt(
            "TableConfig/FeatureConfig",
            lambda: E.FeatureConfig(**kwargs),
            names=[argument],
            valid=FEATURE_CONFIG[argument](value),
            snapshot=lambda: vars_of(table),
        )


V2_OPTIMIZERS = {
    "learning_rate": lambda v: None if callable(v) else number_at_least(v, 0),
    "clipvalue": lambda v: v is None or (None if isinstance(v, tuple) else number_at_least(v, 0)),
    "weight_decay_factor": lambda v: v is None or number_at_least(v, 0),
    "use_gradient_accumulation": lambda v: isinstance(v, bool),  # stricter than TensorFlow: a bool only
}


@examples(50, "v2_optimizers")
def test_v2_optimizers(data):
    cls = data.draw(st.sampled_from([E.SGD, E.Adagrad, E.Adam, E.FTRL]))
    argument, value = pick(data, V2_OPTIMIZERS)
    attempt("v2_optimizers", lambda: cls(**{argument: value}), names=[argument], valid=V2_OPTIMIZERS[argument](value))


# TPUEmbedding, TPUEmbeddingV2 ------------------------------------------------------------------------------------


def mid_level(kind="v1", combiner="sum"):
    table = E.TableConfig(8, 2, name="t", combiner=combiner)
    features = {"f": E.FeatureConfig(table=table)}
    if kind == "v1":
        return E.TPUEmbedding(features, batch_size=2, optimizer=E.Adagrad(0.1)), table
    with tf.distribute.TPUStrategy().scope():
        return E.TPUEmbeddingV2(features, optimizer=E.Adagrad(0.1)), table


FEATURE_F = ["'f'", "features", "feature f", "input f", "path f"]  # TensorFlow's messages say "at path f"


def engine_state(embedding):
    return {"state": copy.deepcopy(embedding.engine.state()), "step": embedding.engine.global_step}


def ids_verdict(v, rows=8):
    """Ids for a table of `rows` rows: False (refused), or None (the batch's shape decides)."""
    if not_a_value(v) or not isinstance(v, (list, tuple, np.ndarray, np.integer, int)) or isinstance(v, bool):
        return False
    array = np.asarray(v)
    if array.size == 0:
        return None
    if array.dtype.kind not in "iu":
        return False  # floats, strings, bools, ragged lists
    if array.max() >= rows:
        return False
    return None  # a negative id is padding


def weights_verdict(v):
    """Weights of the ids [1, 2]: False (refused) for junk, strings, bools and non-finite floats, else None."""
    if v is not None and (
        not_a_value(v) or isinstance(v, (str, bool)) or (isinstance(v, float) and not math.isfinite(v))
    ):
        return False
    return None


def attempt_lookup(name, lookup, where, value, snapshot):
    """`lookup(features, weights=None)` (enqueue, embedding_lookup) with `value` as feature f's ids or weights."""
    if where == "features":
        return attempt(name, lambda: lookup({"f": value}), names=FEATURE_F, valid=ids_verdict(value), snapshot=snapshot)
    return attempt(
        name,
        lambda: lookup({"f": np.array([1, 2])}, weights={"f": value}),
        names=["weight"] + FEATURE_F,
        valid=weights_verdict(value),
        snapshot=snapshot,
    )


@examples(60, "TPUEmbedding")
def test_tpu_embedding_enqueue_dequeue_apply_gradients(data):
    embedding, table = mid_level()
    embedding.enqueue({"f": np.array([1, 2])})
    embedding.dequeue()
    embedding.apply_gradients({"f": np.ones((2, 2), np.float32)})
    state = lambda: [engine_state(embedding), vars_of(table)]  # noqa: E731
    where = data.draw(st.sampled_from(["features", "weights", "gradients", "key", "constructor"]))
    value = data.draw(JUNK)
    if where in ("features", "weights"):
        attempt_lookup("TPUEmbedding", embedding.enqueue, where, value, snapshot=state)
    elif where == "gradients":
        embedding.enqueue({"f": np.array([1, 2])})
        embedding.dequeue()
        attempt(
            "TPUEmbedding",
            lambda: embedding.apply_gradients({"f": value}),
            names=["gradient"] + FEATURE_F,
            valid=None if value is None or np.shape(value) == (2, 2) else False,  # None: a zero gradient
            snapshot=state,
        )
    elif where == "key":
        name = data.draw(st.sampled_from(["g", "", "F"]))
        attempt(
            "TPUEmbedding",
            lambda: embedding.enqueue({name: np.array([1, 2])}),
            names=["features", "feature", repr(name)],
            valid=False,
            snapshot=state,
        )
    else:
        argument = data.draw(st.sampled_from(["feature_config", "optimizer", "batch_size"]))
        kwargs = {"feature_config": {"f": E.FeatureConfig(table=table)}, "optimizer": E.SGD(0.1), argument: value}
        empty = isinstance(value, (list, tuple, dict)) and not value  # no features: TensorFlow builds nothing
        valid = {
            "feature_config": None if empty else False,
            "optimizer": None if value is None else False,
            "batch_size": None,
        }[argument]
        attempt(
            "TPUEmbedding",
            lambda: E.TPUEmbedding(**kwargs),
            names=[argument, "feature", "optimizer"],
            valid=valid,
            snapshot=lambda: vars_of(table),
        )


@examples(40, "TPUEmbeddingV2")
def test_tpu_embedding_v2(data):
    embedding, table = mid_level("v2")

    def state():
        return [
            {"tables": copy.deepcopy(embedding.engine.state()), "step": embedding.engine.global_step},
            vars_of(table),
        ]

    where = data.draw(st.sampled_from(["features", "weights"]))
    value = data.draw(JUNK)
    attempt_lookup("TPUEmbeddingV2", embedding.embedding_lookup, where, value, snapshot=state)


# tf.nn lookups ---------------------------------------------------------------------------------------------------


def _fits_float32(v):
    """True when the positive number `v` is neither 0 nor inf once float32 (max_norm must be)."""
    return float(np.finfo(np.float32).smallest_subnormal) <= float(v) <= float(np.finfo(np.float32).max)


def nn_lookups(params, sp_ids):
    """argument -> (the lookup with that argument, the names its error may give, the verdict on the value)."""
    return {
        "ids": (
            lambda v: tf.nn.embedding_lookup(params, v),
            ["ids", "id"],
            lambda v: False if ids_verdict(v) is False else None,
        ),
        "max_norm": (
            lambda v: tf.nn.embedding_lookup(params, [1, 2], max_norm=v),
            ["max_norm"],
            lambda v: v is None or (number_at_least(v, 0, strict=True) and _fits_float32(v)),
        ),
        "combiner": (
            lambda v: tf.nn.embedding_lookup_sparse(params, sp_ids, None, combiner=v),
            ["combiner"],
            lambda v: v is None or one_of(v, "mean", "sum", "sqrtn"),
        ),
        "default_id": (
            lambda v: tf.nn.safe_embedding_lookup_sparse(params, sp_ids, default_id=v),
            ["default_id"],
            lambda v: v is None or (is_int(v) and 0 <= v < 8),
        ),
        "params": (
            lambda v: tf.nn.embedding_lookup(v, [0]),
            ["params", "ids"],
            lambda v: False if not_a_value(v) or isinstance(v, (str, bool, float, int)) else None,
        ),
    }


@examples(60, "tf.nn")
def test_nn_lookups(data):
    params = np.arange(16, dtype=np.float32).reshape(8, 2)
    sp_ids = tf.SparseTensor(indices=[[0, 0], [1, 0]], values=np.array([1, 3]), dense_shape=[2, 2])
    saved = params.copy()
    lookups = nn_lookups(params, sp_ids)
    argument, value = pick(data, lookups)
    call, names, verdict = lookups[argument]
    attempt("tf.nn", lambda: call(value), names=names, valid=verdict(value))
    assert np.array_equal(params, saved)


# TPUEstimator ----------------------------------------------------------------------------------------------------


def _model_fn(features, labels, mode, params):
    raise AssertionError("not called by the constructor")


ESTIMATOR = {
    "model_fn": lambda v: None if callable(v) else False,
    "params": lambda v: None if isinstance(v, dict) else (v is None),
    "config": lambda v: False,  # TensorFlow's TPUEstimator needs its RunConfig
    "train_batch_size": positive_int,  # use_tpu=True needs it
    "use_tpu": lambda v: None,
    "embedding_config_spec": lambda v: v is None,
    "warm_start_from": lambda v: v is None or (None if isinstance(v, (str, bytes)) else False),  # a path
}


@examples(50, "TPUEstimator")
def test_tpu_estimator_constructor(data):
    argument, value = pick(data, ESTIMATOR)
    model_dir = tempfile.mkdtemp()
    try:
        config = tf.estimator.tpu.RunConfig(model_dir=model_dir)
        kwargs = {"model_fn": _model_fn, "config": config, "train_batch_size": 8, argument: value}
        valid = ESTIMATOR[argument](value)
        attempt(
            "TPUEstimator",
            lambda: tf.estimator.tpu.TPUEstimator(**kwargs),
            names=[argument, "ckpt_to_initialize_from" if argument == "warm_start_from" else argument],
            valid=valid,
        )
    finally:
        shutil.rmtree(model_dir)


# SparseTensor and RaggedTensor -----------------------------------------------------------------------------------


def splits_verdict(v, n=3):
    if not isinstance(v, (list, tuple, np.ndarray)):
        return False
    array = np.asarray(v)
    if array.dtype.kind not in "iu" or array.ndim != 1 or array.size == 0:
        return False if array.dtype.kind not in "iub" or array.ndim != 1 or array.size == 0 else None
    return bool(array[0] == 0 and array[-1] == n and np.all(np.diff(array) >= 0))


def lengths_verdict(v, n=3):
    if not isinstance(v, (list, tuple, np.ndarray)):
        return False
    array = np.asarray(v)
    if array.dtype.kind not in "iu" or array.ndim != 1:
        return False if array.dtype.kind not in "iub" or array.ndim != 1 else None
    return bool(np.all(array >= 0) and array.sum() == n)


# argument -> (the call with that argument, the names its error may give, the verdict on the value)
SPARSE_AND_RAGGED = {
    "row_splits": (lambda v: tf.RaggedTensor.from_row_splits([1, 2, 3], v), ["row_splits"], splits_verdict),
    "row_lengths": (lambda v: tf.RaggedTensor.from_row_lengths([1, 2, 3], v), ["row_lengths"], lengths_verdict),
    "nrows": (
        lambda v: tf.RaggedTensor.from_value_rowids([1, 2], [0, 1], nrows=v),
        ["nrows"],
        lambda v: v is None or (is_int(v) and v >= 2 and (v < 2**20 or None)),
    ),
    "values": (
        lambda v: tf.RaggedTensor.from_row_splits(v, [0, 1, 2]),
        ["values", "row_splits"],
        lambda v: None if not not_a_value(v) else False,
    ),
    "dense_shape": (
        lambda v: tf.SparseTensor([[0, 0], [1, 1]], [1, 2], v),
        ["dense_shape"],
        lambda v: False if not_a_value(v) or isinstance(v, (str, float)) else None,
    ),
    "indices": (
        lambda v: tf.SparseTensor(v, [1, 2], [2, 2]),
        ["indices", "index"],
        lambda v: False if not_a_value(v) or isinstance(v, (str, float)) else None,
    ),
}


@examples(60, "SparseTensor/RaggedTensor")
def test_sparse_and_ragged_tensors(data):
    argument, value = pick(data, SPARSE_AND_RAGGED)
    call, names, verdict = SPARSE_AND_RAGGED[argument]
    attempt("SparseTensor/RaggedTensor", lambda: call(value), names=names, valid=verdict(value))


# tf.train.Checkpoint restore of corrupt files ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("saved")
    embedding, _ = mid_level()
    embedding.enqueue({"f": np.array([1, 2])})
    embedding.dequeue()
    embedding.apply_gradients({"f": np.ones((2, 2), np.float32)})
    model = {"w": np.arange(5, dtype=np.float32)}
    path = tf.train.Checkpoint(embedding=embedding, model=model).save(str(directory / "ckpt"))
    return directory, path, engine_state(embedding), copy.deepcopy(model)


def test_restore_of_corrupt_files_is_clean_and_all_or_nothing(saved_checkpoint, tmp_path):
    directory, path, saved_state, saved_model = saved_checkpoint
    COUNTS["checkpoints"] = 0

    @settings(max_examples=75, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data):
        target = tempfile.mkdtemp(dir=tmp_path)
        copy_dir = os.path.join(target, "c")
        shutil.copytree(directory, copy_dir)
        names = sorted(os.listdir(copy_dir))
        name = data.draw(st.sampled_from(names))
        file = os.path.join(copy_dir, name)
        raw = bytearray(open(file, "rb").read())
        how = data.draw(st.sampled_from(["flip", "truncate", "garbage", "empty"]))
        if how == "flip" and raw:
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] ^= data.draw(st.integers(1, 255))
        elif how == "truncate":
            raw = raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)))]
        elif how == "garbage":
            raw = bytearray(data.draw(st.binary(max_size=64)))
        else:
            raw = bytearray()
        with open(file, "wb") as handle:
            handle.write(raw)
        embedding, _ = mid_level()
        model = {"w": np.zeros(5, np.float32)}
        before = [engine_state(embedding), copy.deepcopy(model)]
        prefix = os.path.join(copy_dir, os.path.basename(path))
        checkpoint = tf.train.Checkpoint(embedding=embedding, model=model)
        restore = (
            (lambda: checkpoint.restore(prefix))
            if name != "checkpoint"
            else (lambda: checkpoint.restore(tf.train.latest_checkpoint(copy_dir)))
        )
        result = attempt(
            "checkpoints",
            restore,
            names=[name, copy_dir],
            valid=None,
            snapshot=lambda: [engine_state(embedding), model],
        )
        if not isinstance(result, Exception) and name != "checkpoint":  # undetected: it must be exactly the save
            assert _equal([engine_state(embedding), model], [saved_state, saved_model]) or _equal(
                [engine_state(embedding), model], before
            )

        def reader():
            return {
                k: tf.train.load_checkpoint(prefix).get_tensor(k)
                for k in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
            }

        attempt("checkpoints", reader, names=[name, copy_dir], valid=None)
        shutil.rmtree(target)

    run()
    assert COUNTS["checkpoints"] >= 100


@pytest.fixture(scope="module")
def trained_model_dir(tmp_path_factory):
    from tests.runner import tf_program as program

    directory = tmp_path_factory.mktemp("model_dir")
    est = program.shim_estimator(directory, keep=1)
    est.train(program.shim_input_fn, steps=1)
    return directory, {name: est.get_variable_value(name) for name in est.get_variable_names()}


def test_a_tpu_estimator_model_dir_with_a_corrupt_file_is_named(trained_model_dir, tmp_path):
    from tests.runner import tf_program as program

    directory, saved = trained_model_dir
    COUNTS["model_dirs"] = 0

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        name=st.sampled_from(sorted(os.listdir(directory))),
        how=st.sampled_from(["truncate", "garbage", "flip"]),
        at=st.integers(0, 10**6),
        garbage=st.binary(min_size=1, max_size=48),
    )
    def run(name, how, at, garbage):
        model_dir = tempfile.mkdtemp(dir=tmp_path)
        shutil.copytree(directory, model_dir, dirs_exist_ok=True)
        path = os.path.join(model_dir, name)
        raw = bytearray(open(path, "rb").read())
        if how == "truncate":
            raw = raw[: at % max(len(raw), 1)]
        elif how == "garbage":
            raw = bytearray(garbage)
        else:
            raw[at % len(raw)] ^= 0x5A
        with open(path, "wb") as file:
            file.write(raw)
        est = program.shim_estimator(model_dir, keep=1)
        result = attempt(
            "model_dirs",
            lambda: {n: est.get_variable_value(n) for n in est.get_variable_names()},
            names=[name, model_dir],
            valid=None,
        )
        if not isinstance(result, Exception):  # an undetected change must not exist: the values are the saved ones
            assert result.keys() == saved.keys()
            assert all(np.array_equal(result[k], saved[k]) for k in saved)
        shutil.rmtree(model_dir)

    run()
    assert COUNTS["model_dirs"] >= 30


def test_the_suite_generates_enough_bad_inputs_per_run():
    tests = [value for name, value in globals().items() if name.startswith("test_") and hasattr(value, "minimum")]
    assert sum(t.minimum for t in tests) + 100 >= MINIMUM_PER_RUN  # + the corrupt-checkpoint test's 100
    assert len(tests) >= 13
    if len(COUNTS) == len(tests) + 2:  # the whole module ran before this test: count what it generated
        assert sum(COUNTS.values()) >= MINIMUM_PER_RUN, COUNTS
