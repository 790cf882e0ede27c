"""The all-to-all exchanges of a step: entries bucketed by owner, sent, answered, unpacked.

Every exchange carries the entries of all F features of the spec at once,
in W x F *segments*: destination by destination (source by source on the
receiving side), and within one rank feature by feature, each segment in
its feature's entry order (`Outbox`). A receiver learns the segment sizes
first (`swap_counts`), then gets the row indices (`send_ids`).

Rows and gradients travel as one flat float32 buffer laid out in the same
segments: segment (rank, f) holds its n entries as an [n, dims[f]] block
(`Segments.block`), so tables of different widths share a buffer. A
feature's segments over every rank are read (`Segments.rows`) and written
(`Segments.put`) at once, with one index array: no loop over the W x F
segments on a step's path.

Nothing here does arithmetic on the values: they are only moved, so a
number is the same bits on the rank that reads it as on the rank that
wrote it.

>>> import numpy as np
>>> box = pack([np.array([1, 0, 1]), np.array([0])], [np.array([5, 6, 7]), np.array([8])], world_size=2)
>>> box.counts.tolist()  # [destination, feature]
[[1, 1], [2, 0]]
>>> box.local.tolist()  # to rank 0: feature 0's [6], feature 1's [8]; to rank 1: feature 0's [5, 7]
[6, 8, 5, 7]
>>> box.entries(1, 0).tolist()  # feature 0's entries in segment (rank 1, feature 0)
[0, 2]

A forward asks each owner for each distinct row once per table (`distinct`,
`requests`) and expands the answer locally: the rows are copies, so the
bits are the same as when every entry asks for its row.

>>> [(owners, rows, inverse)] = distinct([np.array([1, 0, 1, 1])], [np.array([5, 6, 5, 7])], world_size=2)
>>> owners.tolist(), rows.tolist(), inverse.tolist()  # entries 0 and 2 ask for the same row
([1, 0, 1], [5, 6, 7], [0, 1, 0, 2])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .communicator import Communicator

__all__ = [
    "Segments",
    "Outbox",
    "pack",
    "distinct",
    "requests",
    "fill",
    "ranges",
    "swap_counts",
    "send_ids",
    "send_values",
    "compiled",
]


def _starts(sizes: np.ndarray) -> np.ndarray:
    """Where each of the [W, F] segments of `sizes` starts, laid out rank-major."""
    flat = sizes.reshape(-1)
    return (np.cumsum(flat) - flat).reshape(sizes.shape)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`starts[i], starts[i] + 1, ..., starts[i] + lengths[i] - 1` for each i, laid end to end (int64).

    >>> ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist()
    [5, 6, 9, 10, 11]
    """
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    shift = np.asarray(starts, np.int64).reshape(-1) - (np.cumsum(lengths) - lengths)
    return np.repeat(shift, lengths) + np.arange(total, dtype=np.int64)


