"""`tf.train.Checkpoint` and `tf.train.CheckpointManager`, writing and reading TensorFlow's checkpoint format.

A checkpoint is TensorFlow's object-based one: `<prefix>.index` plus
`<prefix>.data-00000-of-00001` (`engine.tf_bundle`), holding one tensor per
variable under TensorFlow's keys, `save_counter`, and the object graph
(`_CHECKPOINTABLE_OBJECT_GRAPH`). `checkpoint_objects.py` says what each
object saves; an embedding passed as `embedding=` gives exactly the keys
and object graph TensorFlow 2.15 writes for its own `TPUEmbedding`:

- `embedding/items/.ATTRIBUTES/VARIABLE_VALUE`: a table,
  `[vocabulary_size, dim]`;
- `embedding/items.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE`: one per
  optimizer slot;
- `embedding/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step`: the engine's
  step (TensorFlow ignores it);
- `model/w/.ATTRIBUTES/VARIABLE_VALUE`: the entry `w` of a dict of numpy
  arrays passed as `model=`;
- `save_counter/.ATTRIBUTES/VARIABLE_VALUE` and
  `_CHECKPOINTABLE_OBJECT_GRAPH`.

So TensorFlow's `tf.train.Checkpoint(embedding=TPUEmbeddingForServing(...))
.restore(path)` loads the tables saved here, and a checkpoint TensorFlow
wrote restores here.

Restoring is all-or-nothing: every object's values are found, checked
(shape, dtype) and read with their checksums verified before the first
one is assigned, so a damaged file or a mismatch raises and changes
nothing (TensorFlow assigns as it goes). A variable the checkpoint lacks
keeps its value, as in TensorFlow; the returned status reports it.

Saving writes the files under temporary names and renames them (the index
last); `CheckpointManager` records a new checkpoint in the `checkpoint`
state file before it deletes old ones, so no kill loses the last good
checkpoint, and the next save removes what killed saves left behind.

Under `mpiexec -n N` (replicas.py) every call here is collective: every
replica makes it, in the same order. When the checkpoint holds an
embedding replicated over the processes, every replica writes its rows of
each table and slot into a data file of its own
(`<prefix>.data-0000r-of-0000N`), as row slices of the table's one key
(TensorFlow's save of a table under TPUStrategy), and replica 0 the rest
(object graph, `save_counter`, other objects) and the index
(`engine.write_collectively`); no replica gathers another's rows.
Otherwise replica 0 alone writes, and the others wait for it. Either way a
failed write on any replica raises on every replica (its error there,
`PeerFailedError` elsewhere) and leaves no checkpoint. Replica 0 holds the
directory (its writer lock, the removal of killed saves' debris), and the
manager's bookkeeping (reading and writing the state file, deleting old
checkpoints) runs on replica 0, which tells the others. Restoring reads the
checkpoint on every replica (a filesystem all of them see), each replica only
its rows of every table and slot (`BundleReader.read_rows`, from whichever
slices hold them): the replicas agree that every one has read and checked
its part, then each loads its rows (`DistributedEngine.load_rows`). So a
checkpoint written by N replicas restores on M, 1 included, and the reverse.

>>> import os, tempfile, numpy as np
>>> model = {"w": np.ones(3, np.float32)}
>>> checkpoint = Checkpoint(model=model)
>>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
>>> path = checkpoint.save(prefix)
>>> os.path.basename(path), latest_checkpoint(os.path.dirname(prefix)) == path
('ckpt-1', True)
>>> sorted(os.listdir(os.path.dirname(prefix)))
['checkpoint', 'ckpt-1.data-00000-of-00001', 'ckpt-1.index']
>>> model["w"][:] = 0
>>> checkpoint.restore(path).assert_consumed() is not None, model["w"].tolist()
(True, [1.0, 1.0, 1.0])
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import CheckpointError, agree, write_collectively
from ..engine.tf_bundle import (
    OBJECT_GRAPH_KEY,
    DataLossError,
    Node,
    SlicedTensor,
    acquire_writer,
    build_graph,
    delete_bundle,
    is_bundle,
    newest_complete,
    read_state,
    release_writer,
    remove_debris,
    sole_writer,
    write_bundle,
    write_state,
    writing,
)
from . import replicas
from .checkpoint_objects import Plan, adapter_for
from .checkpoint_reader import latest_checkpoint
from .object_graph_checkpoint import ObjectGraphCheckpoint, open_object_graph_checkpoint

__all__ = ["Checkpoint", "CheckpointManager", "CheckpointLoadStatus", "latest_checkpoint"]

log = logging.getLogger("tpu_embedding_shim")

SAVE_COUNTER = "save_counter"


class CheckpointLoadStatus:
    """What `restore` returns: what was matched, with TensorFlow's assertions.

    Attributes:
      restored: the names of this `Checkpoint`'s objects that got values.
      unmatched_in_checkpoint: checkpoint keys no object took.
      missing_from_checkpoint: the keys this program's variables would have
        that the checkpoint lacks (those variables kept their values).
    """

    def __init__(self, restored: list[str], unmatched_in_checkpoint: list[str], missing_from_checkpoint: list[str]):
        self.restored = restored
        self.unmatched_in_checkpoint = unmatched_in_checkpoint
        self.missing_from_checkpoint = missing_from_checkpoint

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Every value of the checkpoint was restored and every variable of this program had a value."""
        self.assert_existing_objects_matched()
        if self.unmatched_in_checkpoint:
            raise AssertionError(f"Unresolved objects in the checkpoint: {self.unmatched_in_checkpoint}.")
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Every variable of this program found its value in the checkpoint."""
        if self.missing_from_checkpoint:
            raise AssertionError(f"Objects not found in the checkpoint: {self.missing_from_checkpoint}.")
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Something was restored."""
        if not self.restored:
            raise AssertionError("Nothing was restored from the checkpoint.")
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run: restoring happened in `restore`."""

    def initialize_or_restore(self, session: Any = None) -> None:
        """Nothing to run: restoring happened in `restore`."""


def _save_files(prefix: str, tensors: dict[str, Any], checkpoint_names: str, then: Callable[[], Any], what: str) -> Any:
    """Writes the checkpoint `prefix` (collective under mpiexec, module docstring), then runs `then()` on
    replica 0 while it still holds the directory; returns its result on every replica.

    Raises DirectoryInUseError (a RuntimeError) when another process is the
    directory's writer (a CheckpointManager that saves there, a training run).
    """
    if not any(isinstance(value, SlicedTensor) for value in tensors.values()):
        return replicas.on_chief(lambda: _write_locked(prefix, tensors, checkpoint_names, then), what)
    comm = replicas.world()
    prefix = comm.bcast_object(prefix)  # replica 0's path, as when it writes alone
    mine = {  # this replica's row slices; replica 0 also writes everything else
        key: value
        for key, value in tensors.items()
        if (value.parts if isinstance(value, SlicedTensor) else comm.rank == 0)
    }
    with contextlib.ExitStack() as held:
        error = None
        if comm.rank == 0:
            try:
                held.enter_context(_holding(prefix, checkpoint_names))
            except Exception as caught:
                error = caught
        agree(comm, error, what, collective=True)  # a replica that would write alone fails the agreement too
        write_collectively(comm, prefix, mine)
        return replicas.on_chief(then, f"{what}: record")


def _write_locked(prefix: str, tensors: dict[str, Any], checkpoint_names: str, then: Callable[[], Any]) -> Any:
    """Writes the bundle as a live writer of its directory (after removing killed saves' debris); `then()`."""
    with _holding(prefix, checkpoint_names):
        write_bundle(prefix, tensors)
        return then()


@contextlib.contextmanager
def _holding(prefix: str, checkpoint_names: str) -> Any:
    """The directory of `prefix` created and held: this process its only writer, killed saves' debris removed."""
    directory = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(directory, exist_ok=True)
    with sole_writer(directory, f"Saving {prefix!r}"), writing(directory, lambda: _clean(directory, checkpoint_names)):
        yield


def _clean(directory: str, checkpoint_names: str) -> None:
    """Removes the debris of killed saves: temporaries and incomplete checkpoints."""
    removed = remove_debris(directory, checkpoint_names)
    if removed:
        log.info("Removed what killed saves left in %s: %s", directory, removed)


class Checkpoint:
    """`tf.train.Checkpoint(root=None, **kwargs)`: saves and restores named objects (module docstring).

    Args:
      root: an object whose own variables are saved at the top of the
        checkpoint (TensorFlow's root object); the other objects and
        `save_counter` are saved beside them.
      **kwargs: name -> object (`checkpoint_objects.py` lists what can be
        saved). Assigning an attribute later (`checkpoint.model = params`)
        adds an object too.

    Raises:
      TypeError: an object this checkpoint can't save.
      ValueError: the name `save_counter` (the checkpoint's own).
    """

    _objects: dict[str, Any]
    _root: Any
    _counter: int
    _counter_created: bool

    def __init__(self, root: Any = None, **kwargs: Any):
        object.__setattr__(self, "_objects", {})
        object.__setattr__(self, "_root", None)
        object.__setattr__(self, "_counter", 0)
        object.__setattr__(self, "_counter_created", False)
        if root is not None:
            adapter_for(root, "root")
            object.__setattr__(self, "_root", root)
        for name, value in kwargs.items():
            self._track(name, value)

    def _track(self, name: str, value: Any) -> None:
        if name == SAVE_COUNTER:
            raise ValueError("`save_counter` is the checkpoint's own counter; name the object otherwise.")
        adapter_for(value, name)
        self._objects[name] = value

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self._track(name, value)

    def __getattr__(self, name: str) -> Any:
        objects = object.__getattribute__(self, "_objects")
        if name in objects:
            return objects[name]
        if name == "root" and object.__getattribute__(self, "_root") is not None:
            return object.__getattribute__(self, "_root")
        raise AttributeError(f"'Checkpoint' object has no attribute {name!r}")

    @property
    def save_counter(self) -> int:
        """How many times `save` ran (restored with the checkpoint). Reading it creates it, as in TensorFlow."""
        self._counter_created = True
        return self._counter

    # Saving ----------------------------------------------------------------------------------

    def count_save(self) -> Callable[[], None]:
        """Adds one to `save_counter` (creating it) for a numbered save about to be written (`save`,
        `CheckpointManager.save`); returns the undo, which puts the counter back for a save that failed."""
        before = (self._counter, self._counter_created)
        self._counter, self._counter_created = self._counter + 1, True

        def undo() -> None:
            self._counter, self._counter_created = before

        return undo

    def tensors_to_write(self) -> dict[str, Any]:
        """Every tensor to write: the objects' values under TensorFlow's keys, and the object graph."""
        extras: dict[str, Any] = {}
        if self._root is not None:
            root_adapter = adapter_for(self._root, "root")
            top = root_adapter.node(())
            extras.update(root_adapter.extras(()))
        else:
            top = Node()
        names = sorted(set(self._objects) | ({"root"} if self._root is not None else set()))
        for name in names:
            if name == "root" and self._root is not None:
                top.add("root", top)  # TensorFlow lists the root object as its own child 'root'
                continue
            adapter = adapter_for(self._objects[name], name)
            top.add(name, adapter.node((name,)))
            extras.update(adapter.extras((name,)))
        if self._counter_created:
            top.add(SAVE_COUNTER, Node.variable(SAVE_COUNTER, np.int64(self._counter)))
        graph, tensors = build_graph(top)
        tensors.update(extras)
        tensors[OBJECT_GRAPH_KEY] = np.array(graph.encode(), dtype=object)
        return tensors

    def write(self, file_prefix: Any, options: Any = None) -> str:
        """Writes a checkpoint at exactly `file_prefix` (no counter, no state file); returns `file_prefix`.

        Collective under mpiexec (module docstring): the checkpoint is at
        replica 0's `file_prefix`, which every replica gets back (the same
        path on every replica when each writes its rows).

        Raises:
          TypeError: an array that can't be saved (not numeric or bool); nothing is written.
          OSError: the files can't be written (nothing is left behind); under
            mpiexec `PeerFailedError` on the replicas other than 0.
        """
        prefix = os.fspath(file_prefix)
        tensors = self.tensors_to_write()
        return _save_files(prefix, tensors, re.escape(os.path.basename(prefix)), lambda: prefix, "Checkpoint.write")

    def save(self, file_prefix: Any, options: Any = None) -> str:
        """Writes checkpoint `<file_prefix>-<n>` (n: the incremented `save_counter`), names it in the
        directory's `checkpoint` state file, and returns its path.

        Collective under mpiexec (module docstring): every replica gets its
        path; a failed write raises on every replica and leaves
        `save_counter` as it was."""
        prefix = os.fspath(file_prefix)
        undo_count = self.count_save()
        try:
            tensors = self.tensors_to_write()
            path = f"{prefix}-{self._counter}"

            def record() -> str:  # on replica 0
                # TensorFlow's Checkpoint.save records only the new checkpoint in the state file.
                write_state(os.path.dirname(os.path.abspath(path)), path, [path])
                return path

            names = re.escape(os.path.basename(prefix)) + r"-\d+"
            return _save_files(path, tensors, names, record, "Checkpoint.save")
        except BaseException:
            undo_count()
            raise

    # Restoring -------------------------------------------------------------------------------

    def restore(self, save_path: Any | None, options: Any = None) -> CheckpointLoadStatus:
        """Restores every object from the checkpoint at `save_path` (None: nothing to do), all or nothing.

        Collective under mpiexec: every replica reads the checkpoint; if one
        can't, every replica raises (`PeerFailedError` on the others) and
        nothing changes anywhere.

        Raises:
          NotFoundError: no checkpoint at `save_path` (a `CheckpointError`).
          CheckpointError (a `ValueError`): a damaged or truncated file, a
            checksum that does not match, a value of another shape or dtype
            than its object. Nothing is changed then.
        """
        if save_path is None:
            return CheckpointLoadStatus([], [], sorted(self._objects))
        self._counter_created = True
        return self.read(save_path, options)

    def read(self, save_path: Any, options: Any = None) -> CheckpointLoadStatus:
        """Restores from `save_path` as `restore` does (`save_counter` included)."""
        comm = replicas.world()
        planned: tuple[Any, Plan, list[str], tuple[str, int] | None] | None = None
        error: Exception | None = None
        try:
            planned = self._plan(os.fspath(save_path))
        except Exception as caught:
            error = caught
        agree(comm, error, "Checkpoint.restore")  # raises on every replica if one failed
        assert planned is not None
        source, plan, restored, counter = planned
        plan.commit(lambda failed: agree(comm, failed, "Checkpoint.restore: set_weights"))
        if counter is not None:
            self._counter = counter[1]
        unmatched = sorted(set(source.keys()) - set(plan.bound))
        return CheckpointLoadStatus(restored, unmatched, plan.missing)

    def _plan(self, path: str) -> tuple[ObjectGraphCheckpoint, Plan, list[str], tuple[str, int] | None]:
        """Reads and checks everything to restore from `path` (local: no collective); changes nothing."""
        source = open_object_graph_checkpoint(path)
        plan = Plan()
        restored = []
        if self._root is not None:
            adapter_for(self._root, "root").plan(source, (), plan)
            if plan.bound:
                restored.append("root")
        for name, value in self._objects.items():
            before = len(plan.bound)
            adapter_for(value, name).plan(source, (name,), plan)
            if len(plan.bound) > before:
                restored.append(name)
        counter = _saved_counter(source)
        if counter is not None:
            plan.bound.append(counter[0])
        return source, plan, restored, counter

    def __repr__(self) -> str:
        root = " with a root object" if self._root is not None else ""
        return f"<Checkpoint of {sorted(self._objects)}{root}, save_counter={self._counter}>"


def _saved_counter(source: ObjectGraphCheckpoint) -> tuple[str, int] | None:
    """(key, value) of the checkpoint's save_counter, or None."""
    saved = source.lookup((SAVE_COUNTER,), SAVE_COUNTER)
    if saved is None:
        return None
    value = np.asarray(saved.read())
    if value.shape != () or value.dtype.kind not in "iu":
        raise CheckpointError(
            f"Checkpoint key {saved.key!r} must hold save_counter, an int scalar; it holds "
            f"{value.dtype} {list(value.shape)}."
        )
    return saved.key, int(value)


# CheckpointManager ---------------------------------------------------------------------------


def _evaluate(counter: Any) -> int:
    """The current value of a step counter: a callable, something with `numpy()`, or a 0-d array / int."""
    if callable(counter):
        counter = counter()
    if hasattr(counter, "numpy"):
        counter = counter.numpy()
    return int(np.asarray(counter))


class CheckpointManager:
    """`tf.train.CheckpointManager`: numbered saves `<directory>/<checkpoint_name>-<n>`, keeping the newest.

    Args:
      checkpoint: the `Checkpoint` to save.
      directory: where checkpoints go (created by the first save).
      max_to_keep: how many to keep (None: all). Older ones are deleted
        after each save, unless `keep_checkpoint_every_n_hours` preserves
        them (one per that many hours, kept for good and no longer listed).
      keep_checkpoint_every_n_hours: see `max_to_keep`.
      checkpoint_name: the name of each checkpoint before `-<n>`.
      step_counter: the step (a callable, an object with `numpy()`, or a
        0-d array); with `checkpoint_interval`, `save()` saves only when it
        moved on by `checkpoint_interval` since the last save.
      checkpoint_interval: see `step_counter`.
      init_fn: called by `restore_or_initialize` when there is no checkpoint.

    The state file records the kept checkpoints with their times, as
    TensorFlow's does. If it names a checkpoint that is not on disk (an interrupted
    save, files deleted by hand), or is
    missing while checkpoints are there, the newest complete
    `<checkpoint_name>-<n>` on disk is the latest (a warning says so).

    From its first save until it is garbage-collected, a manager is the
    directory's only writer: a save by another process's manager (or
    `Checkpoint.save`, or a training run) there raises
    `DirectoryInUseError`. Reading the directory needs no lock.

    Under mpiexec the manager is collective, as `Checkpoint` is: every
    replica creates it and calls `save` and `restore_or_initialize`; replica
    0 reads and writes the state file, deletes old checkpoints and holds the
    directory, and every replica gets the same `checkpoints` and
    `latest_checkpoint`.

    Raises:
      TypeError: `checkpoint` is not a `tf.train.Checkpoint`.
      ValueError: `max_to_keep` < 1; `checkpoint_interval` without `step_counter`.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: Any,
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: float | None = None,
        checkpoint_name: str = "ckpt",
        step_counter: Any = None,
        checkpoint_interval: int | None = None,
        init_fn: Callable[[], Any] | None = None,
    ):
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"Argument `checkpoint` must be a tf.train.Checkpoint. Received: {checkpoint!r}.")
        if max_to_keep is not None and (
            isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1
        ):
            raise ValueError(f"Expected a positive integer or `None` for `max_to_keep`, got {max_to_keep!r}.")
        if keep_checkpoint_every_n_hours is not None and not (
            isinstance(keep_checkpoint_every_n_hours, (int, float)) and keep_checkpoint_every_n_hours > 0
        ):
            raise ValueError(
                f"Argument `keep_checkpoint_every_n_hours` must be a number > 0 or None. Received: "
                f"{keep_checkpoint_every_n_hours!r}."
            )
        if not isinstance(checkpoint_name, str) or not checkpoint_name or os.sep in checkpoint_name:
            raise ValueError(
                f"Argument `checkpoint_name` must be a non-empty file name. Received: {checkpoint_name!r}."
            )
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("`step_counter` should be passed if `checkpoint_interval` is not None.")
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._keep_hours = keep_checkpoint_every_n_hours
        self._name = checkpoint_name
        self._prefix = os.path.join(self._directory, checkpoint_name)
        self._step_counter = step_counter
        self._checkpoint_interval = checkpoint_interval
        self._last_checkpoint_step: int | None = None
        self._init_fn = init_fn
        self._maybe_delete: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._latest: str | None = None
        self._last_preserved = time.time() - 1.0
        self._writer: weakref.finalize | None = None
        self._latest, self._maybe_delete, self._last_preserved = replicas.on_chief(self._recover, "CheckpointManager")

    def _bookkeeping(self) -> tuple[str | None, collections.OrderedDict[str, float], float]:
        """What every replica knows of the directory: (latest, checkpoints that may be deleted, last preserved)."""
        return self._latest, self._maybe_delete, self._last_preserved

    def _recover(self) -> tuple[str | None, collections.OrderedDict[str, float], float]:
        """Reads the state file as TensorFlow does, then repairs what an interrupted save left (class docstring);
        returns `_bookkeeping()` (replica 0 runs it)."""
        now = time.time()
        try:
            state = read_state(self._directory)
        except DataLossError as error:
            log.warning("%s: the checkpoint state is ignored.", error)
            state = None
        if state is not None:
            self._latest = state.model_checkpoint_path
            self._last_preserved = state.last_preserved_timestamp or 0.0
            if now < self._last_preserved:
                log.warning(
                    "The checkpoint state of %s was written in the future; its times are capped at now.",
                    self._directory,
                )
                self._last_preserved = now
            times = state.all_model_checkpoint_timestamps or (self._last_preserved,) * len(
                state.all_model_checkpoint_paths
            )
            for path, stamp in zip(state.all_model_checkpoint_paths, times):
                if min(stamp, now) > self._last_preserved:
                    self._maybe_delete[path] = min(stamp, now)
        gone = [p for p in self._maybe_delete if not is_bundle(p)]
        for path in gone:
            del self._maybe_delete[path]
        if self._latest is None or not is_bundle(self._latest):
            newest = self._newest_on_disk()
            if newest is not None:
                log.warning(
                    "The checkpoint state of %s names %s, which is not a complete checkpoint (an "
                    "interrupted save?); the newest complete one on disk, %s, is the latest.",
                    self._directory,
                    self._latest or "nothing",
                    newest,
                )
                if newest not in self._maybe_delete:
                    self._maybe_delete[newest] = min(now, _mtime(newest))
            self._latest = newest
        return self._bookkeeping()

    def _newest_on_disk(self) -> str | None:
        """The complete `<checkpoint_name>-<n>` of highest n in the directory, or None."""
        return newest_complete(self._directory, self._name)

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def checkpoint_interval(self) -> int | None:
        return self._checkpoint_interval

    @property
    def checkpoints(self) -> list[str]:
        """The checkpoints this manager may still delete, oldest first (TensorFlow's `checkpoints`)."""
        return list(self._maybe_delete)

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint (None before the first)."""
        return self._latest

    def _record_state(self, latest: str, kept: collections.OrderedDict[str, float]) -> None:
        write_state(
            self._directory,
            latest,
            list(kept),
            all_model_checkpoint_timestamps=list(kept.values()),
            last_preserved_timestamp=self._last_preserved,
        )

    def save(
        self, checkpoint_number: int | None = None, check_interval: bool = True, options: Any = None
    ) -> str | None:
        """Saves `<directory>/<checkpoint_name>-<n>` and returns its path (None when the interval says wait).

        In order: the new checkpoint is written; the state file names it
        (the old ones still listed); the checkpoints beyond `max_to_keep`
        are deleted; the state file is written again without them. A kill
        at any point leaves the state file naming a complete checkpoint.
        `n` is `checkpoint_number`, or the incremented `save_counter`.
        Collective under mpiexec (class docstring).
        """
        if self._checkpoint_interval is not None:
            step = _evaluate(self._step_counter)
            if (
                check_interval
                and self._last_checkpoint_step is not None
                and (step < self._last_checkpoint_step + self._checkpoint_interval)
            ):
                return None
        if self._writer is None:  # the directory's writer from now on: replica 0 (released when this is collected)
            where = f"CheckpointManager({self._directory!r}).save"
            key = replicas.on_chief(lambda: acquire_writer(self._directory, where), "CheckpointManager.save: lock")
            self._writer = weakref.finalize(self, release_writer, key if replicas.is_chief() else None)
        checkpoint = self._checkpoint
        undo_count = checkpoint.count_save()
        number = checkpoint.save_counter if checkpoint_number is None else int(checkpoint_number)
        path = f"{self._prefix}-{number}"

        def record_and_sweep() -> tuple[str | None, collections.OrderedDict[str, float], float]:  # on replica 0
            kept = collections.OrderedDict(self._maybe_delete)
            kept.pop(path, None)
            kept[path] = time.time()
            self._record_state(path, kept)
            self._maybe_delete, self._latest = kept, path
            self._sweep()
            self._record_state(path, self._maybe_delete)
            return self._bookkeeping()

        try:
            tensors = checkpoint.tensors_to_write()
            self._latest, self._maybe_delete, self._last_preserved = _save_files(
                path, tensors, re.escape(self._name) + r"-\d+", record_and_sweep, "CheckpointManager.save"
            )
        except BaseException:
            if self._latest != path:
                undo_count()
            raise
        if self._checkpoint_interval is not None:
            self._last_checkpoint_step = _evaluate(self._step_counter)
        return path

    def _sweep(self) -> None:
        """Deletes the oldest checkpoints beyond `max_to_keep`, preserving one per `keep_checkpoint_every_n_hours`."""
        if not self._max_to_keep:
            return
        while len(self._maybe_delete) > self._max_to_keep:
            path, stamp = self._maybe_delete.popitem(last=False)
            if self._keep_hours and stamp - self._keep_hours * 3600.0 >= self._last_preserved:
                self._last_preserved = stamp
                continue
            delete_bundle(path)

    def sync(self) -> None:
        """Nothing to wait for: saves are synchronous."""

    def restore_or_initialize(self) -> str | None:
        """Restores the latest checkpoint and returns its path, or calls `init_fn` and returns None (on every
        replica under mpiexec: collective)."""
        if self._latest is not None:
            self._checkpoint.restore(self._latest)
            if self._checkpoint_interval is not None:
                self._last_checkpoint_step = _evaluate(self._step_counter)
            return self._latest
        if self._init_fn is not None:
            self._init_fn()
        return None


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(f"{path}.index")
    except OSError:
        return time.time()
