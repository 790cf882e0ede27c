"""The named variants of the benchmark (issue 6), full size and `--quick` size."""

from __future__ import annotations

import dataclasses

from .workload import CRITEO_SIZES, Workload

MAIN = Workload(name="main-uniform")


def _v(name: str, **changes) -> Workload:
    return dataclasses.replace(MAIN, name=name, **changes)


CRITEO_CAP = 2_000_000

VARIANTS: dict[str, Workload] = {
    w.name: w
    for w in (
        MAIN,
        _v("main-zipf", ids="zipf"),
        _v("bags-1-40", bag=(1, 40)),
        _v("mean", combiner="mean"),
        _v("sqrtn", combiner="sqrtn"),
        _v("weighted", weighted=True),
        _v("sgd", optimizer="sgd"),
        _v("adam-lazy", optimizer="adam"),
        _v("sgd-zipf", optimizer="sgd", ids="zipf"),
        _v("adam-lazy-zipf", optimizer="adam", ids="zipf"),
        _v("adam-nonlazy", optimizer="adam-nonlazy"),
        _v("ftrl", optimizer="ftrl"),
        _v("momentum", optimizer="momentum"),
        _v("rmsprop", optimizer="rmsprop"),
        _v("proximal-adagrad", optimizer="proximal-adagrad"),
        _v("adagrad-momentum", optimizer="adagrad-momentum"),
        _v("shards8-div", num_shards=8, partition_strategy="div"),
        _v("shards8-mod", num_shards=8, partition_strategy="mod"),
        _v("d16", dim=16),
        _v("d256", dim=256),
        _v("b512", batch=512),
        _v("b16384", batch=16384),
        _v("criteo26", vocab=tuple(min(v, CRITEO_CAP) for v in CRITEO_SIZES), dim=16, bag=(1, 1)),
        _v("sequence", sequence=20, bag=(1, 20)),
        _v("v100k", vocab=(100_000,)),
        _v("v10m", vocab=(10_000_000,)),
        _v("fwd-v1m", forward_only=True),
        _v("fwd-v10m", vocab=(10_000_000,), forward_only=True),
    )
}

DEFAULT = tuple(VARIANTS)
# `--quick` runs these: the main pair, and one of each code path the others add (an optimizer without a peer in
# torch or FBGEMM, the full-table non-lazy Adam, a sharded engine).
QUICK = ("main-uniform", "main-zipf", "ftrl", "adam-nonlazy", "shards8-mod")

# Variants too large to hold every peer's copy of the tables: only these implementations run.
PEERS_FOR: dict[str, tuple[str, ...]] = {
    "v10m": ("torch",),
    "fwd-v10m": ("torch",),
    "fwd-v1m": ("torch", "fbgemm"),
}


def quick(w: Workload) -> Workload:
    """The same variant, small: a smoke run, not a measurement."""
    vocab = tuple(max(4, min(v, 50_000)) for v in w.vocab)
    return dataclasses.replace(w, vocab=vocab, batch=min(w.batch, 256), dim=min(w.dim, 32))
