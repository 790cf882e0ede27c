"""Every construction row of the TensorFlow probe table (calls made on TensorFlow 2.15.1), against our API.

Each row of the probe table (a call made on real TensorFlow 2.15.1) is one
test case, with the row's input text as its id. Three kinds of rows:

- OK rows: TensorFlow built the object; we build the same thing with
  `import tpu_embedding_shim as tf` and assert the attributes TensorFlow
  reported (class name, name, combiner, sequence length, keys, table size,
  default initializer, ...).
- RAISED rows: TensorFlow raised; we raise the same exception type, and the
  message names the argument (or the offending column / feature / table)
  and, where there is one, the received value.
- STRICTER rows: TensorFlow accepted a value that fails later or never
  works; we refuse it at construction with ValueError or TypeError naming
  the argument.

Rows about TPUEstimator and CPU lookups (other than the combiner='max' row)
need parts not built yet and are not here.
"""

from __future__ import annotations

import inspect
import math
import re
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.api import tpu_embedding_v1 as v1
from tpu_embedding_shim.api.embedding_config_spec import get_configs_from_feature_columns
from tpu_embedding_shim.spec import EmbeddingSpec, TruncatedNormal

fc = tf.feature_column
tpu = tf.tpu.experimental
est = tf.estimator.tpu.experimental

# TensorFlow's EmbeddingConfigSpec(): its arguments and their defaults, in its order.
ECS_DEFAULTS = {
    "feature_columns": "None",
    "optimization_parameters": "None",
    "clipping_limit": "None",
    "pipeline_execution_with_tensor_core": "False",
    "experimental_gradient_multiplier_fn": "None",
    "feature_to_config_dict": "None",
    "table_to_config_dict": "None",
    "partition_strategy": "'div'",
    "profile_data_directory": "None",
}
# Its _fields: the same names, and second the one it fills in itself.
ECS_FIELDS = ["feature_columns", "tensor_core_feature_columns", *list(ECS_DEFAULTS)[1:]]


def LR_FN(step):
    return 0.1


# Columns the rows are built from ------------------------------------------------------------


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    """The categorical columns the probe used, by the names it used."""
    directory = tmp_path_factory.mktemp("vocab")
    four = directory / "four.txt"
    four.write_text("a\nb\nc\nd\n")
    ns = types.SimpleNamespace()
    ns.ident = fc.categorical_column_with_identity("ident", 10)
    ns.wid = fc.weighted_categorical_column(fc.categorical_column_with_identity("wid", 10), "wid_weights")
    ns.vlist = fc.categorical_column_with_vocabulary_list("vlist", ["a", "b", "c", "d"])
    ns.vlist_oov = fc.categorical_column_with_vocabulary_list("vlist", ["a", "b", "c"], num_oov_buckets=1)
    ns.vfile = fc.categorical_column_with_vocabulary_file("vfile", str(four))
    ns.sident = fc.sequence_categorical_column_with_identity("sident", 10)
    ns.svlist = fc.sequence_categorical_column_with_vocabulary_list("svlist", ["a", "b", "c"])
    ns.svl4 = fc.sequence_categorical_column_with_vocabulary_list("svl4", ["a", "b", "c", "d"])
    ns.svfile = fc.sequence_categorical_column_with_vocabulary_file("svfile", str(four))
    ns.v1id = tf.compat.v1.feature_column.categorical_column_with_identity("v1id", 7)
    ns.aa_a = fc.categorical_column_with_identity("aa_a", 10)
    ns.zz_b = fc.categorical_column_with_identity("zz_b", 10)
    ns.c1_5 = fc.categorical_column_with_identity("c1", 5)
    ns.c2_5 = fc.categorical_column_with_identity("c2", 5)
    ns.c1_6 = fc.categorical_column_with_identity("c1", 6)
    ns.c2_6 = fc.categorical_column_with_identity("c2", 6)
    ns.d1 = fc.categorical_column_with_identity("d1", 5)
    ns.d2 = fc.categorical_column_with_identity("d2", 5)
    ns.p = fc.categorical_column_with_identity("p", 10)
    ns.p_again = fc.categorical_column_with_identity("p", 10)
    ns.q = fc.categorical_column_with_identity("q", 10)
    ns.q20 = fc.categorical_column_with_identity("q", 20)
    ns.s = fc.sequence_categorical_column_with_identity("s", 10)
    ns.h = fc.categorical_column_with_hash_bucket("h", 100)
    ns.h10 = fc.categorical_column_with_hash_bucket("h", 10)
    ns.n = fc.numeric_column("n")
    ns.bucketized = fc.bucketized_column(ns.n, [0.0, 1.0])
    ns.crossed = fc.crossed_column(["x", "y"], 10)
    ns.emb = tpu.embedding_column(ns.ident, 2)
    ns.table_dicts = lambda: ({"f": v1.FeatureConfig("t")}, {"t": v1.TableConfig(10, 4)})
    return ns


# How TensorFlow's probe described a column, computed on ours ----------------------------------


def describe_column(col) -> dict[str, Any]:
    init = col.initializer
    return {
        "class": type(col).__name__,
        "name": col.name,
        "combiner": col.combiner,
        "max_sequence_length": col.get_max_sequence_length(),
        "is_sequence_column": col.is_sequence_column(),
        "feature_key": col.get_feature_key_name(),
        "weight_key": col.get_weight_key_name(),
        "embedding_var_name": col.get_embedding_var_name(),
        "table_size": tuple(col.get_embedding_table_size()),
        "use_safe_embedding_lookup": col.use_safe_embedding_lookup,
        "categorical_column_class": type(col.categorical_column).__name__,
        "learning_rate_fn": col.get_learning_rate_fn(),
        "initializer_class": type(init).__name__,
        "stddev": getattr(init, "stddev", None),
        "mean": getattr(init, "mean", None),
        "seed": getattr(init, "seed", "no seed"),
        "dimension": (
            col.shared_embedding_column_creator.dimension
            if hasattr(col, "shared_embedding_column_creator")
            else col.dimension
        ),
        "sequence_length_key": col.get_sequence_length_feature_key_name(),
    }


def column(
    cls="_TPUEmbeddingColumnV2",
    *,
    name,
    var,
    size,
    cat="IdentityCategoricalColumn",
    combiner="mean",
    msl=0,
    key=None,
    weight_key=None,
    safe=True,
) -> dict[str, Any]:
    """TensorFlow's reported attributes of one column (defaults: TF's defaults); its dimension is size[1]."""
    key = key if key is not None else var
    dim = size[1]
    return {
        "class": cls,
        "name": name,
        "combiner": combiner,
        "max_sequence_length": msl,
        "is_sequence_column": msl > 0,
        "feature_key": key,
        "weight_key": weight_key,
        "embedding_var_name": var,
        "table_size": size,
        "use_safe_embedding_lookup": safe,
        "categorical_column_class": cat,
        "learning_rate_fn": None,
        "initializer_class": "TruncatedNormal",
        "stddev": 1.0 / math.sqrt(dim),
        "mean": 0.0,
        "seed": None,
        "dimension": dim,
        "sequence_length_key": key + "_seq_length_",
    }


