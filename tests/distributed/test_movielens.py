"""The MovieLens job under `mpiexec -n 2`: the figures of one process, to float rounding.

On a small generated file in the real data's layout (tests/movielens), so
no download is needed; CI also runs the whole job on the real data under
`mpiexec -n 2` (.ci/run).
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.movielens.test_movielens import make_wheel
from tpu_embedding_shim.runner.export import load_exported

from .launch import environment, mpirun, requires_mpi

pytestmark = requires_mpi

OPTIONS = ("--epochs", "2", "--batch-size", "64", "--no-plot")


def results(output_dir):
    return json.loads((output_dir / "results.json").read_text())


def test_the_job_on_two_processes_gives_the_figures_of_one(tmp_path):
    wheel = make_wheel(tmp_path / "recbole.whl")
    one = subprocess.run(
        [sys.executable, "-m", "tpu_embedding_shim", "movielens", "--wheel", wheel, "--output-dir", tmp_path / "one"]
        + list(OPTIONS),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert one.returncode == 0, one.stderr
    two = mpirun(
        2,
        "-m",
        "tpu_embedding_shim",
        "movielens",
        "--wheel",
        wheel,
        "--output-dir",
        tmp_path / "two",
        *OPTIONS,
        timeout=120,
    )
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("test AUC") == 3  # two epochs and the table, printed once (by replica 0)
    single, double = results(tmp_path / "one"), results(tmp_path / "two")
    assert single["replicas"] == 1 and double["replicas"] == 2
    assert double["global_step"] == single["global_step"]
    for key in ("test_auc", "test_log_loss", "train_loss"):
        assert double[key] == pytest.approx(single[key], abs=1e-4), key
    # replica 0 wrote each table as the replicas' rows arrived, block by block: one process's tables, to rounding
    one_export, two_export = load_exported(tmp_path / "one" / "export"), load_exported(tmp_path / "two" / "export")
    assert sorted(two_export.tables) == sorted(one_export.tables)
    for name, table in one_export.tables.items():
        np.testing.assert_allclose(two_export.tables[name], table, atol=1e-3, err_msg=name)
