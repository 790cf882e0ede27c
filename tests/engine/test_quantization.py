"""Simulated quantization (a table's `QuantizationSpec`, TensorFlow's `QuantizationConfig`): the spec's
checks, the formula's float32 bits, both kernel sets, and a backward pass that ignores it.

TensorFlow's rule (optimization_parameters.proto, `SimulatedQuantization`): after each row is gathered
and before the combiner, x = floor((clip(x, lower, upper) - lower) / quantum + 0.5) * quantum + lower
with quantum = (upper - lower) / (num_buckets - 1), all float32; the backward pass is unchanged.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine import Engine, lookup
from tpu_embedding_shim.engine.kernels import Lookup
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, QuantizationSpec, TableSpec, TruncatedNormal

from .strategies import assert_same_bits, batches, fused_optimizers, quantizations, step_inputs, values_near_levels
from .test_kernels import _kernel_sets

SETTINGS = settings(max_examples=40, deadline=None)
F32 = np.float32
COMBINERS = st.sampled_from(["sum", "mean", "sqrtn"])


def tf_formula(x, quantization):
    """TensorFlow's pseudo-code, one float32 value at a time (an implementation independent of `quantize`)."""
    lower, upper = F32(quantization.lower), F32(quantization.upper)
    quantum = F32(F32(upper - lower) / F32(quantization.num_buckets - 1))
    x = F32(x)
    if x < lower:
        x = lower
    if x > upper:
        x = upper
    return F32(F32(np.floor(F32(F32(x - lower) / quantum) + F32(0.5))) * quantum) + lower


# The spec ---------------------------------------------------------------------------------------------

VALID = [(2, -1.0, 1.0), (256, -0.05, 0.05), (2**31 - 1, -1.0, 1.0), (3, 0.1, 0.7), (5, -3e38, -1e38)]
INVALID = [
    ((1, -1.0, 1.0), ValueError, "num_buckets"),
    ((2.0, -1.0, 1.0), ValueError, "num_buckets"),
    ((True, -1.0, 1.0), ValueError, "num_buckets"),
    ((2**31, -1.0, 1.0), ValueError, "num_buckets"),
    ((4, float("nan"), 1.0), ValueError, "lower"),
    ((4, -1.0, float("inf")), ValueError, "upper"),
    ((4, -1e39, 1.0), ValueError, "lower"),  # not a float32
    ((4, "0", 1.0), TypeError, "lower"),
    ((4, 1.0, 1.0), ValueError, "upper"),
    ((4, 1.0, 1.0 + 1e-12), ValueError, "upper"),  # distinct as float64, one float32
    ((4, -3e38, 3e38), ValueError, "quantum"),  # upper - lower overflows float32
    ((2**31 - 1, 0.0, 1e-37), ValueError, "quantum"),  # the quantum underflows to 0
]


@pytest.mark.parametrize("args", VALID)
def test_valid_quantizations_are_accepted(args):
    q = QuantizationSpec(num_buckets=args[0], lower=args[1], upper=args[2])
    lower, upper, quantum = q.float32_parameters()
    assert lower < upper and 0 < quantum < np.inf
    assert all(isinstance(v, F32) for v in (lower, upper, quantum))


@pytest.mark.parametrize(("args", "error", "named"), INVALID)
def test_invalid_quantizations_are_refused_naming_the_argument(args, error, named):
    with pytest.raises(error, match=named):
        QuantizationSpec(num_buckets=args[0], lower=args[1], upper=args[2])


def test_a_table_takes_a_quantization_spec_only():
    with pytest.raises(TypeError, match="quantization"):
        TableSpec(name="t", vocabulary_size=2, dim=1, quantization=(4, -1.0, 1.0))


def test_the_spec_round_trips_through_its_dict():
    q = QuantizationSpec(num_buckets=7, lower=-0.3, upper=0.9)
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=3, dim=2, quantization=q),),
        features=(FeatureSpec(name="f", table="t", num_buckets=3),),
    )
    assert EmbeddingSpec.from_dict(spec.to_dict()).table("t").quantization == q


# The formula ------------------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data(), quantization=quantizations())
def test_quantize_is_tensorflows_formula_in_float32(data, quantization):
    values = data.draw(values_near_levels(quantization))
    got = lookup.quantize(values[None, :], lookup.quantization_parameters(quantization))[0]
    want = np.array([tf_formula(x, quantization) for x in values], F32)
    assert_same_bits(got, want)


@SETTINGS
@given(data=st.data(), quantization=quantizations())
def test_quantized_values_are_levels_inside_the_range(data, quantization):
    values = data.draw(values_near_levels(quantization))
    values = values[~np.isnan(values)]
    lower, upper, quantum = quantization.float32_parameters()
    got = lookup.quantize(values[None, :], lookup.quantization_parameters(quantization))[0]
    level = np.floor((np.clip(values, lower, upper) - lower) / quantum + F32(0.5))
    assert (level >= 0).all() and (level <= quantization.num_buckets).all()
    error = np.abs(got.astype(np.float64) - np.clip(values, lower, upper))
    slack = 1e-6 * (abs(float(lower)) + abs(float(upper)))  # float32 rounding of the level's value
    assert np.all(error <= 0.51 * float(quantum) + slack)


def test_the_float32_midpoint_rounds_as_float32_does():
    """t = 0.49999997 (the float32 below 0.5): t + 0.5 is a float32 tie that rounds to 1.0, so the value
    goes up a level; float64 arithmetic would keep it on the level below."""
    q = QuantizationSpec(num_buckets=2, lower=0.0, upper=1.0)
    x = np.array([[np.nextafter(F32(0.5), F32(0.0))]], F32)
    assert lookup.quantize(x, lookup.quantization_parameters(q)).tolist() == [[1.0]]