def assert_same(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    for key, value in expected.items():
        if isinstance(value, float):
            assert actual[key] == pytest.approx(value), key
        else:
            assert actual[key] == value, key


# OK rows: TensorFlow built it; same attributes ---------------------------------------------------


class Ok(NamedTuple):
    section: str
    input: str
    build: Callable[[Any], Any]
    expected: Any


def shared(var, size, columns, cls="_TPUSharedEmbeddingColumnV2", **common):
    """TensorFlow's reported attributes of the columns one shared_embedding_columns call returns, in input order.

    `columns`: each categorical column's name -> what differs from `common` for it. Each is named
    `<name>_shared_embedding`, its feature key is its name unless given, and all share the table `var` of `size`.
    """
    return [
        column(cls, name=f"{name}_shared_embedding", var=var, size=size, **{"key": name, **common, **own})
        for name, own in columns.items()
    ]


def sequence_row(probe_name, key, buckets):
    """The probe's `embedding_column(<sequence column>, 3, max_sequence_length=5)` row, over `c.<key>`."""
    return Ok(
        "a_valid_embedding_column",
        f"embedding_column({probe_name}, 3, max_sequence_length=5)",
        lambda c: tpu.embedding_column(getattr(c, key), 3, max_sequence_length=5),
        column(name=f"{key}_embedding", var=key, size=(buckets, 3), msl=5, cat="SequenceCategoricalColumn"),
    )


def combiner_row(combiner):
    """The probe's `embedding_column(identity, 2, combiner=...)` row."""
    return Ok(
        "a_valid_embedding_column",
        f"embedding_column(identity, 2, combiner={combiner!r})",
        lambda c: tpu.embedding_column(c.ident, 2, combiner=combiner),
        column(name="ident_embedding", var="ident", size=(10, 2), combiner=combiner),
    )


OK_COLUMN_ROWS = [
    Ok(
        "a_valid_embedding_column",
        "embedding_column(identity, dimension=4)",
        lambda c: tpu.embedding_column(c.ident, dimension=4),
        column(name="ident_embedding", var="ident", size=(10, 4)),
    ),
    Ok(
        "a_valid_embedding_column",
        "embedding_column(weighted, dimension=4)",
        lambda c: tpu.embedding_column(c.wid, dimension=4),
        column(
            name="wid_weighted_by_wid_weights_embedding",
            var="wid_weighted_by_wid_weights",
            key="wid",
            weight_key="wid_weights",
            size=(10, 4),
            cat="WeightedCategoricalColumn",
        ),
    ),
    Ok(
        "a_valid_embedding_column",
        "embedding_column(vocab_list, dimension=4)",
        lambda c: tpu.embedding_column(c.vlist, dimension=4),
        column(name="vlist_embedding", var="vlist", size=(4, 4), cat="VocabularyListCategoricalColumn"),
    ),
    Ok(
        "a_valid_embedding_column",
        "embedding_column(vocab_file, dimension=4)",
        lambda c: tpu.embedding_column(c.vfile, dimension=4),
        column(name="vfile_embedding", var="vfile", size=(4, 4), cat="VocabularyFileCategoricalColumn"),
    ),
    *[
        sequence_row(probe_name, key, buckets)
        for probe_name, key, buckets in [
            ("seq_identity", "sident", 10),
            ("seq_vocab_list", "svlist", 3),
            ("seq_vocab_file", "svfile", 4),
        ]
    ],
    *[combiner_row(combiner) for combiner in ("sum", "mean", "sqrtn")],
    Ok(
        "a_valid_embedding_column",
        "embedding_column(identity, 2, initializer=tf.zeros_initializer(), learning_rate_fn=f, "
        "use_safe_embedding_lookup=False)",
        lambda c: tpu.embedding_column(
            c.ident, 2, initializer=tf.zeros_initializer(), learning_rate_fn=LR_FN, use_safe_embedding_lookup=False
        ),
        {
            **column(name="ident_embedding", var="ident", size=(10, 2), safe=False),
            "learning_rate_fn": LR_FN,
            "initializer_class": "Zeros",
            "stddev": None,
            "mean": None,
            "seed": "no seed",
        },
    ),
    Ok(
        "a_valid_embedding_column",
        "embedding_column(identity, 2, embedding_lookup_device='cpu')",
        lambda c: tpu.embedding_column(c.ident, 2, embedding_lookup_device="cpu"),
        column("_TPUDeviceSpecificEmbeddingColumnV2", name="ident_embedding", var="ident", size=(10, 2)),
    ),
    Ok(
        "a_valid_embedding_column",
        "embedding_column(identity, 2, embedding_lookup_device='tpu_embedding_core')",
        lambda c: tpu.embedding_column(c.ident, 2, embedding_lookup_device="tpu_embedding_core"),
        column("_TPUDeviceSpecificEmbeddingColumnV2", name="ident_embedding", var="ident", size=(10, 2)),
    ),
    Ok(
        "a_valid_embedding_column",
        "embedding_column(identity, 2, embedding_lookup_device='tpu_tensor_core', tensor_core_shape=[None, 3])",
        lambda c: tpu.embedding_column(
            c.ident, 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3]
        ),
        column("_TPUDeviceSpecificEmbeddingColumnV2", name="ident_embedding", var="ident", size=(10, 2)),
    ),
    Ok(
        "a_valid_embedding_column",
        "embedding_column(v1-namespace identity col tf.compat.v1.feature_column..., 2)",
        lambda c: tf.compat.v1.tpu.experimental.embedding_column(c.v1id, 2),
        column(name="v1id_embedding", var="v1id", size=(7, 2)),
    ),
]


@pytest.mark.parametrize("row", OK_COLUMN_ROWS, ids=[r.input for r in OK_COLUMN_ROWS])
def test_valid_embedding_column(row, c):
    col = row.build(c)
    assert_same(describe_column(col), row.expected)
    # TensorFlow's MRO, minus EmbeddingColumn (ours is the non-TPU column that EmbeddingConfigSpec refuses).
    mro = [k.__name__ for k in type(col).__mro__]
    assert [n for n in mro if n in ("DenseColumn", "SequenceDenseColumn", "FeatureColumn")] == [
        "DenseColumn",
        "SequenceDenseColumn",
        "FeatureColumn",
    ]


def test_tensor_core_column_keeps_its_shape(c):
    col = tpu.embedding_column(c.ident, 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3])
    assert col.embedding_lookup_device == "tpu_tensor_core"
    assert list(col.tensor_core_shape) == [None, 3]


SEQUENCE = "SequenceCategoricalColumn"
OK_SHARED_ROWS = [
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([identity a, identity b], 4)",
        lambda c: tpu.shared_embedding_columns([c.zz_b, c.aa_a], 4),
        shared("aa_a_zz_b_shared_embedding", (10, 4), {"zz_b": {}, "aa_a": {}}),
    ),
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([weighted(10), identity(10)], 2, combiner='sum')",
        lambda c: tpu.shared_embedding_columns([c.wid, c.ident], 2, combiner="sum"),
        shared(
            "ident_wid_weighted_by_wid_weights_shared_embedding",
            (10, 2),
            {
                "wid_weighted_by_wid_weights": {
                    "key": "wid",
                    "weight_key": "wid_weights",
                    "cat": "WeightedCategoricalColumn",
                },
                "ident": {},
            },
            combiner="sum",
        ),
    ),
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([vocab_list(3+1oov), vocab_file(4)], 2)  (both 4 buckets)",
        lambda c: tpu.shared_embedding_columns([c.vlist_oov, c.vfile], 2),
        shared(
            "vfile_vlist_shared_embedding",
            (4, 2),
            {"vlist": {"cat": "VocabularyListCategoricalColumn"}, "vfile": {"cat": "VocabularyFileCategoricalColumn"}},
        ),
    ),
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([seq_identity(10), identity(10)], 2, max_sequence_lengths=[4, 0])",
        lambda c: tpu.shared_embedding_columns([c.sident, c.ident], 2, max_sequence_lengths=[4, 0]),
        shared("ident_sident_shared_embedding", (10, 2), {"sident": {"msl": 4, "cat": SEQUENCE}, "ident": {}}),
    ),
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([seq_vocab_file(4), seq_vocab_list(3)+?], ...) -> seq_vocab_list has 3 buckets",
        lambda c: tpu.shared_embedding_columns([c.svfile, c.svl4], 2, max_sequence_lengths=[3, 2]),
        shared("svfile_svl4_shared_embedding", (4, 2), {"svfile": {"msl": 3}, "svl4": {"msl": 2}}, cat=SEQUENCE),
    ),
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([a,b], 2, shared_embedding_collection_name='my_shared')",
        lambda c: tpu.shared_embedding_columns([c.c1_5, c.c2_5], 2, shared_embedding_collection_name="my_shared"),
        shared("my_shared", (5, 2), {"c1": {}, "c2": {}}),
    ),
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([single identity], 3)",
        lambda c: tpu.shared_embedding_columns([c.ident], 3),
        shared("ident_shared_embedding", (10, 3), {"ident": {}}),
    ),
    Ok(
        "a_valid_shared_embedding_columns",
        "shared_embedding_columns([a,b], 2, embedding_lookup_device='cpu')",
        lambda c: tpu.shared_embedding_columns([c.d1, c.d2], 2, embedding_lookup_device="cpu"),
        shared("d1_d2_shared_embedding", (5, 2), {"d1": {}, "d2": {}}, cls="_TPUSharedDeviceSpecificEmbeddingColumnV2"),
    ),
]


