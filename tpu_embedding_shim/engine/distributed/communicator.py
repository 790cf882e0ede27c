"""The collectives the distributed engine uses, behind one small interface.

A `Communicator` is a fixed group of `size` processes, this one being
`rank`. The engine and the replicated dense parts need seven operations, all collective (every rank calls
them, in the same order):

- `alltoallv(send, send_counts, recv_counts)`: rank r sends
  `send[offsets[j]:offsets[j] + send_counts[j]]` to rank j and receives
  `recv_counts[i]` elements from each rank i, concatenated in rank order
  (1-D numpy arrays, one dtype);
- `allgather(values)`: every rank's array (the same shape and dtype on
  every rank), stacked in rank order: what cross-replica sums of dense
  gradients are built from, so every rank adds the same terms in the same
  order and gets the same bits;
- `allreduce(values, op)`: element-wise 'min', 'max' or 'sum' of a small
  int64 array over the ranks;
- `allgather_object(obj)`, `bcast_object(obj, root)`: small Python objects
  (pickled);
- `barrier()`.

Two implementations: `SingleProcess` (size 1, no MPI: `alltoallv` hands
back `send` itself, the others copy) and `MPICommunicator` (`mpi.py`, mpi4py's `COMM_WORLD`).
`communicator()` picks MPI only when the process was started by an MPI
launcher with more than one rank, so a plain `python` run never imports
mpi4py. A torch.distributed or other adapter only has to implement this
protocol.

>>> import numpy as np
>>> comm = SingleProcess()
>>> comm.rank, comm.size
(0, 1)
>>> comm.alltoallv(np.array([4, 5, 6]), [3], [3]).tolist()
[4, 5, 6]
>>> comm.allreduce(np.array([2, 7]), "min").tolist()
[2, 7]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Communicator", "SingleProcess", "communicator", "launched_world_size", "REDUCTIONS", "Counts"]

REDUCTIONS = ("min", "max", "sum")

Counts = Sequence[int] | np.ndarray  # one count per rank

# Environment variables through which MPI launchers tell a process the size of its world (PMI launchers such
# as MPICH's and Intel MPI's hydra: PMI_SIZE; Open MPI: OMPI_COMM_WORLD_SIZE; MVAPICH2). Under another
# launcher, `communicator("mpi")` asks MPI itself.
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


@runtime_checkable
class Communicator(Protocol):
    """A group of `size` processes; this one is `rank` (0 <= rank < size). Every method is collective."""

    rank: int
    size: int

    def alltoallv(self, send: np.ndarray, send_counts: Counts, recv_counts: Counts) -> np.ndarray:
        """Chunk j of the 1-D `send` (`send_counts[j]` elements, in order) to rank j; returns what every
        rank sent here, rank 0's chunk first (`recv_counts[i]` elements from rank i)."""
        ...

    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        """The element-wise `op` ('min', 'max' or 'sum') of a small int64 array over every rank."""
        ...

    def allgather(self, values: np.ndarray) -> np.ndarray:
        """`[size, *values.shape]`: every rank's `values` (same shape and dtype everywhere), in rank order."""
        ...

    def allgather_object(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (pickled: keep it small)."""
        ...

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        """`root`'s `obj` on every rank."""
        ...

    def barrier(self) -> None:
        """Returns once every rank has called it."""
        ...


class SingleProcess:
    """The world of one process: `alltoallv` returns `send` (a view, no copy), the others copies. What a run
    without an MPI launcher uses."""

    rank = 0
    size = 1

    def alltoallv(self, send: np.ndarray, send_counts: Counts, recv_counts: Counts) -> np.ndarray:
        send = np.asarray(send).reshape(-1)
        if list(send_counts) != [send.shape[0]] or list(recv_counts) != [send.shape[0]]:
            raise ValueError(
                f"A world of one rank sends all of `send` to itself: counts must be [{send.shape[0]}]. "
                f"Received send_counts={list(send_counts)}, recv_counts={list(recv_counts)}."
            )
        return send  # no copy: the caller gets its own buffer back (a step's exchange never writes either after)

    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        _check_op(op)
        return np.array(values, dtype=np.int64)

    def allgather(self, values: np.ndarray) -> np.ndarray:
        return np.array(values)[None]

    def allgather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        if root != 0:
            raise ValueError(f"Argument `root` must be a rank in [0, 1). Received: {root!r}.")
        return obj

    def barrier(self) -> None:
        return None

    def __repr__(self) -> str:
        return "SingleProcess()"


def _check_op(op: str) -> None:
    if op not in REDUCTIONS:
        raise ValueError(f"Argument `op` must be one of {list(REDUCTIONS)}. Received: {op!r}.")


def launched_world_size(environ: Mapping[str, str] | None = None) -> int:
    """The world size an MPI launcher announced in the environment; 1 when none did.

    >>> launched_world_size({"PMI_SIZE": "4", "PMI_RANK": "2"}), launched_world_size({})
    (4, 1)
    """
    variables = os.environ if environ is None else environ
    for name in _SIZE_VARIABLES:
        value = variables.get(name, "")
        if value.strip().isdigit():
            return int(value)
    return 1


def communicator(kind: str = "auto") -> Communicator:
    """The communicator of this process.

    Args:
      kind: 'auto' (MPI when an MPI launcher started this process with more
        than one rank, see `launched_world_size`; else `SingleProcess`),
        'mpi' (always mpi4py's COMM_WORLD: a 1-rank world without a
        launcher) or 'single'.

    Raises:
      ImportError: MPI is wanted but mpi4py is not installed (`pip install
        mpi4py==4.1.2 mpich==5.0.2 threadpoolctl`).
    """
    if kind not in ("auto", "mpi", "single"):
        raise ValueError(f"Argument `kind` must be one of 'auto', 'mpi', 'single'. Received: {kind!r}.")
    size = launched_world_size()
    if kind == "single" or (kind == "auto" and size <= 1):
        return SingleProcess()
    from .mpi import MPICommunicator

    try:
        return MPICommunicator()  # imports mpi4py, which initializes MPI
    except ImportError as error:
        started = f"This process was started by an MPI launcher with {size} ranks, but " if size > 1 else ""
        raise ImportError(
            f"{started}mpi4py is not installed ({error}). Install it with the mpich wheel (which brings MPI and "
            "mpiexec): `pip install mpi4py==4.1.2 mpich==5.0.2 threadpoolctl` (the `distributed` extra; in the "
            "project's checkout: pip install -e '.[distributed]')."
        ) from None
