"""`tpu-embedding-shim migrate --to TARGET MODULE:OBJECT [--checkpoint PATH] --out DIR`.

Converts a model's embeddings (an EmbeddingConfigSpec or EmbeddingSpec,
named as `MODULE:OBJECT`; a function is called with no arguments) to
TorchRec, keras-rs, jax-tpu-embedding or TensorFlow's mid-level API, and
writes into DIR the generated code (`model.py`), the converted weights and
the report (`report.md`); see `tpu_embedding_shim.migrate` and
docs/migrate.md. An option with no equivalent in the target stops the
conversion (exit status 1, the options listed, nothing written) unless
`--allow-lossy` is given; then the report lists what will differ. A bad
checkpoint or object also exits with status 1 and one message; usage
errors exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_parser", "run"]

TARGETS = ("torchrec", "keras-rs", "jax", "tf-midlevel")  # tpu_embedding_shim.migrate.TARGETS, without importing it


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "migrate",
        help="convert a model's embeddings to TorchRec, keras-rs, JAX or TF's mid-level API",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument("--to", required=True, choices=TARGETS, help="the target library")
    parser.add_argument(
        "object",
        metavar="MODULE:OBJECT",
        help="an EmbeddingConfigSpec or EmbeddingSpec (or a "
        "function returning one), e.g. tpu_embedding_shim.movielens.job:embedding_config_spec",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="the weights: a TPUEstimator model_dir or checkpoint "
        "(TensorFlow's or this project's), or an engine checkpoint; none: fresh initial values",
    )
    parser.add_argument("--out", required=True, help="the directory to write model.py, the weights and report.md into")
    parser.add_argument(
        "--allow-lossy",
        action="store_true",
        help="convert even when some options have no equivalent (the report lists what will differ)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="the global batch size, for the targets whose configs carry it (keras-rs, jax)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds fresh tables when there is no --checkpoint")


def run(args: argparse.Namespace) -> int:
    from .migrate import LossyMigrationError, migrate, resolve_object

    if os.getcwd() not in sys.path:  # MODULE is found from the current directory, as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    try:
        config = resolve_object(args.object)
        migration = migrate(
            args.to, config, args.checkpoint, allow_lossy=args.allow_lossy, seed=args.seed, batch_size=args.batch_size
        )
        paths = migration.write(args.out)
    except LossyMigrationError as error:
        print(f"tpu-embedding-shim migrate: {error}", file=sys.stderr)
        return 1
    except (ImportError, ValueError, TypeError, OSError) as error:  # NotFoundError / CheckpointError among them
        print(f"tpu-embedding-shim migrate: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    report = migration.report
    counts = ", ".join(f"{len(report.with_status(s))} {s}" for s in ("exact", "converted", "impossible"))
    print(f"Migrated to {report.target}: {len(report.rows)} options ({counts}).")
    if migration.missing:
        print(migration.missing)
    for path in paths:
        print(f"  wrote {path}")
    return 0
