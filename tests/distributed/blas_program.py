"""`mpiexec -n W python blas_program.py`: each rank prints one JSON line, its BLAS threads once its communicator
is built (`engine/distributed/blas_threads.py`)."""

import json
import os

from threadpoolctl import threadpool_info

from tpu_embedding_shim.engine.distributed import communicator

before = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
comm = communicator()
after = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
cores = len(os.sched_getaffinity(0))
print(json.dumps({"rank": comm.rank, "before": before, "after": after, "limit": comm.blas_threads, "cores": cores}))
