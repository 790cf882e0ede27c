"""Launching MPI jobs from pytest: `mpiexec -n W python script ...`, bounded in time.

The mpich wheel installs `mpiexec` beside the venv's python, so the venv's
bin directory goes first on PATH. Tests that need MPI are marked
`requires_mpi`: they skip, saying why, where mpi4py or mpiexec is missing.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
MPIEXEC = shutil.which("mpiexec", path=PATH)
HAS_MPI4PY = importlib.util.find_spec("mpi4py") is not None

requires_mpi = pytest.mark.skipif(
    not HAS_MPI4PY or MPIEXEC is None,
    reason="needs mpi4py and mpiexec: pip install mpi4py==4.1.2 mpich==5.0.2 threadpoolctl (the distributed extra)"
    if not HAS_MPI4PY
    else "mpi4py is installed but no mpiexec is on PATH",
)


def environment() -> dict[str, str]:
    """This process's environment for a job: the venv's bin first, the checkout importable, one thread per
    rank, and no MPI launcher variables of our own (pytest itself may run under one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_", "HYDRA_"))}
    env.update(PATH=PATH, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return env


def mpirun(
    world_size: int, script: Path, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Runs `script` on `world_size` ranks (`env`: more environment variables); the completed process
    (text output). Raises on a timeout."""
    return subprocess.run(
        [str(MPIEXEC), "-n", str(world_size), sys.executable, str(script), *map(str, args)],
        env={**environment(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_program(world_size: int, script: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """`script` as one plain process (world_size 1: the reference, no launcher) or under `mpiexec -n
    world_size`; asserts it ended well and returns the completed process."""
    if world_size == 1:
        job = subprocess.run(
            [sys.executable, str(script), *map(str, args)],
            env=environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    else:
        job = mpirun(world_size, script, *args, timeout=timeout)
    assert job.returncode == 0, job.stdout + job.stderr
    return job


def run_worker(recipe: dict, world_size: int) -> dict:
    """`worker.py` on `world_size` ranks with `recipe`: the arrays it saved (out.npz), by name."""
    import json
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as scratch:
        recipe_path, out_path = Path(scratch, "recipe.json"), Path(scratch, "out.npz")
        recipe_path.write_text(json.dumps(recipe))
        job = mpirun(world_size, HERE / "worker.py", recipe_path, out_path)
        assert job.returncode == 0, job.stdout + job.stderr
        with np.load(out_path) as got:
            return {key: got[key] for key in got.files}
