"""The engine's step at small and large batches: `python -m benchmarks small-step [--quick] [--rounds K]`.

Times `Engine.forward` + `Engine.apply_gradients` (the fast kernels) on

- `migration`: the migration guide's program (docs/migration.md,
  `programs.py`): tables of 40 rows, dim 8, mean; `user` and `item`, one
  id each, and a `history` of 5 sharing `item`'s table; B = 64;
  Adagrad(0.3); dense int64 ids as its input_fn gives them;
- `main`: the main workload (`variants.MAIN`: 1,000,000 x 64, B = 4096, 20
  ids an example, sum, Adagrad), above `threads.SERIAL_WORK`, so it never
  takes the table-batched path (`engine/fast/batched.py`): it must not be
  slower for it.

Two modes, alternating round by round in one process: `batched` (the
engine as it is: a small step is one kernel call per phase) and
`per-feature` (`FastKernels.batches` forced to False: every feature and
table its own calls, as before the table-batched path). Each round times a
run of steps of each; the figures are medians over every step timed (on a
shared machine a mean mostly measures the other processes). Before
timing, both modes' tables are checked equal bit for bit.
Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

import numpy as np

MODES = ("batched", "per-feature")


def migration_spec():
    from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec, TruncatedNormal

    def table(name, seed):
        return TableSpec(name=name, vocabulary_size=40, dim=8, combiner="mean", initializer=TruncatedNormal(seed=seed))

    def feature(name, table, length=0):
        return FeatureSpec(
            name=name, table=table, num_buckets=40, max_sequence_length=length, dense_zero_is_padding=True
        )

    return EmbeddingSpec(
        tables=(table("tbl_user", 1), table("tbl_history_item_shared_embedding", 2)),
        features=(
            feature("user", "tbl_user"),
            feature("item", "tbl_history_item_shared_embedding"),
            feature("history", "tbl_history_item_shared_embedding", 5),
        ),
        optimizer=AdagradSpec(learning_rate=0.3),
    )


def migration_steps(count: int, batch: int = 64, seed: int = 0):
    """`count` (features, gradients) of the migration program: dense ids from 1 (0 is padding there)."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(count):
        features = {
            "user": rng.integers(1, 40, (batch, 1)),
            "item": rng.integers(1, 40, (batch, 1)),
            "history": rng.integers(1, 40, (batch, 5)),
        }
        grads = {
            "user": rng.standard_normal((batch, 8)).astype(np.float32),
            "item": rng.standard_normal((batch, 8)).astype(np.float32),
            "history": rng.standard_normal((batch, 5, 8)).astype(np.float32),
        }
        steps.append((features, grads))
    return steps


def main_spec(vocab: int):
    from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec, TruncatedNormal

    from .workload import ADAGRAD_INITIAL, LR

    return EmbeddingSpec(
        tables=(
            TableSpec(name="t", vocabulary_size=vocab, dim=64, combiner="sum", initializer=TruncatedNormal(seed=0)),
        ),
        features=(FeatureSpec(name="f", table="t", num_buckets=vocab),),
        optimizer=AdagradSpec(learning_rate=LR, initial_accumulator=ADAGRAD_INITIAL),
    )


def main_steps(count: int, vocab: int, batch: int, seed: int = 0):
    """`count` steps of the main workload's shape: RaggedTensor-like ids, 20 an example, uniform."""
    from tpu_embedding_shim.api.tensors import RaggedTensor

    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(count):
        ids = RaggedTensor.from_row_splits(rng.integers(0, vocab, batch * 20), np.arange(batch + 1) * 20)
        steps.append(({"f": ids}, {"f": rng.standard_normal((batch, 64)).astype(np.float32)}))
    return steps


@contextlib.contextmanager
def mode(name: str):
    """The engine as it is (`batched`), or every step on the per-feature kernels (`per-feature`)."""
    from tpu_embedding_shim.engine.fast.kernels import FastKernels

    if name == "batched":
        yield
        return
    with mock.patch.object(FastKernels, "batches", staticmethod(lambda work: False)):
        yield


def _run(engine, steps, count: int) -> list[tuple[float, float]]:
    """(seconds of forward, seconds of apply_gradients) of each of `count` steps."""
    times = []
    for k in range(count):
        features, grads = steps[k % len(steps)]
        start = time.perf_counter()
        result = engine.forward(features)
        middle = time.perf_counter()
        engine.apply_gradients(result, grads)
        times.append((middle - start, time.perf_counter() - middle))
    return times


def measure(name: str, spec, steps, rounds: int, count: int) -> list[dict]:
    from tpu_embedding_shim.engine import Engine

    engines = {m: Engine(spec, seed=0, kernels="fast") for m in MODES}
    for m in MODES:  # warm up (compiles), and the same numbers either way
        with mode(m):
            _run(engines[m], steps, 3)
    for table in spec.tables:
        a, b = (engines[m].table(table.name) for m in MODES)
        if not np.array_equal(a.view(np.int32), b.view(np.int32)):
            raise AssertionError(f"{name}: the two modes' table {table.name!r} differ")
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    for r in range(rounds):
        order = MODES if r % 2 == 0 else MODES[::-1]  # who goes first alternates
        for m in order:
            with mode(m):
                times[m] += _run(engines[m], steps, count)
    rows = []
    for m in MODES:
        forward = statistics.median(f for f, _ in times[m])
        apply = statistics.median(a for _, a in times[m])
        step = statistics.median(f + a for f, a in times[m])
        rows.append({"workload": name, "mode": m, "forward_ms": forward * 1e3, "apply_ms": apply * 1e3,
                     "step_ms": step * 1e3})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks small-step", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds (the smoke test's)")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    from tpu_embedding_shim.engine import fast

    if not fast.available():
        print(f"small-step: the fast kernels are not available ({fast.unavailable_reason()}); nothing to time.")
        return 0
    rounds = args.rounds or (2 if args.quick else 11)
    vocab, batch = (20_000, 256) if args.quick else (1_000_000, 4096)
    rows = measure("migration", migration_spec(), migration_steps(16), rounds, 20 if args.quick else 400)
    rows += measure("main", main_spec(vocab), main_steps(4, vocab, batch), rounds, 2 if args.quick else 10)
    print(f"Engine step (forward + apply_gradients), median step of {rounds} alternating rounds:")
    print(f"{'workload':<10} {'mode':<12} {'forward ms':>11} {'apply ms':>9} {'step ms':>8}")
    for row in rows:
        print(
            f"{row['workload']:<10} {row['mode']:<12} {row['forward_ms']:>11.4f} {row['apply_ms']:>9.4f} "
            f"{row['step_ms']:>8.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
