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
>>> [[(rows, grads)]] = expand(SingleProcess(), kept, [np.ones((3, 2), np.float32)])
>>> rows.tolist(), grads.tolist()
([1, 3, 3], [[0.5, 0.5], [0.5, 0.5], [1.0, 1.0]])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..lookup import running_sums
from .communicator import Communicator
from .exchange import Segments, pack, swap_counts

__all__ = ["Bag", "Kept", "pool", "expand"]


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


def _runs(examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the runs of equal values in a non-decreasing int array."""
    if examples.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate([[True], examples[1:] != examples[:-1]]))
    return starts, np.diff(np.append(starts, examples.shape[0]))


def pool(comm: Communicator, bags: Sequence[Bag], tables: Sequence[np.ndarray]) -> tuple[list[np.ndarray], Kept]:
    """Each bag's activations [B, D], pooled by the owners (collective).

    Args:
      comm: the ranks.
      bags: per pooled feature (the same features on every rank), this rank's entries.
      tables: per pooled feature, this rank's rows of its table [V_r, D].

    Returns:
      (activations per feature, what the backward needs).
    """
    world, num = comm.size, len(bags)
    dims = np.array([t.shape[1] for t in tables], np.int64)
    ones = np.ones(num, np.int64)
    outbox = pack([b.owner for b in bags], [b.local for b in bags], world)
    example = np.concatenate([b.example for b in bags]).astype(np.int64)[outbox.order]
    coef = np.concatenate([b.coef for b in bags]).astype(np.float32)[outbox.order]
    received = swap_counts(comm, outbox.counts)
    sent_n, got_n = outbox.counts.sum(axis=1), received.sum(axis=1)
    pairs = comm.alltoallv(np.stack([outbox.local, example], axis=1).reshape(-1), 2 * sent_n, 2 * got_n)
    rows, examples_got = pairs.reshape(-1, 2)[:, 0], pairs.reshape(-1, 2)[:, 1]
    coefs = comm.alltoallv(coef, sent_n, got_n)

    # As an owner: one partial sum per run of equal examples in each (source, feature) segment.
    entries = Segments(received, ones)
    answered = np.zeros((world, num), np.int64)
    group = np.empty(rows.shape[0], np.int64)
    runs = {}
    for source in range(world):
        for p in range(num):
            span = entries.span(source, p)
            starts, lengths = runs[source, p] = _runs(examples_got[span])
            answered[source, p] = starts.shape[0]
            group[span] = np.repeat(np.arange(starts.shape[0]), lengths)
    answers = Segments(answered, dims)
    answer = np.empty(answers.size, np.float32)
    for source in range(world):
        for p in range(num):
            span = entries.span(source, p)
            products = tables[p][rows[span]] * coefs[span][:, None]  # one process's float32 products
            answers.block(answer, source, p)[...] = running_sums(products, *runs[source, p])

    # As a requester: which example each partial sum it gets back belongs to.
    asked = np.zeros((world, num), np.int64)
    wanted = []
    for owner in range(world):
        for p in range(num):
            start = int(outbox.starts[owner, p])
            mine = example[start : start + int(outbox.counts[owner, p])]
            starts, _ = _runs(mine)
            asked[owner, p] = starts.shape[0]
            wanted.append(mine[starts])
    examples = np.concatenate(wanted) if wanted else np.zeros(0, np.int64)
    parts = Segments(asked, dims)
    partial = comm.alltoallv(answer, answers.values_per_rank(), parts.values_per_rank())
    groups = Segments(asked, ones)
    activations = []
    for p, bag in enumerate(bags):  # each example's partial sums, owner by owner, added in that order
        of = np.concatenate([examples[groups.span(owner, p)] for owner in range(world)])
        values = np.concatenate([parts.block(partial, owner, p) for owner in range(world)])
        order = np.argsort(of, kind="stable")
        out = np.zeros((bag.batch_size, int(dims[p])), np.float32)
        starts, lengths = _runs(of[order])
        out[of[order][starts]] = running_sums(values[order], starts, lengths)
        activations.append(out)
    return activations, Kept(dims, asked, examples, answered, received, rows, coefs, group)


def expand(comm: Communicator, kept: Kept, grads: Sequence[np.ndarray | None]) -> list[list[tuple]]:
    """The entries each owner gets from a pooled backward (collective).

    Args:
      comm: the ranks.
      kept: what the forward kept.
      grads: per pooled feature, this rank's float32 gradient [B, D] of
        its activations (multiplier applied), or None (no gradient).

    Returns:
      per pooled feature, per source rank: (local rows int64 [n], entry
      gradients float32 [n, D]) of the entries this rank owns, in that
      source's entry order: `c_k * G[b_k]`, one process's entries.
    """
    world, num = kept.asked.shape
    ones = np.ones(num, np.int64)
    counts = kept.asked * np.array([g is not None for g in grads], np.int64)
    sent, groups = Segments(counts, kept.dims), Segments(kept.asked, ones)
    flat = np.empty(sent.size, np.float32)
    for owner in range(world):
        for p, grad in enumerate(grads):
            if grad is not None:
                sent.block(flat, owner, p)[...] = grad[kept.examples[groups.span(owner, p)]]
    received = swap_counts(comm, counts)
    got = Segments(received, kept.dims)
    values = comm.alltoallv(flat, sent.values_per_rank(), got.values_per_rank())
    entries = Segments(kept.received, ones)
    out = []
    for p in range(num):
        per_source = []
        for source in range(world):
            span = entries.span(source, p)
            if received[source, p] == 0:  # no gradient for this feature from that rank
                per_source.append((np.zeros(0, np.int64), np.zeros((0, int(kept.dims[p])), np.float32)))
                continue
            if received[source, p] != kept.answered[source, p]:
                raise RuntimeError(
                    f"Rank {source} sent {received[source, p]} gradient rows for pooled feature {p}, not the "
                    f"{kept.answered[source, p]} of the lookup: the ranks applied different lookups."
                )
            rows_g = got.block(values, source, p)[kept.group[span]]
            per_source.append((kept.rows[span], rows_g * kept.coefs[span][:, None]))
        out.append(per_source)
    return out
