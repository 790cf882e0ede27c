"""`mpiexec -n W python blas_program.py DIR [keep]`: each rank writes DIR/rank<r>.json, its BLAS threads before
and after its communicator is built (`engine/distributed/blas_threads.py`); with `keep`, an
`MPICommunicator(share_blas_threads=False)`."""

import json
import os
import sys
from pathlib import Path

from threadpoolctl import threadpool_info

from tpu_embedding_shim.engine.distributed import MPICommunicator, communicator

before = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
comm = MPICommunicator(share_blas_threads=False) if sys.argv[2:] == ["keep"] else communicator()
after = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
seen = {"rank": comm.rank, "before": before, "after": after, "limit": comm.blas_threads}
seen["cores"] = len(os.sched_getaffinity(0))
Path(sys.argv[1], f"rank{comm.rank}.json").write_text(json.dumps(seen))
