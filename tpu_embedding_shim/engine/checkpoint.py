"""Checkpoints: a directory of `.npy` files and a JSON manifest, written atomically.

A checkpoint holds, for every table, the FULL `[vocabulary_size, dim]`
embedding in id order and every optimizer slot (TensorFlow's slot names:
`accumulators`, `momenta`, `velocities`, `linears`). Because nothing in it
depends on how the table was split, a checkpoint saved with 4 `div` shards
restores into 1 shard, or 3 `mod` shards: the engine re-shards on load.

On disk::

    <directory>/
      ckpt-0000000100/
        manifest.json                      # written last; names the real tables
        t_user__embedding-1f0c9a2b7d3e.npy # one file per array
        t_user__accumulators-8e41c0d2aa95.npy
      ckpt-0000000200/
      .tmp-ckpt-0000000300-4242-x1y2/      # a save in progress (or a crashed one)

A save writes everything into a temporary sibling directory, fsyncs each
file and the directory, and only then renames it to `ckpt-<step>`. A crash
at any moment therefore leaves every earlier checkpoint untouched; readers
only count directories whose manifest parses and whose files are all
present at their recorded sizes, and the next save removes the debris.

>>> import tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> state = {"t": {"embedding": np.arange(6, dtype=np.float32).reshape(3, 2)}}
>>> structure = {"t": {"vocabulary_size": 3, "dim": 2, "slots": []}}
>>> path = save_checkpoint(d, state, step=7, spec_structure=structure, fingerprint="abc")
>>> os.path.basename(path), latest_checkpoint(d) == path
('ckpt-0000000007', True)
>>> restored, step, manifest = load_checkpoint(path, spec_structure=structure)
>>> step, restored["t"]["embedding"][2].tolist(), manifest["fingerprint"]
(7, [4.0, 5.0], 'abc')
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Union

import numpy as np

from ..spec.checks import check_int, fail, is_int
from .files import (
    created_directories,
    discard_directory,
    fsync_directory,
    not_a_regular_file,
    read_npy_header,
    safe_stem,
    write_synced,
)

State = dict[str, dict[str, np.ndarray]]
PathLike = Union[str, "os.PathLike[str]"]

FORMAT = "tpu_embedding_shim.checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
EMBEDDING = "embedding"

_PREFIX = "ckpt-"
_TMP_PREFIX = ".tmp-ckpt-"  # a save in progress, or one that crashed
_OLD_PREFIX = ".old-ckpt-"  # a checkpoint being replaced by one of the same step
_DEL_PREFIX = ".del-ckpt-"  # a pruned checkpoint being deleted
_FINAL_RE = re.compile(r"^ckpt-(\d{10,})$")
_OLD_RE = re.compile(r"^\.old-ckpt-(\d{10,})-")
# dtype kinds np.save writes without pickling: bool, ints, floats, complex.
_DTYPE_KINDS = "biufc"
_SAVE_LOCK = threading.Lock()


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, or does not fit the spec.

    The message names the checkpoint, the table (and slot), what was expected
    and what was found.
    """


# Names ------------------------------------------------------------------------


def checkpoint_name(step: int) -> str:
    """`ckpt-<step zero-padded to 10 digits>`, so names sort like steps."""
    return f"{_PREFIX}{step:010d}"


def array_file_name(table: str, slot: str) -> str:
    """The file of one array: readable, filesystem-safe and unambiguous.

    The readable part squashes odd characters ('/', spaces, unicode) to '_',
    so `a/b` and `a_b` would collide; the hash of the exact `(table, slot)`
    pair keeps them apart. The real names live in the manifest.

    >>> array_file_name("towers/user id", "accumulators")[:-17]
    'towers_user_id__accumulators'
    """
    digest = hashlib.sha256(json.dumps([table, slot]).encode()).hexdigest()[:12]
    return f"{safe_stem(table)}__{safe_stem(slot, 24)}-{digest}.npy"


# Saving -----------------------------------------------------------------------


