"""`tpu-embedding-shim checkpoint list|show|convert`: look into checkpoints and move them between formats.

Every command takes a TensorFlow checkpoint (a prefix such as
`run/model.ckpt-100`, or a directory: the latest checkpoint its `checkpoint`
state file names) or an engine checkpoint (a `ckpt-<step>` directory, or a
directory of them: the latest), whoever wrote it:

- `list PATH` prints every tensor: name, dtype (as stored), shape. It reads
  the index (or manifest) only; `--verify` also reads every tensor and
  checks its CRC-32C (sha256 for the engine format);
- `show PATH NAME` prints one tensor: dtype, shape, min / max / mean / std
  (over the finite values; NaN and inf are counted) and its first rows
  (`--rows`, from row `--start`); strings as Python bytes literals, cut
  short when long;
- `convert SRC DST` writes an engine checkpoint as a TensorFlow checkpoint
  (keys `<table>`, `<table>/<slot>`, `global_step` as int64; DST is a prefix,
  or a directory that gets `model.ckpt-<step>`; the `checkpoint` state file
  names it as the latest), and a TensorFlow checkpoint whose keys have that
  form back as an engine checkpoint (`DST/ckpt-<step>`); so is a SparseCore
  checkpoint (a TPUEmbeddingV2's stacked tables with their layouts,
  `checkpoints/sparsecore.py`), its tables unstacked.

A bad checkpoint (missing, truncated or corrupt file, CRC mismatch, a dtype
this reader does not read) or a bad argument prints one line naming the
file and the tensor and exits with status 1; nothing is written (both
writers write under temporary names and rename at the end, after every
tensor of the source has been read and checked). Usage errors exit with
status 2.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

import numpy as np

from .api.checkpoint_reader import latest_checkpoint, load_checkpoint
from .api.engine_checkpoint_reader import GLOBAL_STEP, EngineCheckpoint
from .checkpoints.program_checkpoint import METADATA
from .checkpoints.sparsecore import find_sparsecore, tables_of
from .engine import EMBEDDING, CheckpointError
from .engine import checkpoint as engine_checkpoint
from .engine.tf_bundle import BundleReader, data_files, index_file, index_suffix_hint, is_bundle, write_bundle
from .progress import ProgressLine
from .spec.optimizers import OPTIMIZER_SPECS

__all__ = [
    "add_parser",
    "run",
    "open_checkpoint",
    "list_tensors",
    "show_tensor",
    "convert",
    "engine_slot_names",
    "split_engine_names",
]

_STAT_BLOCK = 1 << 22  # elements per block when computing a tensor's statistics
_MAX_PROBLEMS = 20  # unfit tensors named in a convert error
_STRING_CHARS = 70  # characters of a string element shown


def engine_slot_names() -> list[str]:
    """Every slot name an engine optimizer has (`accumulators`, `momenta`, ...)."""
    return sorted({name for spec in OPTIMIZER_SPECS.values() for name in spec(learning_rate=0.1).slot_initial_values()})


def _display(name: str) -> str:
    """A tensor name as printed: itself, or its repr when it holds control or undecodable characters."""
    return name if name.isprintable() else repr(name)


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


class NoCheckpointError(CheckpointError):
    """A path that holds no checkpoint; `below` lists its subdirectories that do (the command to run with one)."""

    def __init__(self, message: str, below: list[str] | None = None):
        super().__init__(message)
        self.below = below or []


def checkpoint_subdirectories(directory: str) -> list[str]:
    """The subdirectories of `directory` (one level down) that hold a checkpoint: a TensorFlow `checkpoint`
    state file, or engine checkpoints (`ckpt-<step>`)."""
    try:
        entries = sorted((e for e in os.scandir(directory) if e.is_dir() and not e.name.startswith(".")), key=_name)
    except OSError:
        return []
    return [
        entry.path
        for entry in entries
        if os.path.isfile(os.path.join(entry.path, "checkpoint"))
        or engine_checkpoint.latest_checkpoint(entry.path) is not None
    ]


def _name(entry: os.DirEntry) -> str:
    return entry.name


def _check_path(path: str) -> None:
    """Raises NoCheckpointError (one line, saying what to pass instead) when `path` cannot name a checkpoint."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, engine_checkpoint.MANIFEST)) or latest_checkpoint(path):
            return  # a checkpoint (load_checkpoint says what it is), or a directory of them
        below = checkpoint_subdirectories(path)
        if below:
            found = ", ".join(map(repr, below))
            which = f"its subdirectory {found} does" if len(below) == 1 else f"its subdirectories {found} do"
            raise NoCheckpointError(f"{path!r} holds no checkpoint, but {which}", below)
        raise NoCheckpointError(
            f"{path!r} holds no checkpoint: no 'checkpoint' state file naming one, no engine checkpoint "
            "(ckpt-<step>), in it or in its subdirectories"
        )
    if is_bundle(path):
        return
    if os.path.isfile(path):
        directory, name = os.path.split(path)
        if name == "checkpoint":
            hint = f"the state file of a checkpoint directory: pass the directory, {directory or os.curdir!r}"
        elif index_suffix_hint(path) or ".data-" in name:
            hint = f"one file of a checkpoint: pass its prefix, {path.rpartition('.')[0]!r}"
        else:
            hint = "not a checkpoint: pass a directory or a checkpoint prefix such as run/model.ckpt-100"
        raise NoCheckpointError(f"{path!r} is a file, {hint}")
    if not os.path.lexists(path):
        raise NoCheckpointError(
            f"{path!r} does not exist (nor {index_file(path)!r}): pass a directory or a checkpoint prefix such as "
            "run/model.ckpt-100"
        )


