"""A mid-level embedding as a TensorFlow trackable: the real `tf.train.Checkpoint` saves and restores its tables.

The keys are those TensorFlow 2.15 writes for its own `TPUEmbedding`
(docs/checkpoints.md): one child per table and one per optimizer slot, saved
as a variable is saved, plus the engine's step as an attribute of the
embedding itself, which TensorFlow's own classes ignore::

    embedding/items/.ATTRIBUTES/VARIABLE_VALUE                  [vocabulary_size, dim]
    embedding/items.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE    (one per slot; '/' is written '.S')
    embedding/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step        the engine's step

So `tf.train.Checkpoint(model=keras_model, embedding=embedding)` keeps both
in one TensorFlow checkpoint, TensorFlow's own `TPUEmbedding` (on a CPU)
restores the tables from it, and a checkpoint TensorFlow wrote restores
here. Restored values are checked (shape) as they arrive and loaded into
the engine together, before the embedding is next used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import tensorflow as tf

STEP_ATTRIBUTE = "TPU_EMBEDDING_SHIM_global_step"
VALUE = "VARIABLE_VALUE"

Trackable: TypeAlias = tf.__internal__.tracking.Trackable


def _eager_value(tensor: Any, what: str) -> np.ndarray:
    if not hasattr(tensor, "numpy"):
        raise NotImplementedError(
            f"Restoring {what} needs eager execution: restore the checkpoint outside "
            "tf.function and tf.compat.v1 graph mode."
        )
    return tensor.numpy()


class TableVariable(Trackable):
    """One table (`slot='embedding'`) or optimizer slot of an embedding, saved as TensorFlow saves a variable.

    `read()` gives its value to save; `receive(value)` takes a restored one.
    """

    def __init__(self, table: str, slot: str, read: Callable[[], np.ndarray], receive: Callable[[np.ndarray], None]):
        self._table, self._slot, self._read, self._receive = table, slot, read, receive

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        return {VALUE: tf.constant(self._read())}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> Any:
        what = f"table {self._table!r}" + ("" if self._slot == "embedding" else f", slot {self._slot!r}")
        self._receive(_eager_value(restored_tensors[VALUE], what))
        return tf.no_op()


class CheckpointedEmbedding(Trackable):
    """What the bridge's mid-level classes share for checkpoints; `self._embedding` is the project's object."""

    _embedding: Any

    def _init_checkpointing(self) -> None:
        self._children: dict[str, TableVariable] | None = None
        self._received: dict[tuple[str, str], np.ndarray] = {}
        self._received_step: int | None = None

    def _trackable_children(self, save_type: str = "checkpoint", **kwargs: Any) -> dict[str, Trackable]:
        if save_type != "checkpoint":
            return {}
        if self._children is None:  # stable objects: TensorFlow keys its graph of objects by identity
            children = {}
            for name, info in self._embedding.engine.spec.structure().items():
                children[name] = self._table_variable(name, "embedding")
                for slot in info["slots"]:
                    children[f"{name}/{slot}"] = self._table_variable(name, slot)
            self._children = children
        return dict(self._children)

    def _table_variable(self, table: str, slot: str) -> TableVariable:
        return TableVariable(
            table,
            slot,
            functools.partial(self._checkpoint_value, table, slot),
            functools.partial(self._checkpoint_receive, table, slot),
        )

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        self._apply_restored()
        return {STEP_ATTRIBUTE: tf.constant(self._embedding.engine.global_step, tf.int64)}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> Any:
        step = _eager_value(restored_tensors[STEP_ATTRIBUTE], "the engine's step")
        self._received_step = int(step)
        return tf.no_op()

    def _checkpoint_value(self, table: str, slot: str) -> np.ndarray:
        self._apply_restored()
        engine = self._embedding.engine
        return engine.table(table) if slot == "embedding" else engine.slots(table)[slot]

    def _checkpoint_receive(self, table: str, slot: str, value: np.ndarray) -> None:
        """Checks one restored value and keeps it until the next use (`_apply_restored`)."""
        info = self._embedding.engine.spec.structure()[table]
        shape = (info["vocabulary_size"], info["dim"])
        if tuple(value.shape) != shape:
            what = f"table {table!r}" + ("" if slot == "embedding" else f", slot {slot!r}")
            raise ValueError(
                f"The checkpoint's value for {what} has shape {list(value.shape)}; this embedding's "
                f"is {list(shape)}. Restore into an embedding with the same TableConfigs."
            )
        self._received[(table, slot)] = np.asarray(value, np.float32)

    def _apply_restored(self) -> None:
        """Loads what a restore delivered into the engine, all at once (tables, slots, step)."""
        if not self._received and self._received_step is None:
            return
        engine = self._embedding.engine
        state = engine.state()
        for (table, slot), value in self._received.items():
            state[table][slot] = value
        step = engine.global_step if self._received_step is None else self._received_step
        self._received, self._received_step = {}, None
        self._embedding.restore_state(state, step)
