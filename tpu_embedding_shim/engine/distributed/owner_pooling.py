"""The owner-pooled exchange: each owner pools its part of every bag, the requester adds the parts.

TPUs and TorchRec's row-wise sharding pool where the rows live. For the
pooled features of a step, a requester sends each kept entry k of its
examples (`lookup.pooled_coefficients`: the entries one process pools,
safe-lookup pruning done) to the owner of its row: the local row, the
example b_k and the coefficient c_k = scale[b_k] * w_k as float32, the
number one process multiplies the row by. Per (example, feature) that has
entries on it, the owner answers one *partial sum*: the running sum of
`c_k * T[i_k]` over those entries, in entry order. The requester adds the
partial sums of an example, owner by owner; an example with no kept entry
gets zeros, as in one process.

The backward is the transpose: the requester sends one gradient row G[b]
per (example, feature, owner), and the owner expands it with what it kept
from the forward into the entries `c_k * G[b_k]` of one process (the same
float32 product, so the same bits), which the engine then sums and applies
as in the exact mode.

Traffic: per entry, 8 + 8 + 4 bytes (row, example, coefficient) go to the
owner once; rows and gradients move once per (example, feature, owner)
instead of once per entry, so they shrink by the bag length. The price:
an activation adds the same products as one process, grouped by owner, so
it equals one process's to float tolerance, not bit for bit.

>>> import numpy as np
>>> from tpu_embedding_shim.engine.distributed import SingleProcess
>>> bag = Bag(example=np.array([0, 0, 2]), owner=np.array([0, 0, 0]), local=np.array([1, 3, 3]),
...           coef=np.array([0.5, 0.5, 1.0], np.float32), batch_size=3)
>>> table = np.arange(8, dtype=np.float32).reshape(4, 2)  # row i = [2i, 2i + 1]
>>> [activations], kept = pool(SingleProcess(), [bag], [table])
>>> activations.tolist()  # example 0: the mean of rows 1 and 3; example 1: no entry
[[4.0, 5.0], [0.0, 0.0], [6.0, 7.0]]
>>> [(rows, table, index, coefs)] = expand(SingleProcess(), kept, [np.ones((3, 2), np.float32)])
>>> rows.tolist(), (table[index] * coefs[:, None]).tolist()
([1, 3, 3], [[0.5, 0.5], [0.5, 0.5], [1.0, 1.0]])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .. import aligned
from ..kernels import Kernels, Lookup, NumpyKernels
from ..ragged import Ragged
from .communicator import Communicator
from .exchange import Segments, compiled, fill, pack, swap_counts

__all__ = ["Bag", "Kept", "pool", "expand", "scatter"]


@dataclasses.dataclass(frozen=True)
class Bag:
    """One pooled feature's kept entries on the requester, in entry order (examples non-decreasing).

    Attributes:
      example, owner, local: int64 [n]: each entry's example, the rank that
        owns its row, and the row's index there.
      coef: float32 [n]: its coefficient c_k (one process's, as float32).
      batch_size: B, the examples of this rank.
    """

    example: np.ndarray
    owner: np.ndarray
    local: np.ndarray
    coef: np.ndarray
    batch_size: int


@dataclasses.dataclass(frozen=True)
class Kept:
    """What a training lookup keeps for its backward, on every rank (P pooled features, W ranks).

    As a requester: `asked` [W, P], the partial sums it asked of each
    owner, and `examples`, the example of each (segments owner-major).
    As an owner: `answered` [W, P], the partial sums it sent each source;
    `received` [W, P], the entries it got; and per entry (segments
    source-major) its local `rows`, float32 `coefs` and `group`, the index
    of its partial sum within its segment.
    """

    dims: np.ndarray
    asked: np.ndarray
    examples: np.ndarray
    answered: np.ndarray
    received: np.ndarray
    rows: np.ndarray
    coefs: np.ndarray
    group: np.ndarray


def _pooled(
    kernels: Kernels,
    table: np.ndarray,
    ids: np.ndarray,
    counts: np.ndarray,
    coef: np.ndarray | None,
    quantization: np.ndarray | None = None,
):
    """Per group g of `counts[g]` consecutive entries: the running sum of `coef_k * table[ids_k]` over them
    (1 for no `coef`), in entry order, zeros for an empty group: a weighted `sum` lookup of the kernels
    (rows quantized first with `quantization`, a table's `lookup.quantization_parameters`)."""
    splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    batch = Ragged(np.ascontiguousarray(ids, np.int64), splits, coef)
    return kernels.lookups([Lookup(table, batch, "sum", safe=False, quantization=quantization)])[0]


def pool(
    comm: Communicator,
    bags: Sequence[Bag],
    tables: Sequence[np.ndarray],
    kernels: Kernels | None = None,
    quantizations: Sequence[np.ndarray | None] | None = None,
) -> tuple[list[np.ndarray], Kept]:
    """Each bag's activations [B, D], pooled by the owners (collective).

    Args:
      comm: the ranks.
      bags: per pooled feature (the same features on every rank), this rank's entries.
      tables: per pooled feature, this rank's rows of its table [V_r, D].
      kernels: the engine's kernels (None: numpy's); they give the same bits.
      quantizations: per pooled feature, its table's `lookup.quantization_parameters` (None: none is
        quantized): the owners quantize their rows before pooling them, as one process does.

    Returns:
      (activations per feature, what the backward needs).
    """
    kernels = NumpyKernels() if kernels is None else kernels
    num = len(bags)
    quantizations = [None] * num if quantizations is None else quantizations
    dims = np.array([t.shape[1] for t in tables], np.int64)
    ones = np.ones(num, np.int64)
    outbox, example, received, rows, examples_got, coefs = _send_entries(comm, bags)

    # As an owner: one partial sum per run of equal examples in each (source, feature) segment.
    answered, group, _, runs = _groups(received, examples_got)
    answers = Segments(answered, dims)
    if num == 1:  # one feature: its entries and partial sums are the buffers, in order (no index, no copy)
        answer = _pooled(kernels, tables[0], rows, runs, coefs, quantizations[0]).reshape(-1)
    else:
        answer = aligned.empty((answers.size,), np.float32)
        entries, by_run = Segments(received, ones), Segments(answered, ones)
        for p in range(num):  # every source at once
            at = entries.entries(p)
            partial_sums = _pooled(kernels, tables[p], rows[at], runs[by_run.entries(p)], coefs[at], quantizations[p])
            answers.put(answer, p, partial_sums)

    # As a requester: which example each partial sum it gets back belongs to.
    asked, _, first, _ = _groups(outbox.counts, example)
    examples = example[first]
    parts = Segments(asked, dims)
    partial = comm.alltoallv(answer, answers.values_per_rank(), parts.values_per_rank())
    groups = Segments(asked, ones)
    activations = []
    for p, bag in enumerate(bags):  # each example's partial sums, owner by owner, added in that order
        of = examples[groups.entries(p)]
        values, index = parts.rows(partial, p)
        order = np.argsort(of, kind="stable")
        counts = np.bincount(of, minlength=bag.batch_size)
        activations.append(_pooled(kernels, values, index[order], counts, None))
    return activations, Kept(dims, asked, examples, answered, received, rows, coefs, group)


def _send_entries(comm: Communicator, bags: Sequence[Bag]) -> tuple:
    """Every bag's entries to the owners of their rows, with their examples and coefficients (collective).

    Returns (the outbox, each sent entry's example in send order, the received counts [W, P], and per
    received entry its local row, example and float32 coefficient, segments source-major)."""
    outbox = pack([b.owner for b in bags], [b.local for b in bags], comm.size)
    examples, coefs = _joined([b.example for b in bags], np.int64), _joined([b.coef for b in bags], np.float32)
    kernels = compiled()
    if kernels is not None:  # one pass: (local row, example) pairs and coefficients in send order
        sent_pairs, coef = kernels.sent_entries(outbox.order, outbox.local, examples, coefs)
        example = sent_pairs[1::2]
    else:
        example, coef = examples[outbox.order], coefs[outbox.order]
        sent_pairs = np.stack([outbox.local, example], axis=1).reshape(-1)
    received = swap_counts(comm, outbox.counts)
    sent_n, got_n = outbox.counts.sum(axis=1), received.sum(axis=1)
    pairs = comm.alltoallv(sent_pairs, 2 * sent_n, 2 * got_n)
    rows, examples_got = pairs.reshape(-1, 2)[:, 0], pairs.reshape(-1, 2)[:, 1]
    coefs = comm.alltoallv(coef, sent_n, got_n)
    return outbox, example, received, rows, examples_got, coefs


def _joined(arrays: Sequence[np.ndarray], dtype: type) -> np.ndarray:
    """The arrays end to end as `dtype`: the one array itself when there is one of that type (no copy)."""
    if len(arrays) == 1:
        return arrays[0].astype(dtype, copy=False)
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)


def scatter(comm: Communicator, bags: Sequence[Bag], grads: Sequence[np.ndarray | None], dims: np.ndarray):
    """The exact mode's backward of the pooled features, with the traffic of the owner-pooled one (collective).

    The requesters pooled the forward themselves, so the owners kept nothing: each bag's kept entries go
    to their owners now (local row, example, coefficient), then one gradient row per (example, feature,
    owner), as `expand` sends them. The owners rebuild each entry's `G[b_k] * c_k`, the float32 product
    one process computes: the same bits, with a gradient row per example instead of per entry.

    Args:
      comm: the ranks.
      bags: per pooled feature, this rank's kept entries (an empty bag for a feature without gradient).
      grads: per pooled feature, this rank's float32 gradient [B, D] (multiplier applied), or None.
      dims: int64 [P], each feature's width.

    Returns:
      as `expand`.
    """
    outbox, example, received, rows, examples_got, coefs = _send_entries(comm, bags)
    answered, group, _, _ = _groups(received, examples_got)
    asked, _, first, _ = _groups(outbox.counts, example)
    kept = Kept(np.asarray(dims, np.int64), asked, example[first], answered, received, rows, coefs, group)
    return expand(comm, kept, grads, np.ones_like(answered))  # a source sent entries of p only with a gradient


def _groups(counts: np.ndarray, examples: np.ndarray) -> tuple[np.ndarray, ...]:
    """The runs of equal examples within each of the [W, P] segments of `counts` (entries laid out as
    `Segments`): (runs per segment [W, P], each entry's run index within its segment, each run's first
    entry, each run's length), runs in entry order."""
    kernels = compiled()
    if kernels is not None:  # one pass
        return kernels.runs(counts, examples)
    n = examples.shape[0]
    segment = np.repeat(np.arange(counts.size, dtype=np.int64), counts.reshape(-1))
    new = np.ones(n, bool)
    new[1:] = (segment[1:] != segment[:-1]) | (examples[1:] != examples[:-1])
    first = np.flatnonzero(new)
    per_segment = np.bincount(segment[first], minlength=counts.size).reshape(counts.shape).astype(np.int64)
    run = np.cumsum(new) - 1  # each entry's run, counted over all segments
    before = np.cumsum(per_segment.reshape(-1)) - per_segment.reshape(-1)  # runs in the earlier segments
    group = run - before[segment] if n else np.zeros(0, np.int64)
    lengths = np.diff(np.append(first, n)).astype(np.int64)
    return per_segment, group, first, lengths


def expand(
    comm: Communicator, kept: Kept, grads: Sequence[np.ndarray | None], given: np.ndarray | None = None
) -> list[tuple[np.ndarray, ...]]:
    """The entries each owner gets from a pooled backward (collective).

    Args:
      comm: the ranks.
      kept: what the forward kept.
      grads: per pooled feature, this rank's float32 gradient [B, D] of
        its activations (multiplier applied), or None (no gradient).
      given: int64 [W, P], 1 where rank s sends a gradient for feature p,
        as the ranks agreed (`DistributedEngine.apply_gradients`); then
        each owner knows what it gets, the partial sums it answered, and
        no counts are exchanged. None: the ranks swap their counts first.

    Returns:
      per pooled feature: (local rows int64 [n], gradient rows G float32
      [R, D], index b int64 [n], coefficients c float32 [n]) of the entries
      this rank owns, source rank by source rank, each in that source's
      entry order: entry k's gradient is `G[b_k] * c_k`, one process's
      float32 product (none from a source that sent no gradient for the
      feature).
    """
    num = kept.asked.shape[1]
    mine = [g is not None for g in grads]
    counts = kept.asked * np.array(mine, np.int64)
    sent = Segments(counts, kept.dims)
    flat = aligned.empty((sent.size,), np.float32)
    sources = [_NO_ROWS if g is None else g for g in grads]
    fill(flat, Segments(kept.asked, kept.dims), sources, kept.examples, present=mine)  # every feature and owner
    if given is not None:
        received = kept.answered * given
    else:
        received = swap_counts(comm, counts)
        wrong = (received != 0) & (received != kept.answered)
        if wrong.any():
            source, p = (int(i) for i in np.argwhere(wrong)[0])
            raise RuntimeError(
                f"Rank {source} sent {received[source, p]} gradient rows for pooled feature {p}, not the "
                f"{kept.answered[source, p]} of the lookup: the ranks applied different lookups."
            )
    got = Segments(received, kept.dims)
    values = comm.alltoallv(flat, sent.values_per_rank(), got.values_per_rank())
    kernels = compiled()
    routes = kernels.routes if kernels is not None else _routes
    rows, src, coefs, bounds = routes(kept.received, received, kept.group, kept.rows, kept.coefs)
    out: list[tuple[np.ndarray, ...]] = []
    for p in range(num):
        table, index = got.rows(values, p)
        at = slice(int(bounds[p]), int(bounds[p + 1]))
        out.append((rows[at], table, index[src[at]], coefs[at]))
    return out


_NO_ROWS = np.zeros((0, 1), np.float32)  # the source of a feature without gradient (none of its rows is read)


def _routes(entries, rows_got, group, local, coefs) -> tuple[np.ndarray, ...]:
    """numpy's `fast.exchange.routes` (the same arrays): every feature's received entries, feature-major,
    those of a (source, feature) that sent gradient rows only, with the gradient row each reads."""
    world, num = entries.shape
    segments = Segments(entries, np.ones(num, np.int64))
    rows: list[np.ndarray] = []
    src: list[np.ndarray] = []
    coef: list[np.ndarray] = []
    bounds = [0]
    for p in range(num):
        at = segments.entries(p)
        sources = np.repeat(np.arange(world), entries[:, p])
        keep = rows_got[sources, p] != 0  # a source that sent no gradient for p: its entries get none
        before = np.cumsum(rows_got[:, p]) - rows_got[:, p]  # each source's first gradient row
        rows.append(local[at[keep]])
        src.append(before[sources[keep]] + group[at[keep]])
        coef.append(coefs[at[keep]])
        bounds.append(bounds[-1] + int(keep.sum()))

    def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    return joined(rows, np.int64), joined(src, np.int64), joined(coef, np.float32), np.array(bounds, np.int64)
