"""Each rank's peak memory under mpiexec: `python -m benchmarks distributed-memory [--quick] [--ranks N] [--json F]`.

Runs `mpiexec -n N` of this module's worker on one table (Adagrad: rows +
one slot), whose rows a rank holds 1/N of. Each rank, after loading the
kernels with a tiny step of its own and the checkpoints' CRC kernel (their
code is the process's, not a phase's), reads its resident set (`base`, VmRSS), then per phase resets the
high-water mark (`/proc/self/clear_refs` 5) and reads VmHWM after it, the
phase's peak above `base` (what the rank holds included):

- `build`: `DistributedEngine(spec)`, its rows and slot drawn alone;
- `step`: three training steps on its slice of the global batch;
- `save`: a collective TensorFlow checkpoint (`write_collectively`), each
  rank writing its rows;
- `restore`: a new engine restored from that checkpoint on M ranks
  (`--restore-ranks`, another job), each reading only its rows; built
  with `initialize=False` first, as TPUEstimator builds one it restores.

`peak - base` is compared with the rank's budget: its rows + slot + 2 x
the step's working set (activations, ids, and a gradient row per entry),
the budget of `python -m benchmarks memory`. Memory is reported, never
asserted. Needs the `distributed` extra.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile

from .distributed import find_mpiexec, missing
from .memory import _status_kb, reset_peak

MB = 2**20


def _spec(vocabulary: int, dim: int, ranks: int):
    from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

    return EmbeddingSpec(
        tables=(TableSpec(name="big", vocabulary_size=vocabulary, dim=dim, combiner="mean"),),
        features=(FeatureSpec(name="history", table="big", num_buckets=vocabulary),),
        optimizer=AdagradSpec(learning_rate=0.05),
        num_shards=ranks,
    )


def _phase(action, base: int) -> int:
    """The resident set's high-water mark while `action()` ran, in bytes above `base` (the process's own)."""
    gc.collect()
    reset_peak()
    action()
    return _status_kb("VmHWM") * 1024 - base


def worker(vocabulary: int, dim: int, batch: int, bag: int, prefix: str, phase: str) -> None:
    """One rank: `phase` 'train' (build, step, save to `prefix`) or 'restore' (from `prefix`)."""
    import numpy as np

    from tpu_embedding_shim.engine.distributed import DistributedEngine, communicator, write_collectively
    from tpu_embedding_shim.engine.tf_bundle import crc32c

    comm = communicator()
    tiny = DistributedEngine(_spec(1000, dim, comm.size), comm, seed=0)  # the kernels and MPI loaded
    tiny.apply_gradients(tiny.forward({"history": np.zeros((2, 1), np.int64)}), {"history": np.zeros((2, dim))})
    del tiny
    crc32c(b"warm")  # the checkpoint's CRC kernel loaded (numba, where installed): the process's, not a phase's
    gc.collect()
    base = _status_kb("VmRSS") * 1024
    holder: dict = {}
    record: dict = {"rank": comm.rank, "base": base}
    spec = _spec(vocabulary, dim, comm.size)
    initialize = phase == "train"  # a restore builds as the runner does for one: rows allocated, not drawn
    record["build"] = _phase(
        lambda: holder.update(engine=DistributedEngine(spec, comm, seed=0, initialize=initialize)), base
    )
    engine = holder["engine"]
    mine = engine.row_slices()["big"]
    record["held"] = sum(part.nbytes for tensor in mine.values() for _, part in tensor.parts)
    if phase == "train":
        rng = np.random.default_rng(comm.rank)
        batches = [rng.integers(0, vocabulary, (batch, bag)) for _ in range(3)]
        grad = np.full((batch, dim), 1e-3, np.float32)

        def steps():
            for ids in batches:
                engine.apply_gradients(engine.forward({"history": ids}), {"history": grad})

        record["step"] = _phase(steps, base)
        record["working_set"] = batch * dim * 4 + batch * bag * 8 + batch * bag * dim * 4  # activations, ids, entries
        tensors = {f"big/{key}": value for key, value in engine.row_slices()["big"].items()}
        record["save"] = _phase(lambda: write_collectively(comm, prefix, tensors), base)
    else:
        from tpu_embedding_shim.engine.tf_bundle import BundleReader

        def restore():
            reader = BundleReader(prefix)
            rows = {
                "big": {
                    key: reader.read_rows(f"big/{key}", engine.row_ids("big")) for key in ("embedding", "accumulators")
                }
            }
            engine.load_rows(rows)

        record["restore"] = _phase(restore, base)
    records = comm.allgather_object(record)
    if comm.rank == 0:
        print(json.dumps(records))


def _job(ranks: int, args: list[str]) -> list[dict]:
    command = [find_mpiexec() or "mpiexec", "-n", str(ranks), sys.executable, "-m", "benchmarks.distributed_memory"]
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    out = subprocess.run([*command, "--worker", *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(train: list[dict], restored: list[dict], vocabulary: int, dim: int, out=print) -> None:
    full = vocabulary * dim * 4 * 2
    out(
        f"table {vocabulary:,} x {dim} + one slot: {full / MB:,.0f} MB in all; {len(train)} ranks train and save, "
        f"{len(restored)} restore"
    )
    out(f"{len(train)} ranks: | rank | holds, MB | budget, MB | build | step | save |")
    out("|---|---:|---:|---:|---:|---:|")
    for r in train:
        budget = r["held"] + 2 * r["working_set"]
        cells = [f"{r[k] / MB:.0f} ({r[k] / budget:.2f})" for k in ("build", "step", "save")]
        out(f"| {r['rank']} | {r['held'] / MB:.0f} | {budget / MB:.0f} | {' | '.join(cells)} |")
    out(f"restored on {len(restored)} ranks: | rank | holds, MB | build (not drawn) | restore |")
    out("|---|---:|---:|---:|")
    for r in restored:
        cells = [f"{r[k] / MB:.0f} ({r[k] / r['held']:.2f})" for k in ("build", "restore")]
        out(f"| {r['rank']} | {r['held'] / MB:.0f} | {' | '.join(cells)} |")
    out("Cells: the phase's peak RSS in MB above the rank's base (its process before the engine), and its ratio to")
    out("the budget (rows + slots + 2 x the step's working set; for a restore, rows + slots).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks distributed-memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="a small table: a smoke run")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--restore-ranks", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--vocabulary", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, default=32, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--phase", default="train", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    vocabulary = args.vocabulary or (200_000 if args.quick else 4_000_000)
    batch, bag = (256, 20) if args.quick else (2048, 20)
    if args.worker:
        worker(vocabulary, args.dim, batch, bag, args.prefix, args.phase)
        return 0
    why = missing()
    if why:
        print(f"python -m benchmarks distributed-memory: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        common = ["--vocabulary", str(vocabulary), "--dim", str(args.dim), "--prefix", os.path.join(scratch, "ckpt")]
        train = _job(args.ranks, [*common, "--phase", "train"])
        restored = _job(args.restore_ranks, [*common, "--phase", "restore"])
    report(train, restored, vocabulary, args.dim)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"train": train, "restore": restored, "vocabulary": vocabulary, "dim": args.dim}, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
