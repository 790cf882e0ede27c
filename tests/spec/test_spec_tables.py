"""Tables of valid and invalid specs: each bad value fails with the argument named."""

import dataclasses

import numpy as np
import pytest

from tpu_embedding_shim.spec import (
    OPTIMIZER_SPECS,
    AdagradSpec,
    AdamSpec,
    EmbeddingSpec,
    FeatureSpec,
    RowIdInitializer,
    SGDSpec,
    TableSpec,
    TruncatedNormal,
)


def table(**overrides):
    return TableSpec(**{"name": "t", "vocabulary_size": 10, "dim": 4, **overrides})


def feature(**overrides):
    return FeatureSpec(**{"name": "f", "table": "t", "num_buckets": 10, **overrides})


BAD_TABLES = [
    ({"name": ""}, ValueError, "name"),
    ({"name": 3}, TypeError, "name"),
    ({"vocabulary_size": 0}, ValueError, "vocabulary_size"),
    ({"vocabulary_size": 10.0}, ValueError, "vocabulary_size"),
    ({"dim": 2.5}, ValueError, "dim"),
    ({"dim": True}, ValueError, "dim"),
    ({"dim": "4"}, TypeError, "dim"),
    ({"combiner": "max"}, ValueError, "combiner"),
    ({"combiner": "MEAN"}, ValueError, "case-sensitive"),
    ({"initializer": 3}, ValueError, "initializer"),
    ({"optimizer": "adagrad"}, TypeError, "optimizer"),
]

BAD_FEATURES = [
    ({"max_sequence_length": -1}, ValueError, "max_sequence_length"),
    ({"max_sequence_length": 2.0}, ValueError, "max_sequence_length"),
    ({"id_source": "hash"}, ValueError, "id_source"),
    ({"default_value": 10}, ValueError, "default_value"),
    ({"vocabulary": ("a",)}, ValueError, "vocabulary"),
    ({"id_source": "vocabulary_list"}, ValueError, "vocabulary"),
    ({"id_source": "vocabulary_list", "vocabulary": ("a", "a"), "num_buckets": 2}, ValueError, "distinct"),
    ({"id_source": "vocabulary_list", "vocabulary": ("a", "b"), "num_buckets": 3}, ValueError, "num_buckets"),
    (
        {
            "id_source": "vocabulary_list",
            "vocabulary": ("a", "b"),
            "num_buckets": 3,
            "num_oov_buckets": 1,
            "default_value": 0,
        },
        ValueError,
        "default_value",
    ),
    ({"safe_lookup": 1}, TypeError, "safe_lookup"),
    ({"weight_key": ""}, ValueError, "weight_key"),
]

BAD_SPECS = [(table, *row) for row in BAD_TABLES] + [(feature, *row) for row in BAD_FEATURES]


@pytest.mark.parametrize(
    "build,overrides,error,fragment", BAD_SPECS, ids=[f"{build.__name__}-{o}" for build, o, _, _ in BAD_SPECS]
)
def test_bad_table_or_feature_is_refused_naming_the_argument(build, overrides, error, fragment):
    with pytest.raises(error, match=fragment):
        build(**overrides)


def test_table_default_initializer_is_truncated_normal_one_over_sqrt_dim():
    assert table(dim=16).initializer is None  # resolved when used, from the dim at that time
    assert table(dim=16).effective_initializer() == TruncatedNormal(mean=0.0, stddev=0.25)
    wider = dataclasses.replace(table(dim=16), dim=4)
    assert wider.effective_initializer() == TruncatedNormal(mean=0.0, stddev=0.5)


BAD_OPTIMIZERS = [
    ("sgd", {"learning_rate": -0.1}, "learning_rate"),
    ("sgd", {"learning_rate": "x"}, "learning_rate"),
    ("sgd", {"learning_rate": float("nan")}, "learning_rate"),
    ("sgd", {"learning_rate": 0.1, "clip_weight_min": 1.0, "clip_weight_max": -1.0}, "clip_weight_min"),
    ("sgd", {"learning_rate": 0.1, "clip_gradient_min": 1.0, "clip_gradient_max": 0.0}, "clip_gradient_min"),
    (
        "sgd",
        {"learning_rate": 0.1, "clip_gradient_max": 1.0, "use_gradient_accumulation": False},
        "use_gradient_accumulation",
    ),
    ("sgd", {"learning_rate": 0.1, "weight_decay_factor": -1.0}, "weight_decay_factor"),
    ("adagrad", {"learning_rate": 0.1, "initial_accumulator": 0.0}, "initial_accumulator"),
    ("adam", {"learning_rate": 0.1, "beta1": 1.0}, "beta1"),
    ("adam", {"learning_rate": 0.1, "beta2": -0.5}, "beta2"),
    ("adam", {"learning_rate": 0.1, "epsilon": 0.0}, "epsilon"),
    ("adam", {"learning_rate": 0.1, "lazy_adam": False, "use_gradient_accumulation": False}, "lazy_adam"),
    ("ftrl", {"learning_rate": 0.1, "learning_rate_power": 0.5}, "learning_rate_power"),
    ("ftrl", {"learning_rate": 0.1, "l1_regularization_strength": -1}, "l1_regularization_strength"),
    ("ftrl", {"learning_rate": 0.1, "initial_accumulator_value": -1}, "initial_accumulator_value"),
    ("adagrad_momentum", {"learning_rate": 0.1, "exponent": 0}, "exponent"),
    ("momentum", {"learning_rate": 0.1, "momentum": -1}, "momentum"),
    ("rmsprop", {"learning_rate": 0.1, "rho": 2.0}, "rho"),
    ("proximal_adagrad", {"learning_rate": 0.1, "l2_regularization_strength": -1}, "l2_regularization_strength"),
]


