"""Lookup statistics under mpiexec: the files one process writes for the global batch, written by rank 0.

`profile_data_directory` (engine/statistics.py) profiles the lookups of
sampled steps. Under `mpiexec -n N` each rank looks up its part of the
global batch; `DistributedStatistics` is a `LookupStatistics` on every rank
(the same seed: every rank samples the same steps) that, on a sampled step,
gathers the ranks' counts of each sampled table (ids per example, distinct
ids, ids per shard: small arrays, one `allgather_object` a sampled step)
and records them as one process records the global batch. Every rank holds
the same counts; `flush` writes them on rank 0 alone (collective: a failed
write raises on every rank), so the files, their names and their numbers
are those of one process that ran the global batches.

`DistributedEngine.forward` calls `record_step` once per training lookup.
"""

from __future__ import annotations

import numpy as np

from ...spec import EmbeddingSpec
from ..ragged import Ragged
from ..sharding import locate
from ..statistics import LookupStatistics
from .agreement import agree
from .communicator import Communicator

__all__ = ["DistributedStatistics"]


class DistributedStatistics(LookupStatistics):
    """`LookupStatistics` of the global batch, each rank feeding its examples (module docstring)."""

    def __init__(self, directory: str, spec: EmbeddingSpec, comm: Communicator):
        super().__init__(directory, spec)
        self.comm = comm

    def _local_counts(self, table: str, batches: dict[str, Ragged]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This rank's ids per example, distinct ids and ids per shard of `table`, as `Engine` counts them."""
        users = self.spec.features_of(table)
        lengths = [batches[f.name].row_lengths() for f in users]
        if len({len(x) for x in lengths}) == 1:  # one batch: ids per example summed over the features
            ids_per_example = np.sum(lengths, axis=0).astype(np.int64)
        else:  # features with their own example counts: each example counts on its own
            ids_per_example = np.concatenate(lengths).astype(np.int64)
        ids = np.concatenate([batches[f.name].values for f in users]).astype(np.int64)
        config = self.spec.table(table)
        shard, _ = locate(ids, config.vocabulary_size, self.spec.num_shards, self.spec.partition_strategy)
        load = np.bincount(shard, minlength=self.spec.num_shards).astype(np.int64)
        return ids_per_example, np.unique(ids), load

    def record_step(self, batches: dict[str, Ragged]) -> None:
        """Records one training lookup of every table (collective on the steps some table samples)."""
        tables = [table.name for table in self.spec.tables]
        local = {name: self._local_counts(name, batches) for name in tables}
        sampled = [name for name in tables if self.will_sample(name)]  # the same on every rank
        if sampled and self.comm.size > 1:
            gathered = self.comm.allgather_object({name: local[name] for name in sampled})
            for name in sampled:
                parts = [ranks[name] for ranks in gathered]
                local[name] = (
                    np.concatenate([part[0] for part in parts]),
                    np.unique(np.concatenate([part[1] for part in parts])),
                    np.sum([part[2] for part in parts], axis=0),
                )
        for name in tables:
            ids_per_example, unique_ids, shard_load = local[name]
            self.record(name, ids_per_example=ids_per_example, unique_ids=unique_ids, shard_load=shard_load)

    def flush(self) -> list[str]:
        """Writes the files on rank 0, and clears the counts on every rank (collective); returns the paths."""
        error, paths = None, []
        if self.comm.rank == 0:
            try:
                paths = super().flush()
            except Exception as caught:
                error = caught
        agree(self.comm, error, "LookupStatistics.flush")
        if self.comm.rank != 0:
            self._counts.clear()
        return paths