def test_the_fast_scalar_is_the_numpy_bits():
    """`forward.quantized` (numba) against `lookup.quantize` over values at and between every level."""
    numba = pytest.importorskip("numba")
    from tpu_embedding_shim.engine.fast import forward

    @numba.njit
    def each(values, p):
        out = np.empty_like(values)
        for i in range(values.shape[0]):
            out[i] = forward.quantized(values[i], p[0], p[1], p[2])
        return out

    specs = [
        QuantizationSpec(num_buckets=4, lower=0.0, upper=1.0),
        QuantizationSpec(num_buckets=255, lower=-0.7, upper=0.3),
    ]
    for q in specs:
        p = lookup.quantization_parameters(q)
        values = np.random.default_rng(0).uniform(-2, 2, 200_000).astype(F32)
        edges = ((np.arange(-2, q.num_buckets + 2) + F32(0.5)) * p[2] + p[0]).astype(F32)
        near = np.concatenate([(edges.view(np.int32) + d).view(F32) for d in range(-2, 3)])
        values = np.concatenate([values, near, F32([np.nan, np.inf, -np.inf, -0.0])])
        assert_same_bits(each(values, p), lookup.quantize(values[None, :], p)[0])


# Both kernel sets -------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_kernels", _kernel_sets())
@SETTINGS
@given(case=batches(), quantization=quantizations(), combiner=COMBINERS, safe=st.booleans(), length=st.integers(1, 6))
def test_a_quantized_lookup_is_the_lookup_of_the_quantized_rows(
    make_kernels, case, quantization, combiner, safe, length
):
    """Quantizing every gathered row then combining (pooled) or placing it (sequence) is the plain lookup of
    the table with every row quantized: the same bits, on each kernel set."""
    table, batch = case
    table = table * F32(2.5)  # values outside a narrow range too
    p = lookup.quantization_parameters(quantization)
    pooled, (sequence, lengths) = make_kernels().lookups(
        [
            Lookup(table, batch, combiner, safe, quantization=p),
            Lookup(table, batch, max_sequence_length=length, quantization=p),
        ]
    )
    quantized_table = lookup.quantize(table, p)
    assert_same_bits(pooled, lookup.pooled_lookup(quantized_table, batch, combiner, safe=safe))
    want, want_lengths = lookup.sequence_lookup(quantized_table, batch, length)
    assert_same_bits(sequence, want)
    np.testing.assert_array_equal(lengths, want_lengths)


def _spec(quantization, optimizer, vocab=10, dim=3):
    return EmbeddingSpec(
        tables=(
            TableSpec(
                name="t",
                vocabulary_size=vocab,
                dim=dim,
                combiner="mean",
                initializer=TruncatedNormal(stddev=1.5, seed=3),
                quantization=quantization,
            ),
        ),
        features=(
            FeatureSpec(name="a", table="t", num_buckets=vocab),
            FeatureSpec(name="b", table="t", num_buckets=vocab, weight_key="b_w"),
            FeatureSpec(name="s", table="t", num_buckets=vocab, max_sequence_length=3),
        ),
        optimizer=optimizer,
    )


@pytest.mark.parametrize("kernels", ["numpy", "fast"])
@settings(max_examples=25, deadline=None)
@given(
    quantization=quantizations(),
    optimizer=fused_optimizers(),
    seed=st.integers(0, 2**16),
    batch=st.sampled_from([5, 300]),
)
def test_the_backward_pass_ignores_quantization(kernels, quantization, optimizer, seed, batch):
    """Given the same activation gradients, a quantized table gets the updates of the same table without
    quantization: tables and slots the same bits, step after step (a small step and a larger one, so the
    table-batched and the per-feature fast paths both run). Only the activations differ: the quantized
    ones are the formula's."""
    if kernels == "fast":
        pytest.importorskip("numba")
    quantized = Engine(_spec(quantization, optimizer), kernels=kernels)
    plain = Engine(_spec(None, optimizer), kernels=kernels)
    rng = np.random.default_rng(seed)
    p = lookup.quantization_parameters(quantization)
    for _ in range(3):
        features, grads = step_inputs(rng, 10, 3, batch=batch)
        before = plain.table("t")
        r_quantized, r_plain = quantized.forward(features), plain.forward(features)
        assert_same_bits(r_plain.activations["a"], lookup.pooled_lookup(before, r_plain.batches["a"], "mean"))
        assert_same_bits(
            r_quantized.activations["a"], lookup.pooled_lookup(lookup.quantize(before, p), r_plain.batches["a"], "mean")
        )
        quantized.apply_gradients(r_quantized, grads)
        plain.apply_gradients(r_plain, grads)
        assert_same_bits(quantized.table("t"), plain.table("t"))
        for name, values in plain.slots("t").items():
            assert_same_bits(quantized.slots("t")[name], values)


def test_the_engine_says_what_it_emulates():
    q = QuantizationSpec(num_buckets=5, lower=-1.0, upper=1.0)
    lines = Engine(_spec(q, None), kernels="numpy").describe()
    assert any("simulated quantization of table t" in line and "5 levels" in line for line in lines)


def test_a_sharded_quantized_table_quantizes_the_same():
    """`mod` sharding moves rows in storage, not values: the activations are those of one shard."""
    q = QuantizationSpec(num_buckets=9, lower=-1.0, upper=1.0)
    one = Engine(_spec(q, None), kernels="numpy")
    sharded = Engine(dataclasses.replace(_spec(q, None), num_shards=3, partition_strategy="mod"), kernels="numpy")
    features, _ = step_inputs(np.random.default_rng(0), 10, 3)
    for name, value in one.forward(features, training=False).activations.items():
        assert_same_bits(sharded.forward(features, training=False).activations[name], value)