def save_checkpoint(
    directory: PathLike,
    state: Mapping[str, Mapping[str, np.ndarray]],
    *,
    step: int,
    spec_structure: Mapping[str, Any],
    fingerprint: str,
    extra: Mapping[str, Any] | None = None,
    keep: int = 5,
) -> str:
    """Writes `state` as checkpoint `<directory>/ckpt-<step>` and returns its path.

    Args:
      directory: where checkpoints live; created if missing. One writer per
        directory at a time (temporaries of other writers count as stale).
      state: table name -> {"embedding": [V, D] table in id order,
        <slot name>: array whose first dimension is V (usually [V, D])}.
      step: the training step, an int >= 0. Saving a step that already has a
        checkpoint replaces it safely.
      spec_structure: `EmbeddingSpec.structure()`; `state` must match it
        exactly (same tables, sizes and slot names).
      fingerprint: `EmbeddingSpec.fingerprint()`, kept in the manifest.
      extra: JSON-serialisable dict kept in the manifest (e.g. the
        optimizer's step counter, data-pipeline position).
      keep: how many checkpoints to keep, >= 1; the oldest (by step) are
        deleted after a successful save. The one just written is never
        deleted.

    Returns:
      The path of the new checkpoint directory.

    Raises:
      ValueError / TypeError: a bad argument; nothing is written.
      OSError: the filesystem failed; earlier checkpoints are untouched.
    """
    directory = os.fspath(directory)
    step = check_int("step", step, minimum=0, owner="save_checkpoint")
    keep = check_int("keep", keep, minimum=1, owner="save_checkpoint")
    if not isinstance(fingerprint, str):
        raise fail("fingerprint", "a str", fingerprint, error=TypeError, owner="save_checkpoint")
    structure = _check_structure(spec_structure)
    arrays = _check_state(state, structure)
    extra = {} if extra is None else extra
    if not isinstance(extra, Mapping):
        raise fail("extra", "a dict or None", extra, error=TypeError, owner="save_checkpoint")
    try:
        extra = json.loads(json.dumps(dict(extra), allow_nan=False))
    except (TypeError, ValueError) as error:
        raise fail(
            "extra", "a JSON-serialisable dict", extra, error=TypeError, owner="save_checkpoint", hint=f"({error})"
        ) from None

    with _SAVE_LOCK:
        with created_directories(directory):  # a failed save removes the directories it made
            _clean_debris(directory)
            tmp = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{step:010d}-{os.getpid()}-", dir=directory)
            final = os.path.join(directory, checkpoint_name(step))
            try:
                entries = [_write_array(tmp, table, slot, array) for table, slot, array in arrays]
                manifest = {
                    "format": FORMAT,
                    "format_version": FORMAT_VERSION,
                    "step": step,
                    "fingerprint": fingerprint,
                    "spec_structure": structure,
                    "arrays": entries,
                    "extra": extra,
                    "saved_at_unix": time.time(),
                }
                write_synced(os.path.join(tmp, MANIFEST), _dumps(manifest).encode())
                fsync_directory(tmp)
                _install(directory, tmp, final)
            finally:
                if os.path.isdir(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)
        _prune(directory, keep, protect=final)
    return final


def _check_structure(spec_structure: Any) -> dict[str, dict[str, Any]]:
    """A JSON-clean copy of `spec_structure`, or a ValueError naming the problem."""
    owner = "save_checkpoint"
    if not isinstance(spec_structure, Mapping) or not spec_structure:
        raise fail(
            "spec_structure",
            "a non-empty dict from EmbeddingSpec.structure()",
            spec_structure,
            error=TypeError,
            owner=owner,
        )
    out = {}
    for table, info in spec_structure.items():
        if (
            not isinstance(table, str)
            or not isinstance(info, Mapping)
            or not is_int(info.get("vocabulary_size"))
            or not is_int(info.get("dim"))
            or not isinstance(info.get("slots"), (list, tuple))
            or not all(isinstance(s, str) for s in info["slots"])
        ):
            raise fail(
                f"spec_structure[{table!r}]",
                "{'vocabulary_size': int, 'dim': int, 'slots': [str, ...]}",
                info,
                owner=owner,
            )
        out[table] = {
            "vocabulary_size": int(info["vocabulary_size"]),
            "dim": int(info["dim"]),
            "slots": sorted(info["slots"]),
        }
    return out