@pytest.mark.parametrize("row", OK_SHARED_ROWS, ids=[r.input for r in OK_SHARED_ROWS])
def test_valid_shared_embedding_columns(row, c):
    columns = row.build(c)
    assert isinstance(columns, list)
    assert len(columns) == len(row.expected)
    for col, expected in zip(columns, row.expected):  # INPUT order
        assert_same(describe_column(col), expected)
    creators = {id(col.shared_embedding_column_creator) for col in columns}
    assert len(creators) == 1, "the columns of one call share one creator (one table)"


def test_configs_from_feature_columns(c):
    """a_configs_from_feature_columns: get_configs_from_feature_columns([emb(identity,4), emb(weighted,3),
    shared([c1,c2],2), emb(seq,2,L=5)])."""
    columns = (
        [tpu.embedding_column(c.ident, 4, combiner="sum"), tpu.embedding_column(c.wid, 3, combiner="sqrtn")]
        + tpu.shared_embedding_columns([c.c1_6, c.c2_6], 2)
        + [tpu.embedding_column(c.sident, 2, max_sequence_length=5)]
    )
    tables, features = get_configs_from_feature_columns(columns)
    assert {name: (t.vocabulary_size, t.dimension, t.combiner) for name, t in tables.items()} == {
        "tbl_ident": (10, 4, "sum"),
        "tbl_wid_weighted_by_wid_weights": (10, 3, "sqrtn"),
        "tbl_sident": (10, 2, "mean"),
        "tbl_c1_c2_shared_embedding": (6, 2, "mean"),
    }
    assert {name: (f.table_id, f.max_sequence_length, f.weight_key) for name, f in features.items()} == {
        "ident": ("tbl_ident", 0, None),
        "wid": ("tbl_wid_weighted_by_wid_weights", 0, "wid_weights"),
        "sident": ("tbl_sident", 5, None),
        "c1": ("tbl_c1_c2_shared_embedding", 0, None),
        "c2": ("tbl_c1_c2_shared_embedding", 0, None),
    }
    assert all(isinstance(t, v1.TableConfig) for t in tables.values())
    assert all(isinstance(f, v1.FeatureConfig) for f in features.values())
    assert tables["tbl_ident"].initializer == TruncatedNormal(0.0, 0.5, None)


# EmbeddingConfigSpec OK rows ----------------------------------------------------------------------


def describe_spec(spec) -> dict[str, Any]:
    return {
        "class": type(spec).__name__,
        "fields": list(spec._fields),
        "n_feature_columns": None if spec.feature_columns is None else len(spec.feature_columns),
        "n_tensor_core_feature_columns": (
            None if spec.tensor_core_feature_columns is None else len(spec.tensor_core_feature_columns)
        ),
        "optimization_parameters": type(spec.optimization_parameters).__name__,
        "partition_strategy": spec.partition_strategy,
        "clipping_limit": spec.clipping_limit,
        "pipeline_execution_with_tensor_core": spec.pipeline_execution_with_tensor_core,
    }


def ecs_result(n, n_tc, optimizer, partition="div", clipping=None) -> dict[str, Any]:
    return {
        "class": "EmbeddingConfigSpec",
        "fields": ECS_FIELDS,
        "n_feature_columns": n,
        "n_tensor_core_feature_columns": n_tc,
        "optimization_parameters": optimizer,
        "partition_strategy": partition,
        "clipping_limit": clipping,
        "pipeline_execution_with_tensor_core": False,
    }


OK_ECS_ROWS = [
    Ok(
        "a_valid_EmbeddingConfigSpec",
        "EmbeddingConfigSpec(feature_columns=[emb], optimization_parameters=AdagradParameters(0.1))",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[c.emb], optimization_parameters=est.AdagradParameters(0.1)),
        ecs_result(1, 0, "AdagradParameters"),
    ),
    Ok(
        "a_valid_EmbeddingConfigSpec",
        "EmbeddingConfigSpec(..., partition_strategy='mod', clipping_limit=1.0)",
        lambda c: est.EmbeddingConfigSpec(
            feature_columns=[c.emb],
            optimization_parameters=est.AdamParameters(0.1),
            partition_strategy="mod",
            clipping_limit=1.0,
        ),
        ecs_result(1, 0, "AdamParameters", "mod", 1.0),
    ),
    Ok(
        "a_valid_EmbeddingConfigSpec",
        "EmbeddingConfigSpec(feature_columns=[tpu_tensor_core emb, plain emb], SGD)",
        lambda c: est.EmbeddingConfigSpec(
            feature_columns=[
                tpu.embedding_column(c.p, 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3]),
                c.emb,
            ],
            optimization_parameters=est.StochasticGradientDescentParameters(0.1),
        ),
        ecs_result(1, 1, "StochasticGradientDescentParameters"),
    ),
    Ok(
        "a_valid_EmbeddingConfigSpec",
        "EmbeddingConfigSpec(feature_to_config_dict={'f': FeatureConfig('t')}, "
        "table_to_config_dict={'t': TableConfig(10, 4)}) (no optimizer)",
        lambda c: est.EmbeddingConfigSpec(
            feature_to_config_dict={"f": v1.FeatureConfig("t")}, table_to_config_dict={"t": v1.TableConfig(10, 4)}
        ),
        ecs_result(None, None, "NoneType"),
    ),
]


@pytest.mark.parametrize("row", OK_ECS_ROWS, ids=[r.input for r in OK_ECS_ROWS])
def test_valid_embedding_config_spec(row, c):
    spec = row.build(c)
    assert describe_spec(spec) == row.expected
    lowered = spec.to_spec()
    assert isinstance(lowered, EmbeddingSpec)
    assert lowered.partition_strategy == spec.partition_strategy
    assert lowered.clipping_limit == spec.clipping_limit
    assert EmbeddingSpec.from_dict(lowered.to_dict()) == lowered


def test_tensor_core_columns_are_split_off(c):
    """The tensor-core row: the tensor-core column lands in tensor_core_feature_columns, the other stays."""
    tc = tpu.embedding_column(c.p, 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3])
    spec = est.EmbeddingConfigSpec(
        feature_columns=[tc, c.emb], optimization_parameters=est.StochasticGradientDescentParameters(0.1)
    )
    assert list(spec.feature_columns) == [c.emb]
    assert list(spec.tensor_core_feature_columns) == [tc]
    assert [t.name for t in spec.to_spec().tables] == ["tbl_ident"]


def test_embedding_config_spec_defaults():
    """a_valid_EmbeddingConfigSpec: EmbeddingConfigSpec() field defaults (positional order)."""
    for cls in (est.EmbeddingConfigSpec, tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec):
        params = [p for p in inspect.signature(cls).parameters.values() if p.kind is not p.VAR_KEYWORD]
        assert [(p.name, repr(p.default)) for p in params] == list(ECS_DEFAULTS.items())
        assert list(cls._fields) == ECS_FIELDS


# Optimizer signature rows ------------------------------------------------------------------------


def signature_of(cls) -> list[tuple[str, str]]:
    return [
        (name, "<required>" if p.default is p.empty else repr(p.default))
        for name, p in inspect.signature(cls).parameters.items()
    ]


def attrs_of(obj) -> dict[str, str]:
    return {k: repr(v) for k, v in sorted(vars(obj).items())}


