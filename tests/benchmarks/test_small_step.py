"""The small-step benchmark runs (quick sizes): both modes, both workloads, or a note that numba is missing."""

from benchmarks.small_step import main


def test_small_step_benchmark_runs(capsys):
    assert main(["--quick", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    if "not available" in out:  # the test-extra-only venv: no numba, nothing to time
        return
    for workload in ("migration", "main"):
        for mode in ("batched", "per-feature"):
            assert any(line.split()[:2] == [workload, mode] for line in out.splitlines()), (workload, mode)