def _check_state(state: Any, structure: dict[str, dict[str, Any]]) -> list[tuple[str, str, np.ndarray]]:
    """Checks `state` against `structure`; returns (table, slot, array) in a stable order."""
    owner = "save_checkpoint"
    if not isinstance(state, Mapping):
        raise fail(
            "state",
            "a dict of table name -> {slot name: numpy array}",
            type(state).__name__,
            error=TypeError,
            owner=owner,
        )
    missing = sorted(set(structure) - set(state))
    unexpected = sorted(set(state) - set(structure), key=repr)
    if missing or unexpected:
        raise ValueError(
            f"save_checkpoint: the tables of `state` differ from `spec_structure`: "
            f"missing {missing}, unexpected {unexpected}."
        )
    out = []
    for table, info in structure.items():
        slots = state[table]
        if not isinstance(slots, Mapping):
            raise fail(
                f"state[{table!r}]",
                "a dict of slot name -> numpy array",
                type(slots).__name__,
                error=TypeError,
                owner=owner,
            )
        names = set(slots)
        expected = {EMBEDDING, *info["slots"]}
        if names != expected:
            raise ValueError(
                f"save_checkpoint: table {table!r} must have arrays {sorted(expected)} "
                f"('embedding' plus the optimizer's slots). Received: {sorted(names, key=repr)}."
            )
        shape = (info["vocabulary_size"], info["dim"])
        for slot in [EMBEDDING, *info["slots"]]:
            array = slots[slot]
            where = f"state[{table!r}][{slot!r}]"
            if not isinstance(array, np.ndarray):
                raise fail(where, "a numpy.ndarray", type(array).__name__, error=TypeError, owner=owner)
            if array.dtype.kind not in _DTYPE_KINDS or array.dtype.fields is not None:
                raise fail(
                    where,
                    "a numeric or bool array (no objects, strings or records)",
                    f"dtype {array.dtype}",
                    error=TypeError,
                    owner=owner,
                )
            if slot == EMBEDDING and array.shape != shape:
                raise fail(where, f"of shape {shape} (vocabulary_size, dim)", f"shape {array.shape}", owner=owner)
            if slot != EMBEDDING and (array.ndim < 1 or array.shape[0] != shape[0]):
                raise fail(
                    where,
                    f"an array with {shape[0]} rows (usually of shape {shape})",
                    f"shape {array.shape}",
                    owner=owner,
                )
            out.append((table, slot, array))
    return out


class _HashingWriter:
    """A write-only file wrapper that hashes and counts what passes through."""

    def __init__(self, file):
        self._file = file
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.size += memoryview(data).nbytes
        return self._file.write(data)


def _write_array(tmp: str, table: str, slot: str, array: np.ndarray) -> dict[str, Any]:
    name = array_file_name(table, slot)
    with open(os.path.join(tmp, name), "xb") as file:
        writer = _HashingWriter(file)
        np.lib.format.write_array(writer, array, allow_pickle=False)
        file.flush()
        os.fsync(file.fileno())
    return {
        "table": table,
        "slot": slot,
        "file": name,
        "shape": list(array.shape),
        "dtype": array.dtype.str,
        "size_bytes": writer.size,
        "sha256": writer.sha256.hexdigest(),
    }


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"


def _install(directory: str, tmp: str, final: str) -> None:
    """Renames the finished `tmp` to `final`, replacing an older `final` safely.

    POSIX cannot rename onto a non-empty directory, so an existing `final`
    is first renamed aside to `.old-ckpt-<step>-...`; if we die between the
    two renames, readers and the next save fall back to that directory.
    """
    old = None
    if os.path.lexists(final):
        old = tempfile.mkdtemp(
            prefix=f"{_OLD_PREFIX}{os.path.basename(final)[len(_PREFIX) :]}-{os.getpid()}-", dir=directory
        )
        os.rmdir(old)  # only the unique name is wanted
        os.rename(final, old)
    try:
        os.rename(tmp, final)
    except BaseException:
        if old is not None and not os.path.lexists(final):
            os.rename(old, final)
        raise
    fsync_directory(directory)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove(directory: str, name: str) -> None:
    """Deletes a checkpoint: rename it out of sight (atomic), then delete the files."""
    discard_directory(os.path.join(directory, name), f"{_DEL_PREFIX}{os.getpid()}-")


