"""Each process of an MPI job gives BLAS its share of the host's cores (engine/distributed/blas_threads.py)."""

import json
import tempfile
from pathlib import Path

import pytest

from tpu_embedding_shim.engine.distributed import blas_threads

from .launch import HERE, mpirun, requires_mpi

threadpoolctl = pytest.importorskip("threadpoolctl", reason="the `distributed` extra brings threadpoolctl")


def _blas_threads():
    return [pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"]


@pytest.fixture
def blas_at_four():
    """BLAS set to 4 threads for the test, and its own count back after it."""
    if not _blas_threads():
        pytest.skip("no BLAS library with threads is loaded (numpy's wheels bring OpenBLAS)")
    with threadpoolctl.threadpool_limits(limits=None, user_api="blas"):  # restores the counts on exit
        threadpoolctl.threadpool_limits(limits=4, user_api="blas")
        yield


def test_two_processes_on_two_cores_get_one_thread_each(blas_at_four):
    assert blas_threads.share_blas_threads({"MPI_LOCALNRANKS": "2"}, cores=2) == 1
    assert set(_blas_threads()) == {1}


def test_open_mpis_variable_counts_too_and_a_share_is_never_below_one(blas_at_four):
    assert blas_threads.share_blas_threads({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, cores=2) == 1
    assert set(_blas_threads()) == {1}


@pytest.mark.parametrize(
    "environ, cores",
    [
        ({"MPI_LOCALNRANKS": "2", "OPENBLAS_NUM_THREADS": "4"}, 2),  # the user chose
        ({"MPI_LOCALNRANKS": "2", "OMP_NUM_THREADS": "3"}, 2),
        ({"PMI_SIZE": "2"}, 2),  # no launcher variable says how many share this host
        ({"MPI_LOCALNRANKS": "1"}, 2),  # alone on this host
        ({"MPI_LOCALNRANKS": "2"}, 8),  # 4 threads are within the share of 4
    ],
)
def test_left_alone(blas_at_four, environ, cores):
    assert blas_threads.share_blas_threads(environ, cores=cores) is None
    assert set(_blas_threads()) == {4}


def _job(env, *args):
    """What each of two ranks saw (a file each: their printed lines could interleave)."""
    with tempfile.TemporaryDirectory() as out:
        job = mpirun(2, HERE / "blas_program.py", out, *args, env=env)
        assert job.returncode == 0, job.stdout + job.stderr
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(2)]


@requires_mpi
def test_under_mpiexec_each_rank_takes_its_share_unless_the_environment_names_a_count():
    base = dict.fromkeys(blas_threads.THREAD_VARIABLES, "")  # empty: no count named (launch.py names one)
    ranks = _job(base)
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    for r in ranks:
        share = max(1, r["cores"] // 2)
        assert r["after"] == [min(n, share) for n in r["before"]]
        assert r["limit"] == (share if max(r["before"]) > share else None)
    for r in _job({**base, "OPENBLAS_NUM_THREADS": "2"}):
        assert r["after"] == r["before"] == [2] and r["limit"] is None
    for r in _job(base, "keep"):  # MPICommunicator(share_blas_threads=False)
        assert r["after"] == r["before"] and r["limit"] is None
        assert max(r["before"]) > max(1, r["cores"] // 2) or r["cores"] == 1  # so keeping was a choice here
