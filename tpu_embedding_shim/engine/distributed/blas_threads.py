"""Each process of an MPI job gives numpy's BLAS its share of the host's cores, unless told otherwise.

numpy's wheels bring OpenBLAS, which starts one thread per core in every
process, and its threads spin while they wait for work. Under `mpiexec -n
N` on a host with N cores, every process's matrix products then fight
over the same cores: the MovieLens job on two processes and 2 cores took
59 s, against 9.8 s with one BLAS thread per process (the same AUC,
docs/distributed.md). So an `MPICommunicator` of more than one process
limits BLAS to `cores // processes on this host` threads (at least 1),
through threadpoolctl (the `distributed` extra), when:

- no thread count was asked for in the environment (`OPENBLAS_NUM_THREADS`,
  `OMP_NUM_THREADS`, `MKL_NUM_THREADS` or `BLIS_NUM_THREADS`), and the
  communicator was not built with `share_blas_threads=False`;
- the launcher says how many of the job's processes share this host
  (MPICH's Hydra: `MPI_LOCALNRANKS`; Open MPI: `OMPI_COMM_WORLD_LOCAL_SIZE`);
  reading it costs no collective call, so a communicator built on some
  ranks only cannot hang here. Without it nothing is changed;
- BLAS runs more threads than that share.

The cores are this process's (`os.sched_getaffinity`): a launcher that
binds each process to its own cores has already shared them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

__all__ = ["share_blas_threads", "THREAD_VARIABLES", "LOCAL_SIZE_VARIABLES"]

log = logging.getLogger("tpu_embedding_shim")

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")  # MPICH's Hydra, Open MPI


def share_blas_threads(environ: Mapping[str, str] | None = None, cores: int | None = None) -> int | None:
    """Limits BLAS to this process's share of the host's cores; returns the new limit, or None when unchanged.

    `environ` (default `os.environ`) and `cores` (default this process's
    CPU affinity) are for tests."""
    variables = os.environ if environ is None else environ
    if any(variables.get(name, "").strip() for name in THREAD_VARIABLES):
        return None  # the user chose
    local = _local_processes(variables)
    if local is None or local <= 1:
        return None
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = max(1, cores // local)
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        log.warning(
            "%d processes share this host's %d cores, and numpy's BLAS may start a thread per core in each; "
            "install threadpoolctl (the `distributed` extra) or set OPENBLAS_NUM_THREADS=%d.",
            local,
            cores,
            share,
        )
        return None
    running = [pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"]
    if not running or max(running) <= share:
        return None
    threadpool_limits(limits=share, user_api="blas")  # called, not entered: the limit stays for the process
    log.info(
        "BLAS limited to %d thread(s) in this process: %d processes share this host's %d cores "
        "(set OPENBLAS_NUM_THREADS to choose).",
        share,
        local,
        cores,
    )
    return share


def _local_processes(variables: Mapping[str, str]) -> int | None:
    """How many of the job's processes run on this host, as the launcher announced it; None when none did."""
    for name in LOCAL_SIZE_VARIABLES:
        value = variables.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None