def _clean_debris(directory: str) -> None:
    """Removes what crashed saves left: temporaries, deletions, replaced checkpoints.

    A replaced checkpoint (`.old-ckpt-<step>-...`) whose replacement never
    arrived is renamed back to `ckpt-<step>` instead.
    """
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith((_TMP_PREFIX, _DEL_PREFIX)):
            shutil.rmtree(path, ignore_errors=True)
        elif name.startswith(_OLD_PREFIX):
            match = _OLD_RE.match(name)
            final = os.path.join(directory, checkpoint_name(int(match.group(1)))) if match else None
            if final and not os.path.lexists(final) and _manifest_if_valid(path) is not None:
                os.rename(path, final)
            else:
                shutil.rmtree(path, ignore_errors=True)
    fsync_directory(directory)


def _prune(directory: str, keep: int, *, protect: str) -> None:
    paths = list_checkpoints(directory)
    excess = len(paths) - keep
    for path in paths:
        if excess <= 0:
            break
        if os.path.abspath(path) == os.path.abspath(protect) or not os.path.basename(path).startswith(_PREFIX):
            continue
        _remove(directory, os.path.basename(path))
        excess -= 1
    fsync_directory(directory)


# Finding ----------------------------------------------------------------------


def _manifest_if_valid(path: str) -> dict[str, Any] | None:
    """The manifest of a complete checkpoint directory, else None.

    Cheap: parses the manifest and checks every array file exists with its
    recorded size; checksums are verified by `load_checkpoint`.
    """
    try:
        if not_a_regular_file(os.path.join(path, MANIFEST)) is not None:
            return None
        with open(os.path.join(path, MANIFEST), "rb") as file:
            manifest = json.loads(file.read().decode("utf-8"))
        if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
            return None
        for entry in manifest["arrays"]:
            if _bad_file_name(entry["file"]):
                return None
            if os.path.getsize(os.path.join(path, entry["file"])) != entry["size_bytes"]:
                return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _bad_file_name(name: Any) -> bool:
    return (
        not isinstance(name, str)
        or name != os.path.basename(name)
        or name in ("", ".", "..")
        or "/" in name
        or "\\" in name
    )


def _candidates(directory: str) -> Iterable[tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    finals: dict[int, str] = {}
    olds: dict[int, list[str]] = {}
    for name in names:
        match = _FINAL_RE.match(name)
        if match:
            finals[int(match.group(1))] = name
            continue
        match = _OLD_RE.match(name)
        if match:
            olds.setdefault(int(match.group(1)), []).append(name)
    found = []
    for step in sorted(set(finals) | set(olds)):
        # A final directory wins; a set-aside `.old-` copy only stands in for
        # a final that a crash removed mid-replacement.
        for name in ([finals[step]] if step in finals else []) + sorted(olds.get(step, [])):
            path = os.path.join(directory, name)
            if _manifest_if_valid(path) is not None:
                found.append((step, path))
                break
    return found


def list_checkpoints(directory: PathLike) -> list[str]:
    """Paths of the complete checkpoints in `directory`, oldest (lowest step) first.

    Temporary, half-deleted and otherwise incomplete directories are ignored.
    A missing directory has no checkpoints.
    """
    return [path for _, path in _candidates(os.fspath(directory))]


def latest_checkpoint(directory: PathLike) -> str | None:
    """The path of the complete checkpoint with the highest step, or None."""
    paths = list_checkpoints(directory)
    return paths[-1] if paths else None


def resolve_checkpoint(path: PathLike) -> str:
    """The checkpoint `path` names: itself, or, for a directory of checkpoints, its latest.

    Raises:
      CheckpointError: `path` is a directory without a complete checkpoint.
    """
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, MANIFEST)):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"No checkpoint in {path!r}.")
        return latest
    return path


# Loading ----------------------------------------------------------------------


