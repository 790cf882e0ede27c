"""The `checkpoint` state file: which checkpoint of a directory is the latest.

TensorFlow writes it as a text-format CheckpointState proto::

    model_checkpoint_path: "model.ckpt-200"
    all_model_checkpoint_paths: "model.ckpt-100"
    all_model_checkpoint_paths: "model.ckpt-200"

(`tf.train.CheckpointManager` adds `all_model_checkpoint_timestamps` and
`last_preserved_timestamp` lines, read and written as floats, seconds
since the epoch.) Strings are
C-escaped: `\\"`, `\\\\`, `\\n` and octal `\\ooo` for other bytes, UTF-8
included. A relative path is relative to the directory holding the file.

`write_state` replaces the file atomically (a temporary sibling, fsync,
rename, fsync of the directory), so a reader sees the old state or the new
one, never half of either.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> write_state(d, os.path.join(d, "m-2"), [os.path.join(d, "m-1"), os.path.join(d, "m-2")])
>>> print(open(os.path.join(d, "checkpoint")).read(), end="")
model_checkpoint_path: "m-2"
all_model_checkpoint_paths: "m-1"
all_model_checkpoint_paths: "m-2"
>>> read_state(d).model_checkpoint_path == os.path.join(d, "m-2")
True
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

from ..files import not_a_regular_file, replace_file
from .errors import DataLossError

__all__ = ["STATE_FILE", "CheckpointState", "read_state", "write_state", "record_latest", "escape", "unescape"]

STATE_FILE = "checkpoint"

_FIELD = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[^\s"\']+)\s*')
_SIMPLE = {"n": 10, "r": 13, "t": 9, '"': 34, "'": 39, "\\": 92, "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}


@dataclasses.dataclass(frozen=True)
class CheckpointState:
    """The latest checkpoint and every kept one (oldest first), as absolute or directory-relative paths."""

    model_checkpoint_path: str
    all_model_checkpoint_paths: tuple[str, ...] = ()
    all_model_checkpoint_timestamps: tuple[float, ...] = ()
    last_preserved_timestamp: float | None = None


def escape(text: str) -> str:
    """`text` as the body of a text-format string (C escapes; bytes outside printable ASCII as octal)."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


def unescape(body: str) -> str:
    """The string a text-format string body (between its quotes) stands for."""
    out = bytearray()
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode("utf-8")
            i += 1
            continue
        if i + 1 >= len(body):
            raise ValueError("a string ends with a lone backslash")
        code = body[i + 1]
        if code in _SIMPLE:
            out.append(_SIMPLE[code])
            i += 2
        elif code in "01234567":
            octal = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert octal is not None  # `code`, its first character, is an octal digit
            digits = octal.group(0)
            out.append(int(digits, 8) & 0xFF)
            i += 1 + len(digits)
        elif code in "xX":
            hexadecimal = re.match(r"[0-9A-Fa-f]{1,2}", body[i + 2 :])
            if not hexadecimal:
                raise ValueError("\\x without hex digits")
            digits = hexadecimal.group(0)
            out.append(int(digits, 16))
            i += 2 + len(digits)
        else:
            raise ValueError(f"unknown escape \\{code}")
    return out.decode("utf-8", "surrogateescape")


def _parse(text: str, path: str) -> tuple[str | None, list[str], list[float], float | None]:
    latest, paths, pos = None, [], 0
    timestamps: list[float] = []
    preserved: float | None = None
    while pos < len(text):
        match = _FIELD.match(text, pos)
        if not match or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise DataLossError(f"{path}: not a checkpoint state file (cannot parse {text[pos : pos + 40]!r}).")
        pos = match.end()
        name, value = match.group(1), match.group(2)
        if name in ("all_model_checkpoint_timestamps", "last_preserved_timestamp"):
            try:
                number = float(value)
            except ValueError:
                raise DataLossError(f"{path}: {name} must be a number, found {value!r}.") from None
            if name == "last_preserved_timestamp":
                preserved = number
            else:
                timestamps.append(number)
            continue
        if name not in ("model_checkpoint_path", "all_model_checkpoint_paths"):
            continue
        if value[0] not in "\"'":
            raise DataLossError(f"{path}: {name} must be a quoted string, found {value!r}.")
        try:
            value = unescape(value[1:-1])
        except ValueError as error:
            raise DataLossError(f"{path}: {name}: {error}.") from None
        if name == "model_checkpoint_path":
            latest = value
        else:
            paths.append(value)
    return latest, paths, timestamps, preserved


