"""Where a MovieLens training step's time goes: `python -m benchmarks runner [--quick] [--epochs N] [--json F]`.

The job of `tpu_embedding_shim/movielens/` (default options) trains through
the TPUEstimator runner one epoch per `train()` call, as the job does. Every
call of the code that is not the runner's own is timed with a pair of
`perf_counter` reads (a few microseconds a step), so each part is its true
time, not a profiler's:

- `kernels`: the engine's kernels (lookups, gradient entries, sums, updates);
- `model`: the model's math (the numpy MLP's forward, backward and Adam
  step, its sigmoid and loss);
- `input_fn`: the input_fn's batches (the job's generator);
- `ids`: the rest of `Engine.forward`: the ids converted and checked;
- `gradients`: the rest of `Engine.apply_gradients`: the gradients checked;
- `checkpoint`: the checkpoint `train()` writes at its end;
- `runner`: everything else, the runner's own Python (the loop, steps.py,
  the feature-column layers, the model_fn's own lines, logging, hooks).

Then one more epoch under cProfile names the runner's most costly
functions (profiled times: cProfile slows Python more than numpy).
Times are reported, never asserted.

`--clock cpu` reads this thread's CPU time instead of the wall clock: on a
machine other processes share, their load then adds nothing to the parts
(the BLAS and kernel threads, if any run, are not counted: set
OPENBLAS_NUM_THREADS=1 for a true split).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import inspect
import json
import logging
import pstats
import statistics
import sys
import tempfile
import time

PARTS = ("kernels", "model", "input_fn", "ids", "gradients", "checkpoint", "runner")
OVERHEAD = ("input_fn", "ids", "gradients", "checkpoint", "runner")  # the "everything but kernels and math"
KERNEL_METHODS = (
    "lookups",
    "pooled_entries",
    "sequence_entries",
    "sum_tables",
    "apply_all",
    "lookup_packed",
    "sum_packed",
)
LOOKUP_METHODS = ("lookups", "lookup_packed")  # the last two: the table-batched small step (FastKernels only)
RUNNER_PACKAGES = ("tpu_embedding_shim/runner/", "tpu_embedding_shim/api/", "tpu_embedding_shim/movielens/job")
ENGINE_PYTHON = ("engine/engine.py", "engine/step_checks", "engine/vocabulary", "engine/ragged", "engine/aligned")


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}  # --clock: wall time, or this thread's CPU time


class Timers:
    """Seconds spent per part, summed over the calls of the wrapped functions (read with `clock`)."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.seconds = dict.fromkeys(PARTS + ("lookups", "engine_forward", "engine_apply"), 0.0)

    def wrap(self, part: str, function):
        clock = self.clock

        def timed(*args, **kwargs):
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[part] += clock() - start

        return timed

    def iterate(self, part: str, iterable):
        """`iterable`'s items, the time spent producing each added to `part`."""
        iterator = iter(iterable)
        clock = self.clock
        while True:
            start = clock()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self.seconds[part] += clock() - start
            yield item


@contextlib.contextmanager
def _patched(timers: Timers, targets):
    """Each (owner, name, part) wrapped by `timers` for the duration; restored after."""
    saved = []
    try:
        for owner, name, part in targets:
            raw = inspect.getattr_static(owner, name)
            saved.append((owner, name, raw))
            if isinstance(raw, classmethod):
                setattr(owner, name, classmethod(timers.wrap(part, raw.__func__)))
            elif isinstance(raw, staticmethod):
                setattr(owner, name, staticmethod(timers.wrap(part, raw.__func__)))
            else:
                setattr(owner, name, timers.wrap(part, raw))
        yield
    finally:
        for owner, name, raw in reversed(saved):
            setattr(owner, name, raw)


def _targets(estimator):
    from tpu_embedding_shim.engine.engine import Engine
    from tpu_embedding_shim.movielens import model as ml_model
    from tpu_embedding_shim.runner.tpu_estimator import TPUEstimator

    kernels = type(estimator.engine.kernels)
    return [
        (Engine, "forward", "engine_forward"),
        (Engine, "apply_gradients", "engine_apply"),
        *[
            (kernels, name, "lookups" if name in LOOKUP_METHODS else "kernels")
            for name in KERNEL_METHODS
            if hasattr(kernels, name)
        ],
        (ml_model.DenseModel, "forward", "model"),
        (ml_model.DenseModel, "backward", "model"),
        (ml_model.DenseModel, "step", "model"),
        (ml_model, "sigmoid", "model"),
        (ml_model, "log_loss", "model"),
        (TPUEstimator, "_save", "checkpoint"),
    ]


def _job(max_examples: int | None, output_dir: str, wheel: str | None = None):
    """(estimator, data, JobConfig) of the MovieLens job with its default options (`wheel`: as JobConfig's)."""
    from tpu_embedding_shim.movielens import data as ml_data
    from tpu_embedding_shim.movielens import job

    config = job.JobConfig(output_dir=output_dir, wheel=wheel, max_examples=max_examples, plot=False, progress=False)
    data = job._slice(ml_data.load(config.wheel), config.max_examples)
    estimator = job.build_estimator(config, data, [])
    estimator.progress = False
    return estimator, data, config