def load_checkpoint(
    path: PathLike, *, spec_structure: Mapping[str, Any] | None = None
) -> tuple[State, int, dict[str, Any]]:
    """Reads and verifies one checkpoint.

    Every array is checked against the manifest (sha256 of the file bytes,
    shape, dtype) and read with `allow_pickle=False`. With `spec_structure`
    (`EmbeddingSpec.structure()` of the spec to restore into), every table
    must exist with the same vocabulary_size, dim and slot names; the shard
    count and partition strategy may differ, because tables are stored whole.

    Returns:
      (state, step, manifest): state is table -> {"embedding": [V, D], slot:
      array}, full tables in id order.

    Raises:
      CheckpointError: not found, corrupt, or not matching `spec_structure`.
    """
    path = os.fspath(path)
    manifest = read_manifest(path)
    state: State = {}
    for entry in manifest["arrays"]:
        state.setdefault(entry["table"], {})[entry["slot"]] = read_array(path, entry)
    for table, slots in state.items():
        if EMBEDDING not in slots:
            raise CheckpointError(
                f"Checkpoint {path!r}: table {table!r} has no 'embedding' array (found {sorted(slots)})."
            )
    if spec_structure is not None:
        check_structure(state, spec_structure, where=f"Checkpoint {path!r}")
    return state, int(manifest["step"]), manifest


def read_manifest(path: PathLike) -> dict[str, Any]:
    """The manifest of the checkpoint directory `path`, checked (its arrays are not read).

    Raises:
      CheckpointError: no manifest there, or one that is not valid JSON or
        not a manifest this version reads.
    """
    path = os.fspath(path)
    manifest_path = os.path.join(path, MANIFEST)
    kind = not_a_regular_file(manifest_path)
    if kind is not None:
        raise CheckpointError(f"Checkpoint {path!r}: {manifest_path} is {kind}, not a manifest file.")
    if not os.path.isfile(manifest_path):
        hint = ""
        if os.path.isdir(path) and list_checkpoints(path):
            hint = f" It holds checkpoints; did you mean latest_checkpoint({path!r}) = {latest_checkpoint(path)!r}?"
        raise CheckpointError(f"No checkpoint at {path!r}: {MANIFEST} not found.{hint}")
    try:
        with open(manifest_path, "rb") as file:
            manifest = json.loads(file.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"Checkpoint {path!r}: {MANIFEST} is not valid JSON ({error}).") from None
    _check_manifest(path, manifest)
    return manifest


def _check_manifest(path: str, manifest: Any) -> None:
    where = f"Checkpoint {path!r}: {MANIFEST}"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{where} is not a {FORMAT} manifest.")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{where} has format_version {manifest.get('format_version')!r}; "
            f"this version reads format_version {FORMAT_VERSION}."
        )
    if not is_int(manifest.get("step")) or not isinstance(manifest.get("arrays"), list):
        raise CheckpointError(f"{where} lacks an int `step` or an `arrays` list.")
    seen = set()
    keys = {"table": str, "slot": str, "file": str, "shape": list, "dtype": str, "sha256": str}
    for entry in manifest["arrays"]:
        if not isinstance(entry, dict) or any(not isinstance(entry.get(k), t) for k, t in keys.items()):
            raise CheckpointError(f"{where} has a malformed array entry: {entry!r}.")
        if _bad_file_name(entry["file"]):
            raise CheckpointError(
                f"{where}: array {entry['table']!r}/{entry['slot']!r} names file "
                f"{entry['file']!r}, which is not a plain file name in the checkpoint."
            )
        if (entry["table"], entry["slot"]) in seen:
            raise CheckpointError(f"{where} lists table {entry['table']!r} slot {entry['slot']!r} twice.")
        seen.add((entry["table"], entry["slot"]))


