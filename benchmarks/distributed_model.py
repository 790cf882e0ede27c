"""A model of one `DistributedEngine` step on N hosts, from what was measured on one machine at N = 1 and 2.

Weak scaling: every host keeps the measured per-rank batch and its share of
the rows, so the global batch and the tables grow with N. A step is

    compute + latency(N) + bytes(N) / bandwidth

with no overlap: the engine's step runs its exchanges one after the other,
between its computations. The assumptions, each one a function here:

- **compute** per rank stays what was measured: with ids spread evenly over
  the owners (uniform ids, `div` or `mod`), each rank looks up, pools and
  sums as many entries at any N, as requester and as owner. Skewed ids
  (Zipf) load the owners of hot rows more: not modelled. One part would
  grow: an engine that visits each of the N x F segments of an exchange
  (one per rank and feature) in a Python loop makes calls of its
  per-segment helpers that, counted at the measured N, grow as N
  (`loops_at`), each at the measured cost of one call (this engine makes
  none: its exchange indexes a feature's segments over every rank at once).
- **bytes** per rank per step (`traffic_at`): the row indices, rows and
  gradients of the entries whose row lives on another rank, a fraction
  (N - 1) / N of the entries (`remote_fraction`), so the measured bytes at
  N = 2 (where it is 1/2) are scaled by that fraction. What travels once
  per example and remote owner instead of once per entry (the gradient
  rows of a pooled feature's backward, in both modes; with owner pooling
  also the forward's partial sums) scales as `remote_owners`. The count exchanges (a few int64 per
  rank and feature) grow as N - 1. Each rank sends and receives about as
  much (full duplex): the time is bytes / bandwidth, where bandwidth is
  each host's rate each way; the network has full bisection bandwidth
  (no congestion), and no protocol overhead is added.
- **latency** (`latency_at`): an all-to-all as a pairwise exchange costs
  `(N - 1) * latency` (one message per peer, one after the other: the
  textbook bound; MPICH posts up to 32 at a time, so it is pessimistic at
  large N); an allreduce of a few int64 by recursive doubling costs
  `ceil(log2 N) * reduce_latency`.

>>> net = Network("10 Gb/s", bandwidth=10e9 / 8, latency=20e-6)
>>> traffic = Traffic(ranks=2, header=16, ids=80_000, values=1_300_000, alltoallv=6, small=3, bag=(20, 20))
>>> round(traffic_at(traffic, 2)), round(traffic_at(traffic, 256))
(1380016, 2753299)
>>> pooled = dataclasses.replace(traffic, values=800_000, pair_values=500_000)  # 0.5 MB per example and owner
>>> round(traffic_at(pooled, 256))  # those grow towards one per id: x 19.2 from N = 2 (1 remote owner there)
11357029
>>> round(step_time(0.05, traffic, 256, net) * 1e3, 1)
83.3
>>> looping = dataclasses.replace(traffic, segment_calls=100)
>>> round(loops_at(looping, 256, 2e-6) * 1e3, 2)  # 100 calls at N = 2, 12,800 at N = 256: 25.4 ms more
25.4
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Network:
    """Each host's bandwidth (bytes per second, each way) and the latency of one message (seconds).

    `reduce_latency`: one round of a small allreduce (None: `latency`).
    """

    name: str
    bandwidth: float
    latency: float
    reduce_latency: float | None = None


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one rank moves per step, measured at `ranks` ranks (bytes sent to other ranks, or received,
    whichever is larger).

    Attributes:
      header: the count exchanges (`exchange.swap_counts`): grow as N - 1.
      ids: int64 row indices and examples (per remote entry).
      values: float32 rows, gradients and coefficients that travel per
        remote entry.
      alltoallv: all-to-all calls per step.
      small: small allreduce calls per step (the ranks' agreements).
      bag: ids per example, min and max (uniform in between).
      pair_values: float32 rows that travel once per example and remote
        owner (`pair_bytes`): a pooled backward's gradient rows, the
        owner-pooled forward's partial sums.
      segment_calls: calls of the exchange's per-segment helpers per step.
    """

    ranks: int
    header: float
    ids: float
    values: float
    alltoallv: float
    small: float
    bag: tuple[int, int]
    pair_values: float = 0.0
    segment_calls: float = 0.0


def remote_fraction(n: int) -> float:
    """The fraction of a rank's entries whose row another rank owns: (N - 1) / N (ids spread evenly)."""
    return (n - 1) / n


def remote_owners(n: int, bag: tuple[int, int]) -> float:
    """Expected number of other ranks owning at least one of an example's ids, for a bag of `bag[0]` to `bag[1]`
    ids (uniform), each id's owner uniform over the N ranks.

    >>> remote_owners(2, (1, 1)), round(remote_owners(256, (20, 20)), 2)
    (0.5, 19.2)
    """
    lengths = range(bag[0], bag[1] + 1)
    return sum((n - 1) * (1 - (1 - 1 / n) ** length) for length in lengths) / len(lengths)


def pair_bytes(examples: int, features: int, dim: int, bag: tuple[int, int], ranks: int) -> float:
    """Expected bytes of one float32 row of `dim` per example, feature and remote owner, for one rank of
    `examples` examples at `ranks` ranks (uniform ids)."""
    return examples * features * remote_owners(ranks, bag) * 4 * dim


def traffic_at(t: Traffic, n: int) -> float:
    """Bytes one rank sends (and receives) per step at N ranks, scaled from the measured `t`."""
    if n == 1:
        return 0.0
    entries = remote_fraction(n) / remote_fraction(t.ranks)
    pairs = remote_owners(n, t.bag) / remote_owners(t.ranks, t.bag)
    return t.header * (n - 1) / (t.ranks - 1) + (t.ids + t.values) * entries + t.pair_values * pairs


def latency_at(t: Traffic, n: int, net: Network) -> float:
    """Seconds of latency per step at N ranks: pairwise all-to-alls and recursive-doubling allreduces."""
    reduce_latency = net.latency if net.reduce_latency is None else net.reduce_latency
    return t.alltoallv * (n - 1) * net.latency + t.small * math.ceil(math.log2(n)) * reduce_latency


def loops_at(t: Traffic, n: int, per_call: float) -> float:
    """Seconds the per-segment loops add at N ranks to those at the measured N (negative below it)."""
    return t.segment_calls * (n / t.ranks - 1) * per_call


def step_time(compute: float, t: Traffic, n: int, net: Network, per_call: float = 0.0) -> float:
    """Seconds per step at N ranks: compute (with its per-segment loops at N, `per_call` seconds a call),
    then latency, then the bytes at the network's bandwidth."""
    return compute + loops_at(t, n, per_call) + latency_at(t, n, net) + traffic_at(t, n) / net.bandwidth