def open_checkpoint(path: str) -> Any:
    """The checkpoint at `path` (either format; a directory means its latest): a `BundleReader` or an
    `EngineCheckpoint`, both with `names`, `dtype_name`, `shape` and `read(name, mmap=...)`.

    Raises NoCheckpointError when `path` names none (saying what to pass instead).
    """
    _check_path(path)
    reader = load_checkpoint(path)
    return EngineCheckpoint(reader.prefix) if reader.format == "engine" else BundleReader(reader.prefix)


def _is_engine(source: Any) -> bool:
    return isinstance(source, EngineCheckpoint)


def _describe(source: Any) -> str:
    if _is_engine(source):
        return f"{source.path}: engine checkpoint, step {source.step}"
    return f"{source.prefix}: TensorFlow checkpoint"


# list -------------------------------------------------------------------------------------------


def list_tensors(path: str, *, verify: bool = False) -> int:
    """Prints name, dtype and shape of every tensor of the checkpoint at `path`; returns the exit status."""
    source = open_checkpoint(path)
    names = sorted(source.names())
    rows = [(_display(n), source.dtype_name(n), _shape(source.shape(n))) for n in names]
    print(f"{_describe(source)}, {len(names)} tensors")
    width_name = max([4] + [len(r[0]) for r in rows])
    width_dtype = max([5] + [len(r[1]) for r in rows])
    print(f"{'name':<{width_name}}  {'dtype':<{width_dtype}}  shape")
    for name, dtype, shape in rows:
        print(f"{name:<{width_name}}  {dtype:<{width_dtype}}  {shape}")
    if verify:
        for name in names:
            source.read(name, mmap=True)  # raises, naming the file and the tensor
        print(f"verified: every tensor's {'sha256' if _is_engine(source) else 'CRC-32C'} matches")
    return 0


# show -------------------------------------------------------------------------------------------


