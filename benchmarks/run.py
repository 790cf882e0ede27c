"""The benchmark harness: `python -m benchmarks [--quick] [--variants a,b] [--rounds N]`.

For each variant (one fresh process each, so peak RSS is the variant's):
build the workload through the project's public API, build every installed
peer from the same initial tables, check that all agree with the numpy
reference engine (same ids, same gradients -> same activations and the same
updated tables, float32 tolerance) BEFORE timing, then time interleaved
rounds (the order rotates every round) and report medians, ratios to the
best peer, and RSS. Then, the peers freed, the measured bandwidth bound
and the engine's steps back to back, alternating block by block over the
same sequence of batches as the timed rounds (this machine's memory speed
drifts: both must see the same machine). Then the cold start (import +
first step, fresh process, warm kernel cache).

Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

from . import bandwidth
from .peers import PEERS, EngineImpl, UnsupportedError, missing_reason
from .variants import DEFAULT, PEERS_FOR, QUICK, VARIANTS, quick
from .workload import Workload, initial_tables, make_batches, num_slots, touches_all_rows

RTOL, ATOL = 1e-4, 1e-5
# Adam divides by sqrt(v): for a row whose summed gradient nearly cancels (hot Zipf ids), the order of the
# additions moves the update by up to ~1e-3 of the learning rate. All peers then agree with each other.
# RMSProp and Adagrad with momentum (slots starting at 0) divide a gradient by its own root just the same.
ADAM_ATOL = 1e-4
LOOSE_ATOL_OPTIMIZERS = ("adam", "adam-nonlazy", "rmsprop", "adagrad-momentum")
NUM_BATCHES = 8  # 0, 1: the agreement check; 2..4: the timed steps; 5..7: the timed lookups
REFERENCE_MAX_ROWS = 3_000_000  # above this the numpy reference engine is skipped; peers are checked against the engine
BOUND_MIN_REPEATS = 7  # the bound's kernels run max(rounds, this) times over the rounds' sequence of batches
BOUND_BLOCKS = 3  # blocks of (the bound's repeats, then the engine's steps back to back), alternating


def round_batch(r: int) -> int:
    """The batch round r's timed step uses (batches 0 and 1 are the agreement check's two steps)."""
    return 2 + r % 3


def forward_batch(r: int) -> int:
    """The batch round r's timed lookup uses: never a step's, so no step runs on rows its lookup just read."""
    return 5 + r % 3


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _max_diff(a: list[np.ndarray], b: list[np.ndarray], atol: float = ATOL) -> float | None:
    """Largest |a - b| if all are within tolerance, else raise."""
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            raise AssertionError(f"shapes differ: {x.shape} vs {y.shape}")
        np.testing.assert_allclose(x, y, rtol=RTOL, atol=atol)
        worst = max(worst, float(np.max(np.abs(x - y))) if x.size else 0.0)
    return worst


def run_variant(w: Workload, rounds: int, allowed: list[str], log=print) -> dict:
    """Builds, checks and times one variant in this process; returns the result record."""
    result: dict = {
        "variant": w.name,
        "workload": w.describe(),
        "impls": {},
        "missing": {},
        "skipped": {},
        "disagree": {},
    }
    batches = make_batches(w, NUM_BATCHES)
    tables0 = initial_tables(w)
    total_rows = sum(w.vocab)
    # Rows compared after two steps: every row the two steps touched, and 1000 untouched ones per table.
    check_rng = np.random.default_rng(5)
    check_ids = [
        np.union1d(np.union1d(b0.values, b1.values), check_rng.integers(0, v, 1000))
        for b0, b1, v in zip(batches[0], batches[1], w.vocab)
    ]

    # The truth: the engine with the numpy reference kernels (the executable specification), tables in one
    # shard: sharding is storage only, so a sharded engine must give the same numbers.
    truth_fwd = truth_tables = None
    if total_rows <= REFERENCE_MAX_ROWS:
        ref = EngineImpl(dataclasses.replace(w, num_shards=1), tables0, kernels="numpy")
        truth_fwd = ref.forward(batches[0])
        if not w.forward_only:
            ref.step(batches[0])
            ref.step(batches[1])
            truth_tables = ref.rows(check_ids)
        del ref
        result["truth"] = "engine with the numpy reference kernels" + (", one shard" if w.num_shards > 1 else "")
    else:
        result["truth"] = "the engine (the reference would need another copy of the tables)"

    impls = []
    names = ["engine"] + [p for p in PEERS if p in allowed and p in PEERS_FOR.get(w.name, PEERS)]
    for name in ["torch", "fbgemm", "numpy"]:
        if name not in names:
            result["skipped"][name] = "not run for this variant (memory)" if name in allowed else "not selected"
    for name in names:
        reason = missing_reason(name) if name in ("torch", "fbgemm") else None
        if reason:
            result["missing"][name] = reason
            continue
        before = _rss_mb()
        try:
            impl = EngineImpl(w, tables0) if name == "engine" else PEERS[name](w, tables0)
        except UnsupportedError as why:
            result["skipped"][name] = str(why)
            continue
        fwd = impl.forward(batches[0])
        if truth_fwd is None:
            truth_fwd = fwd
        try:
            fwd_diff = _max_diff(fwd, truth_fwd)
            table_diff = None
            if not w.forward_only:
                impl.step(batches[0])
                impl.step(batches[1])
                tables = impl.rows(check_ids)
                if truth_tables is None:
                    truth_tables = tables
                table_diff = _max_diff(
                    tables, truth_tables, ADAM_ATOL if w.optimizer in LOOSE_ATOL_OPTIMIZERS else ATOL
                )
                del tables
        except AssertionError as error:
            result["disagree"][name] = str(error).strip().splitlines()[:6]
            log(f"  {name}: DISAGREES with the reference; not timed")
            del impl
            continue
        record = {"fwd_max_diff": fwd_diff, "table_max_diff": table_diff, "state_mb": _rss_mb() - before}
        if name == "engine":
            record["kernels"] = impl.kernels
        result["impls"][name] = record
        impls.append((name, impl))
        log(
            f"  {name}: agrees (forward max |diff| {fwd_diff:.2e}"
            + (f", tables after 2 steps {table_diff:.2e})" if table_diff is not None else ")")
        )
    del tables0

    # Interleaved rounds: every implementation once per round, order rotated.
    step_times, fwd_times = _rounds(w, impls, batches, rounds)
    for name in step_times:
        rec = result["impls"][name]
        rec["fwd_ms"] = float(np.median(fwd_times[name])) * 1e3
        rec["step_ms"] = float(np.median(step_times[name])) * 1e3 if step_times[name] else None
    engine = dict(impls).get("engine")
    impls.clear()
    impl = None
    _bound_and_back_to_back(w, engine, batches, rounds, result)
    result["peak_rss_mb"] = _peak_rss_mb()
    return result


def _rounds(w: Workload, impls: list, batches: list, rounds: int):
    """Times every implementation once per round, the order rotated; returns (step times, lookup times)."""
    step_times: dict[str, list[float]] = {n: [] for n, _ in impls}
    fwd_times: dict[str, list[float]] = {n: [] for n, _ in impls}
    for r in range(rounds):
        order = impls[r % len(impls) :] + impls[: r % len(impls)] if impls else []
        for name, impl in order:
            if not w.forward_only:
                start = time.perf_counter()
                impl.step(batches[round_batch(r)])
                step_times[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            impl.forward(batches[forward_batch(r)])
            fwd_times[name].append(time.perf_counter() - start)
    return step_times, fwd_times


def _bound_and_back_to_back(w: Workload, engine, batches: list, rounds: int, result: dict) -> None:
    """The bound's repeats and the engine's steps back to back, in alternating blocks over one sequence of batches.

    In the rounds, the peers run between two engine steps and evict what a training loop keeps in cache (hot Zipf
    rows, slot maps, scratch); back to back, the engine runs as the bound's kernels do. The two alternate,
    BOUND_BLOCKS times each, because this machine's memory speed drifts by up to 50% from one second to the next:
    a ratio of two blocks run minutes apart measures the drift as much as the engine.
    """
    pick = forward_batch if w.forward_only else round_batch
    picks = [pick(r) for r in range(max(rounds, BOUND_MIN_REPEATS))]
    bound = None
    if bandwidth.available():
        # The bound's kernels see the batches in the timed rounds' order, after the ones the agreement check ran.
        uniques = [[np.unique(b.values) for b in step] for step in batches]
        update = "none" if w.forward_only else "table" if touches_all_rows(w) else "rows"
        bound = bandwidth.Bound(list(w.vocab), w.dim, num_slots(w), update=update)
        bound.warm(uniques[:1] if w.forward_only else uniques[:2])
    back_to_back, per_block = [], []
    for _ in range(BOUND_BLOCKS if bound is not None else 1):
        if bound is not None:
            times = [bound.repeat(uniques[b]) for b in picks]
            block_bound = np.median([g for g, _ in times]) + np.median([u for _, u in times])
        if engine is None:
            continue
        steps = []
        for b in picks:
            start = time.perf_counter()
            if w.forward_only:
                engine.forward(batches[b])
            else:
                engine.step(batches[b])
            steps.append(time.perf_counter() - start)
        back_to_back += steps
        if bound is not None:
            per_block.append(float(np.median(steps) / block_bound))
    if engine is not None:
        result["impls"]["engine"]["back_to_back_ms"] = float(np.median(back_to_back)) * 1e3
        result["back_to_back_per_block"] = per_block
    if bound is not None:
        bound.compare([uniques[b] for b in picks])
        result["bound"] = dict(bound.summary(), blocks=BOUND_BLOCKS)
    else:
        result["bound"] = None


# --------------------------------------------------------------------------------------------------
# Machine, cold start, report
# --------------------------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    info = {"python": platform.python_version(), "platform": platform.platform(), "cpus": str(os.cpu_count())}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["memory"] = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    for module in ("numpy", "numba", "torch", "fbgemm_gpu"):
        try:
            info[module] = __import__(module).__version__
        except Exception as error:
            info[module] = f"missing ({type(error).__name__})"
    try:
        import numba

        info["numba threads"] = str(numba.get_num_threads())
    except ImportError:
        pass
    try:
        import torch

        info["torch threads"] = str(torch.get_num_threads())
    except ImportError:
        pass
    return info


def cold_start(vocab: int) -> dict:
    """Two fresh processes: the first may fill the kernel cache; the second is the warm-cache figure."""
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.coldstart", str(vocab)],
            capture_output=True,
            text=True,
            cwd=_root(),
            env=_env(),
        )
        if out.returncode != 0:
            return {"error": out.stderr.strip().splitlines()[-1:]}
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"first_process": runs[0], "warm_cache": runs[1]}


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # torch and numba each bring an OpenMP runtime; with both spinning on 2 cores, every parallel region
    # waits for a scheduler tick (8 ms quanta were measured). Idle threads sleep instead, for every peer alike.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["PYTHONPATH"] = _root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_worker(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    """A benchmark worker process: the JSON of its last stdout line, or {"error": why it failed}."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=_root(), env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s: {' '.join(cmd)}"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(results: list[dict], info: dict, cold: dict | None, out=print) -> None:
    out("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    out("")
    out("Step = pooled lookup + backward + optimizer update (duplicates summed); medians of interleaved rounds, ms.")
    out("")
    header = (
        "| variant | workload | engine | torch | fbgemm | numpy | engine / best peer | bound | engine / bound "
        "| engine back to back | back to back / bound | fwd engine | fwd torch | fwd engine / torch "
        "| peak RSS MB |"
    )
    out(header)
    out("|" + "|".join(["---"] * (header.count("|") - 1)) + "|")
    for r in results:
        impls = r["impls"]
        key = "fwd_ms" if r["workload"].endswith("forward only") else "step_ms"
        ms = {n: impls[n].get(key) for n in impls}
        peers = {n: v for n, v in ms.items() if n != "engine" and v is not None}
        best = min(peers.values()) if peers else None
        eng = ms.get("engine")
        bound = (r.get("bound") or {}).get("bound_ms")

        def cell(name, ms=ms, r=r):
            if name in ms:
                return _fmt(ms[name])
            if name in r["missing"]:
                return "missing"
            if name in r["disagree"]:
                return "disagrees"
            return "n/a"

        fe, ft = impls.get("engine", {}).get("fwd_ms"), impls.get("torch", {}).get("fwd_ms")
        b2b = impls.get("engine", {}).get("back_to_back_ms")
        out(
            f"| {r['variant']} | {r['workload']} | {cell('engine')} | {cell('torch')} | {cell('fbgemm')} | "
            f"{cell('numpy')} | {_fmt(eng / best, 2) if eng and best else '-'} | {_fmt(bound)} | "
            f"{_fmt(eng / bound, 2) if eng and bound else '-'} | {_fmt(b2b)} | "
            f"{_fmt(b2b / bound, 2) if b2b and bound else '-'} | {_fmt(fe, 2)} | {_fmt(ft, 2)} | "
            f"{_fmt(fe / ft, 2) if fe and ft else '-'} | {r.get('peak_rss_mb', 0):.0f} |"
        )
    out("")
    for r in results:
        b = r.get("bound")
        notes = []
        if b:
            notes.append(_bound_note(b))
        else:
            notes.append("bound not measured (needs numba)")
        ratios = r.get("back_to_back_per_block")
        if ratios:
            notes.append(f"back to back / bound per block {min(ratios):.2f}-{max(ratios):.2f}x")
        for name, why in r["missing"].items():
            notes.append(f"{name} missing: {why}")
        for name, why in r["skipped"].items():
            notes.append(f"{name} not run: {why}")
        for name, why in r["disagree"].items():
            notes.append(f"{name} DISAGREES: {' '.join(why)}")
        diffs = ", ".join(
            f"{n} {v['table_max_diff'] if v['table_max_diff'] is not None else v['fwd_max_diff']:.1e}"
            for n, v in r["impls"].items()
        )
        notes.append(f"agreement (max |diff| vs {r['truth']}): {diffs}")
        out(f"- {r['variant']}: " + "; ".join(notes))
    if cold:
        out("")
        if "error" in cold:
            out(f"Cold start: failed: {cold['error']}")
        else:
            for label, c in (("first process", cold["first_process"]), ("warm cache", cold["warm_cache"])):
                out(
                    f"Cold start ({label}, V={c['vocab']:,}): import {c['import']:.2f} s + first step "
                    f"{c['first_step']:.2f} s = {c['import'] + c['first_step']:.2f} s (engine build, table "
                    f"initialization, {c['build']:.2f} s; second step {c['second_step'] * 1e3:.1f} ms)"
                )


def _bound_note(b: dict) -> str:
    """The bound and its comparison figures, one note."""
    what = {"rows": "read-modify-write", "table": "full-table read-modify-write (non-lazy Adam: every row)"}
    text = f"bound {b['bound_ms']:.2f} ms = gather {b['gather_ms']:.2f} ms ({b['gather_gbs']:.1f} GB/s)"
    if b["update"] != "none":
        text += f" + {what[b['update']]} {b['rmw_ms']:.2f} ms ({b['rmw_gbs']:.1f} GB/s)"
    text += f", {b['unique_ids']:.0f} distinct rows per step, {b['threads']} threads"
    text += f", medians of {b['repeats']} repeats rotating through the timed rounds' batches"
    if b.get("blocks"):
        text += f" ({b['blocks']} blocks alternating with the engine's steps back to back)"
    same = b["same_ids"]
    text += (
        f"; bound with one batch's ids repeated (the old bound) {same['bound_ms']:.2f} ms (gather "
        f"{same['gather_ms']:.2f})"
    )
    if b.get("prefetch_gather_ms") is not None:
        text += (
            f"; prefetching gather ({b['prefetch_ahead']} rows ahead) {b['prefetch_gather_ms']:.2f} ms "
            f"({b['prefetch_gather_gbs']:.1f} GB/s) against gather {b['gather_ms']:.2f} ms"
        )
    else:
        text += "; prefetching gather not measured (prefetch_row did not import)"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 rounds: a smoke run (< 60 s)")
    parser.add_argument(
        "--variants",
        default=None,
        help=f"comma-separated, from: {', '.join(VARIANTS)} (default: all; --quick: {','.join(QUICK)})",
    )
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per variant (default 15; quick 3)")
    parser.add_argument("--peers", default="torch,fbgemm,numpy", help="peers to run beside the engine")
    parser.add_argument("--no-cold-start", action="store_true")
    parser.add_argument("--in-process", action="store_true", help="run variants in this process (no per-variant RSS)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one variant, print JSON
    args = parser.parse_args(argv)

    rounds = args.rounds or (3 if args.quick else 15)
    allowed = [p for p in args.peers.split(",") if p]
    if args.one:
        w = VARIANTS[args.one]
        w = quick(w) if args.quick else w
        res = run_variant(w, rounds, allowed, log=lambda s: print(s, file=sys.stderr))
        print(json.dumps(res))
        return 0

    names = args.variants.split(",") if args.variants else list(QUICK if args.quick else DEFAULT)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    info = machine()
    print("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    missing = {p: missing_reason(p) for p in ("torch", "fbgemm", "numba")}
    for p, why in missing.items():
        if why:
            print(f"Peer/dependency {p} is missing: {why}", flush=True)
    results = []
    for name in names:
        w = quick(VARIANTS[name]) if args.quick else VARIANTS[name]
        print(f"{name}: {w.describe()}", flush=True)
        if args.in_process:
            results.append(run_variant(w, rounds, allowed))
            continue
        cmd = [sys.executable, "-m", "benchmarks.run", "--one", name, "--rounds", str(rounds), "--peers", args.peers]
        if args.quick:
            cmd.append("--quick")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, cwd=_root(), env=_env())
        if proc.returncode != 0:
            print(f"  {name}: FAILED (exit {proc.returncode})", flush=True)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cold = None if args.no_cold_start else cold_start(50_000 if args.quick else 1_000_000)
    print("")
    report(results, info, cold)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "results": results, "cold_start": cold, "rounds": rounds}, f, indent=1)
    return 0 if len(results) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
