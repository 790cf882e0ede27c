"""Program level: `python -m benchmarks programs [--quick] [--rounds K] [--frameworks ...] [--csv PATH]`.

Two TPUEstimator programs, each defined once here, trained three ways on
the same data, batch and number of steps:

- `ours`: the program with `import tpu_embedding_shim.tensorflow as tf`
  (the TF bridge: this project's engine holds the tables, TensorFlow runs
  the dense part), in the TensorFlow venv;
- `tf`: the same program with `import tensorflow as tf`, TensorFlow 2.15's
  own `TPUEstimator(use_tpu=False)` (its CPU embedding columns), in the same
  venv;
- `torchrec`: the same model as TorchRec's `EmbeddingBagCollection` with
  FBGEMM's fused Adagrad (DistributedModelParallel in a one-process gloo
  group) and a torch MLP, in the TorchRec venv (`programs_torchrec.py`).

Each (program, framework) runs in a process of its own, one at a time, the
frameworks interleaved round by round; the figure is the median over
rounds of examples/s. Within a process, `estimator.train` runs W + S + 2
steps and the time of steps W..W+S is read from the input pipeline: a
`tf.py_function` in the dataset stamps the time each batch is taken, so
graph building, session start, the first W steps (numba compilation,
TensorFlow's warm-up) and the final checkpoint are outside the window.
Timings are reported, never asserted.

The Keras programs (`keras256`, `keras4096`: the criteo model as a Keras
`model.fit` program with TFRS's TPUEmbedding layer, `programs_keras.py`)
run unmodified two ways: `ours` is `python -m tpu_embedding_shim.tensorflow
-m benchmarks.programs_keras` (the drop-in mode: TPUStrategy and the layer's
TPU path on the engine), `tf` is `python -m benchmarks.programs_keras`
(no TPU: the program falls back to the default strategy and TFRS to
TensorFlow's CPU embedding, the tables trained by Keras's Adagrad). A
Keras callback stamps each batch's start; the worker reports which strategy
and embedding ran, and a run on the other path is an error.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .run import _env, run_worker
from .workload import CRITEO_SIZES

# The venvs .ci/run makes in the checkout (docs/benchmarks.md, Program level), unless the variables name others.
_CHECKOUT = Path(__file__).resolve().parent.parent
TF_PYTHON = os.environ.get("TPU_SHIM_TF_PYTHON", str(_CHECKOUT / ".venv-tf" / "bin" / "python"))
TORCHREC_PYTHON = os.environ.get("TPU_SHIM_TORCHREC_PYTHON", str(_CHECKOUT / ".venv-torchrec" / "bin" / "python"))
FRAMEWORKS = ("ours", "tf", "torchrec")
CRITEO_CAP = 1_000_000  # the five tables above a million rows (of Criteo Kaggle's 26) are cut to a million


@dataclasses.dataclass(frozen=True)
class Program:
    """A program's sizes. `kind` picks the model: "migration" (docs/migration.md's) or "criteo"."""

    name: str
    kind: str
    batch: int
    steps: int  # timed steps (S)
    warmup: int  # untimed steps before them (W)
    vocab: tuple[int, ...]
    dim: int
    hidden: tuple[int, ...]
    dense_features: int = 0
    history: int = 0  # the migration program's sequence length
    learning_rate: float = 0.05


PROGRAMS = {
    "migration": Program(
        "migration", "migration", batch=64, steps=200, warmup=20, vocab=(40,), dim=8, hidden=(16,), history=5
    ),
    "criteo": Program(
        "criteo",
        "criteo",
        batch=4096,
        steps=20,
        warmup=5,
        vocab=tuple(min(v, CRITEO_CAP) for v in CRITEO_SIZES),
        dim=16,
        hidden=(512, 256),
        dense_features=13,
    ),
}
# The Criteo-like model again as a Keras `model.fit` program with TFRS's TPUEmbedding layer (programs_keras.py),
# at a small batch and at the criteo program's.
for _batch, _steps, _warmup in ((256, 100, 10), (4096, 20, 5)):
    PROGRAMS[f"keras{_batch}"] = dataclasses.replace(
        PROGRAMS["criteo"], name=f"keras{_batch}", kind="keras", batch=_batch, steps=_steps, warmup=_warmup
    )


def quick(program: Program) -> Program:
    """A tiny version of `program` (the smoke test's)."""
    return dataclasses.replace(
        program, batch=min(program.batch, 64), steps=5, warmup=2, vocab=tuple(min(v, 1000) for v in program.vocab)
    )


# The data: the same numpy batches for every framework -------------------------------------------------------


def batches(program: Program, count: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """`count` batches as arrays [count, B, ...]: the features by name (ids int64, dense float32) and labels."""
    rng = np.random.default_rng(seed)
    shape = (count, program.batch)
    if program.kind == "migration":
        v = program.vocab[0]
        features = {  # ids from 1: a dense id 0 is padding on a TPU
            "user": rng.integers(1, v, shape + (1,)),
            "item": rng.integers(1, v, shape + (1,)),
            "history": rng.integers(1, v, shape + (program.history,)),
        }
        labels = ((features["user"][..., 0] < v // 2) ^ (features["item"][..., 0] % 2 == 0)).astype(np.float32)
        return features, labels
    features = {f"c{i}": rng.integers(1, v, shape + (1,)) for i, v in enumerate(program.vocab)}  # from 1, as above
    features["dense"] = rng.standard_normal(shape + (program.dense_features,)).astype(np.float32)
    labels = (rng.random(shape) < 0.25).astype(np.float32)
    return features, labels


# The program, over a `tf` module -----------------------------------------------------------------------------


def estimator(tf, program: Program, model_dir: str, use_tpu: bool):
    """The program's TPUEstimator over module `tf` (the bridge, or TensorFlow with use_tpu=False)."""
    if program.kind == "migration":
        columns, model_fn = _migration(tf, program, use_tpu)
    else:
        columns, model_fn = _criteo(tf, program)
    tpu = tf.compat.v1.estimator.tpu
    return tpu.TPUEstimator(
        model_fn=model_fn,
        config=tpu.RunConfig(
            model_dir=model_dir,
            save_checkpoints_steps=10**9,
            tf_random_seed=0,
            tpu_config=tpu.TPUConfig(iterations_per_loop=1),
        ),
        train_batch_size=program.batch,
        use_tpu=use_tpu,
        embedding_config_spec=tpu.experimental.EmbeddingConfigSpec(
            feature_columns=columns,
            optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(
                0.3 if program.kind == "migration" else program.learning_rate
            ),
        ),
    )


def _migration(tf, program: Program, use_tpu: bool):
    """docs/migration.md's "Before" program. TensorFlow's own CrossShardOptimizer needs a TPU, so TF's run goes
    without it; its CPU path trains the tables with the model's SGD, ours with the spec's Adagrad (as a TPU)."""
    v, d, length = program.vocab[0], program.dim, program.history
    user = tf.feature_column.categorical_column_with_identity("user", v)
    item = tf.feature_column.categorical_column_with_identity("item", v)
    history = tf.feature_column.sequence_categorical_column_with_identity("history", v)
    user_col = tf.compat.v1.tpu.experimental.embedding_column(user, d)
    item_col, history_col = tf.compat.v1.tpu.experimental.shared_embedding_columns(
        [item, history], d, max_sequence_lengths=[0, length]
    )

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures([user_col, item_col])(features)
        seq, lengths = tf.keras.experimental.SequenceFeatures([history_col])(features)
        mask = tf.sequence_mask(lengths, length, dtype=tf.float32)[:, :, None]
        pooled = tf.reduce_sum(seq * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        hidden = tf.keras.layers.Dense(program.hidden[0], activation="relu")(tf.concat([net, pooled], 1))
        logits = tf.squeeze(tf.keras.layers.Dense(1)(hidden), -1)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.5)
        if use_tpu:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return [user_col, item_col, history_col], model_fn


def _criteo(tf, program: Program):
    """26 categorical features (one id each, sum), 13 dense ones, an MLP; Adagrad for the tables and the MLP
    (TensorFlow's CPU path trains the tables with the model's optimizer, so Adagrad there too)."""
    columns = [
        tf.compat.v1.tpu.experimental.embedding_column(
            tf.feature_column.categorical_column_with_identity(f"c{i}", v), program.dim, combiner="sum"
        )
        for i, v in enumerate(program.vocab)
    ]

    def model_fn(features, labels, mode, params):
        x = tf.concat([tf.keras.layers.DenseFeatures(columns)(features), features["dense"]], 1)
        for width in program.hidden:
            x = tf.keras.layers.Dense(width, activation="relu")(x)
        logits = tf.squeeze(tf.keras.layers.Dense(1)(x), -1)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        optimizer = tf.compat.v1.train.AdagradOptimizer(program.learning_rate)
        train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return columns, model_fn


# The runner ---------------------------------------------------------------------------------------------------


def frameworks_of(program: str) -> tuple[str, ...]:
    """The frameworks that run `program`: the Keras programs have no TorchRec form."""
    return ("ours", "tf") if PROGRAMS[program].kind == "keras" else FRAMEWORKS


# What the Keras worker must report for each framework: the strategy's and the embedding's module prefixes.
KERAS_PATHS = {
    "ours": ("tpu_embedding_shim.tensorflow._distribute.TPUStrategy", "tpu_embedding_shim.tensorflow._midlevel"),
    "tf": ("tensorflow.python.distribute.distribute_lib._DefaultDistributionStrategy", "tensorflow.python.tpu."),
}


def python_for(framework: str) -> str:
    return TORCHREC_PYTHON if framework == "torchrec" else TF_PYTHON


def missing(framework: str) -> str | None:
    """Why `framework` can't run here, or None."""
    python = python_for(framework)
    if not Path(python).exists():
        variable = "TPU_SHIM_TORCHREC_PYTHON" if framework == "torchrec" else "TPU_SHIM_TF_PYTHON"
        return (
            f"no venv for {framework}: {python} does not exist (docs/benchmarks.md, Program level; or set {variable})"
        )
    return None


def launch(framework: str, program: str, quick_run: bool, timeout: float) -> dict:
    """One process of `framework` training `program`: its measurements, or an error."""
    env = dict(_env(), TF_CPP_MIN_LOG_LEVEL="2")
    quick_flag = ["--quick"] if quick_run else []
    if PROGRAMS[program].kind == "keras":  # the same program file, with and without the drop-in mode
        mode = ["-m", "tpu_embedding_shim.tensorflow"] if framework == "ours" else []
        cmd = [python_for(framework), *mode, "-m", "benchmarks.programs_keras", "--program", program, *quick_flag]
        return checked_path(run_worker(cmd, env, timeout), framework)
    module = "benchmarks.programs_torchrec" if framework == "torchrec" else "benchmarks.programs_tf"
    cmd = [python_for(framework), "-m", module, "--framework", framework, "--program", program, *quick_flag]
    return run_worker(cmd, env, timeout)


def checked_path(result: dict, framework: str) -> dict:
    """A Keras worker's result, or an error if its strategy or embedding is not `framework`'s."""
    strategy, embedding = KERAS_PATHS[framework]
    if "error" in result or (result["strategy"] == strategy and result["embedding"].startswith(embedding)):
        return result
    ran = f"{result['strategy']} with {result['embedding']}"
    return {"error": f"{framework} ran {ran}, not {strategy} with {embedding}"}


def rate(stamps: list[float], program: Program) -> float:
    """Examples/s over the timed window: the batches taken at steps W..W+S."""
    window = stamps[program.warmup : program.warmup + program.steps + 1]
    return program.steps * program.batch / (window[-1] - window[0])


def summarize(results: dict[tuple[str, str], list[dict]]) -> list[dict]:
    """One row per (program, framework): median examples/s over rounds, and ours over each peer."""
    rows = []
    for (program, framework), runs in results.items():
        good = [r["examples_per_s"] for r in runs if "examples_per_s" in r]
        errors = [r["error"] for r in runs if "error" in r]
        rows.append(
            {
                "program": program,
                "framework": framework,
                "rounds": len(good),
                "examples_per_s": statistics.median(good) if good else None,
                "min": min(good) if good else None,
                "max": max(good) if good else None,
                "error": errors[0] if errors else "",
                "versions": next((r.get("versions", "") for r in runs if "versions" in r), ""),
            }
        )
    ours = {r["program"]: r["examples_per_s"] for r in rows if r["framework"] == "ours"}
    for row in rows:
        base = ours.get(row["program"])
        row["ours_over_this"] = base / row["examples_per_s"] if base and row["examples_per_s"] else None
    return rows


NAMES = {"ours": "ours (TF bridge)", "tf": "TF 2.15 TPUEstimator (CPU)", "torchrec": "TorchRec + FBGEMM"}
KERAS_NAMES = {"ours": "ours (drop-in mode)", "tf": "TF 2.15 Keras + TFRS (CPU)"}


def table(rows: list[dict]) -> str:
    """The markdown table of `summarize`'s rows."""
    lines = ["| program | framework | examples/s (median) | min - max | ours / this |", "|---|---|---:|---:|---:|"]
    for r in rows:
        names = KERAS_NAMES if PROGRAMS[r["program"]].kind == "keras" else NAMES
        if r["examples_per_s"] is None:
            lines.append(f"| `{r['program']}` | {names[r['framework']]} | n/a: {r['error']} | | |")
            continue
        ratio = f"{r['ours_over_this']:.2f}x" if r["ours_over_this"] else "n/a"
        spread = f"{r['min']:,.0f} - {r['max']:,.0f}"
        lines.append(
            f"| `{r['program']}` | {names[r['framework']]} | {r['examples_per_s']:,.0f} | {spread} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks programs", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--csv", default="benchmark_programs.csv", help="where to write the rows")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    args = parser.parse_args(argv)
    programs, frameworks = args.programs.split(","), args.frameworks.split(",")
    for name in programs:
        if name not in PROGRAMS:
            parser.error(f"--programs: unknown program {name!r}; known: {', '.join(PROGRAMS)}")
    for name in frameworks:
        if name not in FRAMEWORKS:
            parser.error(f"--frameworks: unknown framework {name!r}; known: {', '.join(FRAMEWORKS)}")
    results: dict[tuple[str, str], list[dict]] = {
        (p, f): [] for p in programs for f in frameworks if f in frameworks_of(p)
    }
    started = time.monotonic()
    for round_ in range(args.rounds):
        order = frameworks if round_ % 2 == 0 else frameworks[::-1]  # interleaved, alternating who goes first
        for program in programs:
            for framework in (f for f in order if f in frameworks_of(program)):
                reason = missing(framework)
                result = {"error": reason} if reason else launch(framework, program, args.quick, args.timeout)
                results[(program, framework)].append(result)
                print(
                    f"round {round_ + 1}, {program}, {framework}: {result.get('examples_per_s', result.get('error'))}",
                    file=sys.stderr,
                )
    rows = summarize(results)
    with open(args.csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(table(rows))
    print(f"\n{args.rounds} rounds in {time.monotonic() - started:.0f} s; rows in {args.csv}")
    return 0