COMMON_SIG = [
    ("use_gradient_accumulation", "True"),
    ("clip_weight_min", "None"),
    ("clip_weight_max", "None"),
    ("weight_decay_factor", "None"),
    ("multiply_weight_decay_factor_by_learning_rate", "None"),
]
CLIP_SIG = [("clip_gradient_min", "None"), ("clip_gradient_max", "None")]
COMMON_ATTRS = {
    "clip_gradient_max": "None",
    "clip_gradient_min": "None",
    "clip_weight_max": "None",
    "clip_weight_min": "None",
    "learning_rate": "0.1",
    "multiply_weight_decay_factor_by_learning_rate": "None",
    "use_gradient_accumulation": "True",
    "weight_decay_factor": "None",
}
V1X = tf.compat.v1.tpu.experimental

SIGNATURE_ROWS = [
    (
        "inspect.signature(tf.compat.v1.tpu.experimental.AdagradParameters)",
        lambda: V1X.AdagradParameters,
        [("learning_rate", "<required>"), ("initial_accumulator", "0.1")] + COMMON_SIG + CLIP_SIG,
    ),
    (
        "inspect.signature(tf.compat.v1.tpu.experimental.AdamParameters)",
        lambda: V1X.AdamParameters,
        [
            ("learning_rate", "<required>"),
            ("beta1", "0.9"),
            ("beta2", "0.999"),
            ("epsilon", "1e-08"),
            ("lazy_adam", "True"),
            ("sum_inside_sqrt", "True"),
        ]
        + COMMON_SIG
        + CLIP_SIG,
    ),
    (
        "inspect.signature(tf.compat.v1.tpu.experimental.StochasticGradientDescentParameters)",
        lambda: V1X.StochasticGradientDescentParameters,
        [("learning_rate", "<required>")] + COMMON_SIG + CLIP_SIG,
    ),
    (
        "inspect.signature(tf.compat.v1.tpu.experimental.FtrlParameters)",
        lambda: V1X.FtrlParameters,
        [
            ("learning_rate", "<required>"),
            ("learning_rate_power", "-0.5"),
            ("initial_accumulator_value", "0.1"),
            ("l1_regularization_strength", "0.0"),
            ("l2_regularization_strength", "0.0"),
        ]
        + COMMON_SIG
        + [("multiply_linear_by_learning_rate", "False"), ("beta", "0"), ("allow_zero_accumulator", "False")]
        + CLIP_SIG,
    ),
    (
        "inspect.signature(tensorflow.python.tpu.tpu_embedding.MomentumParameters) "
        "(not exported in tf.compat.v1.tpu.experimental)",
        lambda: v1.MomentumParameters,
        [("learning_rate", "<required>"), ("momentum", "<required>"), ("use_nesterov", "False")]
        + COMMON_SIG
        + CLIP_SIG,
    ),
    (
        "inspect.signature(tensorflow.python.tpu.tpu_embedding.RMSPropParameters) "
        "(not exported in tf.compat.v1.tpu.experimental)",
        lambda: v1.RMSPropParameters,
        [("learning_rate", "<required>"), ("rho", "<required>"), ("momentum", "<required>"), ("epsilon", "<required>")]
        + COMMON_SIG
        + CLIP_SIG,
    ),
    (
        "inspect.signature(tensorflow.python.tpu.tpu_embedding.ProximalAdagradParameters) "
        "(not exported in tf.compat.v1.tpu.experimental)",
        lambda: v1.ProximalAdagradParameters,
        [
            ("learning_rate", "<required>"),
            ("initial_accumulator", "0.1"),
            ("l1_regularization_strength", "0.0"),
            ("l2_regularization_strength", "0.0"),
        ]
        + COMMON_SIG
        + CLIP_SIG,
    ),
]


@pytest.mark.parametrize("text,get,expected", SIGNATURE_ROWS, ids=[r[0] for r in SIGNATURE_ROWS])
def test_optimizer_signature(text, get, expected):
    assert signature_of(get()) == expected


ATTRIBUTE_ROWS = [
    (
        "AdagradParameters(0.1) attributes",
        lambda: V1X.AdagradParameters(0.1),
        {**COMMON_ATTRS, "initial_accumulator": "0.1"},
    ),
    (
        "AdamParameters(0.1) attributes",
        lambda: V1X.AdamParameters(0.1),
        {
            **COMMON_ATTRS,
            "beta1": "0.9",
            "beta2": "0.999",
            "epsilon": "1e-08",
            "lazy_adam": "True",
            "sum_inside_sqrt": "True",
        },
    ),
    (
        "StochasticGradientDescentParameters(0.1) attributes",
        lambda: V1X.StochasticGradientDescentParameters(0.1),
        dict(COMMON_ATTRS),
    ),
    (
        "FtrlParameters(0.1) attributes",
        lambda: V1X.FtrlParameters(0.1),
        {
            **COMMON_ATTRS,
            "allow_zero_accumulator": "False",
            "beta": "0",
            "initial_accumulator_value": "0.1",
            "initial_linear_value": "0.0",
            "l1_regularization_strength": "0.0",
            "l2_regularization_strength": "0.0",
            "learning_rate_power": "-0.5",
            "multiply_linear_by_learning_rate": "False",
        },
    ),
    # b_bad_optimizer_params rows TensorFlow (and we) accept:
    (
        "AdagradParameters(0.0) zero lr",
        lambda: V1X.AdagradParameters(0.0),
        {**COMMON_ATTRS, "initial_accumulator": "0.1", "learning_rate": "0.0"},
    ),
    (
        "AdamParameters(0.1, beta1=0.0) (boundary)",
        lambda: V1X.AdamParameters(0.1, beta1=0.0),
        {
            **COMMON_ATTRS,
            "beta1": "0.0",
            "beta2": "0.999",
            "epsilon": "1e-08",
            "lazy_adam": "True",
            "sum_inside_sqrt": "True",
        },
    ),
    (
        "AdamParameters(0.1, lazy_adam=False)",
        lambda: V1X.AdamParameters(0.1, lazy_adam=False),
        {
            **COMMON_ATTRS,
            "beta1": "0.9",
            "beta2": "0.999",
            "epsilon": "1e-08",
            "lazy_adam": "False",
            "sum_inside_sqrt": "True",
        },
    ),
    (
        "FtrlParameters(0.1, initial_accumulator_value=0) (boundary)",
        lambda: V1X.FtrlParameters(0.1, initial_accumulator_value=0.0),
        {
            **COMMON_ATTRS,
            "allow_zero_accumulator": "False",
            "beta": "0",
            "initial_accumulator_value": "0.0",
            "initial_linear_value": "0.0",
            "l1_regularization_strength": "0.0",
            "l2_regularization_strength": "0.0",
            "learning_rate_power": "-0.5",
            "multiply_linear_by_learning_rate": "False",
        },
    ),
]


@pytest.mark.parametrize("text,build,expected", ATTRIBUTE_ROWS, ids=[r[0] for r in ATTRIBUTE_ROWS])
def test_optimizer_attributes(text, build, expected):
    params = build()
    assert type(params).__name__ == text.split("(")[0]
    assert attrs_of(params) == expected


@pytest.mark.parametrize("shared", [False, True], ids=["embedding_column", "shared_embedding_columns"])
def test_combiner_none_is_accepted_and_sums(shared):
    """b_bad_embedding_column's `combiner=None`: TensorFlow 2.15 accepts it and its TPU embedding sums
    (`_create_combiners`: `combiner or 'sum'`); the column keeps None, as TensorFlow's does."""
    ident = fc.categorical_column_with_identity("ident", 10)
    if shared:
        (column,) = tpu.shared_embedding_columns([ident], 2, combiner=None)
    else:
        column = tpu.embedding_column(ident, 2, combiner=None)
    assert column.combiner is None and column.get_combiner() is None
    spec = est.EmbeddingConfigSpec(
        feature_columns=[column], optimization_parameters=est.AdagradParameters(0.1)
    ).to_spec()
    assert [t.combiner for t in spec.tables] == ["sum"]


def test_zero_learning_rate_is_allowed_and_lowered():
    """AdagradParameters(0.0): TF accepts it; so do we (check_real minimum 0 inclusive), and it reaches the spec."""
    spec = est.EmbeddingConfigSpec(
        feature_columns=[tpu.embedding_column(fc.categorical_column_with_identity("ident", 10), 2)],
        optimization_parameters=est.AdagradParameters(0.0),
    ).to_spec()
    assert spec.optimizer.learning_rate == 0.0
    assert spec.optimizer.learning_rate_at(step=3) == 0.0


