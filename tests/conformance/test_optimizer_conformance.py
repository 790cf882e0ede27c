"""Optimizer updates against TensorFlow 2.15.1's own numbers.

Every case of category `optimizer` in data/index.json was produced by a
`tf.compat.v1.train` optimizer (or the raw `ResourceSparseApplyAdagradV2`
kernel) on `IndexedSlices` with repeated ids, over 1 to 5 steps. We replay the
same steps through `engine.optimizers` and compare the table after every step
and the final slots (rtol 1e-5, atol 1e-6).

How each TensorFlow optimizer maps to a spec:

- GradientDescentOptimizer -> SGDSpec.
- AdagradOptimizer -> AdagradSpec(initial_accumulator=...). TF sums repeated
  ids first, as a TPU does: `apply_sparse_update`.
- AdamOptimizer (non-lazy, WITH bias correction, epsilon outside the root) ->
  AdamSpec(lazy_adam=False, sum_inside_sqrt=False) with the learning rate
  `bias_corrected_learning_rate(lr, b1, b2)`, i.e. lr*sqrt(1-b2^t)/(1-b1^t)
  with t = step + 1: the recipe a TPU user follows to get bias correction.
  Non-lazy Adam updates every row, so the whole table goes through
  `apply_update` with zero gradients for rows not in the step.
- FtrlOptimizer -> FtrlSpec. TF's CPU optimizer passes `l2 + beta/(2 lr)` to
  its kernel, whose denominator is `P(a)/lr + 2 l2`; that is
  `(P(a) + beta)/lr + 2 l2`, the TPU formula with `beta` kept separate, so
  FtrlSpec takes TF's l2 and beta unchanged.
- raw ResourceSparseApplyAdagradV2 -> `apply_sequentially` (repeated ids
  applied one after another, with the kernel's epsilon). Not the TPU rule.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from tpu_embedding_shim.engine.optimizers import (
    apply_sequentially,
    apply_sparse_update,
    apply_update,
    bias_corrected_learning_rate,
    sum_duplicates,
    touches_all_rows,
)
from tpu_embedding_shim.spec import AdagradSpec, AdamSpec, FtrlSpec, SGDSpec

DATA = pathlib.Path(__file__).parent / "data"
RTOL, ATOL = 1e-5, 1e-6

# TensorFlow's slot names in the golden data -> ours (TPU names).
SLOT_NAMES = {
    "accumulator": "accumulators",
    "accum": "accumulators",
    "linear": "linears",
    "m": "momenta",
    "v": "velocities",
}


def _cases():
    index = json.loads((DATA / "index.json").read_text())
    return [case for case in index["cases"] if case["category"] == "optimizer"]


CASES = _cases()


@pytest.fixture(scope="module")
def golden():
    with np.load(DATA / "optimizer.npz") as archive:
        yield {key: archive[key] for key in archive.files}


def _arrays(case, golden):
    return {name: golden[f"{case['id']}__{name}"] for name in case["arrays"]}


def tf_float32_bias_corrected_learning_rate(lr, beta1, beta2):
    """`bias_corrected_learning_rate`, in TensorFlow's float32 arithmetic.

    AdamOptimizer keeps beta1**t and beta2**t in float32 variables (starting
    at beta, multiplied by beta after each update) and computes
    `lr * sqrt(1 - beta2_power) / (1 - beta1_power)` in float32. With beta2 =
    0.999, `1 - beta2_power` loses ~3e-5 of relative precision to
    cancellation, more than the 1e-5 tolerance, so to reproduce TensorFlow's
    numbers we repeat its float32 steps. The library helper computes the same
    formula in float64 (test_library_helper_is_close_to_tensorflows_float32_rate).
    """
    f32 = np.float32

    def rate(step):
        beta1_power, beta2_power = f32(beta1), f32(beta2)
        for _ in range(step):  # t = step + 1 factors of beta
            beta1_power = f32(beta1_power * f32(beta1))
            beta2_power = f32(beta2_power * f32(beta2))
        return float(f32(lr) * np.sqrt(f32(1) - beta2_power) / (f32(1) - beta1_power))

    return rate


def _spec_for(params):
    kind = params["optimizer"]
    lr = params["learning_rate"]
    if kind == "sgd":
        return SGDSpec(learning_rate=lr)
    if kind in ("adagrad", "adagrad_raw_v2"):
        return AdagradSpec(learning_rate=lr, initial_accumulator=params["initial_accumulator_value"])
    if kind == "adam":
        b1, b2 = params["beta1"], params["beta2"]
        return AdamSpec(
            learning_rate=tf_float32_bias_corrected_learning_rate(lr, b1, b2),
            beta1=b1,
            beta2=b2,
            epsilon=params["epsilon"],
            lazy_adam=False,
            sum_inside_sqrt=False,
        )
    if kind == "ftrl":
        return FtrlSpec(
            learning_rate=lr,
            learning_rate_power=params["learning_rate_power"],
            initial_accumulator_value=params["initial_accumulator_value"],
            l1_regularization_strength=params["l1_regularization_strength"],
            l2_regularization_strength=params["l2_regularization_strength"],
            beta=params["beta"],
        )
    raise AssertionError(f"no mapping for optimizer {kind!r}")


def _initial_slots(case, arrays):
    return {SLOT_NAMES[name]: arrays[f"slot_{name}_init"] for name in case["params"]["slot_names"]}


def _replay(case, arrays, spec):
    """Yields (step, table, slots) after each step."""
    table = arrays["table_init"]
    slots = _initial_slots(case, arrays)
    offsets = arrays["step_offsets"]
    raw = case["params"]["optimizer"] == "adagrad_raw_v2"
    for step in range(len(offsets) - 1):
        ids = arrays["step_ids"][offsets[step] : offsets[step + 1]]
        grads = arrays["step_grads"][offsets[step] : offsets[step + 1]]
        if raw:
            table, slots = apply_sequentially(spec, table, slots, ids, grads, step, epsilon=case["params"]["epsilon"])
        else:
            table, slots = apply_sparse_update(spec, table, slots, ids, grads, step)
        yield step, table, slots


@pytest.mark.parametrize("case", CASES, ids=[f"{c['id']}-{c['params']['optimizer']}" for c in CASES])
def test_matches_tensorflow(case, golden):
    arrays = _arrays(case, golden)
    spec = _spec_for(case["params"])
    expected_tables = arrays["table_per_step"]
    steps = 0
    for step, table, slots in _replay(case, arrays, spec):
        np.testing.assert_allclose(
            table,
            expected_tables[step],
            rtol=RTOL,
            atol=ATOL,
            err_msg=f"{case['id']}: table after step {step}",
        )
        steps += 1
        final_slots = slots  # TensorFlow's slots are recorded after the last step only
    assert steps == expected_tables.shape[0] == case["params"]["n_steps"]
    np.testing.assert_allclose(table, arrays["table_final"], rtol=RTOL, atol=ATOL)
    for tf_name in case["params"]["slot_names"]:
        np.testing.assert_allclose(
            final_slots[SLOT_NAMES[tf_name]],
            arrays[f"slot_{tf_name}_final"],
            rtol=RTOL,
            atol=ATOL,
            err_msg=f"{case['id']}: final slot {tf_name!r}",
        )


ADAM_CASES = [c for c in CASES if c["params"]["optimizer"] == "adam"]


@pytest.mark.parametrize("case", ADAM_CASES, ids=[c["id"] for c in ADAM_CASES])
def test_adam_step_numbering_is_global_step_plus_one(case, golden):
    """TF's beta powers end at beta**(S+1) after S steps: the update at global
    step k used beta**(k+1), hence t = step + 1 in the learning-rate function."""
    arrays = _arrays(case, golden)
    n_steps = case["params"]["n_steps"]
    for name, beta in (("beta1_power_final", case["params"]["beta1"]), ("beta2_power_final", case["params"]["beta2"])):
        assert math.isclose(float(arrays[name]), beta ** (n_steps + 1), rel_tol=1e-5, abs_tol=1e-12)


@pytest.mark.parametrize("case", ADAM_CASES[:1], ids=[c["id"] for c in ADAM_CASES[:1]])
def test_adam_whole_table_by_hand(case, golden):
    """The same replay written out: non-lazy Adam sends the whole table, with
    zero gradients for rows not in the step, through apply_update."""
    arrays = _arrays(case, golden)
    spec = _spec_for(case["params"])
    assert touches_all_rows(spec)
    table = arrays["table_init"]
    slots = _initial_slots(case, arrays)
    offsets = arrays["step_offsets"]
    for step in range(len(offsets) - 1):
        ids, grads = sum_duplicates(
            arrays["step_ids"][offsets[step] : offsets[step + 1]],
            arrays["step_grads"][offsets[step] : offsets[step + 1]],
        )
        dense = np.zeros_like(table)
        dense[ids] = grads
        table, slots = apply_update(spec, table, slots, dense, step)
        np.testing.assert_allclose(table, arrays["table_per_step"][step], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("beta1, beta2", [(0.9, 0.999), (0.5, 0.5), (0.0, 0.5), (0.9, 0.5)])
def test_library_helper_is_close_to_tensorflows_float32_rate(beta1, beta2):
    exact = bias_corrected_learning_rate(0.25, beta1, beta2)
    tf_like = tf_float32_bias_corrected_learning_rate(0.25, beta1, beta2)
    for step in range(6):
        assert math.isclose(exact(step), 0.25 * math.sqrt(1 - beta2 ** (step + 1)) / (1 - beta1 ** (step + 1)))
        assert math.isclose(exact(step), tf_like(step), rel_tol=1e-4)


RAW_CASES = [c for c in CASES if c["params"]["optimizer"] == "adagrad_raw_v2"]


def test_raw_adagrad_differs_from_the_tpu_rule_when_ids_repeat(golden):
    """Summing repeated ids first (TPU) and applying them one by one (raw
    kernel) give different tables whenever a step repeats an id."""
    differing = 0
    for case in RAW_CASES:
        arrays = _arrays(case, golden)
        offsets = arrays["step_offsets"]
        ids = arrays["step_ids"][offsets[0] : offsets[1]]
        grads = arrays["step_grads"][offsets[0] : offsets[1]]
        if len(np.unique(ids)) == len(ids) or case["params"]["epsilon"]:
            continue
        spec = _spec_for(case["params"])
        slots = _initial_slots(case, arrays)
        summed, _ = apply_sparse_update(spec, arrays["table_init"], slots, ids, grads, 0)
        sequential, _ = apply_sequentially(spec, arrays["table_init"], slots, ids, grads, 0)
        np.testing.assert_allclose(sequential, arrays["table_per_step"][0], rtol=RTOL, atol=ATOL)
        assert not np.allclose(summed, sequential, rtol=RTOL, atol=ATOL)
        differing += 1
    assert differing >= 1, "no raw-kernel case with repeated ids in its first step"


def test_every_optimizer_case_is_covered():
    kinds = {c["params"]["optimizer"] for c in CASES}
    assert kinds == {"sgd", "adagrad", "adagrad_raw_v2", "adam", "ftrl"}
    assert len(CASES) == 70
