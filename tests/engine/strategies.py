"""Hypothesis strategies, step inputs and bit comparisons shared by the engine's tests."""

import numpy as np
from hypothesis import strategies as st

from tpu_embedding_shim import spec
from tpu_embedding_shim.engine import Ragged


def shared_options(draw):
    """Keyword arguments for the options every optimizer shares, drawn with `draw` (call it inside an
    `st.composite`): gradient clipping (a positive minimum too: then a zero
    gradient clips to non-zero), weight decay with or without the learning rate, weight clipping."""
    opts = {}
    if draw(st.booleans()):
        low, high = draw(st.sampled_from([(-0.5, 0.3), (-0.5, 1.0), (0.05, 1.0), (-1.0, -0.1), (None, 0.2)]))
        opts.update(clip_gradient_min=low, clip_gradient_max=high)
    if draw(st.booleans()):
        opts.update(
            weight_decay_factor=draw(st.sampled_from([0.01, 0.2])),
            multiply_weight_decay_factor_by_learning_rate=draw(st.booleans()),
        )
    if draw(st.booleans()):
        opts.update(clip_weight_min=draw(st.sampled_from([-1.0, None])), clip_weight_max=0.8)
    return opts


def step_inputs(rng, vocab, dim, batch=5):
    """One step for a spec with features a, b (weighted by b_w) and s (a sequence of length 3) on one
    table: (features, activation gradients), with repeated ids and empty examples."""
    ids = lambda: [list(rng.integers(0, vocab, rng.integers(0, 5))) for _ in range(batch)]  # noqa: E731
    b_ids = ids()
    features = {
        "a": ids(),
        "b": b_ids,
        "b_w": [list(rng.uniform(-0.5, 2, len(r)).astype(np.float32)) for r in b_ids],
        "s": ids(),
    }
    grads = {
        "a": rng.standard_normal((batch, dim)),
        "b": rng.standard_normal((batch, dim)),
        "s": rng.standard_normal((batch, 3, dim)),
    }
    return features, grads


