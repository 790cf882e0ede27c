"""What `tf.train.Checkpoint` saves of each object, as TensorFlow's trackable objects, and how it restores them.

Every object becomes a node of TensorFlow's object graph, so its values
get the keys TensorFlow gives the same objects (here for an object passed
as `x=`):

- `TPUEmbedding`, `TPUEmbeddingV2`, `TPUEmbeddingForServing`:
  `x/<table>/.ATTRIBUTES/VARIABLE_VALUE`, one
  `x/<table>.S<slot>/.ATTRIBUTES/VARIABLE_VALUE` per optimizer slot ('/' in
  a local name is written '.S', '.' is written '..'), and
  `x/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step`;
- a numpy array: `x/.ATTRIBUTES/VARIABLE_VALUE` (as a `tf.Variable`);
- a dict with str keys: `x/<key>/...`, each value by these rules (as a
  dict of variables);
- a list or tuple: `x/<index>/...` (as a list of variables);
- an object with `get_weights()` / `set_weights()`:
  `x/<index>/.ATTRIBUTES/VARIABLE_VALUE`, one per weight.

Inside a dict, list or tuple a value may also be a number or another of
these objects. The embedding objects' nodes are TensorFlow 2.15's, node for
node (the table variables, the `_variables` dict, the empty
`_feature_config` / `_output_shapes` / `_table_config` structures and, for
`TPUEmbedding`, the registered saver `tf.TPUEmbeddingCallback`), so the
object graph is byte for byte the one TensorFlow writes for the same
configuration. The engine's global step has no TensorFlow variable: it is
kept outside the object graph, where TensorFlow does not look.

Restoring is planned before anything changes (`plan`): every value is
found, checked (shape, dtype) and read (checksums verified), then
`Plan.commit` assigns them all. An object that finds no value in the
checkpoint keeps its own, as in TensorFlow; the restore status reports it.

Under `mpiexec`, an embedding replicated over the processes (a `TPUStrategy`
scope; midlevel_base.py) saves only this replica's rows: each table and
slot is a `SlicedTensor` of its full shape holding the replica's row slice
(TensorFlow saves a table under TPUStrategy as row slices of one key), and
train.py has each replica write its slices (no replica gathers another's
rows; the object graph needs keys, not values). Planning reads the checkpoint and nothing else (no
collective: the tables' layout comes from the object's spec), so a replica
that can't read it fails before any replica changes anything; the
assignment is collective (each replica keeps its rows of the full arrays).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np

from ..engine import CheckpointError, DistributedEngine, sparsecore_layout
from ..engine.tf_bundle import Node, WireError, checkpoint_key, code_of, name_of
from .lowering import slot_names
from .midlevel_base import MidLevelBase
from .object_graph_checkpoint import shim_key

__all__ = ["adapter_for", "Plan", "TF_VARIABLE_NAME", "EMBEDDING_SAVER"]

log = logging.getLogger("tpu_embedding_shim")

Path = tuple[str, ...]

TF_VARIABLE_NAME = "Variable"
"""The full name of a saved array, as TensorFlow names a `tf.Variable` created without a name."""

SPARSECORE_LAYOUTS = "_sparse_core_table_layouts"
"""Where a SparseCore `TPUEmbeddingV2` checkpoint keeps its tables' layouts (TensorFlow's
`SPARSECORE_LAYOUTS_CHECKPOINT_KEY`): its tables are then stacked (`engine/sparsecore_layout.py`)."""

EMBEDDING_SAVER = "tf.TPUEmbeddingCallback"
"""The registered saver TensorFlow 2.15 records on a `TPUEmbedding` node."""

_NUMBER = (bool, int, float, complex, np.generic)


@dataclasses.dataclass
class Plan:
    """A restore, checked and read, not yet applied.

    `bound`: the checkpoint keys used; `missing`: the keys this program's
    objects would have, absent from the checkpoint; `assign`: assignments
    that can't fail (arrays, tables); `calls`: user calls that might
    (`set_weights`), each with its undo.
    """

    bound: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)
    assign: list[Callable[[], None]] = dataclasses.field(default_factory=list)
    calls: list[tuple[Callable[[], None], Callable[[], None]]] = dataclasses.field(default_factory=list)

    def commit(self, agreed: Callable[[BaseException | None], None] | None = None) -> None:
        """Applies everything: the user calls first, then the assignments.

        `agreed(error)` gets the calls' outcome (None: all succeeded) and
        raises when this process or, under mpiexec, any replica failed them
        (`replicas`); None raises this process's error. Then the calls made
        are undone in reverse, and nothing is assigned.
        """
        done, error = [], None
        try:
            for call, undo in self.calls:
                call()
                done.append(undo)
        except BaseException as caught:
            error = caught
        try:
            if agreed is not None:
                agreed(error)
            elif error is not None:
                raise error
        except BaseException:
            for undo in reversed(done):
                undo()
            raise
        for assign in self.assign:
            assign()


def _where(path: Path) -> str:
    return "/".join(path) or "(root)"


def _numeric(value: Any, where: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biufc":
        raise TypeError(f"Checkpoint: `{where}` has dtype {array.dtype}; only numeric and bool arrays are saved.")
    return array


def _check(saved: Any, shape: tuple[int, ...], dtype: np.dtype, where: str) -> None:
    """Raises CheckpointError when the saved tensor does not fit the object (TensorFlow raises too)."""
    if tuple(saved.shape) != tuple(shape):
        raise CheckpointError(
            f"Received incompatible tensor with shape {tuple(saved.shape)} when attempting to restore `{where}` "
            f"with shape {tuple(shape)}: checkpoint key {saved.key!r}."
        )
    expected = name_of(code_of(dtype))
    if saved.dtype != expected:
        raise CheckpointError(
            f"Can't restore `{where}` ({expected}) from checkpoint key {saved.key!r}: the checkpoint "
            f"holds {saved.dtype} (TensorFlow: expected dtype does not equal original dtype)."
        )


class _Value:
    """An array (or, inside a dict or list, a number): one variable."""

    def __init__(self, get: Callable[[], Any], put: Callable[[np.ndarray], None] | None):
        self._get, self._put = get, put

    def node(self, path: Path) -> Node:
        return Node.variable(TF_VARIABLE_NAME, _numeric(self._get(), _where(path)))

    def extras(self, path: Path) -> dict[str, Any]:
        return {}

    def plan(self, source: Any, path: Path, plan: Plan) -> None:
        saved = source.lookup(path)
        if saved is None:
            plan.missing.append(checkpoint_key(path))
            return
        current = self._get()
        array = _numeric(current, _where(path))
        _check(saved, array.shape, array.dtype, _where(path))
        value = np.array(saved.read(), dtype=array.dtype)  # an own copy: a memory map is not kept
        if isinstance(current, np.ndarray) and current.flags.writeable:

            def assign(current=current, value=value):
                current[...] = value
        elif self._put is not None:

            def assign(value=value):
                self._put(value)
        else:
            raise CheckpointError(
                f"Can't restore `{_where(path)}`: it is a read-only array or a number inside a "
                "tuple, which can't be changed in place. Pass a writable array, or a dict or list."
            )
        plan.bound.append(saved.key)
        plan.assign.append(assign)


class _Container:
    """A dict (str keys), list or tuple: one child per key or index."""

    def __init__(self, value: Any, where: str):
        self._value = value
        self._where = where
        self.children()  # checks every item now

    def children(self) -> list[tuple[str, Any]]:
        value = self._value
        if isinstance(value, Mapping):
            items = list(value.items())
            bad = [k for k, _ in items if not isinstance(k, str)]
            if bad:
                raise TypeError(
                    f"Checkpoint can't save `{self._where}`: dict keys must be str (they become names in "
                    f"the checkpoint). Received: {bad[0]!r}."
                )
            put = (lambda key: lambda v: value.__setitem__(key, v)) if isinstance(value, MutableMapping) else None
        else:
            items = [(str(i), item) for i, item in enumerate(value)]
            put = (lambda key: lambda v: value.__setitem__(int(key), v)) if isinstance(value, list) else None
        out = []
        for key, item in items:
            where = f"{self._where}/{key}"
            if isinstance(item, _NUMBER):
                out.append((key, _Value(lambda key=key: self._item(key), put(key) if put else None)))
            else:
                out.append((key, adapter_for(item, where)))
        return out

    def _item(self, key: str) -> Any:
        return self._value[key] if isinstance(self._value, Mapping) else self._value[int(key)]

    def node(self, path: Path) -> Node:
        node = Node()
        for key, child in self.children():
            node.add(key, child.node(path + (key,)))
        return node

    def extras(self, path: Path) -> dict[str, Any]:
        return {k: v for key, child in self.children() for k, v in child.extras(path + (key,)).items()}

    def plan(self, source: Any, path: Path, plan: Plan) -> None:
        for key, child in self.children():
            child.plan(source, path + (key,), plan)


class _Weights:
    """An object with `get_weights()` / `set_weights(list)` (a Keras-like model): a list of its weights."""

    def __init__(self, value: Any):
        self._value = value

    def node(self, path: Path) -> Node:
        node = Node()
        for i, weight in enumerate(self._value.get_weights()):
            node.add(str(i), Node.variable(TF_VARIABLE_NAME, _numeric(weight, _where(path + (str(i),)))))
        return node

    def extras(self, path: Path) -> dict[str, Any]:
        return {}

    def plan(self, source: Any, path: Path, plan: Plan) -> None:
        current = [np.asarray(w) for w in self._value.get_weights()]
        new = list(current)
        found = False
        for i, weight in enumerate(current):
            saved = source.lookup(path + (str(i),))
            if saved is None:
                plan.missing.append(checkpoint_key(path + (str(i),)))
                continue
            _check(saved, weight.shape, weight.dtype, _where(path + (str(i),)))
            new[i] = np.array(saved.read(), dtype=weight.dtype)
            plan.bound.append(saved.key)
            found = True
        if found:
            plan.calls.append((lambda: self._value.set_weights(new), lambda: self._value.set_weights(current)))


def _structure_node(value: Any) -> Node | None:
    """The node TensorFlow makes of a plain Python structure it wraps (dict, list, a tuple holding one), or None."""
    if type(value) in (dict, collections.OrderedDict):
        items = [(k, v) for k, v in value.items() if isinstance(k, str)]
    elif type(value) is list or (isinstance(value, tuple) and _wrapped_tuple(value)):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return None
    node = Node()
    for key, item in items:
        child = _structure_node(item)
        if child is not None:
            node.add(key, child)
    return node


def _wrapped_tuple(value: tuple) -> bool:
    return any(
        type(e) in (dict, collections.OrderedDict, list) or (isinstance(e, tuple) and _wrapped_tuple(e)) for e in value
    )


class _Embedding:
    """A mid-level embedding object: its tables and slots as TensorFlow 2.15's variables, and the engine's step."""

    def __init__(self, value: MidLevelBase):
        self._value = value

    def _slots(self, table: Any, structure: Mapping[str, Any]) -> list[str]:
        """The table's slot names in TensorFlow's order (the order its optimizer creates them)."""
        names = slot_names(table.optimizer) if table.optimizer is not None else []
        have = list(structure[table.name]["slots"])
        return [n for n in names if n in have] + sorted(set(have) - set(names))

    def _saved(self) -> dict[str, dict[str, Any]]:
        """Table -> {'embedding' | slot: what to save}: the full arrays, or, when replicated, this replica's
        rows as `SlicedTensor`s of the full shape (`DistributedEngine.row_slices`; local, no collective)."""
        engine = self._value.engine
        return engine.row_slices() if isinstance(engine, DistributedEngine) else engine.state()

    def node(self, path: Path) -> Node:
        embedding = self._value
        engine = embedding.engine
        state: Any = self._saved()  # by table name (a TableConfig's `name` is typed Optional)
        structure = engine.spec.structure()
        saver = EMBEDDING_SAVER if embedding.tensorflow_class_name == "TPUEmbedding" else None
        root = Node(registered_saver=saver)
        config = _structure_node(embedding.feature_config)
        if config is not None:
            root.add("_feature_config", config)
        root.add("_output_shapes", Node())
        root.add("_table_config", Node())
        variables = []
        for table in embedding.table_configs:
            parameters = root.add(table.name, Node.variable(table.name, state[table.name]["embedding"]))
            slots = []
            for slot in self._slots(table, structure):
                name = f"{table.name}/{slot}"
                slots.append((slot, root.add(name, Node.variable(name, state[table.name][slot]))))
            variables.append((table.name, slots + [("parameters", parameters)]))
        holder = root.add("_variables", Node())
        for name, children in variables:
            table_node = holder.add(name, Node())
            for slot, child in children:
                table_node.add(slot, child)
        return root

    def extras(self, path: Path) -> dict[str, Any]:
        return {shim_key(path, "global_step"): np.int64(self._value.engine.global_step)}

    def plan(self, source: Any, path: Path, plan: Plan) -> None:
        embedding = self._value
        structure: Any = embedding.engine_spec.structure()  # the layout, without building the engine (collective)
        updates: dict[str, dict[str, np.ndarray]] = {}
        missing: list[str] = []
        layouts = source.lookup(path + (SPARSECORE_LAYOUTS,))
        for table in embedding.table_configs if layouts is None else ():
            info = structure[table.name]
            shape = (info["vocabulary_size"], info["dim"])
            for slot in ["embedding"] + self._slots(table, structure):
                local = table.name if slot == "embedding" else f"{table.name}/{slot}"
                where = _where(path + (local,))
                saved = source.lookup(path + (local,), local)
                if saved is None:  # reached through the `_variables` dict only
                    saved = source.lookup(
                        path + ("_variables", table.name, "parameters" if slot == "embedding" else slot)
                    )
                if saved is None:
                    missing.append(checkpoint_key(path + (local,)))
                    continue
                _check(saved, shape, np.dtype(np.float32), where)
                rows = embedding.replica_rows(str(table.name))  # replicated: this replica's rows only
                updates.setdefault(table.name, {})[slot] = saved.read() if rows is None else saved.read_rows(rows)
                plan.bound.append(saved.key)
        if layouts is not None:
            self._plan_stacked(source, path, layouts, structure, updates, missing, plan)
        step = None
        saved_step = source.extra(path, "global_step")
        if saved_step is not None:
            value = np.asarray(saved_step.read())
            if value.shape != () or value.dtype.kind not in "iu" or int(value) < 0:
                raise CheckpointError(
                    f"Checkpoint key {saved_step.key!r} must hold the engine's global step, an "
                    f"int >= 0; it holds {value.dtype} {value.tolist()!r}."
                )
            step = int(value)
        plan.missing.extend(missing)
        if missing:
            log.warning(
                "Restoring %s: the checkpoint has no value for %s; they keep their current values "
                "(as in TensorFlow; the restore status reports them).",
                _where(path),
                missing,
            )
        if not updates and step is None:
            return

        rows_only = any(embedding.replica_rows(name) is not None for name in structure)  # replicated

        def assign() -> None:
            state: dict[str, dict[str, np.ndarray]] = {}
            if missing:  # they keep their current values
                engine = embedding.engine
                replicated = rows_only and isinstance(engine, DistributedEngine)
                current = engine.local_state() if replicated else engine.state()
                state = {name: dict(arrays) for name, arrays in current.items()}
            for name, arrays in updates.items():
                state.setdefault(name, {}).update(arrays)
            embedding.restore_state(state, step, local=rows_only)

        plan.assign.append(assign)

    def _plan_stacked(
        self,
        source: Any,
        path: Path,
        layouts_saved: Any,
        structure: Mapping[str, Any],
        updates: dict[str, dict[str, np.ndarray]],
        missing: list[str],
        plan: Plan,
    ) -> None:
        """A SparseCore checkpoint (TensorFlow 2.16+ `TPUEmbeddingV2` on a TPU): each table and slot cut out of
        its stacked table as the saved layouts say (`engine.sparsecore_layout`), checked against this object's
        tables first."""
        value = np.asarray(layouts_saved.read())
        raw = value.item() if value.shape == () else None
        try:
            if not isinstance(raw, (bytes, str)):
                raise TypeError(f"it holds {value.dtype} {list(value.shape)}, not a string")
            layouts = sparsecore_layout.decode_layouts(raw.encode() if isinstance(raw, str) else raw)
        except (WireError, TypeError) as e:
            raise CheckpointError(
                f"Checkpoint key {layouts_saved.key!r} must hold a serialized SparseCoreTableLayouts: {e}."
            ) from None
        by_table = {layout.table_name: layout for layout in layouts}
        stacked: dict[str, np.ndarray] = {}  # key -> the stacked table, read once
        embedding = self._value
        for table in embedding.table_configs:
            name = str(table.name)
            info = structure[name]
            layout = by_table.get(name)
            if layout is None:
                missing.append(checkpoint_key(path + (str(table.name),)))  # not in the checkpoint's layouts
                continue
            if tuple(layout.unsharded_shape) != (info["vocabulary_size"], info["dim"]):
                raise CheckpointError(
                    f"{_where(path)}: the checkpoint's SparseCore layout has table {table.name!r} "
                    f"{list(layout.unsharded_shape)}; this object's is [{info['vocabulary_size']}, {info['dim']}]."
                )
            for slot in ["embedding"] + self._slots(table, structure):
                local = layout.stacked_table_name if slot == "embedding" else f"{layout.stacked_table_name}/{slot}"
                saved = source.lookup(path + (local,), local)
                if saved is None:
                    missing.append(checkpoint_key(path + (local,)))
                    continue
                if saved.key not in stacked:
                    stacked[saved.key] = np.asarray(saved.read(), np.float32)
                    plan.bound.append(saved.key)
                try:
                    full = sparsecore_layout.unstack(stacked[saved.key], layout)
                except ValueError as e:
                    raise CheckpointError(f"Checkpoint key {saved.key!r}: {e}") from None
                rows = embedding.replica_rows(name)
                updates.setdefault(name, {})[slot] = full if rows is None else full[rows]
        plan.bound.append(layouts_saved.key)


def adapter_for(value: Any, where: str) -> Any:
    """How `value` is saved and restored (the module's table).

    Raises:
      TypeError: an object of another kind, a dict with a non-str key.
    """
    if isinstance(value, MidLevelBase):
        return _Embedding(value)
    if isinstance(value, np.ndarray):
        return _Value(lambda: value, None)
    if isinstance(value, (Mapping, list, tuple)):
        return _Container(value, where)
    if callable(getattr(value, "get_weights", None)) and callable(getattr(value, "set_weights", None)):
        return _Weights(value)
    raise TypeError(
        f"Checkpoint can't save `{where}` ({type(value).__name__}): pass a TPUEmbedding, TPUEmbeddingV2, "
        "TPUEmbeddingForServing, a numpy array, a dict / list / tuple of those (or of numbers), or an object with "
        "get_weights() / set_weights()."
    )
