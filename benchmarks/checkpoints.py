"""Checkpoint speed: `python -m benchmarks checkpoints [--quick] [--rows N] [--dim D] [--repeats R]`.

Writes and reads a [rows, dim] float32 table with its Adagrad accumulator
(1,000,000 x 64 by default: 2 x 256 MB) in TensorFlow's format
(`engine.tf_bundle`), beside `np.save` / `np.load` of the same two arrays
and the engine's own format, in the same process. Like is compared with
like: `write_bundle` fsyncs its files, so `np.save` is timed with an fsync
too (and without, for reference); `BundleReader` checks every CRC-32C, so
it is timed with `verify=False` too.

Each CRC-32C implementation runs in a fresh process: the numba kernel
(the `fast` extra), then numpy alone (`TPU_EMBEDDING_SHIM_KERNELS=numpy`).
Every operation is checked once (what is read equals what was written)
before it is timed. Reads come from the page cache (the files were just
written). MB/s are 10^6 bytes of tensor data per second: the median and
the best of `--repeats` runs (the order of the operations rotates from one
run to the next).

Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from .run import _env, _root, machine

# (key, what the table row says), in the order of the report
OPERATIONS = [
    ("crc", "CRC-32C alone (both arrays, in memory)"),
    ("tf_write", "TensorFlow format: `write_bundle` (CRC + fsync)"),
    ("npy_write_fsync", "`np.save` + fsync"),
    ("npy_write", "`np.save`, no fsync"),
    ("engine_write", "engine format: `save_checkpoint` (sha256 + fsync)"),
    ("tf_read", "TensorFlow format: read into memory, CRC checked"),
    ("tf_read_mmap", "TensorFlow format: read memory-mapped, CRC checked"),
    ("tf_read_nocrc", "TensorFlow format: read into memory, no CRC (`verify=False`)"),
    ("npy_read", "`np.load`"),
    ("engine_read", "engine format: `load_checkpoint` (sha256 checked)"),
]
BACKENDS = ("numba", "numpy")
TABLE = "items"
SLOT = f"{TABLE}/accumulators"


def make_arrays(rows: int, dim: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The table (normal values) and its Adagrad accumulator (0.1 plus squared gradients), float32."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows, dim), dtype=np.float32)
    accumulators = np.float32(0.1) + rng.random((rows, dim), dtype=np.float32) ** 2
    return {TABLE: table, SLOT: accumulators}


def _fsync_write_npy(path: str, array: np.ndarray, fsync: bool) -> None:
    with open(path, "wb") as file:
        np.save(file, array, allow_pickle=False)
        if fsync:
            file.flush()
            os.fsync(file.fileno())


def operations(arrays: dict[str, np.ndarray], directory: str) -> dict[str, Callable[[], dict | None]]:
    """key -> a function doing that operation once; a read returns what it read (for the check)."""
    from tpu_embedding_shim.engine.checkpoint import load_checkpoint, save_checkpoint
    from tpu_embedding_shim.engine.tf_bundle import BundleReader, crc32c, write_bundle

    prefix = os.path.join(directory, "tf", "model.ckpt-1")
    npy = {name: os.path.join(directory, f"{name.replace('/', '_')}.npy") for name in arrays}
    engine_dir = os.path.join(directory, "engine")
    rows, dim = arrays[TABLE].shape
    structure = {TABLE: {"vocabulary_size": rows, "dim": dim, "slots": ["accumulators"]}}
    state = {TABLE: {"embedding": arrays[TABLE], "accumulators": arrays[SLOT]}}
    written = {"engine": None}

    def crc():
        for array in arrays.values():
            crc32c(array)

    def tf_write():
        write_bundle(prefix, {**arrays, "global_step": np.int64(1)})

    def npy_write(fsync):
        for name, array in arrays.items():
            _fsync_write_npy(npy[name], array, fsync)

    def engine_write():
        written["engine"] = save_checkpoint(engine_dir, state, step=1, spec_structure=structure, fingerprint="", keep=1)

    def tf_read(mmap, verify):
        reader = BundleReader(prefix, verify=verify)
        return {name: reader.read(name, mmap=mmap) for name in arrays}

    def npy_read():
        return {name: np.load(npy[name], allow_pickle=False) for name in arrays}

    def engine_read():
        loaded, _, _ = load_checkpoint(written["engine"])
        return {TABLE: loaded[TABLE]["embedding"], SLOT: loaded[TABLE]["accumulators"]}

    return {
        "crc": crc,
        "tf_write": tf_write,
        "npy_write_fsync": lambda: npy_write(True),
        "npy_write": lambda: npy_write(False),
        "engine_write": engine_write,
        "tf_read": lambda: tf_read(False, True),
        "tf_read_mmap": lambda: tf_read(True, True),
        "tf_read_nocrc": lambda: tf_read(False, False),
        "npy_read": npy_read,
        "engine_read": engine_read,
    }


def measure(rows: int, dim: int, repeats: int, directory: str | None = None) -> dict:
    """Times every operation `repeats` times with the CRC-32C backend of this process."""
    from tpu_embedding_shim.engine.tf_bundle import crc32c
    from tpu_embedding_shim.engine.tf_bundle.crc32c import backend

    arrays = make_arrays(rows, dim)
    nbytes = sum(a.nbytes for a in arrays.values())
    work = tempfile.mkdtemp(prefix="ckpt-bench-", dir=directory)
    try:
        crc32c(np.zeros(64, np.uint8))  # load (or compile) the kernel before timing
        ops = operations(arrays, work)
        for key, _ in OPERATIONS:  # once untimed, checked: a read must give back what was written
            result = ops[key]()
            if result is not None:
                for name, array in arrays.items():
                    if not np.array_equal(result[name], array):
                        raise AssertionError(f"{key}: {name} read back differs from what was written")
        seconds: dict[str, list[float]] = {key: [] for key, _ in OPERATIONS}
        keys = [key for key, _ in OPERATIONS]
        for r in range(repeats):  # the order rotates every repeat: memory speed drifts on a shared machine
            for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                start = time.perf_counter()
                result = ops[key]()
                seconds[key].append(time.perf_counter() - start)
                del result
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mbs = {key: nbytes / 1e6 / statistics.median(times) for key, times in seconds.items()}
    best = {key: nbytes / 1e6 / min(times) for key, times in seconds.items()}
    return {
        "backend": backend(),
        "rows": rows,
        "dim": dim,
        "bytes": nbytes,
        "repeats": repeats,
        "median_mbs": mbs,
        "best_mbs": best,
    }


def report(results: dict[str, dict], info: dict[str, str], out=print) -> None:
    """The markdown table: one row per operation, one column per CRC-32C backend."""
    out("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    any_result = next((r for r in results.values() if "median_mbs" in r), None)
    if any_result is None:
        for name, result in results.items():
            out(f"{name}: FAILED: {result.get('error')}")
        return
    size = (
        f"{any_result['rows']:,} x {any_result['dim']} float32 table + its Adagrad slot, "
        f"{any_result['bytes'] / 1e6:.0f} MB"
    )
    out(f"Checkpoints: {size}; MB/s, median (best) of {any_result['repeats']} runs, page cache warm")
    out("")
    names = list(results)
    out("| operation | " + " | ".join(f"CRC-32C: {n}" for n in names) + " |")
    out("|---|" + "---|" * len(names))
    for key, label in OPERATIONS:
        cells = []
        for name in names:
            result = results[name]
            cells.append(
                f"{result['median_mbs'][key]:.0f} ({result['best_mbs'][key]:.0f})" if "median_mbs" in result else "-"
            )
        out(f"| {label} | " + " | ".join(cells) + " |")
    for name, result in results.items():
        if "error" in result:
            out(f"- CRC-32C {name}: not measured: {result['error']}")


def _run_backend(backend: str, args: argparse.Namespace) -> dict:
    env = _env()
    if backend == "numpy":
        env["TPU_EMBEDDING_SHIM_KERNELS"] = "numpy"
    else:
        env.pop("TPU_EMBEDDING_SHIM_KERNELS", None)
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.checkpoints",
        "--one",
        backend,
        "--rows",
        str(args.rows),
        "--dim",
        str(args.dim),
        "--repeats",
        str(args.repeats),
    ] + (["--dir", args.dir] if args.dir else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=_root(), env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks checkpoints", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 20,000 x 64 table, 1 repeat: a smoke run")
    parser.add_argument("--rows", type=int, default=None, help="table rows (default 1,000,000)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=None, help="timed runs of each operation (default 5)")
    parser.add_argument("--dir", default=None, help="where the files are written (default: the temp directory)")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="only this process's CRC-32C backend, measured here (no fresh processes)",
    )
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--one", choices=BACKENDS, help=argparse.SUPPRESS)  # internal: one backend, print JSON
    args = parser.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else 1_000_000)
    args.repeats = args.repeats or (1 if args.quick else 5)

    if args.one:
        result = measure(args.rows, args.dim, args.repeats, args.dir)
        if result["backend"] != args.one:
            print(
                f"asked for the {args.one} CRC-32C, this process has {result['backend']} (is numba installed?)",
                file=sys.stderr,
            )
            return 1
        print(json.dumps(result))
        return 0
    if args.in_process:
        result = measure(args.rows, args.dim, args.repeats, args.dir)
        results = {result["backend"]: result}
    else:
        results = {backend: _run_backend(backend, args) for backend in BACKENDS}
    report(results, machine())
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"machine": machine(), "results": results}, file, indent=1)
    return 0 if all("median_mbs" in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
