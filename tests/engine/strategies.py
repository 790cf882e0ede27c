"""Hypothesis strategies, step inputs and bit comparisons shared by the engine's tests."""

import numpy as np
from hypothesis import strategies as st


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
