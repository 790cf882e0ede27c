"""Smoke test of `python -m benchmarks memory`: each case runs in a fresh process and is set against its budget.
No memory figure is asserted beyond being measured."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import memory
from tests.movielens.test_movielens import make_wheel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return make_wheel(tmp_path_factory.mktemp("wheel") / "recbole-1.2.1-py3-none-any.whl")


def test_the_peak_is_reset_to_the_resident_set():
    import numpy as np

    block = np.ones(20 * 2**20 // 8)  # 20 MB resident, then freed
    del block
    memory.reset_peak()
    assert memory._status_kb("VmHWM") <= memory._status_kb("VmRSS") + 2048


@pytest.mark.parametrize("case", memory.CASES)
def test_each_case_measures_its_step_and_budget(case, wheel):
    r = memory.measure_case(case, quick=True, wheel=wheel)
    assert r["peak_kb"] >= r["before_kb"] >= r["built_kb"] > 0 and r["base_kb"] > 0
    assert r["tables"] > 0 and r["activations"] > 0 and r["ids"] > 0
    assert r["budget"] == r["tables"] + r["slots"] + 2 * (r["activations"] + r["ids"])
    if case == "main-uniform":  # quick: 50,000 x 32 float32 and Adagrad's one slot
        assert r["tables"] == r["slots"] == 50_000 * 32 * 4


def test_the_command_prints_a_row_per_case(wheel):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "memory", "--quick", "--no-cold-start", "--wheel", wheel],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| case | base, MB | peak - base, MB |" in proc.stdout
    for case in memory.CASES:
        assert f"| `{case}` | " in proc.stdout
    assert "failed" not in proc.stdout