@pytest.mark.parametrize("kind,kwargs,fragment", BAD_OPTIMIZERS, ids=[f"{kind}-{k}" for kind, k, _ in BAD_OPTIMIZERS])
def test_bad_optimizer_is_refused_naming_the_argument(kind, kwargs, fragment):
    with pytest.raises((ValueError, TypeError), match=fragment):
        OPTIMIZER_SPECS[kind](**kwargs)


def test_specs_are_frozen_and_keyword_only():
    with pytest.raises(dataclasses.FrozenInstanceError):
        table().dim = 3
    with pytest.raises(TypeError):
        TableSpec("t", 10, 4)


def test_learning_rate_function_of_step():
    opt = SGDSpec(learning_rate=lambda step: 0.1 / (1 + step))
    assert opt.learning_rate_at(0) == 0.1
    assert opt.learning_rate_at(9) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="returned"):
        SGDSpec(learning_rate=lambda step: "oops").learning_rate_at(3)


@pytest.mark.parametrize(
    "kind,slots",
    [
        ("adagrad", ["accumulators"]),
        ("adam", ["momenta", "velocities"]),
        ("ftrl", ["accumulators", "linears"]),
        ("adagrad_momentum", ["accumulators", "momenta"]),
        ("sgd", []),
    ],
)
def test_slot_names_are_tensorflows(kind, slots):
    initial_values = OPTIMIZER_SPECS[kind](learning_rate=1).slot_initial_values()
    assert isinstance(initial_values, dict) and list(initial_values) == slots


def spec(**overrides):
    return EmbeddingSpec(
        **{"tables": (table(),), "features": (feature(),), "optimizer": AdagradSpec(learning_rate=0.1), **overrides}
    )


BAD_EMBEDDING_SPECS = [
    ({"partition_strategy": "DIV"}, ValueError, "partition_strategy"),
    ({"num_shards": 0}, ValueError, "num_shards"),
    ({"features": ()}, ValueError, "not used by any feature"),
    ({"features": (feature(table="nope"),)}, ValueError, "nope"),
    ({"features": (feature(), feature())}, ValueError, "two features"),
    ({"tables": (table(), table())}, ValueError, "two tables"),
    ({"tables": (table(), table(name="unused"))}, ValueError, "unused"),
    ({"features": (feature(num_buckets=9),)}, ValueError, "vocabulary_size"),
    ({"gradient_multiplier_fn": 2.0}, ValueError, "gradient_multiplier_fn"),
    ({"pipeline_execution_with_tensor_core": "yes"}, TypeError, "pipeline_execution_with_tensor_core"),
    ({"optimizer": "sgd"}, TypeError, "optimizer"),
]


@pytest.mark.parametrize(
    "overrides,error,fragment", BAD_EMBEDDING_SPECS, ids=[str(sorted(o)) + f for o, _, f in BAD_EMBEDDING_SPECS]
)
def test_bad_embedding_spec_is_refused(overrides, error, fragment):
    with pytest.raises(error, match=fragment):
        spec(**overrides)


def test_embedding_spec_queries_and_round_trip():
    own = SGDSpec(learning_rate=0.5)
    s = spec(
        tables=(table(), table(name="u", optimizer=own)),
        features=(feature(), feature(name="g", table="u"), feature(name="h", table="u")),
    )
    assert s.optimizer_for("t").kind == "adagrad"
    assert s.optimizer_for("u") is own
    assert [f.name for f in s.features_of("u")] == ["g", "h"]
    assert EmbeddingSpec.from_dict(s.to_dict()) == s
    assert s.structure()["t"] == {"vocabulary_size": 10, "dim": 4, "slots": ["accumulators"]}
    with pytest.raises(KeyError, match="tables are"):
        s.table("zzz")


def test_fingerprint_ignores_hyper_parameters_but_not_shapes():
    a = spec()
    b = spec(optimizer=AdagradSpec(learning_rate=0.9))
    c = spec(tables=(table(dim=5),))
    d = spec(optimizer=AdamSpec(learning_rate=0.1))
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != c.fingerprint()
    assert a.fingerprint() != d.fingerprint()


def test_row_id_initializer_reads_by_eye():
    np.testing.assert_array_equal(RowIdInitializer(offset=1)((3, 2)), [[1, 1], [2, 2], [3, 3]])


def test_truncated_normal_stays_within_two_stddevs_and_is_seeded():
    init = TruncatedNormal(mean=1.0, stddev=0.5, seed=3)
    values = init((200, 8))
    assert values.dtype == np.float32
    assert np.all(np.abs(values - 1.0) <= 1.0 + 1e-6)
    np.testing.assert_array_equal(values, init((200, 8)))
