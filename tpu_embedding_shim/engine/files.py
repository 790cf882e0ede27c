"""Files and directories that appear whole or not at all, and file names safe everywhere.

Every writer of the package (checkpoints, lookup statistics, the runner's
dense state, exports, TensorFlow's `checkpoint` state file) puts data on
disk the same way, so that a reader, or a crash, sees the old version or
the new one and never half of either:

1. write under a temporary name in the same directory (a rename is atomic
   only within one file system);
2. fsync the data;
3. rename it onto the final name;
4. fsync the directory, so the new name itself survives a power cut.

A directory is deleted the same way in reverse: renamed out of sight (at
once), then removed file by file.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> replace_file(os.path.join(d, "state.json"), b'{"step": 7}')
>>> open(os.path.join(d, "state.json")).read(), os.listdir(d)
('{"step": 7}', ['state.json'])
>>> safe_stem("towers/user id")
'towers_user_id'
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "fsync_directory",
    "write_synced",
    "replace_file",
    "new_directory",
    "discard_directory",
    "safe_stem",
    "not_a_regular_file",
    "created_directories",
    "read_npy_header",
]


def not_a_regular_file(path: str) -> str | None:
    """What `path` is when it exists but is not a regular file ("a directory", "a FIFO", ...), else None.

    Readers check this before they open a file as data: reading a FIFO, or
    a link to /dev/zero, never returns. A missing path is None, so the
    caller's own "not found" error still applies.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_npy_header(file: Any) -> tuple[tuple[int, ...], Any]:
    """(shape, dtype) from the `.npy` header at `file`'s position, leaving it at the data's first byte.

    Nothing of the data is read or allocated, so a reader can check the
    header's claim against the file's size first. numpy's ValueError or
    EOFError for a header it cannot parse propagates; a format version other
    than 1.0 or 2.0 is a ValueError too.
    """
    version = np.lib.format.read_magic(file)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(file)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(file)
    else:
        raise ValueError(f".npy format version {version} (this version reads 1.0 and 2.0)")
    return tuple(shape), dtype


@contextlib.contextmanager
def created_directories(path: str) -> Iterator[None]:
    """Creates the directory `path` and its missing parents; if the block fails, removes what it created.

    Only the directories this call made are removed, and only if the block
    left them empty, so a failed write leaves the tree as it found it.
    """
    path = os.path.abspath(path)
    missing = []
    head = path
    while not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    os.makedirs(path, exist_ok=True)
    try:
        yield
    except BaseException:
        for directory in missing:  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise


def fsync_directory(path: str) -> None:
    """Makes a directory's entries (new names, renames) durable where the OS allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_synced(path: str, data: bytes) -> None:
    """Creates the file `path` (it must not exist yet) holding `data`, flushed to disk.

    For a file inside a directory that is itself installed atomically
    (`new_directory`, a checkpoint's temporary directory).
    """
    with open(path, "xb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def replace_file(path: str, data: bytes) -> None:
    """Replaces (or creates) the file `path` with `data` atomically (steps 1-4 of the module docstring).

    The temporary sibling is `.<name>.tmp-<random hex>`, created as
    `open(path, "wb")` would create it (mode 0o666 less the umask), and
    removed if anything fails.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fsync_directory(directory)


@contextlib.contextmanager
def new_directory(final: str, *, temporary_prefix: str) -> Iterator[str]:
    """Builds the directory `final` whole or not at all.

    Yields an empty temporary sibling (`<temporary_prefix><random>`) to fill.
    When the block ends, every file in it is fsynced, then the directory,
    and it is renamed to `final` (which must not exist then); if the block
    or the rename fails, the temporary directory is deleted.
    """
    parent = os.path.dirname(os.path.abspath(final))
    tmp = tempfile.mkdtemp(prefix=temporary_prefix, dir=parent)
    try:
        yield tmp
        for root, _, names in os.walk(tmp):
            for name in names:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_directory(root)
        os.replace(tmp, final)
        fsync_directory(parent)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def discard_directory(path: str, aside_prefix: str) -> None:
    """Deletes the directory `path` so that no reader sees it half deleted.

    It is renamed to `<aside_prefix><random hex>` in the same directory (at
    once), then removed; a crash in between leaves only that aside name,
    which the caller's debris cleaning recognises by its prefix.
    """
    aside = os.path.join(os.path.dirname(path), f"{aside_prefix}{secrets.token_hex(4)}")
    os.rename(path, aside)
    shutil.rmtree(aside, ignore_errors=True)


def safe_stem(text: str, limit: int = 48) -> str:
    """`text` reduced to `[A-Za-z0-9_.-]` and at most `limit` characters, never starting with a dot.

    Different texts can give one stem ('a/b' and 'a_b'): callers add a hash
    of the exact text to keep their file names apart.
    """
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:limit].lstrip(".")
    return stem or "_"
