"""The distributed step: `python -m benchmarks distributed [--quick] [--rounds K] [--repeats R] [--latency-us A]`.

Launches `mpiexec -n 1` and `mpiexec -n 2` of `distributed_worker.py`
(`R` times each, alternating, so both see the same machine), which times
`DistributedEngine` steps (forward + apply_gradients, after warm-up, the
median of `K` steps) on the main workload and criteo26, exact and, when
the engine has it, owner-pooled; and counts the bytes each rank moves per
step. Between them, the one-process `Engine` (numpy and fast kernels) runs
the same global batch in a plain process, for reference. Then the model
(`distributed_model.py`) predicts the N = 2 step from the N = 1 compute and
this machine's measured latency and bandwidth, next to the measured one,
and the step at N = 8..256 hosts at 10 and 100 Gb/s.

Timings are reported, never asserted. Needs mpi4py and the mpich wheel
(the `distributed` extra); without them it says so and exits 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

from . import distributed_model as model
from .run import _root, machine, run_worker
from .variants import quick
from .workload import Workload

HOSTS = (8, 16, 32, 64, 128, 256)
BANDWIDTHS_GBPS = (10, 100)
LATENCY_US = 20.0  # one MPI message over TCP on a data-centre Ethernet (assumed, not measured); RDMA: 2-5 us
INSTALL = "pip install mpi4py==4.1.2 mpich==5.0.2 threadpoolctl  (the mpich wheel brings MPI and mpiexec)"


def find_mpiexec() -> str | None:
    """The `mpiexec` next to this Python (the mpich wheel puts it there), else the first on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def missing() -> str | None:
    """Why this benchmark can't run here, or None."""
    if importlib.util.find_spec("mpi4py") is None:
        return f"mpi4py is not installed in this Python ({sys.executable}): {INSTALL}"
    if find_mpiexec() is None:
        return f"mpi4py is installed but no mpiexec was found beside {sys.executable} or on PATH: {INSTALL}"
    return None


def _environment(threads: bool) -> dict[str, str]:
    """This environment without any MPI launcher's variables, the checkout importable; `threads`: numba and
    OpenMP keep their default thread count (the one-process reference), else one thread per rank."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_", "HYDRA_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = _root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if not threads:
        env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return env


def launch(ranks: int, args: argparse.Namespace) -> dict:
    """One `mpiexec -n ranks` run of the worker: every rank's measurements, or an error."""
    cmd = [find_mpiexec() or "mpiexec", "-n", str(ranks), sys.executable, "-m", "benchmarks.distributed_worker"]
    return run_worker(cmd + _worker_args(args), _environment(threads=False), args.timeout)


def reference(args: argparse.Namespace) -> dict:
    """The one-process `Engine`, numpy and fast kernels, on the global batch (a plain process, no MPI)."""
    cmd = [sys.executable, "-m", "benchmarks.distributed_worker", "--reference"]
    return run_worker(cmd + _worker_args(args), _environment(threads=True), args.timeout)


def _worker_args(args: argparse.Namespace) -> list[str]:
    return ["--rounds", str(args.rounds)] + (["--quick"] if args.quick else [])


# Summaries ---------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def summarize(launches: list[dict]) -> dict:
    """(workload, mode) -> the run's figures: times as `_step_medians`; bytes per step of the busiest rank, the
    median over launches."""
    out: dict = {}
    first = launches[0]["ranks"][0]["workloads"]
    for name, modes in first.items():
        for mode in modes:
            runs = [[rank["workloads"][name][mode] for rank in launch["ranks"]] for launch in launches]
            kinds = sorted({kind for run in runs for rank in run for kind in rank["sent"]})
            traffic = {
                kind: _median(
                    [max(max(r["sent"].get(kind, 0), r["received"].get(kind, 0)) for r in run) for run in runs]
                )
                for kind in kinds
            }
            out[(name, mode)] = {
                **_step_medians(runs),
                "examples": runs[0][0]["examples"],
                "traffic": traffic,
                "calls": runs[0][0]["calls"],
                "segment_calls": _median([max(r["segment_calls"] for r in run) for run in runs]),
                "sent": _median([max(sum(r["sent"].values()) for r in run) for run in runs]),
                "received": _median([max(sum(r["received"].values()) for r in run) for run in runs]),
            }
    return out


def _step_medians(runs: list[list[dict]]) -> dict[str, float]:
    """Step, compute and time inside collectives: per timed step the slowest rank (a step ends when every rank is
    done; compute = step - collectives), the median over the steps of every launch."""
    steps, computes, inside = [], [], []
    for run in runs:
        for s in range(len(run[0]["steps_s"])):
            steps.append(max(rank["steps_s"][s] for rank in run))
            computes.append(max(rank["steps_s"][s] - rank["collectives_s"][s] for rank in run))
            inside.append(max(rank["collectives_s"][s] for rank in run))
    return {"step_s": _median(steps), "compute_s": _median(computes), "collectives_s": _median(inside)}


