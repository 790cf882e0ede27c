"""One rank of `python -m benchmarks distributed`: times `DistributedEngine` steps and counts the bytes they move.

Run under `mpiexec -n N python -m benchmarks.distributed_worker ...` (each
rank takes its slice of the same global batch), or with `--reference`
without mpiexec: then it times the one-process `Engine` (numpy and fast
kernels) on the global batch. Rank 0 prints one JSON line: what every rank
measured.

A step is `forward` + `apply_gradients`. Each workload runs `WARMUP` steps,
then `rounds` timed steps, each on the next of a few distinct batches; the
ranks meet at a barrier (not timed) before each step. `CountingCommunicator`
wraps the communicator: it adds up the bytes each collective sends to and
receives from the other ranks, and the time spent inside collectives. One
more step, untimed, counts the calls of the exchange's per-segment helpers
(`SegmentCounter`), whose number grows with the number of ranks.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import pickle
import statistics
import sys
import time
from typing import Any

import numpy as np

from .variants import VARIANTS, quick
from .workload import Batch, Workload, engine_spec, make_batches

WARMUP = 2
DISTINCT_BATCHES = 3  # timed steps cycle through these (plus the warm-up's own)
# The benchmark's own variants, at full size: a run takes minutes on 2 cores.
WORKLOADS = {"main": VARIANTS["main-uniform"], "criteo26": VARIANTS["criteo26"]}


class CountingCommunicator:
    """A `Communicator` that passes every call on to `inner` and counts what crosses between ranks.

    Per operation: calls, bytes sent to other ranks, bytes received from
    them (the payload each rank hands to MPI; a rank's chunk to itself is
    not counted), and seconds inside the call. An `allgather` or
    `allreduce` counts its array once per other rank, sent and received, as
    if every rank sent it to every other directly. Objects count their
    pickled size. `alltoallv` is split by what it carries: `header` (an
    int64 exchange of exactly `header` values per rank: `exchange.swap_counts`,
    whose size grows with the number of ranks), `int` (row indices) and
    `float` (rows, gradients, partial sums).
    """

    def __init__(self, inner: Any, header: int = -1):
        self.inner = inner
        self.rank, self.size = inner.rank, inner.size
        self.header = header
        self.reset()

    def reset(self) -> None:
        self.calls: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.seconds = 0.0

    def _count(self, kind: str, sent: int, received: int, start: float) -> None:
        self.seconds += time.perf_counter() - start
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.sent[kind] = self.sent.get(kind, 0) + int(sent)
        self.received[kind] = self.received.get(kind, 0) + int(received)

    def alltoallv(self, send, send_counts, recv_counts):
        start = time.perf_counter()
        out = self.inner.alltoallv(send, send_counts, recv_counts)
        send = np.asarray(send)
        sent, received = np.array(send_counts, np.int64), np.array(recv_counts, np.int64)
        sent[self.rank] = received[self.rank] = 0
        if send.dtype.kind == "f":
            kind = "alltoallv float"
        elif send.dtype == np.int64 and np.all(np.asarray(send_counts) == self.header):
            kind = "alltoallv header"
        else:
            kind = "alltoallv int"
        self._count(kind, sent.sum() * send.itemsize, received.sum() * send.itemsize, start)
        return out

    def allreduce(self, values, op):
        start = time.perf_counter()
        out = self.inner.allreduce(values, op)
        nbytes = np.asarray(values, np.int64).nbytes * (self.size - 1)
        self._count("allreduce", nbytes, nbytes, start)
        return out

    def allgather(self, values):
        start = time.perf_counter()
        out = self.inner.allgather(values)
        nbytes = np.asarray(values).nbytes * (self.size - 1)
        self._count("allgather", nbytes, nbytes, start)
        return out

    def allgather_object(self, obj):
        start = time.perf_counter()
        out = self.inner.allgather_object(obj)
        nbytes = len(pickle.dumps(obj)) * (self.size - 1)
        self._count("allgather_object", nbytes, nbytes, start)
        return out

    def bcast_object(self, obj, root=0):
        start = time.perf_counter()
        out = self.inner.bcast_object(obj, root)
        nbytes = len(pickle.dumps(out))
        self._count(
            "bcast_object", nbytes * (self.size - 1) if self.rank == root else 0, nbytes * (self.rank != root), start
        )
        return out

    def barrier(self):
        start = time.perf_counter()
        self.inner.barrier()
        self._count("barrier", 0, 0, start)

    def __repr__(self) -> str:
        return f"CountingCommunicator({self.inner!r})"


class _Ragged:
    """A RaggedTensor-like input (`values`, `row_splits`): the engines' public ragged form."""

    def __init__(self, values, row_splits):
        self.values, self.row_splits = values, row_splits


