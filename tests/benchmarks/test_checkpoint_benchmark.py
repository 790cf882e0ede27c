"""Smoke test of `python -m benchmarks checkpoints`: tiny sizes, every operation runs and is checked. No timing is
asserted."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from benchmarks import checkpoints
from benchmarks.checkpoints import OPERATIONS, main, measure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_operation_is_measured_after_its_check(tmp_path):
    result = measure(rows=300, dim=8, repeats=2, directory=str(tmp_path))
    assert result["bytes"] == 2 * 300 * 8 * 4
    assert set(result["median_mbs"]) == {key for key, _ in OPERATIONS}
    assert all(result["best_mbs"][key] >= result["median_mbs"][key] > 0 for key, _ in OPERATIONS)
    assert os.listdir(tmp_path) == []  # its files are removed


def test_a_read_that_differs_from_what_was_written_fails_the_run(tmp_path, monkeypatch):
    real = checkpoints.operations

    def broken(arrays, directory):
        ops = real(arrays, directory)
        ops["npy_read"] = lambda: {name: array + 1 for name, array in arrays.items()}
        return ops

    monkeypatch.setattr(checkpoints, "operations", broken)
    with pytest.raises(AssertionError, match="npy_read: items read back differs"):
        measure(rows=10, dim=2, repeats=1, directory=str(tmp_path))


def test_the_command_prints_one_row_per_operation(capsys):
    assert main(["--quick", "--in-process", "--rows", "500"]) == 0
    out = capsys.readouterr().out
    assert "Checkpoints: 500 x 64 float32 table + its Adagrad slot" in out
    for _, label in OPERATIONS:
        assert f"| {label} | " in out


def test_each_crc_backend_runs_in_its_own_process():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "checkpoints", "--quick", "--rows", "500"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    header = "| operation | CRC-32C: numba | CRC-32C: numpy |"
    assert header in proc.stdout, proc.stderr
    if importlib.util.find_spec("numba") is not None:  # the numba process turns the fast kernels on itself
        assert proc.returncode == 0, proc.stderr
        assert "not measured" not in proc.stdout
    else:  # the test extra alone: the numba column says why it is empty
        assert proc.returncode == 1 and "- CRC-32C numba: not measured" in proc.stdout