def assert_same_bits(got, want):
    """Equal as float32 bit patterns (stricter than assert_array_equal: -0.0 != 0.0, NaN payloads count)."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


def step_both(fast, slow, features, grads):
    """One training step on two engines; their activations must be the same bits before the update."""
    r_fast, r_slow = fast.forward(features), slow.forward(features)
    for name in r_slow.activations:
        assert_same_bits(r_fast.activations[name], r_slow.activations[name])
    fast.apply_gradients(r_fast, grads)
    slow.apply_gradients(r_slow, grads)


@st.composite
def batches(draw, vocab=None, max_len=12, weights=True):
    """(table [V, D], Ragged batch): duplicates, empty rows, and weights <= 0 included."""
    vocab = vocab or draw(st.integers(1, 30))
    dim = draw(st.integers(1, 9))
    lengths = draw(st.lists(st.integers(0, max_len), min_size=1, max_size=12))
    n = sum(lengths)
    ids = np.array(draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n)), dtype=np.int64)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    positions = np.concatenate([np.arange(k) for k in lengths]).astype(np.int64) if n else np.zeros(0, np.int64)
    w = None
    if weights and draw(st.booleans()):
        w = np.array(draw(st.lists(st.floats(-1.0, 2.0, width=32), min_size=n, max_size=n)), dtype=np.float32)
    seed = draw(st.integers(0, 2**16))
    table = np.random.default_rng(seed).standard_normal((vocab, dim)).astype(np.float32)
    return table, Ragged(ids, splits, w, positions)


FUSED_KINDS = [
    "sgd",
    "adagrad",
    "lazy_adam",
    "adagrad_momentum",
    "ftrl",
    "momentum",
    "rmsprop",
    "proximal_adagrad",
    "dense_adam",
]


def schedule(step):
    """A learning rate that falls with the step (a callable learning rate)."""
    return 0.3 / (1 + step)


@st.composite
def fused_optimizers(draw, kind=None):
    """One of the fused optimizers, over its own options, the shared ones, and a constant or scheduled
    learning rate."""
    kind = kind or draw(st.sampled_from(FUSED_KINDS))
    lr = draw(st.sampled_from([0.1, 0.5, 0.0, schedule]))
    opts = dict(learning_rate=lr, **shared_options(draw))
    if kind == "sgd":
        return spec.SGDSpec(**opts)
    if kind == "adagrad":
        return spec.AdagradSpec(initial_accumulator=draw(st.sampled_from([0.1, 1.0])), **opts)
    if kind == "adagrad_momentum":
        return spec.AdagradMomentumSpec(
            momentum=draw(st.sampled_from([0.0, 0.5, 0.9])),
            use_nesterov=draw(st.booleans()),
            exponent=draw(st.sampled_from([2.0, 2.0, 1.0, 1.7, 3.0])),
            beta2=draw(st.sampled_from([1.0, 0.9, 0.0])),
            epsilon=draw(st.sampled_from([1e-10, 1e-3, 0.5])),
            **opts,
        )
    if kind == "ftrl":
        by_lr = draw(st.booleans())
        if not by_lr and (lr == 0.0 or callable(lr)):  # the paper form: a constant lr > 0 (see `fusable`)
            opts["learning_rate"] = 0.2
        return spec.FtrlSpec(
            learning_rate_power=draw(st.sampled_from([-0.5, -0.5, 0.0, -0.25, -1.0, -0.7])),
            initial_accumulator_value=draw(st.sampled_from([0.0, 0.1, 1.0])),
            l1_regularization_strength=draw(st.sampled_from([0.0, 0.01, 0.5])),
            l2_regularization_strength=draw(st.sampled_from([0.0, 0.1])),
            beta=draw(st.sampled_from([0.0, 0.5])),
            multiply_linear_by_learning_rate=by_lr,
            allow_zero_accumulator=draw(st.booleans()),
            initial_linear_value=draw(st.sampled_from([0.0, 0.2])),
            **opts,
        )
    if kind == "momentum":
        return spec.MomentumSpec(
            momentum=draw(st.sampled_from([0.0, 0.5, 0.9])), use_nesterov=draw(st.booleans()), **opts
        )
    if kind == "rmsprop":
        return spec.RMSPropSpec(
            rho=draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])),
            momentum=draw(st.sampled_from([0.0, 0.7])),
            epsilon=draw(st.sampled_from([1e-10, 1e-3])),
            **opts,
        )
    if kind == "proximal_adagrad":
        return spec.ProximalAdagradSpec(
            initial_accumulator=draw(st.sampled_from([0.1, 1.0])),
            l1_regularization_strength=draw(st.sampled_from([0.0, 0.05, 1.0])),
            l2_regularization_strength=draw(st.sampled_from([0.0, 0.3])),
            **opts,
        )
    return spec.AdamSpec(
        lazy_adam=kind == "lazy_adam",
        beta1=draw(st.sampled_from([0.9, 0.0, 0.5])),
        beta2=draw(st.sampled_from([0.999, 0.9])),
        epsilon=draw(st.sampled_from([1e-8, 1e-3])),
        sum_inside_sqrt=draw(st.booleans()),
        **opts,
    )


def row_id_spec(optimizer, *, vocab=10, dim=3, combiner="sum", features="f", **options):
    """An EmbeddingSpec of one table 't' whose row i is [i, ..., i] (RowIdInitializer), read by one
    feature 'f' (`features="f"`), by 'a' alone ("a"), or by the three of `step_inputs` ("abs": a; b,
    weighted by b_w; s, a sequence of length 3). `options` go to EmbeddingSpec."""
    readers = {
        "a": spec.FeatureSpec(name="a", table="t", num_buckets=vocab),
        "b": spec.FeatureSpec(name="b", table="t", num_buckets=vocab, weight_key="b_w"),
        "s": spec.FeatureSpec(name="s", table="t", num_buckets=vocab, max_sequence_length=3),
        "f": spec.FeatureSpec(name="f", table="t", num_buckets=vocab),
    }
    table = spec.TableSpec(
        name="t", vocabulary_size=vocab, dim=dim, combiner=combiner, initializer=spec.RowIdInitializer()
    )
    return spec.EmbeddingSpec(
        tables=(table,), features=tuple(readers[name] for name in features), optimizer=optimizer, **options
    )


@st.composite
def quantizations(draw):
    """A QuantizationSpec: 2 to 2**20 levels over a range inside or around the tables' values (N(0, 1)),
    bounds that are not round numbers included."""
    lower = draw(st.floats(-3.0, 1.0, width=32))
    upper = lower + draw(st.floats(0.015625, 4.0, width=32))
    num_buckets = draw(st.one_of(st.integers(2, 20), st.sampled_from([255, 256, 2**16, 2**20])))
    return spec.QuantizationSpec(num_buckets=num_buckets, lower=lower, upper=upper)


@st.composite
def values_near_levels(draw, quantization, size=64):
    """float32 values for `quantization`: near its levels and near the midpoints between them (a few
    ulps either side, where the rounding decides), inside and outside [lower, upper], inf and NaN."""
    lower, upper, quantum = quantization.float32_parameters()
    k = np.array(draw(st.lists(st.integers(-3, min(quantization.num_buckets + 2, 2**20)), min_size=size,
                               max_size=size)), np.float32)  # fmt: skip
    half = np.array(draw(st.lists(st.sampled_from([0.0, 0.5, -0.5]), min_size=size, max_size=size)), np.float32)
    base = (k + half) * quantum + lower
    ulps = np.array(draw(st.lists(st.integers(-3, 3), min_size=size, max_size=size)), np.int32)
    near = (base.view(np.int32) + ulps).view(np.float32)
    spread = np.array(draw(st.lists(st.floats(-10.0, 10.0, width=32), min_size=8, max_size=8)), np.float32)
    return np.concatenate([near, spread, np.float32([np.inf, -np.inf, np.nan, -0.0, 0.0, lower, upper])])
