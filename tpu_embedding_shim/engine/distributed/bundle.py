"""A TensorFlow checkpoint written by every rank at once: each rank its data file, rank 0 the index.

TensorFlow's sharded saves write one data file per device shard and one
index that maps each tensor (or each slice of a partitioned tensor) to its
file; a multi-host TPU job saves each table as one row slice per host.
`write_collectively` does the same with the ranks: rank r writes
`<prefix>.data-0000r-of-0000W` holding the tensors it passes (its slices of
the tables as `SlicedTensor` parts, plus anything it alone holds), then
rank 0 writes `<prefix>.index` from every rank's entries. No rank ever holds
another rank's rows.

Atomic across the ranks, as `write_bundle` is in one process: every file is
written under a temporary name and the ranks agree (`agreement.agree`)
after each phase; rank 0 removes an old index at the prefix before any new
data file takes its final name, and renames the new index last. A failure
on any rank raises on every rank and leaves no temporary file and no
checkpoint at the prefix (a reader needs the index).

>>> import os, tempfile, numpy as np
>>> from tpu_embedding_shim.engine.distributed import SingleProcess
>>> from tpu_embedding_shim.engine.tf_bundle import BundleReader, SlicedTensor
>>> prefix = os.path.join(tempfile.mkdtemp(), "model.ckpt-1")
>>> rows = np.arange(6, dtype=np.float32).reshape(3, 2)
>>> _ = write_collectively(SingleProcess(), prefix, {"t": SlicedTensor((3, 2), [(((0, 3), (0, -1)), rows)])})
>>> BundleReader(prefix).read("t").tolist()
[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import Any

from ..files import fsync_directory
from ..tf_bundle.naming import data_file, data_files, index_file
from ..tf_bundle.writer import write_data_shard, write_shared_index
from .agreement import agree
from .communicator import Communicator

__all__ = ["write_collectively"]


def write_collectively(comm: Communicator, prefix: str, tensors: Mapping[str, Any]) -> str:
    """Writes the checkpoint `prefix` from every rank's `tensors` (collective); returns `prefix`.

    Args:
      comm: the ranks; each calls this with the same `prefix`.
      prefix: the checkpoint's path without `.index` (a filesystem every
        rank sees: a shared one across hosts).
      tensors: this rank's tensors: whole arrays only it writes (rank 0
        the global step, say), and `SlicedTensor`s with only its parts.
        Together the ranks' parts must cover each sliced tensor.

    Raises:
      On every rank: this rank's error, or `PeerFailedError` naming the
      rank that failed. Nothing is left at `prefix`.
    """
    token = comm.bcast_object(secrets.token_hex(8) if comm.rank == 0 else None)
    final = data_file(prefix, comm.rank, comm.size)
    mine = f"{final}.tempstate{token}"
    index_temp = f"{index_file(prefix)}.tempstate{token}"
    try:
        entries, error = [], None
        try:
            entries = write_data_shard(prefix, tensors, shard=comm.rank, num_shards=comm.size, token=token)
        except Exception as caught:
            error = caught
        agree(comm, error, "write a checkpoint: data files", prefix=prefix)
        every = comm.allgather_object(entries)
        error = None
        if comm.rank == 0:
            try:
                write_shared_index(prefix, every, token=token)
                if os.path.lexists(index_file(prefix)):  # the old checkpoint goes before its data files are replaced
                    os.remove(index_file(prefix))
            except Exception as caught:
                error = caught
        agree(comm, error, "write a checkpoint: index")
        error = None
        try:
            os.replace(mine, final)
        except Exception as caught:
            error = caught
        agree(comm, error, "write a checkpoint: data files in place")
        error = None
        if comm.rank == 0:
            try:
                os.replace(index_temp, index_file(prefix))
                directory = os.path.dirname(prefix) or "."
                fsync_directory(directory)
                finals = {data_file(prefix, shard, comm.size) for shard in range(comm.size)}
                for stale in set(data_files(prefix)) - finals:  # an older checkpoint's extra shards
                    os.remove(stale)
            except Exception as caught:
                error = caught
        agree(comm, error, "write a checkpoint: index in place")
    finally:
        for path in (mine, index_temp):
            if os.path.lexists(path):
                os.remove(path)
    return prefix