def test_exported_names():
    """'names exported under tf.compat.v1.tpu.experimental' / '... estimator.tpu.experimental' (embedding part)."""
    embedding_names = {
        "AdagradParameters",
        "AdamParameters",
        "FtrlParameters",
        "StochasticGradientDescentParameters",
        "embedding",
        "embedding_column",
        "shared_embedding_columns",
    }
    assert embedding_names <= set(dir(tf.compat.v1.tpu.experimental))
    for hidden in ("MomentumParameters", "RMSPropParameters", "ProximalAdagradParameters"):
        assert not hasattr(tf.compat.v1.tpu.experimental, hidden)  # as in TF: not exported there
    assert "EmbeddingConfigSpec" in dir(tf.compat.v1.estimator.tpu.experimental)


# RAISED and STRICTER rows ---------------------------------------------------------------------------


class Bad(NamedTuple):
    section: str
    input: str
    build: Callable[[Any], Any]
    error: type
    fragments: Sequence[str]  # each must appear in the message; the first is checked with match=
    tf_raised: bool  # False: TF accepted (a STRICTER row)


def R(section, text, build, error, *fragments):
    return Bad(section, text, build, error, fragments, True)


def S(section, text, build, error, *fragments):
    return Bad(section, text, build, error, fragments, False)


def R_kwarg(cls, arg, value, *fragments):
    """The row of `cls(0.1, arg=value)`: ValueError naming `arg`, any `fragments` and the value received."""
    return R(
        OP,
        f"{cls.__name__}(0.1, {arg}={value!r})",
        lambda c: cls(0.1, **{arg: value}),
        ValueError,
        f"`{arg}`",
        *fragments,
        f"Received: {value!r}.",
    )


class AdagradOptimizer:
    """Stands in for tf.compat.v1.train.AdagradOptimizer (a model optimizer, not a TPU embedding one)."""

    def __init__(self, learning_rate):
        self.learning_rate = learning_rate

    def __repr__(self):
        return f"AdagradOptimizer(learning_rate={self.learning_rate})"


E = "b_bad_embedding_column"
ec = tpu.embedding_column
SH = "b_bad_shared_embedding_columns"
sec = tpu.shared_embedding_columns
GC = "b_bad_configs_from_feature_columns"
B = "b_bad_EmbeddingConfigSpec"
TC = "b_TableConfig_FeatureConfig"
OP = "b_bad_optimizer_params"
VE = "a_valid_embedding_column"


def adagrad():
    return est.AdagradParameters(0.1)