def show_tensor(path: str, name: str, *, rows: int = 5, start: int = 0) -> int:
    """Prints a summary of tensor `name` of the checkpoint at `path`; returns the exit status."""
    source = open_checkpoint(path)
    if name not in source and name.endswith(":0") and name[:-2] in source:
        name = name[:-2]
    if name not in source:
        near = [n for n in sorted(source.names()) if name.lower() in n.lower()][:10]
        hint = f" Names containing it: {', '.join(map(repr, near))}." if near else " `list` prints every name."
        raise CheckpointError(f"{_describe(source)}: no tensor {name!r}.{hint}")
    value = source.read(name, mmap=True)
    stored = source.dtype_name(name)
    print(f"tensor: {_display(name)}")
    print(f"checkpoint: {_describe(source)}")
    print(f"dtype: {stored}" + (" (read as float32)" if stored == "bfloat16" else ""))
    print(f"shape: {_shape(value.shape)}")
    if value.size == 0:
        print("(empty)")
        return 0
    if value.dtype == object:
        _show_strings(value, rows, start)
        return 0
    if value.ndim == 0:
        print(f"value: {value[()].item()!r}")
        return 0
    for line in _statistics(value):
        print(line)
    first, last = min(start, value.shape[0]), min(start + rows, value.shape[0])
    if first == last:
        print(f"no rows from row {start}: the tensor has {value.shape[0]}")
        return 0
    if value.ndim == 1:
        print(f"values {first}-{last - 1} of {value.shape[0]}: {_array(value[first:last])}")
        return 0
    print(f"rows {first}-{last - 1} of {value.shape[0]}:")
    width = len(str(last - 1))
    for i in range(first, last):
        text = _array(value[i]).replace("\n", "\n  " + " " * (width + 2))
        print(f"  {i:>{width}}: {text}")
    return 0


def _array(values: np.ndarray) -> str:
    return np.array2string(np.asarray(values), precision=6, threshold=12, edgeitems=3, max_line_width=110)


def _statistics(value: np.ndarray) -> list[str]:
    """min / max / mean / std over the finite values, computed block by block (no copy of a large tensor)."""
    flat = value.reshape(-1)
    if value.dtype.kind == "b":
        true = int(np.count_nonzero(flat))
        return [f"true: {true} of {flat.size}"]
    if value.dtype.kind == "c":
        return [f"mean: {complex(flat.mean(dtype=np.complex128))}"]
    count, mean, m2 = 0, 0.0, 0.0
    low, high = None, None
    nan = inf = 0
    for begin in range(0, flat.size, _STAT_BLOCK):
        block = np.asarray(flat[begin : begin + _STAT_BLOCK])
        if block.dtype.kind == "f":
            finite = np.isfinite(block)
            if not finite.all():
                nan += int(np.isnan(block).sum())
                inf += int(np.isinf(block).sum())
                block = block[finite]
        if block.size == 0:
            continue
        block = block.astype(np.float64)
        n, block_mean = block.size, float(block.mean())
        block_m2 = float(((block - block_mean) ** 2).sum())
        delta = block_mean - mean
        total = count + n
        mean += delta * n / total
        m2 += block_m2 + delta * delta * count * n / total
        count = total
        low = float(block.min()) if low is None else min(low, float(block.min()))
        high = float(block.max()) if high is None else max(high, float(block.max()))
    lines = []
    if count:
        as_int = value.dtype.kind in "iu"
        fmt = (lambda x: str(int(x))) if as_int else (lambda x: f"{x:.6g}")
        lines.append(f"min: {fmt(low)}  max: {fmt(high)}  mean: {mean:.6g}  std: {(m2 / count) ** 0.5:.6g}")
    if nan or inf:
        lines.append(f"non-finite: {nan} NaN, {inf} inf (left out of the statistics)")
    return lines


def _show_strings(value: np.ndarray, rows: int, start: int) -> None:
    flat = value.reshape(-1)
    lengths = [len(item) for item in flat]
    if flat.size == 1:
        print(f"length: {lengths[0]} bytes")
    else:
        print(f"lengths: {min(lengths)}-{max(lengths)} bytes, {sum(lengths)} in all")
    first, last = min(start, flat.size), min(start + rows, flat.size)
    if first == last:
        print(f"no elements from element {start}: the tensor has {flat.size}")
        return
    print(f"elements {first}-{last - 1} of {flat.size}:")
    for i in range(first, last):
        item = bytes(flat[i])
        text = repr(item)
        if len(text) > _STRING_CHARS:
            cut = _STRING_CHARS // 4
            while len(repr(item[: cut + 1])) <= _STRING_CHARS:
                cut += 1
            text = f"{item[:cut]!r}... ({len(item)} bytes)"
        print(f"  {i}: {text}")


