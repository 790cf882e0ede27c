"""Smoke test of `python -m benchmarks runner`: a tiny MovieLens job is split into its parts. No timing is asserted."""

from __future__ import annotations

import pytest

from benchmarks import runner_overhead
from benchmarks.runner_overhead import PARTS, main, measure
from tests.movielens.test_movielens import make_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return make_wheel(tmp_path_factory.mktemp("wheel") / "recbole-1.2.1-py3-none-any.whl")


def test_the_parts_add_up_to_the_step_and_each_was_measured(wheel):
    result = measure(epochs=2, max_examples=None, profile_top=3, wheel=wheel)
    ms = result["ms"]
    assert result["steps_per_epoch"] == 3  # make_wheel's 600 training ratings in batches of 256
    for epoch in result["per_epoch_ms"]:
        assert sum(epoch[part] for part in PARTS) == pytest.approx(epoch["step"])  # runner: the rest of the wall time
    for part in ("kernels", "model", "input_fn", "ids", "checkpoint"):
        assert ms[part] > 0, part  # every wrapped function was called, so the patches were in place
    assert set(result["profiled"]) == {"runner", "engine_python"}
    assert all(0 < len(functions) <= 3 for functions in result["profiled"].values())
    assert any("runner/" in name or "api/" in name for name, _ in result["profiled"]["runner"])


def test_the_patches_are_removed_after_an_epoch(wheel, tmp_path):
    from tpu_embedding_shim.engine.engine import Engine
    from tpu_embedding_shim.movielens import model as ml_model

    originals = (Engine.forward, ml_model.DenseModel.forward, ml_model.sigmoid)
    estimator, data, _ = runner_overhead._job(None, str(tmp_path), wheel)
    runner_overhead.time_epoch(estimator, data, seed=1)
    assert (Engine.forward, ml_model.DenseModel.forward, ml_model.sigmoid) == originals


def test_the_command_prints_one_row_per_part(wheel, capsys):
    assert main(["--quick", "--epochs", "1", "--top", "2", "--wheel", wheel]) == 0
    out = capsys.readouterr().out
    assert "| part | ms per step | share |" in out
    for part in PARTS:
        assert f"| {runner_overhead.LABELS[part]} | " in out
    assert "| **everything but kernels and model** |" in out
    assert "The runner's costliest functions" in out


def test_the_cpu_clock_splits_the_step_too(wheel):
    result = measure(epochs=1, max_examples=None, profile_top=0, wheel=wheel, clock="cpu")
    epoch = result["per_epoch_ms"][0]
    assert result["clock"] == "cpu" and sum(epoch[part] for part in PARTS) == pytest.approx(epoch["step"])
    assert all(epoch[part] > 0 for part in ("kernels", "model", "input_fn", "ids"))