BAD_ROWS = [
    # b_bad_embedding_column
    R(E, "embedding_column: dimension=0", lambda c: ec(c.ident, 0), ValueError, "`dimension`", "Received: 0."),
    R(E, "embedding_column: dimension=-3", lambda c: ec(c.ident, -3), ValueError, "`dimension`", "Received: -3."),
    R(E, "embedding_column: dimension=None", lambda c: ec(c.ident, None), ValueError, "`dimension`", "Received: None."),
    S(
        E,
        "embedding_column: dimension=2.5 (float)",
        lambda c: ec(c.ident, 2.5),
        ValueError,
        "`dimension`",
        "Received: 2.5.",
    ),
    R(
        E,
        "embedding_column: dimension=0.5 (float <1)",
        lambda c: ec(c.ident, 0.5),
        ValueError,
        "`dimension`",
        "Received: 0.5.",
    ),
    R(
        E,
        "embedding_column: dimension='4' (str)",
        lambda c: ec(c.ident, "4"),
        TypeError,
        "`dimension`",
        "Received: '4'.",
    ),
    S(
        E,
        "embedding_column: dimension=True (bool)",
        lambda c: ec(c.ident, True),
        ValueError,
        "`dimension`",
        "Received: True.",
    ),
    S(
        E,
        "embedding_column: combiner='max'",
        lambda c: ec(c.ident, 2, combiner="max"),
        ValueError,
        "`combiner`",
        "'max'",
    ),
    S(
        E,
        "embedding_column: combiner='MEAN' (case)",
        lambda c: ec(c.ident, 2, combiner="MEAN"),
        ValueError,
        "`combiner`",
        "'MEAN'",
        "'mean'",
    ),
    R(
        E,
        "embedding_column: initializer=3 (non-callable)",
        lambda c: ec(c.ident, 2, initializer=3),
        ValueError,
        "`initializer`",
        "Received: 3.",
    ),
    R(
        E,
        "embedding_column: initializer='zeros' (str)",
        lambda c: ec(c.ident, 2, initializer="zeros"),
        ValueError,
        "`initializer`",
        "'zeros'",
    ),
    R(
        E,
        "embedding_column: max_sequence_length=-1, non-sequence col",
        lambda c: ec(c.ident, 2, max_sequence_length=-1),
        ValueError,
        "`max_sequence_length`",
        "'ident'",
        "Received: -1.",
    ),
    R(
        E,
        "embedding_column: max_sequence_length=5, non-sequence col",
        lambda c: ec(c.ident, 2, max_sequence_length=5),
        ValueError,
        "`max_sequence_length`",
        "'ident'",
        "Received: 5.",
    ),
    R(
        E,
        "embedding_column: sequence col, max_sequence_length=0 (default)",
        lambda c: ec(c.sident, 2),
        ValueError,
        "`max_sequence_length`",
        "'sident'",
        "Received: 0.",
    ),
    R(
        E,
        "embedding_column: sequence col, max_sequence_length=-3",
        lambda c: ec(c.sident, 2, max_sequence_length=-3),
        ValueError,
        "`max_sequence_length`",
        "'sident'",
        "Received: -3.",
    ),
    S(
        E,
        "embedding_column: sequence col, max_sequence_length=2.5",
        lambda c: ec(c.sident, 2, max_sequence_length=2.5),
        ValueError,
        "`max_sequence_length`",
        "Received: 2.5.",
    ),
    R(
        E,
        "embedding_column: embedding_lookup_device='gpu'",
        lambda c: ec(c.ident, 2, embedding_lookup_device="gpu"),
        ValueError,
        "`embedding_lookup_device`",
        "'gpu'",
        "'tpu_tensor_core'",
    ),
    R(
        E,
        "embedding_column: embedding_lookup_device='tpu_tensor_core', no tensor_core_shape",
        lambda c: ec(c.ident, 2, embedding_lookup_device="tpu_tensor_core"),
        ValueError,
        "tensor_core_shape",
        "embedding_lookup_device='tpu_tensor_core'",
    ),
    R(
        E,
        "embedding_column: tensor_core_shape=[1,2,3]",
        lambda c: ec(c.ident, 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[1, 2, 3]),
        ValueError,
        "`tensor_core_shape`",
        "[1, 2, 3]",
    ),
    R(
        E,
        "embedding_column: tensor_core_shape=[4] (rank1)",
        lambda c: ec(c.ident, 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[4]),
        ValueError,
        "`tensor_core_shape`",
        "[4]",
    ),
    R(
        E,
        "embedding_column: tpu_tensor_core on sequence column",
        lambda c: ec(
            c.sident, 2, max_sequence_length=3, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3]
        ),
        ValueError,
        "sequence",
        "'sident'",
        "embedding_lookup_device",
    ),
    S(
        E,
        "embedding_column: tensor_core_shape=[None,3] without device (ignored?)",
        lambda c: ec(c.ident, 2, tensor_core_shape=[None, 3]),
        ValueError,
        "`tensor_core_shape`",
        "embedding_lookup_device=None",
    ),
    S(E, "embedding_column: hash bucket column", lambda c: ec(c.h, 2), TypeError, "HashedCategoricalColumn", "'h'"),
    S(
        E,
        "embedding_column: bucketized column",
        lambda c: ec(c.bucketized, 2),
        TypeError,
        "BucketizedColumn",
        "'n_bucketized'",
    ),
    S(E, "embedding_column: crossed column", lambda c: ec(c.crossed, 2), TypeError, "CrossedColumn", "'x_X_y'"),
    R(E, "embedding_column: numeric column", lambda c: ec(c.n, 2), TypeError, "`categorical_column`", "NumericColumn"),
    R(
        E,
        "embedding_column: categorical_column=None",
        lambda c: ec(None, 2),
        TypeError,
        "`categorical_column`",
        "Received: None.",
    ),
    R(
        E,
        "embedding_column: categorical_column='ident' (str)",
        lambda c: ec("ident", 2),
        TypeError,
        "`categorical_column`",
        "Received: 'ident'.",
    ),
    R(
        E,
        "embedding_column: already-embedded column",
        lambda c: ec(c.emb, 2),
        TypeError,
        "`categorical_column`",
        "_TPUEmbeddingColumnV2",
    ),
    R(
        E,
        "embedding_column: unknown kwarg max_norm=1.0",
        lambda c: ec(c.ident, 2, max_norm=1.0),
        TypeError,
        "unexpected keyword argument 'max_norm'",
    ),
    # b_lookup_time_cpu, first row: refused at construction here.
    S(
        "b_lookup_time_cpu",
        "input_layer over embedding_column(identity,2,combiner='max') (accepted at ctor)",
        lambda c: ec(c.ident, 2, combiner="max"),
        ValueError,
        "`combiner`",
        "'max'",
        "'mean'",
    ),
    # b_bad_shared_embedding_columns
    R(
        SH,
        "shared_embedding_columns: different num_buckets (10 vs 20)",
        lambda c: sec([c.p, c.q20], 2),
        ValueError,
        "same number of buckets",
        "key='p'",
        "key='q'",
        "has 10",
        "has 20",
    ),
    S(
        SH,
        "shared_embedding_columns: duplicate column [a, a]",
        lambda c: sec([c.p, c.p], 2),
        ValueError,
        "feature keys ['p']",
    ),
    S(
        SH,
        "shared_embedding_columns: two columns same key 'p' (distinct objects)",
        lambda c: sec([c.p, c.p_again], 2),
        ValueError,
        "feature keys ['p']",
    ),
    S(
        SH,
        "shared_embedding_columns: empty list []",
        lambda c: sec([], 2),
        ValueError,
        "`categorical_columns`",
        "Received: [].",
    ),
    R(
        SH,
        "shared_embedding_columns: dimension=0",
        lambda c: sec([c.p, c.q], 0),
        ValueError,
        "`dimension`",
        "Received: 0.",
    ),
    R(
        SH,
        "shared_embedding_columns: dimension=-1",
        lambda c: sec([c.p, c.q], -1),
        ValueError,
        "`dimension`",
        "Received: -1.",
    ),
    S(
        SH,
        "shared_embedding_columns: combiner='max'",
        lambda c: sec([c.p, c.q], 2, combiner="max"),
        ValueError,
        "`combiner`",
        "'max'",
    ),
    R(
        SH,
        "shared_embedding_columns: initializer=3",
        lambda c: sec([c.p, c.q], 2, initializer=3),
        ValueError,
        "`initializer`",
        "Received: 3.",
    ),
    R(
        SH,
        "shared_embedding_columns: max_sequence_lengths length mismatch [0]",
        lambda c: sec([c.p, c.q], 2, max_sequence_lengths=[0]),
        ValueError,
        "max_sequence_lengths",
        "len(max_sequence_lengths)=1",
        "len(categorical_columns)=2",
    ),
    R(
        SH,
        "shared_embedding_columns: max_sequence_lengths=[3,0] for non-seq columns",
        lambda c: sec([c.p, c.q], 2, max_sequence_lengths=[3, 0]),
        ValueError,
        "`max_sequence_length`",
        "'p'",
        "Received: 3.",
    ),
    R(
        SH,
        "shared_embedding_columns: sequence col with max_sequence_lengths None",
        lambda c: sec([c.s, c.q], 2),
        ValueError,
        "`max_sequence_length`",
        "'s'",
        "Received: 0.",
    ),
    S(
        SH,
        "shared_embedding_columns: hash bucket column in list",
        lambda c: sec([c.h10, c.q], 2),
        TypeError,
        "HashedCategoricalColumn",
        "'h'",
    ),
    R(
        SH,
        "shared_embedding_columns: numeric column in list",
        lambda c: sec([c.n, c.q], 2),
        TypeError,
        "`categorical_column`",
        "NumericColumn",
    ),
    R(
        SH,
        "shared_embedding_columns: embedding_lookup_device='gpu'",
        lambda c: sec([c.p, c.q], 2, embedding_lookup_device="gpu"),
        ValueError,
        "`embedding_lookup_device`",
        "'gpu'",
    ),
    R(
        SH,
        "shared_embedding_columns: tpu_tensor_core without shape",
        lambda c: sec([c.p, c.q], 2, embedding_lookup_device="tpu_tensor_core"),
        ValueError,
        "tensor_core_shape",
        "embedding_lookup_device='tpu_tensor_core'",
    ),
    R(
        SH,
        "shared_embedding_columns: tensor_core_shape=[1,2,3]",
        lambda c: sec([c.p, c.q], 2, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[1, 2, 3]),
        ValueError,
        "`tensor_core_shape`",
        "[1, 2, 3]",
    ),
    R(
        SH,
        "shared_embedding_columns: categorical_columns=single column (not list)",
        lambda c: sec(c.p, 2),
        TypeError,
        "`categorical_columns`",
        "key='p'",
    ),
    # b_bad_configs_from_feature_columns
    R(
        GC,
        "get_configs: same categorical column used by two embedding_columns",
        lambda c: get_configs_from_feature_columns([ec(c.p, 2), ec(c.p, 3)]),
        ValueError,
        "'p'",
        "more than one column",
    ),
    R(
        GC,
        "get_configs: shared [a,a] duplicate",
        lambda c: get_configs_from_feature_columns(sec([c.p, c.p], 2)),
        ValueError,
        "['p']",
    ),
    R(
        GC,
        "get_configs: combiner='max' reaches TableConfig",
        lambda c: get_configs_from_feature_columns([ec(c.p, 2, combiner="max")]),
        ValueError,
        "`combiner`",
        "'max'",
    ),
    R(
        GC,
        "get_configs: dimension=2.5 reaches TableConfig",
        lambda c: get_configs_from_feature_columns([ec(c.p, 2.5)]),
        ValueError,
        "`dimension`",
        "Received: 2.5.",
    ),
    R(
        GC,
        "get_configs: non-TPU fc.embedding_column",
        lambda c: get_configs_from_feature_columns([fc.embedding_column(c.p, 2)]),
        TypeError,
        "Unsupported feature column",
        "EmbeddingColumn",
        "key='p'",
    ),
    # b_bad_EmbeddingConfigSpec
    R(
        B,
        "EmbeddingConfigSpec: no arguments",
        lambda c: est.EmbeddingConfigSpec(),
        ValueError,
        "`feature_columns`",
        "feature_columns=None",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature_columns=None, optimization_parameters=Adagrad",
        lambda c: est.EmbeddingConfigSpec(feature_columns=None, optimization_parameters=adagrad()),
        ValueError,
        "`feature_columns`",
        "feature_columns=None",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature_columns=[]",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[], optimization_parameters=adagrad()),
        ValueError,
        "`feature_columns`",
        "feature_columns=list of 0",
    ),
    R(
        B,
        "EmbeddingConfigSpec: optimization_parameters missing (None)",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[c.emb]),
        ValueError,
        "`optimization_parameters`",
        "Received: None.",
    ),
    R(
        B,
        "EmbeddingConfigSpec: optimization_parameters='adagrad' (str)",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[c.emb], optimization_parameters="adagrad"),
        ValueError,
        "`optimization_parameters`",
        "Received: 'adagrad'.",
    ),
    R(
        B,
        "EmbeddingConfigSpec: optimization_parameters=tf.compat.v1.train.AdagradOptimizer(0.1)",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[c.emb], optimization_parameters=AdagradOptimizer(0.1)),
        ValueError,
        "`optimization_parameters`",
        "AdagradOptimizer(learning_rate=0.1)",
    ),
    R(
        B,
        "EmbeddingConfigSpec: optimization_parameters=AdagradParameters class (not instance)",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[c.emb], optimization_parameters=est.AdagradParameters),
        ValueError,
        "`optimization_parameters`",
        "AdagradParameters'>",
        "instance",
    ),
    R(
        B,
        "EmbeddingConfigSpec: partition_strategy='foo'",
        lambda c: est.EmbeddingConfigSpec(
            feature_columns=[c.emb], optimization_parameters=adagrad(), partition_strategy="foo"
        ),
        ValueError,
        "`partition_strategy`",
        "'foo'",
    ),
    R(
        B,
        "EmbeddingConfigSpec: partition_strategy='DIV' (case)",
        lambda c: est.EmbeddingConfigSpec(
            feature_columns=[c.emb], optimization_parameters=adagrad(), partition_strategy="DIV"
        ),
        ValueError,
        "`partition_strategy`",
        "'DIV'",
        "'div'",
    ),
    R(
        B,
        "EmbeddingConfigSpec: partition_strategy='foo' AND no feature_columns (which check first?)",
        lambda c: est.EmbeddingConfigSpec(optimization_parameters=adagrad(), partition_strategy="foo"),
        ValueError,
        "`feature_columns`",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature_columns=[raw categorical column]",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[c.p], optimization_parameters=adagrad()),
        TypeError,
        "`feature_columns`",
        "key='p'",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature_columns=['p'] (str)",
        lambda c: est.EmbeddingConfigSpec(feature_columns=["p"], optimization_parameters=adagrad()),
        TypeError,
        "`feature_columns`",
        "Received: 'p'.",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature_columns=[emb] + table/feature dicts (both)",
        lambda c: est.EmbeddingConfigSpec(
            [c.emb], adagrad(), feature_to_config_dict=c.table_dicts()[0], table_to_config_dict=c.table_dicts()[1]
        ),
        ValueError,
        "`feature_columns`",
        "feature_to_config_dict=dict of 1",
    ),
    R(
        B,
        "EmbeddingConfigSpec: only feature_to_config_dict",
        lambda c: est.EmbeddingConfigSpec(feature_to_config_dict=c.table_dicts()[0]),
        ValueError,
        "`table_to_config_dict`",
        "table_to_config_dict=None",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature_to_config_dict value wrong type",
        lambda c: est.EmbeddingConfigSpec(feature_to_config_dict={"f": "t"}, table_to_config_dict=c.table_dicts()[1]),
        TypeError,
        "feature 'f'",
        "FeatureConfig",
        "Received: 't'",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature refers to missing table",
        lambda c: est.EmbeddingConfigSpec(
            feature_to_config_dict={"f": v1.FeatureConfig("t2")}, table_to_config_dict=c.table_dicts()[1]
        ),
        ValueError,
        "feature 'f'",
        "'t2'",
    ),
    R(
        B,
        "EmbeddingConfigSpec: table_to_config_dict value wrong type",
        lambda c: est.EmbeddingConfigSpec(
            feature_to_config_dict=c.table_dicts()[0], table_to_config_dict={"t": (10, 4)}
        ),
        TypeError,
        "table 't'",
        "TableConfig",
        "(10, 4)",
    ),
    R(
        B,
        "EmbeddingConfigSpec: feature_columns=single column (not list)",
        lambda c: est.EmbeddingConfigSpec(feature_columns=c.emb, optimization_parameters=adagrad()),
        TypeError,
        "`feature_columns`",
        "ident_embedding",
    ),
    S(
        B,
        "EmbeddingConfigSpec: clipping_limit=-1 (not validated?)",
        lambda c: est.EmbeddingConfigSpec(
            feature_columns=[c.emb], optimization_parameters=adagrad(), clipping_limit=-1
        ),
        ValueError,
        "`clipping_limit`",
        "Received: -1.",
    ),
    # a_valid_EmbeddingConfigSpec rows TF accepted but that can't train:
    S(
        "a_valid_EmbeddingConfigSpec",
        "EmbeddingConfigSpec(feature_columns=[non-TPU tf.feature_column.embedding_column, numeric_column], Adagrad)",
        lambda c: est.EmbeddingConfigSpec(
            feature_columns=[fc.embedding_column(c.p, 2), c.n], optimization_parameters=adagrad()
        ),
        TypeError,
        "'p_embedding'",
        "tf.feature_column.embedding_column",
        "tf.tpu.experimental.embedding_column",
    ),
    S(
        "a_valid_EmbeddingConfigSpec",
        "EmbeddingConfigSpec(feature_columns=[emb, emb] (same object twice), Adagrad)",
        lambda c: est.EmbeddingConfigSpec(feature_columns=[c.emb, c.emb], optimization_parameters=adagrad()),
        ValueError,
        "'ident'",
        "more than one column",
    ),
    # b_TableConfig_FeatureConfig (v1)
    R(TC, "TableConfig(0, 4)", lambda c: v1.TableConfig(0, 4), ValueError, "`vocabulary_size`", "Received: 0."),
    R(
        TC,
        "TableConfig(10.0, 4)",
        lambda c: v1.TableConfig(10.0, 4),
        ValueError,
        "`vocabulary_size`",
        "Received: 10.0.",
    ),
    R(TC, "TableConfig(10, 0)", lambda c: v1.TableConfig(10, 0), ValueError, "`dimension`", "Received: 0."),
    R(TC, "TableConfig(10, 2.5)", lambda c: v1.TableConfig(10, 2.5), ValueError, "`dimension`", "Received: 2.5."),
    R(
        TC,
        "TableConfig(10, 4, combiner='max')",
        lambda c: v1.TableConfig(10, 4, combiner="max"),
        ValueError,
        "`combiner`",
        "'max'",
    ),
    R(
        TC,
        "TableConfig(10, 4, initializer=1)",
        lambda c: v1.TableConfig(10, 4, initializer=1),
        ValueError,
        "`initializer`",
        "Received: 1.",
    ),
    R(
        TC,
        "TableConfig(10, 4, learning_rate=0.1, learning_rate_fn=f)",
        lambda c: v1.TableConfig(10, 4, learning_rate=0.1, learning_rate_fn=LR_FN),
        ValueError,
        "`learning_rate`",
        "`learning_rate_fn`",
        "learning_rate=0.1",
    ),
    R(
        TC,
        "TableConfig(10, 4, optimization_parameters='x')",
        lambda c: v1.TableConfig(10, 4, optimization_parameters="x"),
        ValueError,
        "`optimization_parameters`",
        "Received: 'x'.",
    ),
    R(
        TC,
        "FeatureConfig('t', max_sequence_length=-1)",
        lambda c: v1.FeatureConfig("t", max_sequence_length=-1),
        ValueError,
        "`max_sequence_length`",
        "Received: -1.",
    ),
    R(
        TC,
        "FeatureConfig('t', max_sequence_length=2.0)",
        lambda c: v1.FeatureConfig("t", max_sequence_length=2.0),
        ValueError,
        "`max_sequence_length`",
        "Received: 2.0.",
    ),
    # b_bad_optimizer_params
    R(OP, "AdagradParameters() (no lr)", lambda c: V1X.AdagradParameters(), TypeError, "learning_rate"),
    S(
        OP,
        "AdagradParameters(-0.1) negative lr",
        lambda c: V1X.AdagradParameters(-0.1),
        ValueError,
        "`learning_rate`",
        "AdagradParameters",
        "Received: -0.1.",
    ),
    S(
        OP,
        "AdagradParameters('x') str lr",
        lambda c: V1X.AdagradParameters("x"),
        TypeError,
        "`learning_rate`",
        "Received: 'x'.",
    ),
    R_kwarg(V1X.AdagradParameters, "initial_accumulator", 0, "AdagradParameters"),
    R_kwarg(V1X.AdagradParameters, "initial_accumulator", -1),
    R(
        OP,
        "AdagradParameters(0.1, use_gradient_accumulation=False, clip_gradient_min=-1)",
        lambda c: V1X.AdagradParameters(0.1, use_gradient_accumulation=False, clip_gradient_min=-1),
        ValueError,
        "use_gradient_accumulation",
        "clip_gradient_min=-1",
    ),
    S(
        OP,
        "AdagradParameters(0.1, clip_weight_min=1, clip_weight_max=-1) (min>max)",
        lambda c: V1X.AdagradParameters(0.1, clip_weight_min=1, clip_weight_max=-1),
        ValueError,
        "`clip_weight_min`",
        "`clip_weight_max`",
        "clip_weight_min=1",
        "clip_weight_max=-1",
    ),
    S(
        OP,
        "AdamParameters(-1.0) negative lr",
        lambda c: V1X.AdamParameters(-1.0),
        ValueError,
        "`learning_rate`",
        "AdamParameters",
        "Received: -1.0.",
    ),
    R_kwarg(V1X.AdamParameters, "beta1", 1.0, "AdamParameters"),
    R_kwarg(V1X.AdamParameters, "beta1", -0.1),
    R_kwarg(V1X.AdamParameters, "beta2", 1.0),
    R_kwarg(V1X.AdamParameters, "beta2", 1.5),
    R_kwarg(V1X.AdamParameters, "epsilon", 0.0),
    R(
        OP,
        "AdamParameters(0.1, epsilon=-1e-8)",
        lambda c: V1X.AdamParameters(0.1, epsilon=-1e-8),
        ValueError,
        "`epsilon`",
        "Received: -1e-08.",
    ),
    R(
        OP,
        "AdamParameters(0.1, lazy_adam=False, use_gradient_accumulation=False)",
        lambda c: V1X.AdamParameters(0.1, lazy_adam=False, use_gradient_accumulation=False),
        ValueError,
        "`lazy_adam=False`",
        "use_gradient_accumulation",
    ),
    S(
        OP,
        "StochasticGradientDescentParameters(-0.5) negative lr",
        lambda c: V1X.StochasticGradientDescentParameters(-0.5),
        ValueError,
        "`learning_rate`",
        "StochasticGradientDescentParameters",
        "Received: -0.5.",
    ),
    R(
        OP,
        "StochasticGradientDescentParameters() no lr",
        lambda c: V1X.StochasticGradientDescentParameters(),
        TypeError,
        "learning_rate",
    ),
    R(
        OP,
        "StochasticGradientDescentParameters(0.1, use_gradient_accumulation=False, clip_gradient_max=1)",
        lambda c: V1X.StochasticGradientDescentParameters(0.1, use_gradient_accumulation=False, clip_gradient_max=1),
        ValueError,
        "use_gradient_accumulation",
        "clip_gradient_max=1",
    ),
    R_kwarg(V1X.FtrlParameters, "learning_rate_power", 0.5, "FtrlParameters"),
    R_kwarg(V1X.FtrlParameters, "initial_accumulator_value", -1),
    R_kwarg(V1X.FtrlParameters, "l1_regularization_strength", -1),
    R_kwarg(V1X.FtrlParameters, "l2_regularization_strength", -1),
    S(
        OP,
        "FtrlParameters(-0.1) negative lr",
        lambda c: V1X.FtrlParameters(-0.1),
        ValueError,
        "`learning_rate`",
        "FtrlParameters",
        "Received: -0.1.",
    ),
]