# convert ----------------------------------------------------------------------------------------


def split_engine_names(source: Any) -> tuple[dict[str, dict[str, str]], str | None, list[tuple[str, str, str]]]:
    """How the tensors of a TensorFlow checkpoint map onto an engine checkpoint.

    Returns:
      (tables, step_name, problems): table -> {engine slot ('embedding' for
      the table itself) -> tensor name}; the name of the global step tensor
      or None; (name, 'dtype [shape]', why) of each tensor that does not
      fit. The checkpoint fits when `problems` is empty and there is a table.
    """
    slots = engine_slot_names()
    names = set(source.names())
    tables: dict[str, dict[str, str]] = {}
    problems: list[tuple[str, str, str]] = []
    step_name = None

    def unfit(name: str, why: str) -> None:
        problems.append((_display(name), f"{source.dtype_name(name)} {_shape(source.shape(name))}", why))

    for name in sorted(names):
        dtype, shape = source.dtype_name(name), source.shape(name)
        parent, _, leaf = name.rpartition("/")
        if name == GLOBAL_STEP:
            if dtype not in ("int64", "int32") or shape != ():
                unfit(name, "the global step must be an int64 (or int32) scalar")
            else:
                step_name = name
        elif parent in names and parent != GLOBAL_STEP:
            if leaf not in slots:
                unfit(
                    name,
                    f"not an engine slot name ({', '.join(slots)}); TensorFlow names its slots after the "
                    "optimizer (/Adagrad, /Adam/m, ...)",
                )
            else:
                tables.setdefault(parent, {})[leaf] = name
        elif len(shape) != 2 or not _numeric(source, name):
            unfit(name, "not a [vocabulary_size, dim] table of numbers")
        else:
            tables.setdefault(name, {})[EMBEDDING] = name
    for table in sorted(tables):
        arrays = tables[table]
        if EMBEDDING not in arrays:  # its parent did not fit as a table: its slots can't either
            for slot_name in arrays.values():
                unfit(slot_name, f"a slot of {_display(table)}, which is not a table")
            del tables[table]
            continue
        rows = source.shape(arrays[EMBEDDING])[0]
        for slot, slot_name in sorted(arrays.items()):
            shape = source.shape(slot_name)
            if slot != EMBEDDING and (len(shape) < 1 or shape[0] != rows or not _numeric(source, slot_name)):
                unfit(slot_name, f"a slot must be numbers with the table's {rows} rows")
                del arrays[slot]
    return tables, step_name, problems


def _numeric(source: Any, name: str) -> bool:
    """True for an int, uint or float tensor this reader reads (bfloat16 included)."""
    try:
        return source.dtype(name).kind in "iuf"
    except CheckpointError:  # a dtype this reader does not read
        return False


def convert(src: str, dst: str, *, progress: ProgressLine | None = None) -> int:
    """Converts the checkpoint at `src` to the other format at `dst`; returns the exit status.

    Prints what it wrote: the checkpoint and its files. `progress` shows each
    tensor read (default: a progress line on a terminal, after 2 seconds).
    """
    line = progress or ProgressLine("checkpoint convert")
    source = open_checkpoint(src)
    try:
        if _is_engine(source):
            path = _engine_to_tensorflow(source, dst, line)
        else:
            path = _tensorflow_to_engine(source, dst, src, line)
    finally:
        line.close()
    print(f"wrote {_written(path, engine=not _is_engine(source))}")
    return 0


def _written(path: str, *, engine: bool) -> str:
    """The checkpoint written at `path`, and its files."""
    if engine:
        arrays = sum(name.endswith(".npy") for name in os.listdir(path))
        return f"{path} (an engine checkpoint: {engine_checkpoint.MANIFEST} and {arrays} .npy files)"
    directory = os.path.dirname(path)
    files = [os.path.basename(index_file(path))] + [os.path.basename(f) for f in data_files(path)]
    return f"{path} ({', '.join(files)}; the state file {os.path.join(directory, 'checkpoint')} names it)"


