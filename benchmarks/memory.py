"""Peak memory of a training step against its budget: `python -m benchmarks memory [--quick] [--json F]`.

Each case runs in a fresh process (`--one CASE`, one JSON line), so no
other case's arrays or freed pages are in its figures:

1. imports, and loads the numba kernels with a tiny step of the same
   kind (their code is the process's, not the step's);
2. `base`: the resident set (VmRSS) then;
3. builds the case (its tables and slots), draws the step's batch and
   runs one step (the engine's scratch is allocated once, at the first);
4. resets the kernel's high-water mark (`/proc/self/clear_refs` 5) and
   runs one more step; `peak`: VmHWM after it.

`peak - base` is compared with the budget of target 6 of issue 20:
tables + slots + 2 x (the step's activations + its ids). Resident pages,
not tracemalloc: numba's kernels allocate through their own runtime,
which tracemalloc does not see, and the pages are what a machine pays
for. Memory is reported, never asserted.

The cold start of target 6 is `benchmarks/coldstart.py`'s (import + first
step, warm kernel cache), run here too so both land in one table.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile

CASES = ("main-uniform", "movielens")
MB = 2**20


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """The high-water mark of the resident set (VmHWM, which getrusage's ru_maxrss reads) set back to VmRSS."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def _nbytes(value) -> int:
    """Bytes of the arrays in one feature's input (an array, or a ragged value with its row splits)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.nbytes
    return sum(np.asarray(getattr(value, name)).nbytes for name in ("values", "row_splits") if hasattr(value, name))


def _engine_bytes(engine) -> tuple[int, int]:
    """(tables, slots) bytes of an engine, from its spec: float32 rows, one array per slot."""
    tables = slots = 0
    for table in engine.spec.tables:
        size = table.vocabulary_size * table.dim * 4
        optimizer = engine.spec.optimizer_for(table.name)
        tables += size
        slots += size * (len(optimizer.slot_initial_values()) if optimizer is not None else 0)
    return tables, slots


def _case(name: str, describe: str, rss_kb: tuple[int, int, int, int], engine, result, ids: int) -> dict:
    """One case's row: `rss_kb` (base, built, before, peak), the engine's tables and slots, the step's sizes."""
    base, built, before, peak = rss_kb
    tables, slots = _engine_bytes(engine)
    return {
        "case": name,
        "describe": describe,
        "base_kb": base,
        "built_kb": built,
        "before_kb": before,
        "peak_kb": peak,
        "tables": tables,
        "slots": slots,
        "activations": sum(a.nbytes for a in result.activations.values()),
        "ids": ids,
    }


def _main_workload(quick: bool, wheel: str | None = None) -> dict:
    from tpu_embedding_shim.engine.engine import Engine

    from .peers import _RaggedInput
    from .variants import VARIANTS
    from .variants import quick as small
    from .workload import engine_spec, make_batches

    w = small(VARIANTS["main-uniform"]) if quick else VARIANTS["main-uniform"]

    def step(engine, batch):
        features = {f"f{t}": _RaggedInput(b.values, b.offsets) for t, b in enumerate(batch)}
        result = engine.forward(features)
        engine.apply_gradients(result, {f"f{t}": b.grad for t, b in enumerate(batch)})
        return result

    tiny = dataclasses.replace(w, vocab=(1000,), batch=16)
    step(Engine(engine_spec(tiny), seed=0), make_batches(tiny, 1)[0])  # the kernels loaded
    gc.collect()
    base = _status_kb("VmRSS")
    engine = Engine(engine_spec(w), seed=0)
    built = _status_kb("VmRSS")
    step(engine, make_batches(w, 1, seed=1)[0])
    (batch,) = make_batches(w, 1, seed=2)
    gc.collect()
    before = _status_kb("VmRSS")
    reset_peak()
    result = step(engine, batch)
    peak = _status_kb("VmHWM")
    ids = sum(b.values.nbytes + b.offsets.nbytes for b in batch)
    return _case(w.name, w.describe(), (base, built, before, peak), engine, result, ids)


def _movielens(quick: bool, wheel: str | None = None) -> dict:
    import logging

    from tpu_embedding_shim.movielens import data as ml_data
    from tpu_embedding_shim.movielens import job

    logging.getLogger("tpu_embedding_shim").setLevel(logging.WARNING)

    def estimator_on(data, output_dir):
        config = job.JobConfig(output_dir=output_dir, wheel=wheel, plot=False, progress=False)
        estimator = job.build_estimator(config, data, [])
        estimator.progress = False
        return estimator, config

    full = ml_data.load(wheel)
    data = job._slice(full, 2000) if quick else full
    with tempfile.TemporaryDirectory() as warm_dir, tempfile.TemporaryDirectory() as output_dir:
        few = job._slice(full, 500)
        warm, _ = estimator_on(few, warm_dir)
        warm.train(job.input_fn_for(few, few.train), steps=2)
        del warm  # its kernels stay loaded; its state goes
        gc.collect()
        base = _status_kb("VmRSS")
        estimator, config = estimator_on(data, output_dir)
        built = _status_kb("VmRSS")  # the engine is built at the first train(): this is the estimator only
        estimator.train(job.input_fn_for(data, data.train, shuffle_seed=0), steps=1)
        gc.collect()
        before = _status_kb("VmRSS")
        reset_peak()
        estimator.train(job.input_fn_for(data, data.train, shuffle_seed=1), steps=1)
        peak = _status_kb("VmHWM")
        features, _ = next(iter(ml_data.batches(data, data.train, config.batch_size, shuffle_seed=1)))
        result = estimator.engine.forward(features, training=False)
        engine = estimator.engine
    describe = f"the MovieLens job's train(steps=1), batch {config.batch_size}, default options"
    ids = sum(_nbytes(value) for value in features.values())
    return _case("movielens", describe, (base, built, before, peak), engine, result, ids)


MEASURES = {"main-uniform": _main_workload, "movielens": _movielens}


def measure_case(case: str, quick: bool, wheel: str | None = None) -> dict:
    """One case in this process (call it in a fresh one: `--one CASE`); `wheel`: the MovieLens data."""
    result = MEASURES[case](quick, wheel)
    result["budget"] = result["tables"] + result["slots"] + 2 * (result["activations"] + result["ids"])
    result["step_bytes"] = (result["peak_kb"] - result["base_kb"]) * 1024
    return result


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = _root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _fresh(args: list[str]) -> dict:
    """The JSON line a fresh `python -m <args>` prints, or {'error': its last line of stderr}."""
    out = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=_root(), env=_env())
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["(no output)"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(results: dict, cold: dict | None, out=print) -> None:
    out(
        "| case | base, MB | peak - base, MB | tables + slots, MB | activations + ids, MB | budget, MB "
        "| (peak - base) / budget |"
    )
    out("|---|---:|---:|---:|---:|---:|---:|")
    for case, r in results.items():
        if "error" in r:
            out(f"| `{case}` | failed: {r['error']} | | | | | |")
            continue
        out(
            f"| `{case}` | {r['base_kb'] / 1024:.0f} | {r['step_bytes'] / MB:.1f} | "
            f"{(r['tables'] + r['slots']) / MB:.1f} | {(r['activations'] + r['ids']) / MB:.2f} | "
            f"{r['budget'] / MB:.1f} | {r['step_bytes'] / r['budget']:.2f} |"
        )
    for case, r in results.items():
        if "error" not in r:
            out(
                f"- `{case}`: {r['describe']}; above base: {(r['built_kb'] - r['base_kb']) / 1024:.1f} MB once "
                f"built, {(r['before_kb'] - r['base_kb']) / 1024:.1f} MB after a first step"
            )
    if cold is not None:
        if "error" in cold:
            out(f"cold start: failed: {cold['error']}")
        else:
            out(
                f"cold start (V = {cold['vocab']:,}, warm kernel cache): import {cold['import']:.2f} s + first step "
                f"{cold['first_step']:.2f} s = {cold['import'] + cold['first_step']:.2f} s (engine build "
                f"{cold['build']:.2f} s; second step {1000 * cold['second_step']:.1f} ms)"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks memory", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--wheel", default=None, help="the MovieLens data (the recbole wheel; default: the cached one)")
    parser.add_argument("--no-cold-start", action="store_true", help="skip the cold start")
    parser.add_argument("--one", choices=CASES, help=argparse.SUPPRESS)  # internal: one case here, print JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_case(args.one, args.quick, args.wheel)))
        return 0
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    options = (["--quick"] if args.quick else []) + (["--wheel", args.wheel] if args.wheel else [])
    results = {case: _fresh(["benchmarks.memory", "--one", case, *options]) for case in cases}
    cold = None
    if not args.no_cold_start:
        vocab = "50000" if args.quick else "1000000"
        _fresh(["benchmarks.coldstart", vocab])  # the first process may fill the kernel cache
        cold = _fresh(["benchmarks.coldstart", vocab])
    report(results, cold)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"cases": results, "cold_start": cold}, file, indent=1)
    return 0 if not any("error" in r for r in [*results.values(), cold or {}]) else 1


if __name__ == "__main__":
    sys.exit(main())