def read_state(directory: str | os.PathLike[str], latest_filename: str | None = None) -> CheckpointState | None:
    """The state recorded in `directory` (None when there is no state file or it names no checkpoint).

    Relative paths are joined to `directory`, as TensorFlow's `get_checkpoint_state` does.

    Raises:
      DataLossError: the file exists but is not a text-format CheckpointState.
    """
    directory = os.fspath(directory)
    path = os.path.join(directory, latest_filename or STATE_FILE)
    kind = not_a_regular_file(path)
    if kind is not None and not os.path.isdir(path):  # a FIFO or a device would never finish reading
        raise DataLossError(f"{path}: the checkpoint state file is {kind}, not a regular file.")
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as file:
            text = file.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    latest, paths, timestamps, preserved = _parse(text, path)
    if not latest:
        return None

    def resolve(p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(directory, p)

    return CheckpointState(resolve(latest), tuple(resolve(p) for p in paths), tuple(timestamps), preserved)


def write_state(
    directory: str | os.PathLike[str],
    model_checkpoint_path: str,
    all_model_checkpoint_paths: Sequence[str] = (),
    latest_filename: str | None = None,
    *,
    all_model_checkpoint_timestamps: Sequence[float] = (),
    last_preserved_timestamp: float | None = None,
) -> None:
    """Writes the state file of `directory` atomically.

    Paths inside `directory` are written relative to it (the directory can
    be moved), others as given. `model_checkpoint_path` is added to the end
    of `all_model_checkpoint_paths` if it is not in it. The timestamps
    (`tf.train.CheckpointManager`'s: one per path of
    `all_model_checkpoint_paths`, and the last preserved one) are written
    after the paths, as TensorFlow writes them.
    """
    directory = os.fspath(directory)

    def relative(p: str) -> str:
        p = os.fspath(p)
        if os.path.dirname(os.path.abspath(p)) == os.path.abspath(directory):
            return os.path.basename(p)
        return p

    kept: list[str] = []
    for p in list(all_model_checkpoint_paths) + [model_checkpoint_path]:
        if relative(p) not in kept:
            kept.append(relative(p))
    if kept[-1] != relative(model_checkpoint_path):
        kept = [p for p in kept if p != relative(model_checkpoint_path)] + [relative(model_checkpoint_path)]
    lines = [f'model_checkpoint_path: "{escape(relative(model_checkpoint_path))}"']
    lines += [f'all_model_checkpoint_paths: "{escape(p)}"' for p in kept]
    lines += [f"all_model_checkpoint_timestamps: {float(t)!r}" for t in all_model_checkpoint_timestamps]
    if last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {float(last_preserved_timestamp)!r}")
    os.makedirs(directory or ".", exist_ok=True)
    # `.checkpoint.tmp-<hex>` while written (debris.py knows the name); the umask applies, as to TF's file.
    replace_file(os.path.join(directory, latest_filename or STATE_FILE), ("\n".join(lines) + "\n").encode("ascii"))


def record_latest(prefix: str | os.PathLike[str], latest_filename: str | None = None) -> CheckpointState:
    """Records `prefix` as the latest checkpoint of its directory, keeping the ones already listed."""
    prefix = os.path.abspath(os.fspath(prefix))
    directory = os.path.dirname(prefix)
    try:
        previous = read_state(directory, latest_filename)
    except DataLossError:  # an unreadable state file is replaced, as TensorFlow does
        previous = None
    kept = [os.path.abspath(p) for p in previous.all_model_checkpoint_paths] if previous else []
    kept = [p for p in kept if p != prefix] + [prefix]
    write_state(directory, prefix, kept, latest_filename)
    return CheckpointState(prefix, tuple(kept))