_TF_SLOTS = ("Adagrad", "Adam", "Adam_1", "Ftrl", "Ftrl_1", "Momentum", "RMSProp", "RMSProp_1", "ProximalAdagrad")
"""The last part of a slot's name in a TPUEstimator checkpoint (TPU's and the CPU optimizers' names)."""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _tf_slot_table(name: str) -> str | None:
    """The table a TPUEstimator slot belongs to (`t` for `t/Adagrad`, `t/Adam/m`), or None for another name."""
    parent, _, leaf = name.rpartition("/")
    if leaf in _TF_SLOTS:
        return parent
    if leaf in ("m", "v") and parent.endswith("/Adam"):
        return parent[: -len("/Adam")]
    return None


def _not_convertible(source: BundleReader, src: str, problems: list[tuple[str, str, str]]) -> str:
    """Why `source` does not convert, and what to do instead: a TPUEstimator checkpoint in two lines, else the
    unfit tensors grouped by reason."""
    names = set(source.names())
    slots = {n: table for n in names if (table := _tf_slot_table(n)) is not None and table in names}
    tables = set(slots.values()) | {n for n in names if n.endswith("/embedding_weights")}
    if METADATA in names or tables:
        dense = sorted(names - tables - set(slots) - {METADATA, GLOBAL_STEP})
        shown = ", ".join(dense[:4]) + (", ..." if len(dense) > 4 else "")
        parts = [f"{_count(len(tables), 'embedding table')} under TensorFlow's variable names"]
        if slots:
            kinds = sorted({n[len(table) + 1 :] for n, table in slots.items()})
            parts[0] += f" with their optimizer slots (/{', /'.join(kinds)})"
        if dense:
            what = "the dense model's state" if METADATA in names else "the model's other variables"
            parts.append(f"{_count(len(dense), 'other tensor')}, {what} ({shown})")
        return (
            f"{source.prefix} is a TPUEstimator checkpoint: {' and '.join(parts)}. `convert` takes the form it "
            "writes (`<table>`, `<table>/<slot>`, `global_step`), and TensorFlow and the TPUEstimator runner read "
            "this one as it is.\nTo move its tables and optimizer state to another library, run: "
            f"tpu-embedding-shim migrate --to {{torchrec,keras-rs,jax,tf-midlevel}} MODULE:OBJECT --checkpoint "
            f"{shlex.quote(src)} --out DIR, MODULE:OBJECT naming the program's EmbeddingConfigSpec (for the "
            "MovieLens job: tpu_embedding_shim.movielens.job:embedding_config_spec); see docs/migrate.md."
        )
    by_reason: dict[str, list[str]] = {}
    for name, detail, why in problems:
        by_reason.setdefault(why, []).append(f"{name} ({detail})")
    lines, shown_count = [], 0
    for why, listed in by_reason.items():
        room = max(_MAX_PROBLEMS - shown_count, 1)
        more = f", ... and {len(listed) - room} more" if len(listed) > room else ""
        lines.append(f"\n  - {why}: {', '.join(listed[:room])}{more}")
        shown_count += min(len(listed), room)
    found = "".join(lines) if lines else " no tensors besides global_step"
    return (
        f"{source.prefix}: not convertible to an engine checkpoint: its tensors must be `<table>` "
        f"([vocabulary_size, dim]), `<table>/<slot>` (slot one of {', '.join(engine_slot_names())}) and "
        f"`global_step`. These do not fit:{found}"
    )


def _nbytes(source: Any, name: str) -> int:
    """About how many bytes tensor `name` holds (for the time left)."""
    try:
        return int(np.prod(source.shape(name), dtype=np.int64)) * source.dtype(name).itemsize
    except (CheckpointError, TypeError):
        return 1


