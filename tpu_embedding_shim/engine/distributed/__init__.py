"""The engine over several processes: tables sharded across ranks, the numbers of one process.

A program started with `mpiexec -n W python program.py` is W ranks. Each
builds a `DistributedEngine` from the same spec, feeds it its slice of the
global batch, and gets the activations of its examples; rank r owns shard r
of every table and slot (TensorFlow's `div` / `mod` host sharding). Started
without mpiexec, the same program runs as one process. See
docs/distributed.md.

- `communicator.py`: the `Communicator` protocol, `SingleProcess`, `communicator()`;
- `mpi.py`: `MPICommunicator` (mpi4py, imported only when one is built);
- `ownership.py`: which rank owns which rows;
- `exchange.py`: the all-to-all exchanges of a step;
- `agreement.py`: every rank checks, then all agree before anything is written;
- `bundle.py`: a TensorFlow checkpoint written by every rank at once (its rows each);
- `statistics.py`: lookup statistics of the global batch, written by rank 0;
- `engine.py`: `DistributedEngine`.
"""

from .agreement import PeerFailedError, agree
from .bundle import write_collectively
from .communicator import Communicator, SingleProcess, communicator, launched_world_size
from .engine import DistributedEngine, DistributedLookupResult
from .mpi import MPICommunicator
from .ownership import Ownership

__all__ = [
    "DistributedEngine",
    "DistributedLookupResult",
    "Communicator",
    "SingleProcess",
    "MPICommunicator",
    "communicator",
    "launched_world_size",
    "PeerFailedError",
    "agree",
    "Ownership",
    "write_collectively",
]
