"""The communicator interface: the one-process world, and how `communicator()` chooses."""

import subprocess
import sys

import numpy as np
import pytest

from tpu_embedding_shim.engine.distributed import (
    Communicator,
    MPICommunicator,
    PeerFailedError,
    SingleProcess,
    agree,
    communicator,
    launched_world_size,
)

from .launch import ROOT, environment


def test_single_process_collectives_are_copies():
    comm = SingleProcess()
    assert isinstance(comm, Communicator)
    send = np.array([1.5, 2.5], np.float32)
    received = comm.alltoallv(send, [2], [2])
    assert received.tolist() == [1.5, 2.5] and received.dtype == np.float32 and received is not send
    assert comm.allreduce(np.array([3, -1]), "sum").tolist() == [3, -1]
    assert comm.allgather_object({"a": 1}) == [{"a": 1}]
    stacked = comm.allgather(send)
    assert stacked.tolist() == [[1.5, 2.5]] and stacked.dtype == np.float32 and stacked.shape == (1, 2)
    assert comm.bcast_object("x") == "x"
    assert comm.barrier() is None
    with pytest.raises(ValueError, match=r"counts must be \[2\]"):
        comm.alltoallv(send, [1], [1])
    with pytest.raises(ValueError, match=r"Argument `op` must be one of \['min', 'max', 'sum'\]. Received: 'avg'"):
        comm.allreduce(np.array([1]), "avg")
    with pytest.raises(ValueError, match="Argument `root` must be a rank in"):
        comm.bcast_object("x", root=1)


def test_agree_raises_this_ranks_error():
    comm = SingleProcess()
    agree(comm, None, "forward", training=True, step=3)
    with pytest.raises(KeyError, match="mine"):
        agree(comm, KeyError("mine"), "forward")
    error = PeerFailedError(2, "ValueError: bad id")
    assert error.rank == 2 and str(error).startswith("Rank 2 failed this call on its input (ValueError: bad id)")


@pytest.mark.parametrize(
    "environ, size",
    [
        ({}, 1),
        ({"PMI_SIZE": "3", "PMI_RANK": "0"}, 3),  # MPICH's hydra, Intel MPI, Slurm's PMI
        ({"OMPI_COMM_WORLD_SIZE": "2"}, 2),  # Open MPI
        ({"MV2_COMM_WORLD_SIZE": "4"}, 4),  # MVAPICH2
        ({"PMI_SIZE": "1"}, 1),
    ],
)
def test_launched_world_size(environ, size):
    assert launched_world_size(environ) == size


def test_a_plain_run_is_one_process_and_never_imports_mpi():
    script = (
        "import sys\n"
        "from tpu_embedding_shim.engine.distributed import communicator, SingleProcess\n"
        "assert isinstance(communicator(), SingleProcess)\n"
        "assert 'mpi4py' not in sys.modules, sorted(m for m in sys.modules if 'mpi' in m)\n"
    )
    job = subprocess.run([sys.executable, "-c", script], env=environment(), cwd=ROOT, capture_output=True, text=True)
    assert job.returncode == 0, job.stderr


def test_without_mpi4py_a_launched_process_says_what_to_install():
    """A process started by mpiexec (PMI_SIZE=2) where mpi4py is missing: an ImportError naming the extra,
    never a silent run of two unrelated one-process programs."""
    script = (
        "import sys\n"
        "sys.modules['mpi4py'] = None  # as if not installed\n"
        "from tpu_embedding_shim.engine.distributed import communicator\n"
        "try:\n"
        "    communicator()\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    env = dict(environment(), PMI_SIZE="2", PMI_RANK="0")
    job = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True)
    assert job.returncode == 0, job.stderr
    assert "started by an MPI launcher with 2 ranks, but mpi4py is not installed" in job.stdout
    assert "pip install mpi4py==4.1.2 mpich==5.0.2 threadpoolctl" in job.stdout


def test_communicator_kinds():
    assert isinstance(communicator("single"), SingleProcess)
    with pytest.raises(ValueError, match="Argument `kind` must be one of 'auto', 'mpi', 'single'. Received: 'tcp'"):
        communicator("tcp")
    assert MPICommunicator.__module__ == "tpu_embedding_shim.engine.distributed.mpi"  # importable without mpi4py