def collectives(launches: list[dict]) -> dict:
    """This machine's latency and bandwidth between the ranks, medians over launches and ranks."""
    every = [rank["collectives"] for launch in launches for rank in launch["ranks"]]
    out = {key: _median([c[key] for c in every]) for key in ("allreduce_s", "alltoallv_small_s", "alltoallv_big_s")}
    out["segment_call_s"] = _median([rank["segment_call_s"] for launch in launches for rank in launch["ranks"]])
    out["bandwidth"] = (
        every[0]["alltoallv_big_bytes"] / out["alltoallv_big_s"] if every[0]["alltoallv_big_bytes"] else 0
    )
    return out


def traffic_of(figures: dict, ranks: int, w: Workload, mode: str) -> model.Traffic:
    """The model's `Traffic` from a summary's figures (bytes per rank per step, calls per step)."""
    t, calls = figures["traffic"], figures["calls"]
    floats = t.get("alltoallv float", 0.0)
    # rows per example and remote owner: the backward's gradient rows, and (owner mode) the forward's partial sums
    directions = 2 if mode == "owner" else 1
    pairs = min(floats, directions * model.pair_bytes(figures["examples"], w.num_tables, w.dim, w.bag, ranks))
    return model.Traffic(
        ranks=ranks,
        header=t.get("alltoallv header", 0.0),
        ids=t.get("alltoallv int", 0.0),
        values=floats - pairs,
        alltoallv=sum(n for kind, n in calls.items() if kind.startswith("alltoallv")),
        small=sum(n for kind, n in calls.items() if not kind.startswith("alltoallv") and kind != "barrier"),
        bag=w.bag,
        pair_values=pairs,
        segment_calls=figures["segment_calls"],
    )


# Report ------------------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f}"


def report(results: dict, info: dict, latency_us: float, out=print) -> None:
    """The measured table, the model's check at N = 2 and the model's table at N = 8..256."""
    out("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    out(
        f"MPI: {results['library']}; {results['repeats']} launches per N, alternating; "
        f"{results['rounds']} timed steps each"
    )
    out(f"Load average (1 min) before / after the run: {results['load'][0]:.1f} / {results['load'][1]:.1f}")
    out("")
    for name, w in results["workloads"].items():
        out(f"- {name}: {w.describe()}")
    if not results["owner_pooling"]:
        out("- owner-pooled: not available (this DistributedEngine has no `pooling` argument)")
    out("")
    out("Step = forward + apply_gradients; the slowest rank's median, ms. Each rank runs the global batch / ranks.")
    out("MB out / in: bytes one rank sends to / receives from the other ranks per step (the busiest rank).")
    out("In MPI: time inside the collectives (the rest is compute). Engine: one process on the global batch.")
    out("")
    out("| workload, pooling | ranks | step, ms | in MPI, ms | MB out / in | examples/s |")
    out("|---|---:|---:|---:|---:|---:|")
    by_n = results["summaries"]
    for name in results["workloads"]:
        for mode in [m for n, m in by_n[1] if n == name]:
            for n in (1, 2):
                f = by_n[n].get((name, mode))
                if f is None:
                    continue
                rate = f["examples"] * n / f["step_s"]
                out(
                    f"| {name}, {mode} | {n} | {_ms(f['step_s'])} | {_ms(f['collectives_s'])} | "
                    f"{_mb(f['sent'])} / {_mb(f['received'])} | {rate:,.0f} |"
                )
        _reference_rows(name, results, out)
    if "error" in results["reference"]:
        out(f"The one-process reference failed: {results['reference']['error']}")
    local = results["collectives"]
    here = model.Network(
        "this machine", local["bandwidth"], local["alltoallv_small_s"], reduce_latency=local["allreduce_s"]
    )
    out("")
    out(
        f"Between the 2 ranks here: allreduce of 3 int64 {local['allreduce_s'] * 1e6:.1f} us, small all-to-all "
        f"{local['alltoallv_small_s'] * 1e6:.1f} us, all-to-all of 8 MB each way "
        f"{local['alltoallv_big_s'] * 1e3:.2f} ms "
        f"({local['bandwidth'] / 1e9:.2f} GB/s). One call of the exchange's per-segment helpers: "
        f"{local['segment_call_s'] * 1e6:.1f} us."
    )
    out("")
    out("The model at N = 2 with this machine's latency and bandwidth, against the measured step (ms):")
    out("")
    out("| workload, pooling | measured | predicted from the N = 1 compute | predicted from the N = 2 compute |")
    out("|---|---:|---:|---:|")
    for (name, mode), f2 in by_n[2].items():
        w = results["workloads"][name]
        f1 = by_n[1][(name, mode)]
        traffic = traffic_of(f2, 2, w, mode)
        from_1 = model.step_time(f1["compute_s"] * f2["examples"] / f1["examples"], traffic, 2, here)
        from_2 = model.step_time(f2["compute_s"], traffic, 2, here)
        out(f"| {name}, {mode} | {_ms(f2['step_s'])} | {_ms(from_1)} | {_ms(from_2)} |")
    networks = [model.Network(f"{g} Gb/s", g * 1e9 / 8, latency_us * 1e-6) for g in BANDWIDTHS_GBPS]
    out("")
    out(
        f"The model at N hosts, weak scaling (each host: the per-rank batch and compute measured at N = 2), "
        f"latency {latency_us:g} us per message. Step ms (of which communication ms); loops: what the "
        "per-segment loops add to the compute, ms:"
    )
    out("")
    out("| workload, pooling | hosts | MB / host | loops, ms | " + " | ".join(n.name for n in networks) + " |")
    out("|---|---:|---:|---:|" + "---:|" * len(networks))
    per_call = local["segment_call_s"]
    for (name, mode), f2 in by_n[2].items():
        traffic = traffic_of(f2, 2, results["workloads"][name], mode)
        for hosts in HOSTS:
            loops = model.loops_at(traffic, hosts, per_call)
            cells = []
            for net in networks:
                step = model.step_time(f2["compute_s"], traffic, hosts, net, per_call)
                cells.append(f"{_ms(step)} ({_ms(step - f2['compute_s'] - loops)})")
            out(
                f"| {name}, {mode} | {hosts} | {_mb(model.traffic_at(traffic, hosts))} | {_ms(loops)} | "
                + " | ".join(cells)
                + " |"
            )


