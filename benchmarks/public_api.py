"""The public API against the kernels and the peers: `python -m benchmarks api [--quick] [--rounds K]`.

What a training loop calls is `TPUEmbedding.enqueue(features, training=True)`,
`dequeue()` and `apply_gradients(gradients)` (the mid-level API, numpy
namespace), not the engine's kernels: this times those calls, in
interleaved rounds, beside

- the engine called directly (`Engine.forward` / `apply_gradients`, the
  engine under the `TPUEmbedding`, so on the same tables: what the public
  API adds is the difference; its forward is an inference lookup),
- torch's `EmbeddingBag` with offsets (the forward; `F.embedding_bag`), and
- FBGEMM's fused table-batched embedding on the CPU (the whole step, with
  its Adagrad fused into the backward),

on the main workload (1,000,000 x 64, B = 4096, 20 ids per example, sum,
Adagrad) with uniform and Zipf ids, and the forward at 10,000,000 rows.
Before anything is timed, the public API's lookups (and its tables after
two steps) are checked against an engine of their own, bit for bit, and the
peers' lookups against the public API's. Timings are reported, never
asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings

import numpy as np

from .peers import EngineImpl, FbgemmImpl, TorchImpl, UnsupportedError, _Fixed, missing_reason
from .run import machine
from .variants import MAIN
from .workload import Batch, Workload, initial_tables, make_batches

WORKLOADS = (
    (MAIN, True),
    (dataclasses.replace(MAIN, name="main-zipf", ids="zipf"), True),
    (dataclasses.replace(MAIN, name="v10m", vocab=(10_000_000,)), False),  # forward only: tables of 2.6 GB
    (dataclasses.replace(MAIN, name="v10m-zipf", vocab=(10_000_000,), ids="zipf"), False),
)
QUICK = {"vocab": (20_000,), "batch": 256}
NUM_BATCHES = 4


class ApiImpl:
    """This project's `TPUEmbedding` (numpy namespace) over the workload's tables: one feature per table."""

    name = "api"

    def __init__(self, w: Workload, tables: list[np.ndarray]):
        import tpu_embedding_shim as tf

        if w.optimizer != "adagrad" or w.sequence or w.weighted:
            raise UnsupportedError("the public-API benchmark runs the main workload's shape (sum, Adagrad)")
        embedding = tf.tpu.experimental.embedding
        self.tf = tf
        configs = {
            f"f{t}": embedding.FeatureConfig(
                table=embedding.TableConfig(
                    vocabulary_size=table.shape[0],
                    dim=w.dim,
                    combiner=w.combiner,
                    name=f"t{t}",
                    initializer=_Fixed(table),
                )
            )
            for t, table in enumerate(tables)
        }
        from .workload import ADAGRAD_INITIAL, LR

        self.embedding = embedding.TPUEmbedding(
            feature_config=configs, optimizer=embedding.Adagrad(LR, initial_accumulator_value=ADAGRAD_INITIAL)
        )

    def _features(self, step: list[Batch]) -> dict:
        return {f"f{t}": self.tf.RaggedTensor.from_row_splits(b.values, b.offsets) for t, b in enumerate(step)}

    def forward(self, step: list[Batch]) -> list[np.ndarray]:
        """A training loop's lookup: enqueue(training=True) + dequeue (its gradients are never applied)."""
        with warnings.catch_warnings():  # the previous forward's batch was not trained on: that is the point here
            warnings.simplefilter("ignore", UserWarning)
            self.embedding.enqueue(self._features(step), training=True)
            out = self.embedding.dequeue()
        return [out[f"f{t}"] for t in range(len(step))]

    def step(self, step: list[Batch]) -> list[np.ndarray]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.embedding.enqueue(self._features(step), training=True)
            out = self.embedding.dequeue()
        self.embedding.apply_gradients({f"f{t}": b.grad for t, b in enumerate(step)})
        return [out[f"f{t}"] for t in range(len(step))]

    def rows(self, ids: list[np.ndarray]) -> list[np.ndarray]:
        tables = {t.name: v for t, v in self.embedding.embedding_tables.items()}
        return [tables[f"t{t}"][i] for t, i in enumerate(ids)]


class DirectImpl(EngineImpl):
    """The engine under an `ApiImpl`, called directly on the same tables (`Engine.forward` / `apply_gradients`)."""

    def __init__(self, w: Workload, api: ApiImpl):  # not super().__init__: that would build a second engine
        self.name, self.w = "engine", w
        self.engine = api.embedding._build_engine()
        self.kernels = [line.strip() for line in self.engine.describe() if "kernels:" in line]


