"""`FastKernels`: the engine's kernels (`engine/kernels.Kernels`) on numba, the same bits as numpy's.

Per step the engine asks:

- `to_batch`: the ids checked (and copied, for training) in one compiled
  pass for the common inputs, else `to_ragged`;
- `lookups`: activations, as `lookup.py` computes them (coefficients for
  mean, sqrtn and weights from `coefficients.py`, the bits of
  `lookup.pooled_coefficients`);
- `pooled_entries` / `sequence_entries`: one feature's gradient as (ids,
  source rows, coefficients, gradient matrix) for the owner-computes
  backward;
- `sum_tables`: each table's entries summed to one gradient per touched row
  (`owner.bucket_owned` lists each partition's entries, then
  `owner.sum_owned` walks them: one pass per feature, into per-table scratch
  kept between steps and grown to the high-water mark); the id -> slot map
  holds no slot of the next step when it returns (each step's slots lie
  above its epoch), even on error; after a step of few duplicates the rows
  of one entry are left unwritten and the update reads them in place
  (`Summed.refs`); on one numba thread (a distributed rank's), every
  table's sums in one call (`sum_serial`, `batched.sum_entries`);
- `apply_all`: the fused optimizer updates (`fused.py`), once every check
  of the step has passed.

A whole step too small to be worth a parallel launch runs table-batched
(`batched.py`): `dense_batches` checks every dense feature's ids in one
pass, `pack` puts the step's features in flat arrays (a `Packed`),
`lookup_packed` looks them all up in one call, `sum_packed` checks and sums
every gradient in one, and `apply_all` updates the tables that share an
optimizer in one. `Engine` calls these when the kernels have them.

A call too small to be worth a parallel launch runs its kernels on the
calling thread alone, and several such calls (`lookups`, `sum_tables`,
`apply_all`: one per feature or table) run side by side on Python threads
(`threads.py`). Same kernels, same partitions, same numbers: only the
threads change.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numba
import numpy as np

from ...spec import EmbeddingSpec, FeatureSpec, OptimizerSpec, parse_combiner
from .. import aligned
from ..kernels import Lookup, Update
from ..optimizers import touches_all_rows
from ..ragged import Ragged, is_ragged_tensor, is_sparse, to_ragged
from . import batched, coefficients, disk_cache, forward, fused, owner  # noqa: F401  (disk_cache: see its docstring)
from . import threads as thread_rules
from .threads import num_threads, one_thread_below, run_each

__all__ = ["Entries", "FastKernels", "Packed", "Summed"]

_F32 = np.float32
_NO_COEF = np.zeros(0, dtype=_F32)
_NO_QUANT_ROW = np.zeros(3, dtype=_F32)  # a packed table that is not quantized: a quantum of 0


class Entries(NamedTuple):
    """Entry k adds `coef[k] * grads[src[k]]` to row `ids[k]`; all contiguous, int64 / float32.
    An empty `coef` means every coefficient is 1 (an unweighted sum, a sequence feature).
    A tuple, so that `*entries` are the first four arguments of `owner.sum_owned`."""

    ids: np.ndarray
    src: np.ndarray
    coef: np.ndarray
    grads: np.ndarray  # [R, D]


@dataclasses.dataclass(frozen=True)
class Summed:
    """One table's summed gradients, by partition: rows `starts[r] .. stops[r]` of the buffers.

    `unique_ids` / `grads` are views of the engine's persistent scratch
    (valid until the next `sum_table` of the same table); `compact()` copies
    them out as (ids [U], grads [U, D]). `refs`, when not None, is
    `(opened, src, coef, entry_grads)`: the rows of one entry that the sums
    left unwritten (`owner.sum_owned`), which the lazy fused update reads in
    place (`fused.reads_refs`); `write_refs()` writes them for any other
    reader."""

    unique_ids: np.ndarray
    grads: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    rows: int | None = None  # the number of rows, when known (`sum_packed`: no numpy reduction for `size`)
    refs: tuple | None = None

    @property
    def size(self) -> int:
        if self.rows is not None:
            return self.rows
        return int((self.stops - self.starts).sum())

    def write_refs(self) -> None:
        """Writes the rows the sums left unwritten into `grads` (the same bits); then `refs` is unread."""
        if self.refs is not None:
            opened, src, coef, entry_grads = self.refs
            with one_thread_below(self.size * self.grads.shape[1]):
                owner.write_opened(src, coef, entry_grads, opened, self.starts, self.stops, self.grads)

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        self.write_refs()
        parts = [slice(int(a), int(b)) for a, b in zip(self.starts, self.stops)]
        return (np.concatenate([self.unique_ids[p] for p in parts]), np.concatenate([self.grads[p] for p in parts]))


@dataclasses.dataclass(frozen=True, eq=False)
class Packed:
    """A small step's features packed for the table-batched kernels (`batched.py`), as a table-batched
    operator takes them: every feature's ids, row splits, weights and positions one after another in
    four flat arrays, and one `layout` row per feature (`batched.TABLE` ...). `FastKernels.pack` makes
    it for a lookup; the engine keeps it in its `LookupResult`, so the gradient's sums read the same
    arrays (`sum_packed`)."""

    tables: tuple[np.ndarray, ...]
    keys: tuple  # what names each table (the engine's table names)
    dims: np.ndarray  # int64 [T]
    quant: np.ndarray  # float32 [T, 3]: each table's (lower, upper, quantum), a quantum of 0 if not quantized
    layout: np.ndarray  # int64 [F, batched.COLUMNS]
    values: np.ndarray
    splits: np.ndarray
    weights: np.ndarray
    positions: np.ndarray
    outputs: list[tuple[int, int]]  # where feature f's activations and lengths start (`lookup_packed`); F + 1
    shapes: list[tuple[int, ...]]  # feature f's activation shape


def _quant(quantization: np.ndarray | None) -> np.ndarray:
    """What the forward kernels take for a table's quantization: its float32 (lower, upper, quantum),
    or `forward.NO_QUANTIZATION`."""
    return forward.NO_QUANTIZATION if quantization is None else quantization


def _segments(n: int, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """`parts` contiguous segments covering 0 .. n (for compact inputs)."""
    bounds = np.linspace(0, n, max(1, parts) + 1).astype(np.int64)
    return bounds[:-1].copy(), bounds[1:].copy()


@numba.njit(cache=True, nogil=True)
def _checked_ids(values, splits, lowest, num_buckets, out):
    """True when `splits` runs from 0 to N without decreasing and every id is in [lowest, num_buckets);
    then `out`, unless empty, is a copy of `values`.

    The splits are checked whole before any id is read, and the ids are
    then read as one flat run of N (numba checks no bounds: splits such as
    [0, 100, 5] for N = 5 are refused before anything is read). The id
    loop has no early exit, so LLVM vectorizes it: 19 us against 72 for
    82k ids with the copy (12 against 56 without), where the earlier loop
    walked row by row and left at the first bad id. Serial: in parallel
    the second thread's wake-up costs more than it saves."""
    n = values.shape[0]
    rows = splits.shape[0] - 1
    if rows < 0 or splits[0] != 0 or splits[rows] != n:
        return False
    for b in range(rows):
        if splits[b + 1] < splits[b]:
            return False
    bad = False
    if out.shape[0] != 0:
        for k in range(n):
            v = values[k]
            out[k] = v
            bad |= (v < lowest) | (v >= num_buckets)
    else:
        for k in range(n):
            v = values[k]
            bad |= (v < lowest) | (v >= num_buckets)
    return not bad