def rank_slice(step: list[Batch], rank: int, size: int) -> tuple[dict, dict, dict]:
    """Rank `rank`'s examples of a global step (contiguous slices, the first ranks one example more):
    (features, weights or {}, activation gradients), in the engines' input form."""
    batch = step[0].offsets.shape[0] - 1
    bounds = [batch * r // size for r in range(size + 1)]
    lo, hi = bounds[rank], bounds[rank + 1]
    features, weights, grads = {}, {}, {}
    for t, b in enumerate(step):
        start, stop = int(b.offsets[lo]), int(b.offsets[hi])
        splits = b.offsets[lo : hi + 1] - start
        features[f"f{t}"] = _Ragged(b.values[start:stop], splits)
        if b.weights is not None:
            weights[f"f{t}"] = _Ragged(b.weights[start:stop], splits)
        grads[f"f{t}"] = b.grad[lo:hi]
    return features, weights, grads


def pooling_modes() -> list[str]:
    """'exact', and 'owner' when this `DistributedEngine` takes `pooling=` (owner-pooled partial sums)."""
    from tpu_embedding_shim.engine import DistributedEngine

    return ["exact", "owner"] if "pooling" in inspect.signature(DistributedEngine).parameters else ["exact"]


class SegmentCounter:
    """Counts calls of the exchange's per-segment helpers (`Segments.block`, `Segments.span`, `Outbox.entries`).

    An engine that touched each of the W x F segments of an exchange in a
    Python loop would do work that grows with the number of ranks at a
    fixed batch per rank; this one indexes a feature's segments over every
    rank at once, so it counts 0. Counted while the context is open (the
    methods are wrapped on their classes, then restored).
    """

    NAMES = (("Segments", "block"), ("Segments", "span"), ("Outbox", "entries"))

    def __init__(self):
        self.calls = 0

    def __enter__(self):
        from tpu_embedding_shim.engine.distributed import exchange

        self._saved = []
        for cls_name, method in self.NAMES:
            cls = getattr(exchange, cls_name)
            original = getattr(cls, method)
            self._saved.append((cls, method, original))
            setattr(cls, method, self._counting(original))
        return self

    def _counting(self, original):
        def wrapper(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        return wrapper

    def __exit__(self, *exc):
        for cls, method, original in self._saved:
            setattr(cls, method, original)


def segment_call_seconds(repeats: int = 20) -> float:
    """Seconds per call of the per-segment helpers, as the engine's loops make them (a span, a block and a
    gather of 8 rows of 16 floats per segment)."""
    from tpu_embedding_shim.engine.distributed.exchange import Segments

    world, features = 64, 8
    segments = Segments(np.full((world, features), 8, np.int64), np.full(features, 16, np.int64))
    flat = np.empty(segments.size, np.float32)
    rows = np.ones((10_000, 16), np.float32)
    local = np.arange(int(segments.counts.sum())) % 10_000
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for f in range(features):
            for r in range(world):
                segments.block(flat, r, f)[...] = rows[local[segments.span(r, f)]]
        times.append(time.perf_counter() - start)
    return statistics.median(times) / (2 * world * features)


def _step(engine, features, weights, grads) -> None:
    result = engine.forward(features, weights or None)
    engine.apply_gradients(result, grads)


def time_distributed(w: Workload, mode: str, rounds: int, comm: Any) -> dict:
    """This rank's time per timed step, time inside collectives per step, and traffic per step (averages)."""
    from tpu_embedding_shim.engine import DistributedEngine

    counting = CountingCommunicator(comm, header=w.num_tables)
    options = {"pooling": mode} if mode != "exact" else {}
    spec = dataclasses.replace(engine_spec(w), num_shards=comm.size)
    engine = DistributedEngine(spec, counting, seed=0, **options)
    steps = make_batches(w, WARMUP + DISTINCT_BATCHES, seed=3)
    mine = [rank_slice(step, comm.rank, comm.size) for step in steps]
    for s in range(WARMUP):
        _step(engine, *mine[s])
    with SegmentCounter() as segments:  # one step, counted (the wrappers' cost stays out of the timed steps)
        _step(engine, *mine[WARMUP - 1])
    counting.reset()
    times, inside = [], []
    for r in range(rounds):
        comm.barrier()
        before = counting.seconds
        start = time.perf_counter()
        _step(engine, *mine[WARMUP + r % DISTINCT_BATCHES])
        times.append(time.perf_counter() - start)
        inside.append(counting.seconds - before)
    per_step = {kind: value / rounds for kind, value in counting.sent.items()}
    return {
        "steps_s": times,  # per timed step, in order (the launcher lines the ranks' steps up)
        "collectives_s": inside,
        "calls": {kind: n / rounds for kind, n in counting.calls.items()},
        "sent": per_step,
        "received": {kind: value / rounds for kind, value in counting.received.items()},
        "examples": int(mine[0][2]["f0"].shape[0]),
        "segment_calls": segments.calls,
    }


def time_collectives(comm: Any, repeats: int) -> dict:
    """Latency of the step's small collectives and the bandwidth of a large all-to-all, between these ranks."""
    out = {}
    tiny = np.zeros(3, np.int64)  # what `agree` reduces
    counts = [4] * comm.size
    big = 1 << 21  # 8 MB of float32 to every rank
    for name, call in (
        ("allreduce_s", lambda: comm.allreduce(tiny, "min")),
        ("alltoallv_small_s", lambda: comm.alltoallv(np.zeros(4 * comm.size, np.int64), counts, counts)),
    ):
        call()
        comm.barrier()
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        out[name] = (time.perf_counter() - start) / repeats
    send = np.ones(big * comm.size, np.float32)
    sizes = [big] * comm.size
    comm.alltoallv(send, sizes, sizes)
    times = []
    for _ in range(max(5, repeats // 200)):
        comm.barrier()
        start = time.perf_counter()
        comm.alltoallv(send, sizes, sizes)
        times.append(time.perf_counter() - start)
    out["alltoallv_big_s"] = statistics.median(times)
    out["alltoallv_big_bytes"] = big * 4 * (comm.size - 1)  # sent to other ranks (and as much received)
    return out


def time_reference(w: Workload, kernels: str, rounds: int) -> dict:
    """The one-process `Engine` on the global batch: median step time, or why it could not run."""
    from tpu_embedding_shim.engine import Engine

    try:
        engine = Engine(engine_spec(w), seed=0, kernels=kernels)
    except (ImportError, RuntimeError, ValueError) as error:  # kernels="fast" without numba
        return {"error": f"{type(error).__name__}: {error}"}
    steps = [rank_slice(step, 0, 1) for step in make_batches(w, WARMUP + DISTINCT_BATCHES, seed=3)]
    for s in range(WARMUP):
        _step(engine, *steps[s])
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        _step(engine, *steps[WARMUP + r % DISTINCT_BATCHES])
        times.append(time.perf_counter() - start)
    return {"step_s": statistics.median(times)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reference", action="store_true", help="time the one-process Engine instead (no MPI)")
    args = parser.parse_args(argv)
    loads = {name: quick(WORKLOADS[name]) if args.quick else WORKLOADS[name] for name in args.workloads.split(",")}

    if args.reference:
        result = {
            name: {kernels: time_reference(w, kernels, args.rounds) for kernels in ("numpy", "fast")}
            for name, w in loads.items()
        }
        print(json.dumps(result))
        return 0

    from tpu_embedding_shim.engine import communicator

    comm = communicator()
    mine: dict = {
        "collectives": time_collectives(comm, 200 if args.quick else 2000),
        "segment_call_s": segment_call_seconds(),
        "workloads": {},
    }
    for name, w in loads.items():
        mine["workloads"][name] = {mode: time_distributed(w, mode, args.rounds, comm) for mode in pooling_modes()}
    gathered = comm.allgather_object(mine)
    if comm.rank == 0:
        print(json.dumps({"size": comm.size, "library": repr(comm), "ranks": gathered}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