def _median_ms(times: list[float]) -> float | None:
    return float(np.median(times)) * 1e3 if times else None


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def _check(w: Workload, api: ApiImpl, tables: list[np.ndarray], batches: list, train: bool) -> None:
    """The API's lookups (and, training, its tables after two steps) against an engine of its own."""
    reference = EngineImpl(w, tables)
    if _max_diff(api.forward(batches[0]), reference.forward(batches[0])) > 0:
        raise AssertionError(f"{w.name}: the public API's lookup is not the engine's")
    if train:
        ids = [np.union1d(b0.values, b1.values) for b0, b1 in zip(batches[0], batches[1])]
        for impl in (api, reference):
            impl.step(batches[0])
            impl.step(batches[1])
        if _max_diff(api.rows(ids), reference.rows(ids)) > 0:
            raise AssertionError(f"{w.name}: the public API's tables are not the engine's after two steps")


def run_workload(w: Workload, train: bool, rounds: int, log=print) -> dict:
    """Builds, checks and times the implementations on `w`; one result row."""
    batches = make_batches(w, NUM_BATCHES)
    tables = initial_tables(w)
    api = ApiImpl(w, tables)
    expected = api.forward(batches[0])  # the peers' lookups are checked against it, on the initial tables
    if train:  # a second engine of 1M rows fits; at 10M the lookups are checked against torch's below
        _check(w, api, tables, batches, train)
    impls: list = [("api", api), ("engine", DirectImpl(w, api))]
    missing = {}
    for name, make in (("torch", TorchImpl), ("fbgemm", FbgemmImpl)):
        if name == "fbgemm" and not train:
            continue  # FBGEMM is timed on the step; its copy of a 10M-row table would not fit beside the others
        reason = missing_reason(name)
        if reason:
            missing[name] = reason
            continue
        impls.append((name, make(w, tables)))
    del tables
    for name, impl in impls:
        if name in ("torch", "fbgemm"):
            diff = _max_diff(impl.forward(batches[0]), expected)
            if diff > 1e-4:
                raise AssertionError(f"{w.name}: {name}'s lookup differs from the engine's by {diff}")
    forward: dict[str, list[float]] = {n: [] for n, _ in impls if n != "fbgemm"}
    steps: dict[str, list[float]] = {n: [] for n, _ in impls if train and n != "torch"}
    for r in range(rounds):
        order = impls[r % len(impls) :] + impls[: r % len(impls)]
        for name, impl in order:
            batch = batches[2 + r % 2]
            if name in steps:
                start = time.perf_counter()
                impl.step(batch)
                steps[name].append(time.perf_counter() - start)
            if name in forward:
                start = time.perf_counter()
                impl.forward(batch)
                forward[name].append(time.perf_counter() - start)
    row = {"workload": w.name, "describe": w.describe(), "missing": missing}
    row.update({f"{n}_fwd_ms": _median_ms(t) for n, t in forward.items()})
    row.update({f"{n}_step_ms": _median_ms(t) for n, t in steps.items()})
    log(f"  {w.name}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k.endswith("_ms") and v is not None))
    return row


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report(rows: list[dict], out=print) -> None:
    """Two markdown tables: the forward against torch's, the step against FBGEMM's (workloads that train)."""
    out("| workload | forward: API, ms | engine, ms | torch, ms | API / torch |")
    out("|---|---:|---:|---:|---:|")
    for r in rows:
        out(
            f"| `{r['workload']}` | {_ms(r.get('api_fwd_ms'))} | {_ms(r.get('engine_fwd_ms'))} | "
            f"{_ms(r.get('torch_fwd_ms'))} | {_ratio(r.get('api_fwd_ms'), r.get('torch_fwd_ms'))} |"
        )
    out("")
    out("| workload | step: API, ms | engine, ms | FBGEMM, ms | API / FBGEMM |")
    out("|---|---:|---:|---:|---:|")
    for r in rows:
        if r.get("api_step_ms") is not None:
            out(
                f"| `{r['workload']}` | {_ms(r.get('api_step_ms'))} | {_ms(r.get('engine_step_ms'))} | "
                f"{_ms(r.get('fbgemm_step_ms'))} | {_ratio(r.get('api_step_ms'), r.get('fbgemm_step_ms'))} |"
            )
    for r in rows:
        for name, why in r["missing"].items():
            out(f"\n{r['workload']}: {name} not run: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks api", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny tables and batches: checks the benchmark runs")
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds (medians are reported)")
    args = parser.parse_args(argv)
    info = machine()
    print(f"Machine: {info}")
    rows = []
    for w, train in WORKLOADS:
        if args.quick:
            w = dataclasses.replace(w, **QUICK)
        rows.append(run_workload(w, train, 3 if args.quick else args.rounds))
    print()
    report(rows)
    return 0