def _engine_to_tensorflow(source: EngineCheckpoint, dst: str, progress: ProgressLine) -> str:
    prefix = dst
    if os.path.isdir(dst) or dst.endswith(os.sep) or (os.altsep and dst.endswith(os.altsep)):
        prefix = os.path.join(dst, f"model.ckpt-{source.step}")
    if os.path.lexists(index_file(prefix)) or data_files(prefix):
        raise CheckpointError(
            f"{prefix!r} already holds a TensorFlow checkpoint; remove it or choose another "
            "destination (convert never overwrites)."
        )
    names = source.names()
    tensors = {
        name: source.read(name, mmap=True)  # all read and checked first
        for name in progress.items("reading and checking tensor", [(n, _nbytes(source, n)) for n in names])
    }
    progress.status(f"writing {prefix}")
    try:
        write_bundle(prefix, tensors, update_state=True)
    except TypeError as error:  # a dtype TensorFlow has no code for (float128, ...)
        raise CheckpointError(f"{source.path}: {error}") from None
    tables = {source.table_and_slot(name)[0] for name in source.names() if name != GLOBAL_STEP}
    nested = sorted(table for table in tables if table.rpartition("/")[0] in tables)
    if nested:
        print(
            f"note: tables {', '.join(map(repr, nested))} are named after another table plus '/<name>': "
            "converting this checkpoint back reads them as that table's slots (or refuses them)",
            file=sys.stderr,
        )
    extra = source.manifest.get("extra") or {}
    if extra:
        print(
            f"note: not converted: the manifest's `extra` ({', '.join(sorted(extra))}), which TensorFlow's "
            "format has no place for",
            file=sys.stderr,
        )
    return prefix


def _tensorflow_to_engine(source: BundleReader, dst: str, src: str, progress: ProgressLine) -> str:
    sparsecore = find_sparsecore(source)
    if sparsecore:
        return _sparsecore_to_engine(source, dst, sparsecore, progress)
    tables, step_name, problems = split_engine_names(source)
    if problems or not tables:
        raise CheckpointError(_not_convertible(source, src, problems))
    step = 0
    if step_name is not None:
        step = int(source.read(step_name))
        if step < 0:
            raise CheckpointError(f"{source.prefix}: tensor {step_name!r} is {step}; a step must be >= 0.")
    else:
        print("note: no global_step in the checkpoint: the engine checkpoint gets step 0", file=sys.stderr)
    _check_destination(dst, step)
    state: dict[str, dict[str, np.ndarray]] = {table: {} for table in tables}
    items = [(table, slot, name) for table, arrays in tables.items() for slot, name in arrays.items()]
    sizes = {name: _nbytes(source, name) for _, _, name in items}
    for name in progress.items("reading and checking tensor", [(name, sizes[name]) for _, _, name in items]):
        table, slot, _ = next(item for item in items if item[2] == name)
        state[table][slot] = source.read(name, mmap=True)  # all read and checked first
    return _write_engine(source, dst, state, step, progress)


def _check_destination(dst: str, step: int) -> None:
    final = os.path.join(dst, engine_checkpoint.checkpoint_name(step))
    if os.path.lexists(final):
        raise CheckpointError(
            f"{final!r} already exists; remove it or choose another destination (convert never overwrites)."
        )
    if os.path.lexists(dst) and not os.path.isdir(dst):
        raise CheckpointError(f"{dst!r} is a file; the destination of an engine checkpoint is a directory.")


def _sparsecore_to_engine(source: BundleReader, dst: str, found: list, progress: ProgressLine) -> str:
    """A SparseCore checkpoint (TPUEmbeddingV2 on SparseCore, checkpoints/sparsecore.py): its stacked tables
    and slots unstacked into plain ones."""
    if len(found) > 1:
        raise CheckpointError(
            f"{source.prefix} holds {len(found)} SparseCore embeddings ({', '.join(repr(f.path) for f in found)}); "
            "`convert` takes a checkpoint of one (read the others with checkpoints.sparsecore.tables_of)."
        )
    print(
        "note: a SparseCore checkpoint keeps no step of the embedding's own: the engine checkpoint gets step 0",
        file=sys.stderr,
    )
    _check_destination(dst, 0)
    progress.status("reading, checking and unstacking the stacked tables")
    return _write_engine(source, dst, tables_of(source, found[0]), 0, progress)


