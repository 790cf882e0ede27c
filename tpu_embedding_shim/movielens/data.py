"""MovieLens 100K: fetched, parsed, split by time, turned into feature batches.

The data is never committed (its licence forbids redistribution). It ships
inside the `recbole==1.2.1` wheel on PyPI, under
`recbole/dataset_example/ml-100k/ml-100k.{inter,user,item}`; `fetch` runs
`pip download --no-deps` once into a cache directory and reads the three
files from the wheel (a zip file) without installing it.

Each rating becomes one example: the user, the movie, the user's earlier
movies (a sequence sharing the movie table), the movie's genres, the
user's occupation, gender, age bucket and zip-code prefix; the label is
`rating >= 4`. The split is by time: the last 20% of each user's ratings
are the test set.

`load_ratings` reads the user's own ratings instead: a CSV file with the
header `user_id,item_id,rating` or `user_id,item_id,rating,timestamp`.
It has no side information, so those features are empty for every example
(their embeddings stay at zero) and the model learns from the user, the
item and the user's history.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterator

import numpy as np

from ..api.tensors import RaggedTensor

log = logging.getLogger("tpu_embedding_shim.movielens")

WHEEL = "recbole==1.2.1"
MEMBER = "recbole/dataset_example/ml-100k/ml-100k.{}"
AGE_BOUNDARIES = (18, 25, 35, 45, 50, 56)  # MovieLens' own age groups: 7 buckets, ids 1..7
# (dense input: TPUEstimator treats id 0 of a dense input as padding, so bucket ids start at 1)
ZIP_PREFIX = 3
WHEEL_FILE = "recbole-1.2.1-py3-none-any.whl"
WHEEL_URL = "https://pypi.org/project/recbole/1.2.1/#files"
RATINGS_HEADERS = (("user_id", "item_id", "rating"), ("user_id", "item_id", "rating", "timestamp"))
MAX_ID = 10_000_000
"""The largest user or item id of a ratings file: each id is a row of its table (ids 0..max; 0 is padding)."""
POSITIVE_RATING = 4.0
"""The label of a rating: 1 when `rating >= POSITIVE_RATING` (MovieLens' 1-5 stars), else 0."""


class DataError(Exception):
    """The job's data cannot be had or read: the message says what and the fix (the command line exits 1)."""


def cache_dir() -> str:
    """`$TPU_EMBEDDING_SHIM_CACHE`, else `~/.cache/tpu-embedding-shim`."""
    default = os.path.join(os.path.expanduser("~"), ".cache", "tpu-embedding-shim")
    return os.environ.get("TPU_EMBEDDING_SHIM_CACHE", default)


def cached(directory: str | None = None) -> str | None:
    """The path of the cached recbole wheel, or None: nothing downloaded yet."""
    found = glob.glob(os.path.join(directory or cache_dir(), "recbole-1.2.1-*.whl"))
    return found[0] if found else None


def keep(content: bytes, name: str) -> str:
    """Writes a wheel fetched elsewhere (another host's download) into this cache; returns its path. Written
    under a temporary name, then renamed: another process may be reading the cache."""
    os.makedirs(cache_dir(), exist_ok=True)
    path = os.path.join(cache_dir(), os.path.basename(name))
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as handle:
        handle.write(content)
    os.replace(temporary, path)
    return path


def fetch(directory: str | None = None, *, quiet: bool = True) -> str:
    """The path of the recbole wheel, downloading it (about 2 MB) if it is not cached yet."""
    directory = directory or cache_dir()
    found = cached(directory)
    if found:
        return found
    os.makedirs(directory, exist_ok=True)
    # pip writes the wheel in place as it downloads: into a folder of its own first, renamed into the cache whole,
    # so another process (a second job, another rank) never reads a part of it.
    scratch = tempfile.mkdtemp(prefix=".download-", dir=directory)
    try:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
            scratch,
            WHEEL,
        ]
        if quiet:
            command.append("-q")
        done = subprocess.run(command, capture_output=quiet, text=True)
        downloaded = cached(scratch)
        if done.returncode == 0 and downloaded:
            os.replace(downloaded, os.path.join(directory, os.path.basename(downloaded)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    found = cached(directory)
    if done.returncode != 0 or not found:
        detail = (done.stderr or "").strip().splitlines()[-1:] if quiet else []
        raise DataError(
            f"Could not download {WHEEL} into {directory!r} with `{sys.executable} -m pip download` "
            f"(exit code {done.returncode}: {' '.join(detail) or 'see the lines above'}). Without pip or a network, "
            f"download {WHEEL_FILE} from {WHEEL_URL} elsewhere and pass it: --wheel PATH."
        )
    return found


def read_tables(wheel: str, *, cached: bool = False) -> dict[str, list[list[str]]]:
    """The three files as rows of string fields (header dropped).

    Raises:
      DataError: the wheel is missing or not a readable recbole 1.2.1 wheel:
        the message names the file; for the project's own `cached` download
        (a cut or corrupt one), it says to delete it.
    """
    if not os.path.isfile(wheel):
        raise DataError(f"--wheel {wheel!r}: no such file. Pass the path of {WHEEL_FILE} ({WHEEL_URL}).")
    out = {}
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name in ("inter", "user", "item"):
                text = archive.read(MEMBER.format(name)).decode("utf-8", errors="replace")
                rows = [line.split("\t") for line in text.splitlines() if line]
                out[name] = rows[1:]
    except (zipfile.BadZipFile, KeyError, EOFError, zlib.error) as error:
        fix = (
            "Delete it and run again to download it anew."
            if cached
            else f"Pass the {WHEEL_FILE} file ({WHEEL_URL}), or omit --wheel to download it."
        )
        what = f"The cached download {wheel!r}" if cached else f"--wheel {wheel!r}"
        raise DataError(f"{what} is not a readable {WHEEL} wheel ({type(error).__name__}: {error}). {fix}") from None
    return out


@dataclasses.dataclass(frozen=True)
class MovieLens:
    """All ratings and side information, as arrays indexed by example.

    Attributes:
      user, item, timestamp, label: one entry per rating.
      history: the user's earlier movies, most recent last, at most
        `history_length` (ragged: values + row_splits).
      genres: each movie's genres (ragged over movies, indexed by movie id;
        numpy strings).
      user_age, user_gender, user_occupation, user_zip: per user id (the
        last three numpy strings, '' where unknown).
      train, test: example indices of the time split.
    """

    user: np.ndarray
    item: np.ndarray
    timestamp: np.ndarray
    label: np.ndarray
    history_values: np.ndarray
    history_splits: np.ndarray
    genre_values: np.ndarray
    genre_splits: np.ndarray
    user_age: np.ndarray
    user_gender: np.ndarray
    user_occupation: np.ndarray
    user_zip: np.ndarray
    train: np.ndarray
    test: np.ndarray
    num_users: int
    num_items: int
    genres: tuple[str, ...]
    occupations: tuple[str, ...]


def load(wheel: str | None = None, *, history_length: int = 20, test_fraction: float = 0.2) -> MovieLens:
    """Parses the files and builds examples, history and the per-user time split."""
    if wheel is None:  # the cached download: a corrupt one is fetched again, once
        try:
            tables = read_tables(fetch(), cached=True)
        except DataError as error:
            log.warning("%s Downloading it again.", error)
            os.remove(fetch())
            tables = read_tables(fetch(), cached=True)
    else:
        tables = read_tables(wheel)
    inter = np.array([[int(r[0]), int(r[1]), float(r[2]), float(r[3])] for r in tables["inter"]])
    return _examples(inter, tables["user"], tables["item"], history_length, test_fraction)


def load_ratings(path: str, *, history_length: int = 20, test_fraction: float = 0.2) -> MovieLens:
    """The user's own ratings: a CSV file with the header `user_id,item_id,rating[,timestamp]`.

    Ids are integers in 1..MAX_ID (each id is a row of its table; 0 is
    padding); ratings and timestamps are numbers. Without timestamps, each
    user's ratings are in file order. Side features are empty (genres,
    gender, occupation and zip code have no id; every user is in one age
    bucket).

    Raises:
      DataError: the file is missing, empty, has another header, a bad
        field, or too few ratings to split; the message names the line.
    """
    try:
        with open(path, encoding="utf-8-sig") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"--ratings {path!r}: cannot read it ({type(error).__name__}: {error}).") from None
    expected = " or ".join(",".join(h) for h in RATINGS_HEADERS)
    if not lines or not lines[0].strip():
        raise DataError(f"--ratings {path!r} is empty: its first line must be the header {expected}.")
    header = tuple(field.strip() for field in lines[0].split(","))
    if header not in RATINGS_HEADERS:
        raise DataError(f"--ratings {path!r}: the header must be {expected}. Received: {lines[0]!r}.")
    rows: list[list[float]] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != len(header):
            raise DataError(
                f"--ratings {path!r} line {number}: {len(header)} fields expected ({','.join(header)}). "
                f"Received: {line!r}."
            )
        rows.append(_rating_row(path, number, header, fields, len(rows)))
    if not rows:
        raise DataError(f"--ratings {path!r} has a header and no ratings.")
    data = _examples(np.array(rows, np.float64), [], [], history_length, test_fraction)
    data = dataclasses.replace(data, user_age=np.ones_like(data.user_age))  # one bucket (0 would be padding)
    if not len(data.test):
        raise DataError(
            f"--ratings {path!r}: no user has enough ratings for a test set (the last {test_fraction:.0%} of each "
            "user's ratings; a user needs at least 3)."
        )
    return data


def _rating_row(path: str, number: int, header: tuple[str, ...], fields: list[str], index: int) -> list[float]:
    """[user, item, rating, timestamp] of one line (timestamp: the line's position when the file has none)."""
    values = []
    for name, field in zip(header, fields):
        if name in ("user_id", "item_id"):
            if not field.isdigit() or not 1 <= int(field) <= MAX_ID:
                raise DataError(
                    f"--ratings {path!r} line {number}: `{name}` must be an integer in 1..{MAX_ID} (0 is padding "
                    f"in TPUEstimator's dense input: shift your ids by one). Received: {field!r}."
                )
            values.append(float(field))
        else:
            try:
                value = float(field)
            except ValueError:
                value = float("nan")
            if not np.isfinite(value):
                raise DataError(f"--ratings {path!r} line {number}: `{name}` must be a number. Received: {field!r}.")
            values.append(value)
    return values if len(values) == 4 else values + [float(index)]


def _examples(
    inter: np.ndarray, user_rows: list, item_rows: list, history_length: int, test_fraction: float
) -> MovieLens:
    """The examples of ratings [user, item, rating, timestamp] and the side information of the user and item rows."""
    user, item = inter[:, 0].astype(np.int64), inter[:, 1].astype(np.int64)
    rating, timestamp = inter[:, 2], inter[:, 3].astype(np.int64)
    order = np.lexsort((item, timestamp, user))  # per user, by time (ties by item id: deterministic)
    user, item, rating, timestamp = user[order], item[order], rating[order], timestamp[order]
    num_users, num_items = int(user.max()) + 1, int(item.max()) + 1

    starts = np.flatnonzero(np.r_[True, user[1:] != user[:-1]])
    ends = np.r_[starts[1:], len(user)]
    history: list[int] = []  # item ids
    splits = [0]
    train: list[int] = []  # rating indices
    test: list[int] = []
    for start, end in zip(starts, ends):
        count = end - start
        cut = start + count - round(count * test_fraction)
        train.extend(range(start, cut))
        test.extend(range(cut, end))
        for position in range(start, end):
            history.extend(item[max(start, position - history_length) : position])
            splits.append(len(history))

    users = {int(r[0]): r for r in user_rows}
    user_age = np.zeros(num_users, np.int64)
    user_gender = np.full(num_users, "", dtype=object)
    user_occupation = np.full(num_users, "", dtype=object)
    user_zip = np.full(num_users, "", dtype=object)
    for uid, row in users.items():
        user_age[uid] = 1 + int(np.searchsorted(AGE_BOUNDARIES, int(row[1]), side="right"))
        user_gender[uid], user_occupation[uid], user_zip[uid] = row[2], row[3], row[4][:ZIP_PREFIX]

    genre_lists: list[list[str]] = [[] for _ in range(num_items)]
    for row in item_rows:
        genre_lists[int(row[0])] = row[3].split() if len(row) > 3 else []
    genres = tuple(sorted({g for gs in genre_lists for g in gs}))
    genre_values = np.array([g for gs in genre_lists for g in gs], dtype=str)
    genre_splits = np.r_[0, np.cumsum([len(gs) for gs in genre_lists])].astype(np.int64)

    return MovieLens(
        user=user,
        item=item,
        timestamp=timestamp,
        label=(rating >= POSITIVE_RATING).astype(np.float32),
        history_values=np.asarray(history, np.int64),
        history_splits=np.asarray(splits, np.int64),
        genre_values=genre_values,
        genre_splits=genre_splits,
        user_age=user_age,
        user_gender=user_gender.astype(str),  # numpy strings: a batch gathers them without converting each
        user_occupation=user_occupation.astype(str),
        user_zip=user_zip.astype(str),
        train=np.asarray(train, np.int64),
        test=np.asarray(test, np.int64),
        num_users=num_users,
        num_items=num_items,
        genres=genres or ("unknown",),  # no side information: a vocabulary no example uses
        occupations=tuple(sorted(set(user_occupation[user_occupation != ""]))) or ("unknown",),
    )


def ragged_rows(values: np.ndarray, splits: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, row splits) of some rows of a ragged array, gathered in one pass (no per-row arrays)."""
    lengths = splits[rows + 1] - splits[rows]
    row_splits = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=row_splits[1:])
    take = np.arange(row_splits[-1]) + np.repeat(splits[rows] - row_splits[:-1], lengths)  # each entry's source index
    return values[take], row_splits


def features_of(data: MovieLens, examples: np.ndarray) -> tuple[dict[str, object], np.ndarray]:
    """(features, labels) for some examples: what a model_fn's input_fn yields.

    Feature keys: user, item, history (RaggedTensor-like), genres (strings,
    ragged), occupation, gender (strings, [B, 1]), age (ids, [B, 1]),
    zip (strings, [B, 1]).
    """
    users, items = data.user[examples], data.item[examples]
    history = RaggedTensor(*ragged_rows(data.history_values, data.history_splits, examples))
    genres = RaggedTensor(*ragged_rows(_text(data.genre_values), data.genre_splits, items))
    features = {
        "user": users.reshape(-1, 1),
        "item": items.reshape(-1, 1),
        "history": history,
        "genres": genres,
        "occupation": _text(data.user_occupation)[users].reshape(-1, 1),
        "gender": _text(data.user_gender)[users].reshape(-1, 1),
        "age": data.user_age[users].reshape(-1, 1),
        "zip": _text(data.user_zip)[users].reshape(-1, 1),
    }
    return features, data.label[examples]


def _text(strings: np.ndarray) -> np.ndarray:
    """`strings` as numpy strings: as they are (`_examples` makes them so), else converted (a MovieLens built
    by hand with Python strings)."""
    return strings if strings.dtype.kind == "U" else strings.astype(str)


def batches(
    data: MovieLens,
    examples: np.ndarray,
    batch_size: int,
    *,
    shuffle_seed: int | None = None,
    drop_remainder: bool = False,
) -> Iterator[tuple[dict[str, object], np.ndarray]]:
    """Batches of `features_of`, optionally shuffled."""
    examples = np.asarray(examples)
    if shuffle_seed is not None:
        examples = np.random.default_rng(shuffle_seed).permutation(examples)
    stop = len(examples) - (len(examples) % batch_size if drop_remainder else 0)
    for start in range(0, stop, batch_size):
        yield features_of(data, examples[start : start + batch_size])


def write_zip_vocabulary(data: MovieLens, path: str) -> str:
    """The zip-code prefixes of the training split's users, one per line, in first-seen order ("unknown" when the
    data has no zip codes: a vocabulary no example uses)."""
    seen: dict[str, None] = {}
    for uid in data.user[data.train]:
        if data.user_zip[uid]:
            seen.setdefault(str(data.user_zip[uid]), None)
    seen = seen or {"unknown": None}
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(seen) + "\n")
    return path