def _bad_id(row: Bad) -> str:
    return ("" if row.tf_raised else "stricter: ") + f"{row.section}: {row.input}"


@pytest.mark.parametrize("row", BAD_ROWS, ids=[_bad_id(r) for r in BAD_ROWS])
def test_bad_input(row, c):
    with pytest.raises(row.error, match=re.escape(row.fragments[0])) as info:
        row.build(c)
    assert type(info.value) is row.error, f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for fragment in row.fragments[1:]:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_probe_rows_are_all_here():
    """Every row of the covered sections is one case above (guards against a row being dropped)."""
    counted = {}
    for row in BAD_ROWS:
        counted[row.section] = counted.get(row.section, 0) + 1
    # TF table sizes: b_bad_embedding_column 31, b_bad_shared_embedding_columns 17, b_bad_configs 5,
    # b_bad_EmbeddingConfigSpec 19, b_TableConfig_FeatureConfig 10; b_bad_optimizer_params 27, of which the
    # 4 accepted-and-sensible rows are in ATTRIBUTE_ROWS. The b_bad_embedding_column row "combiner=None" is
    # accepted, as TensorFlow does (test_combiner_none_is_accepted_and_sums).
    assert counted[E] + 1 == 31
    assert counted[SH] == 17
    assert counted[GC] == 5
    assert counted[B] == 19
    assert counted[TC] == 10
    assert counted[OP] + 4 == 27
    assert len(OK_COLUMN_ROWS) == 15 and len(OK_SHARED_ROWS) == 8
    assert len(OK_ECS_ROWS) + 2 + 1 == 7  # + 2 stricter rows in BAD_ROWS + the defaults row
    assert len(SIGNATURE_ROWS) + 4 + 2 == 13  # + 4 attribute rows + 2 exported-names rows