def _write_engine(
    source: BundleReader, dst: str, state: dict[str, dict[str, np.ndarray]], step: int, progress: ProgressLine
) -> str:
    final = os.path.join(dst, engine_checkpoint.checkpoint_name(step))
    progress.status(f"writing {final}")
    structure = {
        table: {
            "vocabulary_size": arrays[EMBEDDING].shape[0],
            "dim": arrays[EMBEDDING].shape[1],
            "slots": sorted(s for s in arrays if s != EMBEDDING),
        }
        for table, arrays in state.items()
    }
    return engine_checkpoint.save_checkpoint(
        dst,
        state,
        step=step,
        spec_structure=structure,
        fingerprint="",
        extra={"converted_from": os.path.abspath(source.prefix)},
        keep=2**62,
    )


# The command ------------------------------------------------------------------------------------


def add_parser(commands: Any) -> None:
    """Adds the `checkpoint` command and its `list`, `show`, `convert` subcommands to `commands`."""
    parser = commands.add_parser(
        "checkpoint",
        help="list, show or convert a checkpoint (TensorFlow's or the engine's)",
        description=__doc__.splitlines()[0],
    )
    actions = parser.add_subparsers(dest="action", required=True)
    where = "a checkpoint prefix (run/model.ckpt-100), an engine checkpoint, or a directory (its latest)"
    listing = actions.add_parser("list", help="every tensor: name, dtype, shape")
    listing.add_argument("path", metavar="PATH", help=where)
    listing.add_argument("--verify", action="store_true", help="also read every tensor and check its checksum")
    show = actions.add_parser("show", help="one tensor: dtype, shape, statistics, first rows")
    show.add_argument("path", metavar="PATH", help=where)
    show.add_argument("name", metavar="NAME", help="the tensor's name, as `list` prints it")
    show.add_argument(
        "--rows", metavar="N", type=_non_negative, default=5, help="rows (or elements) to print (default 5)"
    )
    show.add_argument("--start", metavar="I", type=_non_negative, default=0, help="the first row to print (default 0)")
    conv = actions.add_parser("convert", help="engine checkpoint -> TensorFlow checkpoint, or back")
    conv.add_argument(
        "src",
        metavar="SRC",
        help="the checkpoint to convert: an engine checkpoint (or a directory of them), or a TensorFlow checkpoint "
        "of keys <table>, <table>/<slot>, global_step (a prefix, or a directory: its latest)",
    )
    conv.add_argument(
        "dst",
        metavar="DST",
        help="from an engine checkpoint: a TensorFlow prefix, or a directory (gets model.ckpt-<step>); "
        "from a TensorFlow one: a directory (gets ckpt-<step>)",
    )


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an int >= 0, got {text!r}")
    return value


def _command(args: argparse.Namespace, path: str) -> str:
    """The command line `args` stand for, with `path` as its checkpoint."""
    if args.action == "list":
        argv = [path] + (["--verify"] if args.verify else [])
    elif args.action == "show":
        argv = [path, args.name] + [f"--rows={args.rows}", f"--start={args.start}"] * (
            args.rows != 5 or args.start != 0
        )
    else:
        argv = [path, args.dst]
    return " ".join(["tpu-embedding-shim", "checkpoint", args.action, *map(shlex.quote, argv)])


def run(args: argparse.Namespace) -> int:
    """Runs a parsed `checkpoint` command: its exit status (1 and one line on stderr for a bad checkpoint)."""
    try:
        if args.action == "list":
            return list_tensors(args.path, verify=args.verify)
        if args.action == "show":
            return show_tensor(args.path, args.name, rows=args.rows, start=args.start)
        return convert(args.src, args.dst)
    except (CheckpointError, ValueError, OSError, MemoryError, OverflowError) as error:
        message = str(error) if not isinstance(error, MemoryError) else f"out of memory ({error})"
        if isinstance(error, NoCheckpointError) and len(error.below) == 1:
            message += f"; run: {_command(args, error.below[0])}"
        sys.stdout.flush()
        print(f"tpu-embedding-shim checkpoint {args.action}: error: {message}", file=sys.stderr)
        return 1
