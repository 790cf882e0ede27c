"""`tpu-embedding-shim ...`: the project's command line.

`movielens` is the main job: a legacy-style TPUEstimator recommender trained
on MovieLens 100K or the user's own ratings (see `tpu_embedding_shim/movielens/`);
`movielens-score` scores (user, item) pairs with the model a run exported. `demo` builds the
EmbeddingConfigSpec of TensorFlow's own documentation example, with only the
import changed, and prints the spec the engine runs.
`checkpoint list|show|convert` looks into a checkpoint (TensorFlow's or the
engine's) and converts between the two (see `checkpoint_cli.py`).
`migrate --to torchrec|keras-rs|jax|tf-midlevel` converts a model's
embeddings to another library (see `migrate_cli.py`).

Exit status: 0 done, 2 a usage error (a bad option; argparse's one line on
stderr), 1 a failure while working (data that cannot be had or read; one
line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys

from . import __version__


def demo() -> int:
    """TensorFlow's EmbeddingConfigSpec example, lowered and printed."""
    import tpu_embedding_shim as tf  # the program's own import, as TensorFlow's example writes it

    column_a = tf.feature_column.categorical_column_with_identity("a", num_buckets=100)
    column_b = tf.feature_column.categorical_column_with_identity("b", num_buckets=100)
    column_c = tf.feature_column.categorical_column_with_identity("c", num_buckets=50)
    tpu_shared_columns = tf.tpu.experimental.shared_embedding_columns([column_a, column_b], 10)
    tpu_non_shared_column = tf.tpu.experimental.embedding_column(column_c, 10)
    tpu_columns = [tpu_non_shared_column] + tpu_shared_columns
    # `tf.estimator` is TensorFlow's namespace at run time (the package keeps it so); mypy, which sees the runner
    # package `tpu_embedding_shim.runner` imported (through `migrate`), takes the name for that package.
    config = tf.estimator.tpu.experimental.EmbeddingConfigSpec(  # type: ignore[attr-defined]
        feature_columns=tpu_columns,
        optimization_parameters=tf.estimator.tpu.experimental.AdagradParameters(0.1),  # type: ignore[attr-defined]
    )
    spec = config.to_spec()
    print("EmbeddingConfigSpec from TensorFlow's documentation example, lowered to the engine's spec:")
    print(f"  optimizer: {spec.optimizer}")
    print(
        f"  partition_strategy={spec.partition_strategy!r} num_shards={spec.num_shards} "
        f"pipelining={spec.pipeline_execution_with_tensor_core}"
    )
    for table in spec.tables:
        users = ", ".join(f.name for f in spec.features_of(table.name))
        print(
            f"  table {table.name}: {table.vocabulary_size} x {table.dim}, combiner={table.combiner}, features: {users}"
        )
    print(f"  fingerprint: {spec.fingerprint()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tpu-embedding-shim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "demo",
        help="build TensorFlow's EmbeddingConfigSpec example and print its spec",
        description="Build the EmbeddingConfigSpec of TensorFlow's documentation example (two shared columns and "
        "one column of their own, Adagrad), with `import tpu_embedding_shim as tf` as the only change, and print "
        "the engine's spec it lowers to: tables, shards, optimizer and fingerprint.",
    )
    job = commands.add_parser(
        "movielens",
        help="train the MovieLens 100K recommender (the main job)",
        description="Train a legacy-style TPUEstimator recommender on MovieLens 100K (or on your own ratings, "
        "--ratings), evaluate it each epoch, and write a checkpoint, an export, results.json and training.png. "
        "Exit status: 2 for a bad option, 1 when the data cannot be had or read.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    job.add_argument(
        "--output-dir",
        default="movielens_output",
        help="checkpoints, export, plot, results.json (a rerun replaces the job's own outputs)",
    )
    job.add_argument("--epochs", type=int, default=5, help="passes over the training ratings (>= 1)")
    job.add_argument("--batch-size", type=int, default=256, help="training examples per step (>= 1)")
    job.add_argument(
        "--max-examples",
        type=int,
        default=argparse.SUPPRESS,
        help="train on about the first N ratings only, whole users (>= 1) (default: every rating)",
    )
    data = job.add_mutually_exclusive_group()
    data.add_argument(
        "--wheel",
        default=argparse.SUPPRESS,
        help="a local recbole-1.2.1-py3-none-any.whl holding MovieLens 100K "
        "(default: downloaded once with pip into $TPU_EMBEDDING_SHIM_CACHE or ~/.cache/tpu-embedding-shim)",
    )
    data.add_argument(
        "--ratings",
        metavar="CSV",
        default=argparse.SUPPRESS,
        help="train on your own ratings instead: a CSV file with the header user_id,item_id,rating[,timestamp] "
        "(docs/movielens.md) (default: MovieLens 100K)",
    )
    job.add_argument(
        "--partition-strategy",
        choices=["div", "mod"],
        default="div",
        help="how each table is split into shards (the numbers are the same either way)",
    )
    job.add_argument("--num-shards", type=int, default=2, help="shards per table, as TPU cores (>= 1)")
    job.add_argument("--pipelining", action="store_true", help="pipeline_execution_with_tensor_core=True")
    job.add_argument("--no-plot", action="store_true", help="do not draw training.png")
    job.add_argument(
        "--dense",
        choices=["numpy", "tf"],
        default="numpy",
        help="the model's dense part: the numpy MLP, or the same model as a TensorFlow model_fn (needs TensorFlow)",
    )
    score = commands.add_parser(
        "movielens-score",
        help="score (user, item) pairs with the model a movielens run exported",
        description="Score (user, item) pairs with the export a `movielens` run wrote: the probability that the "
        "user rates the item >= 4. Prints CSV user_id,item_id,probability. "
        "Exit status: 2 for a bad option, 1 when the run or the pairs cannot be read.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    score.add_argument("pairs", metavar="PAIRS.csv", help="a CSV file whose header starts user_id,item_id")
    score.add_argument("--output-dir", default="movielens_output", help="the directory the movielens run wrote")
    score.add_argument("--output", default="-", help="where the scores go (-: standard output)")
    from . import checkpoint_cli  # its commands' modules load only when one runs, so --help stays fast

    checkpoint_cli.add_parser(commands)
    from . import migrate_cli

    migrate_cli.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo()
    if args.command == "checkpoint":
        return checkpoint_cli.run(args)
    if args.command == "migrate":
        return migrate_cli.run(args)
    if args.command == "movielens":
        return movielens(args, job)
    if args.command == "movielens-score":
        return movielens_score(args)
    return 2  # pragma: no cover  (argparse rejects unknown commands)


def movielens(args: argparse.Namespace, job: argparse.ArgumentParser) -> int:
    """Runs the job: options checked first (exit 2), then data and training (exit 1 for data it cannot use)."""
    import logging

    from .movielens.data import DataError
    from .movielens.job import JobConfig, check_output_dir, run, tf_model_module

    options = {f.name for f in dataclasses.fields(JobConfig)}  # each option is the field of its name
    try:
        config = JobConfig(plot=not args.no_plot, **{k: v for k, v in vars(args).items() if k in options})
    except ValueError as error:
        job.error(re.sub(r"Option `(\w+)`", lambda m: f"`--{m.group(1).replace('_', '-')}`", str(error)))
    for option, path in (("--wheel", config.wheel), ("--ratings", config.ratings)):
        if path is not None and not os.path.isfile(path):
            job.error(f"{option} {path!r}: no such file.")
    try:
        check_output_dir(config.output_dir)
    except FileExistsError as error:
        job.error(str(error))
    if config.dense == "tf":
        try:
            tf_model_module()
        except ImportError as error:
            job.error(str(error))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        run(config)
    except DataError as error:
        print(f"tpu-embedding-shim movielens: error: {error}", file=sys.stderr)
        return 1
    return 0


def movielens_score(args: argparse.Namespace) -> int:
    """Scores the pairs with the run's export; one line on stderr and exit 1 for what it cannot read."""
    from .movielens.data import DataError
    from .movielens.score import ScoreError, Scorer, read_pairs

    try:
        users, items = read_pairs(args.pairs)
        probabilities = Scorer(args.output_dir).score(users, items)
    except (ScoreError, DataError) as error:
        print(f"tpu-embedding-shim movielens-score: error: {error}", file=sys.stderr)
        return 1
    lines = ["user_id,item_id,probability"]
    lines += [f"{u},{i},{p:.6f}" for u, i, p in zip(users, items, probabilities)]
    if args.output == "-":
        print("\n".join(lines))
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
