"""Lookup statistics for `profile_data_directory`.

TensorFlow's `EmbeddingConfigSpec(profile_data_directory=...)` profiles the
embedding inputs at run time: only about 3% of input samples are looked at,
to keep host CPU overhead low, and the summary (how many ids an example has,
how evenly the ids load the shards) is saved to one file per table, named by
a hash of the table's parameters and the global configuration, so several
models can share one directory. This module does the same on a CPU.

Per step and per table the engine calls `record`; a seeded random draw
decides whether the step is sampled (the first step of every table always
is, so short runs leave data). `flush` merges what was gathered into
`<directory>/<table>-<hash>.json`, adding to the counts already there, and
writes it atomically.

>>> import tempfile, numpy as np
>>> from tpu_embedding_shim.spec import EmbeddingSpec, TableSpec, FeatureSpec
>>> spec = EmbeddingSpec(tables=(TableSpec(name="t", vocabulary_size=8, dim=2),),
...                      features=(FeatureSpec(name="f", table="t", num_buckets=8),), num_shards=2)
>>> stats = LookupStatistics(tempfile.mkdtemp(), spec)
>>> stats.record("t", ids_per_example=np.array([2, 1, 3]), unique_ids=np.array([0, 5, 6]),
...              shard_load=np.array([4, 2]))
>>> [path] = stats.flush()
>>> data = read_statistics(path)
>>> data["examples_sampled"], data["mean_ids_per_example"], data["shard_load_imbalance"]
(3, 2.0, 1.3333333333333333)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..spec.checks import check_real, fail
from ..spec.embedding import EmbeddingSpec
from ..spec.tables import TableSpec
from .files import replace_file, safe_stem

FORMAT = "tpu_embedding_shim.lookup_statistics"
FORMAT_VERSION = 1
_LOCK_NAME = ".lookup_statistics.lock"

if sys.platform != "win32":  # POSIX: serialise read-merge-write among processes sharing the directory.
    import fcntl


def table_parameters(table: TableSpec, spec: EmbeddingSpec) -> dict[str, Any]:
    """What a statistics file is keyed on: the table's and the run's parameters.

    Two runs share a file exactly when these agree: table name, vocabulary
    size, dim, number of features looking the table up, partition strategy
    and shard count (TensorFlow's "task count").
    """
    return {
        "table": table.name,
        "vocabulary_size": table.vocabulary_size,
        "dim": table.dim,
        "num_features": len(spec.features_of(table.name)),
        "partition_strategy": spec.partition_strategy,
        "num_shards": spec.num_shards,
    }


class _Counts:
    """Sums gathered since the last flush for one table (merge = add)."""

    def __init__(self, num_shards: int):
        self.steps_seen = 0
        self.steps_sampled = 0
        self.examples_sampled = 0
        self.ids_sampled = 0
        self.max_ids_per_example = 0
        self.unique_ids_sampled = 0
        self.shard_load = np.zeros(num_shards, dtype=np.float64)


class LookupStatistics:
    """Samples per-step lookup statistics and writes one JSON file per table.

    Args:
      directory: the profile data directory (created on the first flush);
        may be shared among models and runs.
      spec: the embedding spec; gives the tables, features and sharding.
      sample_rate: the probability that a step is profiled, in (0, 1];
        TensorFlow profiles about 3% of input samples.
      seed: seeds the sampling; each table draws from its own stream, so the
        sampled steps of a table do not depend on the other tables.

    Inputs to `record`, for one table and one step:
      ids_per_example: [batch] int, how many (valid) ids each example looks
        up in this table, summed over the table's features.
      unique_ids: [n] int, the distinct ids looked up in the step (repeats
        are tolerated and removed).
      shard_load: [num_shards] number of ids each shard served in the step.

    File contents (JSON, indent=2, sorted keys): the parameters hashed into
    the name, steps_seen, steps_sampled, examples_sampled,
    mean_ids_per_example, max_ids_per_example, mean_unique_ids_per_step,
    shard_load (total per shard over sampled steps), shard_load_imbalance
    (max / mean; 1.0 is perfect balance, null if nothing was served) and
    the sample rate, plus the raw sums (`total_ids_sampled`,
    `total_unique_ids_sampled`) that merging adds up.
    """

    def __init__(self, directory: str, spec: EmbeddingSpec, *, sample_rate: float = 0.03, seed: int = 0):
        owner = "LookupStatistics"
        if not isinstance(directory, (str, os.PathLike)):
            raise fail("directory", "a str or os.PathLike", directory, error=TypeError, owner=owner)
        if not isinstance(spec, EmbeddingSpec):
            raise fail("spec", "an EmbeddingSpec", type(spec).__name__, error=TypeError, owner=owner)
        self.directory = os.fspath(directory)
        self.spec = spec
        self.sample_rate = check_real("sample_rate", sample_rate, minimum=0.0, maximum=1.0, min_open=True, owner=owner)
        self.seed = int(seed)
        self._counts: dict[str, _Counts] = {}
        self._rngs: dict[str, np.random.Generator] = {}
        self._tables = {table.name: table for table in spec.tables}

    # Recording ------------------------------------------------------------------

    def _rng(self, table: str) -> np.random.Generator:
        rng = self._rngs.get(table)
        if rng is None:
            key = int.from_bytes(hashlib.sha256(table.encode()).digest()[:8], "little")
            rng = self._rngs[table] = np.random.default_rng([self.seed & (2**64 - 1), key])
        return rng

    def will_sample(self, table: str) -> bool:
        """Whether the next `record` of `table` profiles its step (the draw stays for `record` to make).

        The processes of `mpiexec` (engine/distributed/statistics.py) ask it
        before gathering a step's counts: with the same seed they agree.
        """
        rng = self._rngs.get(table)
        if rng is None:
            return True
        state = rng.bit_generator.state
        draw = rng.random()
        rng.bit_generator.state = state
        return draw < self.sample_rate

    def record(
        self, table: str, *, ids_per_example: np.ndarray, unique_ids: np.ndarray, shard_load: np.ndarray
    ) -> None:
        """Counts one step of one table; profiles it with probability `sample_rate`.

        Unsampled steps cost a counter increment and one random draw.
        """
        if table not in self._tables:
            raise fail("table", f"one of {sorted(self._tables)}", table, owner="LookupStatistics.record")
        ids_per_example = np.asarray(ids_per_example)
        unique_ids = np.asarray(unique_ids)
        shard_load = np.asarray(shard_load)
        self._check_shapes(table, ids_per_example, unique_ids, shard_load)
        counts = self._counts.get(table)
        if counts is None:
            counts = self._counts[table] = _Counts(self.spec.num_shards)
        first = table not in self._rngs
        draw = self._rng(table).random()
        counts.steps_seen += 1
        if not (first or draw < self.sample_rate):
            return
        if ids_per_example.size and ids_per_example.min() < 0:
            raise fail(
                "ids_per_example",
                "non-negative counts",
                ids_per_example,
                owner=f"LookupStatistics.record (table {table!r})",
            )
        if shard_load.size and (not np.all(np.isfinite(shard_load)) or shard_load.min() < 0):
            raise fail(
                "shard_load",
                "finite non-negative loads",
                shard_load,
                owner=f"LookupStatistics.record (table {table!r})",
            )
        counts.steps_sampled += 1
        counts.examples_sampled += int(ids_per_example.size)
        counts.ids_sampled += int(ids_per_example.sum(dtype=np.int64))
        if ids_per_example.size:
            counts.max_ids_per_example = max(counts.max_ids_per_example, int(ids_per_example.max()))
        counts.unique_ids_sampled += int(np.unique(unique_ids).size)
        counts.shard_load += shard_load

    def _check_shapes(self, table, ids_per_example, unique_ids, shard_load) -> None:
        owner = f"LookupStatistics.record (table {table!r})"
        if ids_per_example.ndim != 1 or ids_per_example.dtype.kind not in "iu":
            raise fail(
                "ids_per_example",
                "a 1-D integer array [batch]",
                f"shape {ids_per_example.shape} dtype {ids_per_example.dtype}",
                owner=owner,
            )
        if unique_ids.ndim != 1 or (unique_ids.size and unique_ids.dtype.kind not in "iu"):
            raise fail(
                "unique_ids",
                "a 1-D integer array of ids",
                f"shape {unique_ids.shape} dtype {unique_ids.dtype}",
                owner=owner,
            )
        if shard_load.shape != (self.spec.num_shards,) or shard_load.dtype.kind not in "iuf":
            raise fail(
                "shard_load",
                f"a numeric array of shape ({self.spec.num_shards},) (one entry per shard)",
                f"shape {shard_load.shape} dtype {shard_load.dtype}",
                owner=owner,
            )

    # Writing --------------------------------------------------------------------

    @staticmethod
    def file_name(table: TableSpec, spec: EmbeddingSpec) -> str:
        """`<table name, filesystem-safe>-<16 hex digits>.json`.

        The hash covers `table_parameters(table, spec)`, so a run with another
        shard count, strategy or feature set writes to another file.
        """
        params = table_parameters(table, spec)
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
        return f"{safe_stem(table.name)}-{digest}.json"

    def path(self, table: str) -> str:
        """Where the statistics of `table` are written."""
        return os.path.join(self.directory, self.file_name(self._tables[table], self.spec))

    def flush(self) -> list[str]:
        """Merges the counts gathered since the last flush into the files; returns their paths.

        Only tables recorded since the last flush are written. Each file is
        read, added to, and replaced atomically (temporary file + rename), so
        a reader never sees a partial file and an error leaves the old one.
        Counts are cleared only once their table's file is written.
        """
        pending = [(name, counts) for name, counts in self._counts.items() if counts.steps_seen]
        if not pending:
            return []
        os.makedirs(self.directory, exist_ok=True)
        paths = []
        with self._lock():
            for name, counts in pending:
                path = self.path(name)
                params = table_parameters(self._tables[name], self.spec)
                merged = _merge(_read_existing(path, params), counts, params, self.sample_rate)
                text = json.dumps(merged, indent=2, sort_keys=True, allow_nan=False) + "\n"
                replace_file(path, text.encode("utf-8"))
                self._counts[name] = _Counts(self.spec.num_shards)
                paths.append(path)
        return paths

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        if sys.platform == "win32":  # pragma: no cover - no fcntl: no lock
            yield
            return
        with open(os.path.join(self.directory, _LOCK_NAME), "a") as file:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(file.fileno(), fcntl.LOCK_UN)


def read_statistics(path: str) -> dict[str, Any]:
    """The contents of one statistics file."""
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def _read_existing(path: str, params: dict[str, Any]) -> dict[str, Any] | None:
    try:
        data = read_statistics(path)
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise ValueError(
            f"Lookup statistics file {path!r} is not valid JSON ({error}); delete it to start afresh."
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("parameters") != params:
        raise ValueError(
            f"Lookup statistics file {path!r} was not written for these parameters: expected "
            f"parameters {params}, found {data.get('parameters') if isinstance(data, dict) else data!r}. "
            f"Delete it or use another profile_data_directory."
        )
    return data


def _number(value: float) -> Any:
    return int(value) if float(value).is_integer() else float(value)


def _merge(old: dict[str, Any] | None, counts: _Counts, params: dict[str, Any], sample_rate: float) -> dict[str, Any]:
    old = old or {}
    steps_seen = old.get("steps_seen", 0) + counts.steps_seen
    steps_sampled = old.get("steps_sampled", 0) + counts.steps_sampled
    examples = old.get("examples_sampled", 0) + counts.examples_sampled
    total_ids = old.get("total_ids_sampled", 0) + counts.ids_sampled
    total_unique = old.get("total_unique_ids_sampled", 0) + counts.unique_ids_sampled
    max_ids = max(old.get("max_ids_per_example", 0), counts.max_ids_per_example)
    load = counts.shard_load.copy()
    if "shard_load" in old:
        load += np.asarray(old["shard_load"], dtype=np.float64)
    mean_load = float(load.mean())
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "table": params["table"],
        "parameters": params,
        "sample_rate": sample_rate,
        "steps_seen": steps_seen,
        "steps_sampled": steps_sampled,
        "examples_sampled": examples,
        "total_ids_sampled": total_ids,
        "mean_ids_per_example": total_ids / examples if examples else 0.0,
        "max_ids_per_example": max_ids,
        "total_unique_ids_sampled": total_unique,
        "mean_unique_ids_per_step": total_unique / steps_sampled if steps_sampled else 0.0,
        "shard_load": [_number(x) for x in load],
        "shard_load_imbalance": float(load.max()) / mean_load if mean_load > 0 else None,
    }