class Segments:
    """W x F segments of entries, rank-major: segment (r, f) holds `counts[r, f]` entries of feature f,
    each `dims[f]` values wide in a flat buffer."""

    def __init__(self, counts: np.ndarray, dims: np.ndarray):
        self.counts = counts  # int64 [W, F]
        self.dims = dims  # int64 [F]
        self.entry_starts = _starts(counts)  # where each segment starts in the list of entries
        self.value_starts = _starts(counts * dims)  # and in the flat buffer of values
        self.size = int((counts * dims).sum())  # the flat buffer's length
        # every value start is a multiple of `unit`: the buffer is an [size / unit, unit] array of rows
        self.unit = int(np.gcd.reduce(dims)) if dims.shape[0] and dims.min() > 0 else 1
        self._by_feature: tuple[np.ndarray, ...] | None = None

    def values_per_rank(self) -> np.ndarray:
        """int64 [W]: how many values go to (or come from) each rank."""
        return (self.counts * self.dims).sum(axis=1)

    def span(self, rank: int, feature: int) -> slice:
        """Segment (rank, feature) in the list of entries."""
        start = int(self.entry_starts[rank, feature])
        return slice(start, start + int(self.counts[rank, feature]))

    def block(self, flat: np.ndarray, rank: int, feature: int) -> np.ndarray:
        """Segment (rank, feature) of the flat buffer, as an [n, dims[feature]] view."""
        start, n, dim = int(self.value_starts[rank, feature]), int(self.counts[rank, feature]), int(self.dims[feature])
        return flat[start : start + n * dim].reshape(n, dim)

    def _feature_major(self) -> tuple[np.ndarray, ...]:
        """Every feature's entries and `unit` rows, feature by feature, rank by rank, with where each
        feature's start: computed once for all features (no work per segment)."""
        if self._by_feature is None:
            widths = self.counts * (self.dims // self.unit)
            self._by_feature = (
                ranges(self.entry_starts.T, self.counts.T),
                np.concatenate([[0], np.cumsum(self.counts.sum(axis=0))]),
                ranges(self.value_starts.T // self.unit, widths.T),
                np.concatenate([[0], np.cumsum(widths.sum(axis=0))]),
            )
        return self._by_feature

    def entries(self, feature: int) -> np.ndarray:
        """The positions, in the list of entries, of feature's segments over every rank (rank by rank)."""
        order, bounds, _, _ = self._feature_major()
        return order[bounds[feature] : bounds[feature + 1]]

    def _units(self, feature: int) -> np.ndarray:
        """The `unit`-wide rows of the flat buffer that feature's segments cover, rank by rank."""
        _, _, units, bounds = self._feature_major()
        return units[bounds[feature] : bounds[feature + 1]]

    def rows(self, flat: np.ndarray, feature: int) -> tuple[np.ndarray, np.ndarray]:
        """(table [R, D], index [n]): `table[index]` are the entries of feature's segments, rank by rank.

        A view of `flat` when D is the buffer's unit (no copy), else a copy."""
        dim = int(self.dims[feature])
        if dim == self.unit:
            return flat.reshape(-1, dim), self._units(feature)
        table = flat.reshape(-1, self.unit)[self._units(feature)].reshape(-1, dim)
        return table, np.arange(table.shape[0], dtype=np.int64)

    def put(self, flat: np.ndarray, feature: int, values: np.ndarray) -> None:
        """Writes [n, D] `values` into feature's segments, rank by rank."""
        flat.reshape(-1, self.unit)[self._units(feature)] = values.reshape(-1, self.unit)

    def gather(self, flat: np.ndarray, feature: int, source: np.ndarray, index: np.ndarray, coef=None) -> None:
        """`put(flat, feature, source[index] * coef[:, None])` (no `coef`: `source[index]`), gathering
        straight into the buffer when it holds one feature (no copy in between)."""
        if self.counts.shape[1] != 1:
            values = np.take(source, index, axis=0)  # rows: faster than `source[index]`
        else:
            values = flat.reshape(-1, int(self.dims[0]))
            np.take(source, index, axis=0, out=values, mode="clip")  # in range; "raise" would buffer `out`
        if coef is not None:
            values *= coef[:, None]
        if self.counts.shape[1] != 1:
            self.put(flat, feature, values)


@dataclasses.dataclass(frozen=True)
class Outbox:
    """The entries of F features in send order, for W ranks.

    Attributes:
      order: int64 [n]: send position p holds entry `order[p]` of the
        features' entries laid end to end (feature 0's, then feature 1's...).
      counts: int64 [W, F]: entries for destination d of feature f.
      bases: int64 [F + 1]: where each feature's entries start end to end.
      local: int64 [n]: the owner's local row of each entry, in send order.
      starts: int64 [W, F]: where each segment starts in send order.
    """

    order: np.ndarray
    counts: np.ndarray
    bases: np.ndarray
    local: np.ndarray
    starts: np.ndarray
    _sent: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    def entries(self, rank: int, feature: int) -> np.ndarray:
        """Indices, within `feature`'s own entries, of the entries of segment (rank, feature), in order."""
        start = int(self.starts[rank, feature])
        return self.order[start : start + int(self.counts[rank, feature])] - self.bases[feature]

    def sent(self, feature: int) -> np.ndarray:
        """Indices, within `feature`'s own entries, of its entries in send order (rank by rank)."""
        if not self._sent:  # every feature's at once (no work per segment)
            per_feature = self.counts.sum(axis=0)
            within = self.order[ranges(self.starts.T, self.counts.T)] - np.repeat(self.bases[:-1], per_feature)
            self._sent.append((within, np.concatenate([[0], np.cumsum(per_feature)])))
        within, bounds = self._sent[0]
        return within[bounds[feature] : bounds[feature + 1]]


_COMPILED: list = []  # once known: [the compiled kernels' module, or None]


def compiled() -> Any:
    """The compiled kernels of the exchange's index work (`fast/exchange.py`), or None when numba is missing
    or turned off (`fast.available()`): then numpy's code here does the same work, with the same results."""
    if not _COMPILED:
        from .. import fast

        if fast.available():
            from ..fast import exchange

            _COMPILED.append(exchange)
        else:
            _COMPILED.append(None)
    return _COMPILED[0]


def pack(owners: Sequence[np.ndarray], locals_: Sequence[np.ndarray], world_size: int) -> Outbox:
    """Orders every feature's entries destination-major, feature-minor, keeping each feature's entry order.

    Args:
      owners: per feature, int64 [n_f]: the rank that owns each entry's row.
      locals_: per feature, int64 [n_f]: that row's index on its owner.
      world_size: W.
    """
    num_features = len(owners)
    sizes = [o.shape[0] for o in owners]
    bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    owner = np.concatenate(owners).astype(np.int64, copy=False) if num_features else np.zeros(0, np.int64)
    kernels = compiled()
    if kernels is not None:  # a counting sort, one pass to count and one to place
        order, counts = kernels.bucket(owner, bases, world_size)
    else:
        key = owner * num_features + np.repeat(np.arange(num_features, dtype=np.int64), sizes)
        small = key.astype(np.uint16) if world_size * num_features <= 1 << 16 else key  # numpy: radix sort, O(n)
        order = np.argsort(small, kind="stable")
        counts = np.bincount(key, minlength=world_size * num_features).reshape(world_size, num_features)
        counts = counts.astype(np.int64)
    local = np.concatenate(locals_).astype(np.int64, copy=False)[order] if num_features else np.zeros(0, np.int64)
    return Outbox(order, counts, bases, local, _starts(counts))


def requests(owner: np.ndarray, local: np.ndarray, bases: np.ndarray, world_size: int) -> tuple:
    """What a forward asks the owners for: per group t of entries (`bases[t]:bases[t + 1]` of `owner` /
    `local`, a table's), each distinct (owner, local row) pair once (`distinct`), every group's pairs in
    one `Outbox` (`pack`: by owner, then group, each in the order of first occurrence).

    Returns (outbox, pair, at), int64 per entry: its pair among the groups' pairs laid end to end
    (`outbox.bases`), and that pair's send position. One compiled call when numba is there
    (`fast/exchange.requests`), the same arrays."""
    groups = bases.shape[0] - 1
    kernels = compiled()
    if kernels is not None:
        order, counts, sizes, sent, pair, at = kernels.requests(owner, local, bases, world_size)
        pair_bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return Outbox(order, counts, pair_bases, sent, _starts(counts)), pair, at
    spans = [slice(int(bases[t]), int(bases[t + 1])) for t in range(groups)]
    found = distinct([owner[s] for s in spans], [local[s] for s in spans], world_size)
    outbox = pack([f[0] for f in found], [f[1] for f in found], world_size)
    pair = np.concatenate([f[2] + base for f, base in zip(found, outbox.bases[:-1])]) if found else bases[:0]
    where = np.empty(outbox.order.shape[0], np.int64)
    where[outbox.order] = np.arange(outbox.order.shape[0], dtype=np.int64)
    return outbox, pair.astype(np.int64, copy=False), where[pair]


def distinct(owners: Sequence[np.ndarray], locals_: Sequence[np.ndarray], world_size: int) -> list[tuple]:
    """Per group of entries t (a table's), each distinct (owner, local row) pair of its entries once.

    Returns per group (owners, locals, inverse), int64: the pairs in the order they first occur, and for
    each entry the index of its pair, so that `owners[inverse], locals[inverse]` are the entries' own.
    numpy (the compiled kernels do this inside `requests`)."""
    keys = [local.astype(np.int64) * world_size + owner.astype(np.int64) for owner, local in zip(owners, locals_)]
    out = []
    for key in keys:  # sorted, then put in the order of first occurrence
        pairs, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(order.shape[0], np.int64)
        rank[order] = np.arange(order.shape[0])
        pairs = pairs[order]
        out.append((pairs % world_size, pairs // world_size, rank[inverse.reshape(-1)]))
    return out


def fill(
    flat: np.ndarray,
    layout: Segments,
    sources: Sequence[np.ndarray],
    rows: np.ndarray,
    coef: np.ndarray | None = None,
    present: Sequence[bool] | None = None,
) -> None:
    """Fills a send buffer: entry k of `layout`'s segments (rank-major, feature-minor) is row `rows[k]` of
    its feature's source (times `coef[k]`, the float32 product), written where `layout` puts it.

    Args:
      flat: float32 [layout.size] when every feature is present; else laid out as `layout` with the
        absent features' counts set to 0.
      layout: the segments of the entries of `rows` (counts [W, F], dims [F]).
      sources: per feature, float32 [R_f, dims[f]].
      rows: int64, one per entry, in segment order.
      coef: float32, one per entry, or None (the rows as they are).
      present: per feature, whether its entries are written (None: all are).

    Several features: one compiled pass when numba is there and the sources are plain arrays of one type;
    else, and for one feature (numpy's gather of wide rows straight into the buffer is the faster), one
    gather per feature (`Segments.gather`), every rank at once: the same values.
    """
    num = layout.counts.shape[1]
    given = np.ones(num, np.bool_) if present is None else np.asarray(present, np.bool_)
    kernels = compiled()
    if kernels is not None and num > 1 and all(_plain(s) for s in sources):
        no_coef = np.zeros(0, np.float32)
        kernels.fill(
            flat,
            tuple(sources),
            np.ascontiguousarray(layout.counts, np.int64),
            np.ascontiguousarray(layout.dims, np.int64),
            np.ascontiguousarray(rows, np.int64),
            no_coef if coef is None else np.ascontiguousarray(coef, np.float32),
            given,
        )
        return
    written = layout if given.all() else Segments(layout.counts * given, layout.dims)
    for f in range(num):
        if given[f] and layout.counts[:, f].any():
            at = layout.entries(f)
            written.gather(flat, f, sources[f], rows[at], None if coef is None else coef[at])


def _plain(array: np.ndarray) -> bool:
    """A plain, writable, C-contiguous float32 matrix (not a memmap): one numba type for every source."""
    return (
        type(array) is np.ndarray
        and array.dtype == np.float32
        and array.ndim == 2
        and array.flags.c_contiguous
        and array.flags.writeable
    )


def swap_counts(comm: Communicator, counts: np.ndarray) -> np.ndarray:
    """Each rank's [W, F] send counts in, its [W, F] receive counts (row s: from rank s) out."""
    world_size, num_features = counts.shape
    chunk = [num_features] * world_size
    return comm.alltoallv(counts.reshape(-1).astype(np.int64), chunk, chunk).reshape(world_size, num_features)


def send_ids(comm: Communicator, outbox: Outbox) -> tuple[np.ndarray, np.ndarray]:
    """Sends each entry's local row to its owner: counts first, then the rows (two all-to-alls).

    Returns (received counts [W, F], the received local rows in segments, source by source)."""
    received = swap_counts(comm, outbox.counts)
    local = comm.alltoallv(outbox.local, outbox.counts.sum(axis=1), received.sum(axis=1))
    return received, local


def send_values(comm: Communicator, flat: np.ndarray, sent: Segments, received: Segments) -> np.ndarray:
    """One all-to-all of a flat float32 buffer laid out as `sent`; returns the buffer laid out as `received`."""
    return comm.alltoallv(flat, sent.values_per_rank(), received.values_per_rank())
