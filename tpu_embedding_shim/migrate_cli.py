"""`tpu-embedding-shim migrate --to TARGET MODULE:OBJECT [--checkpoint PATH] --out DIR`.

Converts a model's embeddings (an EmbeddingConfigSpec or EmbeddingSpec,
named as `MODULE:OBJECT`; a function is called with no arguments) to
TorchRec, keras-rs, jax-tpu-embedding or TensorFlow's mid-level API, and
writes into DIR the generated code (`model.py`), the converted weights and
the report (`report.md`); see `tpu_embedding_shim.migrate` and
docs/migrate.md. An option with no equivalent in the target stops the
conversion (exit status 1, the options listed, nothing written) unless
`--allow-lossy` is given; then the report lists what will differ. A
missing or bad checkpoint, a MODULE:OBJECT that cannot be imported or is
not a config, or an --out that cannot be written exits with status 1 and
one line; a malformed command line (a bad option value) exits with status 2.
`migrate` never overwrites a file it did not write: when DIR already holds
one of its names it stops (status 1); `--force` replaces only the output
of an earlier migration there.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

__all__ = ["add_parser", "run"]

TARGETS = ("torchrec", "keras-rs", "jax", "tf-midlevel")  # tpu_embedding_shim.migrate.TARGETS, without importing it
PROG = "tpu-embedding-shim migrate"


def _reference(text: str) -> str:
    module, sep, name = text.partition(":")
    if not sep or not module or not name:
        raise argparse.ArgumentTypeError(
            f"expected MODULE:OBJECT (e.g. tpu_embedding_shim.movielens.job:embedding_config_spec), got {text!r}"
        )
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {text!r}")
    return value


def _directory(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must name a directory (made if missing), got ''")
    return text


def _checkpoint(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must name a checkpoint (a model_dir, a prefix or ckpt-<step>), got ''")
    return text


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an int from 0 to 2**63 - 1, got {text!r}")
    return value


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
        type=_reference,
        help="an EmbeddingConfigSpec or EmbeddingSpec (or a function returning one), imported from the current "
        "directory, e.g. tpu_embedding_shim.movielens.job:embedding_config_spec",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="PATH",
        type=_checkpoint,
        help="the weights: a TPUEstimator model_dir or checkpoint prefix (TensorFlow's or this project's), or an "
        "engine checkpoint, or a SparseCore checkpoint (TPUEmbeddingV2's stacked tables); omitted: fresh values "
        "drawn by each table's initializer (see --seed)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        required=True,
        type=_directory,
        help="the directory to write model.py, the weights and report.md into",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace the output of an earlier migration in DIR (never files it did not write)",
    )
    parser.add_argument(
        "--allow-lossy",
        action="store_true",
        help="convert even when some options have no equivalent (the report lists what will differ)",
    )
    parser.add_argument(
        "--batch-size",
        metavar="N",
        type=_positive,
        help="the global batch size, for the targets whose configs carry it (keras-rs, jax); omitted: their "
        "feature shapes leave the batch open and model.py has a GLOBAL_BATCH_SIZE to set",
    )
    parser.add_argument(
        "--seed",
        metavar="N",
        type=_seed,
        default=0,
        help="seeds the fresh tables when there is no --checkpoint (default 0)",
    )


def _fail(message: str) -> int:
    sys.stdout.flush()
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 1


def _check_out(out: str) -> str | None:
    """Why `out` cannot be the output directory, or None."""
    if os.path.isdir(out):
        return None if os.access(out, os.W_OK | os.X_OK) else f"--out {out!r}: the directory is not writable"
    if os.path.lexists(out):
        return f"--out {out!r} is a file; --out is a directory (made if missing)"
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"--out {out!r}: {parent!r} is a file, so the directory cannot be made"
    return None


def run(args: argparse.Namespace) -> int:
    """Runs a parsed `migrate` command: its exit status (1 and the reason on stderr when it fails)."""
    from .checkpoint_cli import checkpoint_subdirectories
    from .migrate import LossyMigrationError, ProgressLine, migrate, resolve_object

    problem = _check_out(args.out)
    if problem is not None:
        return _fail(problem)
    if os.getcwd() not in sys.path:  # MODULE is found from the current directory, as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    try:
        config = resolve_object(args.object)
    except ImportError as error:
        return _fail(f"MODULE:OBJECT {args.object!r}: {error} (MODULE is imported from the current directory)")
    except ValueError as error:  # no such object: the message names the reference
        return _fail(str(error))
    except Exception as error:  # the user's module raised while importing, or its function while building the config
        return _fail(f"MODULE:OBJECT {args.object!r}: {type(error).__name__}: {error}")
    progress = ProgressLine("migrate")
    try:
        migration = migrate(
            args.to,
            config,
            args.checkpoint,
            allow_lossy=args.allow_lossy,
            seed=args.seed,
            batch_size=args.batch_size,
            progress=progress,
        )
        paths = migration.write(args.out, progress=progress, force=args.force)
    except LossyMigrationError as error:
        progress.close()
        return _fail(error.explain("add --allow-lossy"))
    except TypeError as error:  # not a config
        progress.close()
        return _fail(f"MODULE:OBJECT {args.object!r}: {error}")
    except (ValueError, OSError) as error:  # NotFoundError / CheckpointError / DataLossError: they name the file
        progress.close()
        below = checkpoint_subdirectories(args.checkpoint) if args.checkpoint and os.path.isdir(args.checkpoint) else []
        if isinstance(error, FileNotFoundError) and len(below) == 1:
            return _fail(f"{_one_line(error)} Its subdirectory {below[0]!r} holds one; run: {_command(args, below[0])}")
        return _fail(_one_line(error))
    progress.close()
    report = migration.report
    counts = ", ".join(f"{len(report.with_status(s))} {s}" for s in ("exact", "converted", "impossible"))
    print(f"Migrated to {report.target}: {len(report.rows)} options ({counts}).")
    if migration.missing:
        print(migration.missing)
    for path in paths:
        print(f"  wrote {_described(path)}")
    return 0


def _command(args: argparse.Namespace, checkpoint: str) -> str:
    """The command line `args` stand for, with `checkpoint` as --checkpoint."""
    argv = ["--to", args.to, args.object, "--checkpoint", checkpoint, "--out", args.out]
    argv += ["--allow-lossy"] * args.allow_lossy
    argv += ["--force"] * args.force
    argv += ["--batch-size", str(args.batch_size)] * (args.batch_size is not None)
    argv += ["--seed", str(args.seed)] * (args.seed != 0)
    return " ".join([PROG, *map(shlex.quote, argv)])


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split("\n"))


def _described(path: str) -> str:
    """A path written, and for a directory the files in it."""
    if not os.path.isdir(path):
        return path
    return f"{os.path.join(path, '')} ({', '.join(sorted(os.listdir(path)))})"
