"""`DistributedEngine`: `Engine`'s step over W processes, with the numbers of one process.

Each rank holds its slice of the global batch (data parallel) and its rows
of every table and slot (model parallel: `ownership.py`, TensorFlow's `div`
/ `mod` host sharding). One training step, per rank:

1. forward: convert and check its features; the ranks agree (`agreement.py`);
   each distinct row of a table goes to the rank that owns it, once
   (`exchange.py`: counts, then local rows); owners answer with the rows;
   the rank pools its entries from the rows it got with the engine's
   kernels, exactly as `Engine` pools the same ids;
2. apply_gradients: check the gradients; the ranks agree; each kept entry's
   gradient (`pooled_entries` / `sequence_entries`, the one-process
   formulas) goes to its row's owner with the row; the owner lines them up
   feature by feature, then source rank by source rank (the order one
   process sees them in), sums duplicates and computes the update; the ranks
   agree again; then every rank writes (or, with pipelining, defers the
   write until after the next lookup, as `Engine` does).

Every sum is the same running sum over the same terms in the same order as
in one process, so activations, tables and slots are the same bits as
`Engine(spec, kernels="numpy")` running the global batch (rank 0's examples,
then rank 1's, ...). Owners and requesters run the kernels `Engine` runs
(`kernels=`: numba's `FastKernels` when numba imports, else the numpy
reference), which give the same bits.

`pooling="owner"` pools the pooled features where the rows live instead
(`owner_pooling.py`): less traffic, activations equal to float tolerance.
A pooled feature with at most one id per example on every rank takes the
exact path for that step (nothing to pool; fewer bytes, the bits).

Every public method is collective: every rank calls it, in the same order.

>>> from tpu_embedding_shim.spec import *
>>> from tpu_embedding_shim.engine.distributed import SingleProcess
>>> spec = EmbeddingSpec(
...     tables=(TableSpec(name="t", vocabulary_size=4, dim=2, initializer=RowIdInitializer(), combiner="sum"),),
...     features=(FeatureSpec(name="f", table="t", num_buckets=4),),
...     optimizer=SGDSpec(learning_rate=1.0))
>>> engine = DistributedEngine(spec, SingleProcess())  # under mpiexec: DistributedEngine(spec)
>>> result = engine.forward({"f": [[1, 2], [3, -1]]})
>>> result.activations["f"].tolist()
[[3.0, 3.0], [3.0, 3.0]]
>>> engine.apply_gradients(result, {"f": [[1.0, 0.0], [0.0, 1.0]]})
>>> engine.table("t").tolist()
[[0.0, 0.0], [0.0, 1.0], [1.0, 2.0], [3.0, 2.0]]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...spec import EmbeddingSpec, FeatureSpec
from .. import aligned
from ..engine import LookupResult, choose_kernels
from ..initialization import initial_rows, seeded_initializers
from ..interface import describe_spec, warn_clipping_limit
from ..kernels import Kernels, Lookup, NumpyKernels, Update
from ..lookup import pooled_coefficients, quantization_parameters
from ..memmap import check_table_files, open_table, rank_file
from ..optimizers import apply_update, initial_slots, touches_all_rows
from ..ragged import Ragged
from ..step_checks import check_state, check_trainable, checked_gradient, feature_batch, gradient_multiplier
from ..tf_bundle import FULL, SlicedTensor
from .agreement import PeerFailedError, agree
from .communicator import Communicator, communicator
from .exchange import Segments, fill, pack, requests, send_ids, send_values
from .gather import blocks_on_root
from .owner_pooling import Bag, Kept, expand, pool, scatter
from .ownership import Ownership
from .statistics import DistributedStatistics

__all__ = ["DistributedEngine", "DistributedLookupResult", "POOLING"]

POOLING = ("exact", "owner")  # the modes of `DistributedEngine(pooling=...)`

log = logging.getLogger("tpu_embedding_shim")


@dataclasses.dataclass(frozen=True)
class DistributedLookupResult(LookupResult):
    """`LookupResult` for this rank's slice, plus where each entry's row lives (for the backward).

    Attributes:
      routes: feature -> (owner rank, local row on the owner), int64 [N]
        each, for every id of `batches[feature]` (the features of the exact
        path: all in the exact mode, the sequence features and `moved` in the
        owner mode).
      lookup: the number of this training lookup (the same on every rank);
        in the owner mode, the owners keep its coefficients under it.
      single: the exact path's pooled features none of whose examples has
        more than one id (the forward reads their rows as they are, the
        backward may send their gradients entry by entry).
      moved: in the owner mode, the pooled features that took the exact path
        in this lookup: none of their examples had more than one id on any
        rank, so the owners pooled nothing of them.
    """

    routes: dict[str, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict, repr=False)
    lookup: int = -1
    single: frozenset[str] = frozenset()
    moved: frozenset[str] = frozenset()


@dataclasses.dataclass
class _Pending:
    """Per table: (local rows, new rows, slot -> new slot rows), written at once."""

    updates: dict[str, tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]


class DistributedEngine:
    """The tables and slots of an `EmbeddingSpec`, sharded over the ranks of a communicator.

    Args:
      spec: what to build; the same on every rank (checked). `num_shards`
        must be the number of ranks or a multiple of it.
      comm: a `Communicator`; None for `communicator()` (MPI under mpiexec,
        else one process).
      seed: seeds initializers that have no seed of their own; the same on
        every rank (checked). The joined tables then equal those of
        `Engine(spec, seed=seed)`. None: rank 0 draws one for all.
      check_numerics: refuse NaN or infinite gradients (before any change).
      pooling: 'exact' (the default): requesters pool the rows they get,
        the bits of one process. 'owner': each owner sends one partial sum
        per (example, feature) and gets one gradient row back, for the
        pooled features (sequence features take the exact path): traffic
        shrinks by the bag length, activations equal one process's to float
        tolerance (docs/distributed.md, "Owner-pooled mode").
      kernels: as `Engine(kernels=...)`: 'auto' (numba's when it imports,
        else numpy's), 'numpy' or 'fast'; the same bits either way.
      table_files: table name -> path of a `.npy` file: each rank keeps its
        rows of the table (and its slots) memory-mapped in a file of its own,
        `memmap.rank_file(path, rank, W)` (`big.npy` -> `big.rank-00001-of-
        00002.npy`), on its host's disk; an existing file of the right shape
        is the rank's rows (a job resumed on as many ranks). See `memmap.py`.
      initialize: False: this rank's rows and slots are allocated but not
        drawn or filled (their memory pages untouched), for a state that
        `load_rows` replaces next: a restore then holds one copy of the rows,
        not the drawn ones beside the read ones. Until then the tables hold
        garbage. Tables in `table_files` are always initialized.

    Raises:
      ValueError: `num_shards` is not a multiple of the world size; the
        spec, the seed or `pooling` differs between ranks; `pooling` is not
        one of `POOLING`.
      PeerFailedError: another rank failed to build its part.
    """

    def __init__(
        self,
        spec: EmbeddingSpec,
        comm: Communicator | None = None,
        *,
        seed: int | None = None,
        check_numerics: bool = True,
        pooling: str = "exact",
        table_files: Mapping[str, str] | None = None,
        initialize: bool = True,
        kernels: str = "auto",
    ):
        comm = communicator() if comm is None else comm
        if not isinstance(comm, Communicator):
            raise TypeError(f"Argument `comm` must be a Communicator. Received: {type(comm).__name__}.")
        self.comm = comm
        self.rank, self.world_size = comm.rank, comm.size
        self.spec = spec
        self.check_numerics = check_numerics
        self.kernels: Kernels = NumpyKernels()
        self.global_step = 0
        self.statistics = None
        self._pending: _Pending | None = None
        self._lookups = 0  # training lookups so far (the same count on every rank)
        self._kept: dict[int, tuple[int, Kept | None]] = {}  # owner mode: lookup -> (its step, what its backward needs)
        error: Exception | None = None
        views: tuple[str, dict[str, str], str, int | None] = ("", {}, "", seed)
        files: dict[str, str] = {}
        try:
            if not isinstance(spec, EmbeddingSpec):
                raise TypeError(f"DistributedEngine needs an EmbeddingSpec. Received: {spec!r}.")
            if not isinstance(pooling, str) or pooling not in POOLING:
                raise ValueError(f"Argument `pooling` must be one of {list(POOLING)}. Received: {pooling!r}.")
            self.pooling = str(pooling)
            self.kernels = choose_kernels(kernels)
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
                raise ValueError(f"Argument `seed` must be an int >= 0 or None. Received: {seed!r}.")
            self._owners = {
                t.name: Ownership(t.vocabulary_size, spec.num_shards, spec.partition_strategy, self.world_size)
                for t in spec.tables
            }
            files = check_table_files(spec, table_files)
            views = (spec.fingerprint(), _options(spec), self.pooling, None if seed is None else int(seed))
        except Exception as caught:
            error = caught
        seed = self._agree_on_build(error, views)
        error = None
        try:
            self._files = files
            self._build(seed, files, bool(initialize))
        except Exception as caught:
            error = caught
        agree(comm, error, "DistributedEngine")
        if spec.profile_data_directory:
            self.statistics = DistributedStatistics(spec.profile_data_directory, spec, comm)
        self._features = {f.name: i for i, f in enumerate(spec.features)}
        self._dims = np.array([spec.table(f.table).dim for f in spec.features], dtype=np.int64)
        # The features each rank pools where the rows live (owner mode), and those whose rows move (the rest).
        self._pooled = [f for f in spec.features if self.pooling == "owner" and not f.is_sequence]
        self._exact = [f for f in spec.features if f.name not in {p.name for p in self._pooled}]
        self._requested = _by_table(self._exact)
        self._quantizations = {t.name: quantization_parameters(t.quantization) for t in spec.tables}
        self._sequence = [f for f in spec.features if f.is_sequence]  # their entries' gradients move one by one
        # The exact mode's pooled features: their gradients move as one row per (example, owner), or entry by
        # entry for a step where no example of any rank has more than one id (the same rows, fewer bytes).
        self._scattered = [f for f in self._exact if not f.is_sequence]
        if self.rank == 0:
            warn_clipping_limit(spec)
        for line in self.describe():
            log.info(line)

    def _agree_on_build(self, error: Exception | None, views: tuple) -> int:
        """Every rank's error, spec and seed compared in one allgather; returns the common seed."""
        reason = None if error is None else f"{type(error).__name__}: {error}"
        gathered = self.comm.allgather_object((reason, *views))
        failed = [rank for rank, view in enumerate(gathered) if view[0] is not None]
        if failed:
            if error is not None:
                raise error
            raise PeerFailedError(failed[0], gathered[failed[0]][0])
        for index, what in ((1, "tables and slots (spec.fingerprint())"), (2, "options"), (3, "pooling"), (4, "seed")):
            differ = [rank for rank, view in enumerate(gathered) if view[index] != gathered[0][index]]
            if differ:
                shown = (
                    _option_differences([view[2] for view in gathered], differ)
                    if index in (1, 2)
                    else f" ({[view[index] for view in gathered]})"
                )
                raise ValueError(
                    f"Every rank must build the same DistributedEngine: ranks {differ} have other {what} than "
                    f"rank 0{shown}."
                )
        seed = gathered[0][4]
        if seed is None:
            fresh = int(np.random.default_rng().integers(2**63)) if self.rank == 0 else None
            seed = self.comm.bcast_object(fresh)
        return int(seed)

    def _build(self, seed: int, table_files: dict[str, str], initialize: bool) -> None:
        """This rank's rows of every table and their slots, and nothing more: its rows drawn alone, with the
        values one process draws there (`initialization.py`); in a file of its own for the tables of
        `table_files` (`memmap.py`)."""
        initializers = seeded_initializers(self.spec, seed)
        self._tables: dict[str, np.ndarray] = {}
        self._slots: dict[str, dict[str, np.ndarray]] = {}
        for table in self.spec.tables:
            rows = self._owners[table.name].owned(self.rank)
            optimizer = self.spec.optimizer_for(table.name)
            if table.name in table_files:
                path = rank_file(table_files[table.name], self.rank, self.world_size)
                mine, slots = open_table(path, table, optimizer, initializers[table.name], rows)
            elif not initialize:  # allocated, never written: no page is touched before `load_rows` replaces them
                count = len(range(*rows.indices(table.vocabulary_size)))
                mine = aligned.empty((count, table.dim), np.float32)
                slots = {name: aligned.empty(mine.shape, np.float32) for name in initial_slots(optimizer, (0, 0))}
            else:
                mine = initial_rows(table, initializers[table.name], rows)
                slots = initial_slots(optimizer, mine.shape)
            self._tables[table.name] = mine
            self._slots[table.name] = slots

    # Introspection ------------------------------------------------------------------

    def describe(self) -> list[str]:
        """What this rank holds and which TPU behaviours it emulates, one line each."""
        spec = self.spec
        placements = {
            name: f"rows per rank {self._owners[name].sizes} (this rank: {rows.shape[0]})"
            for name, rows in self._tables.items()
        }
        engine = f"Distributed CPU embedding engine, rank {self.rank} of {self.world_size} ({self.comm!r})"
        lines = describe_spec(spec, engine, placements, f", {spec.num_shards // self.world_size} per rank")
        if self.pooling == "owner":
            lines.append(
                "  pooling: owner (owners send partial sums of the pooled features; activations equal one "
                "process's to float tolerance, tables and slots the same bits for the same gradients)."
            )
        else:
            lines.append("  pooling: exact (owners send rows; the bits of one process).")
        lines.append(self.kernels.describe(spec).rstrip(".") + " (owners and requesters alike).")
        return lines

    def table(self, name: str) -> np.ndarray:
        """The full table `name` in id order, on every rank (a collective gather), pending updates applied."""
        return self._gather(name)["embedding"]

    def table_blocks(self, name: str, key: str = "embedding") -> Iterator[np.ndarray | None]:
        """Table `name` (or its slot `key`) in id order, `gather.BLOCK_ROWS` rows at a time, on rank 0;
        None on the other ranks, at the same pace (collective: every rank draws every block). An export
        that writes each block as it comes never holds the whole table anywhere."""
        if name not in self._tables:
            raise UnknownTableError(name, list(self._tables))
        self.flush()
        local = self._tables[name] if key == "embedding" else self._slots[name][key]
        return blocks_on_root(self.comm, self._owners[name], local)

    def slots(self, name: str) -> dict[str, np.ndarray]:
        """Slot name -> the full slot array of table `name`, on every rank (a collective gather)."""
        return {slot: values for slot, values in self._gather(name).items() if slot != "embedding"}

    def state(self) -> dict[str, dict[str, np.ndarray]]:
        """Table -> {'embedding': full table, slot: full slot}, in id order, on every rank (collective)."""
        agree(self.comm, None, "state")
        self.flush()
        parts = self.comm.allgather_object(
            {name: {"embedding": rows, **self._slots[name]} for name, rows in self._tables.items()}
        )
        return {
            name: {key: self._owners[name].join([part[name][key] for part in parts]) for key in parts[0][name]}
            for name in self._tables
        }

    def _gather(self, name: str) -> dict[str, np.ndarray]:
        names = list(self._tables)
        error = None if name in names else UnknownTableError(name, names)
        agree(self.comm, error, "table", name=name)
        self.flush()
        parts = self.comm.allgather_object({"embedding": self._tables[name], **self._slots[name]})
        return {key: self._owners[name].join([part[key] for part in parts]) for key in parts[0]}

    def row_slices(self) -> dict[str, dict[str, SlicedTensor]]:
        """Table -> {'embedding' | slot: this rank's rows as a `SlicedTensor` of the full shape}, pending
        updates applied (local: no communication); no parts where this rank holds no rows of a table.

        The rows are one row slice of the stored tensor, after the lower ranks' rows: in id order under
        `div` (a rank's ids are one range), in the hosts' order under `mod` (rank r holds ids r, r + W,
        ...), as a TPU job of W hosts saves a table. For a collective checkpoint (`write_collectively`),
        each rank writes its own.
        """
        self.flush()
        out = {}
        for name, rows in self._tables.items():
            sizes = self._owners[name].sizes
            start = sum(sizes[: self.rank])
            out[name] = {
                key: SlicedTensor(
                    (self._owners[name].vocabulary_size, *local.shape[1:]),
                    [(((start, len(local)), (0, FULL)), local)] if len(local) else [],
                )
                for key, local in {"embedding": rows, **self._slots[name]}.items()
            }
        return out

    # Forward ----------------------------------------------------------------------

    def forward(
        self, features: Mapping[str, Any], weights: Mapping | None = None, *, training=True, same_batch_size=True
    ) -> DistributedLookupResult:
        """Looks up every feature of the spec for this rank's examples (collective; see `Engine.forward`).

        `training` must be the same on every rank. A bad input on any rank
        raises on every rank and changes nothing.
        """
        error, batches = None, {}
        alone = [0] * len(self._pooled)  # owner mode: 1 for each pooled feature of at most one id an example here
        try:
            if not isinstance(features, Mapping):
                raise TypeError(
                    f"Argument `features` must be a dict of feature name -> ids. Received: {type(features).__name__}."
                )
            batches = {
                f.name: feature_batch(self.spec, self.kernels, f, features, weights, copy=True)
                for f in self.spec.features
            }
            sizes = {name: batch.batch_size for name, batch in batches.items()}
            if same_batch_size and len(set(sizes.values())) > 1:
                raise ValueError(f"All features of one step must have the same batch size. Received: {sizes}.")
            alone = [int(_one_id_each(batches[f.name])) for f in self._pooled]
        except Exception as caught:
            error = caught
        alone = agree(self.comm, error, "forward", least=alone, training=bool(training)).tolist()
        if not (training and self.spec.pipeline_execution_with_tensor_core):
            self.flush()
        # A pooled feature of at most one id an example on every rank takes the exact path this step: its
        # rows move once per distinct row, not 20 bytes an entry, and its activations are one process's bits.
        moved = frozenset(f.name for f, one in zip(self._pooled, alone) if one)
        # (moved is empty but in the owner mode, whose exact path is otherwise the sequence features')
        exact = self._exact if not moved else [f for f in self.spec.features if f.is_sequence or f.name in moved]
        routes = {
            f.name: self._owners[f.table].locate(batches[f.name].values.astype(np.int64, copy=False)) for f in exact
        }
        rows = self._fetch_rows(routes, exact)
        single = moved | {f.name for f in self._scattered if _one_id_each(batches[f.name])}
        activations = self._rows_as_they_are(rows, batches, single)
        pooled_here = [f for f in exact if f.name not in activations]
        requests = [
            Lookup(
                rows[f.name][0],
                dataclasses.replace(batches[f.name], values=rows[f.name][1]),
                self.spec.table(f.table).combiner,
                f.safe_lookup,
                f.max_sequence_length if f.is_sequence else None,
                self._quantizations[f.table],
            )
            for f in pooled_here
        ]
        lengths: dict[str, np.ndarray] = {}
        for feature, value in zip(pooled_here, self.kernels.lookups(requests)):
            if feature.is_sequence:
                activations[feature.name], lengths[feature.name] = value
            else:
                activations[feature.name] = value
        lookup, kept = -1, None
        owners_pool = [f for f in self._pooled if f.name not in moved]
        if owners_pool:
            bags = [self._bag(f, batches[f.name]) for f in owners_pool]
            tables = [self._tables[f.table] for f in owners_pool]
            quantizations = [self._quantizations[f.table] for f in owners_pool]
            pooled, kept = pool(self.comm, bags, tables, self.kernels, quantizations)
            activations.update((f.name, value) for f, value in zip(owners_pool, pooled))
        if len(activations) > 1:
            activations = {f.name: activations[f.name] for f in self.spec.features}  # spec order
        if training:
            if self.statistics is not None:
                self.statistics.record_step(batches)
            lookup = self._lookups
            self._lookups += 1
            if self._pooled:  # only this step's lookups can still be applied
                self._kept = {n: held for n, held in self._kept.items() if held[0] == self.global_step}
                self._kept[lookup] = (self.global_step, kept)
            self.flush()
        return DistributedLookupResult(
            activations,
            lengths,
            batches,
            bool(training),
            self.global_step,
            routes=routes,
            lookup=lookup,
            single=single,
            moved=moved,
        )

    def _rows_as_they_are(
        self, rows: dict[str, tuple[np.ndarray, np.ndarray]], batches: dict[str, Ragged], single: frozenset[str]
    ) -> dict[str, np.ndarray]:
        """The activations of the exact path's pooled features whose every example has one id (of `single`:
        at most one), no weight and an unquantized table: each example's row as it arrived, gathered (one
        id's coefficient is 1 for every combiner, and a float32 times 1 is itself: the lookup's bits,
        without its per-feature work).

        One array per feature, as the lookups make them: one array for all features (3.4 MB for
        `criteo26`'s 26) came back from the system at every step, 800 page faults, 1 ms a step."""
        activations = {}
        for f in self.spec.features:
            batch = batches[f.name]
            if (
                f.is_sequence
                or f.name not in single
                or batch.weights is not None
                or self._quantizations[f.table] is not None
                or batch.num_values != batch.batch_size
            ):
                continue
            source, index = rows[f.name]
            out = activations[f.name] = aligned.empty((index.shape[0], source.shape[1]), np.float32)
            np.take(source, index, axis=0, out=out, mode="clip")  # in range; "raise" would buffer `out`
        return activations

    def _bag(
        self, feature: FeatureSpec, batch: Ragged, route: tuple[np.ndarray, np.ndarray] | None = None, empty=False
    ) -> Bag:
        """A pooled feature's kept entries with their owners and float32 coefficients, as the kernels compute
        them for one process. `route`: each entry's (owner, local row), from the forward (else located
        here); `empty`: no entry (a feature without gradient)."""
        if empty:
            none = np.zeros(0, np.int64)
            return Bag(none, none, none, np.zeros(0, np.float32), batch.batch_size)
        combiner = self.spec.table(feature.table).combiner
        if route is not None:  # the kept entries' positions, then their routes
            batch = _by_position(batch)
        if isinstance(self.kernels, NumpyKernels):
            example, ids, coef, _ = pooled_coefficients(batch, combiner, safe=feature.safe_lookup)
        else:
            dim = self.spec.table(feature.table).dim
            fast: Any = self.kernels  # FastKernels' own coefficients (not part of the Kernels protocol)
            ids, _, example, coef = fast.coefficients(batch, combiner, feature.safe_lookup, dim)
            example = batch.row_ids() if example is None else example
            coef = np.ones(ids.shape[0], np.float32) if coef.shape[0] == 0 else coef
        if route is None:
            owner, local = self._owners[feature.table].locate(ids.astype(np.int64, copy=False))
        else:
            owner, local = route[0][ids], route[1][ids]
        return Bag(example.astype(np.int64), owner, local, coef.astype(np.float32), batch.batch_size)

    def _fetch_rows(
        self, routes: dict[str, tuple[np.ndarray, np.ndarray]], exact: list[FeatureSpec]
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Feature -> (rows [R, D], index [N]): `rows[index]` are the rows of its entries, in entry order,
        for each feature of `exact`, the step's features whose rows move (collective).

        Per table, each distinct row goes to its owner once (`requests`: over
        every routed feature of the table, in one call for every table); the
        owners answer with the rows, which the lookup reads where they
        arrived (no copy per entry)."""
        features, tables = self._requested if exact is self._exact else _by_table(exact)
        if not tables:
            return {}
        sizes = np.array([routes[f.name][0].shape[0] for f in features], np.int64)
        ends = np.cumsum(sizes)
        last = {f.table: k for k, f in enumerate(features)}  # each table's last feature
        bases = np.concatenate([[0], ends[[last[name] for name in tables]]]).astype(np.int64)
        outbox, pair, at = requests(
            np.concatenate([routes[f.name][0] for f in features]),
            np.concatenate([routes[f.name][1] for f in features]),
            bases,
            self.world_size,
        )
        dims = np.array([self.spec.table(name).dim for name in tables], np.int64)
        received, local = send_ids(self.comm, outbox)
        asked, sent = Segments(received, dims), Segments(outbox.counts, dims)
        answer = aligned.empty((asked.size,), np.float32)
        fill(answer, asked, [self._tables[name] for name in tables], local)  # its rows, every source at once
        flat = send_values(self.comm, answer, asked, sent)
        spans = [(f, int(stop - size), int(stop)) for f, size, stop in zip(features, sizes, ends)]
        if (dims == sent.unit).all():  # one width: send position p's row is row p of the buffer, whatever the table
            views = {name: flat.reshape(-1, sent.unit) for name in tables}  # its own: kernels tell tables apart
            return {f.name: (views[f.table], at[lo:hi]) for f, lo, hi in spans}
        index = np.empty(at.shape[0], np.int64)
        copies = {}
        for t, name in enumerate(tables):
            rows, arrived = sent.rows(flat, t)
            where = np.empty(int(outbox.bases[t + 1] - outbox.bases[t]), np.int64)
            where[outbox.sent(t)] = arrived  # the table's pair j is rows[where[j]]
            span = slice(int(bases[t]), int(bases[t + 1]))
            index[span] = where[pair[span] - outbox.bases[t]]
            copies[name] = rows
        return {f.name: (copies[f.table], index[lo:hi]) for f, lo, hi in spans}

    def _indices_of(self, table: str) -> list[int]:
        return [self._features[f.name] for f in self.spec.features_of(table)]

    # Backward ---------------------------------------------------------------------

    def apply_gradients(self, result: LookupResult, gradients: Mapping[str, Any]) -> None:
        """One optimizer update per touched row, from d loss / d activations of this rank's examples.

        Collective; see `Engine.apply_gradients`. A bad gradient on any rank
        raises on every rank and changes nothing.
        """
        step = self.global_step
        error: Exception | None = None
        entries: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        grads: dict[str, np.ndarray] = {}
        mine = [0] * len(self._scattered)
        moved: frozenset[str] = getattr(result, "moved", frozenset())
        owners_pool = [f for f in self._pooled if f.name not in moved]  # those the owners pooled in the forward
        sends = np.ones((self.world_size, len(owners_pool)), np.int64)  # row r: the pooled gradients rank r sends
        try:
            entries, grads = self._entries(result, gradients, step)
            mine = [int(f.name in result.single) for f in self._scattered]  # type: ignore[attr-defined]
            sends[self.rank] = [f.name in grads for f in owners_pool]
        except Exception as caught:
            error = caught
        facts = {"lookup": getattr(result, "lookup", None)} if self._pooled else {}  # the owners kept its coefficients
        least = agree(self.comm, error, "apply_gradients", least=[*mine, *sends.reshape(-1).tolist()], **facts)
        single, given = least[: len(mine)].tolist(), least[len(mine) :].reshape(sends.shape)
        # one gradient row per entry (what scatter would send, less 12 B): the exact mode's pooled features
        # of at most one id an example on every rank, and the owner mode's that took the exact path
        by_entry = moved | {f.name for f, alone in zip(self._scattered, single) if alone}
        for feature in self.spec.features:
            if feature.name in by_entry and feature.name in grads:
                batch = _by_position(result.batches[feature.name])
                combiner = self.spec.table(feature.table).combiner
                grad = grads.pop(feature.name)
                entries[feature.name] = self.kernels.pooled_entries(batch, combiner, grad, safe=feature.safe_lookup)
        received = self._send_gradients(result, entries, grads, by_entry, given)  # type: ignore[arg-type]
        error, pending, in_place = None, _Pending({}), []
        try:
            trained = [(t, o) for t in self.spec.tables if (o := self.spec.optimizer_for(t.name)) is not None]
            all_summed = self.kernels.sum_tables(
                [
                    (t.name, self._tables[t.name].shape[0], t.dim, [self._entries_of(p) for p in received[t.name]])
                    for t, _ in trained
                ]
            )
            for (table, optimizer), summed in zip(trained, all_summed):
                name = table.name
                if self.kernels.fuses(optimizer) and not self.spec.pipeline_execution_with_tensor_core:
                    lr = optimizer.learning_rate_at(step)
                    in_place.append(Update(optimizer, lr, self._tables[name], self._slots[name], summed))
                else:
                    unique, row_grads = summed.compact()
                    self._plan_update(name, optimizer, step, unique, row_grads, pending)
        except Exception as caught:
            error = caught
        agree(self.comm, error, "apply_gradients: update")
        # Every rank has checked and computed everything: from here on, nothing fails.
        self.flush()
        if in_place:
            self.kernels.apply_all(in_place)
        self._pending = pending
        self._kept.clear()
        self.global_step += 1
        if not self.spec.pipeline_execution_with_tensor_core:
            self.flush()

    def _entries(
        self, result: LookupResult, gradients: Mapping[str, Any], step: int
    ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
        """Every check first; then (sequence feature -> (entry indices, entry gradients) of this rank's kept
        entries; pooled feature -> its gradient [B, D], which the owners expand with the coefficients)."""
        if not isinstance(result, DistributedLookupResult):
            raise TypeError("Argument `result` must be the LookupResult returned by this engine's forward().")
        check_trainable(result, step, gradients)
        if self._pooled and result.lookup not in self._kept:
            raise RuntimeError(
                "Argument `result` must be a training lookup of this engine at this step: the owners keep "
                "its coefficients for the backward (pooling='owner')."
            )
        multiplier = gradient_multiplier(self.spec, step)
        entries, grads = {}, {}
        for feature in self.spec.features:
            expected = result.activations[feature.name].shape
            grad = checked_gradient(
                feature, expected, gradients.get(feature.name), kernels=self.kernels, check_numerics=self.check_numerics
            )
            if grad is None:
                continue
            if self.spec.optimizer_for(feature.table) is None:
                raise RuntimeError(
                    f"Table {feature.table!r} has no optimizer (an inference-only spec); it can't be trained."
                )
            if multiplier != 1:
                grad = grad * multiplier
            if feature.is_sequence:
                batch = _by_position(result.batches[feature.name])
                entries[feature.name] = self.kernels.sequence_entries(batch, feature.max_sequence_length, grad)
            else:  # the owners expand it with the coefficients they kept (owner mode) or get now (exact)
                grads[feature.name] = grad
        return entries, grads

    def _send_gradients(
        self,
        result: DistributedLookupResult,
        entries: dict[str, Any],
        grads: dict[str, np.ndarray],
        by_entry: frozenset[str],
        given: np.ndarray,
    ) -> dict[str, list[tuple[np.ndarray, ...]]]:
        """Table -> per feature (spec order), the entries this rank owns (`_entries_of`), in the one-process
        order (collective): feature by feature, then source rank by source rank, each in its entry order.
        The sequence features and the pooled ones of `by_entry` (the same on every rank) send their
        entries' gradients one by one; the other pooled ones one gradient row per (example, owner).
        `given` [W, P]: in the owner mode, which of its pooled features each rank sends a gradient of."""
        pieces: dict[int, tuple[np.ndarray, ...]] = {}  # feature index -> its entries
        if self._sequence or by_entry:
            pieces.update(self._send_entries(result, entries))
        pooled = [f for f in self.spec.features if not f.is_sequence and f.name not in by_entry]
        if pooled:
            wanted = [grads.get(f.name) for f in pooled]
            kept = self._kept[result.lookup][1] if self._pooled else None
            if kept is not None:  # the owners pooled these in the forward
                expanded = expand(self.comm, kept, wanted, given)
            else:  # exact mode: the requester pooled the forward; the owners get the coefficients now
                bags = [
                    self._bag(f, result.batches[f.name], result.routes[f.name], grad is None)
                    for f, grad in zip(pooled, wanted)
                ]
                dims = np.array([self.spec.table(f.table).dim for f in pooled], np.int64)
                expanded = scatter(self.comm, bags, wanted, dims)
            for feature, piece in zip(pooled, expanded):
                pieces[self._features[feature.name]] = piece
        return {table.name: [pieces[index] for index in self._indices_of(table.name)] for table in self.spec.tables}

    def _send_entries(self, result: DistributedLookupResult, entries: dict[str, Any]) -> dict[int, tuple]:
        """Feature index -> (local rows, gradient rows, index) this rank owns, of the exact path's entries,
        source by source: each kept entry's gradient goes to its row's owner with the row (collective)."""
        features = self.spec.features
        owners, rows = [], []
        for feature in features:
            if feature.name in entries:
                kept = entries[feature.name][0]  # the kept entries' positions (increasing), for either kernels'
                owner_of, row_of = result.routes[feature.name]
                every = kept.shape[0] == owner_of.shape[0]  # then `kept` is every position
                owners.append(owner_of if every else owner_of[kept])
                rows.append(row_of if every else row_of[kept])
            else:
                owners.append(np.zeros(0, np.int64))
                rows.append(np.zeros(0, np.int64))
        outbox = pack(owners, rows, self.world_size)
        received, local = send_ids(self.comm, outbox)
        sent, got = Segments(outbox.counts, self._dims), Segments(received, self._dims)
        flat = aligned.empty((sent.size,), np.float32)
        fill(flat, sent, *_gradient_rows(features, entries, outbox.order))  # every feature and destination at once
        values = send_values(self.comm, flat, sent, got)
        return {index: (local[got.entries(index)], *got.rows(values, index)) for index in range(len(features))}

    def _entries_of(self, piece: tuple[np.ndarray, ...]) -> Any:
        """(local rows, gradient rows, index[, coefficients]) as entries of this engine's kernels, for
        `sum_tables`: entry k adds `rows[index[k]] * coef[k]` (the float32 product) to local row k."""
        ids, rows, index, coef = piece if len(piece) == 4 else (*piece, _NO_COEF)
        if isinstance(self.kernels, NumpyKernels):
            return ids, (rows[index] * coef[:, None] if coef.shape[0] else rows[index])
        from ..fast.kernels import Entries  # numba is there: the kernels are numba's

        return Entries(ids, index, coef, rows)

    def _plan_update(
        self, name: str, optimizer: Any, step: int, unique: np.ndarray, row_grads: np.ndarray, pending: _Pending
    ) -> None:
        """Computes the update of the local rows `unique` from their summed gradients, into `pending`."""
        mine = self._tables[name]
        if touches_all_rows(optimizer):  # non-lazy Adam: every row of this rank, untouched ones with zeros
            every_row = np.zeros(mine.shape, np.float32)
            every_row[unique] = row_grads
            unique, row_grads = np.arange(mine.shape[0]), every_row
        if unique.size == 0:
            return
        slots = {slot: values[unique] for slot, values in self._slots[name].items()}
        new_rows, new_slots = apply_update(optimizer, mine[unique], slots, row_grads, step)
        pending.updates[name] = (unique, new_rows, new_slots)

    def flush(self) -> None:
        """Writes the pending update, if pipelining deferred one (local: no communication)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        for name, (rows, new_rows, new_slots) in pending.updates.items():
            self._tables[name][rows] = new_rows
            for slot, values in new_slots.items():
                self._slots[name][slot][rows] = values

    # State ------------------------------------------------------------------------

    def load_state(self, state: Mapping[str, Mapping[str, np.ndarray]], *, step: int | None = None) -> None:
        """Replaces every table and slot from full arrays in id order, given on every rank (collective).

        Each rank keeps its rows. Checked whole, on every rank, before anything changes.
        """
        self._load("load_state", lambda: self._rows_of_state(state), step)

    def _load(self, what: str, checked_rows: Any, step: int | None) -> None:
        """Every rank checks its rows (`checked_rows()` -> (tables, slots)) and the step; the ranks agree;
        then each replaces its rows and the step. A failure anywhere raises everywhere, changing nothing."""
        error: Exception | None = None
        tables: dict[str, np.ndarray] = {}
        slots: dict[str, dict[str, np.ndarray]] = {}
        try:
            tables, slots = checked_rows()
            if step is not None and (isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0):
                raise ValueError(f"Argument `step` must be an int >= 0. Received: {step!r}.")
        except Exception as caught:
            error = caught
        agree(self.comm, error, what, step=None if error is not None or step is None else int(step))
        self._pending = None
        self._replace_rows(tables, slots)
        if step is not None:
            self.global_step = int(step)

    def _replace_rows(self, tables: dict[str, np.ndarray], slots: dict[str, dict[str, np.ndarray]]) -> None:
        """This rank's rows and slots replaced; a table kept in a file (`table_files`) is written in place."""
        for name, rows in tables.items():
            if name in self._files:
                self._tables[name][...] = rows
                for slot, values in slots[name].items():
                    self._slots[name][slot][...] = values
            else:
                self._tables[name], self._slots[name] = rows, slots[name]

    def row_ids(self, name: str) -> np.ndarray:
        """The ids of this rank's rows of table `name`, in its local order (local: no communication): a
        run of ids under `div`, ids rank, rank + W, ... under `mod`. `load_rows` takes the rows of these
        ids, in this order."""
        if name not in self._owners:
            raise UnknownTableError(name, list(self._owners))
        return self._owners[name].owned_ids(self.rank)

    def local_state(self) -> dict[str, dict[str, np.ndarray]]:
        """Table -> {'embedding': this rank's rows, slot: its rows of the slot}, in `row_ids` order, pending
        updates applied (local: no communication; the engine's own arrays, not copies)."""
        self.flush()
        return {name: {"embedding": rows, **self._slots[name]} for name, rows in self._tables.items()}

    def load_rows(self, rows: Mapping[str, Mapping[str, np.ndarray]], *, step: int | None = None) -> None:
        """Replaces every table and slot from this rank's rows only (collective): a restore where each rank
        reads its own rows of a checkpoint, never a whole table.

        Args:
          rows: table -> {'embedding': [n, D], slot: [n, D]}, n = len(row_ids(table)), the rows of
            `row_ids(table)` in that order; every table and slot of the spec.
          step: the global step to set (the same on every rank), or None to keep it.

        A writable, C-contiguous float32 array is kept as it is, not copied (the restore's peak memory
        is one copy of the rows): the caller hands it over.

        Checked on every rank (names, shapes, real values, the step), and the ranks agree before anything
        changes: a bad argument on any rank raises on every rank and changes nothing.
        """
        self._load("load_rows", lambda: self._own_rows(rows), step)

    def _own_rows(self, rows: Mapping[str, Mapping[str, np.ndarray]]) -> tuple[dict, dict]:
        """(tables, slots) of this rank's rows, checked against its share; kept without a copy where they can be."""
        tables, slots = {}, {}
        sizes = {name: owner.sizes[self.rank] for name, owner in self._owners.items()}
        for name, names in check_state(self.spec, rows, sizes).items():
            tables[name] = _own(rows[name]["embedding"])
            slots[name] = {slot: _own(rows[name][slot]) for slot in names}
        return tables, slots

    def _rows_of_state(self, state: Mapping[str, Mapping[str, np.ndarray]]) -> tuple[dict, dict]:
        tables, slots = {}, {}
        for name, names in check_state(self.spec, state).items():
            arrays = state[name]
            owner = self._owners[name]
            tables[name] = owner.take(np.asarray(arrays["embedding"], np.float32), self.rank)
            slots[name] = {slot: owner.take(np.asarray(arrays[slot], np.float32), self.rank) for slot in names}
        return tables, slots


def _own(value: Any) -> np.ndarray:
    """`value` as a writable C-contiguous float32 array: itself when it is one (no second copy of the rows)."""
    return np.require(value, np.float32, ["C_CONTIGUOUS", "WRITEABLE"])


_NO_COEF = np.zeros(0, np.float32)


def _gradient_rows(features: Any, entries: dict[str, Any], order: np.ndarray) -> tuple:
    """(sources, rows, coefficients or None) of `exchange.fill` for the entries of every feature, sent in
    `order` (an `Outbox`'s): the float32 gradients one process computes, from numpy's (positions,
    gradients) or numba's `Entries` (`grads[src[k]] * coef[k]`). A feature without entries has none."""
    sources, rows, coefs = [], [], []
    weighted = any(len(e) != 2 and e.coef.shape[0] for e in entries.values())
    for feature in features:
        e = entries.get(feature.name)
        if e is None:
            continue
        if len(e) == 2:
            sources.append(e[1])
            rows.append(np.arange(e[1].shape[0], dtype=np.int64))
            coef = None
        else:
            sources.append(e.grads)
            rows.append(e.src)
            coef = e.coef if e.coef.shape[0] else None
        if weighted:  # a coefficient for every entry: 1 (an exact product) where the feature has none
            coefs.append(np.ones(rows[-1].shape[0], np.float32) if coef is None else coef)
    by_feature = iter(sources)
    every = [next(by_feature) if f.name in entries else _NO_ROWS for f in features]
    joined = np.concatenate(rows)[order] if rows else np.zeros(0, np.int64)
    return every, joined, (np.concatenate(coefs)[order] if weighted else None)


_NO_ROWS = np.zeros((0, 1), np.float32)


def _by_table(features: list[FeatureSpec]) -> tuple[list[FeatureSpec], list[str]]:
    """(`features` with each table's together, in the order of the tables' first features; those tables)."""
    tables = list(dict.fromkeys(f.table for f in features))
    return [f for name in tables for f in features if f.table == name], tables


def _one_id_each(batch: Ragged) -> bool:
    """True when no example of `batch` has more than one id."""
    splits = batch.row_splits
    return batch.num_values <= 1 or bool((splits[1:] - splits[:-1]).max() <= 1)


def _by_position(batch: Ragged) -> Ragged:
    """`batch` with entry k's id replaced by k: a lookup of it in the [N, D] rows of its entries reads
    exactly what a lookup of `batch` reads in the table."""
    return dataclasses.replace(batch, values=np.arange(batch.num_values, dtype=np.int64))


def _options(spec: EmbeddingSpec) -> dict[str, str]:
    """Every option of `spec` by its path (`optimizer.learning_rate`, `tables['t'].dim`), as JSON text
    (callables by their qualified name): equal on ranks that agree, and the differing ones nameable."""

    def name(obj: Any) -> str:
        if callable(obj) and hasattr(obj, "__qualname__"):
            return f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"
        return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))

    flat: dict[str, str] = {}

    def walk(path: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{path}.{key}" if path else str(key), item)
        elif isinstance(value, (list, tuple)) and value:
            for index, item in enumerate(value):
                label = repr(item["name"]) if isinstance(item, dict) and "name" in item else str(index)
                walk(f"{path}[{label}]", item)
        else:
            flat[path] = json.dumps(value, sort_keys=True, default=name)

    walk("", spec.to_dict())
    return flat


def _option_differences(options: list[dict[str, str]], differ: list[int], limit: int = 6) -> str:
    """': rank 1 has optimizer.learning_rate=0.2 (rank 0: 0.1)', for the ranks in `differ`."""
    parts = []
    for rank in differ:
        keys = sorted(k for k in set(options[0]) | set(options[rank]) if options[0].get(k) != options[rank].get(k))
        shown = ", ".join(
            f"{key}={options[rank].get(key, '(none)')} (rank 0: {options[0].get(key, '(none)')})"
            for key in keys[:limit]
        )
        more = f", and {len(keys) - limit} more" if len(keys) > limit else ""
        parts.append(f"rank {rank} has {shown}{more}")
    return ": " + "; ".join(parts) if parts else ""


class UnknownTableError(KeyError, ValueError):
    """A table name the engine does not have (a ValueError naming the argument, and a KeyError as before)."""

    def __init__(self, name: Any, names: list[str]):
        super().__init__(name)
        self.message = f"Argument `name` must be one of the tables {names}. Received: {name!r}."

    def __str__(self) -> str:
        return self.message