def read_array(path: PathLike, entry: dict[str, Any], *, mmap: bool = False) -> np.ndarray:
    """One array of the checkpoint `path`, given its manifest entry, checked against its sha256, shape and dtype.

    With `mmap=True` the array is a copy-on-write memory map of its file
    (read once to check the hash, never copied into memory).
    """
    path = os.fspath(path)
    what = f"Checkpoint {path!r}: table {entry['table']!r} slot {entry['slot']!r} ({entry['file']})"
    file_path = os.path.join(path, entry["file"])
    kind = not_a_regular_file(file_path)
    if kind is not None:
        raise CheckpointError(f"{what}: {file_path} is {kind}, not an array file.")
    try:
        with open(file_path, "rb") as file:
            digest = hashlib.sha256()
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
            if digest.hexdigest() != entry["sha256"]:
                raise CheckpointError(
                    f"{what} is corrupt: sha256 expected {entry['sha256']}, found {digest.hexdigest()}."
                )
            file.seek(0)
            _check_npy_header(file, os.fstat(file.fileno()).st_size, entry, what)
            file.seek(0)
            array = np.load(file_path if mmap else file, mmap_mode="c" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise CheckpointError(f"{what}: file not found.") from None
    except CheckpointError:
        raise
    except (OSError, ValueError, EOFError) as error:
        raise CheckpointError(f"{what} cannot be read safely: {error}") from None
    if not isinstance(array, np.ndarray):
        raise CheckpointError(f"{what}: expected one array, found {type(array).__name__}.")
    if list(array.shape) != entry["shape"] or array.dtype.str != entry["dtype"]:
        raise CheckpointError(
            f"{what}: expected shape {tuple(entry['shape'])} dtype {entry['dtype']}, "
            f"found shape {array.shape} dtype {array.dtype.str}."
        )
    return array


def _check_npy_header(file: Any, file_size: int, entry: dict[str, Any], what: str) -> None:
    """Checks the `.npy` header of `file` against the manifest entry and the file's size, before the
    array is allocated: a header that claims another shape (or more bytes than the file holds) is refused."""
    try:
        shape, dtype = read_npy_header(file)
    except (ValueError, EOFError, OSError) as error:
        raise CheckpointError(f"{what} cannot be read safely: its .npy header is not readable ({error}).") from None
    if dtype.hasobject:
        raise CheckpointError(
            f"{what} holds Python objects (dtype {dtype.str}); arrays are read with allow_pickle=False, numbers only."
        )
    if list(shape) != entry["shape"] or dtype.str != entry["dtype"]:
        raise CheckpointError(
            f"{what}: expected shape {tuple(entry['shape'])} dtype {entry['dtype']}, found shape "
            f"{tuple(shape)} dtype {dtype.str} in the file's header (the manifest says the former): the file or "
            "the manifest is corrupt."
        )
    expected = file.tell() + math.prod(shape) * dtype.itemsize
    if expected != file_size:
        raise CheckpointError(
            f"{what}: the header claims {math.prod(shape) * dtype.itemsize} bytes of data after byte "
            f"{file.tell()}, the file has {file_size} bytes in all: the file is truncated or corrupt."
        )


def state_structure(state: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """The `EmbeddingSpec.structure()`-shaped summary of a state's arrays."""
    out = {}
    for table, slots in state.items():
        shape = np.shape(slots[EMBEDDING]) if EMBEDDING in slots else (None, None)
        out[table] = {
            "vocabulary_size": shape[0],
            "dim": shape[1] if len(shape) > 1 else None,
            "slots": sorted(s for s in slots if s != EMBEDDING),
        }
    return out


def check_structure(
    state: Mapping[str, Mapping[str, np.ndarray]], spec_structure: Mapping[str, Any], *, where: str = "State"
) -> None:
    """Raises CheckpointError listing every way `state` differs from `spec_structure`."""
    found = state_structure(state)
    problems = []
    for table, info in spec_structure.items():
        if table not in found:
            problems.append(
                f"table {table!r} is expected by the spec (vocabulary_size="
                f"{info.get('vocabulary_size')}, dim={info.get('dim')}) but not found; "
                f"found tables {sorted(found)}"
            )
            continue
        have = found[table]
        for key in ("vocabulary_size", "dim"):
            if have[key] != info.get(key):
                problems.append(f"table {table!r}: expected {key}={info.get(key)}, found {key}={have[key]}")
        want_slots = sorted(info.get("slots", []))
        if have["slots"] != want_slots:
            problems.append(
                f"table {table!r}: expected optimizer slots {want_slots}, found {have['slots']} "
                f"(was the checkpoint written with another optimizer?)"
            )
    for table in found:
        if table not in spec_structure:
            problems.append(
                f"table {table!r} is in the checkpoint but not in the spec (spec tables {sorted(spec_structure)})"
            )
    if problems:
        raise CheckpointError(f"{where} does not match the spec:\n  - " + "\n  - ".join(problems))