# The documentation examples, with only the import changed -----------------------------------------


@pytest.mark.parametrize("namespace", ["tf.tpu.experimental", "tf.compat.v1.tpu.experimental"])
def test_embedding_config_spec_docs_example(namespace):
    """tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec page (seed 000), `...` filled in."""
    tpu_ns = tf.tpu.experimental if namespace == "tf.tpu.experimental" else tf.compat.v1.tpu.experimental
    column_a = tf.feature_column.categorical_column_with_identity("a", 100)
    column_b = tf.feature_column.categorical_column_with_identity("b", 100)
    column_c = tf.feature_column.categorical_column_with_identity("c", 50)
    tpu_shared_columns = tpu_ns.shared_embedding_columns([column_a, column_b], 10)
    tpu_non_shared_column = tpu_ns.embedding_column(column_c, 10)
    tpu_columns = [tpu_non_shared_column] + tpu_shared_columns
    with pytest.warns(UserWarning, match=re.escape("`column=`")):
        spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
            column=tpu_columns, optimization_parameters=(tf.estimator.tpu.experimental.AdagradParameters(0.1))
        )
    assert list(spec.feature_columns) == tpu_columns
    lowered = spec.to_spec()
    assert sorted(t.name for t in lowered.tables) == ["tbl_a_b_shared_embedding", "tbl_c"]
    assert [f.name for f in lowered.features] == ["c", "a", "b"]
    assert lowered.table("tbl_a_b_shared_embedding").dim == 10
    assert lowered.optimizer.kind == "adagrad" and lowered.optimizer.learning_rate == 0.1


@pytest.mark.parametrize("namespace", ["tf.tpu.experimental", "tf.compat.v1.tpu.experimental"])
def test_embedding_column_docs_example(namespace):
    """tf.compat.v1.tpu.experimental.embedding_column page (seed 001), `...` filled in."""
    tpu_ns = tf.tpu.experimental if namespace == "tf.tpu.experimental" else tf.compat.v1.tpu.experimental
    column = tf.feature_column.categorical_column_with_identity("video_id", 1000)
    tpu_column = tpu_ns.embedding_column(column, 10)
    with pytest.warns(UserWarning, match=re.escape("`column=`")):
        spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
            column=[tpu_column], optimization_parameters=tf.estimator.tpu.experimental.AdagradParameters(0.1)
        )
    assert spec.feature_columns == [tpu_column]
    lowered = spec.to_spec()
    assert [(t.name, t.vocabulary_size, t.dim) for t in lowered.tables] == [("tbl_video_id", 1000, 10)]


def test_feature_columns_spelled_right_gives_no_warning(c):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.EmbeddingConfigSpec(feature_columns=[c.emb], optimization_parameters=adagrad())


def test_unknown_keyword_is_refused(c):
    with pytest.raises(TypeError, match=re.escape("'columns'")):
        est.EmbeddingConfigSpec(columns=[c.emb], optimization_parameters=adagrad())
