"""One writer per checkpoint directory; what killed saves leave behind, removed without touching a live writer's files.

A save renames finished temporaries into place (`write_bundle`'s
`<file>.tempstate<hex>`, `write_state`'s `.checkpoint.tmp-<hex>`). A
process killed half way leaves those temporaries, and possibly the data
files of a checkpoint whose `.index` was never written (an incomplete
checkpoint: without its index it does not exist for any reader).

Which of them are debris? A writer holds a shared `flock` on the
checkpoint directory from before its first temporary until its last
rename (`writing`). A save that can take that lock exclusively knows that
no writer using it is alive, so every temporary of its checkpoints is
debris: it removes them, then keeps the lock shared while it writes. A
killed process loses its lock with its life, so its leftovers go at the
next save. Where `flock` is missing (not POSIX) or the filesystem has no
locks, nothing is removed.

One writer per directory: a training run (`TPUEstimator.train`) or a
`CheckpointManager` that saves holds `sole_writer`, an exclusive `flock`
on the lock file `LOCK_FILE` in the directory, which records its pid. A
second process that wants to write there gets `DirectoryInUseError`
(naming the directory and that pid) instead of two runs deleting each
other's checkpoints; readers take no lock. Within one process the lock is
shared (counted), and the last release removes the file. The kernel drops
the lock when its process dies, so a crash never leaves a lock that blocks
the next run (only, perhaps, the file, which the next writer reuses).

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "ckpt-3.index.tempstate0123456789abcdef"), "w").close()
>>> with writing(d, lambda: print(remove_debris(d, r"ckpt-\\d+"))):
...     pass
['ckpt-3.index.tempstate0123456789abcdef']
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator

from .naming import index_file
from .state import STATE_FILE

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "writing",
    "remove_debris",
    "LOCK_FILE",
    "DirectoryInUseError",
    "sole_writer",
    "acquire_writer",
    "release_writer",
]

LOCK_FILE = ".tpu_embedding_shim.lock"


class DirectoryInUseError(RuntimeError):
    """Another process is writing checkpoints in this directory (it holds its `LOCK_FILE`)."""


_held: dict[str, list[int]] = {}  # real path of a directory -> [descriptor of its locked LOCK_FILE, users]
_held_guard = threading.Lock()


def _forget_in_child() -> None:
    """A forked child is not its parent's writer: it closes its copies of the lock files (the parent's locks stay,
    as a flock lasts until its last descriptor closes), so the child outliving the parent holds nothing."""
    global _held_guard
    for fd, _ in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()
    _held_guard = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _holder(path: str) -> str:
    """'process <pid>' as the lock file records it, or 'another process'."""
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            pid = file.read(32).strip()
    except OSError:
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process"


def _take(directory: str, what: str) -> int | None:
    """A descriptor of `directory`'s lock file, locked exclusively; None where locks can't be had."""
    path = os.path.join(directory, LOCK_FILE)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # a read-only directory: the write itself will say so
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryInUseError(
                f"{what}: {_holder(path)} is writing checkpoints in {directory!r} (it holds {path}). Two writers "
                "in one directory would delete each other's checkpoints: wait for it to end, or write to another "
                "directory. Reading (evaluate, predict, export, restore, tf.train.load_checkpoint) works beside "
                "it."
            ) from None
        except OSError:  # a filesystem without locks
            os.close(fd)
            return None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except OSError:
            same = False
        if same:  # else the holder removed the file as we opened it: lock the new one
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
            return fd
        os.close(fd)


def acquire_writer(directory: str, what: str) -> str | None:
    """Makes this process the only writer of `directory` (created if missing); returns a key for `release_writer`.

    `what` names the caller in the error. None: nothing to release (no
    locks on this system or filesystem).

    Raises:
      DirectoryInUseError: another process holds the directory.
    """
    if fcntl is None:
        return None
    os.makedirs(directory, exist_ok=True)
    key = os.path.realpath(directory)
    with _held_guard:
        if key in _held:
            _held[key][1] += 1
            return key
        fd = _take(directory, what)
        if fd is None:
            return None
        _held[key] = [fd, 1]
        return key


def release_writer(key: str | None) -> None:
    """Ends one `acquire_writer`; the last one removes the lock file and unlocks it."""
    if key is None:
        return
    with _held_guard:
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _held[key]
        with contextlib.suppress(OSError):
            os.remove(os.path.join(key, LOCK_FILE))  # while still locked: see `_take`
        os.close(entry[0])


@contextlib.contextmanager
def sole_writer(directory: str, what: str) -> Iterator[None]:
    """`acquire_writer` for the body."""
    key = acquire_writer(directory, what)
    try:
        yield
    finally:
        release_writer(key)


def _lock(directory: str) -> int | None:
    """A descriptor of `directory` to lock, or None where directories can't be opened or locked."""
    if fcntl is None:
        return None
    try:
        return os.open(directory, os.O_RDONLY)
    except OSError:
        return None


@contextlib.contextmanager
def writing(directory: str, clean: Callable[[], object] = lambda: None) -> Iterator[None]:
    """Marks a live writer in `directory` for the body; first calls `clean()` when no other writer is alive.

    The body runs holding a shared lock on the directory (released when it
    ends, or when the process dies). `clean` runs holding it exclusively,
    before the body: the moment every temporary in the directory is known to
    be debris.
    """
    fd = _lock(directory)
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another writer is alive: wait for a shared lock, clean nothing
                fcntl.flock(fd, fcntl.LOCK_SH)
            except OSError:  # a filesystem without locks: write unlocked, clean nothing
                pass
            else:
                try:
                    clean()
                finally:
                    fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def remove_debris(directory: str, checkpoint_names: str, latest_filename: str | None = None) -> list[str]:
    """Removes the leftovers of killed saves of checkpoints named like `checkpoint_names`; returns their names.

    Call it only from `writing`'s `clean`. Removed:

    - `<name>.index.tempstate<hex>`, `<name>.data-*.tempstate<hex>`
      (`write_bundle`'s temporaries);
    - `.<state file>.tmp-<hex>` (`write_state`'s temporary);
    - `<name>.data-*` without a `<name>.index` (an incomplete checkpoint).

    Args:
      directory: the checkpoint directory.
      checkpoint_names: a regular expression a checkpoint's file name
        (without `.index`) must match whole, e.g. `ckpt-\\d+`.
      latest_filename: the state file's name (default `checkpoint`).
    """
    temporary = re.compile(rf"({checkpoint_names})\.(index|data-\d{{5}}-of-\d{{5}})\.tempstate[0-9a-f]+")
    data = re.compile(rf"({checkpoint_names})\.data-\d{{5}}-of-\d{{5}}")
    state = re.compile(re.escape(f".{latest_filename or STATE_FILE}.tmp-") + r"[0-9a-f]+")
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        match = data.fullmatch(name)
        orphan = match is not None and not os.path.exists(index_file(os.path.join(directory, match.group(1))))
        if temporary.fullmatch(name) or state.fullmatch(name) or orphan:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                removed.append(name)
    return removed