def time_epoch(estimator, data, seed: int, clock=time.perf_counter) -> dict:
    """One epoch's `train()` call split into PARTS: milliseconds per step (and the whole step), and the steps."""
    from tpu_embedding_shim.movielens import job

    timers = Timers(clock)
    input_fn = job.input_fn_for(data, data.train, shuffle_seed=seed)
    before = estimator.global_step
    with _patched(timers, _targets(estimator)):
        start = clock()
        estimator.train(lambda params: timers.iterate("input_fn", input_fn(params)))
        wall = clock() - start
    steps = estimator.global_step - before
    s = timers.seconds
    s["kernels"] += s["lookups"]
    s["ids"] = s["engine_forward"] - s["lookups"]
    s["gradients"] = s["engine_apply"] - (s["kernels"] - s["lookups"])
    s["runner"] = wall - sum(s[part] for part in PARTS if part != "runner")
    ms = {part: 1000 * s[part] / steps for part in PARTS}
    ms["step"] = 1000 * wall / steps
    return {"steps": steps, "ms": ms}


def profile_epoch(estimator, data, seed: int, top: int) -> dict[str, list[tuple[str, float]]]:
    """The `top` functions of the runner and of the engine's Python around its kernels, by profiled time (their
    own + the numpy calls they make), ms per step."""
    from tpu_embedding_shim.movielens import job

    before = estimator.global_step
    profiler = cProfile.Profile()
    profiler.enable()
    estimator.train(job.input_fn_for(data, data.train, shuffle_seed=seed))
    profiler.disable()
    steps = estimator.global_step - before
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]  # documented, absent from the stubs
    owned: dict[tuple, float] = {}
    for function, (_, _, own, _, callers) in stats.items():
        if function[0] == "~":  # a builtin: its time goes to the Python functions that called it
            for caller, edge in callers.items():
                owned[caller] = owned.get(caller, 0.0) + edge[2]
        else:
            owned[function] = owned.get(function, 0.0) + own

    def costliest(packages):
        chosen = [(f, t) for f, t in owned.items() if any(p in f[0].replace("\\", "/") for p in packages)]
        chosen.sort(key=lambda item: -item[1])
        return [(f"{_short(f[0])}:{f[2]}", 1000 * t / steps) for f, t in chosen[:top]]

    return {"runner": costliest(RUNNER_PACKAGES), "engine_python": costliest(ENGINE_PYTHON)}


def _short(path: str) -> str:
    path = path.replace("\\", "/")
    return path[path.index("tpu_embedding_shim/") :] if "tpu_embedding_shim/" in path else path


def measure(
    epochs: int, max_examples: int | None, profile_top: int = 8, wheel: str | None = None, clock: str = "wall"
) -> dict:
    """`epochs` timed epochs after one untimed warm-up epoch (read with `CLOCKS[clock]`), then one profiled
    epoch."""
    logging.getLogger("tpu_embedding_shim").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as output_dir:
        estimator, data, config = _job(max_examples, output_dir, wheel)
        from tpu_embedding_shim.movielens import job

        estimator.train(job.input_fn_for(data, data.train, shuffle_seed=config.seed))  # kernels loaded, state built
        epochs_ms = []
        for epoch in range(epochs):
            epochs_ms.append(time_epoch(estimator, data, config.seed + 1 + epoch, CLOCKS[clock]))
        profiled = profile_epoch(estimator, data, config.seed + 1 + epochs, profile_top) if profile_top else {}
    medians = {key: statistics.median(e["ms"][key] for e in epochs_ms) for key in epochs_ms[0]["ms"]}
    return {
        "batch_size": config.batch_size,
        "steps_per_epoch": epochs_ms[0]["steps"],
        "epochs": epochs,
        "clock": clock,
        "ms": medians,
        "per_epoch_ms": [e["ms"] for e in epochs_ms],
        "profiled": profiled,
    }


LABELS = {
    "kernels": "engine kernels (lookups, entries, sums, updates)",
    "model": "model's math (numpy MLP forward, backward, Adam; loss)",
    "input_fn": "input_fn's batches (movielens/data.py)",
    "ids": "ids converted and checked (Engine.forward less its kernels)",
    "gradients": "gradients checked (Engine.apply_gradients less its kernels)",
    "checkpoint": "checkpoint at the end of train()",
    "runner": "runner's own Python (runner/, feature layers, model_fn lines)",
}


def report(result: dict, out=print) -> None:
    ms = result["ms"]
    step = ms["step"]
    out(
        f"MovieLens step (batch {result['batch_size']}, {result['steps_per_epoch']} steps an epoch): "
        f"{step:.2f} ms, median of {result['epochs']} epochs"
        + (" (this thread's CPU time)" if result.get("clock") == "cpu" else "")
    )
    out("")
    out("| part | ms per step | share |")
    out("|---|---:|---:|")
    for part in PARTS:
        out(f"| {LABELS[part]} | {ms[part]:.3f} | {100 * ms[part] / step:.1f}% |")
    overhead = sum(ms[p] for p in OVERHEAD)
    out(f"| **everything but kernels and model** | {overhead:.3f} | {100 * overhead / step:.1f}% |")
    out(f"| **step** | {step:.3f} | 100% |")
    titles = {"runner": "The runner's", "engine_python": "The engine's (outside its kernels)"}
    for key, functions in result["profiled"].items():
        out("")
        out(f"{titles[key]} costliest functions (cProfile: own time + the numpy calls they make; ms per step):")
        out("")
        for name, per_step in functions:
            out(f"- `{name}` {per_step:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks runner", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 ratings, 1 epoch: a smoke run")
    parser.add_argument("--epochs", type=int, default=None, help="timed epochs (default 5)")
    parser.add_argument("--top", type=int, default=8, help="runner functions listed from the profiled epoch (0: none)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="wall time, or this thread's CPU time (shared machines)"
    )
    parser.add_argument("--wheel", default=None, help="the MovieLens data (the recbole wheel; default: the cached one)")
    args = parser.parse_args(argv)
    epochs = args.epochs or (1 if args.quick else 5)
    result = measure(epochs, 2000 if args.quick else None, args.top, args.wheel, args.clock)
    report(result)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
