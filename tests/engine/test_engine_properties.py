"""Engine-level properties (hypothesis): pipelining, checkpoint round trip, failure atomicity."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.spec import (
    AdagradSpec,
    AdamSpec,
    EmbeddingSpec,
    FeatureSpec,
    FtrlSpec,
    SGDSpec,
    TableSpec,
    TruncatedNormal,
)

V, D = 16, 3
OPTIMIZERS = [
    SGDSpec(learning_rate=0.5),
    AdagradSpec(learning_rate=0.3),
    AdamSpec(learning_rate=0.1),
    AdamSpec(learning_rate=0.1, lazy_adam=False, sum_inside_sqrt=False),
    FtrlSpec(learning_rate=0.2, l1_regularization_strength=0.01),
]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def spec(optimizer, *, combiner="sum", pipelining=False, shards=1, strategy="div"):
    return EmbeddingSpec(
        tables=(
            TableSpec(
                name="t", vocabulary_size=V, dim=D, combiner=combiner, initializer=TruncatedNormal(stddev=0.5, seed=3)
            ),
        ),
        features=(
            FeatureSpec(name="a", table="t", num_buckets=V),
            FeatureSpec(name="b", table="t", num_buckets=V, max_sequence_length=2),
        ),
        optimizer=optimizer,
        pipeline_execution_with_tensor_core=pipelining,
        num_shards=shards,
        partition_strategy=strategy,
    )


def train(engine, batches, grad_seed):
    rng = np.random.default_rng(grad_seed)
    for features in batches:
        result = engine.forward(features)
        engine.apply_gradients(result, {k: rng.standard_normal(v.shape) for k, v in result.activations.items()})
    return engine.state()


@st.composite
def disjoint_steps(draw):
    """Batches where consecutive steps share no id (across both features)."""
    steps = draw(st.integers(2, 5))
    batches, previous = [], set()
    for _ in range(steps):
        allowed = [i for i in range(V) if i not in previous]
        ids = st.lists(st.sampled_from(allowed), min_size=2, max_size=2)
        a, b = draw(st.lists(ids, min_size=3, max_size=3)), draw(st.lists(ids, min_size=3, max_size=3))
        batches.append({"a": a, "b": b})
        previous = {i for row in a + b for i in row}
    return batches


@SETTINGS
@given(
    batches=disjoint_steps(),
    optimizer=st.sampled_from(OPTIMIZERS[:3] + OPTIMIZERS[4:]),
    combiner=st.sampled_from(["sum", "mean", "sqrtn"]),
    grad_seed=st.integers(0, 99),
)
def test_pipelining_changes_nothing_when_consecutive_steps_share_no_id(batches, optimizer, combiner, grad_seed):
    plain = train(Engine(spec(optimizer, combiner=combiner)), batches, grad_seed)
    piped = train(Engine(spec(optimizer, combiner=combiner, pipelining=True)), batches, grad_seed)
    for key in plain["t"]:
        np.testing.assert_array_equal(piped["t"][key], plain["t"][key])


@SETTINGS
@given(
    optimizer=st.sampled_from(OPTIMIZERS),
    shards=st.integers(1, 5),
    strategy=st.sampled_from(["div", "mod"]),
    steps=st.integers(0, 3),
    grad_seed=st.integers(0, 99),
)
def test_checkpoint_round_trip_is_exact(tmp_path_factory, optimizer, shards, strategy, steps, grad_seed):
    directory = str(tmp_path_factory.mktemp("ckpt"))
    rng = np.random.default_rng(grad_seed)
    batches = [
        {"a": rng.integers(0, V, (4, 2)).tolist(), "b": rng.integers(0, V, (4, 2)).tolist()} for _ in range(steps)
    ]
    engine = Engine(spec(optimizer, shards=shards, strategy=strategy, pipelining=True))
    saved = train(engine, batches, grad_seed)
    engine.save(directory)
    other = Engine(spec(optimizer, shards=1 + (shards % 3), strategy="mod" if strategy == "div" else "div"))
    other.restore(directory)
    assert other.global_step == steps
    for key, value in saved["t"].items():
        np.testing.assert_array_equal(other.state()["t"][key], value)


FAILURES = {
    "id out of range": (lambda f: {**f, "a": [[V, 0]] + f["a"][1:]}, None),
    "missing feature": (lambda f: {"a": f["a"]}, None),
    "NaN gradient": (lambda f: f, lambda g: {**g, "a": np.full_like(g["a"], np.nan)}),
    "gradient of the wrong shape": (lambda f: f, lambda g: {**g, "b": g["b"][:, :1]}),
}


@SETTINGS
@given(
    optimizer=st.sampled_from(OPTIMIZERS),
    failure=st.sampled_from(sorted(FAILURES)),
    pipelining=st.booleans(),
    warmup=st.integers(0, 3),
    grad_seed=st.integers(0, 99),
)
def test_a_failing_step_changes_nothing(optimizer, failure, pipelining, warmup, grad_seed):
    rng = np.random.default_rng(grad_seed)
    engine = Engine(spec(optimizer, pipelining=pipelining, shards=3))
    batch = lambda: {"a": rng.integers(0, V, (4, 2)).tolist(), "b": rng.integers(0, V, (4, 2)).tolist()}  # noqa
    train(engine, [batch() for _ in range(warmup)], grad_seed)
    before, step = engine.state(), engine.global_step
    break_features, break_gradients = FAILURES[failure]
    with pytest.raises((ValueError, TypeError)):
        result = engine.forward(break_features(batch()))
        gradients = {k: rng.standard_normal(v.shape) for k, v in result.activations.items()}
        engine.apply_gradients(result, break_gradients(gradients))
    assert engine.global_step == step
    for key, value in before["t"].items():
        np.testing.assert_array_equal(engine.state()["t"][key], value)