_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_MARKS = np.zeros(0, dtype=np.int64)  # `owner.sum_owned` with no row left unwritten
_EPOCH_LIMIT = 2**31 - 1  # a slot map's values are int32
_DEFER_BYTES = 1 << 20  # rows of one entry are left unwritten when the step's rows had at least this many bytes


_EXPONENT = np.int32(0x7F800000)  # the exponent bits of a float32: all ones for inf and NaN only


@numba.njit(cache=True, nogil=True)
def _no_full_exponent(bits):
    """True when no int32 view `bits` of float32 values has every exponent bit set (no inf, no NaN).

    The running minimum of `(bits & E) ^ E` is 0 exactly when some value's
    exponent is all ones; an integer minimum vectorizes, and nothing is
    allocated (`np.isfinite(a).all()` first writes a bool array as large as
    `a`). Serial: 0.26 ms against numpy's 1.0 for a sequence feature's
    [4096, 20, 64] gradient, 16 against 25 us for [4096, 64]."""
    smallest = _EXPONENT
    for k in range(bits.shape[0]):
        v = (bits[k] & _EXPONENT) ^ _EXPONENT
        smallest = v if v < smallest else smallest
    return smallest != 0


class FastKernels:
    """Fast kernels for the tables of one engine (one persistent slot map per table)."""

    def __init__(self):
        self._slot_maps: dict[str, np.ndarray] = {}
        self._epochs: dict[str, int] = {}  # table -> its next step's epoch (`owner.sum_owned`)
        self._shares: dict[str, tuple[int, int]] = {}  # table -> (rows, entries) of its last step (`_defers`)
        self._scratch: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # table -> (ids, grads, opened)
        self._orders: dict[str, np.ndarray] = {}  # table -> entry indices by owner (one feature at a time)
        # batch -> {(combiner, safe): coefficients}: a lookup's, reused by its gradient; gone with the batch
        self._coefficients: weakref.WeakKeyDictionary[Ragged, dict] = weakref.WeakKeyDictionary()
        self._batched_maps: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # tables -> (slot map, offsets)
        self._splits: dict[tuple[int, ...], np.ndarray] = {}  # dense batch shape -> its row splits

    @staticmethod
    def threads() -> int:
        return num_threads()

    def describe(self, spec: EmbeddingSpec) -> str:
        numpy_updates = sorted(
            t.name for t in spec.tables if (o := spec.optimizer_for(t.name)) is not None and not self.fuses(o)
        )
        rest = f" (numpy updates for tables {numpy_updates})" if numpy_updates else ""
        return (
            f"  kernels: numba, {self.threads()} thread(s): parallel gather-pool, owner-computes "
            f"backward, fused optimizer updates{rest}."
        )

    @staticmethod
    def fuses(optimizer: OptimizerSpec) -> bool:
        return _fact("fusable", optimizer)

    def slot_maps_clean(self) -> bool:
        """True when no table's id -> slot map holds a slot of the next step (every value is below its
        epoch), as it must be between steps, even after an error."""
        return all(bool(np.all(m < self._epochs.get(t, 0))) for t, m in self._slot_maps.items())

    # Input ------------------------------------------------------------------------

    def to_batch(self, ids, feature: FeatureSpec, weights, *, copy: bool) -> Ragged:
        """`to_ragged(ids, weights, feature=feature)`: `ragged_ids` for the common inputs, else `to_ragged`."""
        batch = self.ragged_ids(ids, feature, weights, copy=copy)
        return batch if batch is not None else to_ragged(ids, weights, feature=feature)

    @staticmethod
    def ragged_ids(ids, feature, weights=None, *, copy: bool = True) -> Ragged | None:
        """`to_ragged(ids, weights, feature=feature)` in one compiled pass, for the common case only.

        The common cases: an identity feature, a RaggedTensor-like `ids` whose
        `values` and `row_splits` are 1-D int64 arrays, every id in range and
        the splits valid; `weights` None, or RaggedTensor-like with the same
        row splits and 1-D numeric `values` of the same length. Or a dense
        int64 array with no padding (`_dense_ids`). Anything else,
        including every input `to_ragged` would reject, pad or remap, returns
        None: the caller then runs `to_ragged`, which gives its own result or
        error.

        `copy`: a training batch outlives the call (its gradient comes later)
        and its ids address rows with no bounds check, so they are copied as
        they are checked: ids changed by the caller after the check cannot
        reach past a table. Arrays nobody can write (`_immutable`: a
        `tf.RaggedTensor`'s) are kept as they are. An inference batch is used
        within the call only (`copy=False`): the caller's contiguous arrays
        are checked and used as they are. Positions are left to
        `Ragged.row_positions()` (only a sequence lookup asks)."""
        if isinstance(ids, np.ndarray):
            return FastKernels._dense_ids(ids, feature, weights, copy)
        if feature.id_source != "identity" or is_sparse(ids) or not is_ragged_tensor(ids):
            return None
        w = None
        if weights is not None:
            if is_sparse(weights) or not is_ragged_tensor(weights):
                return None
            w, w_splits = weights.values, weights.row_splits
            if not (
                _vectors(w, w_splits)
                and w.dtype.kind in "iuf"
                and w.shape == np.shape(ids.values)
                and (w_splits is ids.row_splits or np.array_equal(w_splits, ids.row_splits))
            ):
                return None
        values, splits = ids.values, ids.row_splits
        if not (
            _vectors(values, splits) and values.dtype == np.int64 and splits.dtype == np.int64 and values.shape[0] > 0
        ):
            return None
        if _immutable(values) and _immutable(splits):  # a tensor's own read-only arrays: they cannot change
            copy = False
        copy = copy or not (values.flags.c_contiguous and splits.flags.c_contiguous)
        out = np.empty(values.shape[0], dtype=np.int64) if copy else _NO_IDS
        if not _checked_ids(values, splits, 0, feature.num_buckets, out):
            return None
        if w is not None:
            with np.errstate(over="ignore"):  # past float32's range: refused by to_ragged
                w = w.astype(np.float32)
        if w is not None and np.isinf(w).any():
            return None  # to_ragged refuses it, naming the entry
        if not copy:
            return Ragged(values, splits, w)
        return Ragged(out, splits.copy(), w)

    @staticmethod
    def _dense_ids(ids: np.ndarray, feature, weights, copy: bool) -> Ragged | None:
        """`ragged_ids` for a dense [B] or [B, L] int64 array with no padding in it.

        Every id must be in range, and not 0 when a dense 0 is padding (an
        `EmbeddingConfigSpec` feature): any padding, default value or error
        is `to_ragged`'s (None). Weights: None or a numeric array of the same
        shape. Each row then holds L ids at positions 0 .. L - 1."""
        if not (feature.id_source == "identity" and ids.ndim in (1, 2) and ids.dtype == np.int64 and ids.size):
            return None
        w = None
        if weights is not None:
            if not (isinstance(weights, np.ndarray) and weights.shape == ids.shape and weights.dtype.kind in "iuf"):
                return None
            with np.errstate(over="ignore"):  # past float32's range: refused by to_ragged
                w = weights.reshape(-1).astype(np.float32)
            if np.isinf(w).any():
                return None  # to_ragged refuses it, naming the entry
        length = 1 if ids.ndim == 1 else ids.shape[1]
        values = ids.reshape(-1)  # a view when numpy can make one, else already a copy
        splits = np.arange(ids.shape[0] + 1, dtype=np.int64) * length
        copy = copy and np.shares_memory(values, ids)  # not the flags: a strided [B, 1] slice is a view too
        out = np.empty(values.shape[0], dtype=np.int64) if copy else _NO_IDS
        lowest = 1 if feature.dense_zero_is_padding else 0
        if not _checked_ids(values, splits, lowest, feature.num_buckets, out):
            return None
        return Ragged(out if copy else values, splits, w)

    def dense_batches(self, ids: Sequence[np.ndarray], features: Sequence[FeatureSpec]) -> list[Ragged] | None:
        """`to_batch(ids[k], features[k], None, copy=True)` for dense int64 [B] or [B, L] arrays with no
        padding, in one compiled pass for all of them: the ids copied into one new array (each batch's
        values a view of it), checked against each feature's range. None when the step is not small
        (`batches`) or any id is out of range or padding: then each goes through `to_batch`."""
        if not self.batches(sum(a.size for a in ids)):
            return None
        offsets = [0]
        for a in ids:
            offsets.append(offsets[-1] + a.size)
        values = np.concatenate([a.reshape(-1) for a in ids])
        lowest = [1 if f.dense_zero_is_padding else 0 for f in features]
        highest = [f.num_buckets for f in features]
        if not batched.ids_in_range(
            values, np.array(offsets, np.int64), np.array(lowest, np.int64), np.array(highest, np.int64)
        ):
            return None
        return [
            Ragged(values[offsets[k] : offsets[k + 1]], self._dense_splits(a.shape), None) for k, a in enumerate(ids)
        ]

    def _dense_splits(self, shape: tuple[int, ...]) -> np.ndarray:
        """The row splits of a dense [B] or [B, L] batch, `arange(B + 1) * L`, made once per shape
        (read-only: batches share it)."""
        splits = self._splits.get(shape)
        if splits is None:
            splits = np.arange(shape[0] + 1, dtype=np.int64) * (1 if len(shape) == 1 else shape[1])
            splits.flags.writeable = False
            if len(self._splits) < 64:
                self._splits[shape] = splits
        return splits

    @staticmethod
    def all_finite(array: np.ndarray) -> bool:
        """`np.isfinite(array).all()` for a float32 array, in one compiled pass with no temporary."""
        if array.dtype != np.float32 or not array.flags.c_contiguous:
            return bool(np.isfinite(array).all())
        return bool(_no_full_exponent(array.reshape(-1).view(np.int32)))

    # Forward ----------------------------------------------------------------------

    def coefficients(self, batch: Ragged, combiner: str, safe: bool, dim: int):
        """(ids, row_splits, example or None, coef float32, empty for all ones) of the kept entries.

        A sum keeps every entry, and its coefficient is the weight itself
        (`float32(1.0 * w) == w`, the reference's arithmetic), so it needs no
        pass. Mean and sqrtn coefficients are computed once per batch (the
        lookup and its gradient share them) by `coefficients.py`, the
        bits of `lookup.pooled_coefficients`."""
        if combiner == "sum":
            weights = batch.weights
            coef = _NO_COEF if weights is None else np.ascontiguousarray(weights, dtype=_F32)
            return batch.values, batch.row_splits, None, coef
        known = self._coefficients.setdefault(batch, {})
        key = (combiner, bool(safe))
        if key not in known:
            with one_thread_below(batch.num_values * dim):
                known[key] = coefficients.pooled_coefficients(
                    batch.values, batch.row_splits, batch.weights, combiner, safe
                )
        return known[key]

    def pooled_lookup(
        self,
        table: np.ndarray,
        batch: Ragged,
        combiner: str,
        *,
        safe: bool = True,
        quantization: np.ndarray | None = None,
    ) -> np.ndarray:
        """`lookup.pooled_lookup(table, batch, combiner, safe=safe, quantization=quantization)`, in parallel."""
        combiner = parse_combiner(combiner)
        ids, splits, _, coef = self.coefficients(batch, combiner, safe, table.shape[1])
        out = aligned.empty((batch.batch_size, table.shape[1]), _F32)
        with one_thread_below(ids.shape[0] * table.shape[1]):
            forward.pooled(table, ids, splits, coef, out, _quant(quantization))
        return out

    def sequence_lookup(
        self, table: np.ndarray, batch: Ragged, max_sequence_length: int, quantization: np.ndarray | None = None
    ):
        """`lookup.sequence_lookup(table, batch, max_sequence_length, quantization)`, in parallel."""
        length = int(max_sequence_length)
        out = aligned.empty((batch.batch_size, length, table.shape[1]), _F32)
        lengths = np.empty(batch.batch_size, dtype=np.int64)
        positions = batch.row_positions()
        with one_thread_below(max(batch.num_values, batch.batch_size * length) * table.shape[1]):
            forward.sequence_forward(
                table, batch.values, batch.row_splits, positions, out, lengths, _quant(quantization)
            )
        return out, lengths

    def lookups(self, requests: Sequence[Lookup]) -> list:
        """Each request's `pooled_lookup`, or `sequence_lookup` (activations, lengths), in order.

        Independent lookups too small for a parallel launch run side by side
        (`threads.run_each`); when all of them together are (`batches`), they
        run as one call of `batched.lookup_all`."""
        packed = self.pack(requests)
        if packed is not None:
            return self.lookup_packed(packed)
        return run_each([(r.batch.num_values * r.table.shape[1], functools.partial(self._lookup, r)) for r in requests])

    @staticmethod
    def batches(work: int) -> bool:
        """True when a step's phase touching `work` row elements runs table-batched (`batched.py`): below
        `SERIAL_WORK`, where the per-feature kernels would run on the calling thread anyway."""
        return work < thread_rules.SERIAL_WORK  # read at each call: tests change it

    def pack(self, requests: Sequence[Lookup], keys: Sequence | None = None) -> Packed | None:
        """The requests as one `Packed` step for the table-batched kernels, or None when they are not a
        small step (`batches`) on plain tables. `keys[k]` names request k's table (default: the table
        array itself); requests with one key share one table."""
        if not requests or not self.batches(sum(r.batch.values.shape[0] * r.table.shape[1] for r in requests)):
            return None  # nothing to look up (numba types no empty tuple of tables), or not small
        tables: list[np.ndarray] = []
        quant: list[np.ndarray] = []
        names: list = []
        layout: list[int] = []
        outputs = [(0, 0)]  # where each feature's activations and lengths start
        shapes: list[tuple[int, ...]] = []
        values: list[np.ndarray] = []
        splits: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        positions: list[np.ndarray] = []
        indices: dict = {}  # id(table) or key -> its index in `tables` (a dict: no search per feature)
        for k, r in enumerate(requests):
            key = r.table if keys is None else keys[k]
            index = indices.setdefault(id(key) if keys is None else key, len(tables))
            if index == len(tables):
                tables.append(r.table)
                quant.append(_NO_QUANT_ROW if r.quantization is None else r.quantization)
                names.append(key)
            batch = r.batch
            n = batch.values.shape[0]
            values.append(batch.values)
            splits.append(batch.row_splits)
            if r.max_sequence_length is not None:
                has_positions = batch.positions is not None
                if batch.positions is not None:
                    positions.append(batch.positions)
                examples, length, dim = batch.row_splits.shape[0] - 1, int(r.max_sequence_length), r.table.shape[1]
                layout += (index, 0, length, 0, n, examples, 0, has_positions)
                shapes.append((examples, length, dim))
                outputs.append((outputs[-1][0] + examples * length * dim, outputs[-1][1] + examples))
            else:
                mode = _MODES.get(r.combiner)
                if mode is None:
                    mode = _MODES[parse_combiner(r.combiner)]
                has_weights = batch.weights is not None
                if batch.weights is not None:
                    weights.append(batch.weights)
                examples, dim = batch.row_splits.shape[0] - 1, r.table.shape[1]
                layout += (index, mode, 0, bool(r.safe), n, examples, has_weights, 0)
                shapes.append((examples, dim))
                outputs.append((outputs[-1][0] + examples * dim, outputs[-1][1]))
        if not _plain(tables):
            return None
        return Packed(
            tuple(tables),
            tuple(names),
            np.array([t.shape[1] for t in tables], np.int64),
            np.array(quant, _F32).reshape(-1, 3),
            np.array(layout, np.int64).reshape(-1, batched.COLUMNS),
            _flat(values, np.int64),
            _flat(splits, np.int64),
            _flat(weights, _F32),
            _flat(positions, np.int64),
            outputs,
            shapes,
        )

    @staticmethod
    def lookup_packed(packed: Packed) -> list:
        """`lookups` of a packed step, in one call of `batched.lookup_all`: each feature's activations (a
        view of one buffer), or (activations, lengths) for a sequence feature."""
        out = np.empty(packed.outputs[-1][0], _F32)
        seq_lengths = np.empty(packed.outputs[-1][1], np.int64)
        batched.lookup_all(
            packed.tables,
            packed.dims,
            packed.quant,
            packed.layout,
            packed.values,
            packed.splits,
            packed.weights,
            packed.positions,
            out,
            seq_lengths,
        )
        results: list = []
        for (start, lo), (stop, hi), shape in zip(packed.outputs, packed.outputs[1:], packed.shapes):
            if len(shape) == 3:
                results.append((out[start:stop].reshape(shape), seq_lengths[lo:hi]))
            else:
                results.append(out[start:stop].reshape(shape))
        return results

    def _lookup(self, r: Lookup):
        if r.max_sequence_length is not None:
            return self.sequence_lookup(r.table, r.batch, r.max_sequence_length, r.quantization)
        return self.pooled_lookup(r.table, r.batch, r.combiner, safe=r.safe, quantization=r.quantization)

    # Backward ---------------------------------------------------------------------

    def pooled_entries(self, batch: Ragged, combiner: str, grad: np.ndarray, *, safe: bool = True) -> Entries:
        """The entries of a pooled feature's gradient `grad` [B, D]."""
        combiner = parse_combiner(combiner)
        ids, _, example, coef = self.coefficients(batch, combiner, safe, grad.shape[-1])
        src = batch.row_ids() if example is None else example
        return Entries(ids, src, coef, np.ascontiguousarray(grad, dtype=_F32))

    def sequence_entries(self, batch: Ragged, max_sequence_length: int, grad: np.ndarray) -> Entries:
        """The entries of a sequence feature's gradient `grad` [B, L, D] (truncated positions dropped)."""
        length = int(max_sequence_length)
        keep = batch.row_positions() < length
        src = batch.row_ids()[keep] * length + batch.row_positions()[keep]
        grads = np.ascontiguousarray(grad, dtype=_F32).reshape(batch.batch_size * length, grad.shape[-1])
        return Entries(np.ascontiguousarray(batch.values[keep]), src, _NO_COEF, grads)

    def sum_rows(self, table: str, num_rows: int, dim: int, entries: list[Entries]) -> tuple[np.ndarray, np.ndarray]:
        """(unique ids int64 [U], summed gradients float32 [U, D]) of one table; ids unsorted."""
        return self.sum_table(table, num_rows, dim, entries).compact()

    def _buffers(self, table: str, rows: int, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The table's persistent scratch (ids, grads, opened), grown to at least `rows` rows (high-water mark)."""
        scratch = self._scratch.get(table)
        if scratch is None or scratch[0].shape[0] < rows or scratch[1].shape[1] != dim:
            rows = max(rows, 1)
            scratch = self._scratch[table] = (
                np.empty(rows, dtype=np.int64),
                aligned.empty((rows, dim), _F32),
                np.empty(rows, dtype=np.int64),
            )
        return scratch

    def _order(self, table: str, n: int) -> np.ndarray:
        """The table's persistent entry-index buffer (`owner.bucket_owned`), at least `n` long."""
        order = self._orders.get(table)
        if order is None or order.shape[0] < n:
            order = self._orders[table] = np.empty(max(n, 1), dtype=np.int64)
        return order

    def sum_table(self, table: str, num_rows: int, dim: int, entries: list[Entries]) -> Summed:
        """One table's entries summed to one gradient per touched row, in one pass per feature.

        Partition p (ids with id % P == p) writes its rows into its own region of
        the table's persistent scratch, as long as the number of entries it owns;
        the id -> slot map holds no slot of the next step when this returns, even
        on error (the epoch moves past every slot this step gives)."""
        total = sum(e.ids.shape[0] for e in entries)
        slot_map, epoch = self._slot_map(table, num_rows, total)
        parts = self.threads()
        owned_by = [np.zeros(parts, dtype=np.int64) for _ in entries]  # per feature: entries per partition
        for e, own in zip(entries, owned_by):
            owner.count_owned(e.ids, own)
        owned = np.zeros(parts, dtype=np.int64)
        for own in owned_by:
            owned += own
        starts = np.zeros(parts, dtype=np.int64)
        np.cumsum(owned[:-1], out=starts[1:])
        unique_ids, grads, opened = self._buffers(table, int(owned.sum()), dim)
        counts = np.zeros(parts, dtype=np.int64)
        defer = bool(entries) and self._defers(table, dim)  # the last feature's rows of one entry stay unwritten
        with one_thread_below(int(owned.sum()) * dim):  # the same P partitions, walked by one thread
            for number, (e, own) in enumerate(zip(entries, owned_by)):
                ostarts = np.zeros(parts, dtype=np.int64)
                np.cumsum(own[:-1], out=ostarts[1:])
                order = self._order(table, e.ids.shape[0])
                owner.bucket_owned(e.ids, ostarts, order)
                stops = ostarts + own
                last = number == len(entries) - 1  # the last feature's rows of one entry stay unwritten
                marks = opened if defer else _NO_MARKS
                owner.sum_owned(
                    *e,
                    slot_map,
                    starts,
                    counts,
                    unique_ids,
                    grads,
                    order,
                    ostarts,
                    stops,
                    epoch,
                    marks,
                    defer and last,
                )
        self._shares[table] = (int(counts.sum()), total)
        refs = (opened, entries[-1].src, entries[-1].coef, entries[-1].grads) if defer else None
        return Summed(unique_ids, grads, starts, starts + counts, refs=refs)

    def _slot_map(self, table: str, num_rows: int, total: int) -> tuple[np.ndarray, int]:
        """The table's id -> slot map and this step's epoch, for `total` entries (`owner.sum_owned`); the
        next step's epoch is set first: an error in the sums leaves no slot of the next step."""
        slot_map = self._slot_maps.get(table)
        if slot_map is None:
            slot_map = self._slot_maps[table] = owner.new_slot_map(num_rows)
        epoch = self._epochs.get(table, 0)
        if epoch + total >= _EPOCH_LIMIT:  # start again before the map's int32 values would overflow
            slot_map.fill(-1)
            epoch = 0
        self._epochs[table] = epoch + total
        return slot_map, epoch

    def _defers(self, table: str, dim: int) -> bool:
        """Whether this step's sums leave the rows of one entry unwritten (`owner.sum_owned`), from the
        table's last step: when at least 3/4 of its entries were on distinct rows and those rows'
        gradients took at least `_DEFER_BYTES`. Either way the numbers are the same.

        Measured (one thread, steps back to back, medians, D = 64 unless said): uniform ids 0.85x the
        step with every row written, B = 512 0.94x, 100,000 rows (2/3 of the entries on distinct
        rows) 0.99x, D = 16 0.99x; Zipf ids (1/3) 1.02x with Adagrad, SGD or lazy Adam, `criteo26`
        (D = 16, 4,096 ids a table, rows of 64 bytes that stay in cache) 1.02x: there the update's
        test of each row and the sums' test at a row's second entry cost more than the rows not
        written save."""
        last = self._shares.get(table)
        if last is None:
            return False
        rows, entries = last
        return 4 * rows >= 3 * entries and rows * dim * 4 >= _DEFER_BYTES

    def sum_tables(self, requests: Sequence[tuple[str, int, int, list[Entries]]]) -> list[Summed]:
        """`sum_table(*request)` for each (table, num_rows, dim, entries), small tables side by side; on one
        numba thread, every table in one call (`sum_serial`)."""
        if len(requests) > 1 and self.threads() == 1:
            summed = self.sum_serial(requests)
            if summed is not None:
                return summed
        return run_each(
            [
                (sum(e.ids.shape[0] for e in request[3]) * request[2], functools.partial(self.sum_table, *request))
                for request in requests
            ]
        )

    def sum_serial(self, requests: Sequence[tuple[str, int, int, list[Entries]]]) -> list[Summed] | None:
        """`sum_tables` in one call of `batched.sum_entries`, with the tables' own slot maps and scratch:
        each row's entries summed in the same order, the same bits, without ~25 us of Python and three
        passes a table. None when the entries' gradients are not plain float32 matrices (one numba type)."""
        pieces = [(t, e) for t, request in enumerate(requests) for e in request[3]]
        grads = tuple(e.grads for _, e in pieces)
        if not pieces or not _plain(grads) or any(g.dtype != _F32 or g.ndim != 2 for g in grads):
            return None
        maps, epochs, uniques, sums = [], [], [], []
        for table, num_rows, dim, entries in requests:
            total = sum(e.ids.shape[0] for e in entries)
            slot_map, epoch = self._slot_map(table, num_rows, total)
            unique_ids, rows, _ = self._buffers(table, total, dim)
            maps.append(slot_map)
            epochs.append(epoch)
            uniques.append(unique_ids)
            sums.append(rows)
        sizes = [e.ids.shape[0] for _, e in pieces]
        bounds = np.zeros(len(pieces) + 1, np.int64)
        np.cumsum(sizes, out=bounds[1:])
        weighted = np.array([e.coef.shape[0] != 0 for _, e in pieces], np.bool_)
        coef = np.empty(int(bounds[-1]), _F32)
        for (_, e), lo, hi, has in zip(pieces, bounds[:-1].tolist(), bounds[1:].tolist(), weighted.tolist()):
            if has:
                coef[lo:hi] = e.coef
        counts = np.zeros(len(requests), np.int64)
        batched.sum_entries(
            _flat([e.ids for _, e in pieces], np.int64),
            _flat([e.src for _, e in pieces], np.int64),
            coef,
            bounds,
            weighted,
            np.array([t for t, _ in pieces], np.int64),
            grads,
            tuple(maps),
            np.array(epochs, np.int64),
            tuple(uniques),
            tuple(sums),
            counts,
        )
        zero = np.zeros(1, np.int64)
        out = []
        for (table, _, _, entries), unique_ids, rows, count in zip(requests, uniques, sums, counts.tolist()):
            self._shares[table] = (count, sum(e.ids.shape[0] for e in entries))
            out.append(Summed(unique_ids, rows, zero, np.array([count], np.int64), count))
        return out

    def sum_packed(
        self,
        packed: Packed,
        grads: Sequence[np.ndarray | None],
        tables: Sequence[tuple[object, int]],
        *,
        check_numerics: bool = False,
    ) -> list[Summed] | int:
        """The summed gradients of each of `tables` ((key, dim): no row for a table of no feature), from
        every feature's gradient (`grads[f]`, float32 of its activation's shape, or None), in one call
        of `batched.sum_all`: the entries of `pooled_entries` / `sequence_entries` summed as
        `sum_tables` sums them, the same bits. With `check_numerics`, the index f of the first gradient
        holding inf or NaN instead, if any (checked whole, before any sum)."""
        key = packed.keys, tuple(t.shape[0] for t in packed.tables)
        maps = self._batched_maps.get(key)
        if maps is None:
            rows = key[1]
            offsets = np.zeros(len(rows), np.int64)
            np.cumsum(rows[:-1], out=offsets[1:])
            maps = self._batched_maps[key] = (owner.new_slot_map(sum(rows)), offsets)
        slot_map, moff = maps
        given = [g is not None for g in grads]
        try:
            unique, summed, ustart, gstart, counts = batched.sum_all(
                packed.dims,
                slot_map,
                moff,
                packed.layout,
                packed.values,
                packed.splits,
                packed.weights,
                packed.positions,
                _flat([g.reshape(-1) for g in grads if g is not None], _F32),
                np.array(given, np.bool_),
                check_numerics,
                batched.DIRECT_ROWS,  # read at each call: tests change it
            )
        except BaseException:
            slot_map.fill(-1)  # never leave the map dirty, whatever failed
            raise
        if counts.shape[0] and counts[0] < 0:  # a gradient holds inf or NaN: feature -1 - counts[0]
            return -1 - int(counts[0])
        zeros = np.zeros(len(packed.tables) + 1, np.int64)
        by_key = {}
        for t, (key, lo, g0, count, dim) in enumerate(
            zip(packed.keys, ustart.tolist(), gstart.tolist(), counts.tolist(), packed.dims.tolist())
        ):
            rows = summed[g0 : g0 + count * dim].reshape(count, dim)
            by_key[key] = Summed(unique[lo : lo + count], rows, zeros[t : t + 1], counts[t : t + 1], count)
        none = zeros[-1:]
        return [
            by_key[key] if key in by_key else Summed(unique[:0], np.zeros((0, dim), _F32), none, none, 0)
            for key, dim in tables
        ]

    @classmethod
    def first_not_finite(cls, arrays: Sequence[np.ndarray]) -> int:
        """The index of the first float32 array holding inf or NaN, or -1: `all_finite` of each, in one call
        for small arrays (copied into one), array by array for large ones (no copy)."""
        if sum(a.size for a in arrays) * 4 >= _FINITE_COPY_BYTES:
            return next((k for k, a in enumerate(arrays) if not cls.all_finite(a)), -1)
        if not arrays:
            return -1
        offsets = np.zeros(len(arrays) + 1, np.int64)
        np.cumsum([a.size for a in arrays], out=offsets[1:])
        flat = _flat([a.reshape(-1) for a in arrays], _F32)
        return int(batched.first_not_finite(flat.view(np.int32), offsets))

    # Update -----------------------------------------------------------------------

    @classmethod
    def apply_in_place(
        cls,
        optimizer: OptimizerSpec,
        lr: float,
        table: np.ndarray,
        slots: Mapping[str, np.ndarray],
        unique_ids: np.ndarray,
        summed: np.ndarray,
    ) -> None:
        """The fused update of `optimizer` (`fused.fusable(optimizer)` must hold); writes in place."""
        starts, stops = _segments(unique_ids.shape[0], cls.threads())
        cls.apply_summed(optimizer, lr, table, slots, Summed(unique_ids, summed, starts, stops))

    @staticmethod
    def apply_summed(
        optimizer: OptimizerSpec, lr: float, table: np.ndarray, slots: Mapping[str, np.ndarray], summed: Summed
    ) -> None:
        """`apply_in_place` on the regions of a `Summed`; writes in place (see `fused.apply`)."""
        refs = summed.refs
        if refs is not None and not fused.reads_refs(optimizer):
            summed.write_refs()
            refs = None
        with one_thread_below(_update_work(optimizer, table, summed)):
            fused.apply(optimizer, lr, table, slots, summed.unique_ids, summed.grads, summed.starts, summed.stops, refs)

    @classmethod
    def apply_all(cls, updates: Sequence[Update]) -> None:
        """`apply_summed` for each update (different tables), small ones side by side; when all of them
        together are small (`batches`), the updates of tables that share an optimizer and learning
        rate as one call of `fused.apply_tables`."""
        if updates and cls.batches(sum(_update_work(u.optimizer, u.table, u.summed) for u in updates)):
            cls._apply_grouped(updates)
            return
        run_each(
            [
                (
                    _update_work(u.optimizer, u.table, u.summed),
                    functools.partial(cls.apply_summed, u.optimizer, u.lr, u.table, u.slots, u.summed),
                )
                for u in updates
            ]
        )

    @classmethod
    def _apply_grouped(cls, updates: Sequence[Update]) -> None:
        """The small updates of `apply_all`: one `fused.apply_tables` call per (optimizer, learning rate)
        over plain arrays, the rest one by one on the calling thread."""
        groups: dict[tuple, list[Update]] = {}
        alone = []
        for u in updates:
            if _fact("batchable", u.optimizer) and _plain([u.table, *u.slots.values()]):
                groups.setdefault((id(u.optimizer), u.lr), []).append(u)
            else:
                alone.append(u)
        for group in groups.values():
            for u in group:
                u.summed.write_refs()  # `apply_tables` reads `grads` whole
            optimizer = group[0].optimizer
            names = fused.slot_names(optimizer)
            fused.apply_tables(
                optimizer,
                group[0].lr,
                tuple(u.table for u in group),
                tuple(tuple(u.slots[name] for name in names) for u in group),
                tuple(u.summed.unique_ids for u in group),
                tuple(u.summed.grads for u in group),
                tuple(u.summed.starts for u in group),
                tuple(u.summed.stops for u in group),
            )
        for u in alone:
            cls.apply_summed(u.optimizer, u.lr, u.table, u.slots, u.summed)


_FINITE_COPY_BYTES = 1 << 16  # gradients up to this many bytes are checked in one call, copied into one array
_MODES = {"sum": batched.SUM, "mean": batched.MEAN, "sqrtn": batched.SQRTN}


def _flat(arrays: list[np.ndarray], dtype) -> np.ndarray:
    """The arrays one after another, as one new contiguous array of `dtype` (empty for none)."""
    if not arrays:
        return np.empty(0, dtype)
    if len(arrays) == 1:
        return np.array(arrays[0], dtype=dtype)  # a copy: the kernels get arrays of one type (writable, C)
    return np.concatenate(arrays, dtype=dtype)


def _plain(arrays: Sequence[np.ndarray]) -> bool:
    """True when every array is a plain, writable, C-contiguous numpy array (not a memmap): arrays of one
    numba type, so a tuple of them is one type."""
    return all(type(a) is np.ndarray and a.flags.c_contiguous and a.flags.writeable for a in arrays)


def _immutable(array: np.ndarray) -> bool:
    """True for an array nobody can write: read-only, and owning its data (no writable array shares it).

    `tf.RaggedTensor`'s arrays are such (it copies what it is given): a
    training batch may keep them, checked, without a copy of its own."""
    return not array.flags.writeable and array.flags.owndata


def _vectors(*arrays) -> bool:
    """True when every argument is a 1-D numpy array."""
    return all(isinstance(a, np.ndarray) and a.ndim == 1 for a in arrays)


_FACTS: dict[tuple[str, int], tuple[OptimizerSpec, bool]] = {}  # (fact, id(spec)) -> (the spec, its answer)


def _fact(name: str, optimizer: OptimizerSpec) -> bool:
    """`fused.fusable` ("fusable"), `fused.batchable` ("batchable") or `touches_all_rows` ("all rows") of
    `optimizer`, worked out once per spec object (frozen: the answer cannot change). Keyed by identity:
    hashing a spec dataclass hashes every field, each step."""
    known = _FACTS.get((name, id(optimizer)))
    if known is not None and known[0] is optimizer:
        return known[1]
    if len(_FACTS) > 256:
        _FACTS.clear()
    answer = {"fusable": fused.fusable, "batchable": fused.batchable, "all rows": touches_all_rows}[name](optimizer)
    _FACTS[(name, id(optimizer))] = (optimizer, answer)
    return answer


def _update_work(optimizer: OptimizerSpec, table: np.ndarray, summed: Summed) -> int:
    """Row elements an update touches: the summed rows, or every row for non-lazy Adam."""
    if _fact("all rows", optimizer):
        return table.size
    return summed.size * table.shape[1]
