"""`MPICommunicator`: the `Communicator` protocol on mpi4py's COMM_WORLD (or any mpi4py communicator).

mpi4py is imported when one is built, never when this module is imported,
so the package imports without it. Buffers go to MPI as numpy arrays
(`Alltoallv`, `Allreduce`, `Allgather`: no pickling); only the small objects of
`allgather_object` / `bcast_object` are pickled.

An uncaught exception on one rank would leave the others waiting in their
next collective forever: a Python process that ends by an exception
finalizes MPI normally, and MPICH then waits for the other ranks. So, by
default, building one chains `sys.excepthook` to abort the whole job
(`MPI_Abort`) after the traceback is printed, which is what `python -m
mpi4py program.py` does. A process killed by a signal, or ended by
`os._exit`, is noticed by MPICH's launcher, which ends every rank.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import aligned
from . import blas_threads

__all__ = ["MPICommunicator"]

_hook_installed = False


class MPICommunicator:
    """The `Communicator` protocol over an mpi4py communicator.

    Args:
      comm: an `mpi4py.MPI.Comm`; None for `MPI.COMM_WORLD`.
      abort_on_uncaught_exception: chain `sys.excepthook` so that an
        uncaught exception on this rank aborts the job instead of leaving
        the other ranks waiting (once per process).
      share_blas_threads: with more than one process, limit numpy's BLAS
        to this process's share of the host's cores, unless the
        environment names a thread count (`blas_threads.py`).

    Raises:
      ImportError: mpi4py is not installed.
    """

    def __init__(self, comm: Any = None, *, abort_on_uncaught_exception: bool = True, share_blas_threads: bool = True):
        from mpi4py import MPI  # initializes MPI (once per process)

        self._mpi = MPI
        self._comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = int(self._comm.Get_rank())
        self.size = int(self._comm.Get_size())
        self._ops = {"min": MPI.MIN, "max": MPI.MAX, "sum": MPI.SUM}
        if abort_on_uncaught_exception:
            _abort_on_uncaught_exception()
        self.blas_threads = blas_threads.share_blas_threads() if share_blas_threads and self.size > 1 else None

    def alltoallv(
        self, send: np.ndarray, send_counts: Sequence[int] | np.ndarray, recv_counts: Sequence[int] | np.ndarray
    ) -> np.ndarray:
        send = np.ascontiguousarray(send).reshape(-1)
        sent = np.asarray(send_counts, dtype=np.int64)
        expected = np.asarray(recv_counts, dtype=np.int64)
        if sent.shape != (self.size,) or expected.shape != (self.size,):
            raise ValueError(f"Arguments `send_counts` and `recv_counts` must hold {self.size} counts each.")
        if int(sent.sum()) != send.shape[0]:
            raise ValueError(f"`send_counts` add up to {int(sent.sum())}; `send` holds {send.shape[0]}.")
        recv = aligned.empty((int(expected.sum()),), send.dtype)  # rows at cache-line boundaries, as in a table
        self._comm.Alltoallv([send, (sent, _offsets(sent))], [recv, (expected, _offsets(expected))])
        return recv

    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        if op not in self._ops:
            raise ValueError(f"Argument `op` must be one of {list(self._ops)}. Received: {op!r}.")
        send = np.ascontiguousarray(values, dtype=np.int64)
        recv = np.empty_like(send)
        self._comm.Allreduce(send, recv, op=self._ops[op])
        return recv

    def allgather(self, values: np.ndarray) -> np.ndarray:
        send = np.ascontiguousarray(values)
        recv = np.empty((self.size, *send.shape), dtype=send.dtype)
        self._comm.Allgather(send, recv)
        return recv

    def allgather_object(self, obj: Any) -> list[Any]:
        return list(self._comm.allgather(obj))

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        return self._comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self._comm.Barrier()

    def __repr__(self) -> str:
        return f"MPICommunicator(rank={self.rank}, size={self.size}, library={self.library()!r})"

    def library(self) -> str:
        """The MPI library's first line of version text, e.g. 'MPICH Version: 5.0.2'."""
        return " ".join(self._mpi.Get_library_version().split("\n", 1)[0].split())


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _abort_on_uncaught_exception() -> None:
    """Chains `sys.excepthook`: print the traceback as before, then make MPI abort the job at exit."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        from mpi4py.run import set_abort_status  # mpi4py's own `python -m mpi4py` path

        set_abort_status(1)

    sys.excepthook = hook