def _reference_rows(name: str, results: dict, out) -> None:
    """The one-process `Engine` rows of workload `name` in the measured table."""
    batch = results["workloads"][name].batch
    for kernels, ref in results["reference"].get(name, {}).items():  # type: ignore[union-attr]
        label = f"Engine {kernels}"
        if "error" in ref:
            out(f"| {name}, {label} | 1 | not run: {ref['error']} | | | |")
        else:
            out(f"| {name}, {label} | 1 | {_ms(ref['step_s'])} | - | 0 | {batch / ref['step_s']:,.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks distributed", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one launch per N: a smoke run (< 60 s)")
    parser.add_argument("--rounds", type=int, default=None, help="timed steps per launch (default 15; quick 3)")
    parser.add_argument("--repeats", type=int, default=None, help="launches per N, alternating (default 3; quick 1)")
    parser.add_argument("--latency-us", type=float, default=LATENCY_US, help="the model's latency per message")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per launch before it is ended")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 15)
    args.repeats = args.repeats or (1 if args.quick else 3)
    why = missing()
    if why:
        print(f"python -m benchmarks distributed: {why}", file=sys.stderr)
        return 2
    from .distributed_worker import WORKLOADS, pooling_modes

    info = machine()
    print("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    load_before = os.getloadavg()[0]
    launches: dict[int, list[dict]] = {1: [], 2: []}
    references = []
    for repeat in range(args.repeats):
        for n in (1, 2):
            print(f"mpiexec -n {n} (launch {repeat + 1} of {args.repeats})", flush=True)
            result = launch(n, args)
            if "error" in result:
                print(f"  FAILED: {result['error']}", flush=True)
                return 1
            launches[n].append(result)
        print(f"one process, Engine (launch {repeat + 1} of {args.repeats})", flush=True)
        references.append(reference(args))
    workloads = {name: quick(w) if args.quick else w for name, w in WORKLOADS.items()}
    results = {
        "library": launches[2][0]["library"],
        "repeats": args.repeats,
        "rounds": args.rounds,
        "workloads": workloads,
        "owner_pooling": "owner" in pooling_modes(),
        "summaries": {n: summarize(runs) for n, runs in launches.items()},
        "collectives": collectives(launches[2]),
        "reference": _reference_medians(references),
        "load": (load_before, os.getloadavg()[0]),
    }
    print("")
    report(results, info, args.latency_us)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(
                {"machine": info, "launches": launches, "reference": references, "args": vars(args)}, file, indent=1
            )
    return 0


def _reference_medians(references: list[dict]) -> dict:
    """workload -> kernels -> the median step over launches, or the first launch's error."""
    failed = [r["error"] for r in references if "error" in r]
    if failed:
        return {"error": failed[0]}
    out: dict = {}
    for name in references[0]:
        out[name] = {}
        for kernels, first in references[0][name].items():
            if "error" in first:
                out[name][kernels] = first
            else:
                out[name][kernels] = {"step_s": _median([r[name][kernels]["step_s"] for r in references])}
    return out


if __name__ == "__main__":
    sys.exit(main())
